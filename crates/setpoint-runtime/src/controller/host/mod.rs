//! The controller host as one state machine without I/O, [`Host`]: it routes each input to the
//! part it concerns and gathers what the parts ask for into its outputs.
//!
//! # Shape
//! raft-rs's `RawNode` reduced to one call: the driver calls `step(now_ms, input)` with a
//! [`HostInput`] (a tick, a store reply, a watch delivery, shutdown) and carries out the
//! [`HostOutput`]s it returns, in order: store requests (each with its [`ReqId`]), log lines,
//! and the time to be stepped next ([`HostOutput::Wake`], exactly one per step until
//! [`HostOutput::Stopped`]). The machine never reads a clock, a store or a file; `now_ms` is the
//! host's own clock (monotonic; skew against the store is harmless, since lease expiry is the
//! store's business). [`run_controller`](super::run_controller) is the tokio driver; the chaos
//! world is another.
//!
//! # What it owns itself
//! The parts ([`super::election`], [`super::schedule`], [`super::gc`], [`super::compaction`],
//! [`super::serving`]) keep their own state and rules. The host keeps what they share:
//! - **the role** ([`Role`]): following, leading (with every part's leader state in [`Lead`]),
//!   releasing, stopped, and the *term*, bumped at every change of role, so that a reply to an
//!   earlier role is ignored;
//! - **requests and deadlines**: every request has an id and a deadline,
//!   [`HostConfig::request_timeout`] after it was sent; one unanswered by then counts as failed
//!   with [`StoreError::Unavailable`], and its late reply, if any, is ignored. A lost reply
//!   never wedges the machine;
//! - **the poll** of the leader: every `poll` it starts whatever is due (a cache read, a
//!   compaction, a renewal, the declarations, a collection, in that order), then the passes.
//!   A tick that provably does nothing but move the poll on its grid (nothing due, the
//!   declarations unmoved in the watch cache) is answered without the step, with the wake the
//!   step would ask for ([`Quiet`]): most of a steady leader's steps are such ticks;
//! - **the memo**: the last snapshot a pass or a collection read, whose unchanged values the
//!   next one reuses instead of decoding them again ([`Snapshot::from_read_reusing`]);
//! - **shutdown**: a leader revokes its lease (so another controller takes over at once) and
//!   stops when the revoke is answered or times out; a follower stops at once, unless it is
//!   taking the lease right then: that lease is revoked first.

use std::collections::BTreeMap;

use super::compaction::{Compactor, Next};
use super::config::HostConfig;
use super::election::{self, Follower, Lease};
use super::gc::Collector;
use super::reconcile::{gc_outcome, plan_gc, plan_pass, PassError, PassReport, PassSettings};
use super::schedule::{self, pass_log_lines, Declarations, Loop, Schedule, MAX_ATTEMPTS};
use super::serving::{CatchUp, HostCache, Served};
use super::verdict::Verdict;
use crate::batches::Writes;
use crate::cache::CacheStats;
use crate::conditions::Conditions;
use crate::machine::{Replied, ReqId, StoreReply, StoreRequest, StoreResult, Wake, WatchDelivery};
use crate::model::{Snapshot, LEADER, WORKLOADS};
use crate::retention;
use crate::store::{LeaseId, Read, Revision, StoreError, Txn, TxnLimits, WatchEvent};

mod cache;
mod housekeeping;
mod leadership;
mod passes;
mod poll;

/// The condition of the store not answering ([`Conditions`]).
const STORE: &str = "store";
/// The condition of the leader lease not renewed.
const RENEWAL: &str = "leader lease";

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

/// The leader's state: one field per part.
#[derive(Debug)]
struct Lead {
    /// The lease and its renewals ([`super::election`]).
    lease: Lease,
    /// When the leader's next poll is due.
    next_poll_ms: u64,
    /// The poll of the declarations ([`super::schedule`]).
    declarations: Declarations,
    /// The workloads' loops ([`super::schedule`]).
    loops: Schedule,
    /// Garbage collection ([`super::gc`]).
    gc: Collector,
    /// Event-log compaction ([`super::compaction`]).
    compaction: Compactor,
    /// The watch cache, on a store that pushes changes ([`super::serving`]).
    cache: Option<HostCache>,
    /// The pass and collection reads waiting for the cache to catch up ([`CatchUp`]).
    catch_up: CatchUp<(Ask, Purpose, Awaiting)>,
}

/// What a leader's tick would do, as it stood after its last step: a tick that provably does
/// nothing but move the poll on its grid is answered without the step ([`Host::quiet_tick`]).
/// The host's state changes only in its steps, so until the next one only the clock moves, and
/// every rule a tick applies is a threshold on the clock: each threshold is kept here.
#[derive(Clone, Copy, Debug)]
struct Quiet {
    /// A tick before this does nothing but its poll: no request is past its deadline
    /// ([`Host::expire`]), no read's wait for the cache ends ([`Host::end_waits`]), the lease
    /// has not lapsed, and no loop is due ([`Host::drive_loops`]).
    until_ms: u64,
    /// A poll before this does nothing (its compaction, renewal and collection are not due;
    /// the declarations are read at the cache's revision, or a poll of them is in flight; the
    /// cache needs no read; the store is not failing, so no recovery is said) but set the
    /// next poll a period on.
    poll_until_ms: u64,
    /// The wake the step asks for besides its next poll ([`Host::next_wake`]).
    wake_ms: u64,
}

/// What the host is now.
#[derive(Debug)]
enum Role {
    /// Without the lease: trying for it, or standing by ([`super::election`]).
    Follow(Follower),
    /// Holding it.
    Lead(Box<Lead>),
    /// Giving it up on shutdown.
    Releasing,
    /// Done: nothing more comes out.
    Stopped,
}

/// A request as the host asks it: a pass's or a collection's snapshot read is built (its nine
/// prefixes as strings) only if it goes to the store, since the watch cache answers most of
/// them.
#[derive(Debug)]
enum Ask {
    /// The read of [`Snapshot::PREFIXES`] ([`snapshot_read`]).
    Snapshot,
    /// Any other request.
    Store(StoreRequest),
}

impl Ask {
    /// The request to send to the store.
    fn into_request(self) -> StoreRequest {
        match self {
            Ask::Snapshot => snapshot_read(),
            Ask::Store(request) => request,
        }
    }
}

/// What an outstanding request waits for.
#[derive(Debug)]
enum Awaiting {
    LeaderRead,
    /// A standby's watch of `/leader`.
    FollowWatch,
    /// `acquired_ms` is the store's clock at the read of `/leader`, `asked_ms` this host's when
    /// it asked for the lease: the lease can end no earlier than a TTL after that.
    /// `replaces` is the `mod_revision` of a lease-less (forged) `/leader` the claim replaces,
    /// 0 if it was absent.
    Grant {
        acquired_ms: u64,
        asked_ms: u64,
        replaces: Revision,
    },
    Create {
        lease: LeaseId,
        asked_ms: u64,
    },
    /// Nothing: a revoke of a lease that lost the race.
    Discard,
    KeepAlive {
        sent_ms: u64,
    },
    Revision,
    Declarations,
    PassRead {
        name: String,
        gen: u64,
    },
    PassCommit {
        name: String,
        gen: u64,
        report: Box<PassReport>,
        touches: bool,
        /// The pass's transactions still to commit ([`crate::batches`]).
        writes: Box<Writes>,
    },
    GcRead,
    GcCommit {
        /// The sweep's transactions still to commit, with the copies each removes.
        writes: Box<Writes>,
    },
    CacheRead,
    CacheWatch,
    CompactRead,
    CompactCommit {
        rest: Vec<Txn>,
        removed: u64,
    },
    Release,
}

/// An outstanding request.
#[derive(Debug)]
struct Pending {
    /// When it counts as failed, unanswered (this host's clock).
    deadline_ms: u64,
    /// The role term the request belongs to: replies from an earlier term are ignored.
    term: u64,
    /// What its reply is for.
    what: Awaiting,
}

/// The controller host as a state machine. See the [controller](crate::controller) documentation.
#[derive(Debug)]
pub struct Host {
    cfg: HostConfig,
    who: String,
    now: u64,
    next_id: ReqId,
    /// The generation the next loop gets ([`super::schedule`]): unique across leaderships.
    next_gen: u64,
    /// Bumped at every change of role.
    term: u64,
    pending: BTreeMap<ReqId, Pending>,
    role: Role,
    /// The conditions that repeat until they end, logged when they begin, not at every try
    /// ([`crate::conditions`]): the store not answering, the leader lease not renewed, each
    /// loop's passes failing.
    conditions: Conditions,
    /// The store's clock minus this host's, as the last read reply showed it: how a read served
    /// by the cache dates itself.
    store_offset: i64,
    out: Vec<HostOutput>,
    /// The last snapshot a pass or a collection read: values unchanged since are taken from it
    /// instead of decoded again ([`Snapshot::from_read_reusing`]).
    memo: Option<Snapshot>,
    /// The problems of stored records last logged, by key ([`crate::model::trust`]): each is
    /// logged once, and again only when its reason changes.
    problems_said: BTreeMap<String, String>,
    /// The passes ended, for the driver's metrics ([`Host::take_passes`]).
    observed: super::observe::Observations,
    /// What a tick would do, as the last step left the leader ([`Quiet`]); `None`: a tick takes
    /// the whole step.
    quiet: Option<Quiet>,
    /// Whether quiet ticks are answered without the step (a test turns it off to compare).
    quiet_ticks: bool,
    /// How many ticks were answered so, for the tests.
    #[cfg(test)]
    quiet_answered: u64,
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
            memo: None,
            problems_said: BTreeMap::new(),
            role: Role::Follow(Follower::new(now_ms)),
            conditions: Conditions::new(),
            store_offset: 0,
            out: Vec::new(),
            observed: Default::default(),
            quiet: None,
            quiet_ticks: true,
            #[cfg(test)]
            quiet_answered: 0,
        }
    }

    /// The passes ended (and the rounds skipped) since the last call, oldest first: what the
    /// driver's metrics count. Taking them changes nothing the host does.
    pub fn take_passes(&mut self) -> Vec<super::PassObservation> {
        self.observed.take()
    }

    /// Answers quiet ticks with the whole step too ([`Quiet`]): what a host did before they
    /// were answered without it, for a test to compare with.
    #[cfg(test)]
    fn without_quiet_ticks(mut self) -> Self {
        self.quiet_ticks = false;
        self
    }

    /// Whether this host acts as the leader now.
    pub fn is_leader(&self) -> bool {
        matches!(self.role, Role::Lead(_))
    }

    /// The fencing token of the leadership held, if any: `/leader`'s revision when it was taken.
    pub fn fence(&self) -> Option<Revision> {
        match &self.role {
            Role::Lead(l) => Some(l.lease.fence),
            _ => None,
        }
    }

    /// The names of the workloads whose loops run, in order.
    pub fn loops(&self) -> Vec<String> {
        match &self.role {
            Role::Lead(l) => l.loops.names(),
            _ => Vec::new(),
        }
    }

    /// What the leader's watch cache has done, while it leads with one.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        match &self.role {
            Role::Lead(l) => l.cache.as_ref().map(HostCache::stats),
            _ => None,
        }
    }

    /// The leader's watch cache position: the revision it is at and how many revisions it is
    /// behind this host's own newest write or conflict on a cached key; `None` when not
    /// leading or without a cache.
    pub fn cache_position(&self) -> Option<(u64, u64)> {
        match &self.role {
            Role::Lead(l) => l.cache.as_ref().map(HostCache::position),
            _ => None,
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
        let mut out = Vec::new();
        self.step_into(now_ms, input, &mut out);
        out
    }

    /// [`Self::step`], appending the outputs to `out`: a driver that steps often keeps one
    /// buffer and spares an allocation a step (the simulated world steps a host on every
    /// reply, watch event and timer).
    pub fn step_into(&mut self, now_ms: u64, input: HostInput, out: &mut Vec<HostOutput>) {
        self.now = self.now.max(now_ms);
        if self.is_stopped() {
            return;
        }
        if matches!(input, HostInput::Tick) {
            if let Some(wake) = self.quiet_tick(now_ms) {
                out.push(HostOutput::Wake(wake));
                return;
            }
        }
        let lent = crate::machine::Lent::lend(&mut self.out, out);
        match input {
            HostInput::Tick => {}
            HostInput::Replied(Replied { id, result }) => {
                if let Some(p) = self.pending.remove(&id) {
                    if let Ok(StoreReply::Read { now_ms, read }) = &result {
                        self.store_offset = *now_ms as i64 - self.now as i64;
                        // Monotonic reads: once this host has read the store at a revision,
                        // its cache serves nothing older (see `reads_of_cached_state`).
                        if p.term == self.term && reads_of_cached_state(&p.what) {
                            self.saw(read.revision);
                        }
                    }
                    self.on_reply(p, result);
                }
            }
            HostInput::Watch(d) => self.on_watch(d),
            HostInput::Shutdown => self.on_shutdown(),
        }
        self.expire();
        self.end_waits();
        self.drive();
        self.quiet = None;
        if !self.is_stopped() {
            let wake = self.next_wake();
            self.out.push(HostOutput::Wake(Wake(wake)));
        }
        lent.give_back(&mut self.out, out);
    }

    /// A tick at `now_ms` that provably does nothing but move the leader's poll on its grid
    /// (nothing due by then, as the last step left things: no deadline, no round, no renewal,
    /// collection or compaction, the declarations unmoved in the watch cache): moves it, as the
    /// poll would (the next a period after this one), and returns the wake the whole step would
    /// ask for, its only output. `None` if the tick is not such
    /// a one: then nothing changed, and it takes the whole step. Most of a steady leader's
    /// steps are such ticks: its poll every `poll`, with nothing due.
    ///
    /// [`Host::step_into`] tries it on every tick; a driver that steps often may call it
    /// first, and step with [`HostInput::Tick`] only if it returns `None`.
    pub fn quiet_tick(&mut self, now_ms: u64) -> Option<Wake> {
        let q = self.quiet?;
        let now = self.now.max(now_ms);
        if now >= q.until_ms {
            return None;
        }
        let poll = self.cfg.poll_ms();
        let Role::Lead(l) = &mut self.role else {
            return None;
        };
        if now >= l.next_poll_ms {
            if now >= q.poll_until_ms {
                return None;
            }
            l.next_poll_ms = now + poll;
        }
        self.now = now;
        let wake = Wake(q.wake_ms.min(l.next_poll_ms).max(now));
        #[cfg(test)]
        {
            self.quiet_answered += 1;
        }
        Some(wake)
    }

    // ---- plumbing ----

    fn send(&mut self, request: StoreRequest, purpose: Purpose, what: Awaiting) -> ReqId {
        let id = self.next_id;
        self.next_id += 1;
        let deadline_ms = self
            .now
            .saturating_add(super::config::millis(self.cfg.request_timeout));
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

    /// Sends `request`, or answers it at once from the watch cache if the serving rule lets it
    /// ([`HostCache::serve`]).
    fn request(&mut self, request: StoreRequest, purpose: Purpose, what: Awaiting) {
        self.ask(Ask::Store(request), purpose, what);
    }

    /// Sends the read of a pass's or a collection's snapshot ([`snapshot_read`]), or answers it
    /// at once from the watch cache with its snapshot if the serving rule lets it
    /// ([`HostCache::serve_snapshot`]).
    fn request_snapshot(&mut self, purpose: Purpose, what: Awaiting) {
        self.ask(Ask::Snapshot, purpose, what);
    }

    /// Asks the store's revision for the poll of the declarations: a live watch cache answers
    /// it at once, as [`HostCache::serve`] would (then the answer goes straight to
    /// [`Host::on_revision`], where [`Host::request`] would route it through a pending request
    /// of this term); else it is sent. The leader asks every poll.
    fn request_revision(&mut self) {
        let served = match &self.role {
            Role::Lead(l) => l.cache.as_ref().and_then(HostCache::live_revision),
            _ => None,
        };
        match served {
            Some(revision) => self.on_revision(Ok(StoreReply::Revision(revision))),
            None => self.request(
                StoreRequest::Revision,
                Purpose::Declarations,
                Awaiting::Revision,
            ),
        }
    }

    /// [`Host::request`] and [`Host::request_snapshot`]: a pass's or a collection's read waits
    /// while the cache is behind ([`CatchUp`]).
    fn ask(&mut self, ask: Ask, purpose: Purpose, what: Awaiting) {
        let now = self.now;
        let wants_snapshot = matches!(what, Awaiting::PassRead { .. } | Awaiting::GcRead);
        if let Role::Lead(l) = &mut self.role {
            if wants_snapshot && l.cache.as_ref().is_some_and(HostCache::is_behind) {
                l.catch_up.wait(now, (ask, purpose, what));
                return;
            }
        }
        self.request_now(ask, purpose, what);
    }

    /// [`Host::ask`] without waiting for the cache: served by it, or sent to the store.
    fn request_now(&mut self, ask: Ask, purpose: Purpose, what: Awaiting) {
        let now = self.now;
        let now_ms = now.saturating_add_signed(self.store_offset);
        let wants_snapshot = matches!(what, Awaiting::PassRead { .. } | Awaiting::GcRead);
        let request = match ask {
            Ask::Snapshot if wants_snapshot => {
                let served = match &mut self.role {
                    Role::Lead(l) => l
                        .cache
                        .as_mut()
                        .and_then(|c| c.serve_snapshot(now_ms, &mut self.memo)),
                    _ => None,
                };
                match (served, what) {
                    (Some(s), Awaiting::PassRead { name, gen }) => {
                        self.on_pass_snapshot(s, name, gen)
                    }
                    (Some(s), _) => self.on_gc_snapshot(s),
                    (None, what) => {
                        self.send(snapshot_read(), purpose, what);
                    }
                }
                return;
            }
            ask => ask.into_request(),
        };
        let served = match &mut self.role {
            Role::Lead(l) => l
                .cache
                .as_mut()
                .and_then(|c| c.serve(&request, wants_snapshot, now_ms, &mut self.memo)),
            _ => None,
        };
        match (served, what) {
            (Some(Served::Snapshot(s)), Awaiting::PassRead { name, gen }) => {
                self.on_pass_snapshot(*s, name, gen)
            }
            (Some(Served::Snapshot(s)), _) => self.on_gc_snapshot(*s),
            (Some(Served::Reply(reply)), what) => {
                let p = Pending {
                    deadline_ms: now,
                    term: self.term,
                    what,
                };
                self.on_reply(p, Ok(reply));
            }
            (None, what) => {
                self.send(request, purpose, what);
            }
        }
    }

    /// The reads whose wait for the cache ends now ([`CatchUp`]) are served by it, or sent to
    /// the store.
    fn end_waits(&mut self) {
        let now = self.now;
        let ready = match &mut self.role {
            Role::Lead(l) => {
                let behind = l.cache.as_ref().is_some_and(HostCache::is_behind);
                l.catch_up.ready(now, behind)
            }
            _ => return,
        };
        for (ask, purpose, what) in ready {
            // A served read may end the leadership: what still waited is the old role's.
            if !self.is_leader() {
                return;
            }
            self.request_now(ask, purpose, what);
        }
    }

    /// The watch cache, while this host leads with one.
    fn cache(&mut self) -> Option<&mut HostCache> {
        self.lead().and_then(|l| l.cache.as_mut())
    }

    /// Whether `txn` writes a key the watch cache holds.
    fn touches_cache(&self, txn: &Txn) -> bool {
        match &self.role {
            Role::Lead(l) => l.cache.as_ref().is_some_and(|c| c.touches(txn)),
            _ => false,
        }
    }

    /// Read your writes: the cache serves nothing older than `rev` from now on.
    fn saw(&mut self, rev: Revision) {
        if let Some(c) = self.cache() {
            c.saw(rev);
        }
    }

    /// Notes a conflict's revision, if it is on a key the cache holds.
    fn saw_conflict(&mut self, e: &StoreError) {
        if let Some(c) = self.cache() {
            c.saw_conflict(e);
        }
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

    /// Acts on how a part's work ended.
    fn act_on(&mut self, verdict: Verdict) {
        match verdict {
            Verdict::Quiet => {}
            Verdict::Say(line) => self.log(None, line),
            Verdict::Deposed => self.depose(),
            Verdict::Lost(e) => self.lost(e),
        }
    }

    fn lead(&mut self) -> Option<&mut Lead> {
        match &mut self.role {
            Role::Lead(l) => Some(l),
            _ => None,
        }
    }

    fn follower(&mut self) -> Option<&mut Follower> {
        match &mut self.role {
            Role::Follow(f) => Some(f),
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

    /// When to be stepped next. For a leader it also notes what a tick until then would do
    /// ([`Quiet`]).
    fn next_wake(&mut self) -> u64 {
        let mut at = u64::MAX;
        for p in self.pending.values() {
            at = at.min(p.deadline_ms);
        }
        match &self.role {
            Role::Follow(f) => at = at.min(f.next_wake().unwrap_or(u64::MAX)),
            Role::Lead(l) => {
                at = at.min(l.loops.next_wake(self.now).unwrap_or(u64::MAX));
                // The lease's lapse: the leader steps down then, not at its next poll.
                let ttl = self.cfg.ttl_ms();
                at = at.min(l.lease.lapses_at(ttl));
                let waits = l.catch_up.next_wake();
                at = at.min(waits.unwrap_or(u64::MAX));
                // Waits end all at once when the cache is not behind. A wait is only begun
                // while it is, and what stops it being so (a lost watch) comes before
                // `end_waits` in the step: this keeps the rule whole, not a case seen.
                let waits_on_time =
                    waits.is_none() || l.cache.as_ref().is_some_and(HostCache::is_behind);
                if self.quiet_ticks && waits_on_time {
                    self.quiet = Some(Quiet {
                        until_ms: at,
                        poll_until_ms: self.poll_quiet_until(l),
                        wake_ms: at,
                    });
                }
                at = at.min(l.next_poll_ms);
            }
            _ => {}
        }
        if at == u64::MAX {
            // Nothing due: look again after a poll (never reached while following or leading).
            at = self.now + self.cfg.poll_ms();
        }
        at.max(self.now)
    }

    /// Until when a poll of leader `l` does nothing, as things stand ([`Quiet::poll_until_ms`],
    /// [`Host::drive_lead`]): 0 if the poll has work whenever it comes (the declarations to
    /// ask the store for or to read, the cache to read, a recovery to say).
    fn poll_quiet_until(&self, l: &Lead) -> u64 {
        let cache = l.cache.as_ref();
        let declarations_idle = l
            .declarations
            .idle_at(cache.and_then(HostCache::live_revision))
            && !self.conditions.failing(STORE);
        if !declarations_idle || cache.is_some_and(HostCache::would_start_read) {
            return 0;
        }
        let retention = super::config::millis(self.cfg.controller.event_retention);
        l.compaction
            .due_at(retention)
            .min(l.lease.renewal_due_at(self.cfg.ttl_ms()))
            .min(l.gc.due_at())
    }

    // ---- inputs ----

    fn on_shutdown(&mut self) {
        match std::mem::replace(&mut self.role, Role::Releasing) {
            Role::Lead(l) => {
                self.term += 1;
                self.cancel_watch(&l);
                self.send(
                    StoreRequest::Revoke(l.lease.id),
                    Purpose::Release,
                    Awaiting::Release,
                );
            }
            Role::Follow(mut f) => {
                if let Some(id) = f.end_watch() {
                    self.push_cancel(id);
                }
                // A lease being taken right now is given up too, so that nobody waits a TTL.
                let taking = self.pending.values().find_map(|p| match p.what {
                    Awaiting::Create { lease, .. } if p.term == self.term => Some(lease),
                    _ => None,
                });
                self.term += 1;
                match taking {
                    Some(lease) => {
                        self.send(
                            StoreRequest::Revoke(lease),
                            Purpose::Release,
                            Awaiting::Release,
                        );
                    }
                    None => self.stop(Ok(())),
                }
            }
            other => self.role = other,
        }
    }

    /// Routes a reply to the part whose request it answers.
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
            if let (Awaiting::Create { lease, .. }, Ok(StoreReply::Committed(_))) =
                (&p.what, &result)
            {
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
            Awaiting::FollowWatch => {
                if !matches!(result, Ok(StoreReply::Watching)) {
                    // Not established, or its reply lost (the store's side may be open): cancel
                    // it and poll again.
                    let now = self.now;
                    if let Some(id) = self.follower().and_then(|f| f.watch_refused(now)) {
                        self.push_cancel(id);
                    }
                }
            }
            Awaiting::Grant {
                acquired_ms,
                asked_ms,
                replaces,
            } => self.on_grant(result, acquired_ms, asked_ms, replaces),
            Awaiting::Create { lease, asked_ms } => self.on_create(result, lease, asked_ms),
            Awaiting::Discard => {}
            Awaiting::KeepAlive { sent_ms } => self.on_keep_alive(result, sent_ms),
            Awaiting::Revision => self.on_revision(result),
            Awaiting::Declarations => self.on_declarations(result),
            Awaiting::PassRead { name, gen } => self.on_pass_read(result, name, gen),
            Awaiting::PassCommit {
                name,
                gen,
                report,
                touches,
                writes,
            } => self.on_pass_commit(result, name, gen, *report, touches, *writes),
            Awaiting::CacheRead => self.on_cache_read(result),
            Awaiting::CacheWatch => self.on_cache_watch(result),
            Awaiting::GcRead => self.on_gc_read(result),
            Awaiting::GcCommit { writes } => self.on_gc_commit(result, *writes),
            Awaiting::CompactRead => self.on_compact_read(result),
            Awaiting::CompactCommit { rest, removed } => {
                self.on_compact_commit(result, rest, removed)
            }
            Awaiting::Release => unreachable!("handled above"),
        }
    }

    fn on_watch(&mut self, d: WatchDelivery) {
        let now = self.now;
        if let Some(f) = self.follower().filter(|f| f.is_watch(d.watch)) {
            // A standby's watch of `/leader`: if the record is gone (or the watch is lost),
            // try for the lease now.
            if let Some(id) = f.on_watch(now, &d.event) {
                self.push_cancel(id);
            }
            return;
        }
        let ours = self.cache().is_some_and(|c| c.watch() == Some(d.watch));
        if !ours {
            // A watch this machine no longer follows (cancelled, or of an earlier leadership).
            return;
        }
        match d.event {
            WatchEvent::Idle => {}
            WatchEvent::Lost(_) => self.watch_lost(),
            WatchEvent::Changes { revision, changes } => {
                let Some(c) = self.cache() else { return };
                if c.apply(revision, changes) {
                    self.wake_all();
                }
            }
        }
    }
}

/// The read of everything a pass or a collection looks at.
fn snapshot_read() -> StoreRequest {
    StoreRequest::Read {
        prefixes: strings(&Snapshot::PREFIXES),
    }
}

/// Whether a reply to `what` is a read of prefixes the watch cache holds (the declarations, a
/// pass's or a collection's snapshot). When the store answers one at revision R, the cache
/// serves nothing older than R from then on: a loop declared by a store read at R must not
/// have its first pass served from a cache still before R, which finds the workload absent.
fn reads_of_cached_state(what: &Awaiting) -> bool {
    matches!(
        what,
        Awaiting::Declarations | Awaiting::PassRead { .. } | Awaiting::GcRead
    )
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

#[cfg(test)]
mod tests;
