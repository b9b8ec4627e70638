//! Reports ([`Reports`]): what the agent tells the ledger about its copies, observed every R and
//! written `report_delay` later when it has news.
//!
//! An observation is written only if it differs from the last report written: a copy started,
//! became ready, stopped or ended, or the agent read a placement newer than the last report's
//! `synced_revision` (the controller holds an orphan's removal until a report shows that read).
//! Otherwise it is written only once `report_resync` has passed since the last report's
//! observation, or every time while the agent holds a copy that asks for a report every R
//! ([`crate::model::Assignment::heartbeat`], `gated`'s copies). The node's liveness is its lease,
//! renewed by keep-alive, not its report: a steady node writes nothing to the store but its
//! resyncs (Kubernetes' node leases, KEP-589, for the same reason). What the ledger shows is
//! the same as with a report every R; only a report's `observed_ms` is older.
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
use super::state_file::CopyRecord;
use super::supervisor::{Kept, Supervisor};
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

/// Whether `listed` is the list of copies [`observe`] would give of `copies`: compared in place,
/// without building the report (most observations are no news, and then nothing is built).
fn lists(listed: &[CopyReport], copies: &Supervisor) -> bool {
    if listed.len() != copies.len() {
        return false;
    }
    let walk = || copies.iter().map(|l| &l.record);
    // The order `observe` gives is a stable sort of the same walk by `order`: the walk itself
    // when it is in that order already (names `w-0` to `w-9`: nearly always), built otherwise.
    if walk().is_sorted_by(|a, b| order(a) <= order(b)) {
        return listed.iter().zip(walk()).all(|(c, r)| shows(c, r));
    }
    let mut mine: Vec<&CopyRecord> = walk().collect();
    mine.sort_by(|a, b| order(a).cmp(&order(b)));
    listed.iter().zip(mine).all(|(c, r)| shows(c, r))
}

/// The order of a report's copies: by workload, then number.
fn order(r: &CopyRecord) -> (&str, u64) {
    (&r.assignment.workload, r.assignment.n)
}

/// Whether the copy report `c` is what [`observe`] makes of `r`: every field `CopyReport`'s
/// equality compares, the numbers before the strings.
fn shows(c: &CopyReport, r: &CopyRecord) -> bool {
    c.n == r.assignment.n
        && c.incarnation == r.incarnation
        && c.owner_uid == r.assignment.owner_uid
        && c.phase == r.phase
        && c.pid == r.pid
        && c.start_ticks == r.start_ticks
        && c.started_ms == r.started_ms
        && c.ready_ms == r.ready_ms
        && c.exited_ms == r.exited_ms
        && c.stopping == r.stopping
        && c.killed == r.killed
        && c.exit == r.exit
        && c.copy == r.assignment.copy
        && c.workload == r.assignment.workload
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
    /// A write of this agent's own may have landed unseen: one was sent while another was in
    /// flight (a rejoin's first report while the last life's is unanswered), or one ended
    /// without a definite outcome (the store unavailable). The next conflict may be this
    /// agent's own write, not another agent's: it is taken up without the alarm, once.
    own_may_conflict: bool,
    /// How many of this agent's report writes are unanswered.
    unanswered: usize,
    /// The last report written (found, at recovery): what the ledger shows of this node.
    written: Option<NodeReport>,
    /// With reports on change, the newest report queued or in flight, until its write is
    /// answered: an observation that shows the same is on its way already.
    pending: Option<NodeReport>,
    /// The generations of `written` and `pending` ([`Supervisor::still`]): each moves on to a
    /// new number from `gens` whenever another report is kept there.
    written_gen: u64,
    pending_gen: u64,
    /// The last generation handed out.
    gens: u64,
    /// The agent claimed its node again at this time, and no report written since: the ledger
    /// counts only a report written under the lease held now (`model::view`), so the next one
    /// is news even if it shows what the last one did (chaos finding 15).
    rejoined_at: Option<u64>,
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
            own_may_conflict: false,
            unanswered: 0,
            written: None,
            pending: None,
            written_gen: 0,
            pending_gen: 0,
            gens: 0,
            rejoined_at: None,
        }
    }

    /// The agent holds its node again, under a new lease, since `now`: see `rejoined_at`.
    pub(super) fn rejoined(&mut self, now: u64) {
        self.rejoined_at = Some(now);
    }

    /// Keeps `report` as the last one written, as a new generation.
    fn keep_written(&mut self, report: Option<NodeReport>) {
        self.written = report;
        self.gens += 1;
        self.written_gen = self.gens;
    }

    /// Keeps `report` as the one on its way, as a new generation.
    fn keep_pending(&mut self, report: NodeReport) {
        self.pending = Some(report);
        self.gens += 1;
        self.pending_gen = self.gens;
    }

    /// Drops the observations not written yet (fenced or shutting down).
    pub(super) fn clear_queue(&mut self) {
        self.queue.clear();
        if !self.in_flight {
            self.pending = None;
        }
    }

    /// Whether the observation `report` has news for the ledger (see the [module docs](self)):
    /// it shows other copies than the last report written, or a newer placement than that
    /// report's `synced_revision`, and no report on its way shows the same; or the resync is
    /// due; or a copy asks for every report.
    // The agent asks `worth_observing` before it builds an observation; the tests ask this of
    // the built one too, as the oracle of the comparison in place.
    #[cfg(test)]
    pub(super) fn worth_writing(
        &self,
        report: &NodeReport,
        copies: &mut Supervisor,
        cfg: &AgentCoreConfig,
    ) -> bool {
        self.news(
            report.observed_ms,
            |_, _, listed| listed == report.copies.as_slice(),
            copies,
            cfg,
        )
    }

    /// [`Reports::worth_writing`] of the observation [`observe`] would make of `copies` at
    /// `now`, without making it: only an observation that is news is built.
    pub(super) fn worth_observing(
        &self,
        now: u64,
        copies: &mut Supervisor,
        cfg: &AgentCoreConfig,
    ) -> bool {
        // The comparison of the copies with a report kept here is remembered by its
        // generation until a copy changes: most observations of a steady node compare the
        // same copies with the same report.
        self.news(
            now,
            |copies, gen, listed| copies.still(Kept::Listed, gen, |s| lists(listed, s)),
            copies,
            cfg,
        )
    }

    /// [`Reports::worth_writing`] of an observation at `observed_ms` whose copies are those
    /// that `same_copies` says yes to (given the report's generation and its copies).
    fn news(
        &self,
        observed_ms: u64,
        mut same_copies: impl FnMut(&mut Supervisor, u64, &[CopyReport]) -> bool,
        copies: &mut Supervisor,
        cfg: &AgentCoreConfig,
    ) -> bool {
        if self.rejoined_at.is_some() {
            return true;
        }
        let newest = copies.newest_placement();
        let mut shows_same = |copies: &mut Supervisor, gen: u64, r: &NodeReport| {
            r.synced_revision >= newest && same_copies(copies, gen, &r.copies)
        };
        let pending_gen = self.pending_gen;
        let Some(written) = &self.written else {
            return !self
                .pending
                .as_ref()
                .is_some_and(|p| shows_same(copies, pending_gen, p));
        };
        if copies.heartbeat()
            || observed_ms >= written.observed_ms.saturating_add(cfg.report_resync_ms)
        {
            return true;
        }
        !shows_same(copies, self.written_gen, written)
            && !self
                .pending
                .as_ref()
                .is_some_and(|p| shows_same(copies, pending_gen, p))
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
        self.keep_written(before.cloned());
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
    pub(super) fn enqueue(&mut self, due: u64, report: NodeReport, cfg: &AgentCoreConfig) {
        if cfg.report_resync_ms > 0 {
            self.keep_pending(report.clone());
        }
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
        if self.unanswered > 0 {
            self.own_may_conflict = true;
        }
        self.unanswered += 1;
        self.in_flight = true;
        if cfg.report_resync_ms > 0 && self.queue.is_empty() {
            self.keep_pending(report.clone());
        }
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
        self.unanswered = self.unanswered.saturating_sub(1);
        if self.queue.is_empty() {
            // Written or not, nothing is on its way now: a failed write's news is written
            // with the next observation.
            self.pending = None;
        }
        match result {
            Ok(StoreReply::Committed(rev)) => {
                out.ended("report", "reports are written again");
                if self.unanswered == 0 {
                    // Every write of its own is answered, the last one landed: a conflict from
                    // now on is another writer's.
                    self.own_may_conflict = false;
                }
                // A reply may come after a later write's (a rejoin's first report overtaking
                // the last life's): the revision written last never goes back.
                self.rev = self.rev.max(rev);
                if self.rejoined_at.is_some_and(|t| report.reported_ms >= t) {
                    self.rejoined_at = None;
                }
                self.log_ledger_changes(&report, now, &cfg.node, events);
                if self
                    .written
                    .as_ref()
                    .is_none_or(|w| w.observed_ms <= report.observed_ms)
                {
                    self.keep_written(Some(report));
                }
            }
            Ok(_) => {}
            Err(StoreError::Conflict { found, .. }) => {
                // Another writer only if no write of this agent's own can explain it: not the
                // revision it wrote last, nor one of its own that may have landed unseen.
                let own = found == self.rev || std::mem::take(&mut self.own_may_conflict);
                if !own {
                    out.log(
                        "the report changed under this agent: is another agent running as this node?",
                    );
                }
                self.rev = found;
                self.send(now, report, last, cfg, out);
                return Written::Again;
            }
            Err(e) if !e.is_lost() => {
                // Unavailable, or timed out: the write may have landed.
                self.own_may_conflict = true;
                if last {
                    out.log(format!("cannot write the last report: {e}"));
                } else {
                    out.failed(
                        now,
                        "report",
                        format!(
                            "cannot report: {e} (retrying; logged again when a report is written)"
                        ),
                    );
                }
            }
            Err(e) if !last => return Written::Lost(e),
            Err(e) => out.log(format!("cannot write the last report: {e}")),
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

    /// When the next observation is due ([`Reports::observation_due`]).
    pub(super) fn observation_at(&self) -> u64 {
        self.next_report
    }

    /// For a tick answered without the step: when [`Reports::send_due`] would write the first
    /// queued report (`u64::MAX`: not before an input).
    pub(super) fn quiet_until(&self) -> u64 {
        match self.queue.front() {
            Some((due, _)) if !self.in_flight => *due,
            _ => u64::MAX,
        }
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
            reports.enqueue(now + 250, observe(&copies, now, &cfg), &cfg);
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

    /// What `out` holds: how many alarms it logged, and the report writes it sent.
    fn drained(out: &mut Outbox) -> (usize, Vec<(Txn, NodeReport)>) {
        let (mut alarms, mut sent) = (0, Vec::new());
        for o in out.drain() {
            match o {
                AgentOutput::Log(l) if l.contains("changed under this agent") => alarms += 1,
                AgentOutput::Store {
                    id,
                    request: StoreRequest::Commit(txn),
                } => {
                    if let Some(Purpose::Report { report, .. }) = out.take(id) {
                        sent.push((txn, report));
                    }
                }
                _ => {}
            }
        }
        (alarms, sent)
    }

    /// Many rejoins of one agent on one store, each with the last life's report in flight (its
    /// reply before or after the first report's, or lost to a timeout though it landed): the
    /// false alarm of issue 25 ("another agent running as this node?") never shows, every
    /// report lands, and a real second writer is still noticed.
    #[test]
    fn rejoins_with_a_report_in_flight_never_raise_the_alarm_and_a_second_writer_does() {
        use crate::store::{MemoryStore, Store};
        let cfg = AgentCoreConfig::new("a");
        let copies = supervisor(vec![record(0, Phase::Running, 100)]);
        let store = MemoryStore::new();
        let key = report_key("a");
        let mut reports = Reports::new(0);
        let (mut out, mut events) = (Outbox::new(), EventLog::default());
        let commit = |txn: &Txn| store.commit(txn).map(StoreReply::Committed);
        let mut x: u64 = 7;
        let mut alarmed = 0;
        for rejoin in 0..200u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let now = rejoin * 1000;
            // A report of this life, in flight when the lease ends.
            reports.send(now, observe(&copies, now, &cfg), false, &cfg, &mut out);
            let (_, mut sent) = drained(&mut out);
            let (old_txn, old_report) = sent.pop().unwrap();
            let order = (x >> 33) % 4;
            // 0: it lands before the rejoin's state read; else after it.
            let old_result = (order == 0).then(|| commit(&old_txn));
            let rev = store.get(&key).unwrap().map_or(0, |e| e.mod_revision);
            reports.resume(rev, None, now, "a", &mut events);
            let first = observe(&copies, now + 1, &cfg);
            reports.send(now + 1, first, false, &cfg, &mut out);
            let (_, mut sent) = drained(&mut out);
            let (first_txn, first_report) = sent.pop().unwrap();
            let old_result = old_result.unwrap_or_else(|| commit(&old_txn));
            let first_result = commit(&first_txn);
            let mut replies = vec![(old_report, old_result), (first_report, first_result)];
            match order {
                1 => replies.reverse(),
                // Its reply lost to a timeout, though it landed.
                2 => replies[0].1 = Err(StoreError::Unavailable("timed out".into())),
                _ => {}
            }
            let mut pending: VecDeque<_> = replies.into();
            while let Some((report, result)) = pending.pop_front() {
                reports.on_written(now + 2, report, false, result, &cfg, &mut out, &mut events);
                let (alarms, sent) = drained(&mut out);
                alarmed += alarms;
                // A resend is carried out and answered after what is pending.
                for (txn, report) in sent {
                    pending.push_back((report, commit(&txn)));
                }
            }
            assert_eq!(
                alarmed, 0,
                "a false alarm at rejoin {rejoin} (order {order})"
            );
            let stored = store.get(&key).unwrap().unwrap().mod_revision;
            assert_eq!(reports.rev, stored, "rejoin {rejoin} (order {order})");
        }
        // Another agent writes as this node: noticed.
        store.commit(&Txn::new().put(&key, "{}")).unwrap();
        reports.send(
            300_000,
            observe(&copies, 300_000, &cfg),
            false,
            &cfg,
            &mut out,
        );
        let (_, mut sent) = drained(&mut out);
        let (txn, report) = sent.pop().unwrap();
        let result = commit(&txn);
        reports.on_written(300_000, report, false, result, &cfg, &mut out, &mut events);
        assert_eq!(drained(&mut out).0, 1, "the second writer is noticed");
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

    #[test]
    fn a_store_that_stops_answering_is_logged_once_and_again_when_a_report_is_written() {
        let cfg = AgentCoreConfig::new("a");
        let copies = supervisor(vec![record(0, Phase::Running, 100)]);
        let mut reports = Reports::new(0);
        let (mut out, mut events) = (Outbox::new(), EventLog::default());
        let down = || Err(StoreError::Unavailable("cut off".into()));
        let mut lines = Vec::new();
        // The last failures begin within the hold of the first line (a store that flaps):
        // logged when they last past it, with the stretch that came and went.
        for (t, result) in [
            (0, down()),
            (50, down()),
            (100, down()),
            (150, Ok(StoreReply::Committed(3))),
            (200, down()),
            (250, Ok(StoreReply::Committed(4))),
            (300, down()),
            (30_000, down()),
        ] {
            let report = observe(&copies, t, &cfg);
            reports.on_written(t, report, false, result, &cfg, &mut out, &mut events);
            lines.extend(out.drain_logs());
        }
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].starts_with("cannot report: "), "{lines:?}");
        assert_eq!(lines[1], "reports are written again");
        assert!(lines[2].starts_with("cannot report: "), "{lines:?}");
        assert!(
            lines[2].ends_with("(after 1 shorter stretch of failures, not logged)"),
            "{lines:?}"
        );
    }

    #[test]
    fn a_report_that_finds_the_store_lost_for_good_ends_the_agent_and_is_not_retried() {
        let cfg = AgentCoreConfig::new("a");
        let copies = supervisor(vec![record(0, Phase::Running, 100)]);
        let mut reports = Reports::new(0);
        let (mut out, mut events) = (Outbox::new(), EventLog::default());
        let gone = StoreError::Lost("the database file is gone".into());
        let report = observe(&copies, 0, &cfg);
        let w = reports.on_written(
            0,
            report,
            false,
            Err(gone.clone()),
            &cfg,
            &mut out,
            &mut events,
        );
        assert!(matches!(&w, Written::Lost(e) if *e == gone), "{w:?}");
        let lines = out.drain_logs();
        assert!(lines.is_empty(), "nothing to retry: {lines:?}");
        // The agent's last report (while it stops) only logs what became of it.
        let report = observe(&copies, 100, &cfg);
        let w = reports.on_written(100, report, true, Err(gone), &cfg, &mut out, &mut events);
        assert!(matches!(w, Written::Done), "{w:?}");
    }

    /// One period of a history: the copies (number, phase), the newest placement read, and
    /// whether the period's write fails.
    type Period = (Vec<(u64, Phase)>, Revision, bool);
    /// What the ledger shows of the node: its copies and the report's `synced_revision`.
    type Ledger = (Vec<CopyReport>, Revision);

    /// One agent's reports over `periods` observations a period R = 100ms apart, every write
    /// answered at once (`fails[t]`: the write of period `t` fails): the ledger (the last
    /// report written) after each period, and the periods a write was sent in.
    fn ledger_over(
        history: &[Period],
        resync_ms: u64,
        heartbeat: bool,
    ) -> (Vec<Option<Ledger>>, Vec<usize>) {
        let cfg = AgentCoreConfig {
            report_resync_ms: resync_ms,
            ..AgentCoreConfig::new("a")
        };
        let mut reports = Reports::new(0);
        let (mut out, mut events) = (Outbox::new(), EventLog::default());
        let (mut ledger, mut writes, mut rev) = (Vec::new(), Vec::new(), 0);
        for (t, (copies, newest, fails)) in history.iter().enumerate() {
            let now = t as u64 * 100;
            let mut records: Vec<CopyRecord> =
                copies.iter().map(|&(n, p)| record(n, p, 100)).collect();
            for r in &mut records {
                r.assignment.heartbeat = heartbeat;
            }
            let mut copies = supervisor(records);
            copies.synced_to(1000 + t as u64, *newest);
            assert!(reports.observation_due(now, 100));
            let report = observe(&copies, now, &cfg);
            let news = reports.worth_writing(&report, &mut copies, &cfg);
            assert_eq!(reports.worth_observing(now, &mut copies, &cfg), news);
            if news {
                reports.enqueue(now, report, &cfg);
            }
            reports.send_due(now, &cfg, &mut out);
            let (_, sent) = drained(&mut out);
            for (_, report) in sent {
                writes.push(t);
                rev += 1;
                let result = if *fails {
                    Err(StoreError::Unavailable("down".into()))
                } else {
                    Ok(StoreReply::Committed(rev))
                };
                reports.on_written(now, report, false, result, &cfg, &mut out, &mut events);
                drained(&mut out);
            }
            ledger.push(
                reports
                    .written
                    .as_ref()
                    .map(|w| (w.copies.clone(), w.synced_revision)),
            );
        }
        (ledger, writes)
    }

    use super::super::CopyRecord;
    use crate::model::CopyReport;

    proptest::proptest! {
        /// Writing only news shows the controller the same ledger as writing every
        /// observation: over random histories of copies, placements read and failed writes,
        /// the copies on the ledger after every period are the same, and a placement read is
        /// on the ledger (`synced_revision` at least its revision) whenever writing every
        /// observation put it there.
        #[test]
        fn writing_only_news_shows_the_same_ledger_as_writing_every_observation(
            history in proptest::collection::vec(
                (
                    proptest::collection::vec(
                        (0u64..3, proptest::sample::select(vec![
                            Phase::Starting, Phase::Running, Phase::Exited,
                        ])),
                        0..3,
                    ),
                    0u64..3,
                    proptest::bool::weighted(0.2),
                ),
                1..60,
            ),
        ) {
            // The placement read only ever grows; copies are listed once each.
            let mut newest = 0;
            let history: Vec<_> = history
                .into_iter()
                .map(|(copies, bump, fails)| {
                    newest += bump / 2;
                    let copies: BTreeMap<u64, Phase> = copies.into_iter().collect();
                    (copies.into_iter().collect::<Vec<_>>(), newest, fails)
                })
                .collect();
            let (every, every_writes) = ledger_over(&history, 100, false);
            let (news, news_writes) = ledger_over(&history, 1_000_000, false);
            for (t, (e, n)) in every.iter().zip(&news).enumerate() {
                let (e_copies, n_copies) = (e.as_ref().map(|l| &l.0), n.as_ref().map(|l| &l.0));
                proptest::prop_assert_eq!(e_copies, n_copies, "period {}", t);
                if e.as_ref().is_some_and(|l| l.1 >= history[t].1) {
                    proptest::prop_assert!(
                        n.as_ref().is_some_and(|l| l.1 >= history[t].1),
                        "period {}: placement {} not on the ledger",
                        t,
                        history[t].1
                    );
                }
            }
            proptest::prop_assert!(news_writes.len() <= every_writes.len());
            // A heartbeat copy makes it write every observation while it holds one, as a
            // resync of R does.
            let (beat, beat_writes) = ledger_over(&history, 1_000_000, true);
            let (every_beat, every_beat_writes) = ledger_over(&history, 100, true);
            let held: Vec<usize> = (0..history.len()).filter(|&t| !history[t].0.is_empty()).collect();
            proptest::prop_assert!(held.iter().all(|t| beat_writes.contains(t)));
            if held.len() == history.len() {
                proptest::prop_assert_eq!(beat, every_beat);
                proptest::prop_assert_eq!(beat_writes, every_beat_writes);
            }
        }
    }

    /// One observation of `copies` at `now`, written if it is news, the write answered at once
    /// (failed if `fails`): whether a write was sent.
    fn one_period(
        reports: &mut Reports,
        copies: &mut Supervisor,
        cfg: &AgentCoreConfig,
        now: u64,
        fails: bool,
    ) -> bool {
        let (mut out, mut events) = (Outbox::new(), EventLog::default());
        let report = observe(copies, now, cfg);
        let news = reports.worth_writing(&report, copies, cfg);
        assert_eq!(reports.worth_observing(now, copies, cfg), news);
        if news {
            reports.enqueue(now, report, cfg);
        }
        reports.send_due(now, cfg, &mut out);
        let (_, sent) = drained(&mut out);
        let wrote = !sent.is_empty();
        for (_, report) in sent {
            let result = if fails {
                Err(StoreError::Unavailable("down".into()))
            } else {
                Ok(StoreReply::Committed(now + 1))
            };
            reports.on_written(now, report, false, result, cfg, &mut out, &mut events);
        }
        wrote
    }

    #[test]
    fn a_rejoin_makes_the_next_observation_news_until_a_report_under_the_new_lease_lands() {
        // Chaos finding 15: an agent fenced with nothing running and claimed its node again.
        // Its copies were as its last report showed, so it wrote none; the ledger counts only a
        // report written under the lease held now, so the node's assigned `named` copies stayed
        // in flight for good and were never made again.
        let cfg = AgentCoreConfig {
            report_resync_ms: 1_000_000,
            ..AgentCoreConfig::new("a")
        };
        let mut copies = supervisor(vec![record(0, Phase::Exited, 100)]);
        let mut reports = Reports::new(0);
        assert!(one_period(&mut reports, &mut copies, &cfg, 0, false));
        assert!(!one_period(&mut reports, &mut copies, &cfg, 100, false));
        reports.rejoined(150);
        // The first write after the rejoin fails: the next observation is still news.
        assert!(one_period(&mut reports, &mut copies, &cfg, 200, true));
        assert!(one_period(&mut reports, &mut copies, &cfg, 300, false));
        assert_eq!(reports.written.as_ref().unwrap().reported_ms, 300);
        assert!(!one_period(&mut reports, &mut copies, &cfg, 400, false));
    }

    #[test]
    fn a_steady_node_writes_its_first_report_and_then_only_its_resyncs() {
        // 60 s of one running copy, nothing new: the first report, then one a resync (10 s).
        let history = vec![(vec![(0, Phase::Running)], 0, false); 600];
        let (ledger, writes) = ledger_over(&history, 10_000, false);
        assert_eq!(writes, [0, 100, 200, 300, 400, 500]);
        assert!(ledger.iter().all(Option::is_some));
        // The same with a copy that asks for every report: every period.
        assert_eq!(ledger_over(&history, 10_000, true).1.len(), 600);
        // A new placement read is news once; a failed write is written again the next period,
        // and the resyncs count from the write that landed.
        let mut history = history;
        history[150].1 = 1150;
        for period in &mut history[250..] {
            period.0 = vec![(0, Phase::Exited)];
        }
        history[250].2 = true;
        let (ledger, writes) = ledger_over(&history, 10_000, false);
        assert_eq!(writes, [0, 100, 150, 250, 251, 351, 451, 551]);
        assert_eq!(
            ledger[150].as_ref().unwrap().1,
            1150,
            "synced at the read's revision"
        );
        assert_eq!(
            ledger[250].as_ref().unwrap().0[0].phase,
            Phase::Running,
            "write failed"
        );
        assert_eq!(ledger[251].as_ref().unwrap().0[0].phase, Phase::Exited);
    }
}
