//! The runtime in the lab: setpoint's controller host and node agents, the runtime's own I/O-free
//! state machines, run on a simulated etcd, network and processes, on virtual time, under fault
//! schedules; checked after every run, and shrunk to a minimal failing schedule.
//!
//! See `docs/chaos.md` for the world's rules, the fault model format and the checks.
//!
//! # Layout
//! - [`store`]: [`SimStore`], etcd's semantics (revisions, compare-and-set, leases with the
//!   lessor's 500 ms expiry checks, watch history, compaction, lease reset on leader change), and
//!   [`SharedSimStore`], the same behind the runtime's `Store` trait.
//! - [`net`]: the links between hosts and the store (delay, jitter, loss, one-way and two-way
//!   partitions).
//! - [`machine`]: the interface the world steps ([`Machine`], [`Input`], [`Output`]).
//! - [`world`]: the event queue on virtual time, hosts with skewed and drifting clocks and
//!   pauses, processes, hung store members and quorum loss, the fault schedule; [`run`].
//! - [`faults`]: fault model files ([`Model`]) and the schedule drawn from a model and a seed.
//! - [`impostors`]: processes carrying a copy's mark that are not the copy (a reused pid, an
//!   outliving child), planted at an agent's restart, and the check that none is kept.
//! - [`shutdowns`]: the `shutdown` fault (an operator stops an agent or a controller
//!   gracefully, then starts it again), what the world saw of each, and the checks that a
//!   clean stop leaves nothing running and ends in time.
//! - [`node`]: each simulated node's state file and process table, and what a restarted agent
//!   recovers from them.
//! - [`adapt`]: the runtime's `Host` and `AgentCore` behind [`Machine`], with the injected bugs.
//! - [`check`]: the invariants checked after each run (among them `needed-delete`, from the
//!   world's record of every assignment a controller removed).
//! - [`predict`]: the lab's overshoot prediction for a fault-free run, and the run's own.
//! - [`agree`]: one lab scenario run by the lab's general engine and by the runtime in the
//!   world, fault-free: the layout that makes them equal exactly.
//! - [`runner`]: one seed end to end: the setup from a model, the run, the checks.
//! - [`shrink`]: the failing schedule cut down to a minimal one.

pub mod adapt;
pub mod agree;
pub mod check;
pub mod faults;
pub mod impostors;
pub mod machine;
pub mod net;
pub mod node;
pub mod predict;
pub mod runner;
pub mod shrink;
pub mod shutdowns;
pub mod store;
pub mod world;

#[cfg(test)]
mod bug_hunt;
#[cfg(test)]
mod caches;
#[cfg(test)]
mod cut_off;
#[cfg(test)]
mod regressions;
#[cfg(test)]
mod restarts;
#[cfg(test)]
mod store_faults;
#[cfg(test)]
mod toy;

pub use faults::{Fault, FaultKind, Model, ModelError};
pub use machine::{Input, Machine, Output, Role};
pub use store::{SharedSimStore, SimStore};
pub use world::{run, Outcome, RunError, Setup};
