//! The node agent: runs the copies assigned to its node as real processes and reports them.
//!
//! The agent is an I/O-free state machine ([`AgentCore`]) with a thin tokio driver around it
//! ([`run_agent`]); the chaos world drives the same machine on simulated processes. The machine
//! is composed of parts, each with its own state and tests, under one [`AgentCore::step`] that
//! routes inputs to them and gathers their outputs (docs/runtime.md, "The agent's parts").
//!
//! # Layout
//! - `core/`: [`AgentCore`]: the parts, the routing, the order of a step (`mod.rs`), and what
//!   spans parts, each an `impl AgentCore` block of its own: `fence.rs` (the claim, renewals,
//!   the fence's signals, claiming again) and `shutdown.rs` (the drain, the last report, the
//!   release); the machine's tests in `tests.rs`.
//! - `lease.rs`: the node claim, renewals and the fence's clock ([`fence_times_ms`]).
//! - `supervisor.rs`: the copies from start to exit (stops with grace, readiness), the state
//!   file's writes.
//! - `sync.rs`: when and how assignments and kill requests are read; `watch_cache.rs`: their
//!   watch cache on a store that pushes changes.
//! - `kills.rs`: `setpoint kill` requests; `log_serving.rs`: `setpoint logs` requests from any
//!   host ([`crate::log_requests`]).
//! - `recovery.rs`: the read of the node's state, adoption and reaping after a restart
//!   ([`recovery_from`]).
//! - `reports.rs`: reports and the ledger's seen/unseen events; `live.rs`: `/live/{node}`.
//! - `event_log.rs`: copy events, written in batches; `logs.rs`: when copy logs are tended.
//! - `life.rs`: the agent's stage and why it ends; `outbox.rs`: a step's outputs and the
//!   requests in flight.
//! - `messages.rs`, `config.rs`: the machine's inputs, outputs and configuration.
//! - `state_file.rs`, `error.rs`: the state file ([`CopyRecord`], [`NodeState`]) and
//!   [`AgentError`], shared by the machine and the driver.
//! - `driver.rs`: the tokio driver ([`run_agent`], [`AgentConfig`]); `simulated.rs`: many
//!   drivers of simulated nodes in one process ([`run_simulated_nodes`]), for scale tests.

mod config;
mod core;
mod driver;
mod error;
mod event_log;
#[cfg(test)]
pub(crate) mod fixtures;
mod kills;
mod lease;
mod life;
mod live;
mod log_serving;
mod logs;
mod messages;
mod outbox;
mod recovery;
mod reports;
mod simulated;
mod state_file;
mod supervisor;
mod sync;
mod watch_cache;

pub use self::config::{AgentCoreConfig, Nonces, DEFAULT_REPORT_RESYNC_MS};
pub use self::core::AgentCore;
pub use self::driver::{run_agent, AgentConfig};
pub use self::error::AgentError;
pub use self::lease::{fence_times_ms, renew_every_ms, RENEWALS_IN_FLIGHT};
pub use self::messages::{AgentInput, AgentOutput, CopySignal, Ended};
pub use self::recovery::{
    kept_while_cut_off, recovery_from, FoundRecord, Recovery, UNKNOWN_GRACE_MS,
};
pub use self::simulated::{
    run_simulated_nodes, simulated_node_name, SimulatedError, AGENTS_PER_CONNECTION,
    MAX_SIMULATED_NODES, SIMULATED_RAMP,
};
pub use self::state_file::{
    lease_file, read_all_node_states, read_lease_file, read_node_state, state_file, CopyRecord,
    NodeState,
};
pub use self::supervisor::READINESS_RETRY_MS;
pub use self::watch_cache::CACHE_RESYNC_MS;
