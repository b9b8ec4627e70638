//! Fault model files: the cluster, the workload, the network, and which faults strike how
//! often; and the fault schedule drawn from a model and a seed.
//!
//! ```toml
//! description = "two controllers, three agents, partitions"   # free text
//! seconds = 600            # simulated run length (default 600)
//! settle = 120             # convergence bound (default 120, at most half the run): no fault in the last `settle` s,
//!                          # and every workload must be converged at the end
//! event_budget = 5000000   # most events one run may handle (default 5,000,000)
//! seed = 7                 # replay files only: the seed of the run they replay
//! swarm = false            # swarm testing: each seed switches each [[fault]] rule on or off
//!                          # at random, from the seed alone (default false: every rule on)
//!
//! [cluster]
//! controllers = 2          # controller hosts, 1 to 8 (default 2)
//! agents = 3               # node agents node-1 … node-N, 1 to 32 (default 3)
//! skew_max_ms = 250        # host clocks differ by up to 2 × this (default 0)
//! leader_ttl_ms = 5000     # the controllers' leader lease (default 5000, the runtime's)
//! node_ttl_ms = 10000      # the agents' node lease (default 10000, the runtime's)
//! poll_ms = 100            # controllers poll the store this often (default 100)
//! sync_ms = 100            # agents read their assignments this often (default 100)
//! report_ms = 1000         # agents report this often, R (default 1000)
//! report_delay_ms = 0      # and write each report this much later, G (default 0)
//! drift_max_ppm = 0        # each host's clock runs fast or slow by up to this many parts per
//!                          # million of virtual time, drawn per host (default 0; at most 200,000)
//!
//! [network]
//! delay_ms = 2             # fixed delay of every message (default 1)
//! jitter_ms = 3            # plus up to this much, uniform (default 0)
//! loss = 0.001             # chance a message is lost, 0 to 1 (default 0)
//! slow_ms = 2000           # what a `slow` fault adds to each message of its host, each way
//!                          # (default 2000)
//!
//! [process]
//! start_ms = 50            # a process runs this long after its agent starts it (default 20)
//! term_exit_ms = 200       # and exits this long after SIGTERM (default 100)
//!
//! [[workload]]             # one or more
//! name = "web"
//! controller = "named"     # ledger | intent | expectations | named | gated
//! copies = 6
//! period_ms = 1000         # the loop period U (default 1000)
//! startup_ms = 2000        # the startup time B (default 2000)
//! grace_ms = 3000          # SIGTERM to SIGKILL (default 3000)
//! stop_when_cut_off_ms = 30000  # not for named: stop after the agent is cut off this long
//!                          #   (1000 to 604800000; default: kept running while cut off)
//!
//! [[fault]]                # any number
//! kind = "partition"       # partition | cut-up | cut-down | stall | pause | hang | slow
//!                          #   | restart (a host)
//!                          #   | lose-state (an agent restarts without its state file)
//!                          #   | crash (a process) | leader-change | compaction
//!                          #   | quorum-loss (the store: requests unanswered)
//!                          #   | refuse (the store is down: requests refused at once)
//!                          #   | redeclare (the operator deletes and re-applies every workload)
//!                          #   | pid-reuse (an agent restarts and finds a process at a dead
//!                          #     copy's recorded pid, started later, with its mark and nonce)
//!                          #   | impostor (an agent restarts and finds a process at another pid
//!                          #     with a live or dead copy's mark and nonce: an outliving child)
//!                          #   | shutdown (the operator stops a host gracefully and starts it
//!                          #     again when the fault ends: crate::shutdowns)
//! count = 2                # how many per run
//! target = "agent"         # host faults: agent | controller | any (default any;
//!                          # restart: default controller; an agent restarts and adopts;
//!                          # shutdown: default agent;
//!                          # lose-state, pid-reuse, impostor: agent only)
//! min_ms = 1000            # a lasting fault (partition, cut-*, stall, pause, hang,
//! max_ms = 20000           # quorum-loss, refuse, slow, shutdown) lasts uniformly min_ms ..= max_ms
//! during = "partition"     # optional: each fault of this rule starts inside a fault of this
//!                          # lasting kind drawn by an earlier rule (on the same host for a
//!                          # host fault: a restart inside a partition of its host)
//! after = "restart"        # optional, instead of `during`: each fault of this rule starts
//! within_ms = 200          # within within_ms (default 1000) after a fault of this instant
//!                          # kind drawn by an earlier rule (on the same host for a host
//!                          # fault: a partition in an agent's first 200 ms after a restart)
//!
//! [[event]]                # an explicit schedule (shrinking writes one); when present the
//! at_ms = 12000            # [[fault]] tables are not drawn from
//! kind = "partition"
//! host = 3                 # host index: controllers 0 … C−1, then agents
//! duration_ms = 15000
//! ```
//!
//! Every error names the file, the line and the key, on one line, with
//! [`setpoint_sim::scenario_file::locate`], as the lab's scenario files do.
//!
//! # Parts
//! - `kind.rs`: the kinds of fault, and what each strikes;
//! - `raw.rs`: a model file's TOML as read, before it is checked, and where a bad value stands;
//! - `parse.rs`: reading and validating a model file into a [`Model`];
//! - `schedule.rs`: the hosts, the fault schedule, the swarm's switches and the clocks drawn
//!   from a model and a seed;
//! - `replay.rs`: a model and a schedule written back as a replay file.

use setpoint_core::ControllerKind;

use crate::net::NetConfig;

mod kind;
mod parse;
mod raw;
mod replay;
mod schedule;
#[cfg(test)]
mod tests;

pub use kind::FaultKind;
pub use parse::{load, looks_like_model, parse, shipped, MAX_COUNT, MAX_DRIFT_PPM, MAX_SECONDS};

/// A fault model (or a replay file), validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    /// Free text.
    pub description: String,
    /// The run length, milliseconds.
    pub duration_ms: u64,
    /// The convergence bound after the last fault, milliseconds.
    pub settle_ms: u64,
    /// The most events a run may handle.
    pub event_budget: u64,
    /// The seed a replay file replays.
    pub seed: Option<u64>,
    /// Controller hosts.
    pub controllers: usize,
    /// Node agents.
    pub agents: usize,
    /// Host clocks are skewed by `0 ..= 2 × skew_max_ms`.
    pub skew_max_ms: u64,
    /// The machines' timing.
    pub timing: Timing,
    /// The network.
    pub net: NetConfig,
    /// Process start time, milliseconds.
    pub start_ms: u64,
    /// Process exit time after SIGTERM, milliseconds.
    pub term_exit_ms: u64,
    /// The workloads.
    pub workloads: Vec<WorkloadModel>,
    /// The fault rules drawn from.
    pub faults: Vec<FaultRule>,
    /// Swarm testing: each seed switches each fault rule on or off at random
    /// ([`Model::rules_on`]).
    pub swarm: bool,
    /// Each host's clock runs fast or slow by up to this many parts per million.
    pub drift_max_ppm: u64,
    /// An explicit schedule, which replaces drawing.
    pub schedule: Option<Vec<Fault>>,
}

/// The controllers' and agents' timing, milliseconds (the runtime's defaults unless set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// The leader lease's time to live.
    pub leader_ttl_ms: u64,
    /// The node lease's time to live.
    pub node_ttl_ms: u64,
    /// How often a controller polls the store.
    pub poll_ms: u64,
    /// How often an agent reads its assignments.
    pub sync_ms: u64,
    /// How often an agent reports, R.
    pub report_ms: u64,
    /// How long an agent holds each report back before writing it, G
    /// (`AgentCoreConfig::report_delay_ms`, the agent's `--report-delay`).
    pub report_delay_ms: u64,
}

/// One declared workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadModel {
    /// Its name.
    pub name: String,
    /// The controller kind.
    pub controller: ControllerKind,
    /// Desired copies.
    pub copies: u64,
    /// Loop period U, milliseconds.
    pub period_ms: u64,
    /// Startup time B, milliseconds.
    pub startup_ms: u64,
    /// SIGTERM-to-SIGKILL grace, milliseconds.
    pub grace_ms: u64,
    /// For counted controllers: stop a copy after its agent is cut off this long; none keeps
    /// it running (`named` copies are always fenced).
    pub stop_when_cut_off_ms: Option<u64>,
}

/// Which hosts a host fault may strike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Node agents only.
    Agent,
    /// Controller hosts only.
    Controller,
    /// Any host.
    Any,
}

/// One `[[fault]]` rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRule {
    /// What it does.
    pub kind: FaultKind,
    /// How many per run.
    pub count: u64,
    /// Which hosts.
    pub target: Target,
    /// Shortest duration, milliseconds.
    pub min_ms: u64,
    /// Longest duration, milliseconds.
    pub max_ms: u64,
    /// Each fault of this rule starts inside a fault of this lasting kind drawn by an earlier
    /// rule (on that fault's host, for a host fault); `None`: anywhere in the run.
    pub during: Option<FaultKind>,
    /// Each fault of this rule starts within `within_ms` after a fault of this instant kind
    /// drawn by an earlier rule (on that fault's host, for a host fault); `None`: anywhere.
    pub after: Option<FaultKind>,
    /// The window after an `after` fault, milliseconds (0 without `after`).
    pub within_ms: u64,
}

/// One fault of a schedule.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fault {
    /// When it starts, milliseconds.
    pub at_ms: u64,
    /// What it does.
    pub kind: FaultKind,
    /// The host it strikes (0 for store and process faults).
    pub host: usize,
    /// How long it lasts, milliseconds (0 for instants).
    pub duration_ms: u64,
}

/// A fault model that could not be read or is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// A value is wrong; `line` and `key` say where, the message what is accepted.
    #[error("{path}:{line}: {key}: {message}")]
    File {
        /// The file as named.
        path: String,
        /// The line, from 1.
        line: usize,
        /// The key at fault, such as `fault[2].count`.
        key: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// The file could not be read.
    #[error("{path}: {message}")]
    Unreadable {
        /// The file as named.
        path: String,
        /// The operating system's reason.
        message: String,
    },
}
