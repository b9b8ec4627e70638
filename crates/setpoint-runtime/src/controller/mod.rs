//! The controller: one I/O-free state machine, [`Host`], composed of parts, and its tokio
//! driver, [`run_controller`].
//!
//! In the manner of quinn-proto's `Connection` and raft-rs's `RawNode`, the machine is one entry
//! point, [`Host::step`], over parts that keep their own state and rules, each in its own file
//! with its own tests. `step` routes each input (a tick, a store reply, a watch delivery,
//! shutdown) to the part it concerns and gathers what the parts ask for into its outputs.
//!
//! # Layout
//! - `host/`: [`Host`] itself. `host/mod.rs` holds its inputs and outputs, the role (follower,
//!   leader, releasing, stopped) and its term, request ids and deadlines, and the routing of
//!   replies and watch events; the host's side of each part is a file of its own, each an
//!   `impl Host` block of the requests that part calls for and the replies routed back to it:
//!   `leadership.rs` (election, standby, renewal), `poll.rs` (the leader's poll), `passes.rs`
//!   (declarations and passes), `housekeeping.rs` (garbage collection and compaction) and
//!   `cache.rs` (the watch cache's read and watch). `host/tests.rs` drives the whole machine on
//!   a [`MemoryStore`](crate::store::MemoryStore) in virtual time.
//! - `election.rs`: election and renewal of the `/leader` lease: the follower's attempts and
//!   standby (with a watch of `/leader` on a store that pushes changes), the leader's
//!   keep-alives and when its lease counts as lapsed.
//! - `schedule.rs`: the per-workload pass scheduler: the declarations poll, one loop per
//!   declared workload on the grid of its period, at most one pass in flight each, attempts
//!   after conflicts ([`MAX_ATTEMPTS`]), the loop's log lines ([`pass_log_lines`]), the
//!   controller a loop runs ([`runtime_controller`]).
//! - `gc.rs`: when garbage collection runs ([`GC_EVERY_MS`]) and what its outcome means.
//! - `compaction.rs`: when the event log is compacted, in fenced batches.
//! - `history.rs`: when the store's own history (etcd's MVCC versions) is compacted: not a
//!   part of the machine (it decides nothing of the host's and the chaos world keeps no
//!   history), its schedule is stepped by the driver.
//! - `serving.rs`: the leader's watch cache and its serving rule: what the cache may answer
//!   in the store's place.
//! - `verdict.rs`: how a part's piece of work ended, for the host to act on.
//! - [`reconcile`]: one pass: plan, compare-and-set, retry ([`run_pass`](reconcile::run_pass));
//!   garbage collection's plan ([`plan_gc`](reconcile::plan_gc)).
//! - `config.rs`: [`ControllerConfig`] and [`HostConfig`].
//! - `driver.rs`: [`run_controller`], which steps the machine, carries out its store requests
//!   on blocking threads, follows its watches and sleeps until it asks to be woken.
//!
//! Imports run one way: `config` and `reconcile` ← the parts ← `host` ← `driver`.

mod compaction;
mod config;
mod driver;
mod election;
mod gc;
mod history;
mod host;
mod observe;
pub mod reconcile;
mod rounds;
mod schedule;
mod serving;
mod verdict;

pub use config::{
    default_holder, ControllerConfig, HostConfig, DEFAULT_HISTORY_COMPACTION,
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_ROUND_RESYNC,
};
pub use driver::run_controller;
pub use gc::GC_EVERY_MS;
pub use history::HistorySchedule;
pub use host::{Host, HostInput, HostOutput, Purpose};
pub use observe::PassObservation;
pub use schedule::{pass_log_lines, runtime_controller, MAX_ATTEMPTS};
