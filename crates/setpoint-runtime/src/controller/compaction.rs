//! Compaction's schedule: the leader removes events older than the retention from the event
//! log every [`retention::COMPACT_EVERY_MS`] or every retention, whichever is shorter
//! ([`retention::plan_compaction`] plans it), in batches of at most [`retention::BATCH`] keys, one
//! transaction after another.
//!
//! It does not read the log before the oldest event the last compaction kept has outlived the
//! retention: until then there is nothing to remove, and reading the whole log every few
//! seconds would cost the store O(events) for nothing. Every batch compares `/leader` against
//! the leader's fence, so a deposed leader removes nothing. One compaction at a time.

use super::verdict::Verdict;
use crate::model::LEADER;
use crate::retention::{self, CompactionPlan};
use crate::store::{Revision, StoreError, Txn};

/// The leader's compactor.
#[derive(Debug)]
pub(super) struct Compactor {
    /// When the last compaction started (this host's clock).
    last_ms: u64,
    /// No compaction reads the log before this (this host's clock): the oldest event the last
    /// one kept is younger than the retention until then.
    not_before_ms: u64,
    /// A compaction is in flight.
    compacting: bool,
}

/// What comes next in a compaction.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// Commit this batch; the rest follow.
    Commit(Txn, Vec<Txn>),
    /// The compaction is over.
    Done(Verdict),
}

impl Compactor {
    /// A compactor of a leadership that began at `now_ms`: its first compaction is due a period
    /// later.
    pub(super) fn new(now_ms: u64) -> Self {
        Self {
            last_ms: now_ms,
            not_before_ms: now_ms,
            compacting: false,
        }
    }

    /// Whether a compaction starts now, with events kept for `retention_ms`: none in flight, a
    /// period since the last one, and possibly something to remove. If so it is counted as in
    /// flight from now.
    pub(super) fn due(&mut self, now_ms: u64, retention_ms: u64) -> bool {
        let every = retention::COMPACT_EVERY_MS.min(retention_ms);
        let due =
            !self.compacting && now_ms - self.last_ms >= every && now_ms >= self.not_before_ms;
        if due {
            self.compacting = true;
            self.last_ms = now_ms;
        }
        due
    }

    /// From when [`Self::due`] would say yes, with events kept for `retention_ms`, as things
    /// stand: never while a compaction is in flight. It changes nothing.
    pub(super) fn due_at(&self, retention_ms: u64) -> u64 {
        if self.compacting {
            return u64::MAX;
        }
        let every = retention::COMPACT_EVERY_MS.min(retention_ms);
        self.last_ms.saturating_add(every).max(self.not_before_ms)
    }

    /// The compaction's read gave `plan`. The next read waits until the oldest event kept has
    /// outlived `retention_ms` (a store time, turned into this host's by `store_offset`, the
    /// store's clock minus this host's). Returns the batches fenced at `fence`, and how many
    /// entries they remove.
    pub(super) fn planned(
        &mut self,
        plan: CompactionPlan,
        retention_ms: u64,
        store_offset: i64,
        fence: Revision,
    ) -> (Vec<Txn>, u64) {
        if let Some(oldest) = plan.oldest_kept_ms {
            self.not_before_ms = oldest
                .saturating_add(retention_ms)
                .saturating_add_signed(-store_offset);
        }
        let txns = plan
            .txns
            .into_iter()
            .map(|t| t.expect(LEADER, fence))
            .collect();
        (txns, plan.removed)
    }

    /// The batches still to commit are `txns`, removing `removed` entries in all: the next one,
    /// or the end.
    pub(super) fn next(&mut self, mut txns: Vec<Txn>, removed: u64) -> Next {
        if txns.is_empty() {
            self.compacting = false;
            return Next::Done(if removed > 0 {
                Verdict::Say(format!(
                    "compacted the event log: {removed} old entries removed"
                ))
            } else {
                Verdict::Quiet
            });
        }
        let first = txns.remove(0);
        Next::Commit(first, txns)
    }

    /// The compaction failed with `e`: what that means for the host.
    pub(super) fn failed(&mut self, e: StoreError) -> Verdict {
        if e.is_lost() {
            return Verdict::Lost(e);
        }
        if matches!(&e, StoreError::Conflict { key, .. } if key == LEADER) {
            return Verdict::Deposed;
        }
        self.compacting = false;
        Verdict::Say(format!("cannot compact the event log: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Op;

    fn plan(batches: usize, oldest_kept_ms: Option<u64>) -> CompactionPlan {
        CompactionPlan {
            txns: (0..batches)
                .map(|i| Txn::new().delete(format!("/events/{i}")))
                .collect(),
            removed: batches as u64,
            oldest_kept_ms,
        }
    }

    #[test]
    fn a_compaction_is_due_every_ten_seconds_or_every_retention_if_shorter() {
        let mut c = Compactor::new(1_000);
        assert!(!c.due(1_000 + retention::COMPACT_EVERY_MS - 1, 3_600_000));
        assert!(c.due(1_000 + retention::COMPACT_EVERY_MS, 3_600_000));
        assert!(!c.due(1_000_000, 3_600_000), "one at a time");
        let mut c = Compactor::new(0);
        assert!(!c.due(1_999, 2_000));
        assert!(c.due(2_000, 2_000), "a retention of 2 s compacts every 2 s");
    }

    #[test]
    fn no_read_before_the_oldest_kept_event_outlives_the_retention() {
        let mut c = Compactor::new(0);
        assert!(c.due(10_000, 60_000));
        // The store's clock runs 5 s ahead of this host's; the oldest kept event is at store
        // time 30 s, so nothing can be removed before host time 30 + 60 - 5 = 85 s.
        let (txns, removed) = c.planned(plan(0, Some(30_000)), 60_000, 5_000, 4);
        assert_eq!(c.next(txns, removed), Next::Done(Verdict::Quiet));
        assert!(!c.due(84_999, 60_000));
        assert!(c.due(85_000, 60_000));
    }

    #[test]
    fn batches_are_fenced_and_committed_one_after_another() {
        let mut c = Compactor::new(0);
        assert!(c.due(10_000, 60_000));
        let (txns, removed) = c.planned(plan(2, None), 60_000, 0, 7);
        assert_eq!(removed, 2);
        assert!(txns.iter().all(|t| t
            .compares
            .iter()
            .any(|c| c.key == LEADER && c.mod_revision == 7)));
        let Next::Commit(first, rest) = c.next(txns, removed) else {
            panic!("a batch to commit")
        };
        assert!(matches!(&first.ops[..], [Op::Delete { key }] if key == "/events/0"));
        let Next::Commit(_, rest) = c.next(rest, removed) else {
            panic!("a second batch")
        };
        assert_eq!(
            c.next(rest, removed),
            Next::Done(Verdict::Say(
                "compacted the event log: 2 old entries removed".into()
            ))
        );
        assert!(c.due(20_000, 60_000), "over: the next one may start");
    }

    #[test]
    fn a_failure_is_logged_a_fenced_out_batch_deposes_and_a_lost_store_stops() {
        let mut c = Compactor::new(0);
        assert!(c.due(10_000, 60_000));
        let fenced = StoreError::Conflict {
            key: LEADER.into(),
            expected: 7,
            found: 9,
        };
        assert_eq!(c.failed(fenced), Verdict::Deposed);
        let lost = StoreError::Lost("gone".into());
        assert_eq!(c.failed(lost.clone()), Verdict::Lost(lost));
        assert!(!c.due(20_000, 60_000), "still counted in flight");
        assert!(matches!(
            c.failed(StoreError::Unavailable("down".into())),
            Verdict::Say(s) if s.starts_with("cannot compact the event log: ")
        ));
        assert!(c.due(20_000, 60_000));
    }
}
