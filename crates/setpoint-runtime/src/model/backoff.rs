//! Crash-loop backoff: the rule, free of I/O (its arithmetic is `setpoint_core::backoff`,
//! which the lab applies too).
//!
//! A copy that ends before it became ready, or within its startup time B of starting, or that
//! could not be spawned at all, is a **failed start**. After a failed start the controller creates
//! no new copy under the same key until the key's next try: per workload, or per name for
//! `named`. The delay follows the kubelet's container restart backoff (KEP-4603): `initial`
//! (10 s) after the first failure, doubling with each further one up to `max` (5 min). A failure
//! that comes `reset` (10 min) or more after the key's previous one starts the count again.
//!
//! One **attempt** counts once. Copies created together fail together: a failed start of a copy
//! created before the key's last counted failure belongs to the same attempt, and only adds to
//! `restarts`. So two copies of `["false"]` wait 10 s, 20 s, 40 s, … rather than 10 s, 40 s,
//! 160 s.
//!
//! A copy that dies after it was ready (the lesson's crashes, `setpoint kill`) is not a failed
//! start: it is replaced at once, as before.
//!
//! Times are store milliseconds. The delay runs from the moment the copy was seen to end
//! (`exited_ms` in its node's report), not from the pass that noticed it, so the schedule does
//! not depend on how late the report arrived.

use serde::{Deserialize, Serialize};

/// The kubelet's initial restart delay.
pub const DEFAULT_INITIAL_MS: u64 = 10_000;
/// The kubelet's cap on the restart delay.
pub const DEFAULT_MAX_MS: u64 = 300_000;
/// The kubelet's reset: this long without a failure and the count starts again.
pub const DEFAULT_RESET_MS: u64 = 600_000;
/// The longest initial delay a workload may declare: one day.
pub const MAX_INITIAL_MS: u64 = 86_400_000;

/// A workload's backoff settings (`backoff = { initial = "10s", max = "5m", reset = "10m" }`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackoffPolicy {
    /// The delay after the first failed start, in milliseconds.
    pub initial_ms: u64,
    /// The longest delay, in milliseconds.
    pub max_ms: u64,
    /// A failure this long (milliseconds) after the previous one starts the count again.
    pub reset_ms: u64,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        Self {
            initial_ms: DEFAULT_INITIAL_MS,
            max_ms: DEFAULT_MAX_MS,
            reset_ms: DEFAULT_RESET_MS,
        }
    }
}

impl BackoffPolicy {
    /// The rule's settings in setpoint-core's unit-free form (milliseconds here).
    pub fn core(&self) -> setpoint_core::backoff::BackoffPolicy {
        setpoint_core::backoff::BackoffPolicy {
            initial: self.initial_ms,
            max: self.max_ms,
            reset: self.reset_ms,
        }
    }

    /// The delay after the `failures`-th consecutive failure (1-based): `initial · 2^(f−1)`,
    /// capped at `max`. 0 failures: no delay.
    pub fn delay_ms(&self, failures: u32) -> u64 {
        self.core().delay(failures)
    }
}

/// How a copy ended, as the controller reads it from its node's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ending {
    /// The copy's identity.
    pub copy: String,
    /// When its assignment was created (store milliseconds): which attempt it belongs to.
    pub created_ms: u64,
    /// When its process started.
    pub started_ms: u64,
    /// When it became ready, if it did.
    pub ready_ms: Option<u64>,
    /// When it was seen to end.
    pub exited_ms: u64,
    /// How it ended (`exit status 1`, `signal 9`, `failed to start: …`).
    pub how: String,
    /// Whether it was being stopped on purpose (a delete command).
    pub commanded: bool,
}

impl Ending {
    /// Whether this ending is a failed start for a workload with startup time `startup_ms`:
    /// not commanded, and it never became ready or ended within `startup_ms` of starting.
    pub fn is_failed_start(&self, startup_ms: u64) -> bool {
        !self.commanded
            && (self.ready_ms.is_none()
                || self.exited_ms.saturating_sub(self.started_ms) < startup_ms)
    }
}

/// One key's backoff: a workload's, or one name's of a `named` workload.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackoffState {
    /// Consecutive failed attempts: the exponent of the delay.
    pub failures: u32,
    /// Every failed start of the key, attempt or not: what `get` shows as restarts.
    pub restarts: u64,
    /// When the last counted failure happened (store milliseconds).
    pub last_failed_ms: u64,
    /// No copy of the key is created before this time.
    pub next_try_ms: u64,
    /// How the last failed copy ended.
    pub last_exit: String,
    /// Which copy that was.
    pub last_copy: String,
}

impl BackoffState {
    /// Records a failed start. Returns whether it began a new attempt (and so moved the next try
    /// later); a copy of the same attempt only adds to `restarts`.
    pub fn record(&mut self, policy: &BackoffPolicy, e: &Ending) -> bool {
        self.restarts += 1;
        self.last_exit = e.how.clone();
        self.last_copy = e.copy.clone();
        if self.failures > 0 && e.created_ms < self.last_failed_ms {
            return false;
        }
        if self.failures > 0 && e.exited_ms.saturating_sub(self.last_failed_ms) >= policy.reset_ms {
            self.failures = 0;
        }
        self.failures = self.failures.saturating_add(1);
        self.last_failed_ms = e.exited_ms;
        self.next_try_ms = e.exited_ms.saturating_add(policy.delay_ms(self.failures));
        true
    }

    /// Whether creation is held back at `now_ms`.
    pub fn blocks(&self, now_ms: u64) -> bool {
        now_ms < self.next_try_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ending(created: u64, exited: u64) -> Ending {
        Ending {
            copy: "w-0".into(),
            created_ms: created,
            started_ms: created,
            ready_ms: None,
            exited_ms: exited,
            how: "exit status 1".into(),
            commanded: false,
        }
    }

    #[test]
    fn the_kubelet_schedule_doubles_from_10s_to_a_5_minute_cap() {
        let p = BackoffPolicy::default();
        let delays: Vec<u64> = (0..=7).map(|f| p.delay_ms(f) / 1000).collect();
        assert_eq!(delays, [0, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(p.delay_ms(u32::MAX), 300_000);
        let big = BackoffPolicy {
            initial_ms: u64::MAX / 2,
            max_ms: u64::MAX,
            reset_ms: 1,
        };
        assert_eq!(big.delay_ms(3), u64::MAX, "overflow saturates");
    }

    #[test]
    fn each_attempt_counts_once_and_the_next_try_runs_from_the_exit() {
        let p = BackoffPolicy::default();
        let mut s = BackoffState::default();
        // Two copies created at 0 fail at 5 and 7: one attempt.
        assert!(s.record(&p, &ending(0, 5)));
        assert!(!s.record(&p, &ending(0, 7)));
        assert_eq!((s.failures, s.restarts, s.next_try_ms), (1, 2, 10_005));
        assert!(s.blocks(10_004) && !s.blocks(10_005));
        // The next attempt, created at the next try, fails 3 ms later: 20 s.
        assert!(s.record(&p, &ending(10_005, 10_008)));
        assert_eq!((s.failures, s.next_try_ms), (2, 30_008));
    }

    #[test]
    fn a_failure_reset_after_the_previous_one_starts_the_count_again() {
        let p = BackoffPolicy::default();
        let mut s = BackoffState::default();
        s.record(&p, &ending(0, 1));
        s.record(&p, &ending(20_000, 20_001));
        assert_eq!(s.failures, 2);
        s.record(&p, &ending(700_000, 700_001));
        assert_eq!((s.failures, s.next_try_ms), (1, 710_001));
    }

    #[test]
    fn only_uncommanded_endings_before_readiness_or_within_startup_are_failed_starts() {
        let mut e = ending(0, 50);
        assert!(e.is_failed_start(0), "never ready");
        e.ready_ms = Some(10);
        assert!(e.is_failed_start(100), "ended within startup");
        assert!(!e.is_failed_start(50), "ran its startup time, then died");
        e.ready_ms = None;
        e.commanded = true;
        assert!(!e.is_failed_start(100), "stopped on purpose");
    }

    proptest! {
        /// Against an oracle that replays the rule literally: the next try after a run of failed
        /// attempts is the last exit plus initial doubled per attempt since the last reset.
        #[test]
        fn the_schedule_matches_a_literal_replay(
            gaps in proptest::collection::vec(0u64..400_000, 1..20),
            initial in 1u64..20_000,
            factor in 1u64..40,
        ) {
            let p = BackoffPolicy { initial_ms: initial, max_ms: initial * factor, reset_ms: 300_000 };
            let mut s = BackoffState::default();
            let mut t = 0u64;
            let mut streak = 0u64;
            let mut last = 0u64;
            for g in gaps {
                // Each attempt is created at the next try (or later) and fails g ms after it.
                let created = t.max(s.next_try_ms);
                let exit = created + g;
                if streak > 0 && exit - last >= p.reset_ms { streak = 0; }
                streak += 1;
                last = exit;
                let mut d = initial;
                for _ in 1..streak { d = (d * 2).min(p.max_ms); }
                prop_assert!(s.record(&p, &ending(created, exit)));
                prop_assert_eq!(s.next_try_ms, exit + d.min(p.max_ms));
                t = exit;
            }
        }
    }
}
