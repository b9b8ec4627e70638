//! Tending the copies' logs ([`LogTending`]): when to rotate the running copies' logs, and when
//! also to sweep the logs of copies that ended ([`crate::retention`]).
//!
//! The work is the driver's ([`AgentOutput::TendLogs`](super::AgentOutput::TendLogs)); this part
//! keeps its two clocks, so that the rest of the agent does not.

use super::outbox::Soonest;

/// How often copy logs are rotated, in milliseconds.
const LOGS_EVERY_MS: u64 = 1_000;
/// How often ended copies' logs are swept, in milliseconds.
const SWEEP_EVERY_MS: u64 = 10_000;

/// The clocks of log rotation and sweeping.
#[derive(Debug)]
pub(super) struct LogTending {
    next_logs: u64,
    next_sweep: u64,
}

impl LogTending {
    /// Both due at `now`.
    pub(super) fn new(now: u64) -> Self {
        Self {
            next_logs: now,
            next_sweep: now,
        }
    }

    /// Whether the logs are to be tended at `now`, and if so whether swept too; the next times
    /// are set.
    pub(super) fn due(&mut self, now: u64) -> Option<bool> {
        if now < self.next_logs {
            return None;
        }
        self.next_logs = now + LOGS_EVERY_MS;
        let sweep = now >= self.next_sweep;
        if sweep {
            self.next_sweep = now + SWEEP_EVERY_MS;
        }
        Some(sweep)
    }

    /// When the logs are next to be tended ([`LogTending::due`]).
    pub(super) fn next_at(&self) -> u64 {
        self.next_logs
    }

    /// The next time the logs are to be tended.
    pub(super) fn wake_times(&self, soonest: &mut Soonest) {
        soonest.at(self.next_logs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_are_rotated_every_second_and_swept_every_ten() {
        let mut t = LogTending::new(0);
        let due: Vec<(u64, Option<bool>)> = (0..=25)
            .map(|k| k * 500)
            .map(|now| (now, t.due(now)))
            .filter(|(_, d)| d.is_some())
            .collect();
        let sweeps: Vec<u64> = due
            .iter()
            .filter(|(_, d)| *d == Some(true))
            .map(|(now, _)| *now)
            .collect();
        assert_eq!(due.len(), 13, "{due:?}");
        assert_eq!(sweeps, [0, 10_000]);
        let mut s = Soonest::new(12_100);
        t.wake_times(&mut s);
        assert_eq!(s.or_a_second(), 13_000);
    }
}
