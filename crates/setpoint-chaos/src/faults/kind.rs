//! The kinds of fault: their names in a model file, and whether each lasts, strikes a host,
//! restarts one or cuts it off.

/// What a fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// Both directions of a host's link are cut.
    Partition,
    /// Only host → store is cut: requests are lost, replies to earlier ones still come.
    CutUp,
    /// Only store → host is cut: requests apply, replies and watch events are lost.
    CutDown,
    /// Host → store stalls, as a TCP connection does across a short partition: requests sent
    /// meanwhile are held, and delivered in order when the fault ends. A commit can then reach
    /// the store after its writer's lease has ended: the case fencing tokens exist for.
    Stall,
    /// The host is not stepped (a GC pause, SIGSTOP); its inputs queue.
    Pause,
    /// The host's machine restarts with a fresh state (a controller or agent process restart);
    /// a restarted agent recovers from its node's state file and live processes.
    Restart,
    /// A running process, drawn at random, exits with status 1: a crash, which its workload
    /// backs off after (every uncommanded exit counts).
    Crash,
    /// An operator kills a running copy, drawn at random, as `setpoint kill` does: a kill
    /// request its agent carries out (SIGKILL), a commanded death replaced at once. The
    /// lesson's deaths, in the agreement with the lab ([`crate::agree`]).
    Kill,
    /// The store changes leader: every lease gets its full time to live again.
    LeaderChange,
    /// The store compacts its history to the current revision.
    Compaction,
    /// The operator deletes every workload and declares it again at once (`setpoint delete`
    /// then `apply`): same declaration, new uid, so the old copies are orphans to collect.
    Redeclare,
    /// An agent restarts and its state file is gone (a wiped disk, a state directory on
    /// tmpfs): it recovers from the node's live processes alone. On a controller host (an
    /// explicit `[[event]]` only) it is a restart: a controller keeps no state file.
    LoseState,
    /// The store member the host talks to hangs: requests that reach it are never answered
    /// (nor applied), and its watch streams go silent without breaking; the events it owes
    /// them are delivered, in order, when it recovers. Unlike a partition the client is never
    /// told: no watch breaks, no connection fails.
    Hang,
    /// The store loses quorum: no request is served (every one is left unanswered), no lease
    /// expires, and when quorum is back a new leader gives every lease its full time to live
    /// again (etcd #9395). Every host is cut off at once.
    QuorumLoss,
    /// The store is down and refuses connections (a single-member etcd stopped or crashed, and
    /// restarted when the fault ends): every request is answered at once, a network delay
    /// later, with `unavailable`, every open watch stream breaks, and no lease expires
    /// meanwhile (the restarted member gives every lease its full time to live again, as after
    /// a quorum loss). Every host is cut off at once, but, unlike a quorum loss, told so at
    /// once: a retry that does not wait is a retry as fast as the network answers.
    Refuse,
    /// The host's link slows down: every message on it, either way, takes the model's
    /// `network.slow_ms` longer (a congested or lossy path where TCP retransmits), so that its
    /// renewals press on the lease deadlines without failing outright.
    Slow,
    /// An agent restarts, and a process now holds a dead copy's recorded pid with a later start
    /// time, carrying that copy's mark and nonce: the kernel reused the pid
    /// ([`crate::impostors`]). It must be stopped, never adopted. With no such record in the
    /// state file it is a plain restart; on a controller host (an `[[event]]` only) too.
    PidReuse,
    /// An agent restarts, and a process at a pid of its own carries a live or dead copy's mark
    /// and nonce: a child that inherited the copy's environment ([`crate::impostors`]). It must
    /// be stopped, never adopted. With no record to imitate it is a plain restart.
    Impostor,
    /// The operator stops the host's agent (or controller) gracefully, as `systemctl stop`
    /// does: the agent stops its copies with their grace, writes its last report and gives its
    /// node lease up; when the fault ends the operator starts it again, and it recovers as after
    /// a restart. One that has not stopped by then is waited for, and killed at systemd's stop
    /// timeout ([`crate::shutdowns`]).
    Shutdown,
}

impl FaultKind {
    /// Every kind, with its name in files.
    pub const ALL: [(FaultKind, &'static str); 19] = [
        (FaultKind::Partition, "partition"),
        (FaultKind::CutUp, "cut-up"),
        (FaultKind::CutDown, "cut-down"),
        (FaultKind::Stall, "stall"),
        (FaultKind::Pause, "pause"),
        (FaultKind::Restart, "restart"),
        (FaultKind::Crash, "crash"),
        (FaultKind::Kill, "kill"),
        (FaultKind::LeaderChange, "leader-change"),
        (FaultKind::Compaction, "compaction"),
        (FaultKind::Redeclare, "redeclare"),
        (FaultKind::LoseState, "lose-state"),
        (FaultKind::Hang, "hang"),
        (FaultKind::QuorumLoss, "quorum-loss"),
        (FaultKind::Refuse, "refuse"),
        (FaultKind::Slow, "slow"),
        (FaultKind::PidReuse, "pid-reuse"),
        (FaultKind::Impostor, "impostor"),
        (FaultKind::Shutdown, "shutdown"),
    ];

    /// Its name in files.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(k, _)| *k == self)
            .map_or("?", |(_, n)| n)
    }

    /// Whether it lasts for a duration (else it is an instant).
    pub fn lasts(self) -> bool {
        matches!(
            self,
            FaultKind::Partition
                | FaultKind::CutUp
                | FaultKind::CutDown
                | FaultKind::Stall
                | FaultKind::Pause
                | FaultKind::Hang
                | FaultKind::QuorumLoss
                | FaultKind::Refuse
                | FaultKind::Slow
                | FaultKind::Shutdown
        )
    }

    /// The names of the kinds that last (`true`) or are instants (`false`), in file order,
    /// joined by ", ": what `during` and `after` accept, for their error messages.
    pub(super) fn names_that_last(lasting: bool) -> String {
        Self::ALL
            .iter()
            .filter(|(k, _)| k.lasts() == lasting)
            .map(|(_, n)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether it strikes one host.
    pub fn on_host(self) -> bool {
        (self.lasts() && !self.on_store()) || self.restarts_host()
    }

    /// Whether it strikes the store itself, and so every host at once: a quorum loss or a
    /// store that refuses connections.
    pub fn on_store(self) -> bool {
        matches!(self, FaultKind::QuorumLoss | FaultKind::Refuse)
    }

    /// Whether it restarts the host's machine: a restart, a loss of the state file, or one of
    /// the impostor kinds.
    pub fn restarts_host(self) -> bool {
        matches!(
            self,
            FaultKind::Restart | FaultKind::LoseState | FaultKind::PidReuse | FaultKind::Impostor
        )
    }

    /// Whether it strikes agents only (the target is `agent`, or none).
    pub(super) fn agent_only(self) -> bool {
        matches!(
            self,
            FaultKind::LoseState | FaultKind::PidReuse | FaultKind::Impostor
        )
    }

    /// Whether it cuts a host off from the store for its duration, so that an agent must
    /// fence itself if it lasts longer than a node lease: a partition, a one-way cut, a
    /// stall, a hung store member, or (every host at once) a quorum loss or a store that
    /// refuses connections.
    pub fn cuts_off(self) -> bool {
        matches!(
            self,
            FaultKind::Partition
                | FaultKind::CutUp
                | FaultKind::CutDown
                | FaultKind::Stall
                | FaultKind::Hang
                | FaultKind::QuorumLoss
                | FaultKind::Refuse
        )
    }
}
