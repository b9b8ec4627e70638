//! Conditions that repeat at every try (a store that refuses writes, a lease that cannot be
//! renewed), logged once when they begin, not once per try, and held when they flap.
//!
//! Why a hold: a daemon retries every tenth of a second or every report period, and a store
//! on a full disk refuses one write and takes the next (SQLite finds room in pages it already
//! holds). Logging each stretch of failures when it begins and ends then logs twice per flap.
//! CI found it: on a full 2 MiB disk, more such lines than seconds, among them an agent's
//! `cannot report` twice in 350 ms (a report was written in between). So a
//! condition logged at time `t` is not logged again before `t + HOLD_MS`, whether it began
//! anew or its reason changed; a failure still going on when the hold ends is logged at its
//! next try, with the number of shorter stretches that were not logged. A recovery is logged
//! only if the stretch it ends was. What a reader of the log may rely on:
//! - a condition failing for longer than the hold is in the log, with its latest reason, at
//!   most one try after the hold ends;
//! - each condition writes at most two lines (its failure, its recovery) per hold;
//! - "… again" follows only a failure line of the same condition.
//!
//! The machines call this with their own clocks (`now_ms`), so it is I/O-free and runs in the
//! lab as in the runtime.

use std::collections::BTreeMap;

/// How long a condition's logged failure holds back its next failure line, in milliseconds.
pub const HOLD_MS: u64 = 30_000;

/// One condition's state.
#[derive(Debug, Default, Clone)]
struct Stretch {
    /// A stretch of failures is going on.
    failing: bool,
    /// The line logged in the stretch going on, if it was logged.
    said: Option<String>,
    /// When a failure line of this condition was last logged.
    said_at: Option<u64>,
    /// Stretches that began and ended without being logged, since the last line logged.
    unsaid: u64,
}

/// The conditions of one daemon, by name.
#[derive(Debug, Default, Clone)]
pub struct Conditions {
    by_name: BTreeMap<String, Stretch>,
}

impl Conditions {
    /// Empty: nothing failing.
    pub fn new() -> Self {
        Self::default()
    }

    /// A try of `what` failed at `now_ms`, as `line` says: the line to log, if it is to be
    /// logged now.
    pub fn failed(&mut self, now_ms: u64, what: &str, line: String) -> Option<String> {
        let s = match self.by_name.get_mut(what) {
            Some(s) => s,
            None => self.by_name.entry(what.to_owned()).or_default(),
        };
        s.failing = true;
        if s.said.as_ref() == Some(&line) {
            return None;
        }
        if s.said_at
            .is_some_and(|t| now_ms < t.saturating_add(HOLD_MS))
        {
            return None;
        }
        s.said_at = Some(now_ms);
        s.said = Some(line.clone());
        Some(match std::mem::take(&mut s.unsaid) {
            0 => line,
            1 => format!("{line} (after 1 shorter stretch of failures, not logged)"),
            n => format!("{line} (after {n} shorter stretches of failures, not logged)"),
        })
    }

    /// A try of `what` succeeded: whether its recovery is to be logged (it is if the stretch
    /// of failures it ends was).
    pub fn ended(&mut self, what: &str) -> bool {
        let Some(s) = self.by_name.get_mut(what) else {
            return false;
        };
        if !std::mem::take(&mut s.failing) {
            return false;
        }
        let said = s.said.take().is_some();
        if !said {
            s.unsaid += 1;
        }
        said
    }

    /// Whether a stretch of failures of `what` is going on.
    pub fn failing(&self, what: &str) -> bool {
        self.by_name.get(what).is_some_and(|s| s.failing)
    }

    /// Forgets `what` (a loop that ended): its next failure is logged at once.
    pub fn forget(&mut self, what: &str) {
        self.by_name.remove(what);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_condition_is_logged_when_it_begins_and_ends_and_held_while_it_flaps() {
        let mut c = Conditions::new();
        let full = || "cannot report: full".to_owned();
        assert_eq!(c.failed(0, "report", full()), Some(full()));
        assert_eq!(c.failed(100, "report", full()), None, "not at every try");
        assert!(c.failing("report"));
        assert!(c.ended("report"), "a logged stretch's end is logged");
        assert!(!c.ended("report"), "once");
        // Flapping within the hold: nothing.
        for t in [200, 5_000, 20_000] {
            assert_eq!(c.failed(t, "report", full()), None);
            assert!(!c.ended("report"));
        }
        assert_eq!(
            c.failed(29_999, "report", "cannot report: gone".into()),
            None
        );
        // Still failing when the hold ends: logged at the next try, with what was not.
        assert_eq!(
            c.failed(30_000, "report", "cannot report: gone".into())
                .as_deref(),
            Some("cannot report: gone (after 3 shorter stretches of failures, not logged)")
        );
        assert!(c.ended("report"));
        // Conditions are apart; a forgotten one starts afresh.
        assert_eq!(c.failed(30_001, "events", full()), Some(full()));
        assert_eq!(c.failed(30_002, "report", full()), None);
        c.forget("report");
        assert_eq!(c.failed(30_003, "report", full()), Some(full()));
        assert!(!c.ended("never"));
    }

    /// A try: at a time step, of one of two conditions, failing with one of two reasons or
    /// succeeding.
    fn tries() -> impl Strategy<Value = Vec<(u64, u8, Option<u8>)>> {
        proptest::collection::vec((0u64..20_000, 0u8..2, proptest::option::of(0u8..2)), 1..200)
    }

    proptest! {
        /// Against the promises in the module's documentation, checked on the whole log.
        #[test]
        fn the_log_keeps_the_promises(tries in tries()) {
            let mut c = Conditions::new();
            let mut now = 0u64;
            // What was logged, by condition: (time, failure line or None for a recovery).
            let mut log: BTreeMap<u8, Vec<(u64, Option<String>)>> = BTreeMap::new();
            // Since when each condition has been failing, if it is, and with which reason.
            let mut since: BTreeMap<u8, (u64, String)> = BTreeMap::new();
            for (step, what, outcome) in tries {
                now += step;
                let name = format!("c{what}");
                let lines = log.entry(what).or_default();
                match outcome {
                    Some(reason) => {
                        let line = format!("cannot {reason}");
                        let start = since.get(&what).map_or(now, |s| s.0);
                        since.insert(what, (start, line.clone()));
                        if let Some(said) = c.failed(now, &name, line.clone()) {
                            prop_assert!(said.starts_with(&line), "the latest reason: {said}");
                            lines.push((now, Some(said)));
                        }
                        // A stretch failing for longer than the hold is in the log.
                        let last_failure = lines
                            .iter()
                            .rev()
                            .find_map(|(t, l)| l.as_ref().map(|l| (*t, l.clone())));
                        if now >= start + HOLD_MS {
                            prop_assert!(
                                last_failure.as_ref().is_some_and(|(t, _)| *t >= start),
                                "{} failing since {} is not in the log at {}: {:?}", name, start, now, lines
                            );
                        }
                        // The latest reason is, once the last failure line's hold ended.
                        if let Some((t, l)) = last_failure {
                            if now >= t + HOLD_MS {
                                prop_assert!(l.starts_with(&line), "{:?} at {}: {:?}", line, now, lines);
                            }
                        }
                    }
                    None => {
                        since.remove(&what);
                        if c.ended(&name) {
                            lines.push((now, None));
                        }
                    }
                }
            }
            for lines in log.values() {
                // A recovery only after a failure line of its condition.
                for (i, (_, l)) in lines.iter().enumerate() {
                    if l.is_none() {
                        prop_assert!(i > 0 && lines[i - 1].1.is_some(), "{:?}", lines);
                    }
                }
                // Failure lines at least a hold apart.
                let failures: Vec<u64> = lines.iter().filter(|l| l.1.is_some()).map(|l| l.0).collect();
                for w in failures.windows(2) {
                    prop_assert!(w[1] >= w[0] + HOLD_MS, "{:?}", lines);
                }
            }
        }
    }
}
