//! The controller host as a state machine without I/O: leader election, one reconcile loop per
//! declared workload, garbage collection, event-log compaction and the watch cache, driven by
//! [`Host::step`].
//!
//! # Shape
//! raft-rs's `RawNode` reduced to one call: the driver calls `step(now_ms, input)` with a
//! [`HostInput`] (a tick, a store reply, a watch delivery, shutdown) and carries out the
//! [`HostOutput`]s it returns, in order: store requests (each with its [`ReqId`]), log lines,
//! and the time to be stepped next ([`HostOutput::Wake`], exactly one per step until
//! [`HostOutput::Stopped`]). The machine never reads a clock, a store or a file; `now_ms` is the
//! host's own clock (monotonic; skew against the store is harmless, since lease expiry is the
//! store's business). [`crate::controller::run_controller`] is the tokio driver; the chaos world
//! is another.
//!
//! # Timing rules (those of the tokio controller before it, [`crate::controller`])
//! - **Election.** A follower tries every `poll`: it reads `/leader`, and only if it is absent
//!   grants a lease and creates `/leader` under it, compared against absence. The commit's
//!   revision is the fence. A follower that loses the race revokes its lease.
//! - **Renewal.** The leader sends a keep-alive every `lease_ttl / 3`. It counts a renewal from
//!   the time it *sent* the request (the store extends the lease when it receives it, later), so
//!   its own idea of the lease never outlives the store's on the same clock rate. With no
//!   successful renewal for a whole `lease_ttl` it stops acting and follows; a keep-alive answered
//!   `LeaseExpired`, a pass or collection refused on `/leader`, do the same at once.
//! - **Loops.** One per declared workload, keyed by (uid, period, controller kind): a change of
//!   any restarts it, an undeclared workload's loop ends. Rounds sit on the grid `start + k·U`;
//!   a pass that overruns skips the rounds it missed. At most one pass per workload is in flight,
//!   across restarts too (a restarted loop waits for its predecessor's request to be answered or
//!   to time out). A pass reads [`Snapshot::PREFIXES`], plans with [`plan_pass`], commits; a
//!   conflict reads again, up to [`MAX_ATTEMPTS`] attempts in all; a conflict on `/leader` means
//!   this host is deposed. With `wake_on_change`, a changed declaration, and (with the watch
//!   cache) a changed node report, also wake a loop; a wake during a pass runs one more pass.
//! - **Declarations** are polled every `poll`: the store's revision, and a read of
//!   `/workloads/` when it moved.
//! - **Garbage collection** every [`GC_EVERY_MS`] ([`plan_gc`]); **compaction** of the event log
//!   every [`retention::COMPACT_EVERY_MS`] or retention, whichever is shorter
//!   ([`retention::plan_compaction`]).
//! - **Deadlines.** Every request has one, [`HostConfig::request_timeout`] after it was sent; a
//!   request unanswered by then counts as failed with [`StoreError::Unavailable`], and its late
//!   reply, if any, is ignored. A lost reply never wedges the machine.
//! - **Shutdown.** A leader revokes its lease (so another controller takes over at once) and
//!   stops when the revoke is answered or times out; a follower stops at once.

use std::collections::BTreeMap;
use std::time::Duration;

use setpoint_core::{Action, Controller, ControllerKind};

use crate::controller::{runtime_controller, ControllerConfig};
use crate::machine::{Replied, ReqId, StoreReply, StoreRequest, StoreResult, Wake, WatchDelivery};
use crate::model::{decode, encode, Leader, Snapshot, WorkloadSpec, LEADER, WORKLOADS};
use crate::reconcile::{gc_outcome, plan_gc, plan_pass, PassError, PassReport, PassSettings, Plan};
use crate::retention;
use crate::store::{LeaseId, Read, Revision, Store, StoreError, Txn};

/// How many attempts a pass makes before a conflict makes it give up until its next round.
pub const MAX_ATTEMPTS: u32 = 5;
/// How often the leader collects orphaned assignments, in milliseconds.
pub const GC_EVERY_MS: u64 = 1_000;
/// The default deadline of a store request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How a [`Host`] runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostConfig {
    /// Who it is, its lease, its poll, its retention: what the tokio controller took.
    pub controller: ControllerConfig,
    /// Whether the store pushes changes ([`Store::watches`]): then the leader keeps a watch
    /// cache of the runtime's prefixes and serves passes from it.
    pub watch_cache: bool,
    /// How long a store request may stay unanswered before it counts as failed.
    pub request_timeout: Duration,
    /// Injected bug, for the chaos checker only (no CLI flag or file sets it): the pass and
    /// garbage-collection transactions do not compare `/leader`.
    #[doc(hidden)]
    pub bug_fencing_off: bool,
    /// Injected bug, for the chaos checker only: garbage collection judges ownership by the
    /// workload's name alone, not its uid.
    #[doc(hidden)]
    pub bug_gc_ignores_owner_uid: bool,
}

impl HostConfig {
    /// A host running `controller`, without a watch cache, with the default request deadline.
    pub fn new(controller: ControllerConfig) -> Self {
        Self {
            controller,
            watch_cache: false,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            bug_fencing_off: false,
            bug_gc_ignores_owner_uid: false,
        }
    }
}

/// What a [`Host`] is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostInput {
    /// Time passed (the machine's [`Wake`] came, or the driver just looks).
    Tick,
    /// A store request was answered.
    Replied(Replied),
    /// A watch delivered.
    Watch(WatchDelivery),
    /// Stop: give the lease up and end.
    Shutdown,
}

/// What a store request is for, so that a driver can put its failpoints around the right
/// commits ([`crate::failpoint`]) and a simulator can tell traffic apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Purpose {
    /// Taking the leader lease.
    Election,
    /// Keeping it.
    Renewal,
    /// Watching the declarations.
    Declarations,
    /// A workload's pass.
    Pass,
    /// Garbage collection.
    Gc,
    /// Event-log compaction.
    Compaction,
    /// The watch cache's read and watch.
    Cache,
    /// Giving the lease up on shutdown.
    Release,
}

/// What a [`Host`] asks its driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostOutput {
    /// Carry out `request` on the store and hand its outcome back as
    /// [`HostInput::Replied`] with this `id`.
    Request {
        /// The request's id.
        id: ReqId,
        /// What to do.
        request: StoreRequest,
        /// What it is for.
        purpose: Purpose,
    },
    /// Print a log line (`rt::log(who, line)`).
    Log {
        /// Who says it: `controller {holder}` or `loop {workload}`.
        who: String,
        /// What.
        line: String,
    },
    /// Step the machine again at this time (its own clock) at the latest.
    Wake(Wake),
    /// The machine has stopped: nothing more comes out of it. An error if it stopped because the
    /// store is lost for good.
    Stopped(Result<(), StoreError>),
}

/// What a workload's loop is running: a change to any of it restarts the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LoopKey {
    uid: Revision,
    period_ms: u64,
    kind: ControllerKind,
}

/// One workload's loop.
#[derive(Debug)]
struct Loop {
    key: LoopKey,
    /// Unique per loop: replies to an older loop of the same name are told apart by it.
    gen: u64,
    controller: Controller,
    /// Where the round grid starts.
    start_ms: u64,
    /// The next round on the grid.
    next_round_ms: u64,
    /// Woken by a change: run a pass as soon as none is in flight.
    woken: bool,
    /// The declaration's `mod_revision` last seen.
    decl_rev: Revision,
    /// The loop of this generation that has a pass in flight, if any (maybe an older one's).
    in_flight: Option<u64>,
    /// Conflicts met by the pass in flight.
    attempt: u32,
    /// The pass found the workload gone; it waits to be ended by the declarations.
    dead: bool,
}

/// The leader's state.
#[derive(Debug)]
struct Lead {
    lease: LeaseId,
    fence: Revision,
    /// When the last successful renewal was sent (or the lease taken).
    renewed_ms: u64,
    renewing: bool,
    next_poll_ms: u64,
    declaring: bool,
    seen_revision: Option<Revision>,
    loops: BTreeMap<String, Loop>,
    last_gc_ms: Option<u64>,
    collecting: bool,
    last_compaction_ms: u64,
    compacting: bool,
    failing: bool,
}

#[derive(Debug)]
enum Role {
    Follow {
        next_try_ms: u64,
        busy: bool,
        standby_said: bool,
    },
    Lead(Box<Lead>),
    Releasing,
    Stopped,
}

/// What an outstanding request waits for.
#[derive(Debug)]
enum Awaiting {
    LeaderRead,
    Grant {
        acquired_ms: u64,
    },
    Create {
        lease: LeaseId,
    },
    /// Nothing: a revoke of a lease that lost the race.
    Discard,
    KeepAlive {
        sent_ms: u64,
    },
    Revision,
    Declarations {
        revision: Revision,
    },
    PassRead {
        name: String,
        gen: u64,
    },
    PassCommit {
        name: String,
        gen: u64,
        report: Box<PassReport>,
    },
    GcRead,
    GcCommit {
        gone: Vec<String>,
    },
    CompactRead,
    CompactCommit {
        rest: Vec<Txn>,
        removed: u64,
    },
    Release,
}

#[derive(Debug)]
struct Pending {
    deadline_ms: u64,
    /// The role term the request belongs to: replies from an earlier term are ignored.
    term: u64,
    what: Awaiting,
}

/// The controller host as a state machine. See the [module](self) documentation.
#[derive(Debug)]
pub struct Host {
    cfg: HostConfig,
    who: String,
    now: u64,
    next_id: ReqId,
    next_gen: u64,
    /// Bumped at every change of role.
    term: u64,
    pending: BTreeMap<ReqId, Pending>,
    role: Role,
    /// The follower's view of the store: failing since the last answer.
    follow_failing: bool,
    out: Vec<HostOutput>,
}

impl Host {
    /// A host that starts as a follower at `now_ms` (its first election attempt is due at once).
    pub fn new(cfg: HostConfig, now_ms: u64) -> Self {
        let who = format!("controller {}", cfg.controller.holder);
        Self {
            cfg,
            who,
            now: now_ms,
            next_id: 1,
            next_gen: 1,
            term: 1,
            pending: BTreeMap::new(),
            role: Role::Follow {
                next_try_ms: now_ms,
                busy: false,
                standby_said: false,
            },
            follow_failing: false,
            out: Vec::new(),
        }
    }

    /// Whether this host acts as the leader now.
    pub fn is_leader(&self) -> bool {
        matches!(self.role, Role::Lead(_))
    }

    /// The fencing token of the leadership held, if any: `/leader`'s revision when it was taken.
    pub fn fence(&self) -> Option<Revision> {
        match &self.role {
            Role::Lead(l) => Some(l.fence),
            _ => None,
        }
    }

    /// The names of the workloads whose loops run, in order.
    pub fn loops(&self) -> Vec<String> {
        match &self.role {
            Role::Lead(l) => l.loops.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Whether the host has stopped.
    pub fn is_stopped(&self) -> bool {
        matches!(self.role, Role::Stopped)
    }

    /// How many requests are outstanding.
    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    /// Hands the machine `input` at `now_ms` (its clock; a time before the last step's counts as
    /// that one) and returns what to do, ending with one [`HostOutput::Wake`] unless it stopped.
    /// After [`HostOutput::Stopped`] it returns nothing.
    pub fn step(&mut self, now_ms: u64, input: HostInput) -> Vec<HostOutput> {
        self.now = self.now.max(now_ms);
        if self.is_stopped() {
            return Vec::new();
        }
        match input {
            HostInput::Tick => {}
            HostInput::Replied(Replied { id, result }) => {
                if let Some(p) = self.pending.remove(&id) {
                    self.on_reply(p, result);
                }
            }
            // Deliveries of a watch this machine does not follow (a cancelled one) are dropped.
            HostInput::Watch(_) => {}
            HostInput::Shutdown => self.on_shutdown(),
        }
        self.expire();
        self.drive();
        if !self.is_stopped() {
            let wake = self.next_wake();
            self.out.push(HostOutput::Wake(Wake(wake)));
        }
        std::mem::take(&mut self.out)
    }

    // ---- plumbing ----

    fn send(&mut self, request: StoreRequest, purpose: Purpose, what: Awaiting) -> ReqId {
        let id = self.next_id;
        self.next_id += 1;
        let deadline_ms = self
            .now
            .saturating_add(self.cfg.request_timeout.as_millis() as u64);
        self.pending.insert(
            id,
            Pending {
                deadline_ms,
                term: self.term,
                what,
            },
        );
        self.out.push(HostOutput::Request {
            id,
            request,
            purpose,
        });
        id
    }

    fn log(&mut self, who: Option<&str>, line: impl Into<String>) {
        self.out.push(HostOutput::Log {
            who: who.unwrap_or(&self.who).to_owned(),
            line: line.into(),
        });
    }

    fn stop(&mut self, result: Result<(), StoreError>) {
        self.term += 1;
        self.role = Role::Stopped;
        self.pending.clear();
        self.out.push(HostOutput::Stopped(result));
    }

    /// The store is gone for good: say so and stop.
    fn lost(&mut self, e: StoreError) {
        self.log(None, format!("{e}: this controller stops"));
        self.stop(Err(e));
    }

    fn lead(&mut self) -> Option<&mut Lead> {
        match &mut self.role {
            Role::Lead(l) => Some(l),
            _ => None,
        }
    }

    /// Requests past their deadline fail as unanswered.
    fn expire(&mut self) {
        let now = self.now;
        let late: Vec<ReqId> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline_ms <= now)
            .map(|(&id, _)| id)
            .collect();
        let timeout = self.cfg.request_timeout;
        for id in late {
            if let Some(p) = self.pending.remove(&id) {
                let e = StoreError::Unavailable(format!(
                    "no reply within {}",
                    crate::duration::format_duration(timeout)
                ));
                self.on_reply(p, Err(e));
            }
        }
    }

    fn next_wake(&self) -> u64 {
        let mut at = u64::MAX;
        for p in self.pending.values() {
            at = at.min(p.deadline_ms);
        }
        match &self.role {
            Role::Follow {
                next_try_ms, busy, ..
            } if !busy => at = at.min(*next_try_ms),
            Role::Lead(l) => {
                at = at.min(l.next_poll_ms);
                for lp in l.loops.values() {
                    if lp.in_flight.is_none() && !lp.dead {
                        at = at.min(if lp.woken { self.now } else { lp.next_round_ms });
                    }
                }
            }
            _ => {}
        }
        if at == u64::MAX {
            // Nothing due: look again after a poll (never reached while following or leading).
            at = self.now + self.cfg.controller.poll.as_millis() as u64;
        }
        at.max(self.now)
    }

    // ---- inputs ----

    fn on_shutdown(&mut self) {
        match std::mem::replace(&mut self.role, Role::Releasing) {
            Role::Lead(l) => {
                self.term += 1;
                self.send(
                    StoreRequest::Revoke(l.lease),
                    Purpose::Release,
                    Awaiting::Release,
                );
            }
            Role::Follow { .. } => self.stop(Ok(())),
            other => self.role = other,
        }
    }

    fn on_reply(&mut self, p: Pending, result: StoreResult) {
        if let Awaiting::Release = p.what {
            match result {
                Err(e) if e.is_lost() => return self.stop(Err(e)),
                Err(e) => self.log(None, format!("cannot give up the lease: {e}")),
                Ok(_) => {}
            }
            self.log(None, "stopped");
            return self.stop(Ok(()));
        }
        if p.term != self.term {
            // A reply to a role this host no longer has: only a lease it took must not linger.
            if let (Awaiting::Create { lease }, Ok(StoreReply::Committed(_))) = (&p.what, &result) {
                if !matches!(self.role, Role::Releasing | Role::Stopped) {
                    let lease = *lease;
                    self.send(
                        StoreRequest::Revoke(lease),
                        Purpose::Election,
                        Awaiting::Discard,
                    );
                }
            }
            return;
        }
        match p.what {
            Awaiting::LeaderRead => self.on_leader_read(result),
            Awaiting::Grant { acquired_ms } => self.on_grant(result, acquired_ms),
            Awaiting::Create { lease } => self.on_create(result, lease),
            Awaiting::Discard => {}
            Awaiting::KeepAlive { sent_ms } => self.on_keep_alive(result, sent_ms),
            Awaiting::Revision => self.on_revision(result),
            Awaiting::Declarations { revision } => self.on_declarations(result, revision),
            Awaiting::PassRead { name, gen } => self.on_pass_read(result, name, gen),
            Awaiting::PassCommit { name, gen, report } => {
                self.on_pass_commit(result, name, gen, *report)
            }
            Awaiting::GcRead => self.on_gc_read(result),
            Awaiting::GcCommit { gone } => self.on_gc_commit(result, gone),
            Awaiting::CompactRead => self.on_compact_read(result),
            Awaiting::CompactCommit { rest, removed } => {
                self.on_compact_commit(result, rest, removed)
            }
            Awaiting::Release => unreachable!("handled above"),
        }
    }

    // ---- election ----

    fn follow_error(&mut self, e: StoreError) {
        if e.is_lost() {
            return self.lost(e);
        }
        if let Role::Follow { busy, .. } = &mut self.role {
            *busy = false;
        }
        if !self.follow_failing {
            self.follow_failing = true;
            self.log(
                None,
                format!("cannot reach the store: {e} (retrying; logged again when it answers)"),
            );
        }
    }

    fn follow_answered(&mut self) {
        if self.follow_failing {
            self.follow_failing = false;
            self.log(None, "the store answers again");
        }
    }

    /// Someone else holds the lease: say so once per stretch of following.
    fn standby(&mut self) {
        self.follow_answered();
        let mut say = false;
        if let Role::Follow {
            busy, standby_said, ..
        } = &mut self.role
        {
            *busy = false;
            say = !*standby_said;
            *standby_said = true;
        }
        if say {
            self.log(
                None,
                "standby: another controller holds the lease; waiting for it",
            );
        }
    }

    fn on_leader_read(&mut self, result: StoreResult) {
        match read_of(result) {
            Ok((read, now_ms)) if read.entries.iter().any(|e| e.key == LEADER) => {
                let _ = now_ms;
                self.standby()
            }
            Ok((_, now_ms)) => {
                let ttl = self.cfg.controller.lease_ttl;
                self.send(
                    StoreRequest::Grant { ttl },
                    Purpose::Election,
                    Awaiting::Grant {
                        acquired_ms: now_ms,
                    },
                );
            }
            Err(e) => self.follow_error(e),
        }
    }

    fn on_grant(&mut self, result: StoreResult, acquired_ms: u64) {
        match result {
            Ok(StoreReply::Granted(lease)) => {
                let record = Leader {
                    holder: self.cfg.controller.holder.clone(),
                    acquired_ms,
                    ttl_ms: self.cfg.controller.lease_ttl.as_millis() as u64,
                };
                let txn = Txn::new()
                    .expect(LEADER, 0)
                    .put_leased(LEADER, encode(&record), lease);
                self.send(
                    StoreRequest::Commit(txn),
                    Purpose::Election,
                    Awaiting::Create { lease },
                );
            }
            other => self.follow_error(unexpected(other)),
        }
    }

    fn on_create(&mut self, result: StoreResult, lease: LeaseId) {
        match committed(result) {
            Ok(fence) => self.become_leader(lease, fence),
            Err(e) => {
                self.send(
                    StoreRequest::Revoke(lease),
                    Purpose::Election,
                    Awaiting::Discard,
                );
                if e.is_conflict() {
                    self.standby();
                } else {
                    self.follow_error(e);
                }
            }
        }
    }

    fn become_leader(&mut self, lease: LeaseId, fence: Revision) {
        self.follow_answered();
        self.log(None, format!("became the leader (lease {lease})"));
        self.term += 1;
        let now = self.now;
        self.role = Role::Lead(Box::new(Lead {
            lease,
            fence,
            renewed_ms: now,
            renewing: false,
            next_poll_ms: now,
            declaring: false,
            seen_revision: None,
            loops: BTreeMap::new(),
            last_gc_ms: None,
            collecting: false,
            last_compaction_ms: now,
            compacting: false,
            failing: false,
        }));
    }

    /// This host is not the leader any more: its loops end and it follows.
    fn depose(&mut self) {
        if !self.is_leader() {
            return;
        }
        self.term += 1;
        self.log(None, "lost the leader lease; following");
        self.role = Role::Follow {
            next_try_ms: self.now,
            busy: false,
            standby_said: false,
        };
    }

    fn on_keep_alive(&mut self, result: StoreResult, sent_ms: u64) {
        let ttl = self.cfg.controller.lease_ttl.as_millis() as u64;
        let now = self.now;
        match result {
            Ok(StoreReply::KeptAlive) => {
                if let Some(l) = self.lead() {
                    l.renewing = false;
                    l.renewed_ms = l.renewed_ms.max(sent_ms);
                }
            }
            Err(StoreError::LeaseExpired(_)) => self.depose(),
            other => {
                let e = unexpected(other);
                if e.is_lost() {
                    return self.lost(e);
                }
                self.log(None, format!("cannot renew the lease: {e}"));
                let Some(l) = self.lead() else { return };
                l.renewing = false;
                if now.saturating_sub(l.renewed_ms) >= ttl {
                    self.depose();
                }
            }
        }
    }

    // ---- the leader's poll ----

    fn drive(&mut self) {
        let now = self.now;
        let poll = self.cfg.controller.poll.as_millis() as u64;
        match &mut self.role {
            Role::Follow {
                next_try_ms, busy, ..
            } => {
                if !*busy && now >= *next_try_ms {
                    *busy = true;
                    *next_try_ms = now + poll;
                    self.send(
                        StoreRequest::Read {
                            prefixes: vec![LEADER.to_owned()],
                        },
                        Purpose::Election,
                        Awaiting::LeaderRead,
                    );
                }
            }
            Role::Lead(_) => self.drive_lead(),
            Role::Releasing | Role::Stopped => {}
        }
    }

    fn drive_lead(&mut self) {
        let now = self.now;
        let c = &self.cfg.controller;
        let poll = c.poll.as_millis() as u64;
        let ttl = c.lease_ttl.as_millis() as u64;
        let retention = c.event_retention.as_millis() as u64;
        let compact_every = retention::COMPACT_EVERY_MS.min(retention);
        let Some(l) = self.lead() else { return };
        if now.saturating_sub(l.renewed_ms) >= ttl {
            // No renewal for a whole TTL: the store may have let the lease go.
            return self.depose();
        }
        if now >= l.next_poll_ms {
            l.next_poll_ms = now + poll;
            let compact = !l.compacting && now - l.last_compaction_ms >= compact_every;
            if compact {
                l.compacting = true;
                l.last_compaction_ms = now;
            }
            let renew = !l.renewing && now - l.renewed_ms >= ttl / 3;
            if renew {
                l.renewing = true;
            }
            let declare = !l.declaring;
            l.declaring = true;
            let collect = !l.collecting && l.last_gc_ms.is_none_or(|t| now - t >= GC_EVERY_MS);
            if collect {
                l.collecting = true;
                l.last_gc_ms = Some(now);
            }
            let lease = l.lease;
            if compact {
                self.send(
                    StoreRequest::Read {
                        prefixes: strings(&retention::COMPACTION_PREFIXES),
                    },
                    Purpose::Compaction,
                    Awaiting::CompactRead,
                );
            }
            if renew {
                self.send(
                    StoreRequest::KeepAlive(lease),
                    Purpose::Renewal,
                    Awaiting::KeepAlive { sent_ms: now },
                );
            }
            if declare {
                self.send(
                    StoreRequest::Revision,
                    Purpose::Declarations,
                    Awaiting::Revision,
                );
            }
            if collect {
                self.send(snapshot_read(), Purpose::Gc, Awaiting::GcRead);
            }
        }
        self.drive_loops();
    }

    fn drive_loops(&mut self) {
        let now = self.now;
        let Some(l) = self.lead() else { return };
        let mut due = Vec::new();
        for (name, lp) in l.loops.iter_mut() {
            if lp.dead || lp.in_flight.is_some() {
                continue;
            }
            let tick = now >= lp.next_round_ms;
            if !(tick || lp.woken) {
                continue;
            }
            if tick {
                // The next round on the grid after now: missed rounds are skipped.
                let period = lp.key.period_ms.max(1);
                let k = (now - lp.start_ms) / period + 1;
                lp.next_round_ms = lp.start_ms + k * period;
            }
            lp.woken = false;
            lp.attempt = 0;
            lp.in_flight = Some(lp.gen);
            due.push((name.clone(), lp.gen));
        }
        for (name, gen) in due {
            self.send(
                snapshot_read(),
                Purpose::Pass,
                Awaiting::PassRead { name, gen },
            );
        }
    }

    fn lead_failed(&mut self, what: String) {
        let Some(l) = self.lead() else { return };
        if !l.failing {
            l.failing = true;
            self.log(
                None,
                format!("{what} (retrying; logged again when it answers)"),
            );
        }
    }

    fn lead_answered(&mut self) {
        let Some(l) = self.lead() else { return };
        if l.failing {
            l.failing = false;
            self.log(None, "the store answers again");
        }
    }

    fn on_revision(&mut self, result: StoreResult) {
        match result {
            Ok(StoreReply::Revision(r)) => {
                self.lead_answered();
                let Some(l) = self.lead() else { return };
                if l.seen_revision == Some(r) {
                    l.declaring = false;
                } else {
                    self.send(
                        StoreRequest::Read {
                            prefixes: vec![WORKLOADS.to_owned()],
                        },
                        Purpose::Declarations,
                        Awaiting::Declarations { revision: r },
                    );
                }
            }
            other => {
                let e = unexpected(other);
                if e.is_lost() {
                    return self.lost(e);
                }
                if let Some(l) = self.lead() {
                    l.declaring = false;
                }
                self.lead_failed(format!("cannot read the store: {e}"));
            }
        }
    }

    fn on_declarations(&mut self, result: StoreResult, revision: Revision) {
        if let Some(l) = self.lead() {
            l.declaring = false;
        }
        let read = match read_of(result) {
            Ok((read, _)) => read,
            Err(e) if e.is_lost() => return self.lost(e),
            Err(e) => return self.log(None, format!("cannot read declarations: {e}")),
        };
        if let Some(l) = self.lead() {
            l.seen_revision = Some(revision);
        }
        let mut declared = BTreeMap::new();
        for e in &read.entries {
            match decode::<WorkloadSpec>(e) {
                Ok(w) => {
                    declared.insert(w.value.name.clone(), w);
                }
                Err(err) => self.log(None, err.to_string()),
            }
        }
        let now = self.now;
        let wake_on_change = self.cfg.controller.wake_on_change;
        let mut gen = self.next_gen;
        let mut ended = Vec::new();
        let Some(l) = self.lead() else { return };
        for (name, w) in &declared {
            let key = LoopKey {
                uid: w.create_revision,
                period_ms: w.value.period_ms,
                kind: w.value.controller,
            };
            let in_flight = match l.loops.get_mut(name) {
                Some(old) if old.key == key => {
                    if old.decl_rev != w.mod_revision {
                        old.decl_rev = w.mod_revision;
                        old.woken |= wake_on_change;
                    }
                    continue;
                }
                Some(old) => old.in_flight,
                None => None,
            };
            l.loops.insert(
                name.clone(),
                Loop {
                    key,
                    gen,
                    controller: runtime_controller(key.kind),
                    start_ms: now,
                    next_round_ms: now,
                    woken: false,
                    decl_rev: w.mod_revision,
                    in_flight,
                    attempt: 0,
                    dead: false,
                },
            );
            gen += 1;
        }
        l.loops.retain(|name, _| {
            let keep = declared.contains_key(name);
            if !keep {
                ended.push(name.clone());
            }
            keep
        });
        self.next_gen = gen;
        for name in ended {
            self.log(None, format!("{name}: no longer declared; its loop ends"));
        }
        self.drive_loops();
    }

    // ---- passes ----

    fn settings(&self) -> PassSettings {
        PassSettings {
            fence: if self.cfg.bug_fencing_off {
                None
            } else {
                self.fence()
            },
            max_attempts: MAX_ATTEMPTS,
        }
    }

    /// The loop of `name` if the pass of generation `gen` is its current one; a reply for an
    /// older loop only frees the slot.
    fn pass_loop(&mut self, name: &str, gen: u64) -> Option<&mut Loop> {
        let l = self.lead()?;
        let lp = l.loops.get_mut(name)?;
        if lp.gen != gen {
            if lp.in_flight == Some(gen) {
                lp.in_flight = None;
            }
            return None;
        }
        Some(lp)
    }

    fn end_pass(&mut self, name: &str, gen: u64) {
        if let Some(lp) = self.pass_loop(name, gen) {
            lp.in_flight = None;
        }
    }

    fn on_pass_read(&mut self, result: StoreResult, name: String, gen: u64) {
        let settings = self.settings();
        let who = format!("loop {name}");
        let snapshot =
            read_of(result).and_then(|(read, now_ms)| Snapshot::from_read(&read, now_ms));
        let snapshot = match snapshot {
            Ok(s) => s,
            Err(e) if e.is_lost() => return self.lost(e),
            Err(e) => {
                if self.pass_loop(&name, gen).is_some() {
                    self.end_pass(&name, gen);
                    self.log(Some(&who), format!("pass failed: {e}"));
                }
                return;
            }
        };
        let Some(lp) = self.pass_loop(&name, gen) else {
            return;
        };
        let attempt = lp.attempt;
        match plan_pass(&snapshot, &name, &mut lp.controller, &settings) {
            Ok(Plan { txn, mut report }) => {
                report.conflicts = attempt;
                if txn.ops.is_empty() {
                    self.end_pass(&name, gen);
                    self.pass_done(&name, &report);
                } else {
                    self.send(
                        StoreRequest::Commit(txn),
                        Purpose::Pass,
                        Awaiting::PassCommit {
                            name,
                            gen,
                            report: Box::new(report),
                        },
                    );
                }
            }
            Err(PassError::NotLeader) => self.depose(),
            Err(PassError::Gone(_)) => {
                lp.dead = true;
                lp.in_flight = None;
            }
            Err(e) => {
                lp.in_flight = None;
                self.log(Some(&who), format!("pass failed: {e}"));
            }
        }
    }

    fn on_pass_commit(
        &mut self,
        result: StoreResult,
        name: String,
        gen: u64,
        mut report: PassReport,
    ) {
        let who = format!("loop {name}");
        match committed(result) {
            Ok(rev) => {
                self.end_pass(&name, gen);
                if self.pass_loop(&name, gen).is_some() {
                    report.revision = rev;
                    self.pass_done(&name, &report);
                }
            }
            Err(StoreError::Conflict { key, .. }) if key == LEADER => self.depose(),
            Err(e) if e.is_conflict() => {
                let Some(lp) = self.pass_loop(&name, gen) else {
                    return;
                };
                lp.attempt += 1;
                if lp.attempt < MAX_ATTEMPTS {
                    self.send(
                        snapshot_read(),
                        Purpose::Pass,
                        Awaiting::PassRead { name, gen },
                    );
                } else {
                    lp.in_flight = None;
                    let e = PassError::Contended(MAX_ATTEMPTS);
                    self.log(Some(&who), format!("pass failed: {e}"));
                }
            }
            Err(e) if e.is_lost() => self.lost(e),
            Err(e) => {
                if self.pass_loop(&name, gen).is_some() {
                    self.end_pass(&name, gen);
                    self.log(Some(&who), format!("pass failed: {}", PassError::from(e)));
                }
            }
        }
    }

    fn pass_done(&mut self, name: &str, report: &PassReport) {
        let who = format!("loop {name}");
        for line in pass_log_lines(report) {
            self.log(Some(&who), line);
        }
    }

    // ---- garbage collection ----

    fn on_gc_read(&mut self, result: StoreResult) {
        let fence = self.settings().fence;
        let snapshot =
            read_of(result).and_then(|(read, now_ms)| Snapshot::from_read(&read, now_ms));
        let plan = match snapshot {
            Ok(s) => plan_gc(&s, fence, self.cfg.bug_gc_ignores_owner_uid),
            Err(e) => Err(e.into()),
        };
        match plan {
            Ok(Some(plan)) => {
                self.send(
                    StoreRequest::Commit(plan.txn),
                    Purpose::Gc,
                    Awaiting::GcCommit { gone: plan.gone },
                );
            }
            Ok(None) => self.gc_done(Ok(Vec::new())),
            Err(e) => self.gc_done(Err(e)),
        }
    }

    fn on_gc_commit(&mut self, result: StoreResult, gone: Vec<String>) {
        self.gc_done(gc_outcome(committed(result), gone));
    }

    fn gc_done(&mut self, outcome: Result<Vec<String>, PassError>) {
        if let Some(l) = self.lead() {
            l.collecting = false;
        }
        match outcome {
            Ok(gone) if !gone.is_empty() => self.log(
                None,
                format!("collected orphaned assignments: {}", gone.join(", ")),
            ),
            Ok(_) => {}
            Err(PassError::NotLeader) => self.depose(),
            Err(PassError::Store(e)) if e.is_lost() => self.lost(e),
            Err(e) => self.log(None, format!("garbage collection failed: {e}")),
        }
    }

    // ---- compaction ----

    fn on_compact_read(&mut self, result: StoreResult) {
        let retention = self.cfg.controller.event_retention.as_millis() as u64;
        let plan = read_of(result)
            .and_then(|(read, now_ms)| retention::plan_compaction(&read, now_ms, retention));
        match plan {
            Ok(plan) => self.compact_next(plan.txns, plan.removed),
            Err(e) => self.compact_failed(e),
        }
    }

    fn compact_next(&mut self, mut txns: Vec<Txn>, removed: u64) {
        if txns.is_empty() {
            if let Some(l) = self.lead() {
                l.compacting = false;
            }
            if removed > 0 {
                self.log(
                    None,
                    format!("compacted the event log: {removed} old entries removed"),
                );
            }
            return;
        }
        let first = txns.remove(0);
        self.send(
            StoreRequest::Commit(first),
            Purpose::Compaction,
            Awaiting::CompactCommit {
                rest: txns,
                removed,
            },
        );
    }

    fn on_compact_commit(&mut self, result: StoreResult, rest: Vec<Txn>, removed: u64) {
        match committed(result) {
            Ok(_) => self.compact_next(rest, removed),
            Err(e) => self.compact_failed(e),
        }
    }

    fn compact_failed(&mut self, e: StoreError) {
        if e.is_lost() {
            return self.lost(e);
        }
        if let Some(l) = self.lead() {
            l.compacting = false;
        }
        self.log(None, format!("cannot compact the event log: {e}"));
    }
}

/// The read of everything a pass or a collection looks at.
fn snapshot_read() -> StoreRequest {
    StoreRequest::Read {
        prefixes: strings(&Snapshot::PREFIXES),
    }
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|p| (*p).to_owned()).collect()
}

/// The error of a reply that is not the one asked for (a driver's mistake) or of a failure.
fn unexpected(result: StoreResult) -> StoreError {
    match result {
        Err(e) => e,
        Ok(r) => StoreError::Unavailable(format!("unexpected reply {r:?}")),
    }
}

fn read_of(result: StoreResult) -> Result<(Read, u64), StoreError> {
    match result {
        Ok(StoreReply::Read { read, now_ms }) => Ok((read, now_ms)),
        other => Err(unexpected(other)),
    }
}

fn committed(result: StoreResult) -> Result<Revision, StoreError> {
    match result {
        Ok(StoreReply::Committed(r)) => Ok(r),
        other => Err(unexpected(other)),
    }
}

/// The log lines of a pass that completed, as the loop says them.
pub fn pass_log_lines(r: &PassReport) -> Vec<String> {
    let mut lines = Vec::new();
    let what = match &r.action {
        Some(Action::Create {
            target, counted, ..
        }) if !r.created.is_empty() => Some(format!(
            "target {target}, counted {counted}: created {}",
            r.created.join(", ")
        )),
        // Nothing written: the idle reason below says why, once.
        Some(Action::Create { .. }) => None,
        Some(Action::Delete { target, counted }) => Some(format!(
            "target {target}, counted {counted}: {} delete commands, deleted [{}]",
            r.delete_commands,
            r.deleted.join(", ")
        )),
        Some(Action::Named {
            target, counted, ..
        }) if r.wrote() || r.delete_commands > 0 => Some(format!(
            "target {target}, counted {counted}: created [{}], {} delete commands, deleted [{}]",
            r.created.join(", "),
            r.delete_commands,
            r.deleted.join(", ")
        )),
        Some(Action::Named { .. }) | None => None,
    };
    lines.extend(r.failures.iter().cloned());
    lines.extend(r.rollout.iter().cloned());
    lines.extend(what);
    if let Some(idle) = r.idle {
        lines.push(crate::loops::describe_idle(&idle, r.held_back, r.unplaced));
    }
    if !r.collected.is_empty() {
        lines.push(format!("collected exited {}", r.collected.join(", ")));
    }
    if !r.lost.is_empty() {
        lines.push(format!(
            "removed {} of lost nodes (lease ended)",
            r.lost.join(", ")
        ));
    }
    if r.conflicts > 0 {
        lines.push(format!("{} conflicts, retried on fresh state", r.conflicts));
    }
    lines
}

/// Carries out one store request (not a watch) on `store`, as a blocking driver does.
pub fn carry_out(store: &dyn Store, request: &StoreRequest) -> StoreResult {
    Ok(match request {
        StoreRequest::Read { prefixes } => {
            let now_ms = store.now_ms();
            let refs: Vec<&str> = prefixes.iter().map(String::as_str).collect();
            StoreReply::Read {
                read: store.read(&refs)?,
                now_ms,
            }
        }
        StoreRequest::Commit(txn) => StoreReply::Committed(store.commit(txn)?),
        StoreRequest::Revision => StoreReply::Revision(store.revision()?),
        StoreRequest::Grant { ttl } => StoreReply::Granted(store.grant(*ttl)?),
        StoreRequest::KeepAlive(lease) => {
            store.keep_alive(*lease)?;
            StoreReply::KeptAlive
        }
        StoreRequest::Revoke(lease) => {
            store.revoke(*lease)?;
            StoreReply::Revoked
        }
        StoreRequest::Watch { .. } | StoreRequest::CancelWatch(_) => {
            return Err(StoreError::Unavailable(
                "a watch is not a one-shot request".into(),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Snapshot, WorkloadSpec};
    use crate::store::MemoryStore;
    use std::collections::VecDeque;

    /// Decides, before a request is carried out, whether its reply reaches the machine (`false`:
    /// the reply is lost). It may change the store first, as another writer would.
    type Hook = Box<dyn FnMut(&MemoryStore, &StoreRequest, Purpose) -> bool>;

    /// A tiny synchronous driver: virtual time, requests carried out in order on a
    /// [`MemoryStore`], every reply handed back at once.
    struct Driver {
        host: Host,
        now: u64,
        wake: u64,
        queue: VecDeque<(ReqId, StoreRequest, Purpose)>,
        logs: Vec<(u64, String, String)>,
        requests: Vec<(u64, StoreRequest, Purpose)>,
        stopped: Option<Result<(), StoreError>>,
        hook: Option<Hook>,
    }

    impl Driver {
        fn new(cfg: HostConfig) -> Self {
            let host = Host::new(cfg, 0);
            let mut d = Self {
                host,
                now: 0,
                wake: 0,
                queue: VecDeque::new(),
                logs: Vec::new(),
                requests: Vec::new(),
                stopped: None,
                hook: None,
            };
            d.step(HostInput::Tick);
            d
        }

        fn step(&mut self, input: HostInput) {
            for out in self.host.step(self.now, input) {
                match out {
                    HostOutput::Request {
                        id,
                        request,
                        purpose,
                    } => {
                        self.requests.push((self.now, request.clone(), purpose));
                        self.queue.push_back((id, request, purpose));
                    }
                    HostOutput::Log { who, line } => self.logs.push((self.now, who, line)),
                    HostOutput::Wake(Wake(at)) => {
                        assert!(at >= self.now, "a wake in the past");
                        self.wake = at;
                    }
                    HostOutput::Stopped(r) => self.stopped = Some(r),
                }
            }
        }

        /// Carries out what is queued, then steps at each wake, until `until_ms`.
        fn run(&mut self, store: &MemoryStore, until_ms: u64) {
            loop {
                while let Some((id, request, purpose)) = self.queue.pop_front() {
                    let deliver = match self.hook.as_mut() {
                        Some(h) => h(store, &request, purpose),
                        None => true,
                    };
                    let result = carry_out(store, &request);
                    if deliver {
                        self.step(HostInput::Replied(Replied { id, result }));
                    }
                }
                if self.stopped.is_some() || self.now >= until_ms {
                    return;
                }
                self.now = self.wake.clamp(self.now + 1, until_ms);
                self.step(HostInput::Tick);
            }
        }

        fn said(&self, what: &str) -> bool {
            self.logs.iter().any(|(_, _, l)| l.contains(what))
        }

        fn count(&self, purpose: Purpose, pred: impl Fn(&StoreRequest) -> bool) -> usize {
            self.requests
                .iter()
                .filter(|(_, r, p)| *p == purpose && pred(r))
                .count()
        }
    }

    fn cfg(holder: &str) -> HostConfig {
        let mut c = ControllerConfig::new(holder);
        c.lease_ttl = Duration::from_secs(3);
        c.poll = Duration::from_millis(25);
        let mut h = HostConfig::new(c);
        h.request_timeout = Duration::from_millis(500);
        h
    }

    fn spec(name: &str, copies: u64, period_ms: u64) -> WorkloadSpec {
        WorkloadSpec {
            name: name.into(),
            command: vec!["sleep".into(), "60".into()],
            copies,
            controller: ControllerKind::Intent,
            period_ms,
            startup_ms: 0,
            readiness: None,
            grace_ms: 100,
            env: Default::default(),
            backoff: Default::default(),
            rollout: Default::default(),
            generation: 0,
        }
    }

    fn store_with(specs: &[WorkloadSpec]) -> MemoryStore {
        let store = MemoryStore::new();
        crate::node::fake_node(&store, "a").unwrap();
        crate::ops::apply(&store, specs).unwrap();
        store
    }

    fn copies(store: &MemoryStore) -> Vec<String> {
        Snapshot::load(store)
            .unwrap()
            .assignments
            .values()
            .map(|a| a.value.copy.clone())
            .collect()
    }

    fn is_pass_commit(r: &StoreRequest) -> bool {
        matches!(r, StoreRequest::Commit(_))
    }

    #[test]
    fn a_host_takes_the_lease_runs_passes_and_gives_the_lease_up_on_shutdown() {
        let store = store_with(&[spec("w", 2, 200)]);
        let mut d = Driver::new(cfg("c1"));
        d.run(&store, 100);
        assert!(d.host.is_leader());
        let leader = Snapshot::load(&store)
            .unwrap()
            .leader
            .expect("a leader record");
        assert_eq!(leader.value.holder, "c1");
        assert_eq!(d.host.fence(), Some(leader.mod_revision));
        assert_eq!(copies(&store), ["w-0", "w-1"]);
        assert!(d.said("became the leader"));
        // A second host stands by while the first leads, and takes over once it stops.
        let mut d2 = Driver::new(cfg("c2"));
        d2.now = 100;
        d2.run(&store, 300);
        assert!(!d2.host.is_leader());
        assert!(d2.said("standby: another controller holds the lease"));
        d.step(HostInput::Shutdown);
        d.run(&store, 400);
        assert_eq!(d.stopped, Some(Ok(())));
        assert!(d.said("stopped"));
        assert!(
            Snapshot::load(&store).unwrap().leader.is_none(),
            "lease given up"
        );
        d2.run(&store, 400);
        assert!(d2.host.is_leader(), "the standby took over within a poll");
    }

    #[test]
    fn the_lease_is_renewed_every_third_of_its_ttl_and_given_up_without_renewal() {
        let store = store_with(&[]);
        let mut d = Driver::new(cfg("c1"));
        d.run(&store, 10_000);
        let renewals = d.count(Purpose::Renewal, |_| true);
        // TTL 3 s: one every 1 s (at the first poll at or after it), for 10 s.
        assert!((9..=10).contains(&renewals), "{renewals}");
        assert!(d.host.is_leader());
        // From now on no keep-alive is answered: the host stops acting one TTL after the last
        // renewal it sent, though the request's own deadline is not over.
        let mut cfg = cfg("c2");
        cfg.request_timeout = Duration::from_secs(60);
        let store = store_with(&[]);
        let mut d = Driver::new(cfg);
        d.hook = Some(Box::new(|_, _, p| p != Purpose::Renewal));
        d.run(&store, 2_900);
        assert!(d.host.is_leader());
        d.run(&store, 3_100);
        assert!(!d.host.is_leader());
        assert!(d.said("lost the leader lease; following"));
    }

    #[test]
    fn a_deposed_leaders_pass_is_refused_by_the_fence() {
        for fencing_off in [false, true] {
            let store = store_with(&[spec("w", 1, 200)]);
            let mut c = cfg("c1");
            c.bug_fencing_off = fencing_off;
            let mut d = Driver::new(c);
            d.run(&store, 100);
            assert_eq!(copies(&store), ["w-0"]);
            // Another controller takes /leader between this host's read and its commit (the
            // store let its lease go, say); the pass then wants two more copies.
            crate::ops::apply(&store, &[spec("w", 3, 200)]).unwrap();
            let mut armed = true;
            d.hook = Some(Box::new(move |s, r, p| {
                if armed && p == Purpose::Pass && matches!(r, StoreRequest::Commit(_)) {
                    armed = false;
                    let old = s.get(LEADER).unwrap().unwrap();
                    let lease = s.grant(Duration::from_secs(30)).unwrap();
                    let usurper = Leader {
                        holder: "c2".into(),
                        acquired_ms: 0,
                        ttl_ms: 30_000,
                    };
                    s.commit(&Txn::new().expect(LEADER, old.mod_revision).put_leased(
                        LEADER,
                        encode(&usurper),
                        lease,
                    ))
                    .unwrap();
                }
                true
            }));
            d.run(&store, 300);
            if fencing_off {
                // The injected bug: the deposed host's write lands.
                assert_eq!(copies(&store), ["w-0", "w-1", "w-2"]);
            } else {
                assert_eq!(copies(&store), ["w-0"], "the deposed leader wrote");
                assert!(!d.host.is_leader());
                assert!(d.said("lost the leader lease; following"));
            }
        }
    }

    #[test]
    fn a_lost_reply_times_out_and_the_machine_carries_on() {
        let store = store_with(&[spec("w", 2, 200)]);
        let mut d = Driver::new(cfg("c1"));
        let mut lose = 1;
        // The first pass's read is carried out but its reply never comes.
        d.hook = Some(Box::new(move |_, r, p| {
            if p == Purpose::Pass && matches!(r, StoreRequest::Read { .. }) && lose > 0 {
                lose -= 1;
                return false;
            }
            true
        }));
        d.run(&store, 400);
        // Still waiting: at most one pass in flight, so no other round started.
        assert!(copies(&store).is_empty());
        assert_eq!(d.count(Purpose::Pass, |_| true), 1);
        d.run(&store, 1_000);
        assert!(d.said("pass failed: store unavailable: no reply within 500ms"));
        assert_eq!(copies(&store), ["w-0", "w-1"]);
        assert!(d.host.is_leader());
        // The late reply of a request the machine gave up on is ignored.
        let before = d.logs.len();
        d.step(HostInput::Replied(Replied {
            id: 1,
            result: Ok(StoreReply::Revision(7)),
        }));
        assert_eq!(d.logs.len(), before);
    }

    #[test]
    fn loops_start_and_stop_with_the_declarations_and_keep_their_grid() {
        let store = store_with(&[spec("a", 1, 200), spec("b", 1, 300)]);
        let mut d = Driver::new(cfg("c1"));
        d.run(&store, 1_000);
        assert_eq!(d.host.loops(), ["a", "b"]);
        let reads = |d: &Driver| -> Vec<u64> {
            d.requests
                .iter()
                .filter(|(_, r, p)| *p == Purpose::Pass && matches!(r, StoreRequest::Read { .. }))
                .map(|(t, _, _)| *t)
                .collect()
        };
        // Both loops started at the same poll: a's rounds every 200, b's every 300.
        let t = reads(&d);
        let start = t[0];
        let expected: Vec<u64> = {
            let mut v: Vec<u64> = (0..)
                .map(|k| start + 200 * k)
                .take_while(|&x| x <= 1_000)
                .chain((0..).map(|k| start + 300 * k).take_while(|&x| x <= 1_000))
                .collect();
            v.sort();
            v
        };
        assert_eq!(t, expected);
        crate::ops::delete(&store, "b").unwrap();
        d.run(&store, 1_200);
        assert_eq!(d.host.loops(), ["a"]);
        assert!(d.said("b: no longer declared; its loop ends"));
        crate::ops::apply(&store, &[spec("a", 1, 200), spec("c", 1, 200)]).unwrap();
        d.run(&store, 1_400);
        assert_eq!(d.host.loops(), ["a", "c"]);
        assert!(copies(&store).contains(&"c-0".to_owned()));
    }

    #[test]
    fn a_conflicting_commit_is_retried_on_a_fresh_read() {
        let store = store_with(&[spec("w", 2, 200)]);
        let mut d = Driver::new(cfg("c1"));
        let mut armed = true;
        // Just before the first pass commits, the declaration changes to 3 copies.
        d.hook = Some(Box::new(move |s, r, p| {
            if armed && p == Purpose::Pass && is_pass_commit(r) {
                armed = false;
                crate::ops::apply(s, &[spec("w", 3, 200)]).unwrap();
            }
            true
        }));
        d.run(&store, 100);
        assert!(d.said("1 conflicts, retried on fresh state"));
        assert_eq!(copies(&store), ["w-0", "w-1", "w-2"]);
        assert_eq!(d.count(Purpose::Pass, is_pass_commit), 2);
    }

    #[test]
    fn a_pass_that_always_conflicts_gives_up_after_five_attempts_until_its_next_round() {
        let store = store_with(&[spec("w", 2, 1_000)]);
        let mut d = Driver::new(cfg("c1"));
        let mut n = 0u64;
        d.hook = Some(Box::new(move |s, r, p| {
            if p == Purpose::Pass && is_pass_commit(r) {
                n += 1;
                crate::ops::apply(s, &[spec("w", 2 + n % 2, 1_000)]).unwrap();
            }
            true
        }));
        d.run(&store, 500);
        assert_eq!(
            d.count(Purpose::Pass, is_pass_commit),
            MAX_ATTEMPTS as usize
        );
        assert!(d.said("pass failed: gave up after 5 conflicting attempts"));
        assert!(copies(&store).is_empty());
        assert!(d.host.is_leader());
    }

    #[test]
    fn orphans_are_collected_every_second_and_the_injected_bug_spares_a_redeclared_ones() {
        for ignore_uid in [false, true] {
            let store = store_with(&[spec("w", 1, 100_000)]);
            let mut c = cfg("c1");
            c.bug_gc_ignores_owner_uid = ignore_uid;
            let mut d = Driver::new(c);
            d.run(&store, 100);
            assert_eq!(copies(&store), ["w-0"]);
            // Deleted and declared again: a new uid, so w-0 is an orphan.
            crate::ops::delete(&store, "w").unwrap();
            crate::ops::apply(&store, &[spec("w", 0, 100_000)]).unwrap();
            d.run(&store, 1_200);
            if ignore_uid {
                assert_eq!(copies(&store), ["w-0"], "the bug keeps the orphan");
            } else {
                assert!(copies(&store).is_empty());
                assert!(d.said("collected orphaned assignments: w-0"));
            }
            let sweeps = d.count(Purpose::Gc, |r| matches!(r, StoreRequest::Read { .. }));
            assert_eq!(sweeps, 2, "one at the first poll, one a second later");
        }
    }

    #[test]
    fn old_events_are_compacted_in_batches() {
        let store = store_with(&[]);
        let entries: Vec<(String, String)> = (0..700u64)
            .map(|i| {
                (
                    crate::events::round_key("w", i, i),
                    format!("{{\"at_ms\":{i}}}"),
                )
            })
            .collect();
        crate::events::append_all(&store, entries).unwrap();
        let mut c = cfg("c1");
        c.controller.event_retention = Duration::from_millis(1_000);
        let mut d = Driver::new(c);
        d.run(&store, 1_100);
        assert!(d.said("compacted the event log: 700 old entries removed"));
        assert_eq!(
            d.count(Purpose::Compaction, is_pass_commit),
            3,
            "two batches and the record"
        );
        assert!(store
            .read(&[crate::events::EVENTS])
            .unwrap()
            .entries
            .is_empty());
    }
}
