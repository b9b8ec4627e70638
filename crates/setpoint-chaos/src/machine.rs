//! What the world drives: one state machine per host, behind one small interface.
//!
//! The runtime's controller host (`setpoint_runtime::controller::Host`) and node agent
//! (`setpoint_runtime::agent::AgentCore`) each have their own input and output enums; the
//! adapters in [`crate::adapt`] map them onto [`Input`] and [`Output`], so the world has one
//! event loop for both, and unit tests can drive it with small stand-in machines.

use setpoint_runtime::agent::{NodeState, Recovery};
use setpoint_runtime::machine::Replied;
use setpoint_runtime::machine::{ReqId, StoreRequest, WatchDelivery};

/// What a host is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// A controller host (election, loops, garbage collection).
    Controller,
    /// A node agent on the named node.
    Agent(String),
}

/// An input the world hands a machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A timer the machine asked for is due (or the world steps it for no reason; machines are
    /// level-triggered).
    Tick,
    /// A reply to one of its store requests.
    Replied(Replied),
    /// An event of one of its watches.
    Watch(WatchDelivery),
    /// A copy it asked to start is running with this pid.
    Started {
        /// The copy's identity.
        copy: String,
        /// Its pid (also its process group).
        pid: u32,
    },
    /// A copy's process ended.
    Exited {
        /// The copy's identity.
        copy: String,
        /// Its pid.
        pid: u32,
        /// How it ended.
        how: Exit,
    },
    /// What the node's state file and process table show, as asked by [`Output::Recover`].
    Recovered(Recovery),
    /// Stop: the host is shutting down.
    Shutdown,
    /// How many processes an [`Output::StopStrays`] signalled, with that request's
    /// `spare_kept`: the driver's answer, queued behind the outputs of the step that asked.
    StraysSignalled {
        /// How many.
        count: usize,
        /// The request's `spare_kept`.
        spare_kept: bool,
    },
}

/// How a simulated process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this status (a crash is status 1).
    Code(i32),
    /// A signal ended it (15: SIGTERM, 9: SIGKILL).
    Signal(i32),
    /// An adopted process ended: not the agent's child, so its status is unknown.
    Unknown,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit status {c}"),
            Exit::Signal(s) => write!(f, "signal {s}"),
            Exit::Unknown => write!(f, "ended (adopted: status unknown)"),
        }
    }
}

/// What a machine asks of the world.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Carry out a store request.
    Request {
        /// Its id, echoed in the reply.
        id: ReqId,
        /// The request.
        request: StoreRequest,
    },
    /// Step me at this time of my own clock, milliseconds.
    Wake(u64),
    /// Start a process for a copy.
    Start {
        /// The copy's identity.
        copy: String,
        /// Its workload.
        workload: String,
        /// Its secret nonce, in its environment: what proves it the agent's own after a
        /// restart.
        nonce: String,
    },
    /// This live process (by pid and start time) is the copy: the agent adopted it after a restart.
    Adopt {
        /// The copy's identity.
        copy: String,
        /// Its pid.
        pid: u32,
        /// Its start time in clock ticks: with the pid, it names one process.
        start_ticks: u64,
    },
    /// Stop a process carrying the agent's mark that is not its own: SIGTERM, SIGKILL after
    /// `grace_ms`. The driver waits for it to end before it carries out anything else.
    StopForeign {
        /// Its pid.
        pid: u32,
        /// Its start time in clock ticks: a process that holds the pid now but started at
        /// another time is not signalled.
        start_ticks: u64,
        /// How long it is given.
        grace_ms: u64,
    },
    /// Signal every process of the node that no agent of it has adopted (an earlier life's
    /// copies, while the agent has not claimed its node): SIGTERM, or SIGKILL with `kill`.
    StopStrays {
        /// SIGKILL rather than SIGTERM.
        kill: bool,
        /// Spare those the state file shows kept while cut off (the fence does, a shutdown
        /// does not).
        spare_kept: bool,
    },
    /// Write the node's state file.
    SaveState(NodeState),
    /// Write down beside the state file when the node lease's last successful renewal was
    /// sent (the machine's clock); a restarted agent is handed it ([`Machine::inherit_lease`]).
    LeaseKept {
        /// When.
        sent_ms: u64,
    },
    /// Read the state file and look for marked processes; answer [`Input::Recovered`].
    Recover,
    /// Signal a copy's process group: SIGKILL if `kill`, else SIGTERM.
    Signal {
        /// The copy's identity.
        copy: String,
        /// SIGKILL rather than SIGTERM.
        kill: bool,
    },
    /// A log line.
    Log {
        /// Who in the machine wrote it (a controller's loop), if it says.
        who: Option<String>,
        /// The line.
        line: String,
    },
    /// The machine has stopped for good.
    Stopped,
}

/// A state machine the world can step.
pub trait Machine {
    /// Hands the machine `input` at `now_ms` of its own clock; returns what it asks for.
    fn step(&mut self, now_ms: u64, input: Input) -> Vec<Output>;

    /// As [`Machine::step`], appending the outputs to `out`: the world hands in one buffer for
    /// the whole run, where `step` returns a fresh vector each time.
    fn step_into(&mut self, now_ms: u64, input: Input, out: &mut Vec<Output>) {
        out.extend(self.step(now_ms, input));
    }

    /// A tick at `now_ms` that the machine answers with nothing but its next wake, without the
    /// step: returns that wake (its clock), having done exactly what `step_into(now_ms,
    /// Input::Tick)` would (whose only output would be `Output::Wake` of it). `None`: nothing
    /// done; the tick takes the step. The world tries it on every tick; machines without such
    /// ticks keep this default.
    fn quiet_tick(&mut self, _now_ms: u64) -> Option<u64> {
        None
    }

    /// Before its first step, a restarted agent is handed what its earlier life wrote down
    /// with [`Output::LeaseKept`], as the real driver reads it from the lease file. Machines
    /// that keep no lease ignore it.
    fn inherit_lease(&mut self, _renewal_sent_ms: u64) {}
}
