//! Garbage collection and the compaction of history: both read, plan a few writes, and commit
//! them in batches that fit the store; their schedules and backoffs are [`crate::controller::gc`]'s
//! and [`crate::controller::compaction`]'s.

use super::*;

impl Host {
    // ---- garbage collection ----

    pub(super) fn on_gc_read(&mut self, result: StoreResult) {
        let snapshot = self.snapshot_of(result);
        self.on_gc_snapshot(snapshot)
    }

    pub(super) fn on_gc_snapshot(&mut self, snapshot: Result<Snapshot, StoreError>) {
        let fence = self.settings().fence;
        let plan = match snapshot {
            Ok(s) => {
                let known_quiet = self.lead().is_some_and(|l| l.gc.known_quiet(s.revision));
                let plan = if known_quiet {
                    Ok(None)
                } else {
                    plan_gc(&s, fence, self.cfg.bug_gc_ignores_owner_uid)
                };
                if let (Ok(None), Some(l)) = (&plan, self.lead()) {
                    l.gc.quiet(s.revision);
                }
                self.memo = Some(s);
                plan
            }
            Err(e) => Err(e.into()),
        };
        match plan {
            Ok(Some(plan)) => {
                let mut writes = plan.writes(&TxnLimits::ETCD_DEFAULT);
                if let Some(txn) = writes.next_txn() {
                    self.send_gc_write(txn, writes);
                }
            }
            Ok(None) => self.gc_done(Ok(Vec::new())),
            Err(e) => self.gc_done(Err(e)),
        }
    }

    pub(super) fn send_gc_write(&mut self, txn: Txn, writes: Writes) {
        self.send(
            StoreRequest::Commit(txn),
            Purpose::Gc,
            Awaiting::GcCommit {
                writes: Box::new(writes),
            },
        );
    }

    pub(super) fn on_gc_commit(&mut self, result: StoreResult, mut writes: Writes) {
        let result = committed(result);
        match &result {
            Ok(rev) => self.saw(*rev),
            Err(e) => self.saw_conflict(e),
        }
        match result {
            Ok(_) => {
                writes.committed();
                if let Some(txn) = writes.next_txn() {
                    return self.send_gc_write(txn, writes);
                }
                self.gc_done(Ok(writes.done().to_vec()));
            }
            // What landed is collected; the next sweep sees the rest.
            Err(e) if writes.landed() > 0 && !e.is_lost() && !e.is_conflict() => {
                self.gc_done(Ok(writes.done().to_vec()))
            }
            Err(e) => {
                let landed = writes.done().to_vec();
                match gc_outcome(Err(e), Vec::new()) {
                    Ok(_) => self.gc_done(Ok(landed)),
                    Err(e) => self.gc_done(Err(e)),
                }
            }
        }
    }

    pub(super) fn gc_done(&mut self, outcome: Result<Vec<String>, PassError>) {
        let Some(l) = self.lead() else { return };
        let verdict = l.gc.done(outcome);
        self.act_on(verdict);
    }

    // ---- compaction ----

    pub(super) fn on_compact_read(&mut self, result: StoreResult) {
        let retention = crate::controller::config::millis(self.cfg.controller.event_retention);
        let plan = read_of(result)
            .and_then(|(read, now_ms)| retention::plan_compaction(&read, now_ms, retention));
        let offset = self.store_offset;
        let Some(l) = self.lead() else { return };
        match plan {
            Ok(plan) => {
                // Compaction is a write of the leader's too: fenced like the others, so a
                // deposed leader removes nothing.
                let fence = l.lease.fence;
                let (txns, removed) = l.compaction.planned(plan, retention, offset, fence);
                self.compact_next(txns, removed)
            }
            Err(e) => {
                let verdict = l.compaction.failed(e);
                self.act_on(verdict);
            }
        }
    }

    pub(super) fn compact_next(&mut self, txns: Vec<Txn>, removed: u64) {
        let Some(l) = self.lead() else { return };
        match l.compaction.next(txns, removed) {
            Next::Done(verdict) => self.act_on(verdict),
            Next::Commit(first, rest) => {
                self.send(
                    StoreRequest::Commit(first),
                    Purpose::Compaction,
                    Awaiting::CompactCommit { rest, removed },
                );
            }
        }
    }

    pub(super) fn on_compact_commit(&mut self, result: StoreResult, rest: Vec<Txn>, removed: u64) {
        match committed(result) {
            Ok(_) => self.compact_next(rest, removed),
            Err(e) => {
                let Some(l) = self.lead() else { return };
                let verdict = l.compaction.failed(e);
                self.act_on(verdict);
            }
        }
    }
}
