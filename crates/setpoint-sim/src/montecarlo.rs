//! Monte Carlo: one scenario over many seeds, and the spread of every metric.
//!
//! Run `i` (from 0) uses seed `first_seed + i`, wrapping at 2^64. The runs go in parallel, and
//! their results are gathered in seed order, so the summary is the same on any number of threads.
//! Percentiles are nearest-rank: `pXX` is the smallest value that at least XX % of the runs do not
//! exceed.

use rayon::prelude::*;
use serde::Serialize;

use crate::lesson_world::Limit;
use crate::scenario::{run_unnamed, Outcome, Scenario, ScenarioError, WorkloadMetrics};

/// Accepted values of `--runs`.
pub const RUNS: Limit = Limit {
    field: "runs",
    min: 1,
    max: 100_000,
    unit: "runs",
};

/// The spread of one metric over the runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// The arithmetic mean.
    pub mean: f64,
    /// The median, nearest-rank.
    pub p50: f64,
    /// The 95th percentile, nearest-rank.
    pub p95: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` when there are none.
    pub fn of(values: &mut [f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let rank = |p: usize| values[(p * n).div_ceil(100).max(1) - 1];
        Some(Spread {
            mean: values.iter().sum::<f64>() / n as f64,
            p50: rank(50),
            p95: rank(95),
            max: values[n - 1],
        })
    }
}

/// Reads one metric of a run; `None` when the run has no value for it (never stable).
pub type Reader = fn(&WorkloadMetrics) -> Option<f64>;

/// The metrics a summary covers, with their names in outputs, in output order.
pub const METRICS: [(&str, Reader); 13] = [
    ("work_per_round", |w| Some(w.metrics.work_per_round)),
    ("created", |w| Some(w.metrics.created as f64)),
    ("unneeded", |w| Some(w.metrics.unneeded as f64)),
    ("delete_commands", |w| {
        Some(w.metrics.delete_commands as f64)
    }),
    ("deleted", |w| Some(w.metrics.deleted as f64)),
    ("overshoot", |w| Some(w.metrics.overshoot as f64)),
    ("stable", |w| w.metrics.stable.map(|s| s as f64)),
    ("died", |w| Some(w.metrics.died as f64)),
    ("peak_live", |w| Some(w.metrics.peak_live as f64)),
    ("copy_seconds_above", |w| {
        Some(w.metrics.copy_seconds_above as f64)
    }),
    ("duplicate_names", |w| Some(w.duplicate_names as f64)),
    ("absorbed_creates", |w| Some(w.absorbed_creates as f64)),
    ("lost_deletes", |w| Some(w.lost_deletes as f64)),
];

/// One metric's spread. `stable` leaves out the runs that never became stable.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricSpread {
    /// The metric's name, as in [`METRICS`].
    pub metric: &'static str,
    /// Its spread; `None` when no run has a value (every run never stable).
    pub spread: Option<Spread>,
}

/// The spreads of one workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadSpread {
    /// The workload's name.
    pub workload: String,
    /// Runs in which the workload never became stable.
    pub never_stable: u64,
    /// The fraction of runs with any overshoot (`overshoot > 0`), from 0 to 1.
    pub p_overshoot: f64,
    /// Every metric of [`METRICS`], in order.
    pub metrics: Vec<MetricSpread>,
}

/// The result of a Monte Carlo run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// How many runs.
    pub runs: u64,
    /// The seed of the first run; run `i` used `first_seed + i`.
    pub first_seed: u64,
    /// Whether the runs drew random numbers at all; when not, every run is the same.
    pub random: bool,
    /// Which engine ran them (the same for every seed of one scenario).
    pub engine: &'static str,
    /// One entry per workload, in the scenario's order.
    pub workloads: Vec<WorkloadSpread>,
}

/// Runs `scenario` `runs` times, with seeds `first_seed`, `first_seed + 1`, …, and summarises.
pub fn monte_carlo(
    scenario: &Scenario,
    first_seed: u64,
    runs: u64,
) -> Result<Summary, ScenarioError> {
    RUNS.check(runs)?;
    let outcomes: Vec<Outcome> = (0..runs)
        .into_par_iter()
        .map(|i| run_unnamed(scenario, first_seed.wrapping_add(i)))
        .collect::<Result<_, _>>()?;
    Ok(summarize(scenario, first_seed, &outcomes))
}

/// [`monte_carlo`] on the calling thread: for callers that already run many scenarios in
/// parallel (a sweep's cells), where nesting parallel loops would only add overhead. The same
/// numbers as [`monte_carlo`].
pub fn monte_carlo_sequential(
    scenario: &Scenario,
    first_seed: u64,
    runs: u64,
) -> Result<Summary, ScenarioError> {
    RUNS.check(runs)?;
    let outcomes: Vec<Outcome> = (0..runs)
        .map(|i| run_unnamed(scenario, first_seed.wrapping_add(i)))
        .collect::<Result<_, _>>()?;
    Ok(summarize(scenario, first_seed, &outcomes))
}

/// The summary of `outcomes`, the runs of `scenario` from `first_seed` on, in seed order. Their
/// workloads' names are not read (they are left empty): the scenario's are.
fn summarize(scenario: &Scenario, first_seed: u64, outcomes: &[Outcome]) -> Summary {
    let runs = outcomes.len() as u64;
    let workloads = scenario
        .spec()
        .workloads
        .iter()
        .enumerate()
        .map(|(w, decl)| WorkloadSpread {
            workload: decl.name.clone(),
            never_stable: outcomes
                .iter()
                .filter(|o| o.workloads[w].metrics.stable.is_none())
                .count() as u64,
            p_overshoot: outcomes
                .iter()
                .filter(|o| o.workloads[w].metrics.overshoot > 0)
                .count() as f64
                / runs as f64,
            metrics: METRICS
                .iter()
                .map(|(metric, get)| {
                    let mut values: Vec<f64> = outcomes
                        .iter()
                        .filter_map(|o| get(&o.workloads[w]))
                        .collect();
                    MetricSpread {
                        metric,
                        spread: Spread::of(&mut values),
                    }
                })
                .collect(),
        })
        .collect();
    Summary {
        runs,
        first_seed,
        random: scenario.spec().delay.is_random(),
        engine: outcomes[0].engine,
        workloads,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delay::DelayModel;
    use crate::scenario::ScenarioSpec;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<f64> = (1..=20).map(f64::from).collect();
        let s = Spread::of(&mut v).unwrap();
        assert_eq!((s.mean, s.p50, s.p95, s.max), (10.5, 10.0, 19.0, 20.0));
        let s = Spread::of(&mut [7.0]).unwrap();
        assert_eq!((s.p50, s.p95), (7.0, 7.0));
        assert_eq!(Spread::of(&mut []), None);
    }

    #[test]
    fn a_summary_over_seeds_is_the_same_every_time() {
        let scenario = Scenario::new(ScenarioSpec {
            delay: DelayModel::lesson_chain(),
            ..ScenarioSpec::default()
        })
        .unwrap();
        let a = monte_carlo(&scenario, 1, 40).unwrap();
        assert_eq!(a, monte_carlo(&scenario, 1, 40).unwrap());
        let created = a.workloads[0].metrics[1].spread.unwrap();
        assert!(
            created.max > created.p50,
            "the chain's jitter spreads the runs"
        );
    }
}
