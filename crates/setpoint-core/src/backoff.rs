//! Crash-loop backoff, the rule both drivers apply: the runtime in milliseconds, the lab in
//! seconds (its ticks).
//!
//! After a failed start the key (a workload, or a name) gets no new copy before its next try:
//! `initial` after the first failed attempt, doubling with each further one up to `max`; a
//! failure `reset` or more after the previous one starts the count again (the kubelet's rule,
//! KEP-4603). A failure of a copy created before the key's last counted failure belongs to the
//! same attempt and does not move the next try.

/// Backoff settings, in the driver's ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// The delay after the first failed attempt.
    pub initial: u64,
    /// The longest delay.
    pub max: u64,
    /// A failure this long after the previous one starts the count again.
    pub reset: u64,
}

impl BackoffPolicy {
    /// The delay after the `failures`-th consecutive failed attempt (1-based):
    /// `initial · 2^(f−1)`, capped at `max`; 0 for no failure.
    pub fn delay(&self, failures: u32) -> u64 {
        if failures == 0 {
            return 0;
        }
        let shift = failures.saturating_sub(1).min(63);
        let doubled = self
            .initial
            .checked_shl(shift)
            .filter(|d| d >> shift == self.initial)
            .unwrap_or(u64::MAX);
        doubled.min(self.max)
    }
}

/// One key's backoff.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backoff {
    /// Consecutive failed attempts.
    pub failures: u32,
    /// When the last counted failure happened.
    pub last_failed: u64,
    /// No copy of the key is created before this time.
    pub next_try: u64,
}

impl Backoff {
    /// Records the failed start, at `failed_at`, of a copy created at `created`. Returns whether
    /// it began a new attempt (and so moved the next try).
    pub fn record(&mut self, policy: &BackoffPolicy, created: u64, failed_at: u64) -> bool {
        if self.failures > 0 && created < self.last_failed {
            return false;
        }
        if self.failures > 0 && failed_at.saturating_sub(self.last_failed) >= policy.reset {
            self.failures = 0;
        }
        self.failures = self.failures.saturating_add(1);
        self.last_failed = failed_at;
        self.next_try = failed_at.saturating_add(policy.delay(self.failures));
        true
    }

    /// Whether creation is held back at `now`.
    pub fn blocks(&self, now: u64) -> bool {
        now < self.next_try
    }
}
