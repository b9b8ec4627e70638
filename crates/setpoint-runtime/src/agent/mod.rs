//! The node agent: runs the copies assigned to its node as real processes and reports them.
//!
//! The agent is an I/O-free state machine ([`AgentCore`], in [`core`](self::AgentCore)) with a
//! thin tokio driver around it ([`run_agent`]); the chaos world drives the same machine on
//! simulated processes.

mod config;
mod core;
mod driver;
mod error;
mod messages;
mod recovery;
mod state_file;

pub use self::config::{AgentCoreConfig, Nonces};
pub use self::core::{
    fence_times_ms, renew_every_ms, AgentCore, CACHE_RESYNC_MS, READINESS_RETRY_MS,
    RENEWALS_IN_FLIGHT, UNKNOWN_GRACE_MS,
};
pub use self::driver::{run_agent, AgentConfig};
pub use self::error::AgentError;
pub use self::messages::{AgentInput, AgentOutput, CopySignal, Ended};
pub use self::recovery::{recovery_from, FoundRecord, Recovery};
pub use self::state_file::{
    read_all_node_states, read_node_state, state_file, CopyRecord, NodeState,
};
