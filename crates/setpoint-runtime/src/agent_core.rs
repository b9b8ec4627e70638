//! The node agent as a state machine without I/O ([`AgentCore`]), in the manner of raft-rs's
//! `RawNode`: it never touches a store, a process, a file or a clock.
//!
//! The driver creates it with [`AgentCore::new`] and calls [`AgentCore::step`]`(now_ms, input)`
//! for every input: a [`AgentInput::Tick`] on a timer (at the latest at the last
//! [`AgentOutput::Wake`]), each store reply, each process start, exit and readiness probe, the
//! recovery findings it was asked for, and shutdown. Each step returns what to do, in order:
//! store requests (each with a [`ReqId`], see [`crate::machine`]), process starts, adoptions and
//! signals, readiness probes, state-file writes, log lines, and finally [`AgentOutput::Stopped`].
//! The tokio driver ([`crate::agent::run_agent`]) carries them out on a real store and real
//! processes; the chaos world carries them out on simulated ones.
//!
//! # What it keeps (the rules of [`crate::agent`] and [`crate::node`])
//! - **The node claim.** `/nodes/{name}` is created under a new lease only if absent; a record
//!   of the same place (an earlier agent on this data directory, whose lock the driver now
//!   holds) has its lease taken over; any other holder is a refusal.
//! - **Renewal and self-fencing.** A renewal goes out every quarter TTL whether or not earlier
//!   ones answered (at most [`RENEWALS_IN_FLIGHT`] at once). The lease's end is counted from the
//!   moment the last renewal that succeeded was *sent*: SIGTERM to every copy at 3/4 TTL,
//!   SIGKILL at 9/10, from the machine's own clock, without waiting to hear from the store. Then
//!   the old lease is revoked and the name claimed again under a new one (a record found then
//!   belongs to another agent: the agent stops and exits). Nothing starts, syncs or reports
//!   while fenced.
//! - **Sync** every `sync_every`: one read of the node's assignments and kill requests. On a
//!   store that pushes changes ([`AgentCoreConfig::watch_cache`]) the agent keeps a watch cache
//!   of those two prefixes instead (one read, then a watch from its revision, as the controller
//!   host's cache) and syncs from it at once whenever it changes or a copy is forgotten, and
//!   every [`CACHE_RESYNC_MS`] regardless. The cache serves only while it follows the store,
//!   was read under the lease held now (a rejoin reads it again: names given away while the
//!   node was lost must not come back from an old copy), and has caught up with the agent's
//!   own kill answers; otherwise a sync reads the store, every `sync_every`. Starting
//!   is keyed by identity: a copy it knows (running, or exited while still assigned) is never
//!   started again; an unassigned copy is stopped (SIGTERM, SIGKILL after its grace period).
//! - **Promotion** from starting to running after the startup time, or once the readiness
//!   command exits 0 (retried every [`READINESS_RETRY_MS`]).
//! - **Reports** observed every R and written `report_delay` later ([`AgentCore::report_delay_ms`]),
//!   compare-and-set on the last revision this agent wrote; the live record whenever the set of
//!   ready copies changes; the event log, in one transaction per flush.
//! - **Recovery**: adopts the processes proven its own, reaps the rest, stops foreign marked ones.
//! - **Shutdown**: stop every copy (keeping their records, so that a restart does not start them
//!   again), a last report, the events, then revoke the lease.
//! - **Deadlines.** Every store request has one ([`AgentCoreConfig::request_timeout_ms`]; a
//!   renewal's is the lease's TTL). A reply that does not come in time counts as a failure, and a
//!   late reply is ignored.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::agent::{AgentError, CopyRecord, NodeState};
use crate::cache::CacheCore;
use crate::events::{self, CopyEvent, CopyEventKind};
use crate::machine::{Replied, ReqId, StoreReply, StoreRequest, StoreResult, Wake, WatchDelivery};
use crate::model::{
    decode, encode, placements_of, report_key, Assignment, CopyReport, NodeReport, Phase,
};
use crate::node::{node_key, NodeError, NodeRecord};
use crate::process::Marked;
use crate::remote::{self, LiveCopy, LiveRecord};
use crate::rules::CopyEnv;
use crate::store::{Entry, LeaseId, Read, Revision, StoreError, Txn, WatchEvent};

/// How often a failed readiness command is run again, in milliseconds.
pub const READINESS_RETRY_MS: u64 = 100;
/// The grace period given to a foreign process found carrying the agent's mark, in milliseconds.
pub const UNKNOWN_GRACE_MS: u64 = 1_000;
/// How many renewals may be in flight at once. A renewal can hang on a dead etcd member until
/// its deadline; the next ones go out on time and may reach a live member.
pub const RENEWALS_IN_FLIGHT: usize = 8;
/// How often copy logs are rotated, in milliseconds.
const LOGS_EVERY_MS: u64 = 1_000;
/// How often ended copies' logs are swept, in milliseconds.
const SWEEP_EVERY_MS: u64 = 10_000;
/// Attempts of the first claim before it gives up on a key that keeps changing.
const CLAIM_ATTEMPTS: u32 = 10;
/// The pause between two attempts of the first claim, in milliseconds.
const CLAIM_RETRY_MS: u64 = 20;
/// How long shutdown waits beyond the longest grace period, in milliseconds.
const SHUTDOWN_SLACK_MS: u64 = 2_000;

/// Where the nonces of new copies come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Nonces {
    /// Secret random nonces ([`crate::sandbox::new_nonce`]): what a real agent uses, since a
    /// nonce proves after a crash that a process is the agent's own.
    Random,
    /// `{seed:016x}{counter:016x}`: deterministic, for simulations (guessable, never for real
    /// processes).
    Counter(u64),
}

/// How an agent machine runs. Every time is in milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentCoreConfig {
    /// The node's name, as assignments and reports name it.
    pub node: String,
    /// The machine the agent runs on, as its node record names it.
    pub host: String,
    /// The agent's state directory, canonical: with `host`, where the agent lives.
    pub place: String,
    /// The agent's process id, as records and reports show it.
    pub agent_pid: u32,
    /// The reporting period R.
    pub report_every_ms: u64,
    /// Added delay between observing the copies and writing the report.
    pub report_delay_ms: u64,
    /// Jittered added delays, one per report in turn, in place of `report_delay_ms` when not
    /// empty ([`crate::report_delay`]).
    pub report_delays: crate::report_delay::ReportDelays,
    /// How often the agent reads its assignments and kill requests (with a watch cache: how
    /// often it falls back to reading the store while the cache cannot serve).
    pub sync_every_ms: u64,
    /// Whether the store pushes changes ([`crate::store::Store::watches`]): then the agent
    /// keeps a watch cache of its placements and kill requests and syncs when it changes
    /// (see the module docs), instead of reading the store every `sync_every_ms`.
    pub watch_cache: bool,
    /// The node lease's time to live.
    pub lease_ttl_ms: u64,
    /// Report copies without processes (benchmarks of the control plane): a simulated copy has
    /// pid 0, becomes ready after its startup time, and ends only when it is stopped.
    pub simulate_copies: bool,
    /// How long the machine waits for a store reply before it counts the request as failed.
    pub request_timeout_ms: u64,
    /// Where new copies' nonces come from.
    pub nonces: Nonces,
    /// Injected bug for the chaos checker's own test: when the lease is lost, the agent does
    /// not stop its copies. Nothing in the CLI or in any file sets it; it is hidden from the
    /// docs and only test code turns it on.
    #[doc(hidden)]
    pub bug_no_self_fence: bool,
}

impl AgentCoreConfig {
    /// A machine for `node`: R = 1s, no added delay, assignments read every 100ms (no watch
    /// cache), a node lease
    /// of 10s, store requests given 5s, random nonces, host and place `node` itself, pid 0.
    pub fn new(node: impl Into<String>) -> Self {
        let node = node.into();
        Self {
            host: node.clone(),
            place: node.clone(),
            node,
            agent_pid: 0,
            report_every_ms: 1_000,
            report_delay_ms: 0,
            report_delays: Default::default(),
            sync_every_ms: 100,
            watch_cache: false,
            lease_ttl_ms: 10_000,
            simulate_copies: false,
            request_timeout_ms: 5_000,
            nonces: Nonces::Random,
            bug_no_self_fence: false,
        }
    }
}

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

/// One state-file record as the driver found it after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundRecord {
    /// The record as the state file holds it.
    pub record: CopyRecord,
    /// The live process proven to be this copy (pid, start ticks): the recorded pid with its
    /// start time and nonce, or, for a record without a pid, a marked process holding its
    /// nonce. `None`: no such process lives.
    pub process: Option<(u32, u64)>,
}

/// What the driver found when asked to [`AgentOutput::Recover`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The state file's records, each with its live process if one is proven its own.
    pub records: Vec<FoundRecord>,
    /// The live processes carrying the agent's mark that no record claimed.
    pub unclaimed: Vec<Marked>,
    /// The agent's own user id (a marked process of another user is left alone).
    pub own_uid: u32,
}

/// An input of the agent machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentInput {
    /// Time passed; timers are due.
    Tick,
    /// A store reply.
    Replied(Replied),
    /// An event of a watch the agent asked for ([`StoreRequest::Watch`], with
    /// [`AgentCoreConfig::watch_cache`]); deliveries of watches it no longer follows are ignored.
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
    /// What the driver found, as asked by [`AgentOutput::Recover`].
    Recovered(Recovery),
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
        /// What to run: command, environment, workload.
        assignment: Assignment,
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
    /// Rotate the logs of the running copies; with `sweep`, also remove old logs of ended ones.
    TendLogs {
        /// The copies running on this node.
        running: BTreeSet<String>,
        /// Whether to sweep ended copies' logs too.
        sweep: bool,
    },
    /// A log line.
    Log(String),
    /// The agent is done: every copy stopped, the name given up. Nothing follows.
    Stopped(Result<(), AgentError>),
}

/// A copy in the agent's hands.
#[derive(Clone, Debug)]
struct Local {
    record: CopyRecord,
    /// A readiness probe is running.
    probing: bool,
    /// The last probe succeeded.
    probe_ok: bool,
    next_check_ms: u64,
    /// When SIGKILL follows the SIGTERM of a stop.
    kill_at_ms: Option<u64>,
    killed: bool,
}

impl Local {
    fn new(record: CopyRecord) -> Self {
        Self {
            record,
            probing: false,
            probe_ok: false,
            next_check_ms: 0,
            kill_at_ms: None,
            killed: false,
        }
    }

    fn exited(&self) -> bool {
        self.record.phase == Phase::Exited
    }

    fn mark_exited(&mut self, now: u64, how: String) {
        self.record.phase = Phase::Exited;
        self.record.exited_ms = Some(now);
        self.record.exit = Some(how);
        self.probing = false;
    }
}

/// The node claim, step by step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClaimStep {
    /// Revoke the lease that was lost (a fresh claim after fencing).
    Revoke(LeaseId),
    /// Read `/nodes/{name}`.
    Read,
    /// Grant a new lease.
    Grant,
    /// Create the record under this lease, only if absent.
    Create(LeaseId),
    /// The create lost a race: give the lease back, then read again.
    GiveBack(LeaseId),
    /// Take over the lease of an earlier agent at this place: renew it...
    KeepAlive {
        lease: LeaseId,
        ttl_ms: u64,
        mod_revision: Revision,
        acquired_ms: u64,
    },
    /// ... then write the record under it, keeping when the name was acquired.
    TakeOver {
        lease: LeaseId,
        ttl_ms: u64,
        mod_revision: Revision,
        acquired_ms: u64,
    },
    /// Wait until this time, then start again.
    Wait(u64),
}

/// The lease's state.
#[derive(Clone, Debug)]
enum LeaseSt {
    /// Claiming the name; `fresh` after fencing (a record found then is another agent's).
    Claiming {
        step: ClaimStep,
        fresh: bool,
        attempt: u32,
        /// When the current lease's first renewal or grant was sent: its end is counted from it.
        sent: u64,
        /// A step is waiting for this request.
        waiting: Option<ReqId>,
    },
    /// Held: renewals go out; the fence watches.
    Held {
        lease: LeaseId,
        ttl_ms: u64,
        /// When the last renewal that succeeded was sent.
        ok_sent: u64,
        next_renewal: u64,
        /// SIGTERM went out: fenced, waiting for the SIGKILL time.
        termed: bool,
        failing: bool,
        /// Renewals in flight.
        in_flight: usize,
    },
    /// Another agent holds the name: this one stops.
    Refused,
    /// Given up (shutdown).
    Released,
}

/// What the agent's life is at.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Life {
    /// The first claim is under way.
    Claiming,
    /// Held: reading the assignments and the last report, before asking for recovery.
    ReadingState,
    /// Waiting for the driver's [`AgentInput::Recovered`].
    Recovering,
    /// Running.
    Running,
    /// Shutting down: waiting for copies to stop, until the deadline.
    Draining { deadline: u64 },
    /// The last report, the last events, then the revoke.
    Finishing,
    /// Done.
    Stopped,
}

/// Why a store request was sent.
#[derive(Clone, Debug)]
enum Purpose {
    Claim,
    Renew {
        lease: LeaseId,
        sent: u64,
    },
    ReadState,
    /// A sync read sent under this lease.
    Sync {
        lease: LeaseId,
    },
    Report {
        report: NodeReport,
        last: bool,
    },
    Live {
        lease: LeaseId,
        copies: Vec<LiveCopy>,
    },
    Events {
        batch: Vec<(String, String)>,
        last: bool,
    },
    KillAnswer {
        key: String,
    },
    /// The watch cache's full read, under this lease.
    CacheRead {
        lease: LeaseId,
    },
    /// The watch cache's watch.
    CacheWatch,
    Release,
}

#[derive(Clone, Debug)]
struct Pending {
    deadline: u64,
    purpose: Purpose,
}

/// The node agent as a state machine: see the [module docs](self).
#[derive(Debug)]
pub struct AgentCore {
    cfg: AgentCoreConfig,
    next_id: ReqId,
    pending: BTreeMap<ReqId, Pending>,
    out: Vec<AgentOutput>,
    lease: LeaseSt,
    life: Life,
    copies: BTreeMap<String, Local>,
    dirty: bool,
    report_rev: Revision,
    queue: VecDeque<(u64, NodeReport)>,
    report_in_flight: bool,
    /// Event-log entries not written yet (key, value).
    events: Vec<(String, String)>,
    events_in_flight: bool,
    /// What the last report written showed running, (workload, n) → incarnation.
    shown: BTreeMap<(String, u64), Revision>,
    /// Store entries refused as forged or damaged, by key, so each is logged once.
    refused_keys: BTreeSet<String>,
    live_written: Option<(LeaseId, Vec<LiveCopy>)>,
    live_in_flight: bool,
    sync_in_flight: bool,
    /// Kill requests being answered, by key.
    answering: BTreeSet<String>,
    next_sync: u64,
    next_report: u64,
    next_logs: u64,
    next_sweep: u64,
    /// Whether the store failed the last sync (to log once).
    failing_reads: bool,
    /// What the read of the state gave: assignments and the last report.
    recovered_from: Option<(Assigned, Option<Entry>)>,
    /// Why the agent stops, once it must.
    lost: Option<StoreError>,
    refusal: Option<String>,
    nonce_counter: u64,
    /// The leases granted to the claim under way: a record found under one of them is this
    /// agent's own (its create committed, the reply was lost).
    granted: BTreeSet<LeaseId>,
    /// The watch cache of the node's placements and kill requests, with
    /// [`AgentCoreConfig::watch_cache`].
    cache: Option<AgentCache>,
    /// A sync is due at once: the cache changed, or a copy was forgotten.
    sync_wanted: bool,
    /// When the last sync served from the cache ran.
    cache_synced_ms: u64,
    /// The read of the node's state failed: it is sent again at this time.
    read_state_retry: Option<u64>,
    /// The placements decoded and checked, by key, with the `mod_revision` they were read at:
    /// an entry unchanged since the last sync is not decoded again.
    parsed: BTreeMap<String, (Revision, Parsed)>,
}

/// One placement entry, decoded and checked: the assignment and its incarnation, or why it was
/// refused.
type Parsed = Result<(Assignment, Revision), String>;

/// How often an agent whose watch cache serves syncs them anyway, with nothing changed, in
/// milliseconds: a safety net, not the way changes arrive.
pub const CACHE_RESYNC_MS: u64 = 10_000;

/// The agent's watch cache: one read of its placements and kill requests, then a watch from that
/// read's revision ([`crate::cache::CacheCore`], as the controller host keeps one).
#[derive(Debug)]
struct AgentCache {
    core: CacheCore,
    /// The watch following it, once asked for.
    watch: Option<ReqId>,
    /// A full read is in flight.
    reading: bool,
    /// A failed read is tried again no earlier than this.
    retry_ms: u64,
    /// Read your writes: the newest revision this agent committed under the cached prefixes.
    /// The cache serves no sync until it has caught up with it.
    seen: Revision,
    /// The lease the cache was read under. A new lease reads it again: the node may have been
    /// lost meanwhile, and what the cache showed then must not be acted on under the new one.
    lease: Option<LeaseId>,
}

/// The assignments of a node by copy identity, each with its incarnation.
pub(crate) type Assigned = BTreeMap<String, (Assignment, Revision)>;

impl AgentCore {
    /// A machine that starts claiming its node's name at `now_ms`. Step it with
    /// [`AgentInput::Tick`] to get its first requests.
    pub fn new(cfg: AgentCoreConfig, now_ms: u64) -> Self {
        Self {
            next_id: 1,
            pending: BTreeMap::new(),
            out: Vec::new(),
            lease: LeaseSt::Claiming {
                step: ClaimStep::Read,
                fresh: false,
                attempt: 0,
                sent: now_ms,
                waiting: None,
            },
            life: Life::Claiming,
            copies: BTreeMap::new(),
            dirty: true,
            report_rev: 0,
            queue: VecDeque::new(),
            report_in_flight: false,
            events: Vec::new(),
            events_in_flight: false,
            shown: BTreeMap::new(),
            refused_keys: BTreeSet::new(),
            live_written: None,
            live_in_flight: false,
            sync_in_flight: false,
            answering: BTreeSet::new(),
            next_sync: now_ms,
            next_report: now_ms,
            next_logs: now_ms,
            next_sweep: now_ms,
            failing_reads: false,
            recovered_from: None,
            lost: None,
            refusal: None,
            nonce_counter: 0,
            granted: BTreeSet::new(),
            cache: cfg.watch_cache.then(|| {
                let node = &cfg.node;
                AgentCache {
                    core: CacheCore::new(&[&placements_of(node), &remote::kills_of(node)]),
                    watch: None,
                    reading: false,
                    retry_ms: now_ms,
                    seen: 0,
                    lease: None,
                }
            }),
            sync_wanted: false,
            cache_synced_ms: now_ms,
            read_state_retry: None,
            parsed: BTreeMap::new(),
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AgentCoreConfig {
        &self.cfg
    }

    /// The lease this agent holds now, if it holds one and is not fenced.
    pub fn held_lease(&self) -> Option<LeaseId> {
        match self.lease {
            LeaseSt::Held {
                lease,
                termed: false,
                ..
            } => Some(lease),
            _ => None,
        }
    }

    /// Whether the agent is fenced: it holds no lease it trusts, so it starts nothing.
    pub fn is_fenced(&self) -> bool {
        self.held_lease().is_none()
    }

    /// Whether the machine is done ([`AgentOutput::Stopped`] was returned).
    pub fn is_stopped(&self) -> bool {
        self.life == Life::Stopped
    }

    /// The copies the agent knows, as its state file would record them, by identity.
    pub fn records(&self) -> Vec<CopyRecord> {
        self.copies.values().map(|l| l.record.clone()).collect()
    }

    /// How long after observing its copies at `observed_ms` the agent writes the report: the
    /// configured report delay, or the next entry of the jittered schedule when there is one
    /// (each call takes one entry). The one place that decides it.
    pub fn report_delay_ms(&self, observed_ms: u64) -> u64 {
        let _ = observed_ms;
        self.cfg.report_delays.next_ms(self.cfg.report_delay_ms)
    }

    /// Hands the machine one input at `now_ms` (its host clock, never going backwards) and
    /// returns what to do, in order. The last output is a [`AgentOutput::Wake`] unless the
    /// machine has stopped.
    pub fn step(&mut self, now_ms: u64, input: AgentInput) -> Vec<AgentOutput> {
        if self.life == Life::Stopped {
            return Vec::new();
        }
        let now = now_ms;
        match input {
            AgentInput::Tick => {}
            AgentInput::Replied(r) => {
                if let Some(p) = self.pending.remove(&r.id) {
                    self.on_result(now, r.id, p.purpose, r.result);
                }
            }
            AgentInput::WatchDelivery(d) => self.on_watch(now, d),
            AgentInput::Started {
                copy,
                pid,
                start_ticks,
            } => self.on_started(now, &copy, pid, start_ticks),
            AgentInput::StartFailed { copy, why } => self.on_start_failed(now, &copy, &why),
            AgentInput::Exited { copy, how } => self.on_exited(now, &copy, how),
            AgentInput::ProbeDone { copy, ok } => {
                if let Some(l) = self.copies.get_mut(&copy) {
                    l.probing = false;
                    if ok {
                        l.probe_ok = true;
                    } else {
                        l.next_check_ms = now + READINESS_RETRY_MS;
                    }
                }
            }
            AgentInput::Recovered(r) => {
                if self.life == Life::Recovering {
                    self.on_recovered(now, r);
                }
            }
            AgentInput::Shutdown => self.begin_shutdown(now),
        }
        self.expire(now);
        self.advance(now);
        if self.life != Life::Stopped {
            let wake = self.next_wake(now);
            self.out.push(AgentOutput::Wake(Wake(wake)));
        }
        std::mem::take(&mut self.out)
    }

    // ----- plumbing -----

    fn log(&mut self, line: impl Into<String>) {
        self.out.push(AgentOutput::Log(line.into()));
    }

    fn send(&mut self, now: u64, request: StoreRequest, purpose: Purpose) -> ReqId {
        let id = self.next_id;
        self.next_id += 1;
        let timeout = match purpose {
            Purpose::Renew { .. } => self.ttl_ms().max(1),
            _ => self.cfg.request_timeout_ms,
        };
        self.pending.insert(
            id,
            Pending {
                deadline: now + timeout,
                purpose,
            },
        );
        self.out.push(AgentOutput::Store { id, request });
        id
    }

    fn ttl_ms(&self) -> u64 {
        match self.lease {
            LeaseSt::Held { ttl_ms, .. } => ttl_ms,
            _ => self.cfg.lease_ttl_ms,
        }
    }

    /// Requests past their deadline fail as if the store had said so.
    fn expire(&mut self, now: u64) {
        let late: Vec<ReqId> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            if let Some(p) = self.pending.remove(&id) {
                let timeout = p.deadline;
                let why = StoreError::Unavailable(format!(
                    "no reply by {timeout}ms (the request's deadline)"
                ));
                self.on_result(now, id, p.purpose, Err(why));
            }
        }
    }

    fn next_wake(&self, now: u64) -> u64 {
        let mut t = u64::MAX;
        let mut at = |x: u64| t = t.min(x.max(now));
        for p in self.pending.values() {
            at(p.deadline);
        }
        match &self.lease {
            LeaseSt::Claiming {
                step: ClaimStep::Wait(until),
                ..
            } => at(*until),
            LeaseSt::Claiming { waiting: None, .. } => at(now),
            LeaseSt::Held {
                ok_sent,
                ttl_ms,
                next_renewal,
                termed,
                in_flight,
                ..
            } => {
                // Fenced (termed), no renewal goes out: its time is no reason to wake.
                if *in_flight < RENEWALS_IN_FLIGHT && !*termed {
                    at(*next_renewal);
                }
                let (term, kill) = fence_times_ms(*ok_sent, *ttl_ms);
                at(if *termed { kill } else { term });
            }
            _ => {}
        }
        // Only what the next step would act on: a timer whose work waits for a reply (a sync
        // or a report in flight) or for a start to answer wakes nobody, or the machine spins.
        if matches!(self.life, Life::Running) && !self.is_fenced() {
            if !self.sync_in_flight {
                at(self.next_sync_ms());
                // The cache's read is driven with the sync, so only when no sync is in flight.
                if let Some(c) = self
                    .cache
                    .as_ref()
                    .filter(|c| !c.reading && c.watch.is_none())
                {
                    at(c.retry_ms);
                }
            }
            at(self.next_report);
            if let Some((due, _)) = self.queue.front().filter(|_| !self.report_in_flight) {
                at(*due);
            }
            at(self.next_logs);
        }
        if let Life::Draining { deadline } = self.life {
            at(deadline);
        }
        if let Some(t) = self
            .read_state_retry
            .filter(|_| self.life == Life::ReadingState)
        {
            at(t);
        }
        let simulated = self.cfg.simulate_copies;
        for l in self.copies.values().filter(|l| !l.exited()) {
            if l.record.pid == 0 && !simulated {
                // Its start is under way: nothing happens to it before it answers.
                continue;
            }
            if let Some(k) = l.kill_at_ms.filter(|_| !l.killed && l.record.pid != 0) {
                at(k);
            }
            if l.record.phase == Phase::Starting && l.kill_at_ms.is_none() {
                match &l.record.assignment.readiness {
                    None => at(l.record.started_ms + l.record.assignment.startup_ms),
                    Some(_) if !l.probing && !l.probe_ok => at(l.next_check_ms),
                    Some(_) => {}
                }
            }
        }
        if t == u64::MAX {
            now + 1_000
        } else {
            t
        }
    }

    // ----- the lease -----

    fn record(&self, now: u64, lease: LeaseId, ttl_ms: u64) -> NodeRecord {
        NodeRecord {
            node: self.cfg.node.clone(),
            host: self.cfg.host.clone(),
            place: self.cfg.place.clone(),
            agent_pid: self.cfg.agent_pid,
            acquired_ms: now,
            ttl_ms,
            report_every_ms: self.cfg.report_every_ms,
            lease,
        }
    }

    /// Sends the request of the current claim step, if it has none in flight.
    fn drive_claim(&mut self, now: u64) {
        let LeaseSt::Claiming {
            step,
            waiting: None,
            ..
        } = self.lease.clone()
        else {
            return;
        };
        let key = node_key(&self.cfg.node);
        let request = match step {
            ClaimStep::Wait(until) => {
                if now < until {
                    return;
                }
                self.set_claim_step(ClaimStep::Read);
                if let LeaseSt::Claiming { fresh: true, .. } = self.lease {
                    self.fence_kill_all();
                }
                return self.drive_claim(now);
            }
            ClaimStep::Revoke(old) => StoreRequest::Revoke(old),
            ClaimStep::Read => StoreRequest::Read {
                prefixes: vec![key],
            },
            ClaimStep::Grant => StoreRequest::Grant {
                ttl: std::time::Duration::from_millis(self.cfg.lease_ttl_ms),
            },
            ClaimStep::Create(lease) => {
                let mine = self.record(now, lease, self.cfg.lease_ttl_ms);
                StoreRequest::Commit(Txn::new().expect(&key, 0).put_leased(
                    &key,
                    encode(&mine),
                    lease,
                ))
            }
            ClaimStep::GiveBack(lease) => StoreRequest::Revoke(lease),
            ClaimStep::KeepAlive { lease, .. } => StoreRequest::KeepAlive(lease),
            ClaimStep::TakeOver {
                lease,
                ttl_ms,
                mod_revision,
                acquired_ms,
            } => {
                // The node's tenure goes on across a takeover: the earlier agent's last report
                // (its copies live on, to be adopted) still counts until this one reports. A
                // new `acquired_ms` would drop it from the ledger, and a pass in between would
                // count the node's copies as gone and create them again.
                let mine = self.record(acquired_ms, lease, ttl_ms);
                StoreRequest::Commit(Txn::new().expect(&key, mod_revision).put_leased(
                    &key,
                    encode(&mine),
                    lease,
                ))
            }
        };
        if matches!(step, ClaimStep::Grant | ClaimStep::KeepAlive { .. }) {
            if let LeaseSt::Claiming { sent, .. } = &mut self.lease {
                *sent = now;
            }
        }
        let id = self.send(now, request, Purpose::Claim);
        if let LeaseSt::Claiming { waiting, .. } = &mut self.lease {
            *waiting = Some(id);
        }
    }

    fn set_claim_step(&mut self, next: ClaimStep) {
        if let LeaseSt::Claiming { step, waiting, .. } = &mut self.lease {
            *step = next;
            *waiting = None;
        }
    }

    /// Carries the claim one step on after a reply.
    fn on_claim(&mut self, now: u64, result: StoreResult) {
        let LeaseSt::Claiming {
            step,
            fresh,
            attempt,
            sent,
            ..
        } = self.lease.clone()
        else {
            return;
        };
        if let LeaseSt::Claiming { waiting, .. } = &mut self.lease {
            *waiting = None;
        }
        let key = node_key(&self.cfg.node);
        match (step, result) {
            (ClaimStep::Revoke(_), Ok(_) | Err(StoreError::LeaseExpired(_))) => {
                self.set_claim_step(ClaimStep::Read)
            }
            (ClaimStep::Read, Ok(StoreReply::Read { read, .. })) => {
                match read.entries.into_iter().find(|e| e.key == key) {
                    None => self.set_claim_step(ClaimStep::Grant),
                    Some(entry) => {
                        let held: NodeRecord = match decode(&entry) {
                            Ok(h) => h.value,
                            Err(e) => return self.claim_failed(now, e.into()),
                        };
                        let mine = self.record(now, 0, self.cfg.lease_ttl_ms);
                        let ours = |l: &LeaseId| {
                            self.granted.contains(l) || (!fresh && held.same_place(&mine))
                        };
                        match entry.lease.filter(ours) {
                            Some(lease) => self.set_claim_step(ClaimStep::KeepAlive {
                                lease,
                                ttl_ms: held.ttl_ms,
                                mod_revision: entry.mod_revision,
                                acquired_ms: held.acquired_ms,
                            }),
                            None => self.claim_failed(
                                now,
                                NodeError::Taken {
                                    node: self.cfg.node.clone(),
                                    pid: held.agent_pid,
                                    host: held.host,
                                    place: held.place,
                                },
                            ),
                        }
                    }
                }
            }
            (ClaimStep::Grant, Ok(StoreReply::Granted(lease))) => {
                self.granted.insert(lease);
                self.set_claim_step(ClaimStep::Create(lease))
            }
            (ClaimStep::Create(lease), Ok(_)) => {
                self.held(now, lease, self.cfg.lease_ttl_ms, sent, false)
            }
            (ClaimStep::Create(lease), Err(e)) if e.is_conflict() => {
                self.set_claim_step(ClaimStep::GiveBack(lease))
            }
            (ClaimStep::GiveBack(_), _) => self.claim_retry(now, attempt),
            (
                ClaimStep::KeepAlive {
                    lease,
                    ttl_ms,
                    mod_revision,
                    acquired_ms,
                },
                Ok(_),
            ) => self.set_claim_step(ClaimStep::TakeOver {
                lease,
                ttl_ms,
                mod_revision,
                acquired_ms,
            }),
            (ClaimStep::KeepAlive { .. }, Err(StoreError::LeaseExpired(_))) => {
                self.claim_retry(now, attempt)
            }
            (ClaimStep::TakeOver { lease, ttl_ms, .. }, Ok(_)) => {
                self.held(now, lease, ttl_ms, sent, true)
            }
            (ClaimStep::TakeOver { .. }, Err(e))
                if e.is_conflict() || matches!(e, StoreError::LeaseExpired(_)) =>
            {
                self.claim_retry(now, attempt)
            }
            (_, Err(e)) => self.claim_failed(now, e.into()),
            (_, Ok(other)) => self.claim_failed(
                now,
                StoreError::Unavailable(format!("unexpected reply {other:?}")).into(),
            ),
        }
    }

    fn claim_retry(&mut self, now: u64, attempt: u32) {
        if attempt + 1 >= CLAIM_ATTEMPTS {
            let key = node_key(&self.cfg.node);
            return self.claim_failed(
                now,
                StoreError::Unavailable(format!("{key} kept changing while this agent claimed it"))
                    .into(),
            );
        }
        if let LeaseSt::Claiming { attempt: a, .. } = &mut self.lease {
            *a = attempt + 1;
        }
        self.set_claim_step(ClaimStep::Wait(now + CLAIM_RETRY_MS));
    }

    fn claim_failed(&mut self, now: u64, e: NodeError) {
        let fresh = matches!(self.lease, LeaseSt::Claiming { fresh: true, .. });
        let transient = matches!(&e, NodeError::Store(s) if !s.is_lost());
        if !fresh && !transient {
            // The first claim, refused or on a store gone for good: the agent cannot run.
            self.lease = LeaseSt::Released;
            return self.stop_now(Err(AgentError::Node(e)));
        }
        if !fresh {
            // A store that does not answer yet is no reason to exit: copies of an earlier agent
            // of this node may be running, and only this agent can adopt or stop them (found by
            // `setpoint chaos`: an agent restarted while cut off exited and left them unwatched).
            self.log(format!("cannot claim the node yet: {e} (retrying)"));
            let every = renew_every_ms(self.cfg.lease_ttl_ms);
            if let LeaseSt::Claiming { attempt, .. } = &mut self.lease {
                *attempt = 0;
            }
            return self.set_claim_step(ClaimStep::Wait(now + every));
        }
        if e.is_refusal() {
            self.log(format!("cannot rejoin: {e}"));
            self.refusal = Some(e.to_string());
            self.lease = LeaseSt::Refused;
            return self.begin_shutdown(now);
        }
        self.log(format!("cannot rejoin yet: {e}"));
        let every = renew_every_ms(self.cfg.lease_ttl_ms);
        self.set_claim_step(ClaimStep::Wait(now + every));
    }

    /// The name is held under `lease`, whose end is counted from `sent`.
    fn held(&mut self, now: u64, lease: LeaseId, ttl_ms: u64, sent: u64, adopted: bool) {
        let first = self.life == Life::Claiming;
        self.granted.clear();
        self.lease = LeaseSt::Held {
            lease,
            ttl_ms,
            ok_sent: sent,
            next_renewal: now + renew_every_ms(ttl_ms),
            termed: false,
            failing: false,
            in_flight: 0,
        };
        if first {
            self.log(format!(
                "holds node lease {lease} (ttl {ttl_ms}ms{})",
                if adopted {
                    ", taken over from the previous agent here"
                } else {
                    ""
                }
            ));
            self.life = Life::ReadingState;
            self.read_state(now);
        } else {
            self.log(format!("rejoined under lease {lease}"));
        }
    }

    /// Reads the node's assignments and last report, before recovery.
    fn read_state(&mut self, now: u64) {
        self.read_state_retry = None;
        let node = &self.cfg.node;
        let prefixes = vec![placements_of(node), report_key(node)];
        self.send(now, StoreRequest::Read { prefixes }, Purpose::ReadState);
    }

    /// Renews and fences, while the lease is held.
    fn keep_lease(&mut self, now: u64) {
        let LeaseSt::Held {
            lease,
            ttl_ms,
            ok_sent,
            next_renewal,
            termed,
            in_flight,
            ..
        } = self.lease.clone()
        else {
            return;
        };
        let (term_at, kill_at) = fence_times_ms(ok_sent, ttl_ms);
        if !termed && now >= term_at {
            if let LeaseSt::Held { termed, .. } = &mut self.lease {
                *termed = true;
            }
            // Observations taken before the fence must never reach the ledger.
            self.queue.clear();
            let n = self.signal_all(CopySignal::Term);
            self.log(format!(
                "lease {lease} not renewed for {}ms: fenced, stopping {n} copies (SIGTERM)",
                term_at - ok_sent
            ));
        }
        if termed && now >= kill_at {
            let n = self.signal_all(CopySignal::Kill);
            self.log(format!(
                "fenced: SIGKILL to {n} copies before the lease can end"
            ));
            return self.reclaim(now, lease);
        }
        if !termed && now >= next_renewal && in_flight < RENEWALS_IN_FLIGHT {
            if let LeaseSt::Held {
                next_renewal,
                in_flight,
                ..
            } = &mut self.lease
            {
                *next_renewal = now + renew_every_ms(ttl_ms);
                *in_flight += 1;
            }
            self.send(
                now,
                StoreRequest::KeepAlive(lease),
                Purpose::Renew { lease, sent: now },
            );
        }
    }

    fn on_renewed(&mut self, now: u64, of: LeaseId, sent: u64, result: StoreResult) {
        let LeaseSt::Held {
            lease,
            termed,
            failing,
            ..
        } = self.lease.clone()
        else {
            return;
        };
        if of != lease {
            return;
        }
        if let LeaseSt::Held { in_flight, .. } = &mut self.lease {
            *in_flight = in_flight.saturating_sub(1);
        }
        if termed {
            return;
        }
        match result {
            Ok(_) => {
                if failing {
                    self.log(format!("lease {lease} renewed again"));
                }
                if let LeaseSt::Held {
                    ok_sent, failing, ..
                } = &mut self.lease
                {
                    *ok_sent = (*ok_sent).max(sent);
                    *failing = false;
                }
            }
            Err(StoreError::LeaseExpired(_)) => {
                self.queue.clear();
                let n = self.signal_all(CopySignal::Kill);
                self.log(format!(
                    "lease {lease} has expired: fenced, SIGKILL to {n} copies"
                ));
                self.reclaim(now, lease);
            }
            Err(e) => {
                if !failing {
                    self.log(format!("cannot renew lease {lease}: {e}"));
                    if let LeaseSt::Held { failing, .. } = &mut self.lease {
                        *failing = true;
                    }
                }
            }
        }
    }

    /// Fenced: gives the old lease up and claims the name again under a new one.
    fn reclaim(&mut self, now: u64, old: LeaseId) {
        // The record may still stand under the old lease if its revoke fails (a store without
        // quorum): it is this agent's own, to be kept alive and taken over, not a refusal (found
        // by the netns test: after quorum came back, etcd had reset the old lease to its full
        // TTL, and the agent refused its own record as another agent's and exited).
        self.granted.insert(old);
        self.lease = LeaseSt::Claiming {
            step: ClaimStep::Revoke(old),
            fresh: true,
            attempt: 0,
            sent: now,
            waiting: None,
        };
        if matches!(self.life, Life::Draining { .. } | Life::Finishing) {
            // Nothing to rejoin for: the agent is on its way out.
            self.lease = LeaseSt::Released;
        }
    }

    /// Signals every copy that has a process; returns how many.
    fn signal_all(&mut self, signal: CopySignal) -> usize {
        let targets: Vec<(String, u32, u64)> = self
            .copies
            .iter()
            .filter(|(_, l)| !l.exited() && l.record.pid != 0)
            .map(|(c, l)| (c.clone(), l.record.pid, l.record.start_ticks))
            .collect();
        if self.cfg.bug_no_self_fence {
            return targets.len();
        }
        for (copy, pid, start_ticks) in &targets {
            self.out.push(AgentOutput::Signal {
                copy: copy.clone(),
                pid: *pid,
                start_ticks: *start_ticks,
                signal,
            });
        }
        targets.len()
    }

    /// While fenced, every attempt to claim the name again first makes sure nothing survives.
    fn fence_kill_all(&mut self) {
        self.signal_all(CopySignal::Kill);
    }

    // ----- results -----

    fn on_result(&mut self, now: u64, id: ReqId, purpose: Purpose, result: StoreResult) {
        match purpose {
            Purpose::Claim => {
                if matches!(self.lease, LeaseSt::Claiming { waiting: Some(w), .. } if w == id) {
                    self.on_claim(now, result);
                }
            }
            Purpose::Renew { lease, sent } => self.on_renewed(now, lease, sent, result),
            Purpose::ReadState => match result {
                Ok(StoreReply::Read { read, .. }) => {
                    let node = self.cfg.node.clone();
                    let key = report_key(&node);
                    let placements = placements_of(&node);
                    let (placed, rest): (Vec<Entry>, Vec<Entry>) = read
                        .entries
                        .into_iter()
                        .partition(|e| e.key.starts_with(&placements));
                    let (assigned, refused) = parse_assignments(&placed, &node);
                    self.log_refused(refused);
                    let last = rest.into_iter().find(|e| e.key == key);
                    self.recovered_from = Some((assigned, last));
                    self.life = Life::Recovering;
                    self.out.push(AgentOutput::Recover);
                }
                Ok(other) => self.stop_now(Err(AgentError::Store(StoreError::Unavailable(
                    format!("unexpected reply {other:?}"),
                )))),
                Err(e) if e.is_lost() => self.stop_now(Err(AgentError::Store(e))),
                Err(e) => {
                    // A lost packet or a slow store must not end the agent before it started
                    // (found by `setpoint chaos`: the node's names stayed held for good).
                    self.log(format!(
                        "cannot read the node's state: {e} (retrying every {} ms)",
                        self.cfg.sync_every_ms
                    ));
                    self.read_state_retry = Some(now + self.cfg.sync_every_ms);
                }
            },
            Purpose::Sync { lease } => {
                self.sync_in_flight = false;
                if self.life != Life::Running || self.held_lease() != Some(lease) {
                    // Read before the fence or the shutdown, or under a lease since lost (the
                    // node may have been lost meanwhile and its names given to other nodes):
                    // never acted on.
                    return;
                }
                match result {
                    Ok(StoreReply::Read { read, .. }) => {
                        if self.failing_reads {
                            self.log("the store answers again");
                            self.failing_reads = false;
                        }
                        self.on_sync_read(now, read);
                    }
                    Ok(_) => {}
                    Err(e) if e.is_lost() => self.lose(now, e),
                    Err(e) => {
                        if !self.failing_reads {
                            self.log(format!(
                                "cannot read assignments: {e} (retrying; logged again when it answers)"
                            ));
                            self.failing_reads = true;
                        }
                    }
                }
            }
            Purpose::Report { report, last } => {
                self.report_in_flight = false;
                match result {
                    Ok(StoreReply::Committed(rev)) => {
                        self.report_rev = rev;
                        self.log_ledger_changes(&report, now);
                    }
                    Ok(_) => {}
                    Err(StoreError::Conflict { found, .. }) if found != self.report_rev => {
                        self.log(
                            "the report changed under this agent: is another agent running as this node?",
                        );
                        self.report_rev = found;
                        self.send_report(now, report, last);
                        return;
                    }
                    Err(e) if e.is_lost() && !last => self.lose(now, e),
                    Err(e) if last => self.log(format!("cannot write the last report: {e}")),
                    Err(e) => self.log(format!("cannot report: {e}")),
                }
                if last {
                    self.finish_events(now);
                }
            }
            Purpose::Live { lease, copies } => {
                self.live_in_flight = false;
                match result {
                    Ok(_) => self.live_written = Some((lease, copies)),
                    Err(e) => self.log(format!("cannot write the live record: {e}")),
                }
            }
            Purpose::Events { mut batch, last } => {
                self.events_in_flight = false;
                match result {
                    Ok(_) => {}
                    Err(StoreError::Conflict {
                        key, expected: 0, ..
                    }) => {
                        // Written before (a repeat): drop it, write the rest.
                        batch.retain(|(k, _)| *k != key);
                        if !batch.is_empty() {
                            return self.send_events(now, batch, last);
                        }
                    }
                    Err(e) if e.is_lost() && !last => {
                        self.lose(now, e);
                    }
                    Err(e) => {
                        self.log(format!("cannot write the event log: {e}"));
                        if !last {
                            batch.append(&mut self.events);
                            self.events = batch;
                        } else {
                            self.events.clear();
                        }
                    }
                }
                if last {
                    // The rest of the log, a transaction at a time; then the release.
                    self.finish_events(now);
                }
            }
            Purpose::KillAnswer { key } => {
                self.answering.remove(&key);
                if let (Ok(StoreReply::Committed(rev)), Some(c)) = (&result, &mut self.cache) {
                    c.seen = c.seen.max(*rev);
                }
                match result {
                    Ok(_) | Err(StoreError::LeaseExpired(_)) => {}
                    Err(e) if e.is_conflict() => {}
                    Err(e) => self.log(format!("cannot answer a kill request: {e}")),
                }
            }
            Purpose::CacheRead { lease } => self.on_cache_read(now, lease, result),
            Purpose::CacheWatch => {
                if !matches!(result, Ok(StoreReply::Watching)) {
                    // Not established (or not in time): read again and watch again.
                    self.cache_lost(now);
                }
            }
            Purpose::Release => {
                if let Err(e) = result {
                    self.log(format!("cannot give up the node lease: {e}"));
                }
                self.lease = LeaseSt::Released;
                self.log("stopped");
                let end = match self.refusal.take() {
                    Some(why) => Err(AgentError::Replaced(why)),
                    None => Ok(()),
                };
                self.stop_now(end);
            }
        }
    }

    fn stop_now(&mut self, result: Result<(), AgentError>) {
        if let Some(id) = self.cache.as_mut().and_then(|c| c.watch.take()) {
            self.cancel(id);
        }
        self.life = Life::Stopped;
        self.pending.clear();
        self.out.push(AgentOutput::Stopped(result));
    }

    fn lose(&mut self, now: u64, e: StoreError) {
        if self.lost.is_some() {
            return;
        }
        self.log(format!("{e}: this agent stops its copies and exits"));
        self.lost = Some(e);
        self.begin_shutdown(now);
    }

    // ----- copies -----

    fn on_started(&mut self, now: u64, copy: &str, pid: u32, start_ticks: u64) {
        let fenced = self.is_fenced() || !matches!(self.life, Life::Running);
        let Some(l) = self.copies.get_mut(copy) else {
            // Forgotten meanwhile: nobody wants it.
            self.out.push(AgentOutput::Signal {
                copy: copy.to_owned(),
                pid,
                start_ticks,
                signal: CopySignal::Kill,
            });
            return;
        };
        if l.exited() || l.record.pid != 0 {
            return;
        }
        l.record.pid = pid;
        l.record.start_ticks = start_ticks;
        l.record.started_ms = now;
        let record = l.record.clone();
        self.dirty = true;
        self.log(format!("started {copy} (pid {pid})"));
        self.save();
        self.log_event(CopyEventKind::Start, &record, now);
        if fenced {
            // The lease was lost (or the agent is stopping) while the process started: it may
            // not run.
            if let Some(l) = self.copies.get_mut(copy) {
                l.kill_at_ms = Some(now);
            }
            self.out.push(AgentOutput::Signal {
                copy: copy.to_owned(),
                pid,
                start_ticks,
                signal: CopySignal::Kill,
            });
        }
    }

    fn on_start_failed(&mut self, now: u64, copy: &str, why: &str) {
        let Some(l) = self.copies.get_mut(copy) else {
            return;
        };
        if l.exited() {
            return;
        }
        l.record.started_ms = now;
        l.mark_exited(now, format!("failed to start: {why}"));
        let record = l.record.clone();
        self.dirty = true;
        self.log(format!("cannot start {copy}: {why}"));
        self.save();
        self.log_event(CopyEventKind::Start, &record, now);
        self.log_event(CopyEventKind::Exit, &record, now);
    }

    fn on_exited(&mut self, now: u64, copy: &str, how: Ended) {
        let Some(l) = self.copies.get_mut(copy) else {
            return;
        };
        if l.exited() {
            return;
        }
        l.mark_exited(now, how.to_string());
        let record = l.record.clone();
        self.dirty = true;
        self.log(format!("{copy} ended: {how}"));
        self.log_event(CopyEventKind::Exit, &record, now);
        // A copy stopped because its assignment is gone has nothing left to report.
        if record.stopping {
            self.copies.remove(copy);
            // Its name may be assigned here again, waiting for it to be forgotten.
            self.sync_wanted = true;
        }
    }

    /// Promotions, overdue kills, readiness probes, simulated copies.
    fn watch(&mut self, now: u64) {
        let simulated = self.cfg.simulate_copies;
        let mut happened = Vec::new();
        let mut gone = Vec::new();
        let mut out = Vec::new();
        let mut lines = Vec::new();
        for (copy, l) in &mut self.copies {
            if l.exited() {
                continue;
            }
            if l.record.pid == 0 {
                if !simulated {
                    // Its start is under way.
                    continue;
                }
                if l.kill_at_ms.is_some() {
                    let how = "stopped (simulated copy)".to_owned();
                    lines.push(format!("{copy} ended: {how}"));
                    l.mark_exited(now, how);
                    happened.push((CopyEventKind::Exit, l.record.clone()));
                    self.dirty = true;
                    if l.record.stopping {
                        gone.push(copy.clone());
                    }
                    continue;
                }
            }
            if let Some(t) = l.kill_at_ms {
                if !l.killed && now >= t && l.record.pid != 0 {
                    lines.push(format!("{copy} outlived its grace period: SIGKILL"));
                    out.push(AgentOutput::Signal {
                        copy: copy.clone(),
                        pid: l.record.pid,
                        start_ticks: l.record.start_ticks,
                        signal: CopySignal::Kill,
                    });
                    l.killed = true;
                }
                continue;
            }
            if l.record.phase != Phase::Starting {
                continue;
            }
            let ready = match &l.record.assignment.readiness {
                None => now >= l.record.started_ms + l.record.assignment.startup_ms,
                Some(cmd) => {
                    if !l.probe_ok && !l.probing && now >= l.next_check_ms {
                        l.probing = true;
                        out.push(AgentOutput::Probe {
                            copy: copy.clone(),
                            command: cmd.clone(),
                            env: l.record.assignment.env.clone(),
                        });
                    }
                    l.probe_ok
                }
            };
            if ready {
                l.record.phase = Phase::Running;
                l.record.ready_ms = Some(now);
                happened.push((CopyEventKind::Ready, l.record.clone()));
                self.dirty = true;
            }
        }
        for line in lines {
            self.log(line);
        }
        self.out.extend(out);
        for (kind, record) in happened {
            self.log_event(kind, &record, now);
        }
        for copy in gone {
            self.copies.remove(&copy);
            self.sync_wanted = true;
        }
    }

    /// Starts what is assigned and not started; stops what runs and is no longer assigned.
    fn sync(&mut self, assigned: Assigned, now: u64) {
        let unwanted: Vec<(String, bool, u64)> = self
            .copies
            .iter()
            .filter(|(copy, l)| {
                assigned
                    .get(*copy)
                    .is_none_or(|(_, inc)| *inc != l.record.incarnation)
            })
            .map(|(c, l)| (c.clone(), l.exited(), l.record.assignment.grace_ms))
            .collect();
        for (copy, exited, grace) in unwanted {
            if exited {
                self.copies.remove(&copy);
                self.dirty = true;
            } else {
                self.begin_stop(&copy, grace, now);
            }
        }
        // A name assigned again waits until its earlier copy has stopped and been forgotten.
        let batch: Vec<(Assignment, Revision)> = assigned
            .into_iter()
            .filter(|(copy, _)| !self.copies.contains_key(copy))
            .map(|(_, a)| a)
            .collect();
        self.start_all(batch, now);
    }

    fn new_nonce(&mut self) -> String {
        match self.cfg.nonces {
            Nonces::Random => crate::sandbox::new_nonce(),
            Nonces::Counter(seed) => {
                self.nonce_counter += 1;
                format!("{seed:016x}{:016x}", self.nonce_counter)
            }
        }
    }

    /// Records each copy with a fresh nonce (one state-file write for all), then asks for each
    /// start. The nonce is on disk before the process exists, so after a crash at any point a
    /// process holding it is this agent's and one without it is not.
    fn start_all(&mut self, batch: Vec<(Assignment, Revision)>, now: u64) {
        if batch.is_empty() {
            return;
        }
        let simulated = self.cfg.simulate_copies;
        let mut starts = Vec::with_capacity(batch.len());
        for (a, incarnation) in batch {
            let nonce = if simulated {
                String::new()
            } else {
                self.new_nonce()
            };
            let record = CopyRecord {
                assignment: a,
                incarnation,
                pid: 0,
                start_ticks: 0,
                started_ms: now,
                phase: Phase::Starting,
                ready_ms: None,
                exited_ms: None,
                exit: None,
                stopping: false,
                nonce,
            };
            let copy = record.assignment.copy.clone();
            if simulated {
                self.log_event(CopyEventKind::Start, &record, now);
            } else {
                starts.push(AgentOutput::Start {
                    copy: copy.clone(),
                    assignment: record.assignment.clone(),
                    nonce: record.nonce.clone(),
                });
            }
            self.copies.insert(copy, Local::new(record));
        }
        self.dirty = true;
        self.save_now();
        self.out.extend(starts);
    }

    fn begin_stop(&mut self, copy: &str, grace_ms: u64, now: u64) {
        let Some(l) = self.copies.get_mut(copy) else {
            return;
        };
        if l.exited() || l.record.stopping {
            return;
        }
        l.record.stopping = true;
        l.kill_at_ms = Some(now + grace_ms);
        let (pid, start_ticks) = (l.record.pid, l.record.start_ticks);
        self.dirty = true;
        self.log(format!("stopping {copy} (pid {pid})"));
        if pid != 0 {
            self.out.push(AgentOutput::Signal {
                copy: copy.to_owned(),
                pid,
                start_ticks,
                signal: CopySignal::Term,
            });
        }
    }

    /// Carries out the kill requests addressed to this node (SIGKILL to the copy's group,
    /// checked by start time) and writes each outcome back for the `kill` command.
    fn carry_out_kills(&mut self, now: u64, kills: Vec<Kill>) {
        let node = self.cfg.node.clone();
        for (key, mut req, rev, lease) in kills {
            if self.answering.contains(&key) {
                continue;
            }
            let outcome = match self.copies.get(&req.copy) {
                Some(l) if l.record.incarnation == req.incarnation && !l.exited() => {
                    if l.record.pid == 0 {
                        format!("{} had already ended", req.copy)
                    } else {
                        self.out.push(AgentOutput::Signal {
                            copy: req.copy.clone(),
                            pid: l.record.pid,
                            start_ticks: l.record.start_ticks,
                            signal: CopySignal::Kill,
                        });
                        format!("killed pid {} on {node}", l.record.pid)
                    }
                }
                _ => format!("{} does not run on {node}", req.copy),
            };
            self.log(format!("kill request for {}: {outcome}", req.copy));
            req.outcome = Some(outcome);
            let txn = remote::answer_txn(&key, &req, rev, lease);
            self.answering.insert(key.clone());
            self.send(now, StoreRequest::Commit(txn), Purpose::KillAnswer { key });
        }
    }

    // ----- sync and the watch cache -----

    /// When the next sync is due, if nothing asks for one sooner: every `sync_every_ms` while
    /// syncs read the store; every [`CACHE_RESYNC_MS`] while the watch cache serves them (they
    /// run at once when it changes).
    fn next_sync_ms(&self) -> u64 {
        if self.sync_wanted {
            return 0;
        }
        match self.held_lease() {
            Some(lease) if self.cache_serves(lease) => self
                .next_sync
                .max(self.cache_synced_ms.saturating_add(CACHE_RESYNC_MS)),
            _ => self.next_sync,
        }
    }

    /// Whether the watch cache can serve a sync under `lease`: it follows the store, was read
    /// under this lease, and has caught up with this agent's own writes.
    fn cache_serves(&self, lease: LeaseId) -> bool {
        self.cache.as_ref().is_some_and(|c| {
            c.core.is_live() && c.lease == Some(lease) && c.core.revision() >= c.seen
        })
    }

    /// Syncs if one is due: from the watch cache when it can serve, else by a read of the store.
    fn drive_sync(&mut self, now: u64, lease: LeaseId) {
        if now < self.next_sync_ms() {
            return;
        }
        self.sync_wanted = false;
        self.next_sync = now + self.cfg.sync_every_ms;
        if self.cache_serves(lease) {
            let node = &self.cfg.node;
            let prefixes = [placements_of(node), remote::kills_of(node)];
            let refs: Vec<&str> = prefixes.iter().map(String::as_str).collect();
            let read = self.cache.as_mut().and_then(|c| c.core.read(&refs));
            if let Some(read) = read {
                self.cache_synced_ms = now;
                return self.on_sync_read(now, read);
            }
        }
        if let Some(c) = &mut self.cache {
            c.core.passed_through();
        }
        self.sync_in_flight = true;
        let node = &self.cfg.node;
        let prefixes = vec![placements_of(node), remote::kills_of(node)];
        self.send(
            now,
            StoreRequest::Read { prefixes },
            Purpose::Sync { lease },
        );
    }

    /// Acts on a read of the node's placements and kill requests.
    fn on_sync_read(&mut self, now: u64, read: Read) {
        let node = self.cfg.node.clone();
        let placements = placements_of(&node);
        let (placed, asked): (Vec<Entry>, Vec<Entry>) = read
            .entries
            .into_iter()
            .partition(|e| e.key.starts_with(&placements));
        let (assigned, forged) = self.parse_placed(&placed);
        self.log_refused(forged);
        self.sync(assigned, now);
        let kills = remote::pending_kills(&asked, &node);
        self.carry_out_kills(now, kills);
    }

    /// [`parse_assignments`], decoding only the entries that changed since the last sync.
    fn parse_placed(&mut self, placed: &[Entry]) -> (Assigned, Vec<(String, String)>) {
        let mut out = BTreeMap::new();
        let mut refused = Vec::new();
        let mut parsed = BTreeMap::new();
        for e in placed {
            let p = match self.parsed.remove(&e.key) {
                Some((rev, p)) if rev == e.mod_revision => p,
                _ => parse_assignment(e, &self.cfg.node),
            };
            match &p {
                Ok((a, incarnation)) => {
                    out.insert(a.copy.clone(), (a.clone(), *incarnation));
                }
                Err(why) => refused.push((e.key.clone(), why.clone())),
            }
            parsed.insert(e.key.clone(), (e.mod_revision, p));
        }
        self.parsed = parsed;
        (out, refused)
    }

    /// Starts the cache's full read if it needs one: none yet, its watch was lost, or it was
    /// read under another lease than the one held now.
    fn drive_cache(&mut self, now: u64, lease: LeaseId) {
        let Some(c) = &mut self.cache else { return };
        if c.reading || (c.lease == Some(lease) && c.watch.is_some()) || now < c.retry_ms {
            return;
        }
        let old = c.watch.take();
        c.core.set_live(false);
        c.reading = true;
        c.lease = Some(lease);
        let prefixes = c.core.prefixes().to_vec();
        if let Some(id) = old {
            self.cancel(id);
        }
        self.send(
            now,
            StoreRequest::Read { prefixes },
            Purpose::CacheRead { lease },
        );
    }

    fn on_cache_read(&mut self, now: u64, lease: LeaseId, result: StoreResult) {
        let Some(c) = &mut self.cache else { return };
        c.reading = false;
        let read = match result {
            Ok(StoreReply::Read { read, .. }) if c.lease == Some(lease) => read,
            _ => {
                // Failed, or read under a lease since replaced: read again (a failure after a
                // sync period; syncs read the store meanwhile).
                c.lease = None;
                c.retry_ms = now + self.cfg.sync_every_ms;
                return;
            }
        };
        let after = read.revision;
        c.core.reset(read);
        let prefixes = c.core.prefixes().to_vec();
        let id = self.send(
            now,
            StoreRequest::Watch { prefixes, after },
            Purpose::CacheWatch,
        );
        if let Some(c) = &mut self.cache {
            c.watch = Some(id);
        }
        self.sync_wanted = true;
    }

    fn on_watch(&mut self, now: u64, d: WatchDelivery) {
        let Some(c) = &mut self.cache else { return };
        if c.watch != Some(d.watch) {
            // A watch this machine no longer follows.
            return;
        }
        match d.event {
            WatchEvent::Idle => {}
            WatchEvent::Lost(_) => self.cache_lost(now),
            WatchEvent::Changes { revision, changes } => {
                c.core.apply(revision, changes);
                self.sync_wanted = true;
            }
        }
    }

    /// The cache's watch is gone: it serves nothing until it has read and watched again.
    fn cache_lost(&mut self, now: u64) {
        let Some(c) = &mut self.cache else { return };
        c.core.set_live(false);
        c.lease = None;
        // Read and watch again after a sync period (syncs read the store meanwhile), so that a
        // watch that keeps failing costs a read per period, not a loop.
        c.retry_ms = now + self.cfg.sync_every_ms;
        if let Some(id) = c.watch.take() {
            self.cancel(id);
        }
    }

    /// Asks the driver to end watch `id` (a request without a reply).
    fn cancel(&mut self, id: ReqId) {
        let cancel = self.next_id;
        self.next_id += 1;
        self.out.push(AgentOutput::Store {
            id: cancel,
            request: StoreRequest::CancelWatch(id),
        });
    }

    // ----- recovery -----

    /// Rebuilds the copies from what the driver found: processes proven its own are adopted
    /// (and stopped later if unassigned), dead ones become exited records, and every other
    /// process carrying its mark is foreign: never adopted, logged, and stopped if it runs as
    /// the agent's user (it claims a copy's identity, so leaving it would be a second copy).
    /// Then the first sync and the first report.
    fn on_recovered(&mut self, now: u64, found: Recovery) {
        let (assigned, last_report) = self.recovered_from.take().unwrap_or_default();
        self.report_rev = last_report.as_ref().map_or(0, |e| e.mod_revision);
        let before = last_report
            .as_ref()
            .and_then(|e| decode::<NodeReport>(e).ok())
            .map(|s| s.value);
        if let Some(before) = &before {
            // The ledger still shows what the last agent reported.
            self.log_ledger_changes(before, now);
            self.events.clear();
        }
        let node = self.cfg.node.clone();
        let mut unclaimed = found.unclaimed;
        for FoundRecord {
            mut record,
            process,
        } in found.records
        {
            let copy = record.assignment.copy.clone();
            if let Err(why) = crate::rules::check_assignment(&record.assignment, &node) {
                self.log(format!(
                    "refused the state file's record of {}: {why}",
                    copy.escape_debug()
                ));
                if let Some((pid, start_ticks)) = process {
                    // It is not a copy of this agent's: as foreign as any.
                    unclaimed.push(Marked {
                        pid,
                        start_ticks,
                        copy: copy.clone(),
                        nonce: None,
                        uid: found.own_uid,
                    });
                }
                continue;
            }
            match process.filter(|_| record.phase != Phase::Exited) {
                Some((pid, start_ticks)) => {
                    if record.pid == 0 {
                        // Started, or about to be, when the agent died: its pid was never
                        // recorded, but its nonce was.
                        self.log(format!("adopted unrecorded {copy} (pid {pid})"));
                        record.started_ms = now;
                    } else {
                        self.log(format!("adopted {copy} (pid {pid})"));
                    }
                    record.pid = pid;
                    record.start_ticks = start_ticks;
                    record.stopping = false;
                    self.out.push(AgentOutput::Adopt {
                        copy: copy.clone(),
                        pid,
                        start_ticks,
                    });
                    self.copies.insert(copy, Local::new(record));
                }
                None => {
                    let mut l = Local::new(record);
                    if !l.exited() {
                        // Not proven its own: the pid may be anyone's by now, so it is not
                        // signalled.
                        l.record.pid = 0;
                        l.mark_exited(now, "ended while the agent was down".into());
                        let r = l.record.clone();
                        self.log_event(CopyEventKind::Exit, &r, now);
                    }
                    self.copies.insert(copy, l);
                }
            }
        }
        for m in unclaimed {
            let known = self
                .copies
                .get(&m.copy)
                .is_some_and(|l| l.record.pid == m.pid && l.record.start_ticks == m.start_ticks);
            if known {
                continue;
            }
            if m.uid != found.own_uid {
                self.log(format!(
                    "foreign process {} of user {} carries the mark of {}: not adopted, left alone",
                    m.pid,
                    m.uid,
                    m.copy.escape_debug()
                ));
                continue;
            }
            let assigned_here = assigned.contains_key(&m.copy);
            self.log(format!(
                "foreign process {} carries the mark of {} without its nonce: not adopted{}; stopping it",
                m.pid,
                m.copy.escape_debug(),
                if assigned_here { ", the real copy starts" } else { "" }
            ));
            self.out.push(AgentOutput::StopForeign {
                pid: m.pid,
                start_ticks: m.start_ticks,
                grace_ms: UNKNOWN_GRACE_MS,
            });
        }
        // Copies the store last heard of as exited must not start again, even if the state
        // file was lost.
        if let Some(report) = before {
            for c in report
                .copies
                .into_iter()
                .filter(|c| c.phase == Phase::Exited)
            {
                let Some((a, incarnation)) = assigned.get(&c.copy) else {
                    continue;
                };
                if *incarnation == c.incarnation && !self.copies.contains_key(&c.copy) {
                    let record = CopyRecord {
                        assignment: a.clone(),
                        incarnation: *incarnation,
                        pid: 0,
                        start_ticks: 0,
                        started_ms: c.started_ms,
                        phase: Phase::Exited,
                        ready_ms: c.ready_ms,
                        exited_ms: c.exited_ms,
                        exit: c.exit.clone(),
                        stopping: false,
                        nonce: String::new(),
                    };
                    self.copies.insert(c.copy, Local::new(record));
                }
            }
        }
        self.dirty = true;
        self.life = Life::Running;
        self.sync(assigned, now);
        self.save();
        let first = self.observe(now);
        self.send_report(now, first, false);
        self.log(format!("ready with {} copies", self.copies.len()));
        self.next_sync = now + self.cfg.sync_every_ms;
        self.next_report = now + self.cfg.report_every_ms;
        self.next_logs = now;
        self.next_sweep = now;
    }

    // ----- the running loop -----

    fn advance(&mut self, now: u64) {
        if self.life == Life::Stopped {
            return;
        }
        self.drive_claim(now);
        self.keep_lease(now);
        // A fence that just came down starts the rejoin in this same step.
        self.drive_claim(now);
        if self.life == Life::Stopped {
            return;
        }
        self.watch(now);
        if self.life == Life::ReadingState && self.read_state_retry.is_some_and(|t| now >= t) {
            self.read_state(now);
        }
        match self.life.clone() {
            Life::Running if !self.is_fenced() => {
                if let Some(lease) = self.held_lease().filter(|_| !self.sync_in_flight) {
                    self.drive_cache(now, lease);
                    self.drive_sync(now, lease);
                }
                self.save();
                self.tend_logs(now);
                self.publish_live(now);
                if now >= self.next_report {
                    self.next_report = now + self.cfg.report_every_ms;
                    let due = now + self.report_delay_ms(now);
                    let report = self.observe(now);
                    self.queue.push_back((due, report));
                }
                if !self.report_in_flight {
                    let mut due = None;
                    while self.queue.front().is_some_and(|(at, _)| *at <= now) {
                        due = self.queue.pop_front().map(|(_, r)| r);
                    }
                    if let Some(mut report) = due {
                        report.reported_ms = now;
                        self.send_report(now, report, false);
                    }
                }
                if !self.events.is_empty() && !self.events_in_flight {
                    let batch = events::take_batch(&mut self.events);
                    self.send_events(now, batch, false);
                }
            }
            Life::Running => {
                // Fenced: the copies are being stopped; nothing is read, started or reported.
                self.queue.clear();
                self.save();
            }
            Life::Draining { deadline }
                if self.copies.values().all(Local::exited) || now >= deadline =>
            {
                self.dirty = true;
                self.save_now();
                if let Some(e) = self.lost.take() {
                    return self.stop_now(Err(AgentError::Store(e)));
                }
                self.life = Life::Finishing;
                if self.refusal.is_some() {
                    // The name is another agent's now, and so are its report and its events:
                    // a last report from this one would hide that agent's copies.
                    return self.release(now);
                }
                let last = self.observe(now);
                self.send_report(now, last, true);
            }
            _ => {}
        }
    }

    fn begin_shutdown(&mut self, now: u64) {
        match self.life {
            Life::Draining { .. } | Life::Finishing | Life::Stopped => return,
            Life::Running => {}
            Life::Claiming | Life::ReadingState | Life::Recovering => {
                // Nothing runs yet.
                if let Some(e) = self.lost.take() {
                    return self.stop_now(Err(AgentError::Store(e)));
                }
                self.life = Life::Finishing;
                return self.release(now);
            }
        }
        if self.lost.is_none() {
            self.log("shutting down: stopping copies");
        }
        self.queue.clear();
        let running: Vec<(String, u64)> = self
            .copies
            .iter()
            .filter(|(_, l)| !l.exited())
            .map(|(c, l)| (c.clone(), l.record.assignment.grace_ms))
            .collect();
        let longest = running.iter().map(|r| r.1).max().unwrap_or(0);
        for (copy, grace) in &running {
            self.begin_stop(copy, *grace, now);
            // Stopping for shutdown, not because its assignment went: keep its record as
            // exited so that a restarted agent does not start it again.
            if let Some(l) = self.copies.get_mut(copy) {
                l.record.stopping = false;
            }
        }
        self.life = Life::Draining {
            deadline: now + longest + SHUTDOWN_SLACK_MS,
        };
    }

    fn finish_events(&mut self, now: u64) {
        if self.events.is_empty() {
            return self.release(now);
        }
        let batch = events::take_batch(&mut self.events);
        self.send_events(now, batch, true);
    }

    /// Gives the name up last, with nothing left running: the node is lost at once, and the
    /// controller reassigns its names without waiting for the lease to run out.
    fn release(&mut self, now: u64) {
        match self.lease {
            LeaseSt::Held { lease, .. } => {
                self.send(now, StoreRequest::Revoke(lease), Purpose::Release);
            }
            _ => {
                self.lease = LeaseSt::Released;
                if self.life == Life::Finishing && self.copies.is_empty() && self.refusal.is_none()
                {
                    // Shut down before the agent ever ran.
                }
                self.log("stopped");
                let end = match self.refusal.take() {
                    Some(why) => Err(AgentError::Replaced(why)),
                    None => Ok(()),
                };
                self.stop_now(end);
            }
        }
    }

    fn send_report(&mut self, now: u64, report: NodeReport, last: bool) {
        let key = report_key(&self.cfg.node);
        let txn = Txn::new()
            .expect(&key, self.report_rev)
            .put(&key, encode(&report));
        self.report_in_flight = true;
        self.send(
            now,
            StoreRequest::Commit(txn),
            Purpose::Report { report, last },
        );
    }

    fn send_events(&mut self, now: u64, batch: Vec<(String, String)>, last: bool) {
        let txn = batch.iter().fold(Txn::new(), |t, (k, v)| {
            events::append(t, k.clone(), v.clone())
        });
        self.events_in_flight = true;
        self.send(
            now,
            StoreRequest::Commit(txn),
            Purpose::Events { batch, last },
        );
    }

    /// Writes `/live/{node}` if the set of ready copies changed (or the lease did), at once:
    /// `get` reads it, so it carries no emulated report delay.
    fn publish_live(&mut self, now: u64) {
        let Some(lease) = self.held_lease() else {
            return;
        };
        if self.live_in_flight {
            return;
        }
        let copies = self.live_set();
        if self
            .live_written
            .as_ref()
            .is_some_and(|(l, c)| *l == lease && *c == copies)
        {
            return;
        }
        let record = LiveRecord {
            node: self.cfg.node.clone(),
            observed_ms: now,
            copies: copies.clone(),
        };
        let txn = remote::live_txn(&record, lease);
        self.live_in_flight = true;
        self.send(
            now,
            StoreRequest::Commit(txn),
            Purpose::Live { lease, copies },
        );
    }

    fn tend_logs(&mut self, now: u64) {
        if now < self.next_logs {
            return;
        }
        self.next_logs = now + LOGS_EVERY_MS;
        let sweep = now >= self.next_sweep;
        if sweep {
            self.next_sweep = now + SWEEP_EVERY_MS;
        }
        let running = self
            .copies
            .iter()
            .filter(|(_, l)| !l.exited())
            .map(|(c, _)| c.clone())
            .collect();
        self.out.push(AgentOutput::TendLogs { running, sweep });
    }

    /// Writes the state file if anything changed, unless starts are still being answered: the
    /// pids of a batch of starts go to disk in one write once every start of it has answered,
    /// not one write per copy (a file of N records written N times). Until then the nonces on
    /// disk prove which processes are this agent's.
    fn save(&mut self) {
        let simulated = self.cfg.simulate_copies;
        let starting = self
            .copies
            .values()
            .any(|l| !simulated && !l.exited() && l.record.pid == 0);
        if !starting {
            self.save_now();
        }
    }

    /// Writes the state file if anything changed.
    fn save_now(&mut self) {
        if !self.dirty || !matches!(self.life, Life::Running | Life::Draining { .. }) {
            return;
        }
        self.dirty = false;
        let state = NodeState {
            node: self.cfg.node.clone(),
            agent_pid: self.cfg.agent_pid,
            copies: self.records(),
        };
        self.out.push(AgentOutput::SaveState(state));
    }

    // ----- what the store is told -----

    /// Queues an event-log entry for copy `r`.
    fn log_event(&mut self, kind: CopyEventKind, r: &CopyRecord, at_ms: u64) {
        let event = CopyEvent {
            at_ms,
            node: self.cfg.node.clone(),
            pid: (kind == CopyEventKind::Start).then_some(r.pid),
            commanded: kind == CopyEventKind::Exit && r.stopping,
            how: if kind == CopyEventKind::Exit {
                r.exit.clone()
            } else {
                None
            },
        };
        let key =
            events::copy_event_key(&r.assignment.workload, kind, r.assignment.n, r.incarnation);
        self.events.push((key, encode(&event)));
    }

    /// After `report` was written at `now`: logs the copies it brought onto the ledger and those
    /// it took off.
    fn log_ledger_changes(&mut self, report: &NodeReport, now: u64) {
        let shown: BTreeMap<(String, u64), Revision> = report
            .copies
            .iter()
            .filter(|c| c.phase == Phase::Running)
            .map(|c| ((c.workload.clone(), c.n), c.incarnation))
            .collect();
        let event = encode(&CopyEvent {
            at_ms: now,
            node: self.cfg.node.clone(),
            pid: None,
            commanded: false,
            how: None,
        });
        for ((w, n), inc) in &shown {
            if self.shown.get(&(w.clone(), *n)) != Some(inc) {
                let key = events::copy_event_key(w, CopyEventKind::Seen, *n, *inc);
                self.events.push((key, event.clone()));
            }
        }
        for ((w, n), inc) in &self.shown {
            if shown.get(&(w.clone(), *n)) != Some(inc) {
                let key = events::copy_event_key(w, CopyEventKind::Unseen, *n, *inc);
                self.events.push((key, event.clone()));
            }
        }
        self.shown = shown;
    }

    /// Logs the store entries refused since the last call, each once.
    fn log_refused(&mut self, refused: Vec<(String, String)>) {
        for (key, why) in refused {
            if self.refused_keys.insert(key.clone()) {
                self.log(format!("refused the entry {}: {why}", key.escape_debug()));
            }
        }
    }

    /// The copies running and ready now, as `/live/{node}` shows them.
    fn live_set(&self) -> Vec<LiveCopy> {
        self.copies
            .values()
            .filter(|l| l.record.phase == Phase::Running && !l.record.stopping)
            .map(|l| LiveCopy {
                copy: l.record.assignment.copy.clone(),
                workload: l.record.assignment.workload.clone(),
                owner_uid: l.record.assignment.owner_uid,
                n: l.record.assignment.n,
                incarnation: l.record.incarnation,
                pid: l.record.pid,
            })
            .collect()
    }

    fn observe(&self, now: u64) -> NodeReport {
        let mut copies: Vec<CopyReport> = self
            .copies
            .values()
            .map(|l| {
                let r = &l.record;
                CopyReport {
                    copy: r.assignment.copy.clone(),
                    workload: r.assignment.workload.clone(),
                    owner_uid: r.assignment.owner_uid,
                    n: r.assignment.n,
                    incarnation: r.incarnation,
                    phase: r.phase,
                    pid: r.pid,
                    start_ticks: r.start_ticks,
                    started_ms: r.started_ms,
                    ready_ms: r.ready_ms,
                    exited_ms: r.exited_ms,
                    exit: r.exit.clone(),
                    stopping: r.stopping,
                }
            })
            .collect();
        copies.sort_by(|a, b| (&a.workload, a.n).cmp(&(&b.workload, b.n)));
        NodeReport {
            node: self.cfg.node.clone(),
            observed_ms: now,
            reported_ms: now,
            agent_pid: self.cfg.agent_pid,
            copies,
        }
    }
}

/// When an agent whose last successful renewal was sent at `sent_ms` must act, for a lease of
/// `ttl_ms`: SIGTERM to every copy at 3/4 of the TTL, SIGKILL at 9/10. Both come before the
/// store can expire the lease, which is at least `ttl_ms` after `sent_ms`.
pub fn fence_times_ms(sent_ms: u64, ttl_ms: u64) -> (u64, u64) {
    (sent_ms + ttl_ms * 3 / 4, sent_ms + ttl_ms * 9 / 10)
}

/// How often an agent renews a lease of `ttl_ms`: every quarter of it (at least every 10ms).
pub fn renew_every_ms(ttl_ms: u64) -> u64 {
    (ttl_ms / 4).max(10)
}

/// A kill request addressed to this node: key, request, revision, the requester's lease.
type Kill = (String, remote::KillRequest, Revision, Option<LeaseId>);

/// The assignments among `entries` (a read of the node's placements), by copy identity with
/// their incarnations, and the entries refused with why.
///
/// Nothing read from the store is trusted: an entry that does not decode, breaks a rule of
/// `apply` ([`crate::rules::check_assignment`]) or does not sit at its own key is refused, and
/// never reaches a path or a command.
pub(crate) fn parse_assignments(
    entries: &[Entry],
    node: &str,
) -> (Assigned, Vec<(String, String)>) {
    let mut out = BTreeMap::new();
    let mut refused = Vec::new();
    for e in entries {
        match parse_assignment(e, node) {
            Ok((a, incarnation)) => {
                out.insert(a.copy.clone(), (a, incarnation));
            }
            Err(why) => refused.push((e.key.clone(), why)),
        }
    }
    (out, refused)
}

/// One entry of [`parse_assignments`]: the assignment and its incarnation, or why it is refused.
fn parse_assignment(e: &Entry, node: &str) -> Parsed {
    let a: Assignment = decode(e).map_err(|err| err.to_string())?.value;
    crate::rules::check_assignment(&a, node)?;
    let own = crate::model::placement_key(node, &a.workload, a.n);
    if e.key != own {
        return Err(format!("it sits at {}, not at its own key {own}", e.key));
    }
    Ok((a, e.create_revision))
}

#[cfg(test)]
mod tests {
    //! A tiny synchronous driver: a [`MemoryStore`], fake processes, virtual time in 5ms ticks,
    //! replies delayed or dropped at will.

    use super::*;
    use crate::machine::carry_out;
    use crate::model::placement_key;
    use crate::store::{MemoryStore, Store};

    const TICK: u64 = 5;

    #[derive(Clone, Debug)]
    struct Proc {
        copy: String,
        pid: u32,
        alive: bool,
        /// A signal arrived: it ends at the next tick.
        ending: Option<i32>,
    }

    /// Which store requests lose their reply, by the time they are sent.
    type Dropper = Box<dyn Fn(u64, &StoreRequest) -> bool>;
    /// How much longer a reply takes, by the request and when it was sent.
    type Slower = Box<dyn Fn(u64, &StoreRequest) -> u64>;

    struct World {
        store: std::sync::Arc<MemoryStore>,
        core: AgentCore,
        now: u64,
        procs: Vec<Proc>,
        next_pid: u32,
        /// Starts asked for: (time, copy).
        starts: Vec<(u64, String)>,
        /// Signals sent: (time, copy, signal).
        signals: Vec<(u64, String, CopySignal)>,
        /// Store requests sent: (time, id, request).
        sent: Vec<(u64, ReqId, StoreRequest)>,
        /// Replies on their way: (due, reply).
        replies: Vec<(u64, Replied)>,
        /// Which requests lose their reply (they are carried out).
        drop: Dropper,
        /// Which requests never reach the store.
        cut: Dropper,
        /// How much longer than `delay` each request's reply takes.
        slow: Slower,
        delay: u64,
        saved: Option<NodeState>,
        stopped: Option<Result<(), AgentError>>,
        log: Vec<String>,
        /// Every output, as `{now} {output:?}`.
        trace: Vec<String>,
        /// The last wake asked for.
        wake: u64,
        /// Probes answer this (true: ready).
        probe_ok: bool,
        /// Where in the trace a step asked to be woken at the very time it ran: work it left
        /// undone, or a busy loop.
        busy: Vec<usize>,
    }

    fn config(node: &str) -> AgentCoreConfig {
        AgentCoreConfig {
            lease_ttl_ms: 1_000,
            report_every_ms: 100,
            sync_every_ms: 50,
            request_timeout_ms: 300,
            nonces: Nonces::Counter(7),
            ..AgentCoreConfig::new(node)
        }
    }

    #[test]
    fn a_jittered_schedule_gives_each_report_its_next_delay() {
        let fixed = AgentCore::new(config("n"), 0);
        assert_eq!(
            (fixed.report_delay_ms(0), fixed.report_delay_ms(100)),
            (0, 0)
        );
        let cfg = AgentCoreConfig {
            report_delay_ms: 40,
            report_delays: crate::report_delay::ReportDelays::new(vec![250, 60]),
            ..config("n")
        };
        let core = AgentCore::new(cfg, 0);
        let got: Vec<u64> = (0..3).map(|k| core.report_delay_ms(k * 100)).collect();
        assert_eq!(
            got,
            [250, 60, 250],
            "the schedule in turn, not the fixed 40 ms"
        );
    }

    fn assign(store: &MemoryStore, node: &str, n: u64) {
        let a = Assignment {
            copy: format!("w-{n}"),
            workload: "w".into(),
            owner_uid: 1,
            n,
            node: node.into(),
            command: vec!["sleep".into(), "100".into()],
            startup_ms: 20,
            readiness: None,
            grace_ms: 100,
            created_ms: 0,
            env: CopyEnv::default(),
            generation: 0,
        };
        let key = placement_key(node, "w", n);
        store
            .commit(&Txn::new().expect(&key, 0).put(&key, encode(&a)))
            .unwrap();
    }

    fn unassign(store: &MemoryStore, node: &str, n: u64) {
        store
            .commit(&Txn::new().delete(placement_key(node, "w", n)))
            .unwrap();
    }

    impl World {
        fn new(store: MemoryStore, cfg: AgentCoreConfig) -> Self {
            Self::on(std::sync::Arc::new(store), cfg)
        }

        fn on(store: std::sync::Arc<MemoryStore>, cfg: AgentCoreConfig) -> Self {
            let mut w = World {
                store,
                core: AgentCore::new(cfg, 0),
                now: 0,
                procs: Vec::new(),
                next_pid: 100,
                starts: Vec::new(),
                signals: Vec::new(),
                sent: Vec::new(),
                replies: Vec::new(),
                drop: Box::new(|_, _| false),
                cut: Box::new(|_, _| false),
                slow: Box::new(|_, _| 0),
                delay: 0,
                saved: None,
                stopped: None,
                log: Vec::new(),
                trace: Vec::new(),
                wake: 0,
                probe_ok: true,
                busy: Vec::new(),
            };
            w.input(AgentInput::Tick);
            w
        }

        /// A new agent at the same place, over what the previous one left (its processes, its
        /// state file, the store).
        fn restart(self, cfg: AgentCoreConfig) -> Self {
            let mut w = World {
                core: AgentCore::new(cfg, self.now),
                starts: Vec::new(),
                signals: Vec::new(),
                sent: Vec::new(),
                replies: Vec::new(),
                stopped: None,
                log: Vec::new(),
                trace: Vec::new(),
                ..self
            };
            w.input(AgentInput::Tick);
            w
        }

        fn input(&mut self, input: AgentInput) {
            let mut inputs = VecDeque::from([input]);
            while let Some(i) = inputs.pop_front() {
                for o in self.core.step(self.now, i) {
                    self.carry(o, &mut inputs);
                }
            }
        }

        fn carry(&mut self, o: AgentOutput, inputs: &mut VecDeque<AgentInput>) {
            let now = self.now;
            self.trace.push(format!("{now} {o:?}"));
            match o {
                AgentOutput::Store { id, request } => {
                    self.sent.push((now, id, request.clone()));
                    if (self.cut)(now, &request) {
                        return;
                    }
                    let result = carry_out(&*self.store, &request);
                    if !(self.drop)(now, &request) {
                        let due = now + self.delay + (self.slow)(now, &request);
                        self.replies.push((due, Replied { id, result }));
                    }
                }
                AgentOutput::Wake(Wake(t)) => {
                    assert!(t >= now, "a wake in the past");
                    if t == now {
                        self.busy.push(self.trace.len());
                    }
                    self.wake = t;
                }
                AgentOutput::Start { copy, .. } => {
                    assert!(!self.core.is_fenced(), "{copy} started while fenced");
                    self.starts.push((now, copy.clone()));
                    self.next_pid += 1;
                    let pid = self.next_pid;
                    self.procs.push(Proc {
                        copy: copy.clone(),
                        pid,
                        alive: true,
                        ending: None,
                    });
                    inputs.push_back(AgentInput::Started {
                        copy,
                        pid,
                        start_ticks: u64::from(pid) * 10,
                    });
                }
                AgentOutput::Adopt { .. } => {}
                AgentOutput::Signal {
                    copy, pid, signal, ..
                } => {
                    self.signals.push((now, copy, signal));
                    if let Some(p) = self.procs.iter_mut().find(|p| p.pid == pid && p.alive) {
                        p.ending = Some(match signal {
                            CopySignal::Term => 15,
                            CopySignal::Kill => 9,
                        });
                    }
                }
                AgentOutput::StopForeign { pid, .. } => {
                    if let Some(p) = self.procs.iter_mut().find(|p| p.pid == pid) {
                        p.alive = false;
                    }
                }
                AgentOutput::Probe { copy, .. } => inputs.push_back(AgentInput::ProbeDone {
                    copy,
                    ok: self.probe_ok,
                }),
                AgentOutput::Recover => {
                    let records = self
                        .saved
                        .clone()
                        .map(|s| s.copies)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|record| {
                            let process = self
                                .procs
                                .iter()
                                .find(|p| {
                                    p.alive
                                        && p.pid == record.pid
                                        && p.copy == record.assignment.copy
                                })
                                .map(|p| (p.pid, u64::from(p.pid) * 10));
                            FoundRecord { record, process }
                        })
                        .collect();
                    inputs.push_back(AgentInput::Recovered(Recovery {
                        records,
                        unclaimed: Vec::new(),
                        own_uid: 1,
                    }));
                }
                AgentOutput::SaveState(s) => self.saved = Some(s),
                AgentOutput::TendLogs { .. } => {}
                AgentOutput::Log(line) => self.log.push(format!("{now} {line}")),
                AgentOutput::Stopped(r) => self.stopped = Some(r),
            }
        }

        /// Runs to `until`, a tick at a time.
        fn run(&mut self, until: u64) {
            while self.now < until && self.stopped.is_none() {
                self.tick_at(self.now + TICK);
            }
        }

        /// Delivers what is due at `now` (replies, process ends), then a tick.
        fn tick_at(&mut self, now: u64) {
            self.now = now;
            let (due, later): (Vec<_>, Vec<_>) =
                self.replies.drain(..).partition(|(t, _)| *t <= now);
            self.replies = later;
            for (_, r) in due {
                self.input(AgentInput::Replied(r));
            }
            let ended: Vec<(String, i32)> = self
                .procs
                .iter_mut()
                .filter(|p| p.alive && p.ending.is_some())
                .map(|p| {
                    p.alive = false;
                    (p.copy.clone(), p.ending.unwrap_or(0))
                })
                .collect();
            for (copy, s) in ended {
                self.input(AgentInput::Exited {
                    copy,
                    how: Ended::Signal(s),
                });
            }
            self.input(AgentInput::Tick);
        }

        /// Runs to `until`, stepping only when something happens: a wake the machine asked
        /// for, a reply, a process end (1ms after its signal). What a discrete-event world does.
        fn run_by_wakes(&mut self, until: u64) {
            while self.stopped.is_none() {
                let reply = self.replies.iter().map(|(t, _)| *t).min();
                let ending = self
                    .procs
                    .iter()
                    .any(|p| p.alive && p.ending.is_some())
                    .then_some(self.now + 1);
                let next = [Some(self.wake), reply, ending]
                    .into_iter()
                    .flatten()
                    .min()
                    .unwrap_or(u64::MAX)
                    .max(self.now + 1);
                if next > until {
                    self.now = until;
                    return;
                }
                self.tick_at(next);
            }
        }

        fn running(&self) -> Vec<String> {
            let mut v: Vec<String> = self
                .procs
                .iter()
                .filter(|p| p.alive)
                .map(|p| p.copy.clone())
                .collect();
            v.sort();
            v
        }

        fn report(&self, node: &str) -> NodeReport {
            let e = self.store.get(&report_key(node)).unwrap().unwrap();
            decode::<NodeReport>(&e).unwrap().value
        }

        fn renewals_answered(&self) -> Vec<u64> {
            self.sent
                .iter()
                .filter(|(t, _, r)| matches!(r, StoreRequest::KeepAlive(_)) && !(self.drop)(*t, r))
                .map(|(t, _, _)| *t)
                .collect()
        }
    }

    #[test]
    fn the_fence_acts_before_the_store_can_expire_the_lease() {
        let (term, kill) = fence_times_ms(1_000, 4_000);
        assert_eq!((term, kill), (4_000, 4_600));
        assert!(kill < 1_000 + 4_000);
        // Three renewals fit before the SIGTERM: one lost renewal never fences.
        assert!(renew_every_ms(4_000) * 2 < term - 1_000);
    }

    #[test]
    fn each_assignment_starts_once_runs_is_reported_and_stops_when_unassigned() {
        let store = MemoryStore::new();
        assign(&store, "a", 0);
        assign(&store, "a", 1);
        let mut w = World::new(store, config("a"));
        w.run(500);
        assert_eq!(w.running(), ["w-0", "w-1"]);
        let starts: Vec<&str> = w.starts.iter().map(|(_, c)| c.as_str()).collect();
        assert_eq!(starts, ["w-0", "w-1"], "each started once");
        let r = w.report("a");
        assert!(r.copies.iter().all(|c| c.phase == Phase::Running), "{r:?}");
        assert!(w.store.get(&node_key("a")).unwrap().is_some());
        // A copy that dies stays recorded while assigned: it is never started again.
        w.procs[0].ending = Some(9);
        w.run(1_000);
        assert_eq!(w.starts.len(), 2, "{:?}", w.starts);
        assert_eq!(w.running(), ["w-1"]);
        // Unassigned: SIGTERM, forgotten once it ended.
        unassign(&w.store, "a", 1);
        w.run(1_500);
        assert!(w.running().is_empty());
        assert!(w
            .signals
            .iter()
            .any(|(_, c, s)| c == "w-1" && *s == CopySignal::Term));
        assert_eq!(w.report("a").copies.len(), 1, "w-0 is still assigned");
        // The event log has the starts, readiness and exits.
        let log = events::read_log(&*w.store, "w").unwrap();
        assert!(log.len() >= 6, "{log:?}");
        // Shutdown: last report, the name given up.
        w.input(AgentInput::Shutdown);
        w.run(2_000);
        assert!(matches!(w.stopped, Some(Ok(()))), "{:?}", w.stopped);
        assert!(w.store.get(&node_key("a")).unwrap().is_none());
    }

    #[test]
    fn a_batch_of_starts_is_written_twice_nonces_first_then_every_pid() {
        let store = MemoryStore::new();
        let mut w = World::new(store, config("a"));
        w.run(200);
        for n in 0..5 {
            assign(&w.store, "a", n);
        }
        let before = w.trace.len();
        // Up to just before the copies become ready (another write, a phase change).
        w.run(240);
        let saves: Vec<&String> = w.trace[before..]
            .iter()
            .filter(|l| l.contains("SaveState("))
            .collect();
        assert_eq!(saves.len(), 2, "{saves:#?}");
        // The first holds every nonce before any process exists, the second every pid.
        assert_eq!(saves[0].matches(" pid: 0,").count(), 5, "{}", saves[0]);
        assert_eq!(saves[1].matches(" pid: 0,").count(), 0, "{}", saves[1]);
        let first_start = w.trace[before..]
            .iter()
            .position(|l| l.contains("Start {"))
            .unwrap();
        let first_save = w.trace[before..]
            .iter()
            .position(|l| l.contains("SaveState("))
            .unwrap();
        assert!(first_save < first_start);
    }

    #[test]
    fn a_fenced_agent_whose_old_lease_outlived_a_failed_revoke_takes_its_own_record_over() {
        // The renewals reach the store but their replies are lost, so the lease lives on at the
        // store while the agent fences; then its revoke of that lease never arrives. The record
        // still stands under the old lease when it claims again: that record is its own (as
        // after a quorum loss, when etcd resets every lease to its full TTL), not a refusal.
        let store = MemoryStore::new();
        assign(&store, "a", 0);
        let mut w = World::new(store, config("a"));
        w.run(1_000);
        assert_eq!(w.running(), ["w-0"]);
        w.drop =
            Box::new(|t, r| (1_000..2_000).contains(&t) && matches!(r, StoreRequest::KeepAlive(_)));
        w.cut = Box::new(|t, r| t < 2_600 && matches!(r, StoreRequest::Revoke(_)));
        w.run(5_000);
        assert!(
            w.stopped.is_none(),
            "the agent runs on: {:?}\n{:?}",
            w.stopped,
            w.log
        );
        assert!(
            !w.log.iter().any(|l| l.contains("cannot rejoin: node")),
            "{:?}",
            w.log
        );
        assert!(
            w.log.iter().any(|l| l.contains("rejoined under lease")),
            "{:?}",
            w.log
        );
    }

    #[test]
    fn failing_renewals_fence_the_copies_at_three_quarters_and_nine_tenths_of_the_ttl() {
        let store = MemoryStore::new();
        assign(&store, "a", 0);
        let mut w = World::new(store, config("a"));
        w.run(1_000);
        assert_eq!(w.running(), ["w-0"]);
        // From 1000ms on, every renewal is lost; the copy ends on SIGTERM.
        w.drop = Box::new(|t, r| t >= 1_000 && matches!(r, StoreRequest::KeepAlive(_)));
        w.run(2_500);
        let last_ok = *w.renewals_answered().last().unwrap();
        let term = w
            .signals
            .iter()
            .find(|(_, _, s)| *s == CopySignal::Term)
            .map(|(t, _, _)| *t)
            .expect("a SIGTERM");
        let kill = w.signals.iter().find(|(_, _, s)| *s == CopySignal::Kill);
        assert!(
            (last_ok + 750..last_ok + 750 + TICK).contains(&term),
            "SIGTERM at {term}, last renewal sent at {last_ok}"
        );
        // The copy ended on SIGTERM: nothing is left to SIGKILL.
        assert!(kill.is_none(), "{kill:?}");
        assert!(w.running().is_empty());
        assert!(
            w.log
                .iter()
                .any(|l| l.contains("fenced, stopping 1 copies")),
            "{:?}",
            w.log
        );
        assert!(
            w.log.iter().any(|l| l.contains("fenced: SIGKILL")),
            "{:?}",
            w.log
        );
        let kill_line = w
            .log
            .iter()
            .find(|l| l.contains("fenced: SIGKILL"))
            .unwrap();
        let at: u64 = kill_line.split(' ').next().unwrap().parse().unwrap();
        assert!(
            (last_ok + 900..last_ok + 900 + TICK).contains(&at),
            "{kill_line}"
        );
    }

    #[test]
    fn a_copy_that_ignores_sigterm_gets_sigkill_at_nine_tenths_of_the_ttl() {
        let store = MemoryStore::new();
        assign(&store, "a", 0);
        let mut w = World::new(store, config("a"));
        w.run(1_000);
        w.drop = Box::new(|t, r| t >= 1_000 && matches!(r, StoreRequest::KeepAlive(_)));
        // It ignores SIGTERM: clear its ending whenever it is a SIGTERM.
        let mut t = 1_000;
        while t < 2_500 {
            t += TICK;
            w.run(t);
            for p in &mut w.procs {
                if p.ending == Some(15) {
                    p.ending = None;
                }
            }
        }
        let last_ok = *w.renewals_answered().last().unwrap();
        let kill = w
            .signals
            .iter()
            .find(|(_, _, s)| *s == CopySignal::Kill)
            .map(|(t, _, _)| *t)
            .expect("a SIGKILL");
        assert!(
            (last_ok + 900..last_ok + 900 + TICK).contains(&kill),
            "{kill} vs {last_ok}"
        );
        assert!(w.running().is_empty());
    }

    #[test]
    fn the_injected_bug_keeps_copies_running_after_the_lease_is_lost() {
        let store = MemoryStore::new();
        assign(&store, "a", 0);
        let cfg = AgentCoreConfig {
            bug_no_self_fence: true,
            ..config("a")
        };
        let mut w = World::new(store, cfg);
        w.run(1_000);
        w.drop = Box::new(|t, r| t >= 1_000 && matches!(r, StoreRequest::KeepAlive(_)));
        w.run(2_500);
        assert!(w.signals.is_empty(), "{:?}", w.signals);
        assert_eq!(w.running(), ["w-0"], "the bug: the copy outlives the lease");
    }

    #[test]
    fn nothing_starts_while_fenced_and_copies_it_fenced_are_not_started_again() {
        let store = MemoryStore::new();
        assign(&store, "a", 0);
        let mut w = World::new(store, config("a"));
        // Replies take 20ms: sync reads are in flight when the fence comes down.
        w.delay = 20;
        w.run(1_000);
        w.drop =
            Box::new(|t, r| (1_000..1_600).contains(&t) && matches!(r, StoreRequest::KeepAlive(_)));
        assign(&w.store, "a", 1);
        // w-1 is assigned before the fence: it starts (the lease is still held); w-2 while
        // the agent is fenced.
        w.run(1_560);
        assert!(w.core.is_fenced());
        assign(&w.store, "a", 2);
        w.run(3_000);
        let term = w
            .signals
            .iter()
            .find(|(_, _, s)| *s == CopySignal::Term)
            .map(|(t, _, _)| *t)
            .unwrap();
        let rejoined: u64 = w
            .log
            .iter()
            .find(|l| l.contains("rejoined under lease"))
            .and_then(|l| l.split(' ').next()?.parse().ok())
            .expect("rejoined");
        assert!(rejoined > term);
        assert!(
            w.starts.iter().all(|(t, _)| *t < term || *t >= rejoined),
            "a start while fenced: {:?} (fenced {term}..{rejoined})",
            w.starts
        );
        let times = |c: &str| w.starts.iter().filter(|(_, s)| s == c).count();
        assert_eq!(
            (times("w-0"), times("w-1"), times("w-2")),
            (1, 1, 1),
            "{:?}",
            w.starts
        );
        // The fenced copies stay exited (their assignments still exist): only w-2 runs.
        assert_eq!(w.running(), ["w-2"], "{:#?}", w.log);
        assert!(w.core.held_lease().is_some());
    }

    #[test]
    fn a_read_sent_under_a_lease_that_was_lost_is_never_acted_on_after_the_rejoin() {
        let store = MemoryStore::new();
        let cfg = AgentCoreConfig {
            request_timeout_ms: 5_000,
            ..config("a")
        };
        let mut w = World::new(store, cfg);
        w.run(1_000);
        // Cut off from 1000ms: renewals are lost, and the sync read sent then takes 2s.
        w.cut =
            Box::new(|t, r| (1_000..1_600).contains(&t) && matches!(r, StoreRequest::KeepAlive(_)));
        let placements = placements_of("a");
        w.slow = Box::new(move |t, r| match r {
            StoreRequest::Read { prefixes }
                if prefixes[0] == placements && (1_000..1_900).contains(&t) =>
            {
                2_000
            }
            _ => 0,
        });
        assign(&w.store, "a", 1);
        w.run(1_200);
        // While the agent is fenced, the node is lost and its assignment moves elsewhere.
        unassign(&w.store, "a", 1);
        w.run(4_000);
        assert!(
            w.log.iter().any(|l| l.contains("rejoined under lease")),
            "{:#?}",
            w.log
        );
        assert!(
            w.starts.is_empty(),
            "started from a read of the lost lease: {:?}",
            w.starts
        );
    }

    #[test]
    fn a_lost_reply_times_out_and_the_read_is_sent_again() {
        let store = MemoryStore::new();
        let mut w = World::new(store, config("a"));
        w.run(500);
        // The next sync read's reply is lost.
        let placements = placements_of("a");
        let lost = std::rc::Rc::new(std::cell::Cell::new(None));
        let seen = std::rc::Rc::clone(&lost);
        w.drop = Box::new(move |t, r| {
            let sync = matches!(r, StoreRequest::Read { prefixes } if prefixes[0] == placements);
            if sync && seen.get().is_none_or(|at| at == t) {
                seen.set(Some(t));
                return true;
            }
            false
        });
        w.run(600);
        let lost_at = lost.get().expect("a sync read was sent");
        assign(&w.store, "a", 0);
        w.run(lost_at + 290);
        assert!(w.starts.is_empty(), "no read goes out while one is awaited");
        w.run(lost_at + 400);
        assert_eq!(
            w.starts.len(),
            1,
            "the read after the deadline starts the copy"
        );
    }

    #[test]
    fn a_restarted_agent_adopts_its_live_copies_and_never_restarts_a_dead_one() {
        let store = MemoryStore::new();
        for n in 0..3 {
            assign(&store, "a", n);
        }
        let mut w = World::new(store, config("a"));
        w.run(500);
        assert_eq!(w.running(), ["w-0", "w-1", "w-2"]);
        let pids: Vec<u32> = w.procs.iter().map(|p| p.pid).collect();
        let acquired = |w: &World| {
            let e = w.store.get(&node_key("a")).unwrap().unwrap();
            decode::<NodeRecord>(&e).unwrap().value.acquired_ms
        };
        let tenure = acquired(&w);
        // The agent dies (no shutdown); w-1 dies while it is down.
        w.procs[1].alive = false;
        let now = w.now;
        let mut w = w.restart(config("a"));
        w.run(now + 500);
        assert!(w.starts.is_empty(), "nothing started again: {:?}", w.starts);
        assert_eq!(w.running(), ["w-0", "w-2"]);
        assert!(w
            .log
            .iter()
            .any(|l| l.contains("taken over from the previous agent")));
        // The tenure goes on: the earlier agent's last report counts until this one's lands.
        assert_eq!(acquired(&w), tenure);
        assert!(w
            .log
            .iter()
            .any(|l| l.contains(&format!("adopted w-0 (pid {})", pids[0]))));
        let r = w.report("a");
        let phases: Vec<(String, Phase, u32)> = r
            .copies
            .iter()
            .map(|c| (c.copy.clone(), c.phase, c.pid))
            .collect();
        assert_eq!(
            phases,
            [
                ("w-0".into(), Phase::Running, pids[0]),
                ("w-1".into(), Phase::Exited, 0),
                ("w-2".into(), Phase::Running, pids[2]),
            ]
        );
        // An adopted copy that is unassigned is stopped.
        unassign(&w.store, "a", 2);
        w.run(now + 1_000);
        assert_eq!(w.running(), ["w-0"]);
    }

    #[test]
    fn driven_only_at_its_wakes_it_runs_copies_and_fences_to_the_millisecond() {
        let store = MemoryStore::new();
        assign(&store, "a", 0);
        assign(&store, "a", 1);
        let mut w = World::new(store, config("a"));
        w.run_by_wakes(1_000);
        assert_eq!(w.running(), ["w-0", "w-1"]);
        let r = w.report("a");
        assert!(r.copies.iter().all(|c| c.phase == Phase::Running), "{r:?}");
        let steps = w.trace.iter().filter(|l| l.contains("Wake(")).count();
        assert!(
            steps < 200,
            "{steps} steps in a second: it sleeps between timers"
        );
        w.drop = Box::new(|t, r| t >= 1_000 && matches!(r, StoreRequest::KeepAlive(_)));
        w.run_by_wakes(3_000);
        let last_ok = *w.renewals_answered().last().unwrap();
        let term = w
            .signals
            .iter()
            .find(|(_, _, s)| *s == CopySignal::Term)
            .map(|(t, _, _)| *t)
            .unwrap();
        assert_eq!(term, last_ok + 750, "SIGTERM at exactly 3/4 of the TTL");
        assert!(w.running().is_empty());
    }

    #[test]
    fn no_step_asks_to_be_woken_at_its_own_time_fenced_or_waiting_for_replies() {
        let store = MemoryStore::new();
        assign(&store, "a", 0);
        let mut w = World::new(store, config("a"));
        // Replies take 20ms: syncs and reports wait in flight past their timers.
        w.delay = 20;
        w.run_by_wakes(1_000);
        // Fenced from 3/4 TTL to 9/10 TTL, then rejoined; then a shutdown. The agent is paused
        // (not stepped) until 600ms after its last good renewal: the renewal it sends then is
        // due again after the SIGTERM and before the SIGKILL, and must not be waited for.
        w.cut =
            Box::new(|t, r| (1_000..1_600).contains(&t) && matches!(r, StoreRequest::KeepAlive(_)));
        let last_ok = *w.renewals_answered().last().unwrap();
        w.tick_at(last_ok + 600);
        w.run_by_wakes(3_000);
        assert!(
            w.log.iter().any(|l| l.contains("rejoined under lease")),
            "{:#?}",
            w.log
        );
        w.input(AgentInput::Shutdown);
        w.run_by_wakes(5_000);
        assert!(matches!(w.stopped, Some(Ok(()))), "{:?}", w.stopped);
        let busy: Vec<&String> = w.busy.iter().map(|&i| &w.trace[i - 1]).take(5).collect();
        assert!(
            busy.is_empty(),
            "{} busy steps, first: {busy:#?}",
            w.busy.len()
        );
    }

    #[test]
    fn the_same_inputs_give_the_same_outputs() {
        let trace = || {
            let store = MemoryStore::new();
            assign(&store, "a", 0);
            assign(&store, "a", 1);
            let mut w = World::new(store, config("a"));
            w.delay = 7;
            w.run(600);
            w.drop = Box::new(|t, r| t >= 600 && matches!(r, StoreRequest::KeepAlive(_)));
            w.run(1_800);
            w.trace
        };
        let (a, b) = (trace(), trace());
        assert!(a.len() > 20, "{a:?}");
        assert_eq!(a, b);
    }

    #[test]
    fn a_copy_with_a_readiness_command_runs_only_once_it_passes() {
        let store = MemoryStore::new();
        let a = Assignment {
            copy: "w-0".into(),
            workload: "w".into(),
            owner_uid: 1,
            n: 0,
            node: "a".into(),
            command: vec!["sleep".into(), "100".into()],
            startup_ms: 0,
            readiness: Some(vec!["true".into()]),
            grace_ms: 100,
            created_ms: 0,
            env: CopyEnv::default(),
            generation: 0,
        };
        let key = placement_key("a", "w", 0);
        store.commit(&Txn::new().put(&key, encode(&a))).unwrap();
        let mut w = World::new(store, config("a"));
        w.probe_ok = false;
        w.run(500);
        let phase = |w: &World| w.core.records()[0].phase;
        assert_eq!(phase(&w), Phase::Starting);
        let probes = w.trace.iter().filter(|l| l.contains("Probe {")).count();
        // Retried every 100ms, one at a time.
        assert!((3..=5).contains(&probes), "{probes} probes in 500ms");
        w.probe_ok = true;
        w.run(700);
        assert_eq!(phase(&w), Phase::Running);
    }

    #[test]
    fn a_kill_request_kills_the_copy_and_its_outcome_is_written_back() {
        let store = MemoryStore::new();
        assign(&store, "a", 0);
        let mut w = World::new(store, config("a"));
        w.run(300);
        let inc = w.core.records()[0].incarnation;
        let key = format!("{}w-0", remote::kills_of("a"));
        let req = remote::KillRequest {
            copy: "w-0".into(),
            incarnation: inc,
            requested_ms: 0,
            outcome: None,
        };
        w.store.commit(&Txn::new().put(&key, encode(&req))).unwrap();
        w.run(600);
        assert!(w.running().is_empty());
        let e = w.store.get(&key).unwrap().unwrap();
        let answered = decode::<remote::KillRequest>(&e).unwrap().value;
        assert_eq!(answered.outcome.as_deref(), Some("killed pid 101 on a"));
        let kills = w
            .signals
            .iter()
            .filter(|(_, _, s)| *s == CopySignal::Kill)
            .count();
        assert_eq!(kills, 1, "answered once: {:?}", w.signals);
    }

    #[test]
    fn a_rejoin_whose_create_reply_is_lost_still_rejoins_under_its_own_record() {
        let store = MemoryStore::new();
        assign(&store, "a", 0);
        let mut w = World::new(store, config("a"));
        w.run(1_000);
        // Renewals fail from 1000ms; then the first create of the rejoin loses its reply.
        let creates = std::rc::Rc::new(std::cell::Cell::new(0));
        let seen = std::rc::Rc::clone(&creates);
        let key = node_key("a");
        w.drop = Box::new(move |t, r| match r {
            StoreRequest::KeepAlive(_) => (1_000..1_500).contains(&t),
            StoreRequest::Commit(txn)
                if t >= 1_000 && txn.compares.iter().any(|c| c.key == key) =>
            {
                seen.set(seen.get() + 1);
                seen.get() == 1
            }
            _ => false,
        });
        w.run(4_000);
        assert!(creates.get() >= 1);
        assert!(w.stopped.is_none(), "{:?} {:#?}", w.stopped, w.log);
        assert!(w.core.held_lease().is_some(), "{:#?}", w.log);
        assert!(
            w.log.iter().any(|l| l.contains("rejoined under lease")),
            "{:#?}",
            w.log
        );
    }

    #[test]
    fn an_agent_replaced_while_fenced_stops_without_touching_the_new_holders_report() {
        let store = MemoryStore::new();
        assign(&store, "a", 0);
        let mut w = World::new(store, config("a"));
        w.run(1_000);
        // Cut off: renewals and the rejoin's revoke fail until another agent has the name.
        w.cut = Box::new(|t, r| {
            t < 2_500 && matches!(r, StoreRequest::KeepAlive(_) | StoreRequest::Revoke(_))
        });
        w.run(1_800);
        assert!(w.core.is_fenced());
        // The store expires the old lease; another agent, elsewhere, takes the name.
        let lease = match w.store.get(&node_key("a")).unwrap() {
            Some(e) => e.lease.unwrap(),
            None => panic!("no record"),
        };
        w.store.revoke(lease).unwrap();
        let other = AgentCoreConfig {
            place: "elsewhere".into(),
            ..config("a")
        };
        let mut them = World::on(std::sync::Arc::clone(&w.store), other);
        them.run(300);
        assert!(them.core.held_lease().is_some());
        let theirs = them.report("a");
        w.run(5_000);
        match &w.stopped {
            Some(Err(AgentError::Replaced(why))) => assert!(why.contains("already held"), "{why}"),
            other => panic!("{other:?} {:#?}", w.log),
        }
        assert_eq!(
            w.report("a"),
            theirs,
            "the replaced agent wrote no last report"
        );
        assert!(w.running().is_empty());
    }

    #[test]
    fn a_name_held_by_an_agent_elsewhere_is_refused() {
        let store = MemoryStore::new();
        let mut first = World::new(store, config("a"));
        first.run(100);
        let other = AgentCoreConfig {
            place: "elsewhere".into(),
            ..config("a")
        };
        let mut w = World::on(std::sync::Arc::clone(&first.store), other);
        w.run(100);
        match &w.stopped {
            Some(Err(e)) => assert!(e.is_refusal(), "{e}"),
            other => panic!("{other:?}"),
        }
        // Another name is free.
        let b = AgentCoreConfig {
            place: "elsewhere".into(),
            ..config("b")
        };
        let mut w = World::on(std::sync::Arc::clone(&first.store), b);
        w.run(100);
        assert!(w.stopped.is_none() && w.core.held_lease().is_some());
    }
}
