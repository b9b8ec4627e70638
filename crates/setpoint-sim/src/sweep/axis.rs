//! The axes of a grid: numeric axes held as runs of evenly spaced values, never expanded, and
//! the lists of controllers, delay models and startup models.

use setpoint_core::ControllerKind;

use super::GridError;
use crate::delay::{parse_delay_model, parse_startup_model, DelayModel};
use crate::lesson_world::{Limit, SettingError};

/// A run of evenly spaced values: `start`, `start + step`, … (`count` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    start: u64,
    step: u64,
    count: u64,
}

/// The values of one numeric grid axis, in the order given, duplicates kept.
///
/// Parsed from a comma-separated list whose items are numbers (`5`), inclusive ranges (`0..=120`)
/// or stepped inclusive ranges (`0..=120:5`, which is 0, 5, …, 120). A stepped range ends at the
/// last value that does not pass its end. Every value lies inside the axis's [`Limit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Axis {
    runs: Vec<Run>,
    /// The index of the first value of each run.
    offsets: Vec<u64>,
    len: u64,
}

impl Axis {
    /// An axis with one value. The value is not checked: the caller promises it is in range.
    pub fn single(value: u64) -> Self {
        Axis {
            runs: vec![Run {
                start: value,
                step: 1,
                count: 1,
            }],
            offsets: vec![0],
            len: 1,
        }
    }

    /// Parses an axis, checking every value against `limit`.
    pub fn parse(limit: Limit, text: &str) -> Result<Self, GridError> {
        let bad = |reason: String| GridError::BadAxis {
            field: limit.field,
            value: text.to_owned(),
            reason,
            min: limit.min,
            max: limit.max,
            unit: limit.unit,
        };
        if text.trim().is_empty() {
            return Err(bad("the list is empty".into()));
        }
        let mut axis = Axis {
            runs: Vec::new(),
            offsets: Vec::new(),
            len: 0,
        };
        for item in text.split(',') {
            let run = parse_item(limit, item.trim()).map_err(&bad)?;
            axis.offsets.push(axis.len);
            axis.len = axis.len.saturating_add(run.count);
            axis.runs.push(run);
        }
        Ok(axis)
    }

    /// How many values the axis holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the axis holds no value (never true of a parsed axis).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value at `index`, which must be below [`Self::len`].
    pub fn get(&self, index: u64) -> u64 {
        debug_assert!(index < self.len);
        let k = match self.runs.len() {
            1 => 0,
            _ => self.offsets.partition_point(|&o| o <= index) - 1,
        };
        let run = self.runs[k];
        run.start + run.step * (index - self.offsets[k])
    }

    /// Every value, in order. Meant for short axes; a long range yields many values.
    pub fn values(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs
            .iter()
            .flat_map(|r| (0..r.count).map(move |i| r.start + r.step * i))
    }
}

/// Parses one item of an axis list; the error is the reason, without the accepted form.
fn parse_item(limit: Limit, item: &str) -> Result<Run, String> {
    if item.is_empty() {
        return Err("an item of the list is empty".into());
    }
    // The caller appends the accepted range, so the reason names only the value.
    let number = |s: &str| {
        limit.parse(s).map_err(|e| match e {
            SettingError::NotANumber { value, .. } => {
                format!("'{}' is not a whole number", value.trim())
            }
            SettingError::OutOfRange { field, value, .. } => {
                format!("{field} {value} is out of range")
            }
            other => other.to_string(),
        })
    };
    let Some((start, rest)) = item.split_once("..") else {
        let v = number(item)?;
        return Ok(Run {
            start: v,
            step: 1,
            count: 1,
        });
    };
    let Some(rest) = rest.strip_prefix('=') else {
        return Err(format!(
            "'{item}' is not an inclusive range: write START..=END"
        ));
    };
    let (end, step) = match rest.split_once(':') {
        Some((end, step)) => (end, Some(step)),
        None => (rest, None),
    };
    if start.trim().is_empty() || end.trim().is_empty() {
        return Err(format!("the range '{item}' needs both a start and an end"));
    }
    let (start, end) = (number(start)?, number(end)?);
    let step = match step {
        None => 1,
        Some(s) => {
            let step = s
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("the step '{s}' of '{item}' is not a whole number"))?;
            if step == 0 {
                return Err(format!(
                    "the step of '{item}' is zero: give a step of 1 or more"
                ));
            }
            step
        }
    };
    if start > end {
        return Err(format!(
            "the range '{item}' runs backwards: its start {start} is above its end {end}"
        ));
    }
    Ok(Run {
        start,
        step,
        count: (end - start) / step + 1,
    })
}

/// Parses a comma-separated list of controller names, kept in the order given. Every controller
/// is accepted: cells the lesson's world cannot express run on the general engine.
pub fn parse_controllers(text: &str) -> Result<Vec<ControllerKind>, GridError> {
    let bad = |reason: String| GridError::BadControllers {
        value: text.to_owned(),
        reason,
    };
    if text.trim().is_empty() {
        return Err(bad("the list is empty".into()));
    }
    text.split(',')
        .map(|name| {
            let name = name.trim();
            if name.is_empty() {
                return Err(bad("an item of the list is empty".into()));
            }
            if name.contains("..") {
                return Err(bad("controllers take a list, not a range".into()));
            }
            name.parse::<ControllerKind>()
                .map_err(|_| bad(format!("unknown controller '{name}'")))
        })
        .collect()
}

/// Parses a comma-separated list of delay models (`fixed:S`, `uniform:MIN:MAX`,
/// `lesson-chain`), kept in the order given: the delay-model axis.
pub fn parse_delay_models(text: &str) -> Result<Vec<DelayModel>, GridError> {
    let bad = |reason: String| GridError::BadDelayModels {
        value: text.to_owned(),
        reason,
    };
    if text.trim().is_empty() {
        return Err(bad("the list is empty".into()));
    }
    text.split(',')
        .map(|item| {
            let item = item.trim();
            if item.is_empty() {
                return Err(bad("an item of the list is empty".into()));
            }
            parse_delay_model(item).map_err(|e| {
                bad(format!(
                    "{e}; a list is accepted too, such as fixed:20,lesson-chain"
                ))
            })
        })
        .collect()
}

/// Parses a comma-separated list of startup-time models (the syntax of
/// [`parse_delay_models`]; `empirical:FILE` takes the file's `startup` model), kept in the order
/// given: the startup-model axis.
pub fn parse_startup_models(text: &str) -> Result<Vec<DelayModel>, GridError> {
    let bad = |reason: String| GridError::BadStartupModels {
        value: text.to_owned(),
        reason,
    };
    if text.trim().is_empty() {
        return Err(bad("the list is empty".into()));
    }
    text.split(',')
        .map(|item| {
            let item = item.trim();
            if item.is_empty() {
                return Err(bad("an item of the list is empty".into()));
            }
            parse_startup_model(item).map_err(|e| {
                bad(format!(
                    "{e}; a list is accepted too, such as fixed:5,uniform:2:8"
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::testing::axis;
    use setpoint_core::ControllerKind::{Intent, Ledger};

    fn values(limit: Limit, text: &str) -> Vec<u64> {
        axis(limit, text).values().collect()
    }

    fn reason(limit: Limit, text: &str) -> String {
        Axis::parse(limit, text).unwrap_err().to_string()
    }

    #[test]
    fn a_list_keeps_its_values_in_the_order_given() {
        assert_eq!(values(Limit::DELAY, "10,0,5,5"), vec![10, 0, 5, 5]);
    }

    #[test]
    fn an_inclusive_range_holds_both_ends() {
        assert_eq!(values(Limit::DELAY, "3..=6"), vec![3, 4, 5, 6]);
        assert_eq!(axis(Limit::DELAY, "0..=120").len(), 121);
    }

    #[test]
    fn a_stepped_range_stops_at_the_last_value_not_past_its_end() {
        assert_eq!(values(Limit::DELAY, "0..=120:40"), vec![0, 40, 80, 120]);
        assert_eq!(values(Limit::DELAY, "0..=10:3"), vec![0, 3, 6, 9]);
    }

    #[test]
    fn lists_may_mix_numbers_and_ranges() {
        assert_eq!(
            values(Limit::PERIOD, "1..=3,10,20..=40:10"),
            vec![1, 2, 3, 10, 20, 30, 40]
        );
    }

    #[test]
    fn get_finds_values_across_runs() {
        let a = axis(Limit::PERIOD, "1..=3,10,20..=40:10");
        let all: Vec<u64> = (0..a.len()).map(|i| a.get(i)).collect();
        assert_eq!(all, a.values().collect::<Vec<_>>());
    }

    #[test]
    fn a_huge_range_is_held_without_expanding_it() {
        let a = axis(Limit::DELAY, "0..=1000000000");
        assert_eq!(a.len(), 1_000_000_001);
        assert_eq!(a.get(999_999_999), 999_999_999);
    }

    #[test]
    fn every_bad_axis_names_the_setting_and_the_accepted_form() {
        for bad in [
            "",
            " ",
            "1,,2",
            "5..=1",
            "0..=10:0",
            "0..10",
            "..=5",
            "3..=",
            "a",
            "1.5",
            "0..=10:x",
            "-1",
            "0..=2000000000",
        ] {
            let msg = reason(Limit::DELAY, bad);
            assert!(msg.starts_with("delay '"), "{bad}: {msg}");
            assert!(msg.contains("accepted: a list like 0,5,10"), "{bad}: {msg}");
            assert!(msg.contains("0 to 1000000000 seconds"), "{bad}: {msg}");
        }
    }

    #[test]
    fn a_reversed_range_says_it_runs_backwards() {
        assert!(reason(Limit::DELAY, "5..=1").contains("runs backwards"));
    }

    #[test]
    fn a_zero_step_is_refused() {
        assert!(reason(Limit::DELAY, "0..=10:0").contains("step of '0..=10:0' is zero"));
    }

    #[test]
    fn a_value_outside_its_limit_is_refused_even_as_a_range_start() {
        let msg = reason(Limit::PERIOD, "0..=10");
        assert!(msg.contains("period 0 is out of range"), "{msg}");
    }

    #[test]
    fn controllers_parse_as_a_list_and_refuse_ranges_and_unknown_names() {
        assert_eq!(
            parse_controllers("intent,ledger").unwrap(),
            vec![Intent, Ledger]
        );
        assert_eq!(parse_controllers("ledger,named").unwrap().len(), 2);
        for bad in ["", "ledger,", "ledger..=intent", "pid"] {
            let msg = parse_controllers(bad).unwrap_err().to_string();
            assert!(
                msg.contains("accepted: a list of ledger, intent, expectations, named, gated"),
                "{bad}: {msg}"
            );
        }
    }
}
