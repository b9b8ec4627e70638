//! Crash-loop backoff: the rule, free of I/O (its arithmetic is `setpoint_core::backoff`,
//! which the lab applies too).
//!
//! **Every uncommanded exit counts**, as the kubelet, systemd and Nomad count them: a copy that
//! ends on its own (any exit status, any signal not sent on command), before or after it became
//! ready, or that could not be spawned at all, is a **failure**. After a failure the controller
//! creates no new copy under the same key until the key's next try: per workload, or per name
//! for `named`. The delay follows the kubelet's container restart backoff (KEP-4603): `initial`
//! (10 s) after the first failure, doubling with each further one up to `max` (5 min). A copy
//! that **ran** `reset` (10 min) or more before it ended, or a failure that comes `reset` or more
//! after the key's previous one, starts the count again: a copy that crashes once a day is
//! replaced after `initial`, not after `max`.
//!
//! One **attempt** counts once. Copies created together fail together: a failure of a copy
//! created before the key's last counted failure belongs to the same attempt, and only adds to
//! `restarts`. So two copies of `["false"]` wait 10 s, 20 s, 40 s, … rather than 10 s, 40 s,
//! 160 s.
//!
//! **Commanded deaths** are not failures and are replaced at once: a copy stopped because its
//! assignment was deleted (a delete command, a scale-down, a rollout), one killed on an
//! operator's kill request (`setpoint kill`, and so the lesson's deaths under
//! `experiment lesson --real`), and one lost with its node (its assignment is released, no
//! ending is read).
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

/// Whether a copy that ended by itself is replaced (`restart = "always" | "on-failure" |
/// "never"`): the setting that covers batch copies, whose work ends.
///
/// A copy that is not replaced is **done**: its assignment stays, and it counts as a copy on
/// the ledger (not live), so no controller creates another in its place, until a delete
/// command (a scale-down, the workload's deletion) removes it. Commanded deaths (a kill
/// request, node loss) are replaced whatever the setting: they are not the copy's own end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Restart {
    /// Every ending is replaced, after the backoff (the default: a service).
    #[default]
    Always,
    /// An ending with exit status 0 is done; any other is replaced after the backoff (a batch
    /// job that is retried until it succeeds).
    OnFailure,
    /// No ending is replaced (a batch job run once).
    Never,
}

impl Restart {
    /// The accepted words, for error messages.
    pub const ACCEPTED: &'static str = "always, on-failure, never";

    /// The setting named `word`, if it is one.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "always" => Some(Restart::Always),
            "on-failure" => Some(Restart::OnFailure),
            "never" => Some(Restart::Never),
            _ => None,
        }
    }

    /// The setting as the workloads file writes it.
    pub fn word(self) -> &'static str {
        match self {
            Restart::Always => "always",
            Restart::OnFailure => "on-failure",
            Restart::Never => "never",
        }
    }

    /// Whether this is the default (so stored records without the field read as before).
    pub fn is_always(&self) -> bool {
        *self == Restart::Always
    }

    /// Whether a copy that ended by itself as `how` (`exit status 0`, `signal 9`, …) is done:
    /// not replaced.
    pub fn done(self, how: &str) -> bool {
        match self {
            Restart::Always => false,
            Restart::OnFailure => how == "exit status 0",
            Restart::Never => true,
        }
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
    /// Whether it was ended on purpose: stopped after a delete command, or killed on a kill
    /// request.
    pub commanded: bool,
}

impl Ending {
    /// Whether this ending counts for backoff: every ending that was not commanded.
    pub fn counts(&self) -> bool {
        !self.commanded
    }

    /// How long the copy ran, in milliseconds.
    pub fn ran_ms(&self) -> u64 {
        self.exited_ms.saturating_sub(self.started_ms)
    }

    /// Whether it ended before it became ready: a failed start rather than a crash.
    pub fn before_ready(&self) -> bool {
        self.ready_ms.is_none()
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
    /// Records a failure (an uncommanded ending). Returns whether it began a new attempt (and so
    /// moved the next try later); a copy of the same attempt only adds to `restarts`.
    pub fn record(&mut self, policy: &BackoffPolicy, e: &Ending) -> bool {
        self.restarts += 1;
        self.last_exit = e.how.clone();
        self.last_copy = e.copy.clone();
        if self.failures > 0 && e.created_ms < self.last_failed_ms {
            return false;
        }
        // A copy that ran `reset` before it ended was created after the last failure, so its
        // failure comes at least `reset` after that one: one test covers both resets.
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
    fn the_restart_setting_decides_which_endings_are_done() {
        for (r, ok, failed) in [
            (Restart::Always, false, false),
            (Restart::OnFailure, true, false),
            (Restart::Never, true, true),
        ] {
            assert_eq!(Restart::parse(r.word()), Some(r));
            assert_eq!(
                (r.done("exit status 0"), r.done("exit status 3")),
                (ok, failed)
            );
            assert_eq!(r.done("signal 9"), failed, "{r:?}");
        }
        assert_eq!(Restart::parse("sometimes"), None);
    }

    #[test]
    fn every_uncommanded_ending_counts_before_or_after_readiness() {
        let mut e = ending(0, 50);
        assert!(e.counts() && e.before_ready(), "never ready");
        e.ready_ms = Some(10);
        assert!(
            e.counts() && !e.before_ready(),
            "ready, then died on its own"
        );
        e.exited_ms = 10_000_000;
        assert!(e.counts(), "however long it ran");
        e.commanded = true;
        assert!(!e.counts(), "stopped or killed on purpose");
    }

    #[test]
    fn a_copy_that_ran_reset_before_it_crashed_starts_the_count_again() {
        let p = BackoffPolicy {
            initial_ms: 1_000,
            max_ms: 100_000,
            reset_ms: 60_000,
        };
        let mut s = BackoffState::default();
        for (created, exited) in [(0, 5), (1_005, 1_010), (3_010, 3_020)] {
            s.record(&p, &ending(created, exited));
        }
        assert_eq!((s.failures, s.next_try_ms), (3, 3_020 + 4_000));
        // Created at its next try, ready, and ran 55 s: still a crash loop (8 s).
        let mut e = ending(7_020, 62_020);
        e.ready_ms = Some(7_520);
        s.record(&p, &e);
        assert_eq!((s.failures, s.next_try_ms), (4, 62_020 + 8_000));
        // Ran a full minute: the count starts again (1 s).
        let mut e = ending(70_020, 130_020);
        e.ready_ms = Some(70_520);
        assert!(e.ran_ms() >= p.reset_ms);
        s.record(&p, &e);
        assert_eq!((s.failures, s.next_try_ms, s.restarts), (1, 131_020, 5));
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
