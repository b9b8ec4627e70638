//! Declarations and passes: the read of the declared workloads, then per workload the read of
//! its snapshot, the plan ([`crate::controller::reconcile::plan_pass`]), its write in batches that fit
//! the store, and what the pass said.

use super::*;

impl Host {
    // ---- declarations ----

    pub(super) fn on_revision(&mut self, result: StoreResult) {
        match result {
            Ok(StoreReply::Revision(r)) => {
                self.reach_answered();
                let Some(l) = self.lead() else { return };
                if l.declarations.moved(r) {
                    self.request(
                        StoreRequest::Read {
                            prefixes: vec![WORKLOADS.to_owned()],
                        },
                        Purpose::Declarations,
                        Awaiting::Declarations,
                    );
                }
            }
            other => {
                let e = unexpected(other);
                if e.is_lost() {
                    return self.lost(e);
                }
                if let Some(l) = self.lead() {
                    l.declarations.done();
                }
                self.reach_failed(format!("cannot read the store: {e}"));
            }
        }
    }

    pub(super) fn on_declarations(&mut self, result: StoreResult) {
        if let Some(l) = self.lead() {
            l.declarations.done();
        }
        let read = match read_of(result) {
            Ok((read, _)) => read,
            Err(e) if e.is_lost() => return self.lost(e),
            Err(e) => return self.log(None, format!("cannot read declarations: {e}")),
        };
        // The read's own revision, not the one the poll was told: the read may come from the
        // watch cache, behind the store's answer, and then the next poll must read again.
        if let Some(l) = self.lead() {
            l.declarations.read_at(read.revision);
        }
        let (declared, problems) = schedule::declared(&read, self.memo.as_ref());
        self.say_problems(&problems, Some(crate::model::WORKLOADS));
        let now = self.now;
        let wake_on_change = self.cfg.controller.wake_on_change;
        let mut gen = self.next_gen;
        let Some(l) = self.lead() else { return };
        let ended = l.loops.declare(&declared, now, wake_on_change, &mut gen);
        self.next_gen = gen;
        for name in ended {
            self.log(None, format!("{name}: no longer declared; its loop ends"));
            self.conditions.forget(&format!("loop {name}"));
        }
        self.drive_loops();
    }

    // ---- passes ----

    pub(super) fn settings(&self) -> PassSettings {
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
    pub(super) fn pass_loop(&mut self, name: &str, gen: u64) -> Option<&mut Loop> {
        self.lead()?.loops.current(name, gen)
    }

    pub(super) fn end_pass(&mut self, name: &str, gen: u64) {
        if let Some(l) = self.lead() {
            l.loops.end_pass(name, gen);
        }
    }

    pub(super) fn on_pass_read(&mut self, result: StoreResult, name: String, gen: u64) {
        let snapshot = self.snapshot_of(result);
        self.on_pass_snapshot(snapshot, name, gen)
    }

    pub(super) fn on_pass_snapshot(
        &mut self,
        snapshot: Result<Snapshot, StoreError>,
        name: String,
        gen: u64,
    ) {
        let settings = self.settings();
        let round_resync_ms = crate::controller::config::millis(self.cfg.controller.round_resync);
        let snapshot = match snapshot {
            Ok(s) => s,
            Err(e) if e.is_lost() => return self.lost(e),
            Err(e) => {
                if let Some(lp) = self.pass_loop(&name, gen) {
                    lp.rounds().lost();
                    self.end_pass(&name, gen);
                    self.observed.failed(&name, self.now, 0);
                    self.pass_failed(&name, e);
                }
                return;
            }
        };
        let Some(lp) = self.pass_loop(&name, gen) else {
            self.memo = Some(snapshot);
            return;
        };
        let attempt = lp.attempts();
        let read = snapshot.revision;
        let timeless = crate::controller::rounds::timeless(&snapshot, &name);
        let plan = plan_pass(&snapshot, &name, lp.controller(), &settings);
        self.memo = Some(snapshot);
        let Some(lp) = self.pass_loop(&name, gen) else {
            return;
        };
        match plan {
            Ok(mut plan) => {
                if let Some(round) = plan.round.take() {
                    plan.round = lp.rounds().plan(round, round_resync_ms);
                }
                let (mut report, mut writes) = plan.writes(&TxnLimits::ETCD_DEFAULT);
                report.conflicts = attempt;
                match writes.next_txn() {
                    Some(txn) if !txn.ops.is_empty() => {
                        self.send_pass_write(txn, name, gen, report, writes)
                    }
                    _ => {
                        // Nothing written: quiet, if nothing in it was decided by the clock.
                        lp.rounds().committed();
                        lp.ended_quiet(timeless.then_some(read));
                        self.end_pass(&name, gen);
                        self.pass_done(&name, &report);
                    }
                }
            }
            Err(PassError::NotLeader) => self.depose(),
            Err(PassError::Gone(_)) => {
                lp.rounds().lost();
                lp.gone(read);
            }
            Err(e) => {
                lp.rounds().lost();
                lp.free();
                self.observed.failed(&name, self.now, u64::from(attempt));
                self.pass_failed(&name, e);
            }
        }
    }

    /// Sends one transaction of a pass's writes.
    pub(super) fn send_pass_write(
        &mut self,
        txn: Txn,
        name: String,
        gen: u64,
        report: PassReport,
        writes: Writes,
    ) {
        let touches = self.touches_cache(&txn);
        self.send(
            StoreRequest::Commit(txn),
            Purpose::Pass,
            Awaiting::PassCommit {
                name,
                gen,
                report: Box::new(report),
                touches,
                writes: Box::new(writes),
            },
        );
    }

    pub(super) fn on_pass_commit(
        &mut self,
        result: StoreResult,
        name: String,
        gen: u64,
        mut report: PassReport,
        touches: bool,
        mut writes: Writes,
    ) {
        let result = committed(result);
        match &result {
            Ok(rev) if touches => self.saw(*rev),
            Err(e) => self.saw_conflict(e),
            Ok(_) => {}
        }
        match result {
            Ok(rev) => {
                writes.committed();
                report.revision = rev;
                if self.pass_loop(&name, gen).is_some() {
                    if let Some(txn) = writes.next_txn() {
                        return self.send_pass_write(txn, name, gen, report, writes);
                    }
                }
                self.end_pass(&name, gen);
                if let Some(lp) = self.pass_loop(&name, gen) {
                    lp.rounds().committed();
                    self.pass_done(&name, &report);
                }
            }
            Err(StoreError::Conflict { key, .. }) if key == LEADER => self.depose(),
            Err(e) if writes.landed() > 0 && !e.is_lost() => {
                if let Some(lp) = self.pass_loop(&name, gen) {
                    // The round goes last: it is among the writes that did not land.
                    lp.rounds().lost();
                    self.end_pass(&name, gen);
                    writes.stop(&mut report, &e);
                    self.pass_done(&name, &report);
                }
            }
            Err(e) if e.is_conflict() => {
                let Some(lp) = self.pass_loop(&name, gen) else {
                    return;
                };
                if lp.conflicted() {
                    lp.rounds().retried();
                    self.request_snapshot(Purpose::Pass, Awaiting::PassRead { name, gen });
                } else {
                    lp.rounds().lost();
                    let e = PassError::Contended(MAX_ATTEMPTS);
                    self.observed
                        .failed(&name, self.now, u64::from(MAX_ATTEMPTS));
                    self.pass_failed(&name, e);
                }
            }
            Err(e) if e.is_lost() => self.lost(e),
            Err(e) => {
                if let Some(lp) = self.pass_loop(&name, gen) {
                    lp.rounds().lost();
                    self.end_pass(&name, gen);
                    if let StoreError::TooBig(why) = &e {
                        self.record_refusal(&name, why);
                    }
                    self.observed.failed(&name, self.now, 0);
                    self.pass_failed(&name, PassError::from(e));
                }
            }
        }
    }

    /// Records in the loop record that the store refused the pass's write as too big, so that
    /// `get` and `status` show why nothing happens ([`crate::model::loops::refusal`]); fenced like
    /// every write of the leader's. Its reply changes nothing: a lost race is retried by the
    /// next refused pass.
    pub(super) fn record_refusal(&mut self, name: &str, why: &str) {
        let fence = self.settings().fence;
        let Some(mut txn) = self
            .memo
            .as_ref()
            .and_then(|s| crate::model::loops::refusal(s, name, why))
        else {
            return;
        };
        if let Some(f) = fence {
            txn = txn.expect(LEADER, f);
        }
        self.send(StoreRequest::Commit(txn), Purpose::Pass, Awaiting::Discard);
    }

    pub(super) fn pass_done(&mut self, name: &str, report: &PassReport) {
        self.observed.end(name, self.now, report);
        let who = ["loop ", name].concat();
        if self.conditions.ended(&who) {
            self.log(Some(&who), "passes succeed again");
        }
        for line in pass_log_lines(report) {
            self.log(Some(&who), line);
        }
    }

    /// The snapshot of a read reply, reusing the values of the last one (which it uses up: the
    /// caller keeps the new one as the memo).
    pub(super) fn snapshot_of(&mut self, result: StoreResult) -> Result<Snapshot, StoreError> {
        let earlier = self.memo.take();
        let s = read_of(result)
            .and_then(|(read, now_ms)| Snapshot::from_read_reusing(&read, now_ms, earlier));
        if let Ok(s) = &s {
            self.say_problems(&s.problems, None);
        }
        s
    }

    /// Logs each problem of `problems` not logged yet with that reason, and each key logged
    /// before that is not a problem any more; only keys under `prefix`, if given, are compared.
    pub(super) fn say_problems(
        &mut self,
        problems: &BTreeMap<String, String>,
        prefix: Option<&str>,
    ) {
        let mut lines = Vec::new();
        for (k, r) in problems {
            if self.problems_said.get(k) != Some(r) {
                lines.push(format!("ignored {k}: {r}"));
                self.problems_said.insert(k.clone(), r.clone());
            }
        }
        let gone: Vec<String> = self
            .problems_said
            .keys()
            .filter(|k| prefix.is_none_or(|p| k.starts_with(p)) && !problems.contains_key(*k))
            .cloned()
            .collect();
        for k in gone {
            self.problems_said.remove(&k);
            lines.push(format!("{k} is no longer a problem"));
        }
        for line in lines {
            self.log(None, line);
        }
    }
}
