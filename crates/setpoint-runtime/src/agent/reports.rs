//! Reports ([`Reports`]): what the agent tells the ledger about its copies, observed every R and
//! written `report_delay` later.
//!
//! A report is a compare-and-set on the revision this agent last wrote, so a second agent
//! writing as this node is noticed. Once a report is written, the copies it brought onto the
//! ledger (`seen`) and took off (`unseen`) go to the event log. Observations taken before a
//! fence are dropped: they must never reach the ledger.
//!
//! It is separate because it is the agent's one voice to the controllers: what the ledger says
//! of this node is decided here and nowhere else.

use std::collections::{BTreeMap, VecDeque};

use super::event_log::{EventLog, Written};
use super::outbox::{Outbox, Purpose, Soonest};
use super::supervisor::Supervisor;
use super::AgentCoreConfig;
use crate::events::{self, CopyEvent, CopyEventKind};
use crate::machine::{StoreReply, StoreRequest, StoreResult};
use crate::model::{encode, report_key, CopyReport, NodeReport, Phase};
use crate::store::{Revision, StoreError, Txn};

/// What the agent observes of its copies at `now`, as a report shows it.
pub(super) fn observe(copies: &Supervisor, now: u64, cfg: &AgentCoreConfig) -> NodeReport {
    let mut reports: Vec<CopyReport> = copies
        .iter()
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
                killed: r.killed,
            }
        })
        .collect();
    reports.sort_by(|a, b| (&a.workload, a.n).cmp(&(&b.workload, b.n)));
    NodeReport {
        node: cfg.node.clone(),
        observed_ms: now,
        reported_ms: now,
        agent_pid: cfg.agent_pid,
        copies: reports,
        synced_revision: copies.synced_revision(),
    }
}

/// The reports observed and not written yet, and what the ledger was last told: see the
/// [module docs](self).
#[derive(Debug)]
pub(super) struct Reports {
    /// The revision of the last report this agent wrote (or found, at recovery).
    rev: Revision,
    /// Observations waiting for their time to be written: (due, report).
    queue: VecDeque<(u64, NodeReport)>,
    /// A report is being written.
    in_flight: bool,
    /// When the next observation is due.
    next_report: u64,
    /// What the last report written showed running, (workload, n) → incarnation.
    shown: BTreeMap<(String, u64), Revision>,
}

impl Reports {
    /// Nothing observed yet; the first observation is due at `now`.
    pub(super) fn new(now: u64) -> Self {
        Self {
            rev: 0,
            queue: VecDeque::new(),
            in_flight: false,
            next_report: now,
            shown: BTreeMap::new(),
        }
    }

    /// Drops the observations not written yet (fenced or shutting down).
    pub(super) fn clear_queue(&mut self) {
        self.queue.clear();
    }

    /// Resumes after a restart: the last report in the store is at `rev`, and the ledger still
    /// shows what it showed (`before`).
    pub(super) fn resume(
        &mut self,
        rev: Revision,
        before: Option<&NodeReport>,
        now: u64,
        node: &str,
        events: &mut EventLog,
    ) {
        self.rev = rev;
        if let Some(before) = before {
            // The ledger still shows what the last agent reported.
            self.log_ledger_changes(before, now, node, events);
            events.clear();
        }
    }

    /// The next observation is due at `at`.
    pub(super) fn observe_next_at(&mut self, at: u64) {
        self.next_report = at;
    }

    /// Whether an observation is due at `now`; if so the next one is due a period later.
    pub(super) fn observation_due(&mut self, now: u64, every_ms: u64) -> bool {
        if now < self.next_report {
            return false;
        }
        self.next_report = now + every_ms;
        true
    }

    /// Queues `report`, to be written at `due`.
    pub(super) fn enqueue(&mut self, due: u64, report: NodeReport) {
        self.queue.push_back((due, report));
    }

    /// Writes the newest observation whose time has come (older ones are superseded), unless a
    /// report is in flight.
    pub(super) fn send_due(&mut self, now: u64, cfg: &AgentCoreConfig, out: &mut Outbox) {
        if self.in_flight {
            return;
        }
        let mut due = None;
        while self.queue.front().is_some_and(|(at, _)| *at <= now) {
            due = self.queue.pop_front().map(|(_, r)| r);
        }
        if let Some(mut report) = due {
            report.reported_ms = now;
            self.send(now, report, false, cfg, out);
        }
    }

    /// Writes `report` now (`last`: at shutdown), compare-and-set on the last revision written.
    pub(super) fn send(
        &mut self,
        now: u64,
        report: NodeReport,
        last: bool,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) {
        let key = report_key(&cfg.node);
        let txn = Txn::new().expect(&key, self.rev).put(&key, encode(&report));
        self.in_flight = true;
        out.send(
            now,
            StoreRequest::Commit(txn),
            Purpose::Report { report, last },
            cfg.request_timeout_ms,
        );
    }

    /// After the reply to the write of `report`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_written(
        &mut self,
        now: u64,
        report: NodeReport,
        last: bool,
        result: StoreResult,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
        events: &mut EventLog,
    ) -> Written {
        self.in_flight = false;
        match result {
            Ok(StoreReply::Committed(rev)) => {
                self.rev = rev;
                self.log_ledger_changes(&report, now, &cfg.node, events);
            }
            Ok(_) => {}
            Err(StoreError::Conflict { found, .. }) if found != self.rev => {
                out.log(
                    "the report changed under this agent: is another agent running as this node?",
                );
                self.rev = found;
                self.send(now, report, last, cfg, out);
                return Written::Again;
            }
            Err(e) if e.is_lost() && !last => return Written::Lost(e),
            Err(e) if last => out.log(format!("cannot write the last report: {e}")),
            Err(e) => out.log(format!("cannot report: {e}")),
        }
        Written::Done
    }

    /// After `report` was written at `now`: queues the events of the copies it brought onto the
    /// ledger and of those it took off.
    fn log_ledger_changes(
        &mut self,
        report: &NodeReport,
        now: u64,
        node: &str,
        events: &mut EventLog,
    ) {
        let shown: BTreeMap<(String, u64), Revision> = report
            .copies
            .iter()
            .filter(|c| c.phase == Phase::Running)
            .map(|c| ((c.workload.clone(), c.n), c.incarnation))
            .collect();
        let event = encode(&CopyEvent {
            at_ms: now,
            node: node.to_owned(),
            pid: None,
            commanded: false,
            how: None,
        });
        for ((w, n), inc) in &shown {
            if self.shown.get(&(w.clone(), *n)) != Some(inc) {
                let key = events::copy_event_key(w, CopyEventKind::Seen, *n, *inc);
                events.push(key, event.clone());
            }
        }
        for ((w, n), inc) in &self.shown {
            if shown.get(&(w.clone(), *n)) != Some(inc) {
                let key = events::copy_event_key(w, CopyEventKind::Unseen, *n, *inc);
                events.push(key, event.clone());
            }
        }
        self.shown = shown;
    }

    /// The times this part must be stepped at: the next observation, and the first queued
    /// report's time unless a report is in flight.
    pub(super) fn wake_times(&self, soonest: &mut Soonest) {
        soonest.at(self.next_report);
        if let Some((due, _)) = self.queue.front().filter(|_| !self.in_flight) {
            soonest.at(*due);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{record, supervisor};
    use super::super::AgentOutput;
    use super::*;

    fn sent(out: &mut Outbox) -> Vec<(u64, bool)> {
        out.drain()
            .into_iter()
            .filter_map(|o| match o {
                AgentOutput::Store { id, .. } => match out.take(id) {
                    Some(Purpose::Report { report, last }) => Some((report.observed_ms, last)),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    #[test]
    fn only_the_newest_due_observation_is_written_and_one_at_a_time() {
        let cfg = AgentCoreConfig::new("a");
        let copies = supervisor(vec![record(0, Phase::Running, 100)]);
        let mut reports = Reports::new(0);
        let mut out = Outbox::new();
        for now in [0, 100, 200] {
            assert!(reports.observation_due(now, 100));
            reports.enqueue(now + 250, observe(&copies, now, &cfg));
        }
        assert!(!reports.observation_due(250, 100));
        reports.send_due(300, &cfg, &mut out);
        assert_eq!(sent(&mut out), [(0, false)]);
        reports.send_due(460, &cfg, &mut out);
        assert!(sent(&mut out).is_empty(), "one report in flight at a time");
        let mut events = EventLog::default();
        let w = reports.on_written(
            460,
            observe(&copies, 0, &cfg),
            false,
            Ok(StoreReply::Committed(9)),
            &cfg,
            &mut out,
            &mut events,
        );
        assert!(matches!(w, Written::Done));
        reports.send_due(460, &cfg, &mut out);
        assert_eq!(
            sent(&mut out),
            [(200, false)],
            "100's is superseded by 200's"
        );
        reports.clear_queue();
        let mut soonest = Soonest::new(460);
        reports.wake_times(&mut soonest);
        assert_eq!(
            soonest.or_a_second(),
            460,
            "the next observation is overdue"
        );
    }

    #[test]
    fn a_written_report_puts_its_running_copies_on_the_ledger_once_and_takes_gone_ones_off() {
        let cfg = AgentCoreConfig::new("a");
        let mut reports = Reports::new(0);
        let (mut out, mut events) = (Outbox::new(), EventLog::default());
        let mut write = |reports: &mut Reports, copies: &Supervisor, events: &mut EventLog| {
            let report = observe(copies, 0, &cfg);
            let ok = Ok(StoreReply::Committed(1));
            reports.on_written(0, report, false, ok, &cfg, &mut out, events);
        };
        let both = supervisor(vec![
            record(0, Phase::Running, 100),
            record(1, Phase::Running, 101),
        ]);
        write(&mut reports, &both, &mut events);
        write(&mut reports, &both, &mut events);
        let one = supervisor(vec![record(0, Phase::Running, 100)]);
        write(&mut reports, &one, &mut events);
        let mut out = Outbox::new();
        events.flush(0, 100, &mut out);
        let Some(Purpose::Events { batch, .. }) = out.take(1) else {
            panic!("no events");
        };
        let kinds: Vec<&str> = batch
            .iter()
            .map(|(k, _)| {
                if k.contains("unseen") {
                    "unseen"
                } else {
                    "seen"
                }
            })
            .collect();
        assert_eq!(kinds, ["seen", "seen", "unseen"], "{batch:?}");
    }
}
