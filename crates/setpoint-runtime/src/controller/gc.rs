//! Garbage collection's schedule: every [`GC_EVERY_MS`] the leader reads the snapshot, plans
//! the removal of orphaned assignments ([`plan_gc`](super::reconcile::plan_gc): those whose
//! workload is no longer declared, or declared again under a new uid) and commits it, fenced on
//! `/leader` like every write of the leader. One collection at a time.
//!
//! A collection that fails doubles the wait before the next, up to [`GC_BACKOFF_MAX_MS`], and
//! one that succeeds restores the second. A collection whose snapshot the watch cache cannot
//! serve reads every assignment and placement from the store; when the store is too slow to
//! answer within its deadline, retrying that read every second adds a full read to a store
//! already behind (114 failed collections in one run at 100,000 copies on a stock etcd that did
//! not catch up, docs/performance-runtime.md). A Kubernetes controller's work queue backs off an
//! item that keeps failing the same way.
//!
//! What an orphan is, and which ones are held (on a lost node, until their copy is known to have
//! ended), is [`super::reconcile`]'s rule; this part decides when, and what the outcome means.

use super::reconcile::PassError;
use super::verdict::Verdict;

/// How often the leader collects orphaned assignments, in milliseconds.
pub const GC_EVERY_MS: u64 = 1_000;

/// The longest wait after failed collections, in milliseconds.
pub const GC_BACKOFF_MAX_MS: u64 = 32_000;

/// The leader's collector: when it last started, and whether one is in flight.
#[derive(Debug, Default)]
pub(super) struct Collector {
    /// When the last collection started (this host's clock); none yet in this leadership.
    last_ms: Option<u64>,
    /// A collection is in flight.
    collecting: bool,
    /// Collections that failed in a row.
    failures: u32,
    /// The revision of the last snapshot on which a collection found nothing to do: a snapshot
    /// of the same revision holds the same records, and the plan is a function of them and of
    /// the leadership's fence alone, so a collection on it finds nothing again and is not
    /// planned (in a steady state most are: `plan_gc` walked every assignment every second).
    quiet_at: Option<crate::store::Revision>,
}

impl Collector {
    /// Whether a collection starts now: none in flight, and none started in the last
    /// [`GC_EVERY_MS`], doubled for each collection that failed in a row (at most
    /// [`GC_BACKOFF_MAX_MS`]). If so it is counted as in flight from now.
    pub(super) fn due(&mut self, now_ms: u64) -> bool {
        let wait = self.wait_ms();
        let due = !self.collecting && self.last_ms.is_none_or(|t| now_ms - t >= wait);
        if due {
            self.collecting = true;
            self.last_ms = Some(now_ms);
        }
        due
    }

    /// From when [`Self::due`] would say yes, as things stand: never while a collection is in
    /// flight. It changes nothing.
    pub(super) fn due_at(&self) -> u64 {
        match (self.collecting, self.last_ms) {
            (true, _) => u64::MAX,
            (false, None) => 0,
            (false, Some(t)) => t.saturating_add(self.wait_ms()),
        }
    }

    /// The wait after the last collection started: [`GC_EVERY_MS`], doubled for each that
    /// failed in a row, at most [`GC_BACKOFF_MAX_MS`].
    fn wait_ms(&self) -> u64 {
        GC_EVERY_MS
            .saturating_mul(1 << self.failures.min(16))
            .min(GC_BACKOFF_MAX_MS)
    }

    /// Whether a collection on a snapshot of `revision` is known to find nothing.
    pub(super) fn known_quiet(&self, revision: crate::store::Revision) -> bool {
        self.quiet_at == Some(revision)
    }

    /// A collection planned on a snapshot of `revision` found nothing to do.
    pub(super) fn quiet(&mut self, revision: crate::store::Revision) {
        self.quiet_at = Some(revision);
    }

    /// The collection in flight ended with `outcome` (the assignments it removed): what that
    /// means for the host.
    pub(super) fn done(&mut self, outcome: Result<Vec<String>, PassError>) -> Verdict {
        self.collecting = false;
        self.failures = match &outcome {
            Ok(_) => 0,
            Err(_) => self.failures.saturating_add(1),
        };
        match outcome {
            Ok(gone) if !gone.is_empty() => Verdict::Say(format!(
                "collected orphaned assignments: {}",
                gone.join(", ")
            )),
            Ok(_) => Verdict::Quiet,
            Err(PassError::NotLeader) => Verdict::Deposed,
            Err(PassError::Store(e)) if e.is_lost() => Verdict::Lost(e),
            Err(e) => Verdict::Say(format!("garbage collection failed: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    #[test]
    fn a_collection_starts_at_once_then_once_a_second_and_never_two_at_a_time() {
        let mut c = Collector::default();
        assert!(c.due(500), "the first at once");
        assert!(!c.due(2_000), "one in flight");
        assert_eq!(c.done(Ok(Vec::new())), Verdict::Quiet);
        assert!(!c.due(1_499));
        assert!(c.due(1_500));
    }

    #[test]
    fn failed_collections_double_the_wait_up_to_its_bound_and_a_success_restores_it() {
        let mut c = Collector::default();
        let failed = || Err(PassError::Store(StoreError::Unavailable("slow".into())));
        let mut now = 0;
        assert!(c.due(now));
        let mut waits = Vec::new();
        for _ in 0..8 {
            let _ = c.done(failed());
            let from = now;
            now += 1;
            while !c.due(now) {
                now += 1;
            }
            waits.push(now - from);
        }
        assert_eq!(
            waits,
            [2_000, 4_000, 8_000, 16_000, 32_000, 32_000, 32_000, 32_000]
        );
        assert_eq!(c.done(Ok(Vec::new())), Verdict::Quiet);
        assert!(!c.due(now + 999));
        assert!(c.due(now + 1_000), "a success restores the second");
    }

    #[test]
    fn the_outcome_is_logged_or_ends_the_leadership_or_the_host() {
        let mut c = Collector::default();
        let said = c.done(Ok(vec!["w-0".into(), "w-3".into()]));
        assert_eq!(
            said,
            Verdict::Say("collected orphaned assignments: w-0, w-3".into())
        );
        assert_eq!(c.done(Err(PassError::NotLeader)), Verdict::Deposed);
        let gone = StoreError::Unavailable("down".into());
        assert!(matches!(
            c.done(Err(PassError::Store(gone))),
            Verdict::Say(s) if s.starts_with("garbage collection failed: ")
        ));
        let lost = StoreError::Lost("the database file is gone".into());
        assert_eq!(
            c.done(Err(PassError::Store(lost.clone()))),
            Verdict::Lost(lost)
        );
    }
}
