//! The node claim and lease ([`NodeLease`]): claiming `/nodes/{name}`, renewing its lease, and
//! the self-fence's clock.
//!
//! - **The claim.** `/nodes/{name}` is created under a new lease only if absent; a record of the
//!   same place (an earlier agent on this data directory, whose lock the driver now holds) has
//!   its lease taken over; any other holder is a refusal. A claim after fencing is *fresh*: a
//!   record found then is another agent's, unless it stands under a lease this claim was granted
//!   or the lease it lost (its revoke may have failed).
//! - **Renewal.** A renewal goes out every quarter TTL whether or not earlier ones answered (at
//!   most [`RENEWALS_IN_FLIGHT`] at once). The lease's end is counted from the moment the last
//!   renewal that succeeded was *sent*.
//! - **The fence's clock** ([`fence_times_ms`]): SIGTERM to every copy at 3/4 TTL, SIGKILL at
//!   9/10, from the machine's own clock. This part only says when ([`NodeLease::keep`] returns a
//!   [`Fence`]); the core signals the copies and then claims the name again
//!   ([`NodeLease::reclaim`]).
//!
//! It is separate because it is the agent's one safety rule ("never two"): its state (the claim's
//! step, the lease, the renewals in flight) is touched by nothing else, and it can be tested by
//! handing it store replies alone.

use std::collections::BTreeSet;

use super::outbox::{Outbox, Purpose, Soonest};
use super::AgentCoreConfig;
use super::CopySignal;
use crate::machine::{ReqId, StoreReply, StoreRequest, StoreResult};
use crate::model::node::{node_key, NodeError, NodeRecord};
use crate::model::{decode, encode};
use crate::store::{LeaseId, Revision, StoreError, Txn};

/// How many renewals may be in flight at once. A renewal can hang on a dead etcd member until
/// its deadline; the next ones go out on time and may reach a live member.
pub const RENEWALS_IN_FLIGHT: usize = 8;
/// Attempts of the first claim before it gives up on a key that keeps changing.
const CLAIM_ATTEMPTS: u32 = 10;
/// The pause between two attempts of the first claim, in milliseconds.
const CLAIM_RETRY_MS: u64 = 20;

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

/// The node claim, step by step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClaimStep {
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
        /// Renewals in flight.
        in_flight: usize,
    },
    /// Another agent holds the name: this one stops.
    Refused,
    /// Given up (shutdown).
    Released,
}

/// What a claim came to, when it came to something the rest of the agent must act on.
#[derive(Debug)]
pub(super) enum Claimed {
    /// The name is held under `lease` (`adopted`: taken over from an earlier agent here).
    Held {
        lease: LeaseId,
        ttl_ms: u64,
        adopted: bool,
    },
    /// The first claim cannot succeed (refused, or the store is gone for good): the agent
    /// cannot run.
    Fatal(NodeError),
    /// A claim after fencing found the name held by another agent: this one must stop.
    Refused(String),
}

/// An act of the self-fence that is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fence {
    /// SIGTERM to every copy: `lease` has not been renewed for `unrenewed_ms` (3/4 TTL).
    Term { lease: LeaseId, unrenewed_ms: u64 },
    /// SIGKILL to every copy (9/10 TTL), then claim the name again.
    Kill { lease: LeaseId },
}

/// What keeping the lease asks for at a time: an act of the fence, and whether a renewal is due.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Keep {
    /// The fence's act, if one is due.
    pub(super) fence: Option<Fence>,
    /// A renewal is due ([`NodeLease::send_renewal`]).
    pub(super) renew: bool,
}

/// The node's claim and lease: see the [module docs](self).
#[derive(Debug)]
pub(super) struct NodeLease {
    state: LeaseSt,
    /// The leases granted to the claim under way: a record found under one of them is this
    /// agent's own (its create committed, the reply was lost).
    granted: BTreeSet<LeaseId>,
    /// When this agent started: the first claim's fence counts from it.
    born: u64,
    /// The first claim's fence: what it has sent to the copies an earlier agent here may
    /// have left running ([`NodeLease::strays_due`]).
    strays: StraysFenced,
    /// Whether that fence sent anything.
    strays_signalled: bool,
    /// When an earlier agent at this place last sent a renewal that succeeded, as it wrote
    /// down ([`NodeLease::inherit`]): the store ends that lease `ttl` after it at the earliest.
    inherited: Option<u64>,
    /// The last `ok_sent` handed out to be written down ([`NodeLease::renewal_to_record`]).
    recorded: Option<u64>,
}

/// How far the first claim's fence has gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum StraysFenced {
    /// Nothing sent.
    No,
    /// SIGTERM sent (3/4 TTL after the agent's start).
    Termed,
    /// SIGKILL sent (9/10 TTL), or the name was held before the SIGTERM was due.
    Done,
}

impl NodeLease {
    /// A first claim, starting at `now` with a read of the record.
    pub(super) fn new(now: u64) -> Self {
        Self {
            state: LeaseSt::Claiming {
                step: ClaimStep::Read,
                fresh: false,
                attempt: 0,
                sent: now,
                waiting: None,
            },
            granted: BTreeSet::new(),
            born: now,
            strays: StraysFenced::No,
            strays_signalled: false,
            inherited: None,
            recorded: None,
        }
    }

    /// The first claim's fence counts from `renewal_sent_ms` too, when an earlier agent here
    /// wrote down that it sent a renewal that succeeded then ([`NodeLease::strays_times`]).
    pub(super) fn inherit(&mut self, renewal_sent_ms: u64) {
        self.inherited = Some(renewal_sent_ms);
    }

    /// When the held lease's last successful renewal (or its grant) was sent, if that is later
    /// than what was last handed out: the driver writes it down, so that a later agent here
    /// knows when the store may end this lease ([`NodeLease::inherit`]). Once per change.
    pub(super) fn renewal_to_record(&mut self) -> Option<u64> {
        let LeaseSt::Held {
            ok_sent,
            termed: false,
            ..
        } = self.state
        else {
            return None;
        };
        if self.recorded.is_some_and(|r| r >= ok_sent) {
            return None;
        }
        self.recorded = Some(ok_sent);
        Some(ok_sent)
    }

    /// Since when the agent counts as cut off from the store: when the first renewal after the
    /// last one that succeeded was due (a quarter TTL after it). `None` before any renewal
    /// succeeded in this agent's life. Copies with `stop_when_cut_off` stop that long after it.
    pub(super) fn cut_off_since(&self, ttl_ms: u64) -> Option<u64> {
        self.recorded.map(|sent| sent + renew_every_ms(ttl_ms))
    }

    /// When the first claim's fence sends SIGTERM and SIGKILL, for a lease of `ttl_ms`.
    ///
    /// The earlier agent here wrote down when it last sent a renewal that succeeded
    /// ([`NodeLease::inherit`]); the store can end that lease `ttl` after it, so the SIGKILL
    /// comes by that renewal's deadline, 9/10 TTL after it, and the SIGTERM by its 3/4, but
    /// not before a tenth of the TTL from this agent's start, the time a claim needs (the
    /// SIGKILL alone if that leaves no room). If even that deadline has passed, the lease is
    /// over or nearly so, and no fence can come before its end: the claim gets its tenth, and
    /// the SIGTERM's grace follows. With nothing written down (a first start, a lost state
    /// directory, an agent of an older version) the worst a living earlier agent left is
    /// assumed: a lease renewed 3/4 TTL before this start, the latest it could have been
    /// without that agent fencing itself, which gives a tenth and 3/20 of the TTL from the
    /// start. A renewal written down after the start (a clock stepped back) counts as the start.
    pub(super) fn strays_times(&self, ttl_ms: u64) -> (u64, u64) {
        let floor = self.born + ttl_ms / 10;
        let Some(sent) = self.inherited else {
            return (floor, self.born + ttl_ms * 3 / 20);
        };
        let (term, kill) = fence_times_ms(sent.min(self.born), ttl_ms);
        if kill >= self.born {
            (term.max(floor).min(kill), kill)
        } else {
            (floor, floor + (kill - term))
        }
    }

    /// The same claim, for an agent whose process started at `born`, before its machine: the
    /// first claim's fence counts from then.
    pub(super) fn born_at(mut self, born: u64) -> Self {
        self.born = born;
        self
    }

    /// When this agent started.
    pub(super) fn born(&self) -> u64 {
        self.born
    }

    /// Whether the first claim's fence signalled what an earlier agent left running: what it
    /// then finds ended, it stopped itself.
    pub(super) fn strays_fenced(&self) -> bool {
        self.strays_signalled
    }

    /// Whether the first claim is still under way: no lease held yet in this agent's life.
    fn first_claim(&self) -> bool {
        matches!(self.state, LeaseSt::Claiming { fresh: false, .. })
    }

    /// The first claim's fence. Copies an earlier agent at this place started may still run
    /// (it crashed or was restarted), and this agent cannot know them before its claim holds
    /// the name and it has read its state. Their node lease was last renewed before this agent
    /// started, so the store may end it at `born + ttl` at the latest (earlier: `ttl` after
    /// the earlier agent's last renewal, if it wrote that down); the controller may then start
    /// their names elsewhere. So while the first claim has not succeeded, they are stopped by
    /// the deadlines of that lease ([`NodeLease::strays_times`]): SIGTERM at 3/4 TTL, SIGKILL
    /// at 9/10 (issue 22, item 1: an agent restarted while cut off from the store never
    /// fenced, and a `named` copy ran on two nodes). Returns the signal due at `now`,
    /// once each; after the claim holds the name, a SIGKILL if only the SIGTERM went out, so
    /// that nothing half-stopped is adopted.
    pub(super) fn strays_due(&mut self, now: u64, ttl_ms: u64) -> Option<CopySignal> {
        if self.strays == StraysFenced::Done {
            return None;
        }
        let (term, kill) = self.strays_times(ttl_ms);
        if !self.first_claim() {
            let termed = self.strays == StraysFenced::Termed;
            self.strays = StraysFenced::Done;
            let held = matches!(self.state, LeaseSt::Held { .. });
            return (termed && held).then_some(CopySignal::Kill);
        }
        let signal = if now >= kill {
            self.strays = StraysFenced::Done;
            Some(CopySignal::Kill)
        } else if now >= term && self.strays == StraysFenced::No {
            self.strays = StraysFenced::Termed;
            Some(CopySignal::Term)
        } else {
            None
        };
        self.strays_signalled |= signal.is_some();
        signal
    }

    /// The lease held now, if one is held and not fenced.
    pub(super) fn held(&self) -> Option<LeaseId> {
        match self.state {
            LeaseSt::Held {
                lease,
                termed: false,
                ..
            } => Some(lease),
            _ => None,
        }
    }

    /// Whether the fence is due at `now` and has not come down yet: the step's
    /// [`NodeLease::keep`] brings it down, and until then [`NodeLease::held`] still names the
    /// lease. What the step would act on before that (a sync's answer) must not be.
    pub(super) fn fence_due(&self, now: u64) -> bool {
        match self.state {
            LeaseSt::Held {
                ok_sent,
                ttl_ms,
                termed: false,
                ..
            } => now >= fence_times_ms(ok_sent, ttl_ms).0,
            _ => false,
        }
    }

    /// The lease held now, fenced or not: the one to give up at shutdown.
    pub(super) fn holding(&self) -> Option<LeaseId> {
        match self.state {
            LeaseSt::Held { lease, .. } => Some(lease),
            _ => None,
        }
    }

    /// Whether request `id` is the one the claim waits for.
    pub(super) fn awaits(&self, id: ReqId) -> bool {
        matches!(self.state, LeaseSt::Claiming { waiting: Some(w), .. } if w == id)
    }

    /// The name is given up (or was never held).
    pub(super) fn release(&mut self) {
        self.state = LeaseSt::Released;
    }

    fn record(&self, cfg: &AgentCoreConfig, now: u64, lease: LeaseId, ttl_ms: u64) -> NodeRecord {
        NodeRecord {
            node: cfg.node.clone(),
            host: cfg.host.clone(),
            place: cfg.place.clone(),
            agent_pid: cfg.agent_pid,
            acquired_ms: now,
            ttl_ms,
            report_every_ms: cfg.report_every_ms,
            lease,
        }
    }

    /// Ends a claim's pause if it is over at `now`: the claim reads the record again. Returns
    /// whether a pause ended, and with it whether the claim is fresh (after fencing, when every
    /// copy must be killed before each attempt).
    pub(super) fn end_pause(&mut self, now: u64) -> Option<bool> {
        let LeaseSt::Claiming {
            step: ClaimStep::Wait(until),
            waiting: None,
            fresh,
            ..
        } = self.state
        else {
            return None;
        };
        if now < until {
            return None;
        }
        self.set_claim_step(ClaimStep::Read);
        Some(fresh)
    }

    /// Sends the request of the current claim step, if it has none in flight (and is not
    /// pausing).
    pub(super) fn drive_claim(&mut self, now: u64, cfg: &AgentCoreConfig, out: &mut Outbox) {
        let LeaseSt::Claiming {
            step,
            waiting: None,
            ..
        } = self.state.clone()
        else {
            return;
        };
        let key = node_key(&cfg.node);
        let request = match step {
            ClaimStep::Wait(_) => return,
            ClaimStep::Read => StoreRequest::Read {
                prefixes: vec![key],
            },
            ClaimStep::Grant => StoreRequest::Grant {
                ttl: std::time::Duration::from_millis(cfg.lease_ttl_ms),
            },
            ClaimStep::Create(lease) => {
                let mine = self.record(cfg, now, lease, cfg.lease_ttl_ms);
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
                let mine = self.record(cfg, acquired_ms, lease, ttl_ms);
                StoreRequest::Commit(Txn::new().expect(&key, mod_revision).put_leased(
                    &key,
                    encode(&mine),
                    lease,
                ))
            }
        };
        if matches!(step, ClaimStep::Grant | ClaimStep::KeepAlive { .. }) {
            if let LeaseSt::Claiming { sent, .. } = &mut self.state {
                *sent = now;
            }
        }
        let id = out.send(now, request, Purpose::Claim, cfg.request_timeout_ms);
        if let LeaseSt::Claiming { waiting, .. } = &mut self.state {
            *waiting = Some(id);
        }
    }

    fn set_claim_step(&mut self, next: ClaimStep) {
        if let LeaseSt::Claiming { step, waiting, .. } = &mut self.state {
            *step = next;
            *waiting = None;
        }
    }

    /// Carries the claim one step on after the reply it waited for.
    pub(super) fn on_claim(
        &mut self,
        now: u64,
        cfg: &AgentCoreConfig,
        result: StoreResult,
        out: &mut Outbox,
    ) -> Option<Claimed> {
        let LeaseSt::Claiming {
            step,
            fresh,
            attempt,
            sent,
            ..
        } = self.state.clone()
        else {
            return None;
        };
        if let LeaseSt::Claiming { waiting, .. } = &mut self.state {
            *waiting = None;
        }
        let key = node_key(&cfg.node);
        match (step, result) {
            (ClaimStep::Read, Ok(StoreReply::Read { read, .. })) => {
                match read.entries.into_iter().find(|e| e.key == key) {
                    None => self.set_claim_step(ClaimStep::Grant),
                    Some(entry) => {
                        let held: NodeRecord = match decode(&entry) {
                            Ok(h) => h.value,
                            Err(e) => return self.claim_failed(now, cfg, e.into(), out),
                        };
                        let mine = self.record(cfg, now, 0, cfg.lease_ttl_ms);
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
                            None => {
                                return self.claim_failed(
                                    now,
                                    cfg,
                                    NodeError::Taken {
                                        node: cfg.node.clone(),
                                        pid: held.agent_pid,
                                        host: held.host,
                                        place: held.place,
                                    },
                                    out,
                                )
                            }
                        }
                    }
                }
            }
            (ClaimStep::Grant, Ok(StoreReply::Granted(lease))) => {
                self.granted.insert(lease);
                self.set_claim_step(ClaimStep::Create(lease))
            }
            (ClaimStep::Create(lease), Ok(_)) => {
                return Some(self.held_now(now, lease, cfg.lease_ttl_ms, sent, false))
            }
            (ClaimStep::Create(lease), Err(e)) if e.is_conflict() => {
                self.set_claim_step(ClaimStep::GiveBack(lease))
            }
            (ClaimStep::GiveBack(_), _) => return self.claim_retry(now, cfg, attempt, out),
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
                return self.claim_retry(now, cfg, attempt, out)
            }
            (ClaimStep::TakeOver { lease, ttl_ms, .. }, Ok(_)) => {
                return Some(self.held_now(now, lease, ttl_ms, sent, true))
            }
            (ClaimStep::TakeOver { .. }, Err(e))
                if e.is_conflict() || matches!(e, StoreError::LeaseExpired(_)) =>
            {
                return self.claim_retry(now, cfg, attempt, out)
            }
            (_, Err(e)) => return self.claim_failed(now, cfg, e.into(), out),
            (_, Ok(other)) => {
                return self.claim_failed(
                    now,
                    cfg,
                    StoreError::Unavailable(format!("unexpected reply {other:?}")).into(),
                    out,
                )
            }
        }
        None
    }

    fn claim_retry(
        &mut self,
        now: u64,
        cfg: &AgentCoreConfig,
        attempt: u32,
        out: &mut Outbox,
    ) -> Option<Claimed> {
        if attempt + 1 >= CLAIM_ATTEMPTS {
            let key = node_key(&cfg.node);
            return self.claim_failed(
                now,
                cfg,
                StoreError::Unavailable(format!("{key} kept changing while this agent claimed it"))
                    .into(),
                out,
            );
        }
        if let LeaseSt::Claiming { attempt: a, .. } = &mut self.state {
            *a = attempt + 1;
        }
        self.set_claim_step(ClaimStep::Wait(now + CLAIM_RETRY_MS));
        None
    }

    fn claim_failed(
        &mut self,
        now: u64,
        cfg: &AgentCoreConfig,
        e: NodeError,
        out: &mut Outbox,
    ) -> Option<Claimed> {
        let fresh = matches!(self.state, LeaseSt::Claiming { fresh: true, .. });
        let transient = matches!(&e, NodeError::Store(s) if !s.is_lost());
        if !fresh && !transient {
            // The first claim, refused or on a store gone for good: the agent cannot run.
            self.state = LeaseSt::Released;
            return Some(Claimed::Fatal(e));
        }
        if !fresh {
            // A store that does not answer yet is no reason to exit: copies of an earlier agent
            // of this node may be running, and only this agent can adopt or stop them (found by
            // `setpoint chaos`: an agent restarted while cut off exited and left them unwatched).
            out.failed(
                now,
                "claim",
                format!("cannot claim the node yet: {e} (retrying)"),
            );
            let every = renew_every_ms(cfg.lease_ttl_ms);
            if let LeaseSt::Claiming { attempt, .. } = &mut self.state {
                *attempt = 0;
            }
            self.set_claim_step(ClaimStep::Wait(now + every));
            return None;
        }
        if e.is_refusal() {
            out.log(format!("cannot rejoin: {e}"));
            self.state = LeaseSt::Refused;
            return Some(Claimed::Refused(e.to_string()));
        }
        out.failed(now, "rejoin", format!("cannot rejoin yet: {e} (retrying)"));
        let every = renew_every_ms(cfg.lease_ttl_ms);
        self.set_claim_step(ClaimStep::Wait(now + every));
        None
    }

    /// The name is held under `lease`, whose end is counted from `sent`.
    fn held_now(
        &mut self,
        now: u64,
        lease: LeaseId,
        ttl_ms: u64,
        sent: u64,
        adopted: bool,
    ) -> Claimed {
        self.granted.clear();
        self.state = LeaseSt::Held {
            lease,
            ttl_ms,
            ok_sent: sent,
            next_renewal: now + renew_every_ms(ttl_ms),
            termed: false,
            in_flight: 0,
        };
        Claimed::Held {
            lease,
            ttl_ms,
            adopted,
        }
    }

    /// What the held lease asks for at `now`: the fence's SIGTERM (from then on the lease counts
    /// as fenced) or SIGKILL, and whether a renewal is due (its slot is taken at once; send it
    /// with [`NodeLease::send_renewal`] after acting on the fence). Nothing after a SIGKILL: the
    /// caller claims the name again.
    pub(super) fn keep(&mut self, now: u64) -> Keep {
        let LeaseSt::Held {
            lease,
            ttl_ms,
            ok_sent,
            next_renewal,
            termed,
            in_flight,
            ..
        } = self.state.clone()
        else {
            return Keep::default();
        };
        let mut keep = Keep::default();
        let (term_at, kill_at) = fence_times_ms(ok_sent, ttl_ms);
        if self.fence_due(now) {
            if let LeaseSt::Held { termed, .. } = &mut self.state {
                *termed = true;
            }
            keep.fence = Some(Fence::Term {
                lease,
                unrenewed_ms: term_at - ok_sent,
            });
        }
        if termed && now >= kill_at {
            keep.fence = Some(Fence::Kill { lease });
            return keep;
        }
        // A renewal due in the step that fences still goes out: it may come back in time.
        if !termed && now >= next_renewal && in_flight < RENEWALS_IN_FLIGHT {
            if let LeaseSt::Held {
                next_renewal,
                in_flight,
                ..
            } = &mut self.state
            {
                *next_renewal = now + renew_every_ms(ttl_ms);
                *in_flight += 1;
            }
            keep.renew = true;
        }
        keep
    }

    /// Sends the renewal [`NodeLease::keep`] found due; its deadline is the lease's TTL.
    pub(super) fn send_renewal(&mut self, now: u64, out: &mut Outbox) {
        if let LeaseSt::Held { lease, ttl_ms, .. } = self.state {
            out.send(
                now,
                StoreRequest::KeepAlive(lease),
                Purpose::Renew { lease, sent: now },
                ttl_ms.max(1),
            );
        }
    }

    /// After the reply to the renewal of `of` sent at `sent`. Returns the lease if the store
    /// says it has expired: the caller kills every copy and claims the name again.
    pub(super) fn on_renewed(
        &mut self,
        now: u64,
        of: LeaseId,
        sent: u64,
        result: StoreResult,
        out: &mut Outbox,
    ) -> Option<LeaseId> {
        let LeaseSt::Held { lease, termed, .. } = self.state.clone() else {
            return None;
        };
        if of != lease {
            return None;
        }
        if let LeaseSt::Held { in_flight, .. } = &mut self.state {
            *in_flight = in_flight.saturating_sub(1);
        }
        if termed {
            return None;
        }
        match result {
            Ok(_) => {
                // Renewals succeed every quarter lease: the line is made only when it is logged.
                if out.failing("renew") {
                    out.ended("renew", &format!("lease {lease} renewed again"));
                }
                if let LeaseSt::Held { ok_sent, .. } = &mut self.state {
                    *ok_sent = (*ok_sent).max(sent);
                }
                None
            }
            Err(StoreError::LeaseExpired(_)) => Some(lease),
            Err(e) => {
                out.failed(now, "renew", format!("cannot renew lease {lease}: {e}"));
                None
            }
        }
    }

    /// Fenced: gives the old lease up and claims the name again under a new one, unless the
    /// agent is `leaving` (shutting down: nothing to rejoin for).
    pub(super) fn reclaim(&mut self, now: u64, old: LeaseId, leaving: bool) {
        // The record may still stand under the old lease if its revoke fails (a store without
        // quorum): it is this agent's own, to be kept alive and taken over, not a refusal (found
        // by the netns test: after quorum came back, etcd had reset the old lease to its full
        // TTL, and the agent refused its own record as another agent's and exited).
        //
        // The old lease is not given up: if it is still alive when the store answers (a cut
        // shorter than the lease, or a quorum loss, after which etcd resets every lease), the
        // claim keeps it alive and takes its own record over, so the node is never lost and
        // the copies the fence left running (a counted controller's: issue 22, item 6) run on,
        // counted. If it has ended, the record went with it and the claim starts afresh.
        self.granted.insert(old);
        self.state = LeaseSt::Claiming {
            step: ClaimStep::Read,
            fresh: true,
            attempt: 0,
            sent: now,
            waiting: None,
        };
        if leaving {
            self.state = LeaseSt::Released;
        }
    }

    /// For a tick answered without the step ([`super::core`]'s quiet ticks): the soonest time
    /// at which a tick acts on the lease (its next renewal, or the fence's SIGTERM), counted
    /// whether or not a renewal may go out; `None` if a tick may act at any time (the name is
    /// not held, the fence came down, or the first claim's fence is not done).
    pub(super) fn quiet_until(&self) -> Option<u64> {
        match self.state {
            LeaseSt::Held {
                termed: false,
                ok_sent,
                ttl_ms,
                next_renewal,
                ..
            } if self.strays == StraysFenced::Done => {
                Some(next_renewal.min(fence_times_ms(ok_sent, ttl_ms).0))
            }
            _ => None,
        }
    }

    /// The times this part must be stepped at: a claim's pause or next request, the next
    /// renewal, the fence's next act.
    pub(super) fn wake_times(&self, now: u64, soonest: &mut Soonest, ttl_ms: u64) {
        if self.first_claim() && self.strays != StraysFenced::Done {
            let (term, kill) = self.strays_times(ttl_ms);
            soonest.at(if self.strays == StraysFenced::No {
                term
            } else {
                kill
            });
        }
        match &self.state {
            LeaseSt::Claiming {
                step: ClaimStep::Wait(until),
                ..
            } => soonest.at(*until),
            LeaseSt::Claiming { waiting: None, .. } => soonest.at(now),
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
                    soonest.at(*next_renewal);
                }
                let (term, kill) = fence_times_ms(*ok_sent, *ttl_ms);
                soonest.at(if *termed { kill } else { term });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::carry_out;
    use crate::store::{MemoryStore, Store};

    fn cfg(place: &str) -> AgentCoreConfig {
        AgentCoreConfig {
            lease_ttl_ms: 1_000,
            place: place.into(),
            ..AgentCoreConfig::new("a")
        }
    }

    /// Drives the claim on `store` at `now` until it comes to something (at most 20 requests).
    fn claim(
        lease: &mut NodeLease,
        store: &MemoryStore,
        cfg: &AgentCoreConfig,
        now: u64,
    ) -> Option<Claimed> {
        let mut out = Outbox::new();
        for _ in 0..20 {
            lease.end_pause(now);
            lease.drive_claim(now, cfg, &mut out);
            let Some(AgentOutput::Store { id, request }) = out.drain().pop() else {
                return None;
            };
            assert!(lease.awaits(id));
            let _ = out.take(id);
            if let Some(c) = lease.on_claim(now, cfg, carry_out(store, &request), &mut out) {
                return Some(c);
            }
        }
        None
    }

    use super::super::AgentOutput;

    #[test]
    fn a_first_claim_creates_the_record_and_a_second_agent_elsewhere_is_refused() {
        let store = MemoryStore::new();
        let mut lease = NodeLease::new(0);
        let got = claim(&mut lease, &store, &cfg("here"), 0);
        assert!(
            matches!(
                got,
                Some(Claimed::Held {
                    adopted: false,
                    ttl_ms: 1_000,
                    ..
                })
            ),
            "{got:?}"
        );
        assert!(lease.held().is_some());
        assert!(store.get(&node_key("a")).unwrap().is_some());
        let mut other = NodeLease::new(0);
        let got = claim(&mut other, &store, &cfg("elsewhere"), 0);
        assert!(
            matches!(got, Some(Claimed::Fatal(ref e)) if e.is_refusal()),
            "{got:?}"
        );
        assert!(other.held().is_none());
    }

    #[test]
    fn an_agent_at_the_same_place_takes_the_lease_over_keeping_its_tenure() {
        let store = MemoryStore::new();
        let mut first = NodeLease::new(0);
        let Some(Claimed::Held { lease: old, .. }) = claim(&mut first, &store, &cfg("here"), 5)
        else {
            panic!("not held");
        };
        let mut second = NodeLease::new(50);
        let got = claim(&mut second, &store, &cfg("here"), 50);
        assert!(
            matches!(got, Some(Claimed::Held { lease, adopted: true, .. }) if lease == old),
            "{got:?}"
        );
        let e = store.get(&node_key("a")).unwrap().unwrap();
        assert_eq!(decode::<NodeRecord>(&e).unwrap().value.acquired_ms, 5);
    }

    #[test]
    fn without_renewals_the_fence_terms_at_three_quarters_and_kills_at_nine_tenths() {
        let store = MemoryStore::new();
        let mut lease = NodeLease::new(0);
        assert!(claim(&mut lease, &store, &cfg("here"), 100).is_some());
        // The grant was sent at 100: the lease's end counts from then.
        let mut acts = Vec::new();
        let mut renewals = 0;
        for now in (100..=1_100).step_by(10) {
            let keep = lease.keep(now);
            renewals += usize::from(keep.renew);
            if let Some(f) = keep.fence {
                acts.push((now, f));
                if matches!(f, Fence::Kill { .. }) {
                    break;
                }
            }
        }
        let lease_id = match acts[0].1 {
            Fence::Term { lease, .. } => lease,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            acts,
            [
                (
                    850,
                    Fence::Term {
                        lease: lease_id,
                        unrenewed_ms: 750
                    }
                ),
                (1_000, Fence::Kill { lease: lease_id })
            ]
        );
        assert!(lease.held().is_none(), "fenced from the SIGTERM on");
        assert_eq!(
            renewals, 3,
            "at 350, 600, 850: every quarter TTL until the fence"
        );
        lease.reclaim(1_000, lease_id, false);
        assert!(lease.holding().is_none());
        let mut soonest = Soonest::new(1_000);
        lease.wake_times(1_000, &mut soonest, 1_000);
        assert_eq!(soonest.or_a_second(), 1_000, "the rejoin starts at once");
    }

    #[test]
    fn a_first_claim_the_store_never_answers_stops_earlier_copies_by_the_fences_deadlines_from_start(
    ) {
        let cfg = cfg("here");
        let mut lease = NodeLease::new(100);
        // The earlier agent wrote down a renewal at this agent's start.
        lease.inherit(100);
        let mut out = Outbox::new();
        let mut acts = Vec::new();
        let mut wakes = Vec::new();
        for now in (100..=1_500).step_by(10) {
            lease.end_pause(now);
            lease.drive_claim(now, &cfg, &mut out);
            for o in out.drain() {
                if let AgentOutput::Store { id, .. } = o {
                    let _ = out.take(id);
                    let cut_off = Err(StoreError::Unavailable("cut off".into()));
                    assert!(lease.on_claim(now, &cfg, cut_off, &mut out).is_none());
                }
            }
            if let Some(signal) = lease.strays_due(now, 1_000) {
                acts.push((now, signal));
            }
            let mut soonest = Soonest::new(now);
            lease.wake_times(now, &mut soonest, 1_000);
            wakes.push(soonest.or_a_second());
        }
        // From the agent's start at 100, as for a lease last renewed then.
        assert_eq!(acts, [(850, CopySignal::Term), (1_000, CopySignal::Kill)]);
        assert!(lease.held().is_none());
        assert!(wakes.contains(&850) && wakes.contains(&1_000), "{wakes:?}");
        // With nothing written down, the worst a living earlier agent left: a tenth and 3/20
        // of the TTL from the start.
        let mut lease = NodeLease::new(100);
        assert_eq!(lease.strays_times(1_000), (200, 250));
        assert_eq!(lease.strays_due(199, 1_000), None);
        assert_eq!(lease.strays_due(200, 1_000), Some(CopySignal::Term));
        assert_eq!(lease.strays_due(250, 1_000), Some(CopySignal::Kill));
    }

    #[test]
    fn a_first_claim_that_holds_in_time_signals_nothing_and_one_after_the_sigterm_kills_first() {
        let store = MemoryStore::new();
        let mut lease = NodeLease::new(0);
        lease.inherit(0);
        assert!(claim(&mut lease, &store, &cfg("here"), 700).is_some());
        let signals: Vec<_> = (700..3_000)
            .step_by(10)
            .filter_map(|now| lease.strays_due(now, 1_000))
            .collect();
        assert_eq!(signals, [], "held before 3/4 TTL: the copies are adopted");
        // Nothing was signalled: a copy the state names and no process shows died by itself
        // while the agent was down, a crash that backs off (mutant 475 of the sample).
        assert!(!lease.strays_fenced());

        let store = MemoryStore::new();
        let mut lease = NodeLease::new(0);
        lease.inherit(0);
        assert_eq!(lease.strays_due(740, 1_000), None);
        assert!(!lease.strays_fenced());
        assert_eq!(lease.strays_due(750, 1_000), Some(CopySignal::Term));
        assert!(
            lease.strays_fenced(),
            "the fence signalled: what it finds ended, it stopped"
        );
        assert_eq!(lease.strays_due(800, 1_000), None, "once");
        assert!(claim(&mut lease, &store, &cfg("here"), 850).is_some());
        // Nothing half-stopped is adopted.
        assert_eq!(lease.strays_due(850, 1_000), Some(CopySignal::Kill));
        assert_eq!(lease.strays_due(5_000, 1_000), None);
    }

    #[test]
    fn a_renewal_that_succeeds_moves_the_fence_to_when_it_was_sent() {
        let store = MemoryStore::new();
        let mut lease = NodeLease::new(0);
        assert!(claim(&mut lease, &store, &cfg("here"), 0).is_some());
        let held = lease.held().unwrap();
        let mut out = Outbox::new();
        let sent: Vec<u64> = (0..=60)
            .map(|k| k * 10)
            .filter(|&now| lease.keep(now).renew)
            .collect();
        assert_eq!(
            sent,
            [250, 500],
            "every quarter TTL, without waiting for replies"
        );
        // The one sent at 500 answers: the fence counts from 500, not from the grant at 0.
        let ok = Ok(StoreReply::KeptAlive);
        assert_eq!(lease.on_renewed(500, held, 500, ok, &mut out), None);
        assert_eq!(lease.keep(500 + 749).fence, None);
        let keep = lease.keep(500 + 750);
        assert!(matches!(keep.fence, Some(Fence::Term { .. })), "{keep:?}");
        // A reply saying the lease expired hands it back to be reclaimed.
        let mut lease = NodeLease::new(0);
        assert!(claim(&mut lease, &store, &cfg("here"), 0).is_some());
        let held = lease.held().unwrap();
        let expired = Err(StoreError::LeaseExpired(held));
        assert_eq!(lease.on_renewed(0, held, 0, expired, &mut out), Some(held));
    }

    /// A rejoin the store does not answer is tried again a renewal period later, not at once
    /// (mutant 380 of the mutation sample: with `now - every` every tick sent one more request
    /// to a store already failing).
    #[test]
    fn a_failed_rejoin_is_tried_again_a_renewal_period_later() {
        let store = MemoryStore::new();
        let mut lease = NodeLease::new(0);
        let c = cfg("here");
        assert!(claim(&mut lease, &store, &c, 0).is_some());
        let held = lease.held().unwrap();
        lease.reclaim(100, held, false);
        let mut out = Outbox::new();
        lease.drive_claim(100, &c, &mut out);
        let Some(AgentOutput::Store { id, .. }) = out.drain().pop() else {
            panic!("the rejoin sends nothing");
        };
        let _ = out.take(id);
        let failed = Err(StoreError::Unavailable("cut".into()));
        assert!(lease.on_claim(100, &c, failed, &mut out).is_none());
        let every = renew_every_ms(c.lease_ttl_ms);
        let sent: Vec<u64> = (101..=100 + every)
            .filter(|&now| {
                let _ = out.drain();
                lease.end_pause(now);
                lease.drive_claim(now, &c, &mut out);
                out.drain()
                    .iter()
                    .any(|o| matches!(o, AgentOutput::Store { .. }))
            })
            .collect();
        assert_eq!(sent.first(), Some(&(100 + every)), "{sent:?}");
    }

    #[test]
    fn the_lease_file_gets_each_later_successful_renewal_once_and_nothing_after_a_fence() {
        let store = MemoryStore::new();
        let mut lease = NodeLease::new(0);
        assert_eq!(lease.renewal_to_record(), None, "nothing held yet");
        assert!(claim(&mut lease, &store, &cfg("here"), 40).is_some());
        assert_eq!(lease.renewal_to_record(), Some(40), "the grant's time");
        assert_eq!(lease.renewal_to_record(), None, "once");
        let held = lease.held().unwrap();
        let mut out = Outbox::new();
        assert!(lease.keep(290).renew);
        let failed = Err(StoreError::Unavailable("cut".into()));
        assert_eq!(lease.on_renewed(290, held, 290, failed, &mut out), None);
        assert_eq!(
            lease.renewal_to_record(),
            None,
            "a failed renewal moves nothing"
        );
        assert!(lease.keep(540).renew);
        assert_eq!(
            lease.on_renewed(540, held, 540, Ok(StoreReply::KeptAlive), &mut out),
            None
        );
        assert_eq!(lease.renewal_to_record(), Some(540));
        // Fenced (SIGTERM at 3/4 TTL from 540): what is written down stays the last success.
        assert!(lease.keep(1_290).fence.is_some());
        assert_eq!(lease.renewal_to_record(), None);
    }

    #[test]
    fn a_restarted_agent_fences_by_its_earlier_lifes_last_renewal_when_that_comes_first() {
        // Renewed at 100, restarted at 300: the store may end that lease at 1,100, so the fence
        // keeps the earlier life's deadlines, 850 and 1,000, not 1,050 and 1,200.
        let mut lease = NodeLease::new(300);
        lease.inherit(100);
        assert_eq!(lease.strays_times(1_000), (850, 1_000));
        let acts: Vec<_> = (300..=1_300)
            .step_by(10)
            .filter_map(|now| lease.strays_due(now, 1_000).map(|s| (now, s)))
            .collect();
        assert_eq!(acts, [(850, CopySignal::Term), (1_000, CopySignal::Kill)]);
        // Gone for most of a lease: the claim gets a tenth of the TTL before the SIGTERM, and
        // the SIGKILL stays before the store's expiry.
        let mut lease = NodeLease::new(5_000);
        lease.inherit(4_300);
        assert_eq!(lease.strays_times(1_000), (5_100, 5_200));
        // Its SIGKILL due just after the start: the SIGKILL alone, then.
        let mut lease = NodeLease::new(5_000);
        lease.inherit(4_140);
        assert_eq!(lease.strays_times(1_000), (5_040, 5_040));
        assert_eq!(lease.strays_due(5_039, 1_000), None);
        assert_eq!(lease.strays_due(5_040, 1_000), Some(CopySignal::Kill));
        assert_eq!(lease.strays_due(5_050, 1_000), None);
        // Gone for longer than any fence could keep: the claim gets its tenth.
        let mut lease = NodeLease::new(5_000);
        lease.inherit(3_000);
        assert_eq!(lease.strays_times(1_000), (5_100, 5_250));
        // A later stamp (a clock stepped back) changes nothing.
        let mut lease = NodeLease::new(300);
        lease.inherit(900);
        assert_eq!(lease.strays_times(1_000), fence_times_ms(300, 1_000));
    }

    proptest::proptest! {
        #[test]
        fn the_first_claims_fence_is_never_later_than_from_start_nor_than_the_inherited_lease_allows(
            born in 0u64..100_000,
            back in 0u64..30_000,
            ttl in 40u64..60_000,
        ) {
            let sent = born.saturating_sub(back);
            let mut lease = NodeLease::new(born);
            lease.inherit(sent);
            let (t, k) = lease.strays_times(ttl);
            let (bt, bk) = fence_times_ms(born, ttl);
            let (st, sk) = fence_times_ms(sent, ttl);
            // The obvious rule, case by case.
            let floor = born + ttl / 10;
            let (want_t, want_k) = if sent >= born {
                (bt, bk)
            } else if sk < born {
                (floor, floor + (sk - st))
            } else if st >= floor {
                (st, sk)
            } else {
                (floor.min(sk), sk)
            };
            proptest::prop_assert_eq!((t, k), (want_t, want_k));
            proptest::prop_assert!(t <= k && t <= bt.max(floor) && k <= bk.max(floor + ttl));
            // Before the store can end the earlier lease, whenever a fence still can.
            if sk >= born {
                proptest::prop_assert!(k < sent + ttl);
            }
            // With nothing written down: a tenth and 3/20 of the TTL from the start.
            let lease = NodeLease::new(born);
            proptest::prop_assert_eq!(lease.strays_times(ttl), (floor, born + ttl * 3 / 20));
        }
    }
}
