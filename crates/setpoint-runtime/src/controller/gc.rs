//! Garbage collection's schedule: every [`GC_EVERY_MS`] the leader reads the snapshot, plans
//! the removal of orphaned assignments ([`plan_gc`](super::reconcile::plan_gc): those whose
//! workload is no longer declared, or declared again under a new uid) and commits it, fenced on
//! `/leader` like every write of the leader. One collection at a time.
//!
//! What an orphan is, and which ones are held (on a lost node, until their copy is known to have
//! ended), is [`super::reconcile`]'s rule; this part decides when, and what the outcome means.

use super::reconcile::PassError;
use super::verdict::Verdict;

/// How often the leader collects orphaned assignments, in milliseconds.
pub const GC_EVERY_MS: u64 = 1_000;

/// The leader's collector: when it last started, and whether one is in flight.
#[derive(Debug, Default)]
pub(super) struct Collector {
    /// When the last collection started (this host's clock); none yet in this leadership.
    last_ms: Option<u64>,
    /// A collection is in flight.
    collecting: bool,
}

impl Collector {
    /// Whether a collection starts now: none in flight, and none started in the last
    /// [`GC_EVERY_MS`]. If so it is counted as in flight from now.
    pub(super) fn due(&mut self, now_ms: u64) -> bool {
        let due = !self.collecting && self.last_ms.is_none_or(|t| now_ms - t >= GC_EVERY_MS);
        if due {
            self.collecting = true;
            self.last_ms = Some(now_ms);
        }
        due
    }

    /// The collection in flight ended with `outcome` (the assignments it removed): what that
    /// means for the host.
    pub(super) fn done(&mut self, outcome: Result<Vec<String>, PassError>) -> Verdict {
        self.collecting = false;
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
