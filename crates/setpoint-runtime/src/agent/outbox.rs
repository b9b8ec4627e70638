//! Where the parts' outputs go during one step: the outputs in order, and the store requests in
//! flight, each with its deadline and why it was sent.
//!
//! Every part writes to the one [`Outbox`] of the step, so the order of outputs is the order in
//! which the parts acted; the core routes each reply back by its [`Purpose`].

use std::collections::BTreeMap;

use super::messages::AgentOutput;
use crate::conditions::Conditions;
use crate::machine::{ReqId, StoreRequest};
use crate::model::NodeReport;
use crate::remote::LiveCopy;
use crate::store::LeaseId;

/// Why a store request was sent: which part its reply goes to, with what that part needs.
#[derive(Clone, Debug)]
pub(super) enum Purpose {
    /// A step of the node claim ([`super::lease`]).
    Claim,
    /// A renewal of `lease`, sent at `sent` ([`super::lease`]).
    Renew { lease: LeaseId, sent: u64 },
    /// The read of the node's assignments and last report before recovery, sent under this
    /// lease ([`super::recovery`]).
    ReadState { lease: LeaseId },
    /// A sync read sent under this lease ([`super::sync`]).
    Sync { lease: LeaseId },
    /// A report ([`super::reports`]); `last` at shutdown.
    Report { report: NodeReport, last: bool },
    /// The live record under `lease` ([`super::live`]).
    Live {
        lease: LeaseId,
        copies: Vec<LiveCopy>,
    },
    /// A batch of event-log entries ([`super::event_log`]); `last` at shutdown.
    Events {
        batch: Vec<(String, String)>,
        last: bool,
    },
    /// The answer to the kill request at `key` ([`super::kills`]).
    KillAnswer { key: String },
    /// The answer to the log request at `key` ([`super::log_serving`]).
    LogAnswer { key: String },
    /// The watch cache's full read, under this lease ([`super::watch_cache`]).
    CacheRead { lease: LeaseId },
    /// The watch cache's watch ([`super::watch_cache`]).
    CacheWatch,
    /// The revoke of the node lease at shutdown.
    Release,
}

/// A request in flight.
#[derive(Clone, Debug)]
struct Pending {
    /// When it counts as failed, in the machine's milliseconds.
    deadline: u64,
    purpose: Purpose,
}

/// The outputs of the step under way and the requests in flight.
#[derive(Debug)]
pub(super) struct Outbox {
    next_id: ReqId,
    pending: BTreeMap<ReqId, Pending>,
    out: Vec<AgentOutput>,
    /// The conditions that repeat until they end (a store that refuses writes, say), so that
    /// each is logged when it begins, not at every try ([`crate::conditions`]).
    conditions: Conditions,
}

impl Outbox {
    /// Empty; the first request gets id 1.
    pub(super) fn new() -> Self {
        Self {
            next_id: 1,
            pending: BTreeMap::new(),
            out: Vec::new(),
            conditions: Conditions::new(),
        }
    }

    /// Adds an output.
    pub(super) fn push(&mut self, output: AgentOutput) {
        self.out.push(output);
    }

    /// Adds a log line.
    pub(super) fn log(&mut self, line: impl Into<String>) {
        self.out.push(AgentOutput::Log(line.into()));
    }

    /// A try of the condition `what` failed at `now`, as `line` says: logged when the condition
    /// begins, not at every try, and held while it flaps ([`Conditions::failed`]).
    pub(super) fn failed(&mut self, now: u64, what: &'static str, line: String) {
        if let Some(line) = self.conditions.failed(now, what, line) {
            self.log(line);
        }
    }

    /// Whether a stretch of failures of the condition `what` is going on.
    pub(super) fn failing(&self, what: &str) -> bool {
        self.conditions.failing(what)
    }

    /// A try of the condition `what` succeeded: logs `line` (unless empty) if the failure it
    /// ends was logged.
    pub(super) fn ended(&mut self, what: &'static str, line: &str) {
        if self.conditions.ended(what) && !line.is_empty() {
            self.log(line);
        }
    }

    /// Sends `request`, which fails if no reply comes within `timeout_ms`; returns its id.
    pub(super) fn send(
        &mut self,
        now: u64,
        request: StoreRequest,
        purpose: Purpose,
        timeout_ms: u64,
    ) -> ReqId {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(
            id,
            Pending {
                deadline: now + timeout_ms,
                purpose,
            },
        );
        self.out.push(AgentOutput::Store { id, request });
        id
    }

    /// Asks the driver to end watch `id` (a request without a reply).
    pub(super) fn cancel(&mut self, id: ReqId) {
        let cancel = self.next_id;
        self.next_id += 1;
        self.out.push(AgentOutput::Store {
            id: cancel,
            request: StoreRequest::CancelWatch(id),
        });
    }

    /// Takes request `id` out of flight: why it was sent, if it is still awaited.
    pub(super) fn take(&mut self, id: ReqId) -> Option<Purpose> {
        self.pending.remove(&id).map(|p| p.purpose)
    }

    /// The requests past their deadline at `now`, in id order, each with its deadline. They stay
    /// in flight until [`Outbox::take`]n: acting on one may end the others.
    pub(super) fn late(&self, now: u64) -> Vec<(ReqId, u64)> {
        self.pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(id, p)| (*id, p.deadline))
            .collect()
    }

    /// Forgets every request in flight (the machine stopped).
    pub(super) fn forget_all(&mut self) {
        self.pending.clear();
    }

    /// The deadlines of the requests in flight.
    pub(super) fn deadlines(&self) -> impl Iterator<Item = u64> + '_ {
        self.pending.values().map(|p| p.deadline)
    }

    /// The outputs of the step, in order, leaving none.
    #[cfg(test)]
    pub(super) fn drain(&mut self) -> Vec<AgentOutput> {
        std::mem::take(&mut self.out)
    }

    /// The log lines of the step, in order, leaving no output.
    #[cfg(test)]
    pub(super) fn drain_logs(&mut self) -> Vec<String> {
        self.drain()
            .into_iter()
            .filter_map(|o| match o {
                AgentOutput::Log(l) => Some(l),
                _ => None,
            })
            .collect()
    }

    /// The outputs pushed so far, for a step to write into a caller's buffer
    /// ([`crate::machine::Lent`]).
    pub(super) fn outputs(&mut self) -> &mut Vec<AgentOutput> {
        &mut self.out
    }
}

/// The soonest of the times a step offers, never before `now`: the next wake.
#[derive(Debug)]
pub(super) struct Soonest {
    now: u64,
    t: u64,
}

impl Soonest {
    /// None offered yet.
    pub(super) fn new(now: u64) -> Self {
        Self { now, t: u64::MAX }
    }

    /// Offers `at` (a time already past counts as `now`).
    pub(super) fn at(&mut self, at: u64) {
        self.t = self.t.min(at.max(self.now));
    }

    /// The soonest time offered (clamped to `now`), if any was.
    pub(super) fn offered(&self) -> Option<u64> {
        (self.t != u64::MAX).then_some(self.t)
    }

    /// The soonest time offered, or a second from now if none was.
    pub(super) fn or_a_second(&self) -> u64 {
        if self.t == u64::MAX {
            self.now + 1_000
        } else {
            self.t
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_past_its_deadline_is_late_until_taken_and_a_cancel_takes_an_id_of_its_own() {
        let mut o = Outbox::new();
        let a = o.send(0, StoreRequest::Revoke(1), Purpose::Claim, 100);
        o.cancel(7);
        let b = o.send(50, StoreRequest::Revoke(2), Purpose::Release, 100);
        assert_eq!((a, b), (1, 3), "the cancel used id 2");
        assert!(o.late(99).is_empty());
        assert_eq!(o.late(100), [(1, 100)]);
        assert!(matches!(o.take(a), Some(Purpose::Claim)));
        assert!(o.take(a).is_none(), "a reply is taken once");
        assert_eq!(o.deadlines().collect::<Vec<_>>(), [150]);
        let out = o.drain();
        assert_eq!(out.len(), 3);
        assert!(matches!(
            out[1],
            AgentOutput::Store {
                id: 2,
                request: StoreRequest::CancelWatch(7)
            }
        ));
        assert!(o.drain().is_empty());
        o.forget_all();
        assert!(o.late(u64::MAX).is_empty());
    }

    #[test]
    fn the_soonest_time_is_never_in_the_past_and_defaults_to_a_second() {
        let mut s = Soonest::new(500);
        assert_eq!(s.or_a_second(), 1_500);
        s.at(900);
        s.at(700);
        assert_eq!(s.or_a_second(), 700);
        s.at(10);
        assert_eq!(s.or_a_second(), 500);
    }

    #[test]
    fn a_repeating_condition_is_logged_when_it_begins_and_ends() {
        let mut o = Outbox::new();
        let logged = Outbox::drain_logs;
        for t in 0..5 {
            o.failed(t, "report", "cannot report: full".into());
        }
        assert_eq!(logged(&mut o), ["cannot report: full"]);
        o.failed(5, "events", "cannot write: full".into());
        assert_eq!(logged(&mut o).len(), 1, "conditions are apart");
        o.ended("report", "reports again");
        o.ended("report", "reports again");
        o.ended("never", "never logged");
        assert_eq!(logged(&mut o), ["reports again"]);
        o.failed(6, "report", "cannot report: full".into());
        assert!(logged(&mut o).is_empty(), "held after it ended");
        o.failed(30_000, "report", "cannot report: full".into());
        assert_eq!(logged(&mut o).len(), 1, "until the hold ends");
    }
}
