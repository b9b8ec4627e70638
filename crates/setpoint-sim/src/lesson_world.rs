//! The fast engine's input, and the limits every setting shares.
//!
//! A [`LessonWorld`] is the compact form of a [`crate::Scenario`] that the lesson's world can
//! express: one workload, `ledger` or `intent`, a fixed delay of whole seconds and deaths by
//! count. [`crate::run`] converts to it on its own ([`crate::Scenario::as_lesson`]); sweeps over
//! millions of cells, the predictor and the boundary scan build it directly, because it is small
//! and cheap to validate. [`Limit`] holds the accepted range of every numeric setting, the same
//! for the command line, scenario files and both engines.

use setpoint_core::ControllerKind;
use thiserror::Error;

/// Something wrong with a scenario's input. Every message names the setting and what it accepts.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SettingError {
    /// A number outside its accepted range. Pick a value inside the range the message gives.
    #[error("{field} {value} is out of range: accepted {min} to {max} {unit}")]
    OutOfRange {
        /// The setting, named as its command-line flag without dashes.
        field: &'static str,
        /// The value as given.
        value: String,
        /// The smallest accepted value.
        min: u64,
        /// The largest accepted value.
        max: u64,
        /// What the number counts.
        unit: &'static str,
    },
    /// Text where a whole number was expected. Give digits only, such as `15`.
    #[error("{field} '{value}' is not a whole number: accepted {min} to {max} {unit}")]
    NotANumber {
        /// The setting, named as its command-line flag without dashes.
        field: &'static str,
        /// The text as given.
        value: String,
        /// The smallest accepted value.
        min: u64,
        /// The largest accepted value.
        max: u64,
        /// What the number counts.
        unit: &'static str,
    },
    /// A malformed list of scripted deaths. Write `AT:COUNT[,AT:COUNT…]`, or `none`.
    #[error("deaths '{value}': {reason}; accepted: AT:COUNT[,AT:COUNT...] with AT 0 to {max_at} seconds and COUNT 0 to {max_count} copies, or 'none'")]
    BadDeaths {
        /// The text as given.
        value: String,
        /// What is wrong with it.
        reason: String,
        /// The latest accepted death time.
        max_at: u64,
        /// The largest accepted count in one entry.
        max_count: u64,
    },
    /// A controller beyond the lesson's two, where only they are accepted. `setpoint run` (and a
    /// [`crate::scenario::Scenario`]) runs every controller.
    #[error("controller '{0}' runs only in the general engine: accepted here are ledger, intent; `setpoint run` accepts every controller")]
    NotALessonController(ControllerKind),
}

/// The accepted range of one numeric setting. The command line and the scenario constructor check
/// the same limits, so a value refused in one place is refused everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The setting, named as its command-line flag without dashes.
    pub field: &'static str,
    /// The smallest accepted value.
    pub min: u64,
    /// The largest accepted value.
    pub max: u64,
    /// What the number counts, for messages.
    pub unit: &'static str,
}

/// The largest number of seconds any time setting accepts: about 31.7 years of virtual time.
/// Larger values would let sums of times overflow; the engine's cost does not grow with it.
pub const MAX_SECONDS: u64 = 1_000_000_000;

/// The largest copy count accepted in one setting. The engine's cost does not depend on it; the
/// bound keeps every count below 2^63 even when a loop overshoots on every round of a long run.
pub const MAX_COPIES: u64 = 100_000_000;

/// The most entries a deaths list may hold.
pub const MAX_DEATH_ENTRIES: usize = 100_000;

impl Limit {
    /// `--desired`: the declared copy count.
    pub const DESIRED: Limit = Limit::new("desired", 0, MAX_COPIES, "copies");
    /// `--period`: the loop period U. Zero would mean infinitely many rounds.
    pub const PERIOD: Limit = Limit::new("period", 1, MAX_SECONDS, "seconds");
    /// `--delay`: the report delay G.
    pub const DELAY: Limit = Limit::new("delay", 0, MAX_SECONDS, "seconds");
    /// `--startup`: the startup time B.
    pub const STARTUP: Limit = Limit::new("startup", 0, MAX_SECONDS, "seconds");
    /// `--duration`: the last second of the run.
    pub const DURATION: Limit = Limit::new("duration", 0, MAX_SECONDS, "seconds");

    const fn new(field: &'static str, min: u64, max: u64, unit: &'static str) -> Self {
        Limit {
            field,
            min,
            max,
            unit,
        }
    }

    /// Checks that `value` lies inside the limit.
    pub fn check(&self, value: u64) -> Result<u64, SettingError> {
        if (self.min..=self.max).contains(&value) {
            Ok(value)
        } else {
            Err(self.out_of_range(value.to_string()))
        }
    }

    /// Parses a whole number and checks it. Negative numbers and numbers too large for any
    /// integer are reported as out of range, not as garbage.
    pub fn parse(&self, text: &str) -> Result<u64, SettingError> {
        let t = text.trim();
        let digits = t.strip_prefix('-').unwrap_or(t);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(SettingError::NotANumber {
                field: self.field,
                value: text.to_owned(),
                min: self.min,
                max: self.max,
                unit: self.unit,
            });
        }
        if t.starts_with('-') && digits.bytes().any(|b| b != b'0') {
            return Err(self.out_of_range(t.to_owned()));
        }
        match digits.parse::<u64>() {
            Ok(v) => self.check(v),
            Err(_) => Err(self.out_of_range(t.to_owned())),
        }
    }

    fn out_of_range(&self, value: String) -> SettingError {
        SettingError::OutOfRange {
            field: self.field,
            value,
            min: self.min,
            max: self.max,
            unit: self.unit,
        }
    }
}

/// One scripted event: at second `at`, the `count` oldest live copies die (CA23).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Death {
    /// The second at which the copies die.
    pub at: u64,
    /// How many copies die, at most; fewer die if fewer are live.
    pub count: u64,
}

/// Parses `AT:COUNT[,AT:COUNT…]`, or `none` for no deaths.
pub fn parse_deaths(text: &str) -> Result<Vec<Death>, SettingError> {
    let bad = |reason: String| SettingError::BadDeaths {
        value: text.to_owned(),
        reason,
        max_at: MAX_SECONDS,
        max_count: MAX_COPIES,
    };
    let t = text.trim();
    if t == "none" {
        return Ok(Vec::new());
    }
    if t.is_empty() {
        return Err(bad("the list is empty".into()));
    }
    let mut deaths = Vec::new();
    for entry in t.split(',') {
        let (at, count) = entry
            .split_once(':')
            .ok_or_else(|| bad(format!("entry '{entry}' has no ':'")))?;
        let at = DEATH_AT
            .parse(at)
            .map_err(|e| bad(format!("entry '{entry}': {e}")))?;
        let count = DEATH_COUNT
            .parse(count)
            .map_err(|e| bad(format!("entry '{entry}': {e}")))?;
        deaths.push(Death { at, count });
        if deaths.len() > MAX_DEATH_ENTRIES {
            return Err(bad(format!("more than {MAX_DEATH_ENTRIES} entries")));
        }
    }
    Ok(deaths)
}

const DEATH_AT: Limit = Limit::new("death time", 0, MAX_SECONDS, "seconds");
const DEATH_COUNT: Limit = Limit::new("death count", 0, MAX_COPIES, "copies");

/// The raw settings of a run, before validation. Every default is the lesson's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LessonSpec {
    /// Declared copies (CA19). Default 6.
    pub desired: u64,
    /// Loop period U, in seconds (CA22). Default 15.
    pub period: u64,
    /// Report delay G, in seconds: how far the ledger lags the world (CA20). Default 0.
    pub delay: u64,
    /// Startup time B, in seconds: a copy created at t is running at t + B (CA21). Default 5.
    pub startup: u64,
    /// The last second of the run; seconds 0 to `duration` are simulated, both included (CA23).
    /// Default 900.
    pub duration: u64,
    /// Scripted deaths (CA23), in any order. Default: 2 copies at second 300.
    pub deaths: Vec<Death>,
    /// The controller that runs each pass (CA24). Default `ledger`.
    pub controller: ControllerKind,
}

impl Default for LessonSpec {
    fn default() -> Self {
        LessonSpec {
            desired: 6,
            period: 15,
            delay: 0,
            startup: 5,
            duration: 900,
            deaths: vec![Death { at: 300, count: 2 }],
            controller: ControllerKind::Ledger,
        }
    }
}

/// A validated scenario of the lesson's world, the fast engine's input: every setting is inside
/// its [`Limit`], deaths are sorted by time, and the controller is one of the lesson's two. Users
/// build a [`crate::Scenario`] and call [`crate::run`], which comes here when it can.
///
/// ## Warning
/// A loop period below `delay + startup` is accepted, because that is what the lab is for, but it
/// is the setting that makes a ledger-only loop overshoot: every pass inside the blind window
/// creates the same shortfall again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LessonWorld {
    spec: LessonSpec,
}

impl LessonWorld {
    /// Validates `spec`. Deaths with equal times are kept in their given order; since each kills
    /// the oldest live copies, their order does not change the result.
    pub fn new(mut spec: LessonSpec) -> Result<Self, SettingError> {
        Limit::DESIRED.check(spec.desired)?;
        Limit::PERIOD.check(spec.period)?;
        Limit::DELAY.check(spec.delay)?;
        Limit::STARTUP.check(spec.startup)?;
        Limit::DURATION.check(spec.duration)?;
        if spec.deaths.len() > MAX_DEATH_ENTRIES {
            return Err(SettingError::BadDeaths {
                value: format!("{} entries", spec.deaths.len()),
                reason: format!("more than {MAX_DEATH_ENTRIES} entries"),
                max_at: MAX_SECONDS,
                max_count: MAX_COPIES,
            });
        }
        for d in &spec.deaths {
            DEATH_AT.check(d.at)?;
            DEATH_COUNT.check(d.count)?;
        }
        if !spec.controller.is_lesson() {
            return Err(SettingError::NotALessonController(spec.controller));
        }
        spec.deaths.sort_by_key(|d| d.at);
        Ok(LessonWorld { spec })
    }

    /// The lesson's scenario with another report delay and controller.
    pub fn lesson(delay: u64, controller: ControllerKind) -> Self {
        LessonWorld::new(LessonSpec {
            delay,
            controller,
            ..LessonSpec::default()
        })
        .expect("the lesson's settings are inside every limit")
    }

    /// The validated settings.
    pub fn spec(&self) -> &LessonSpec {
        &self.spec
    }

    /// The number of rounds the run holds: one at every multiple of the period in
    /// `0..=duration`.
    pub fn rounds(&self) -> u64 {
        self.spec.duration / self.spec.period + 1
    }
}

/// A lesson-world scenario's settings, borrowed: what the fast engine and the predictor read. A
/// sweep builds one per cell from its grid's shared settings without copying the deaths list
/// (perf, issue 12: cloning and validating a [`LessonSpec`] per cell was a tenth of a sweep).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LessonParams<'a> {
    /// Declared copies.
    pub desired: u64,
    /// Loop period U, in seconds.
    pub period: u64,
    /// Report delay G, in seconds.
    pub delay: u64,
    /// Startup time B, in seconds.
    pub startup: u64,
    /// The last second of the run.
    pub duration: u64,
    /// Scripted deaths; sorted by time when they come from a [`LessonWorld`].
    pub deaths: &'a [Death],
    /// The controller.
    pub controller: ControllerKind,
}

impl<'a> LessonParams<'a> {
    /// The settings of `spec`, borrowed.
    pub fn of(spec: &'a LessonSpec) -> Self {
        LessonParams {
            desired: spec.desired,
            period: spec.period,
            delay: spec.delay,
            startup: spec.startup,
            duration: spec.duration,
            deaths: &spec.deaths,
            controller: spec.controller,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_period_is_refused_with_its_range() {
        let err = LessonWorld::new(LessonSpec {
            period: 0,
            ..LessonSpec::default()
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "period 0 is out of range: accepted 1 to 1000000000 seconds"
        );
    }

    #[test]
    fn negative_and_huge_numbers_are_out_of_range_not_garbage() {
        assert!(matches!(
            Limit::DELAY.parse("-3"),
            Err(SettingError::OutOfRange { .. })
        ));
        assert!(matches!(
            Limit::DELAY.parse("99999999999999999999999"),
            Err(SettingError::OutOfRange { .. })
        ));
        assert!(matches!(
            Limit::DELAY.parse("1e3"),
            Err(SettingError::NotANumber { .. })
        ));
        assert_eq!(Limit::DELAY.parse("-0"), Ok(0));
        assert_eq!(Limit::DELAY.parse(" 42 "), Ok(42));
    }

    #[test]
    fn deaths_parse_lists_and_none() {
        assert_eq!(parse_deaths("none").unwrap(), vec![]);
        assert_eq!(
            parse_deaths("300:2,10:1").unwrap(),
            vec![Death { at: 300, count: 2 }, Death { at: 10, count: 1 }]
        );
        for bad in ["", "300", "300:", ":2", "300:2,", "a:b", "300:-1", "1:2:3"] {
            let err = parse_deaths(bad).unwrap_err();
            assert!(
                err.to_string().contains("accepted: AT:COUNT"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn deaths_are_sorted_by_time_on_validation() {
        let s = LessonWorld::new(LessonSpec {
            deaths: vec![Death { at: 9, count: 1 }, Death { at: 3, count: 2 }],
            ..LessonSpec::default()
        })
        .unwrap();
        assert_eq!(s.spec().deaths[0].at, 3);
    }

    #[test]
    fn rounds_include_both_ends() {
        assert_eq!(LessonWorld::lesson(0, ControllerKind::Ledger).rounds(), 61);
    }
}
