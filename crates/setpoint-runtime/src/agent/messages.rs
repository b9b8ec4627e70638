//! What goes into the agent machine ([`AgentInput`]) and what comes out ([`AgentOutput`]).

use std::collections::BTreeSet;

use super::{AgentError, NodeState, Recovery};
use crate::machine::{Replied, ReqId, StoreRequest, Wake, WatchDelivery};
use crate::model::Assignment;
use crate::rules::CopyEnv;

/// How a copy's process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this status.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
    /// An adopted process (not the driver's child) is gone; its status is unknown.
    Unknown,
    /// Anything else, in words (a wait that failed).
    Other(String),
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Code(c) => write!(f, "exit status {c}"),
            Ended::Signal(s) => write!(f, "signal {s}"),
            Ended::Unknown => write!(f, "ended (adopted: status unknown)"),
            Ended::Other(why) => write!(f, "{why}"),
        }
    }
}

/// A signal to a copy's process group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopySignal {
    /// SIGTERM: stop, within the grace period.
    Term,
    /// SIGKILL, only to the process that started at the given start time.
    Kill,
}

/// An input of the agent machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentInput {
    /// Time passed; timers are due.
    Tick,
    /// A store reply.
    Replied(Replied),
    /// An event of a watch the agent asked for ([`StoreRequest::Watch`], with
    /// [`AgentCoreConfig::watch_cache`](super::AgentCoreConfig::watch_cache)); deliveries of watches it no longer follows are ignored.
    WatchDelivery(WatchDelivery),
    /// The copy asked for by [`AgentOutput::Start`] runs, as this process group.
    Started {
        /// The copy.
        copy: String,
        /// Its pid, which is its process group.
        pid: u32,
        /// Its start time, in clock ticks since boot (0 if unknown).
        start_ticks: u64,
    },
    /// The copy asked for by [`AgentOutput::Start`] could not start.
    StartFailed {
        /// The copy.
        copy: String,
        /// Why, in words.
        why: String,
    },
    /// A copy's process ended (the driver has killed what was left of its group and of its
    /// readiness probe).
    Exited {
        /// The copy.
        copy: String,
        /// How it ended.
        how: Ended,
    },
    /// A readiness probe asked for by [`AgentOutput::Probe`] finished.
    ProbeDone {
        /// The copy.
        copy: String,
        /// Whether the command exited 0 (false also if it could not run).
        ok: bool,
    },
    /// The range asked for by [`AgentOutput::ReadLog`]: `Ok(None)` if the copy has no log.
    LogRead {
        /// The request's key.
        key: String,
        /// What was read, or why it could not be.
        read: Result<Option<crate::logs::Range>, String>,
    },
    /// What the driver found, as asked by [`AgentOutput::Recover`].
    Recovered(Recovery),
    /// The answer to an [`AgentOutput::StopStrays`]: how many process groups it signalled. A
    /// shutdown before the state was read that found none stops at once instead of waiting out
    /// the grace of copies that do not exist. A driver may leave it unsaid: the machine then
    /// waits the grace out.
    StraysSignalled {
        /// How many.
        count: usize,
        /// The request's own `spare_kept`, which tells the answer to a shutdown's round
        /// (`false`) from one to a first-claim fence's (`true`, which spares copies and so
        /// proves nothing about what a shutdown leaves running).
        spare_kept: bool,
    },
    /// Stop: stop every copy, write a last report, give the name up.
    Shutdown,
}

/// An output of the agent machine, to be carried out in order.
#[derive(Debug)]
pub enum AgentOutput {
    /// Carry out this store request and hand the reply back as [`AgentInput::Replied`].
    Store {
        /// The request's id.
        id: ReqId,
        /// The request.
        request: StoreRequest,
    },
    /// Step the machine again by this time.
    Wake(Wake),
    /// Start this copy's process (its own process group), then answer [`AgentInput::Started`] or
    /// [`AgentInput::StartFailed`]. Its record (with the nonce) has been saved before.
    Start {
        /// The copy's identity.
        copy: String,
        /// What to run: command, environment, workload. Boxed: unboxed, it made every output as
        /// large as itself (a few hundred bytes), and every step's outputs are moved through
        /// buffers; a start is rare.
        assignment: Box<Assignment>,
        /// The copy's secret nonce, for its environment.
        nonce: String,
    },
    /// This live process is the copy (adopted after a restart): tell the machine when it ends.
    Adopt {
        /// The copy.
        copy: String,
        /// Its pid and process group.
        pid: u32,
        /// Its start time.
        start_ticks: u64,
    },
    /// Signal a copy's process group.
    Signal {
        /// The copy.
        copy: String,
        /// Its process group.
        pid: u32,
        /// Its leader's start time (a SIGKILL goes only to that process's group).
        start_ticks: u64,
        /// Which signal.
        signal: CopySignal,
    },
    /// Stop a marked process that is not the agent's own: SIGTERM to its group, SIGKILL after
    /// `grace_ms` if it still runs (checked by start time).
    StopForeign {
        /// Its pid.
        pid: u32,
        /// Its start time.
        start_ticks: u64,
        /// How long it is given.
        grace_ms: u64,
    },
    /// Signal every process group carrying this node's mark and run by the agent's user, then
    /// answer [`AgentInput::StraysSignalled`] (optional): the
    /// copies an earlier agent here left running, while this agent has neither claimed its
    /// node nor recovered them ([`AgentCore`](super::AgentCore)'s first-claim fence), except
    /// those the state file proves are kept while cut off
    /// ([`kept_while_cut_off`](super::kept_while_cut_off)). A SIGKILL goes only to a group whose
    /// leader is the process found (checked by its start time).
    StopStrays {
        /// Which signal.
        signal: CopySignal,
        /// Spare the copies the state file proves are kept while cut off: true for the
        /// first-claim fence, false for a shutdown before the state was read, which leaves
        /// nothing running (as a shutdown of a running agent stops every copy).
        spare_kept: bool,
    },
    /// Run the copy's readiness command, then answer [`AgentInput::ProbeDone`].
    Probe {
        /// The copy.
        copy: String,
        /// The command.
        command: Vec<String>,
        /// The copy's environment.
        env: CopyEnv,
    },
    /// Read the state file and look for marked processes, then answer [`AgentInput::Recovered`].
    Recover,
    /// Write the state file.
    SaveState(NodeState),
    /// Write down, beside the state file, that the node lease's last renewal that succeeded
    /// was sent at `sent_ms` (the machine's clock), replacing what was there: a later agent
    /// here hands it to [`AgentCore::inherit_renewal`](super::AgentCore::inherit_renewal).
    /// Losing it costs nothing but a later fence; it needs no sync.
    LeaseKept {
        /// When the renewal was sent.
        sent_ms: u64,
    },
    /// Rotate the logs of the running copies; with `sweep`, also remove old logs of ended ones.
    TendLogs {
        /// The copies running on this node.
        running: BTreeSet<String>,
        /// Whether to sweep ended copies' logs too.
        sweep: bool,
    },
    /// Read at most `max_bytes` of `copy`'s log from `from` (or its last `tail` lines) with
    /// [`crate::logs::read_range`], then answer [`AgentInput::LogRead`] (a log request,
    /// [`crate::log_requests`]). The copy name is checked.
    ReadLog {
        /// The request's key.
        key: String,
        /// The copy.
        copy: String,
        /// Where to start, in bytes.
        from: u64,
        /// Start at the last `tail` lines instead.
        tail: Option<u64>,
        /// The most bytes to read.
        max_bytes: u64,
    },
    /// A log line.
    Log(String),
    /// The agent is done: every copy stopped, the name given up. Nothing follows.
    Stopped(Result<(), AgentError>),
}
