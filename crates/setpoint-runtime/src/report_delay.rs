//! Jittered report delays: a schedule of added delays that an agent gives its reports in turn,
//! instead of one fixed `report_delay` (the lab's random delay models on real processes).
//!
//! The runtime does not draw the delays: it has no delay models and no random numbers, and does
//! not depend on the lab. Whoever runs the agent draws them (setpoint-reality draws them from
//! the lab's model with the lab's seeded generator) and hands over the list. Report `k` made by
//! the agent gets delay `schedule[k mod len]`.
//!
//! Reports stay in order: the agent writes its queued reports front first, so a report whose
//! delay is shorter than its predecessor's waits for it, and the newest due report wins. The
//! ledger never goes back to an older observation. (The lab draws a delay per copy event; the
//! real agent reports whole snapshots. `docs/model-vs-reality.md` compares the two.)

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A schedule of report delays in milliseconds, used in turn; empty: the fixed delay.
#[derive(Default)]
pub struct ReportDelays {
    schedule: Arc<[u64]>,
    next: AtomicUsize,
}

impl ReportDelays {
    /// Delays in milliseconds, one per report in turn, repeating after the last.
    pub fn new(schedule: Vec<u64>) -> Self {
        ReportDelays {
            schedule: schedule.into(),
            next: AtomicUsize::new(0),
        }
    }

    /// Whether there is no schedule (every report takes the fixed delay).
    pub fn is_empty(&self) -> bool {
        self.schedule.is_empty()
    }

    /// The delay of the next report, in milliseconds: the schedule's next entry, or `fixed_ms`
    /// without a schedule.
    pub fn next_ms(&self, fixed_ms: u64) -> u64 {
        if self.schedule.is_empty() {
            return fixed_ms;
        }
        let k = self.next.fetch_add(1, Ordering::Relaxed);
        self.schedule[k % self.schedule.len()]
    }
}

impl Clone for ReportDelays {
    /// The same schedule, from its first entry.
    fn clone(&self) -> Self {
        ReportDelays {
            schedule: Arc::clone(&self.schedule),
            next: AtomicUsize::new(0),
        }
    }
}

impl PartialEq for ReportDelays {
    fn eq(&self, other: &Self) -> bool {
        self.schedule == other.schedule
    }
}

impl Eq for ReportDelays {}

impl fmt::Debug for ReportDelays {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReportDelays({} entries)", self.schedule.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_take_the_schedule_in_turn_and_repeat_it() {
        let d = ReportDelays::new(vec![30, 5, 12]);
        let got: Vec<u64> = (0..7).map(|_| d.next_ms(99)).collect();
        assert_eq!(got, [30, 5, 12, 30, 5, 12, 30]);
        // A clone starts over; equality is the schedule's.
        let c = d.clone();
        assert_eq!(c.next_ms(99), 30);
        assert_eq!(c, d);
        assert_ne!(c, ReportDelays::new(vec![30]));
    }

    #[test]
    fn no_schedule_is_the_fixed_delay() {
        let d = ReportDelays::default();
        assert!(d.is_empty());
        assert_eq!((d.next_ms(40), d.next_ms(40)), (40, 40));
    }
}
