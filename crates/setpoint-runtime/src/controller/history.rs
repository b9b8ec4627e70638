//! When the controller compacts the store's history (etcd's MVCC history of every key).
//!
//! etcd keeps every version of every key until someone compacts it. A stock etcd 3.4 does not
//! compact on its own (`--auto-compaction-retention` is off by default), and its database grows
//! with every write until its backend quota (2 GiB by default) raises the `NOSPACE` alarm and
//! every write is refused: no pass, no report, no `apply`. Kubernetes' API server compacts
//! every five minutes for the same reason (`--etcd-compaction-interval`). So every controller
//! does too: at each tick of its interval it reads the store's revision, and compacts to the
//! revision it read at the tick before. The last interval of history is always kept, so a
//! watch that lags by less than that resumes where it was; one that lags by more ends
//! ([`crate::store::WatchEvent::Lost`]) and its reader reads afresh, as after any compaction.
//!
//! Every controller compacts, leader or not: a compaction to a revision already compacted
//! does nothing ([`crate::store::Store::compact_history`]), and the standbys' ticks are a few
//! requests an interval. On the embedded stores there is no history, and nothing is asked.

use std::time::Duration;

use crate::store::Revision;

/// Compaction's schedule: the revision read at the last tick.
#[derive(Clone, Debug)]
pub struct HistorySchedule {
    interval_ms: u64,
    last: Option<(u64, Revision)>,
}

impl HistorySchedule {
    /// A schedule of one tick every `interval`; zero turns compaction off.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval_ms: interval.as_millis() as u64,
            last: None,
        }
    }

    /// Whether compaction is on.
    pub fn on(&self) -> bool {
        self.interval_ms > 0
    }

    /// The store's `revision`, read at `now_ms`: the revision to compact to, if a tick is due
    /// and an earlier tick read one (then `revision` is kept for the next). A read before the
    /// interval has passed since the last kept one changes nothing, so a tick that comes early
    /// never shortens the history kept.
    pub fn read(&mut self, now_ms: u64, revision: Revision) -> Option<Revision> {
        if !self.on() {
            return None;
        }
        match self.last {
            Some((at, _)) if now_ms < at.saturating_add(self.interval_ms) => None,
            Some((_, before)) => {
                self.last = Some((now_ms, revision));
                (before < revision).then_some(before)
            }
            None => {
                self.last = Some((now_ms, revision));
                None
            }
        }
    }

    /// How long until the next tick is due, from `now_ms`.
    pub fn wait(&self, now_ms: u64) -> Duration {
        let due = self
            .last
            .map_or(now_ms, |(at, _)| at.saturating_add(self.interval_ms));
        Duration::from_millis(due.saturating_sub(now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tick_compacts_to_the_revision_the_tick_before_read() {
        let mut s = HistorySchedule::new(Duration::from_secs(300));
        assert_eq!(s.read(0, 10), None, "the first tick only reads");
        assert_eq!(s.wait(0), Duration::from_secs(300));
        assert_eq!(
            s.read(299_999, 50),
            None,
            "early: nothing, and 10 is still kept"
        );
        assert_eq!(s.read(300_000, 60), Some(10));
        assert_eq!(s.read(600_000, 90), Some(60));
        assert_eq!(s.wait(650_000), Duration::from_secs(250));
    }

    #[test]
    fn a_store_that_did_not_move_is_not_compacted_again() {
        let mut s = HistorySchedule::new(Duration::from_secs(1));
        assert_eq!(s.read(0, 7), None);
        assert_eq!(s.read(1_000, 7), None, "nothing was written since");
        assert_eq!(s.read(2_000, 9), Some(7));
    }

    #[test]
    fn an_interval_of_zero_never_compacts() {
        let mut s = HistorySchedule::new(Duration::ZERO);
        assert!(!s.on());
        for t in 0..5 {
            assert_eq!(s.read(t * 1_000, t + 100), None);
        }
    }
}
