//! The per-cell runners: a lesson cell on the fast engine with the lesson's relation and the
//! exact predictor beside it, any other cell on the general engine through the one scenario type,
//! and a cell's Monte Carlo row over many seeds.

use setpoint_core::ControllerKind;

use super::{Cell, Grid, RowFormat, SweepRow};
use crate::delay::DelayModel;
use crate::engine::simulate_params;
use crate::lesson::lesson_prediction;
use crate::lesson_world::LessonParams;
use crate::metrics::Metrics;
use crate::montecarlo::monte_carlo_sequential;
use crate::output::{names_apply, push_spreads, Record, SCHEMA};
use crate::predict::predict_params;
use crate::scenario::{run, ScenarioError};

impl Grid {
    /// The outcome of `cell` if it is a lesson cell.
    pub(super) fn lesson_cell_outcome(&self, cell: &Cell) -> Option<LessonOutcome> {
        self.is_lesson_cell(cell).then(|| self.lesson_outcome(cell))
    }

    /// What a lesson cell ([`Self::is_lesson_cell`]) measures, on the fast engine, and what the
    /// lesson's relation and the exact predictor say of it. The cell's settings are read in
    /// place: nothing is cloned or validated again per cell.
    fn lesson_outcome(&self, cell: &Cell) -> LessonOutcome {
        let base = self.base.spec();
        let params = LessonParams {
            desired: cell.desired,
            period: cell.period,
            delay: cell.delay,
            startup: cell.startup,
            duration: base.duration,
            deaths: &base.deaths,
            controller: cell.controller,
        };
        let metrics = simulate_params(&params);
        LessonOutcome {
            metrics,
            lesson_prediction: lesson_prediction(
                cell.desired,
                cell.delay,
                cell.startup,
                cell.period,
            ),
            prediction: predict_params(&params).overshoot,
        }
    }

    /// Simulates cell `index` (a single run) and returns its row.
    pub fn row(&self, index: u64) -> Result<SweepRow<'_>, ScenarioError> {
        self.cell_row(index, self.cell(index))
    }

    /// [`Self::row`] of cell `index`, whose parameters `cell` the caller already has.
    pub(super) fn cell_row(&self, index: u64, cell: Cell) -> Result<SweepRow<'_>, ScenarioError> {
        let model_text = self.cell_model_text(&cell);
        let seed = self.first_seed(&cell);
        let expectations = cell.controller == ControllerKind::Expectations;
        let mut row = SweepRow {
            schema: SCHEMA,
            cell: index,
            desired: cell.desired,
            period: cell.period,
            delay: self.fixed_delay(&cell),
            delay_model: model_text,
            startup: self.cell_startup(&cell),
            duration: self.spec.duration,
            controller: cell.controller,
            ttl: expectations.then_some(cell.ttl),
            burst: expectations.then_some(cell.burst),
            seed,
            engine: "fast",
            ..SweepRow::blank()
        };
        if self.is_lesson_cell(&cell) {
            let o = self.lesson_outcome(&cell);
            row.metrics = o.metrics;
            row.lesson_prediction = Some(o.lesson_prediction);
            row.lesson_match = Some(o.lesson_match());
            row.prediction = Some(o.prediction);
            row.prediction_match = Some(o.prediction_match());
        } else {
            let scenario = self.lab_scenario(&cell);
            let outcome = run(&scenario, scenario.spec().seed)?;
            let w = &outcome.workloads[0];
            row.engine = outcome.engine;
            row.metrics = w.metrics;
            let names = names_apply(cell.controller);
            row.duplicate_names = names.then_some(w.duplicate_names);
            row.absorbed_creates = names.then_some(w.absorbed_creates);
            row.lost_deletes = w.lost_deletes;
            row.rollout = w.rollout;
        }
        Ok(row)
    }

    /// Runs cell `index` `runs` times (seeds `cell_seed + i`) and returns its Monte Carlo row:
    /// the coordinates, `first_seed`, `runs` and `engine`, every metric's distribution,
    /// `p_overshoot` and `never_stable`, then the lesson's relation and the predictor (null
    /// outside the lesson's world). A cell that draws no random number runs once: every run
    /// would be the same.
    pub fn monte_carlo_row(&self, index: u64) -> Result<Record, ScenarioError> {
        let cell = self.cell(index);
        let scenario = self.lab_scenario(&cell);
        let first_seed = scenario.spec().seed;
        let runs = self.spec.runs;
        let random = scenario.spec().delay.is_random()
            || scenario.startup_model().is_some_and(DelayModel::is_random);
        let summary = if random {
            monte_carlo_sequential(&scenario, first_seed, runs)?
        } else {
            let mut s = monte_carlo_sequential(&scenario, first_seed, 1)?;
            s.runs = runs;
            for w in &mut s.workloads {
                w.never_stable *= runs;
            }
            s
        };
        let single = self.row(index)?;
        let mut r = Record::new();
        r.push("cell", index);
        r.push("desired", cell.desired);
        r.push("period", cell.period);
        r.push("delay", single.delay);
        r.push("delay_model", single.delay_model.to_string());
        r.push("startup", single.startup);
        r.push("duration", self.spec.duration);
        r.push("controller", cell.controller.name());
        r.push("ttl", single.ttl);
        r.push("burst", single.burst);
        r.push("first_seed", first_seed);
        r.push("runs", runs);
        r.push("engine", single.engine);
        push_spreads(&mut r, &summary, 0, cell.controller);
        r.push(
            "lesson_prediction",
            single.lesson_prediction.map(|p| p as i64),
        );
        r.push("lesson_match", single.lesson_match);
        r.push("prediction", single.prediction);
        r.push("prediction_match", single.prediction_match);
        Ok(r)
    }

    /// Appends cell `index`'s row in `format` (JSON or CSV), with a newline: a single-run row,
    /// or a Monte Carlo row when the grid has more than one run per cell.
    pub fn write_row(
        &self,
        index: u64,
        format: RowFormat,
        out: &mut String,
    ) -> Result<(), ScenarioError> {
        self.write_cell_row(index, self.cell(index), format, out)
    }

    /// [`Self::write_row`] of cell `index`, whose parameters `cell` the caller already has.
    pub(super) fn write_cell_row(
        &self,
        index: u64,
        cell: Cell,
        format: RowFormat,
        out: &mut String,
    ) -> Result<(), ScenarioError> {
        if self.spec.runs > 1 {
            let r = self.monte_carlo_row(index)?;
            out.push_str(&match format {
                RowFormat::Csv => r.csv_row(),
                RowFormat::Jsonl => r.json(),
            });
            out.push('\n');
        } else {
            self.cell_row(index, cell)?.write_to(format, out);
        }
        Ok(())
    }

    /// The CSV header of this grid's rows.
    pub fn csv_header(&self) -> String {
        if self.spec.runs > 1 {
            self.monte_carlo_row(0)
                .map_or_else(|_| String::new(), |r| r.csv_header())
        } else {
            SweepRow::csv_header()
        }
    }
}

/// What [`Grid::lesson_outcome`] computes for one lesson cell.
#[derive(Debug, Clone, Copy)]
pub(super) struct LessonOutcome {
    /// What the fast engine measured.
    pub(super) metrics: Metrics,
    /// The lesson's relation ([`lesson_prediction`]).
    lesson_prediction: i128,
    /// The exact predictor's overshoot.
    prediction: u64,
}

impl LessonOutcome {
    pub(super) fn lesson_match(&self) -> bool {
        i128::from(self.metrics.overshoot) == self.lesson_prediction
    }

    pub(super) fn prediction_match(&self) -> bool {
        self.metrics.overshoot == self.prediction
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delay::parse_startup_model;
    use crate::lesson_world::{LessonSpec, LessonWorld, Limit};
    use crate::output::Value;
    use crate::scenario::{ControllerSpec, Scenario, ScenarioSpec};
    use crate::sweep::testing::{axis, grid, startup_grid};
    use crate::sweep::{parse_startup_models, Axis, GridSpec, StartupName};
    use setpoint_core::ControllerKind::Ledger;

    #[test]
    fn grids_run_the_labs_controllers_on_the_general_engine() {
        let g = Grid::new(GridSpec {
            delay: axis(Limit::DELAY, "20"),
            controller: vec![Ledger, ControllerKind::Named],
            ..GridSpec::default()
        })
        .unwrap();
        let (ledger, named) = (g.row(0).unwrap(), g.row(1).unwrap());
        assert_eq!((ledger.engine, named.engine), ("fast", "general"));
        assert_eq!(ledger.lesson_match, Some(true));
        assert_eq!((named.lesson_prediction, named.prediction), (None, None));
        let s = g.lab_scenario(&g.cell(1));
        let direct = run(&s, s.spec().seed).unwrap();
        assert_eq!(named.metrics, direct.workloads[0].metrics);
        assert_eq!(
            named.duplicate_names,
            Some(direct.workloads[0].duplicate_names)
        );
    }

    #[test]
    fn a_fast_cell_measures_what_the_general_engine_measures_for_it() {
        let g = grid("0..=60:20", "10,30", "5");
        for i in 0..g.cells() {
            let row = g.row(i).unwrap();
            let s = g.lab_scenario(&g.cell(i));
            let general = crate::world::run_general(&s, s.spec().seed).unwrap();
            assert_eq!(row.metrics, general.workloads[0].metrics, "cell {i}");
        }
    }

    #[test]
    fn a_row_holds_what_simulate_measures_for_its_cell() {
        let g = grid("0..=90:15", "5..=60:11", "0,5");
        for i in [0, 7, 33, g.cells() - 1] {
            let row = g.row(i).unwrap();
            let StartupName::Seconds(startup) = row.startup else {
                panic!("a grid without startup models writes seconds");
            };
            let m = crate::simulate(
                &LessonWorld::new(LessonSpec {
                    desired: row.desired,
                    period: row.period,
                    delay: row.delay.unwrap(),
                    startup,
                    controller: row.controller,
                    ..LessonSpec::default()
                })
                .unwrap(),
            );
            assert_eq!(row.metrics, m, "cell {i}");
            let expected = lesson_prediction(row.desired, row.delay.unwrap(), startup, row.period);
            assert_eq!(row.lesson_prediction, Some(expected));
            assert_eq!(row.lesson_match, Some(i128::from(m.overshoot) == expected));
        }
    }

    #[test]
    fn a_startup_model_cell_is_run_of_its_scenario_with_the_rows_seed() {
        let g = startup_grid("uniform:1:9,fixed:3,lesson-chain", 4);
        assert_eq!(g.cells(), 3 * 2 * 2 * 2);
        for i in 0..g.cells() {
            let row = g.row(i).unwrap();
            let StartupName::Model(text) = row.startup else {
                panic!("cell {i} writes its startup model");
            };
            // The oracle: the scenario built from the row's own columns alone, then `run`.
            let mut spec = ScenarioSpec {
                period: row.period,
                delay: DelayModel::fixed_seconds(row.delay.unwrap()),
                controller: ControllerSpec::new(row.controller),
                seed: row.seed,
                startup_model: Some(parse_startup_model(text).unwrap()),
                ..ScenarioSpec::default()
            };
            spec.workloads[0].desired = row.desired;
            let oracle = run(&Scenario::new(spec).unwrap(), row.seed).unwrap();
            assert_eq!(row.engine, "general", "cell {i}");
            assert_eq!(row.metrics, oracle.workloads[0].metrics, "cell {i}: {text}");
            assert_eq!(row.lesson_prediction, None, "cell {i}");
            assert_eq!(row.prediction, None, "cell {i}");
        }
    }

    #[test]
    fn a_random_startup_models_monte_carlo_row_runs_every_seed() {
        let g = Grid::new(GridSpec {
            startup_models: parse_startup_models("uniform:0:30").unwrap(),
            delay: Axis::single(20),
            runs: 12,
            ..GridSpec::default()
        })
        .unwrap();
        let r = g.monte_carlo_row(0).unwrap();
        let scenario = g.lab_scenario(&g.cell(0));
        let first = scenario.spec().seed;
        assert_eq!(r.get("first_seed"), Some(&Value::U64(first)));
        let overshoots: Vec<u64> = (0..12)
            .map(|k| {
                run(&scenario, first.wrapping_add(k)).unwrap().workloads[0]
                    .metrics
                    .overshoot
            })
            .collect();
        let max = *overshoots.iter().max().unwrap() as f64;
        assert_eq!(r.get("overshoot_max"), Some(&Value::F64(max)));
        assert!(
            overshoots.iter().any(|&o| o as f64 != max),
            "startup draws vary the runs: {overshoots:?}"
        );
        assert_eq!(r.get("startup"), Some(&Value::Str("uniform:0:30".into())));
    }
}
