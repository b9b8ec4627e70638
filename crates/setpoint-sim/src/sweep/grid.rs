//! The grid: its settings ([`GridSpec`]), their validation, which cell each number is, and the
//! scenario each cell runs.

use std::ops::Range;

use setpoint_core::{ControllerKind, ExpectationsConfig};

use super::{cell_seed, model_text, Axis, GridError, ModelName, Shard, StartupName, MAX_CELLS};
use crate::delay::DelayModel;
use crate::lesson_world::{Death, LessonSpec, LessonWorld};
use crate::montecarlo::RUNS;
use crate::scenario::{death_events, ControllerSpec, Scenario, ScenarioSpec};

/// The raw settings of a sweep, before validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GridSpec {
    /// Declared copies to scan.
    pub desired: Axis,
    /// Loop periods U, in seconds.
    pub period: Axis,
    /// Report delays G, in seconds (fixed delays). Ignored when `delay_models` is not empty.
    pub delay: Axis,
    /// Report-delay models to scan, in place of `delay`; empty: scan `delay`.
    pub delay_models: Vec<DelayModel>,
    /// Startup times B, in seconds. Ignored when `startup_models` is not empty.
    pub startup: Axis,
    /// Startup-time models to scan, in place of `startup` (`--startup-model`): each copy's
    /// startup time is drawn from the cell's model when it is created
    /// ([`Scenario::with_startup_model`]). Empty: scan `startup`. A cell with a startup model
    /// always runs on the general engine.
    pub startup_models: Vec<DelayModel>,
    /// TTLs of `expectations`, in seconds (a coordinate of every cell, used by `expectations`
    /// only). Default 300.
    pub ttl: Axis,
    /// Burst limits of `expectations`, in copies per pass. Default 500.
    pub burst: Axis,
    /// Controllers.
    pub controller: Vec<ControllerKind>,
    /// The last second of every run.
    pub duration: u64,
    /// The scripted deaths of every run.
    pub deaths: Vec<Death>,
    /// Seeded runs per cell. Default 1; above 1 each row carries the distribution of every
    /// metric ([`crate::output`]).
    pub runs: u64,
    /// The base seed. A cell's first seed is derived from it and the cell's coordinates
    /// ([`cell_seed`]). Default 1.
    pub seed: u64,
    /// The part of the grid to run. Default the whole grid.
    pub shard: Shard,
    /// The report pipeline of every cell. Default per-report. Under another pipeline that
    /// does not coincide with per-report ([`crate::pipeline::PipelineSpec`]), every cell
    /// runs on the general engine.
    pub pipeline: crate::pipeline::PipelineSpec,
}

impl Default for GridSpec {
    /// One cell: the lesson's scenario (see [`LessonSpec::default`]).
    fn default() -> Self {
        let base = LessonSpec::default();
        let expectations = ExpectationsConfig::default();
        GridSpec {
            desired: Axis::single(base.desired),
            period: Axis::single(base.period),
            delay: Axis::single(base.delay),
            delay_models: Vec::new(),
            startup: Axis::single(base.startup),
            startup_models: Vec::new(),
            ttl: Axis::single(expectations.ttl),
            burst: Axis::single(expectations.burst),
            controller: vec![base.controller],
            duration: base.duration,
            deaths: base.deaths,
            runs: 1,
            seed: 1,
            shard: Shard::WHOLE,
            pipeline: Default::default(),
        }
    }
}

/// A validated grid: every value inside its [`Limit`](crate::Limit), at most [`MAX_CELLS`] cells ×
/// runs.
#[derive(Debug, Clone)]
pub struct Grid {
    pub(super) spec: GridSpec,
    /// A valid scenario with the shared settings; each cell overrides its five parameters.
    pub(super) base: LessonWorld,
    /// The canonical text of each delay model, for rows and seeds.
    pub(super) model_text: Vec<String>,
    /// The canonical text of each startup model, for rows and seeds.
    pub(super) startup_text: Vec<String>,
    pub(super) cells: u64,
    pub(super) range: Range<u64>,
}

/// How many axes a grid has: controller, burst, TTL, startup, delay, period, desired.
const AXES: usize = 7;

/// The cells of a run of numbers, in order ([`Grid::walk`]). Each is the last with its fastest
/// axis stepped on, carrying into the next axis where it wraps, like an odometer, where
/// [`Grid::cell`] divides the number by every axis: 104 instructions a cell of the lesson sweep
/// against 214 (perf, issue 24, part 9).
pub(super) struct Walk<'g> {
    grid: &'g Grid,
    /// Each axis's length, fastest first.
    lens: [u64; AXES],
    /// The place of `cell` on each axis, fastest first.
    digits: [u64; AXES],
    /// Cell number `next`.
    cell: Cell,
    next: u64,
    end: u64,
}

impl Iterator for Walk<'_> {
    type Item = (u64, Cell);

    fn next(&mut self) -> Option<(u64, Cell)> {
        if self.next >= self.end {
            return None;
        }
        let here = (self.next, self.cell);
        self.next += 1;
        if self.next < self.end {
            self.step();
        }
        Some(here)
    }
}

impl Walk<'_> {
    /// Moves `cell` to the next number.
    fn step(&mut self) {
        for axis in 0..AXES {
            let len = self.lens[axis];
            if len == 1 {
                continue;
            }
            let d = &mut self.digits[axis];
            *d += 1;
            let wrapped = *d == len;
            if wrapped {
                *d = 0;
            }
            self.grid.put(&mut self.cell, axis, *d);
            if !wrapped {
                return;
            }
        }
    }
}

/// A cell's report delay: whole seconds of the delay axis, or a model of the model axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellDelay {
    /// Every report takes this many seconds.
    Seconds(u64),
    /// The model at this index of [`GridSpec::delay_models`].
    Model(usize),
}

/// The parameters of one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// Declared copies.
    pub desired: u64,
    /// Loop period U, in seconds.
    pub period: u64,
    /// Report delay G.
    pub delay_of: CellDelay,
    /// Report delay G, in seconds, when the delay is fixed whole seconds (0 otherwise).
    pub delay: u64,
    /// Startup time B, in seconds (0 when the cell has a startup model).
    pub startup: u64,
    /// The startup model at this index of [`GridSpec::startup_models`], if the grid scans them.
    pub startup_model: Option<usize>,
    /// TTL of `expectations`, in seconds.
    pub ttl: u64,
    /// Burst limit of `expectations`.
    pub burst: u64,
    /// The controller.
    pub controller: ControllerKind,
}

impl Cell {
    /// Zeros and `ledger`: where [`Grid::cell_at`] starts.
    const BLANK: Cell = Cell {
        desired: 0,
        period: 0,
        delay_of: CellDelay::Seconds(0),
        delay: 0,
        startup: 0,
        startup_model: None,
        ttl: 0,
        burst: 0,
        controller: ControllerKind::Ledger,
    };
}

impl Grid {
    /// Validates `spec`: the shared settings through [`LessonWorld::new`], every delay model
    /// through [`Scenario::new`], the runs, and the size (cells × runs).
    pub fn new(spec: GridSpec) -> Result<Self, GridError> {
        let base = LessonWorld::new(LessonSpec {
            duration: spec.duration,
            deaths: spec.deaths.clone(),
            ..LessonSpec::default()
        })?;
        RUNS.check(spec.runs)?;
        spec.pipeline.check().map_err(GridError::Pipeline)?;
        for model in &spec.delay_models {
            Scenario::new(ScenarioSpec {
                delay: model.clone(),
                ..ScenarioSpec::default()
            })
            .map_err(|e| GridError::BadDelayModels {
                value: model_text(model),
                reason: format!("{e}; accepted: models whose delays stay within the limits"),
            })?;
        }
        for model in &spec.startup_models {
            Scenario::new(ScenarioSpec::default())
                .and_then(|s| s.with_startup_model(Some(model.clone())))
                .map_err(|e| GridError::BadStartupModels {
                    value: model_text(model),
                    reason: format!(
                        "{e}; accepted: models whose startup times stay within the limits"
                    ),
                })?;
        }
        let cells = Grid::axis_lens(&spec)
            .into_iter()
            .fold(1u128, |n, len| n.saturating_mul(u128::from(len)));
        if cells > u128::from(MAX_CELLS) {
            return Err(GridError::TooLarge {
                cells,
                max: MAX_CELLS,
            });
        }
        let work = cells.saturating_mul(u128::from(spec.runs));
        if work > u128::from(MAX_CELLS) {
            return Err(GridError::TooMuchWork {
                cells: cells as u64,
                runs: spec.runs,
                max: MAX_CELLS,
            });
        }
        let cells = cells as u64;
        let startup_text = spec.startup_models.iter().map(model_text).collect();
        let model_text = spec.delay_models.iter().map(model_text).collect();
        let range = spec.shard.range(cells);
        Ok(Grid {
            spec,
            base,
            model_text,
            startup_text,
            cells,
            range,
        })
    }

    /// The settings the grid was built from.
    pub fn spec(&self) -> &GridSpec {
        &self.spec
    }

    /// How many cells the grid holds (all shards).
    pub fn cells(&self) -> u64 {
        self.cells
    }

    /// The cells this grid's shard runs, in order.
    pub fn range(&self) -> Range<u64> {
        self.range.clone()
    }

    /// The parameters of cell `index` (below [`Self::cells`]), in row order.
    pub fn cell(&self, index: u64) -> Cell {
        self.cell_at(&self.digits(index))
    }

    /// How many values each axis holds, fastest first: controller, burst, TTL, startup (or
    /// startup model), delay (or delay model), period, desired.
    fn axis_lens(s: &GridSpec) -> [u64; AXES] {
        let startups = match s.startup_models.len() {
            0 => s.startup.len(),
            n => n as u64,
        };
        let delays = match s.delay_models.len() {
            0 => s.delay.len(),
            n => n as u64,
        };
        [
            s.controller.len() as u64,
            s.burst.len(),
            s.ttl.len(),
            startups,
            delays,
            s.period.len(),
            s.desired.len(),
        ]
    }

    /// Cell `index`'s place on each axis, fastest first ([`Self::axis_lens`]).
    fn digits(&self, index: u64) -> [u64; AXES] {
        let mut i = index;
        Grid::axis_lens(&self.spec).map(|len| {
            // Most axes of a big grid hold one value: skip their divisions (perf, issue 12).
            if len == 1 {
                return 0;
            }
            let d = i % len;
            i /= len;
            d
        })
    }

    /// The cell at these places on the axes, fastest first.
    fn cell_at(&self, digits: &[u64; AXES]) -> Cell {
        let mut cell = Cell::BLANK;
        for (axis, &at) in digits.iter().enumerate() {
            self.put(&mut cell, axis, at);
        }
        cell
    }

    /// Sets `cell`'s coordinate on `axis` (0 the fastest, as [`Self::axis_lens`]) to that axis's
    /// value at `at`.
    fn put(&self, cell: &mut Cell, axis: usize, at: u64) {
        let s = &self.spec;
        match axis {
            0 => cell.controller = s.controller[at as usize],
            1 => cell.burst = s.burst.get(at),
            2 => cell.ttl = s.ttl.get(at),
            3 if s.startup_models.is_empty() => {
                (cell.startup, cell.startup_model) = (s.startup.get(at), None);
            }
            3 => (cell.startup, cell.startup_model) = (0, Some(at as usize)),
            4 if s.delay_models.is_empty() => {
                let g = s.delay.get(at);
                (cell.delay_of, cell.delay) = (CellDelay::Seconds(g), g);
            }
            4 => {
                let k = at as usize;
                let g = s.delay_models[k].fixed_whole_seconds();
                (cell.delay_of, cell.delay) = (CellDelay::Model(k), g.unwrap_or(0));
            }
            5 => cell.period = s.period.get(at),
            _ => cell.desired = s.desired.get(at),
        }
    }

    /// The cells of `range` (below [`Self::cells`]) in order, with their numbers: the cells of
    /// [`Self::cell`], each stepped on from the last instead of divided out of its number.
    pub(super) fn walk(&self, range: Range<u64>) -> Walk<'_> {
        // An empty run reads no axis: a grid of no cells has an empty axis.
        let (digits, cell) = if range.is_empty() {
            ([0; AXES], Cell::BLANK)
        } else {
            let digits = self.digits(range.start);
            (digits, self.cell_at(&digits))
        };
        Walk {
            grid: self,
            lens: Grid::axis_lens(&self.spec),
            digits,
            cell,
            next: range.start,
            end: range.end,
        }
    }

    /// The delay model of a cell.
    fn model(&self, cell: &Cell) -> DelayModel {
        match cell.delay_of {
            CellDelay::Seconds(g) => DelayModel::fixed_seconds(g),
            CellDelay::Model(k) => self.spec.delay_models[k].clone(),
        }
    }

    /// The canonical text of a cell's delay model.
    pub(super) fn cell_model_text(&self, cell: &Cell) -> ModelName<'_> {
        match cell.delay_of {
            CellDelay::Seconds(g) => ModelName::Fixed(g),
            CellDelay::Model(k) => ModelName::Text(&self.model_text[k]),
        }
    }

    /// A cell's startup as its row writes it.
    pub(super) fn cell_startup(&self, cell: &Cell) -> StartupName<'_> {
        match cell.startup_model {
            None => StartupName::Seconds(cell.startup),
            Some(k) => StartupName::Model(&self.startup_text[k]),
        }
    }

    /// A cell's first seed ([`cell_seed`]).
    pub(super) fn first_seed(&self, cell: &Cell) -> u64 {
        cell_seed(
            self.spec.seed,
            cell,
            &self.cell_model_text(cell),
            &self.cell_startup(cell),
        )
    }

    /// Whether the lesson's world expresses the cell: a lesson controller, a fixed delay of
    /// whole seconds and a fixed startup. Those cells run on the fast engine, with the lesson's
    /// relation and the exact predictor beside them.
    pub fn is_lesson_cell(&self, cell: &Cell) -> bool {
        cell.controller.is_lesson()
            && cell.startup_model.is_none()
            && self.spec.pipeline.per_report_under_fixed_delay()
            && match cell.delay_of {
                CellDelay::Seconds(_) => true,
                CellDelay::Model(k) => self.spec.delay_models[k].fixed_whole_seconds().is_some(),
            }
    }

    /// The fast engine's input for a lesson cell ([`Self::is_lesson_cell`]).
    pub fn scenario(&self, cell: Cell) -> LessonWorld {
        self.base.with_cell(cell)
    }

    /// The one scenario type's form of any cell, with the cell's first seed.
    pub fn lab_scenario(&self, cell: &Cell) -> Scenario {
        let mut spec = ScenarioSpec {
            period: cell.period,
            duration: self.spec.duration,
            delay: self.model(cell),
            controller: ControllerSpec {
                kind: cell.controller,
                expectations: ExpectationsConfig {
                    ttl: cell.ttl,
                    burst: cell.burst,
                },
            },
            seed: self.first_seed(cell),
            pipeline: self.spec.pipeline,
            ..ScenarioSpec::default()
        };
        spec.workloads[0].desired = cell.desired;
        spec.workloads[0].startup = cell.startup;
        spec.events = death_events(&self.spec.deaths);
        let startup_model = cell
            .startup_model
            .map(|k| self.spec.startup_models[k].clone());
        Scenario::new(spec)
            .and_then(|s| s.with_startup_model(startup_model))
            .expect("grid cells are checked against every limit")
    }

    /// A cell's delay in whole seconds, when it is fixed whole seconds.
    pub(super) fn fixed_delay(&self, cell: &Cell) -> Option<u64> {
        match cell.delay_of {
            CellDelay::Seconds(g) => Some(g),
            CellDelay::Model(k) => self.spec.delay_models[k].fixed_whole_seconds(),
        }
    }
}

impl LessonWorld {
    /// This scenario with the five parameters of `cell`. The scenario's own settings passed every
    /// limit and the grid's axes checked theirs, so the result is valid without a new check.
    fn with_cell(&self, cell: Cell) -> LessonWorld {
        let mut spec = self.spec().clone();
        spec.desired = cell.desired;
        spec.period = cell.period;
        spec.delay = cell.delay;
        spec.startup = cell.startup;
        spec.controller = cell.controller;
        LessonWorld::new(spec).expect("grid cells are checked against every limit")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lesson_world::Limit;
    use crate::sweep::testing::axis;
    use setpoint_core::ControllerKind::{Intent, Ledger};

    #[test]
    fn a_grid_too_large_is_refused_before_any_work() {
        let err = Grid::new(GridSpec {
            delay: axis(Limit::DELAY, "0..=1000000000"),
            period: axis(Limit::PERIOD, "1..=1000"),
            ..GridSpec::default()
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the grid has 1000000001000 cells, more than the 100000000 a sweep accepts: narrow a range or give it a step, such as 0..=120:5"
        );
    }

    #[test]
    fn cells_are_numbered_with_desired_slowest_and_controller_fastest() {
        let g = Grid::new(GridSpec {
            desired: axis(Limit::DESIRED, "6,7"),
            delay: axis(Limit::DELAY, "0,30"),
            controller: vec![Ledger, Intent],
            ..GridSpec::default()
        })
        .unwrap();
        assert_eq!(g.cells(), 8);
        let cells: Vec<(u64, u64, ControllerKind)> = (0..8)
            .map(|i| g.cell(i))
            .map(|c| (c.desired, c.delay, c.controller))
            .collect();
        assert_eq!(
            cells,
            vec![
                (6, 0, Ledger),
                (6, 0, Intent),
                (6, 30, Ledger),
                (6, 30, Intent),
                (7, 0, Ledger),
                (7, 0, Intent),
                (7, 30, Ledger),
                (7, 30, Intent),
            ]
        );
    }
    #[test]
    fn a_walk_finds_the_cells_that_cell_finds_from_any_start() {
        let grids = [
            GridSpec {
                desired: axis(Limit::DESIRED, "6,7..=9:2"),
                period: axis(Limit::PERIOD, "1..=3,10"),
                delay: axis(Limit::DELAY, "0,5..=7,30"),
                startup: axis(Limit::STARTUP, "0..=2"),
                controller: vec![Ledger, Intent, ControllerKind::Expectations],
                ttl: axis(crate::scenario::TTL, "1,300"),
                ..GridSpec::default()
            },
            GridSpec {
                delay_models: crate::sweep::parse_delay_models("fixed:20,lesson-chain").unwrap(),
                startup_models: crate::sweep::parse_startup_models("fixed:3,uniform:1:9").unwrap(),
                burst: axis(crate::scenario::BURST, "1..=3"),
                period: axis(Limit::PERIOD, "5,15"),
                ..GridSpec::default()
            },
            GridSpec::default(),
        ];
        for spec in grids {
            let g = Grid::new(spec).unwrap();
            let n = g.cells();
            for range in [0..n, 1..n, n / 3..n - 1, n - 1..n, n..n] {
                let walked: Vec<(u64, Cell)> = g.walk(range.clone()).collect();
                let by_number: Vec<(u64, Cell)> = range.map(|i| (i, g.cell(i))).collect();
                assert_eq!(walked, by_number);
            }
        }
    }

    #[test]
    fn a_startup_model_past_the_limits_is_refused_by_the_grid() {
        let e = Grid::new(GridSpec {
            startup_models: vec![DelayModel::Fixed(crate::delay::MAX_DELAY_MS + 1000)],
            ..GridSpec::default()
        })
        .unwrap_err();
        assert!(matches!(e, GridError::BadStartupModels { .. }), "{e}");
    }
}
