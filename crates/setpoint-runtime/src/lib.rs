//! setpoint-runtime: setpoint-core's controllers, unchanged, keep real processes running from
//! real, delayed node reports, on a durable store.
//!
//! It follows the principles of a reconciliation loop that converges without overshoot:
//! - **passes set targets**: each pass calls a [`setpoint_core::Controller`] synchronously on a
//!   fresh [`Snapshot`] and writes the target-phrased action it returns;
//! - **in-flight work counts as existing**: the [`WorkloadView`] shows assignments not yet on
//!   the ledger, so the `intent` controller counts them;
//! - **deterministic identities and ownership links**: copy `n` of workload `w` is `w-n`,
//!   numbered by a counter that only grows; each assignment carries its owner's uid;
//! - **at most one pass per workload in flight**: one loop task per workload, one leader;
//! - **conflict detection on write**: every write is a compare-and-set on revisions
//!   ([`Store::commit`]); a pass that loses reruns on fresh state;
//! - **crashes recovered by re-deriving**: the controller keeps nothing it cannot rebuild from the
//!   store, and an agent adopts or reaps the processes it left behind;
//! - **side effects keyed**: starting a copy is keyed by its identity, so a repeat is harmless.
//!
//! # Layout
//! - [`store`]: the [`Store`] trait (revisions, compare-and-set transactions, leases, poll-watch),
//!   [`MemoryStore`] and [`SqliteStore`].
//! - [`cache`]: the informer: a local copy of the store's prefixes from one read and a watch
//!   ([`cache::Cache`], [`cache::CachedStore`]).
//! - [`model`]: the shared model, in files of their own: the keys ([`model::keys`]) and records
//!   ([`model::records`]) the store holds, a typed [`Snapshot`] ([`model::snapshot`]), the
//!   ledger a pass reads ([`WorkloadView`], [`model::view`]), node identity and liveness
//!   ([`model::node`]: the node record, the data-directory lock), crash-loop backoff
//!   ([`model::backoff`]), rolling updates ([`model::rollout`]), and each workload loop's record
//!   and its rules ([`model::loop_record`], [`model::loops`]); all I/O-free but `node`'s lock.
//! - [`spec`]: the workloads file of `setpoint apply`.
//! - [`rules`]: the rules of names, commands and environments, checked by `apply` and again by
//!   the agent on everything it reads.
//! - [`sandbox`]: what a copy is given (a clean environment, only stdin/stdout/stderr) and how
//!   the agent proves a process is its own (a per-copy nonce, uid and start time).
//! - [`controller`]: the controller host as an I/O-free state machine ([`controller::Host`]),
//!   composed of parts in files of their own: leader election and renewal, the per-workload
//!   pass scheduler, garbage collection, compaction, the watch cache's serving rule; its tokio
//!   driver ([`run_controller`]); and [`controller::reconcile`], one pass: plan,
//!   compare-and-set, retry ([`run_pass`]), and garbage collection's plan.
//! - [`agent`]: the node agent as an I/O-free state machine ([`agent::AgentCore`]) composed of
//!   parts in files of their own (the node claim, renewals and self-fencing, sync, starts and
//!   stops, reports, recovery), and its tokio driver ([`run_agent`]).
//! - [`batches`]: a pass's writes as transactions that fit a default etcd, committed in turn.
//! - [`process`]: process groups, signals, `/proc` checks.
//! - [`ops`]: `apply`, `get`, `delete`, `kill`, `status`.
//! - [`copies`]: the copy view of `get copies` (node, pid, state, age, restarts, last exit).
//! - [`remote`]: what works across machines: the agents' live records, kill requests.
//! - [`events`]: the event log in the store (append-only, each entry created only if absent).
//! - [`measure`]: the lesson's metrics of a real run, computed from the event log.
//! - [`failpoint`]: named crash points for tests (compiled out of release builds).
//! - [`duration`]: durations with units (`150ms`, `15s`, `2m`).
//! - [`retention`]: bounded history: event-log compaction, copy-log rotation and removal.
//! - [`logs`]: reading a copy's output (`setpoint logs`).
//! - [`log_requests`]: a copy's output read through the store from any host: the request and
//!   answer records, their bounds, the asking side.
//! - [`report_delay`]: a schedule of jittered report delays an agent gives its reports in turn.
//! - [`rt`]: shutdown signal, blocking store calls, log lines.
//! - [`logging`]: the log lines through `tracing`: levels, filters, text or JSON.
//! - [`metrics`]: the Prometheus metrics of the controller and the agents, and their
//!   `/metrics` endpoint.
//! - [`machine`]: what the I/O-free state machines (controller host, agent) share: store
//!   requests and replies, wake-ups.

pub mod agent;
pub mod batches;
pub mod cache;
pub mod conditions;
pub mod controller;
pub mod copies;
pub mod copy_output;
pub mod duration;
pub mod events;
pub mod failpoint;
pub mod log_requests;
pub mod logging;
pub mod logs;
pub mod machine;
pub mod measure;
pub mod metrics;
pub mod model;
pub mod ops;
#[cfg(test)]
mod parser_props;
pub mod process;
pub mod remote;
pub mod report_delay;
pub mod retention;
pub mod rt;
pub mod rules;
pub mod sandbox;
pub mod spec;
#[cfg(test)]
mod stock_etcd_tests;
pub mod store;
#[doc(hidden)]
pub mod testing;

pub use agent::{run_agent, AgentConfig, AgentError};
pub use controller::reconcile::{run_pass, PassError, PassReport, PassSettings};
pub use controller::{default_holder, run_controller, ControllerConfig};
pub use duration::{format_duration, parse_duration, DurationError};
pub use model::WorkloadView;
pub use model::{Snapshot, WorkloadSpec};
pub use ops::OpError;
pub use rt::{shutdown_pair, Shutdown, ShutdownTrigger};
pub use spec::{parse_workloads, SpecError};
pub use store::{
    EtcdOptions, EtcdStore, MemoryStore, OpenMode, SqliteStore, Store, StoreError, StoreUrl,
};
