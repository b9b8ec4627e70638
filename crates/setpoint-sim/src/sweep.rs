//! Sweeps: one simulation per cell of a grid of settings, run in parallel, reported in order.
//!
//! A [`Grid`] is the product of five axes (desired copies, loop period, report delay, startup
//! time, controller) over a base of settings every cell shares (duration, deaths). Its cells are
//! numbered in row order: `desired` varies slowest and `controller` fastest, which is the order of
//! the parameter columns of a [`SweepRow`]. Every cell is a pure function of its number, so the
//! output does not depend on how many threads compute it or on how the work is split.
//!
//! Axes are never expanded into lists: `0..=1000000000` costs as little to hold as `5`, and the
//! size of a grid is known, and checked against [`MAX_CELLS`], before any cell runs.

#[cfg(test)]
use std::fmt::Write as _;
use std::io::{self, Write};
use std::ops::Range;

use rayon::prelude::*;
use serde::{Serialize, Serializer};
use setpoint_core::ControllerKind;
use thiserror::Error;

use setpoint_core::ExpectationsConfig;

use crate::delay::{parse_delay_model, parse_startup_model, seconds, DelayModel};
use crate::engine::simulate_params;
use crate::lesson::lesson_prediction;
use crate::lesson_world::{Death, LessonParams, LessonSpec, LessonWorld, Limit, SettingError};
use crate::metrics::Metrics;
use crate::montecarlo::{monte_carlo_sequential, RUNS};
use crate::output::{names_apply, push_lesson_metrics, push_spreads, Record, Value, SCHEMA};
use crate::predict::predict_params;
use crate::row_writer::{Csv, Header, Json, RowSink};
use crate::scenario::{
    death_events, run, ControllerSpec, RolloutMetrics, Scenario, ScenarioError, ScenarioSpec,
};

/// The largest grid a sweep accepts, in cells. A cell costs well under a microsecond on the
/// lesson's settings, so this is a few minutes of work and, as CSV, about ten gigabytes of output:
/// past it a grid is a mistake more often than a plan.
pub const MAX_CELLS: u64 = 100_000_000;

/// How the cells are split into parallel tasks.
#[derive(Debug, Clone, Copy)]
struct Split {
    /// Cells computed by one task.
    chunk_cells: u64,
    /// Chunks formatted before they are written: bounds the rows held in memory at once.
    chunks_per_block: u64,
}

/// Chunks small enough to balance the load, large enough that scheduling is noise next to the
/// simulations; blocks of a few megabytes of text.
const SPLIT: Split = Split {
    chunk_cells: 2048,
    chunks_per_block: 32,
};

/// How a grid axis is written on the command line, for error messages.
const AXIS_FORM: &str =
    "a list like 0,5,10, an inclusive range like 0..=120, or a stepped range like 0..=120:5";

/// Something wrong with a sweep's grid. Every message names the setting and what it accepts.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GridError {
    /// A malformed axis: an empty list or item, a reversed range, a zero step, or text that is not
    /// a number. Write a list, an inclusive range or a stepped range, as the message shows.
    #[error(
        "{field} '{value}': {reason}; accepted: {AXIS_FORM}, with values {min} to {max} {unit}"
    )]
    BadAxis {
        /// The setting, named as its command-line flag without dashes.
        field: &'static str,
        /// The text as given.
        value: String,
        /// What is wrong with it.
        reason: String,
        /// The smallest accepted value.
        min: u64,
        /// The largest accepted value.
        max: u64,
        /// What the numbers count.
        unit: &'static str,
    },
    /// A malformed list of controllers. Name controllers separated by commas.
    #[error(
        "controller '{value}': {reason}; accepted: a list of ledger, intent, expectations, named, gated, such as ledger,named"
    )]
    BadControllers {
        /// The text as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A malformed list of delay models.
    #[error("delay-model '{value}': {reason}")]
    BadDelayModels {
        /// The text as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A malformed list of startup-time models, or one whose startup times pass the limits.
    #[error("startup-model '{value}': {reason}")]
    BadStartupModels {
        /// The text as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A malformed `--shard`.
    #[error("shard '{value}': {reason}; accepted: I/N with N from 1 to {MAX_SHARDS} and I from 1 to N, such as 2/8")]
    BadShard {
        /// The text as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// More simulations (cells × runs) than [`MAX_CELLS`]. Lower `--runs` or narrow the grid.
    #[error("the sweep asks for {cells} cells x {runs} runs, more than the {max} runs a sweep accepts: lower --runs or narrow the grid")]
    TooMuchWork {
        /// Cells in the grid.
        cells: u64,
        /// Runs per cell.
        runs: u64,
        /// The largest accepted product.
        max: u64,
    },
    /// A grid with more cells than [`MAX_CELLS`]. Narrow a range or give it a step.
    #[error("the grid has {cells} cells, more than the {max} a sweep accepts: narrow a range or give it a step, such as 0..=120:5")]
    TooLarge {
        /// The product of the axis lengths.
        cells: u128,
        /// The largest accepted product.
        max: u64,
    },
    /// A setting that every cell shares (duration, deaths) is invalid. The message says which.
    #[error(transparent)]
    LessonWorld(#[from] SettingError),
    /// The report pipeline every cell shares is invalid. The message says which setting.
    #[error("report pipeline: {0}")]
    Pipeline(crate::pipeline::PipelineError),
}

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

/// Which part of a grid one machine runs: shard `index` (from 0) of `count`. Shard `i` of `n`
/// runs the cells `⌊i·cells/n⌋ ..< ⌊(i+1)·cells/n⌋`, a contiguous run in cell order, so the
/// shards' outputs concatenated in shard order are the whole sweep's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard, from 0.
    pub index: u64,
    /// How many shards the grid is cut into, at least 1.
    pub count: u64,
}

/// The most shards a grid may be cut into.
pub const MAX_SHARDS: u64 = 1_000_000;

impl Shard {
    /// The whole grid.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Parses `I/N` with I from 1 to N, as the command line writes it (shard 1 is the first).
    pub fn parse(text: &str) -> Result<Shard, GridError> {
        let bad = |reason: &str| GridError::BadShard {
            value: text.to_owned(),
            reason: reason.to_owned(),
        };
        let (i, n) = text.trim().split_once('/').ok_or_else(|| bad("no '/'"))?;
        let i: u64 = i
            .trim()
            .parse()
            .map_err(|_| bad("I is not a whole number"))?;
        let n: u64 = n
            .trim()
            .parse()
            .map_err(|_| bad("N is not a whole number"))?;
        if n == 0 || n > MAX_SHARDS {
            return Err(bad("N is out of range"));
        }
        if i == 0 || i > n {
            return Err(bad("I is out of range"));
        }
        Ok(Shard {
            index: i - 1,
            count: n,
        })
    }

    /// The cells of this shard in a grid of `cells` cells.
    pub fn range(&self, cells: u64) -> Range<u64> {
        let at = |k: u64| (u128::from(k) * u128::from(cells) / u128::from(self.count)) as u64;
        at(self.index)..at(self.index + 1)
    }
}

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

/// A validated grid: every value inside its [`Limit`], at most [`MAX_CELLS`] cells × runs.
#[derive(Debug, Clone)]
pub struct Grid {
    spec: GridSpec,
    /// A valid scenario with the shared settings; each cell overrides its five parameters.
    base: LessonWorld,
    /// The canonical text of each delay model, for rows and seeds.
    model_text: Vec<String>,
    /// The canonical text of each startup model, for rows and seeds.
    startup_text: Vec<String>,
    cells: u64,
    range: Range<u64>,
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

/// The first seed of a cell: a hash (SplitMix64 steps) of the base seed and the cell's
/// coordinates, by value, never by position, so a cell has the same seeds whether it is swept
/// alone or in any grid, on any number of threads or shards. The delay enters as the FNV-1a hash
/// of its canonical text ([`model_text`]), so `-G 20` and `--delay-model fixed:20` give the same
/// seeds. The startup enters as its seconds, or, for a cell with a startup model, as the FNV-1a
/// hash of the model's canonical text ([`StartupName`]). Run `i` of the cell uses
/// `cell_seed + i`, wrapping.
pub fn cell_seed(base: u64, cell: &Cell, model: &ModelName<'_>, startup: &StartupName<'_>) -> u64 {
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let controller = ControllerKind::ALL
        .iter()
        .position(|&k| k == cell.controller)
        .unwrap_or(0) as u64;
    [
        cell.desired,
        cell.period,
        model.fnv(),
        match startup {
            StartupName::Seconds(b) => *b,
            StartupName::Model(t) => ModelName::Text(t).fnv(),
        },
        cell.ttl,
        cell.burst,
        controller,
    ]
    .into_iter()
    .fold(mix(base), |h, x| mix(h ^ x))
}

/// A cell's delay model by its canonical text ([`model_text`]), without allocating for the
/// delay axis's fixed seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelName<'a> {
    /// `fixed:S`, whole seconds.
    Fixed(u64),
    /// Any other model's text.
    Text(&'a str),
}

impl ModelName<'_> {
    /// FNV-1a of the text.
    fn fnv(&self) -> u64 {
        let step = |h: u64, b: u8| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        let basis = 0xcbf2_9ce4_8422_2325u64;
        match self {
            ModelName::Text(t) => t.bytes().fold(basis, step),
            ModelName::Fixed(g) => {
                let mut digits = [0u8; 20];
                let mut n = *g;
                let mut k = digits.len();
                loop {
                    k -= 1;
                    digits[k] = b'0' + (n % 10) as u8;
                    n /= 10;
                    if n == 0 {
                        break;
                    }
                }
                digits[k..]
                    .iter()
                    .fold(b"fixed:".iter().fold(basis, |h, &b| step(h, b)), |h, &b| {
                        step(h, b)
                    })
            }
        }
    }
}

impl std::fmt::Display for ModelName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelName::Fixed(g) => write!(f, "fixed:{g}"),
            ModelName::Text(t) => f.write_str(t),
        }
    }
}

impl Serialize for ModelName<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A cell's startup as its row writes it: whole seconds (`-B`), or a startup model's canonical
/// text ([`model_text`]; `--startup-model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartupName<'a> {
    /// Every copy takes this many seconds to start.
    Seconds(u64),
    /// Each copy's startup is drawn from the model of this text.
    Model(&'a str),
}

impl std::fmt::Display for StartupName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartupName::Seconds(b) => write!(f, "{b}"),
            StartupName::Model(t) => f.write_str(t),
        }
    }
}

impl Serialize for StartupName<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StartupName::Seconds(b) => s.serialize_u64(*b),
            StartupName::Model(t) => s.serialize_str(t),
        }
    }
}

impl From<StartupName<'_>> for Value {
    fn from(v: StartupName<'_>) -> Value {
        match v {
            StartupName::Seconds(b) => Value::U64(b),
            StartupName::Model(t) => Value::Str(t.to_owned()),
        }
    }
}

/// The canonical text of a delay model on a sweep's axis: `fixed:S`, `uniform:MIN:MAX` (seconds
/// to the millisecond) or `lesson-chain`; another chain by its description.
pub fn model_text(model: &DelayModel) -> String {
    match model {
        DelayModel::Fixed(d) => format!("fixed:{}", seconds(*d)),
        DelayModel::Uniform { min, max } => format!("uniform:{}:{}", seconds(*min), seconds(*max)),
        DelayModel::Empirical(e) => format!("empirical:{}", e.label()),
        chain if *chain == DelayModel::lesson_chain() => "lesson-chain".into(),
        chain => chain.describe(),
    }
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
        let delays = if spec.delay_models.is_empty() {
            spec.delay.len()
        } else {
            spec.delay_models.len() as u64
        };
        let startups = if spec.startup_models.is_empty() {
            spec.startup.len()
        } else {
            spec.startup_models.len() as u64
        };
        let cells = [
            spec.desired.len(),
            spec.period.len(),
            delays,
            startups,
            spec.ttl.len(),
            spec.burst.len(),
            spec.controller.len() as u64,
        ]
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
        let s = &self.spec;
        let mut i = index;
        let mut digit = |len: u64| {
            // Most axes of a big grid hold one value: skip their divisions (perf, issue 12).
            if len == 1 {
                return 0;
            }
            let d = i % len;
            i /= len;
            d
        };
        // The fastest axis comes off first.
        let controller = s.controller[digit(s.controller.len() as u64) as usize];
        let burst = s.burst.get(digit(s.burst.len()));
        let ttl = s.ttl.get(digit(s.ttl.len()));
        let (startup, startup_model) = if s.startup_models.is_empty() {
            (s.startup.get(digit(s.startup.len())), None)
        } else {
            (0, Some(digit(s.startup_models.len() as u64) as usize))
        };
        let (delay_of, delay) = if s.delay_models.is_empty() {
            let g = s.delay.get(digit(s.delay.len()));
            (CellDelay::Seconds(g), g)
        } else {
            let k = digit(s.delay_models.len() as u64) as usize;
            let g = s.delay_models[k].fixed_whole_seconds();
            (CellDelay::Model(k), g.unwrap_or(0))
        };
        let period = s.period.get(digit(s.period.len()));
        let desired = s.desired.get(digit(s.desired.len()));
        Cell {
            desired,
            period,
            delay_of,
            delay,
            startup,
            startup_model,
            ttl,
            burst,
            controller,
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
    fn cell_model_text(&self, cell: &Cell) -> ModelName<'_> {
        match cell.delay_of {
            CellDelay::Seconds(g) => ModelName::Fixed(g),
            CellDelay::Model(k) => ModelName::Text(&self.model_text[k]),
        }
    }

    /// A cell's startup as its row writes it.
    fn cell_startup(&self, cell: &Cell) -> StartupName<'_> {
        match cell.startup_model {
            None => StartupName::Seconds(cell.startup),
            Some(k) => StartupName::Model(&self.startup_text[k]),
        }
    }

    /// A cell's first seed ([`cell_seed`]).
    fn first_seed(&self, cell: &Cell) -> u64 {
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

    /// The outcome of cell `index` if it is a lesson cell.
    fn lesson_cell_outcome(&self, index: u64) -> Option<LessonOutcome> {
        let cell = self.cell(index);
        self.is_lesson_cell(&cell)
            .then(|| self.lesson_outcome(&cell))
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

    /// A cell's delay in whole seconds, when it is fixed whole seconds.
    fn fixed_delay(&self, cell: &Cell) -> Option<u64> {
        match cell.delay_of {
            CellDelay::Seconds(g) => Some(g),
            CellDelay::Model(k) => self.spec.delay_models[k].fixed_whole_seconds(),
        }
    }

    /// Simulates cell `index` (a single run) and returns its row.
    pub fn row(&self, index: u64) -> Result<SweepRow<'_>, ScenarioError> {
        let cell = self.cell(index);
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
        if self.spec.runs > 1 {
            let r = self.monte_carlo_row(index)?;
            out.push_str(&match format {
                RowFormat::Csv => r.csv_row(),
                RowFormat::Jsonl => r.json(),
            });
            out.push('\n');
        } else {
            self.row(index)?.write_to(format, out);
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

    /// The cell numbers of chunk `k` of this shard.
    fn chunk(&self, k: u64, split: Split) -> Range<u64> {
        let start = self.range.start + k * split.chunk_cells;
        start..(start + split.chunk_cells).min(self.range.end)
    }

    fn chunks(&self, split: Split) -> u64 {
        (self.range.end - self.range.start).div_ceil(split.chunk_cells)
    }
}

/// What [`Grid::lesson_outcome`] computes for one lesson cell.
#[derive(Debug, Clone, Copy)]
struct LessonOutcome {
    /// What the fast engine measured.
    metrics: Metrics,
    /// The lesson's relation ([`lesson_prediction`]).
    lesson_prediction: i128,
    /// The exact predictor's overshoot.
    prediction: u64,
}

impl LessonOutcome {
    fn lesson_match(&self) -> bool {
        i128::from(self.metrics.overshoot) == self.lesson_prediction
    }

    fn prediction_match(&self) -> bool {
        self.metrics.overshoot == self.prediction
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

/// One single-run row of a sweep (`docs/output.md`): the schema version, the cell's number and
/// coordinates, the seed and engine, the metrics of `setpoint run`, and the lesson's relation and
/// the exact predictor where the lesson's world holds (null elsewhere). Settings that do not
/// apply to the cell's controller (`ttl`, `burst` outside `expectations`) are null.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepRow<'a> {
    /// The schema version ([`SCHEMA`]).
    pub schema: u64,
    /// The cell's number in the whole grid (desired slowest, controller fastest).
    pub cell: u64,
    /// Declared copies.
    pub desired: u64,
    /// Loop period U, in seconds.
    pub period: u64,
    /// Report delay G, in seconds, when fixed whole seconds; null for a random model.
    pub delay: Option<u64>,
    /// The delay model's canonical text ([`model_text`]).
    pub delay_model: ModelName<'a>,
    /// Startup time B, in seconds; or, for a cell with a startup model, the model's canonical
    /// text (a string in JSON).
    pub startup: StartupName<'a>,
    /// The last second of the run.
    pub duration: u64,
    /// The controller, by its command-line name.
    #[serde(serialize_with = "controller_name")]
    pub controller: ControllerKind,
    /// TTL of `expectations`, in seconds.
    pub ttl: Option<u64>,
    /// Burst limit of `expectations`.
    pub burst: Option<u64>,
    /// The run's seed ([`cell_seed`]); JSON writes one above 2^53 − 1 as a string.
    #[serde(serialize_with = "crate::output::serialize_exact")]
    pub seed: u64,
    /// The engine that ran the cell: `fast` or `general`.
    pub engine: &'static str,
    /// What the run measured.
    #[serde(flatten)]
    pub metrics: Metrics,
    /// Duplicate identities; `named` only.
    pub duplicate_names: Option<u64>,
    /// Creations absorbed as no-ops; `named` only.
    pub absorbed_creates: Option<u64>,
    /// Delete commands lost in transit.
    pub lost_deletes: u64,
    /// The rolling update's metrics (`docs/model.md`, "Rolling updates"): null in every row of
    /// a grid, whose cells hold no `update` event, and on the fast engine.
    #[serde(flatten)]
    pub rollout: RolloutMetrics,
    /// The lesson's relation `desired × (⌈(G + B) / U⌉ − 1)`, in copies; negative when
    /// `G + B = 0`. Null outside the lesson's world.
    pub lesson_prediction: Option<i128>,
    /// Whether the measured overshoot equals `lesson_prediction`.
    pub lesson_match: Option<bool>,
    /// The exact predictor's overshoot ([`crate::predict::predict`], `docs/relation.md`), in
    /// copies: 0 for `intent`, which counts its own work in flight and never overshoots.
    pub prediction: Option<u64>,
    /// Whether the measured overshoot equals `prediction`.
    pub prediction_match: Option<bool>,
}

fn controller_name<S: Serializer>(c: &ControllerKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
}

/// An optional value as a CSV cell: empty when absent.
#[cfg(test)]
struct Opt<T>(Option<T>);

#[cfg(test)]
impl<T: std::fmt::Display> std::fmt::Display for Opt<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => Ok(()),
        }
    }
}

impl SweepRow<'_> {
    /// The row as a [`Record`]: the same keys and values as [`Self::write_to`] prints.
    pub fn record(&self) -> Record {
        let mut r = Record::new();
        r.push("cell", self.cell);
        r.push("desired", self.desired);
        r.push("period", self.period);
        r.push("delay", self.delay);
        r.push("delay_model", self.delay_model.to_string());
        r.push("startup", self.startup);
        r.push("duration", self.duration);
        r.push("controller", self.controller.name());
        r.push("ttl", self.ttl);
        r.push("burst", self.burst);
        r.push("seed", self.seed);
        r.push("engine", self.engine);
        push_lesson_metrics(&mut r, &self.metrics);
        r.push("duplicate_names", self.duplicate_names);
        r.push("absorbed_creates", self.absorbed_creates);
        r.push("lost_deletes", self.lost_deletes);
        let u = &self.rollout;
        r.push("surge_budget", u.surge_budget);
        r.push("surge", u.surge);
        r.push("surge_copy_seconds", u.surge_copy_seconds);
        r.push("rollout_overshoot", u.rollout_overshoot);
        r.push("rollout_done", u.rollout_done);
        r.push("rollout_stalled", u.rollout_stalled);
        r.push(
            "lesson_prediction",
            self.lesson_prediction.map(|p| p as i64),
        );
        r.push("lesson_match", self.lesson_match);
        r.push("prediction", self.prediction);
        r.push("prediction_match", self.prediction_match);
        r
    }

    /// Hands every field to `sink`, in output order: the one list of the row's keys, from which
    /// the header and both formats of [`Self::write_to`] follow.
    fn visit(&self, s: &mut impl RowSink) {
        s.u64("schema", self.schema);
        s.u64("cell", self.cell);
        s.u64("desired", self.desired);
        s.u64("period", self.period);
        s.opt_u64("delay", self.delay);
        match self.delay_model {
            ModelName::Fixed(g) => {
                let mut text = *b"fixed:\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
                let mut digits = itoa::Buffer::new();
                let digits = digits.format(g).as_bytes();
                text[6..6 + digits.len()].copy_from_slice(digits);
                let text = std::str::from_utf8(&text[..6 + digits.len()]).expect("ascii");
                s.str("delay_model", text);
            }
            ModelName::Text(t) => s.str("delay_model", t),
        }
        match self.startup {
            StartupName::Seconds(b) => s.u64("startup", b),
            StartupName::Model(t) => s.str("startup", t),
        }
        s.u64("duration", self.duration);
        s.str("controller", self.controller.name());
        s.opt_u64("ttl", self.ttl);
        s.opt_u64("burst", self.burst);
        s.u64("seed", self.seed);
        s.str("engine", self.engine);
        let m = &self.metrics;
        s.u64("rounds", m.rounds);
        s.f64("work_per_round", m.work_per_round);
        s.u64("created", m.created);
        s.i128("unneeded", i128::from(m.unneeded));
        s.u64("delete_commands", m.delete_commands);
        s.u64("deleted", m.deleted);
        s.u64("overshoot", m.overshoot);
        s.opt_u64("stable", m.stable);
        s.u64("died", m.died);
        s.u64("peak_live", m.peak_live);
        s.u64("copy_seconds_above", m.copy_seconds_above);
        s.opt_u64("duplicate_names", self.duplicate_names);
        s.opt_u64("absorbed_creates", self.absorbed_creates);
        s.u64("lost_deletes", self.lost_deletes);
        let u = &self.rollout;
        s.opt_u64("surge_budget", u.surge_budget);
        s.opt_u64("surge", u.surge);
        s.opt_u64("surge_copy_seconds", u.surge_copy_seconds);
        s.opt_u64("rollout_overshoot", u.rollout_overshoot);
        s.opt_u64("rollout_done", u.rollout_done);
        s.opt_u64("rollout_stalled", u.rollout_stalled);
        s.opt_i128("lesson_prediction", self.lesson_prediction);
        s.opt_bool("lesson_match", self.lesson_match);
        s.opt_u64("prediction", self.prediction);
        s.opt_bool("prediction_match", self.prediction_match);
    }

    /// The CSV header, without a newline.
    pub fn csv_header() -> String {
        let mut h = Header::default();
        SweepRow::blank().visit(&mut h);
        h.text
    }

    /// A row of zeros and nulls: what [`Self::csv_header`] visits for the keys, and the fields
    /// [`Grid::row`] fills in from there.
    fn blank() -> SweepRow<'static> {
        SweepRow {
            schema: SCHEMA,
            cell: 0,
            desired: 0,
            period: 0,
            delay: None,
            delay_model: ModelName::Fixed(0),
            startup: StartupName::Seconds(0),
            duration: 0,
            controller: ControllerKind::Ledger,
            ttl: None,
            burst: None,
            seed: 0,
            engine: "",
            metrics: Metrics::default(),
            duplicate_names: None,
            absorbed_creates: None,
            lost_deletes: 0,
            rollout: RolloutMetrics::default(),
            lesson_prediction: None,
            lesson_match: None,
            prediction: None,
            prediction_match: None,
        }
    }

    /// Appends the row in `format`, with a newline, through the crate's row writer: the same bytes
    /// as the plain `Display`/`serde` path, written without per-row allocation.
    pub fn write_to(&self, format: RowFormat, out: &mut String) {
        match format {
            RowFormat::Csv => {
                let mut sink = Csv::new(out);
                self.visit(&mut sink);
                sink.end();
            }
            RowFormat::Jsonl => {
                let mut sink = Json::new(out);
                self.visit(&mut sink);
                sink.end();
            }
        }
    }

    /// The plain path the row writer replaced: `format!` for CSV, the derived `Serialize` for
    /// JSON. Kept as the oracle of the writer's tests.
    #[cfg(test)]
    fn write_plain(&self, format: RowFormat, out: &mut String) {
        match format {
            RowFormat::Csv => {
                // Writing into a String cannot fail.
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    self.schema,
                    self.cell,
                    self.desired,
                    self.period,
                    Opt(self.delay),
                    self.delay_model,
                    self.startup,
                    self.duration,
                    self.controller.name(),
                    Opt(self.ttl),
                    Opt(self.burst),
                    self.seed,
                    self.engine,
                    self.metrics.csv_row(),
                    Opt(self.duplicate_names),
                    Opt(self.absorbed_creates),
                    self.lost_deletes,
                    Opt(self.rollout.surge_budget),
                    Opt(self.rollout.surge),
                    Opt(self.rollout.surge_copy_seconds),
                    Opt(self.rollout.rollout_overshoot),
                    Opt(self.rollout.rollout_done),
                    Opt(self.rollout.rollout_stalled),
                    Opt(self.lesson_prediction),
                    Opt(self.lesson_match),
                    Opt(self.prediction),
                    Opt(self.prediction_match)
                );
            }
            RowFormat::Jsonl => {
                out.push_str(
                    &serde_json::to_string(self).expect("a row always serializes to JSON"),
                );
                out.push('\n');
            }
        }
    }
}

/// How [`write_rows`] prints rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowFormat {
    /// A header line, then one comma-separated line per cell. An absent `stable` is empty.
    Csv,
    /// One JSON object per line, no header. An absent `stable` is `null`.
    Jsonl,
}

/// The counts `setpoint sweep --summary` prints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Cells simulated.
    pub cells: u64,
    /// Cells of the lesson's world whose measured overshoot differs from the lesson's relation
    /// (cells outside the lesson's world are not counted: the relation is not defined there).
    pub mismatched: u64,
    /// Cells whose overshoot is above zero (in any run, with `--runs`).
    pub overshooting: u64,
    /// Cells of the lesson's world whose measured overshoot differs from the exact predictor (0
    /// is the claim).
    pub prediction_mismatched: u64,
}

impl Summary {
    fn add(self, other: Summary) -> Summary {
        Summary {
            cells: self.cells + other.cells,
            mismatched: self.mismatched + other.mismatched,
            overshooting: self.overshooting + other.overshooting,
            prediction_mismatched: self.prediction_mismatched + other.prediction_mismatched,
        }
    }
}

/// A failure inside a sweep: writing, or a cell the general engine could not hold.
#[derive(Debug, Error)]
pub enum SweepError {
    /// Writing the rows failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// A column that the grid's rows do not have, or that is not a number.
    #[error("no numeric column '{key}' in these rows; accepted: {accepted}")]
    NoColumn {
        /// The key as given.
        key: String,
        /// The numeric keys the rows have.
        accepted: String,
    },
    /// A cell's run failed; the message says which cell and why.
    #[error("cell {cell}: {source}")]
    Cell {
        /// The cell's number.
        cell: u64,
        /// Why it failed.
        source: ScenarioError,
    },
}

/// Simulates every cell of `grid`'s shard on the current rayon pool and counts. `progress` is
/// told how many cells each finished chunk held, from any thread, in no particular order.
pub fn summarize(grid: &Grid, progress: &(dyn Fn(u64) + Sync)) -> Result<Summary, SweepError> {
    summarize_split(grid, progress, &|| false, SPLIT)
}

/// [`summarize`], skipping every cell not started when `stop` says so (a signal asked the
/// command to stop): the counts of the cells simulated so far (`Summary::cells` of them, not
/// in cell order), so that an interrupted sweep prints what it has.
pub fn summarize_until(
    grid: &Grid,
    progress: &(dyn Fn(u64) + Sync),
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Summary, SweepError> {
    summarize_split(grid, progress, stop, SPLIT)
}

fn summarize_split(
    grid: &Grid,
    progress: &(dyn Fn(u64) + Sync),
    stop: &(dyn Fn() -> bool + Sync),
    split: Split,
) -> Result<Summary, SweepError> {
    (0..grid.chunks(split))
        .into_par_iter()
        .map(|k| {
            let cells = grid.chunk(k, split);
            let mut s = Summary::default();
            for i in cells.clone() {
                // Between two cells: a cell of a long duration runs for seconds in a debug build.
                if stop() {
                    break;
                }
                let cell_err = |source| SweepError::Cell { cell: i, source };
                s.cells += 1;
                if grid.spec.runs > 1 {
                    let r = grid.monte_carlo_row(i).map_err(cell_err)?;
                    let over = matches!(r.get("p_overshoot"), Some(Value::F64(p)) if *p > 0.0);
                    s.overshooting += u64::from(over);
                    s.mismatched += u64::from(r.get("lesson_match") == Some(&Value::Bool(false)));
                    s.prediction_mismatched +=
                        u64::from(r.get("prediction_match") == Some(&Value::Bool(false)));
                } else if let Some(o) = grid.lesson_cell_outcome(i) {
                    // The counts need neither the seed nor the row's other columns.
                    s.mismatched += u64::from(!o.lesson_match());
                    s.overshooting += u64::from(o.metrics.overshoot > 0);
                    s.prediction_mismatched += u64::from(!o.prediction_match());
                } else {
                    let row = grid.row(i).map_err(cell_err)?;
                    s.mismatched += u64::from(row.lesson_match == Some(false));
                    s.overshooting += u64::from(row.metrics.overshoot > 0);
                    s.prediction_mismatched += u64::from(row.prediction_match == Some(false));
                }
            }
            progress(s.cells);
            Ok(s)
        })
        .try_reduce(Summary::default, |a, b| Ok(a.add(b)))
}

/// Simulates every cell of `grid`'s shard on the current rayon pool and writes one row per cell
/// to `out`, in cell order, preceded by the header for CSV. The bytes written do not depend on
/// the number of threads. At most a few tens of thousands of rows are held in memory at once:
/// the next block of chunks is computed while the previous one is written. `progress` is told
/// how many cells each finished chunk held.
pub fn write_rows<W: Write + Send>(
    grid: &Grid,
    format: RowFormat,
    out: &mut W,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), SweepError> {
    write_rows_split(grid, format, out, progress, SPLIT)
}

fn write_rows_split<W: Write + Send>(
    grid: &Grid,
    format: RowFormat,
    out: &mut W,
    progress: &(dyn Fn(u64) + Sync),
    split: Split,
) -> Result<(), SweepError> {
    if format == RowFormat::Csv {
        writeln!(out, "{}", grid.csv_header())?;
    }
    let format_block = |block: u64| -> Result<Vec<String>, SweepError> {
        let first = block * split.chunks_per_block;
        let last = (first + split.chunks_per_block).min(grid.chunks(split));
        (first..last)
            .into_par_iter()
            .map(|k| {
                let cells = grid.chunk(k, split);
                let mut text = String::with_capacity(200 * (cells.end - cells.start) as usize);
                for i in cells.clone() {
                    grid.write_row(i, format, &mut text)
                        .map_err(|source| SweepError::Cell { cell: i, source })?;
                }
                progress(cells.end - cells.start);
                Ok(text)
            })
            .collect()
    };
    let blocks = grid.chunks(split).div_ceil(split.chunks_per_block);
    let mut done: Vec<String> = Vec::new();
    for block in 0..blocks {
        let (written, next) = rayon::join(|| write_all(out, &done), || format_block(block));
        written?;
        done = next?;
    }
    write_all(out, &done)?;
    out.flush()?;
    Ok(())
}

/// One numeric column of every row of `grid`'s shard, in cell order: what colours a heatmap
/// (`setpoint plot heatmap --colour`). `key` is any numeric key of the grid's rows
/// (`docs/output.md`): `overshoot` of a single-run grid, or `p_overshoot`, `overshoot_p95`,
/// `created_mean`, … of a Monte Carlo grid. A `null` cell is `None`.
pub fn column(grid: &Grid, key: &str) -> Result<Vec<Option<f64>>, SweepError> {
    let record = |i: u64| -> Result<Record, SweepError> {
        let cell_err = |source| SweepError::Cell { cell: i, source };
        if grid.spec.runs > 1 {
            grid.monte_carlo_row(i).map_err(cell_err)
        } else {
            Ok(grid.row(i).map_err(cell_err)?.record())
        }
    };
    let range = grid.range();
    if range.is_empty() {
        return Ok(Vec::new());
    }
    let first = record(range.start)?;
    if !matches!(
        first.get(key),
        Some(Value::U64(_) | Value::I64(_) | Value::F64(_) | Value::Null)
    ) {
        let numeric: Vec<&str> = first
            .fields
            .iter()
            .filter(|(_, v)| matches!(v, Value::U64(_) | Value::I64(_) | Value::F64(_)))
            .map(|(k, _)| k.as_ref())
            .filter(|k| !matches!(*k, "schema" | "cell" | "seed" | "first_seed"))
            .collect();
        return Err(SweepError::NoColumn {
            key: key.to_owned(),
            accepted: numeric.join(", "),
        });
    }
    range
        .into_par_iter()
        .map(|i| {
            Ok(match record(i)?.get(key) {
                Some(Value::U64(v)) => Some(*v as f64),
                Some(Value::I64(v)) => Some(*v as f64),
                Some(Value::F64(v)) => Some(*v),
                _ => None,
            })
        })
        .collect()
}

fn write_all<W: Write>(out: &mut W, texts: &[String]) -> io::Result<()> {
    texts
        .iter()
        .try_for_each(|text| out.write_all(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use setpoint_core::ControllerKind::{Intent, Ledger};

    fn axis(limit: Limit, text: &str) -> Axis {
        Axis::parse(limit, text).unwrap()
    }

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

    fn seeds_of(g: &Grid) -> Vec<(Cell, u64)> {
        (0..g.cells())
            .map(|i| (g.cell(i), g.row(i).unwrap().seed))
            .collect()
    }

    #[test]
    fn a_cells_seed_depends_on_its_coordinates_not_its_place_in_the_grid() {
        let models = parse_delay_models("fixed:20,lesson-chain,uniform:0:30").unwrap();
        let big = Grid::new(GridSpec {
            desired: axis(Limit::DESIRED, "3,6"),
            delay_models: models.clone(),
            controller: vec![Ledger, ControllerKind::Named],
            seed: 9,
            ..GridSpec::default()
        })
        .unwrap();
        for (cell, seed) in seeds_of(&big) {
            let k = match cell.delay_of {
                CellDelay::Model(k) => k,
                CellDelay::Seconds(_) => unreachable!(),
            };
            let alone = Grid::new(GridSpec {
                desired: Axis::single(cell.desired),
                delay_models: vec![models[k].clone()],
                controller: vec![cell.controller],
                seed: 9,
                ..GridSpec::default()
            })
            .unwrap();
            assert_eq!(seeds_of(&alone)[0].1, seed, "{cell:?}");
        }
        // The fixed axis and the model axis name the same delay alike.
        let by_axis = grid("20", "15", "5");
        let by_model = Grid::new(GridSpec {
            delay_models: vec![DelayModel::fixed_seconds(20)],
            controller: vec![Ledger, Intent],
            ..GridSpec::default()
        })
        .unwrap();
        assert_eq!(seeds_of(&by_axis)[0].1, seeds_of(&by_model)[0].1);
        let other_base = Grid::new(GridSpec {
            seed: 10,
            ..by_axis.spec().clone()
        })
        .unwrap();
        assert_ne!(seeds_of(&by_axis)[0].1, seeds_of(&other_base)[0].1);
    }

    #[test]
    fn monte_carlo_rows_are_the_same_alone_in_a_grid_and_on_any_thread_count() {
        let spec = GridSpec {
            delay_models: parse_delay_models("lesson-chain,uniform:0:40").unwrap(),
            period: axis(Limit::PERIOD, "15,30"),
            controller: vec![Ledger, ControllerKind::Named],
            runs: 8,
            seed: 3,
            ..GridSpec::default()
        };
        let g = Grid::new(spec.clone()).unwrap();
        let one = rows_on(1, &g, RowFormat::Jsonl, SMALL);
        assert_eq!(one, rows_on(2, &g, RowFormat::Jsonl, SMALL));
        let lines: Vec<&str> = std::str::from_utf8(&one).unwrap().lines().collect();
        let cell = g.cell(5);
        let CellDelay::Model(k) = cell.delay_of else {
            unreachable!()
        };
        let alone = Grid::new(GridSpec {
            delay_models: vec![spec.delay_models[k].clone()],
            period: Axis::single(cell.period),
            controller: vec![cell.controller],
            ..spec
        })
        .unwrap();
        let alone_row = alone.monte_carlo_row(0).unwrap().json();
        // The same numbers; only the cell's number differs.
        assert_eq!(
            alone_row.replacen("\"cell\":0,", "\"cell\":5,", 1),
            lines[5]
        );
        let spread = |line: &str, key: &str| -> f64 {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            v[key].as_f64().unwrap()
        };
        assert!(
            lines
                .iter()
                .any(|l| spread(l, "created_max") > spread(l, "created_p50")),
            "random delays spread the runs"
        );
    }

    #[test]
    fn shards_cut_the_grid_into_contiguous_runs_that_cover_it_once() {
        for cells in [0u64, 1, 7, 100] {
            for count in [1u64, 3, 8] {
                let mut next = 0;
                for index in 0..count {
                    let r = Shard { index, count }.range(cells);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, cells);
            }
        }
        assert_eq!(Shard::parse("2/8").unwrap(), Shard { index: 1, count: 8 });
        for bad in ["0/8", "9/8", "1/0", "x", "1/x"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sharded_rows_concatenated_are_the_whole_sweep() {
        let spec = GridSpec {
            delay: axis(Limit::DELAY, "0..=40:10"),
            period: axis(Limit::PERIOD, "5..=35:10"),
            controller: vec![Ledger, Intent, ControllerKind::Gated],
            ..GridSpec::default()
        };
        let whole = rows_on(
            2,
            &Grid::new(spec.clone()).unwrap(),
            RowFormat::Jsonl,
            SMALL,
        );
        let mut joined = Vec::new();
        for index in 0..4 {
            let g = Grid::new(GridSpec {
                shard: Shard { index, count: 4 },
                ..spec.clone()
            })
            .unwrap();
            joined.extend(rows_on(1, &g, RowFormat::Jsonl, SMALL));
        }
        assert_eq!(joined, whole);
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

    fn grid(delay: &str, period: &str, startup: &str) -> Grid {
        Grid::new(GridSpec {
            delay: axis(Limit::DELAY, delay),
            period: axis(Limit::PERIOD, period),
            startup: axis(Limit::STARTUP, startup),
            controller: vec![Ledger, Intent],
            ..GridSpec::default()
        })
        .unwrap()
    }

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
    fn the_lesson_row_at_g20_reads_as_the_lesson_prints_it() {
        let g = Grid::new(GridSpec {
            delay: Axis::single(20),
            ..GridSpec::default()
        })
        .unwrap();
        let row = g.row(0).unwrap();
        let mut csv = String::new();
        row.write_to(RowFormat::Csv, &mut csv);
        let seed = row.seed;
        assert_eq!(
            csv,
            format!("{SCHEMA},0,6,15,20,fixed:20,5,900,ledger,,,{seed},fast,61,0.5245901639344263,16,8,16,8,6,375,2,12,200,,,0,,,,,,,6,true,6,true\n")
        );
        let mut json = String::new();
        row.write_to(RowFormat::Jsonl, &mut json);
        assert_eq!(
            json,
            format!("{{\"schema\":{SCHEMA},\"cell\":0,\"desired\":6,\"period\":15,\"delay\":20,\"delay_model\":\"fixed:20\",\"startup\":5,\"duration\":900,\"controller\":\"ledger\",\"ttl\":null,\"burst\":null,\"seed\":\"{seed}\",\"engine\":\"fast\",\
             \"rounds\":61,\"work_per_round\":0.5245901639344263,\"created\":16,\"unneeded\":8,\
             \"delete_commands\":16,\"deleted\":8,\"overshoot\":6,\"stable\":375,\"died\":2,\
             \"peak_live\":12,\"copy_seconds_above\":200,\"duplicate_names\":null,\"absorbed_creates\":null,\"lost_deletes\":0,\"surge_budget\":null,\"surge\":null,\"surge_copy_seconds\":null,\"rollout_overshoot\":null,\"rollout_done\":null,\"rollout_stalled\":null,\"lesson_prediction\":6,\"lesson_match\":true,\"prediction\":6,\"prediction_match\":true}}\n")
        );
    }

    #[test]
    fn the_fast_row_writer_prints_exactly_the_rows_record() {
        let g = Grid::new(GridSpec {
            delay_models: parse_delay_models("fixed:0,fixed:45,lesson-chain").unwrap(),
            period: axis(Limit::PERIOD, "5,30"),
            controller: ControllerKind::ALL.to_vec(),
            ..GridSpec::default()
        })
        .unwrap();
        for i in 0..g.cells() {
            let row = g.row(i).unwrap();
            let (mut csv, mut json) = (String::new(), String::new());
            row.write_to(RowFormat::Csv, &mut csv);
            row.write_to(RowFormat::Jsonl, &mut json);
            let r = row.record();
            assert_eq!(csv, format!("{}\n", r.csv_row()), "cell {i}");
            assert_eq!(json, format!("{}\n", r.json()), "cell {i}");
            assert_eq!(SweepRow::csv_header(), r.csv_header());
        }
    }

    #[test]
    fn a_column_reads_one_key_of_every_row_and_refuses_unknown_keys() {
        let g = grid("0..=60:30", "10,30", "5");
        let over = column(&g, "overshoot").unwrap();
        let rows: Vec<Option<f64>> = (0..g.cells())
            .map(|i| Some(g.row(i).unwrap().metrics.overshoot as f64))
            .collect();
        assert_eq!(over, rows);
        let err = column(&g, "p_overshoot").unwrap_err().to_string();
        assert!(err.contains("accepted: desired, period,"), "{err}");
        let mc = Grid::new(GridSpec {
            runs: 5,
            ..g.spec().clone()
        })
        .unwrap();
        let p = column(&mc, "p_overshoot").unwrap();
        for (p, o) in p.iter().zip(&over) {
            assert_eq!(*p, Some(if o.unwrap() > 0.0 { 1.0 } else { 0.0 }));
        }
    }

    /// A grid of one cell with random coordinates, of any controller and delay model.
    fn one_cell_grid() -> impl proptest::strategy::Strategy<Value = Grid> {
        use proptest::prelude::*;
        let model = prop_oneof![
            (0u64..=400).prop_map(|g| format!("fixed:{g}")),
            (0u64..=30, 0u64..=60).prop_map(|(a, b)| format!("uniform:{a}:{}", a + b)),
            Just("lesson-chain".to_owned()),
        ];
        (
            0u64..=40,
            1u64..=120,
            prop_oneof![Just(None), Just(Some(0u64)), (0u64..=300).prop_map(Some)],
            model,
            0u64..=80,
            0usize..ControllerKind::ALL.len(),
            0u64..=1200,
            any::<u64>(),
            proptest::option::of((0u64..=1200, 0u64..=10)),
            proptest::option::of(
                (0u64..=20, 0u64..=20).prop_map(|(a, b)| format!("uniform:{a}:{}", a + b)),
            ),
        )
            .prop_map(
                |(desired, period, axis_delay, model, startup, c, duration, seed, death, b)| {
                    Grid::new(GridSpec {
                        desired: Axis::single(desired),
                        period: Axis::single(period),
                        delay: Axis::single(axis_delay.unwrap_or(0)),
                        delay_models: match axis_delay {
                            Some(_) => Vec::new(),
                            None => parse_delay_models(&model).unwrap(),
                        },
                        startup: Axis::single(startup),
                        startup_models: b
                            .map(|b| parse_startup_models(&b).unwrap())
                            .unwrap_or_default(),
                        controller: vec![ControllerKind::ALL[c]],
                        duration,
                        deaths: death
                            .map(|(at, count)| vec![Death { at, count }])
                            .unwrap_or_default(),
                        seed,
                        ..GridSpec::default()
                    })
                    .unwrap()
                },
            )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 300, ..Default::default() })]

        /// The row writer prints exactly what the plain path prints (`format!` for CSV, the
        /// derived `Serialize` for JSON) and what the row's [`Record`] prints, on random cells of
        /// every controller and delay model.
        #[test]
        fn the_row_writer_equals_the_plain_serde_and_csv_path(g in one_cell_grid()) {
            let row = g.row(0).unwrap();
            let r = row.record();
            for format in [RowFormat::Csv, RowFormat::Jsonl] {
                let (mut fast, mut plain) = (String::from("x"), String::from("x"));
                row.write_to(format, &mut fast);
                row.write_plain(format, &mut plain);
                proptest::prop_assert_eq!(&fast, &plain);
                let record = match format {
                    RowFormat::Csv => r.csv_row(),
                    RowFormat::Jsonl => r.json(),
                };
                proptest::prop_assert_eq!(&fast, &format!("x{record}\n"));
            }
            proptest::prop_assert_eq!(SweepRow::csv_header(), r.csv_header());
        }
    }

    /// A grid over startup models, delays, periods and the two lesson controllers.
    fn startup_grid(models: &str, seed: u64) -> Grid {
        Grid::new(GridSpec {
            startup_models: parse_startup_models(models).unwrap(),
            delay: Axis::parse(Limit::DELAY, "0,20").unwrap(),
            period: Axis::parse(Limit::PERIOD, "10,30").unwrap(),
            controller: vec![Ledger, Intent],
            seed,
            ..GridSpec::default()
        })
        .unwrap()
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
    fn a_startup_model_cells_seed_is_its_own_wherever_it_is_swept() {
        let big = startup_grid("uniform:1:9,fixed:3", 4);
        let alone = startup_grid("fixed:3", 4);
        let in_big: Vec<u64> = (0..big.cells())
            .filter(|&i| big.row(i).unwrap().startup == StartupName::Model("fixed:3"))
            .map(|i| big.row(i).unwrap().seed)
            .collect();
        let by_itself: Vec<u64> = (0..alone.cells())
            .map(|i| alone.row(i).unwrap().seed)
            .collect();
        assert_eq!(in_big, by_itself);
        let all: std::collections::BTreeSet<u64> =
            (0..big.cells()).map(|i| big.row(i).unwrap().seed).collect();
        assert_eq!(all.len() as u64, big.cells(), "no two cells share a seed");
        let other_base = startup_grid("fixed:3", 5);
        assert_ne!(other_base.row(0).unwrap().seed, by_itself[0]);
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

    #[test]
    fn a_startup_model_past_the_limits_is_refused_by_the_grid() {
        let e = Grid::new(GridSpec {
            startup_models: vec![DelayModel::Fixed(crate::delay::MAX_DELAY_MS + 1000)],
            ..GridSpec::default()
        })
        .unwrap_err();
        assert!(matches!(e, GridError::BadStartupModels { .. }), "{e}");
    }

    #[test]
    fn the_csv_header_has_one_column_per_row_field() {
        let header = SweepRow::csv_header();
        let g = grid("0", "15", "5");
        let mut row = String::new();
        g.row(0).unwrap().write_to(RowFormat::Csv, &mut row);
        assert_eq!(header.split(',').count(), row.trim_end().split(',').count());
    }

    fn rows_on(threads: usize, g: &Grid, format: RowFormat, split: Split) -> Vec<u8> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut out = Vec::new();
        pool.install(|| write_rows_split(g, format, &mut out, &|_| {}, split))
            .unwrap();
        out
    }

    /// Odd sizes, so that chunks and blocks end in the middle of every axis.
    const SMALL: Split = Split {
        chunk_cells: 7,
        chunks_per_block: 3,
    };

    #[test]
    fn rows_are_identical_on_one_thread_and_on_three_and_in_cell_order() {
        let g = grid("0..=199:13", "1..=100:17", "0..=49:9");
        assert!(g.cells() > 10 * SMALL.chunk_cells * SMALL.chunks_per_block);
        for format in [RowFormat::Csv, RowFormat::Jsonl] {
            let one = rows_on(1, &g, format, SMALL);
            assert_eq!(one, rows_on(3, &g, format, SMALL), "{format:?}");
            assert_eq!(one, rows_on(2, &g, format, SPLIT), "{format:?}");
            let mut expected = String::new();
            if format == RowFormat::Csv {
                expected.push_str(&SweepRow::csv_header());
                expected.push('\n');
            }
            for i in 0..g.cells() {
                g.row(i).unwrap().write_to(format, &mut expected);
            }
            assert_eq!(String::from_utf8(one).unwrap(), expected, "{format:?}");
        }
    }

    #[test]
    fn summary_counts_agree_with_the_rows_on_any_thread_count() {
        let g = grid("0..=90:10", "1..=60:4", "0..=10:5");
        let rows: Vec<SweepRow> = (0..g.cells()).map(|i| g.row(i).unwrap()).collect();
        let expected = Summary {
            cells: g.cells(),
            mismatched: rows
                .iter()
                .filter(|r| r.lesson_match == Some(false))
                .count() as u64,
            overshooting: rows.iter().filter(|r| r.metrics.overshoot > 0).count() as u64,
            prediction_mismatched: rows
                .iter()
                .filter(|r| r.prediction_match == Some(false))
                .count() as u64,
        };
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let seen = std::sync::atomic::AtomicU64::new(0);
            let got = pool.install(|| {
                summarize_split(
                    &g,
                    &|n| {
                        seen.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                    },
                    &|| false,
                    SMALL,
                )
            });
            assert_eq!(got.unwrap(), expected, "{threads} threads");
            assert_eq!(seen.into_inner(), g.cells(), "progress covers every cell");
        }
    }

    #[test]
    fn the_lesson_grid_swept_mismatches_nowhere() {
        let g = Grid::new(GridSpec {
            delay: axis(Limit::DELAY, "0,10,20,30,45,60,90"),
            period: axis(Limit::PERIOD, "5,10,15,20,30,45,60,90"),
            ..GridSpec::default()
        })
        .unwrap();
        let s = summarize(&g, &|_| {}).unwrap();
        assert_eq!((s.cells, s.mismatched), (56, 0));
    }

    #[test]
    fn a_summary_stopped_counts_only_the_cells_it_ran() {
        let g = Grid::new(GridSpec {
            delay: axis(Limit::DELAY, "0..=99"),
            period: axis(Limit::PERIOD, "1..=50"),
            ..GridSpec::default()
        })
        .unwrap();
        let asked = std::sync::atomic::AtomicU64::new(0);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let s = pool
            .install(|| {
                summarize_split(
                    &g,
                    &|_| {},
                    &|| asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= 10,
                    SMALL,
                )
            })
            .unwrap();
        assert_eq!(s.cells, 10, "ten cells ran, then it stopped");
        assert_eq!(summarize_until(&g, &|_| {}, &|| true).unwrap().cells, 0);
    }
}
