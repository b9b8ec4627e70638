//! Every bound on the work one command may ask for, in one place. Each command estimates its
//! cells, runs, simulated seconds, copies and bytes from the validated input and checks them
//! here *before* it starts, so no input ends in an allocation abort or a run of hours.
//! `docs/limits.md` gives the reason for each number.
//!
//! Settings' own ranges (a period, a delay, a desired count) stay with the settings
//! ([`crate::Limit`]); they are re-exported here so the whole list can be read in one file.

use crate::scenario::{Event, ScenarioSpec};

pub use crate::delay::{MAX_DELAY_MS, MAX_STAGES};
pub use crate::lesson_world::{MAX_COPIES, MAX_DEATH_ENTRIES, MAX_SECONDS};
pub use crate::scenario::{MAX_LAB_COPIES, MAX_WORKLOADS};
pub use crate::sweep::{MAX_CELLS as MAX_SWEEP_CELLS, MAX_SHARDS};

/// The most cells one heatmap draws (`plot heatmap`, and `report`'s): beyond this the SVG is
/// tens of megabytes and too heavy to open.
pub const MAX_PICTURE_CELLS: u64 = 200_000;

/// The most values on each axis of `report`'s heatmap. `report` picks a step that keeps each
/// axis at most this long, whatever G and U are, so the page always renders.
pub const REPORT_AXIS_VALUES: u64 = 91;

/// The most rows a `--trace` file may get: one per workload per simulated second. At about 40
/// bytes a row this is 800 MB of CSV.
pub const MAX_TRACE_ROWS: u64 = 20_000_000;

/// The most simulated seconds `advise`'s Monte Carlo may run, over all periods, controllers and
/// runs: about ten seconds of wall time on the general engine.
pub const MAX_ADVISE_SECONDS: u64 = 100_000_000;

/// A request over one of these limits: what it would cost, and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} would need {estimate} {unit}, more than the {max} accepted; {hint}")]
pub struct LimitError {
    /// What was asked for, such as "the trace".
    pub what: &'static str,
    /// The estimate, in `unit`.
    pub estimate: u64,
    /// The limit, in `unit`.
    pub max: u64,
    /// The unit of both.
    pub unit: &'static str,
    /// What to change.
    pub hint: &'static str,
}

fn check(
    what: &'static str,
    estimate: u64,
    max: u64,
    unit: &'static str,
    hint: &'static str,
) -> Result<(), LimitError> {
    if estimate > max {
        Err(LimitError {
            what,
            estimate,
            max,
            unit,
            hint,
        })
    } else {
        Ok(())
    }
}

/// A heatmap of `cells` cells.
pub fn check_picture_cells(cells: u64) -> Result<(), LimitError> {
    check(
        "the heatmap",
        cells,
        MAX_PICTURE_CELLS,
        "cells",
        "give the ranges a step, such as 0..=600:10",
    )
}

/// The step that keeps an axis from `0` (or 1) to `max` at most [`REPORT_AXIS_VALUES`] long.
pub fn report_axis_step(max: u64) -> u64 {
    max.div_ceil(REPORT_AXIS_VALUES - 1).max(1)
}

/// A trace of `seconds` simulated seconds (0 to the duration) of `workloads` workloads.
pub fn check_trace(duration: u64, workloads: u64) -> Result<(), LimitError> {
    check(
        "the trace",
        duration.saturating_add(1).saturating_mul(workloads.max(1)),
        MAX_TRACE_ROWS,
        "rows",
        "shorten --duration, or leave out --trace",
    )
}

/// The fewest copies a run of `spec` on the general engine creates: every workload reaches its
/// largest desired count (its own, or a scale event's) at least once. The engine keeps a record
/// per copy, so this is checked before it allocates anything.
pub fn least_copies(spec: &ScenarioSpec) -> u64 {
    spec.workloads
        .iter()
        .map(|w| {
            spec.events
                .iter()
                .filter(|e| e.workload.as_deref().is_none_or(|n| n == w.name))
                .filter_map(|e| match e.event {
                    Event::Scale { desired } => Some(desired),
                    _ => None,
                })
                .fold(w.desired, u64::max)
        })
        .fold(0u64, u64::saturating_add)
}

/// The general engine's copies for `spec`, estimated before it allocates.
pub fn check_general_copies(spec: &ScenarioSpec, budget: u64) -> Result<(), LimitError> {
    check(
        "the run on the general engine",
        least_copies(spec),
        budget,
        "copies at least (the largest desired counts)",
        "lower desired, or use the lesson's world (ledger or intent, a fixed delay, deaths only), whose fast engine counts instead of keeping records",
    )
}

/// `advise`'s Monte Carlo: `runs` runs of each of `controllers` controllers per period, each
/// simulating `seconds(period)` seconds.
pub fn check_advise(
    periods: &[u64],
    controllers: u64,
    runs: u64,
    seconds: impl Fn(u64) -> u64,
) -> Result<(), LimitError> {
    let total = periods
        .iter()
        .map(|&u| seconds(u).saturating_mul(runs).saturating_mul(controllers))
        .fold(0u64, u64::saturating_add);
    check(
        "advise's Monte Carlo",
        total,
        MAX_ADVISE_SECONDS,
        "simulated seconds",
        "lower the delay model's worst case, --runs or the periods",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_axes_stay_short_for_any_delay() {
        for max in [0, 1, 90, 91, 180, 184_806_870, MAX_SECONDS * 2] {
            let step = report_axis_step(max);
            assert!(max / step < REPORT_AXIS_VALUES, "{max}: step {step}");
        }
        assert_eq!(
            report_axis_step(90),
            1,
            "the lesson's 0..=90 keeps every second"
        );
    }

    #[test]
    fn a_trace_is_counted_in_rows_of_every_workload() {
        assert!(check_trace(MAX_TRACE_ROWS - 1, 1).is_ok());
        let e = check_trace(MAX_TRACE_ROWS, 1).unwrap_err();
        assert_eq!(e.estimate, MAX_TRACE_ROWS + 1);
        assert!(check_trace(MAX_TRACE_ROWS / 2, 2).is_err());
        assert_eq!(
            check_trace(u64::MAX, u64::MAX).unwrap_err().estimate,
            u64::MAX
        );
    }

    #[test]
    fn copies_count_the_largest_desired_of_each_workload() {
        let mut spec = ScenarioSpec::default();
        let base = least_copies(&spec);
        spec.events.push(crate::scenario::TimedEvent {
            at: 10,
            workload: None,
            event: Event::Scale { desired: 1_000 },
        });
        assert_eq!(least_copies(&spec), 1_000 * spec.workloads.len() as u64);
        assert!(least_copies(&spec) > base);
        assert!(check_general_copies(&spec, 999).is_err());
        assert!(check_general_copies(&spec, 1_000 * spec.workloads.len() as u64).is_ok());
    }

    #[test]
    fn advise_sums_every_period_controller_and_run() {
        assert_eq!(
            check_advise(&[10, 20], 3, 2, |u| u * 1_000_000)
                .unwrap_err()
                .estimate,
            (10 + 20) * 1_000_000 * 3 * 2
        );
        assert!(check_advise(&[10], 3, 2, |_| 1000).is_ok());
    }
}
