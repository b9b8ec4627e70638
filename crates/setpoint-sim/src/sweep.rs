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

use std::fmt::Write as _;
use std::io::{self, Write};
use std::ops::Range;

use rayon::prelude::*;
use serde::{Serialize, Serializer};
use setpoint_core::ControllerKind;
use thiserror::Error;

use crate::engine::simulate;
use crate::lesson::lesson_prediction;
use crate::lesson_world::{Death, LessonSpec, LessonWorld, Limit, SettingError};
use crate::metrics::Metrics;
use crate::predict::predict;

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
        "controller '{value}': {reason}; accepted: a list of ledger, intent, such as ledger,intent"
    )]
    BadControllers {
        /// The text as given.
        value: String,
        /// What is wrong with it.
        reason: String,
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

/// Parses a comma-separated list of controller names, kept in the order given.
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
            match name.parse::<ControllerKind>() {
                Ok(kind) if kind.is_lesson() => Ok(kind),
                // The lab's controllers need the general engine, which sweeps do not drive.
                Ok(kind) => Err(bad(format!(
                    "controller '{kind}' runs only in `setpoint run`"
                ))),
                Err(_) => Err(bad(format!("unknown controller '{name}'"))),
            }
        })
        .collect()
}

/// The raw settings of a sweep, before validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GridSpec {
    /// Declared copies to scan.
    pub desired: Axis,
    /// Loop periods U, in seconds.
    pub period: Axis,
    /// Report delays G, in seconds.
    pub delay: Axis,
    /// Startup times B, in seconds.
    pub startup: Axis,
    /// Controllers.
    pub controller: Vec<ControllerKind>,
    /// The last second of every run.
    pub duration: u64,
    /// The scripted deaths of every run.
    pub deaths: Vec<Death>,
}

impl Default for GridSpec {
    /// One cell: the lesson's scenario (see [`LessonSpec::default`]).
    fn default() -> Self {
        let base = LessonSpec::default();
        GridSpec {
            desired: Axis::single(base.desired),
            period: Axis::single(base.period),
            delay: Axis::single(base.delay),
            startup: Axis::single(base.startup),
            controller: vec![base.controller],
            duration: base.duration,
            deaths: base.deaths,
        }
    }
}

/// A validated grid: every value inside its [`Limit`], at most [`MAX_CELLS`] cells.
#[derive(Debug, Clone)]
pub struct Grid {
    spec: GridSpec,
    /// A valid scenario with the shared settings; each cell overrides its five parameters.
    base: LessonWorld,
    cells: u64,
}

/// The parameters of one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// Declared copies.
    pub desired: u64,
    /// Loop period U, in seconds.
    pub period: u64,
    /// Report delay G, in seconds.
    pub delay: u64,
    /// Startup time B, in seconds.
    pub startup: u64,
    /// The controller.
    pub controller: ControllerKind,
}

impl Grid {
    /// Validates `spec`: the shared settings through [`LessonWorld::new`], and the size.
    pub fn new(spec: GridSpec) -> Result<Self, GridError> {
        let base = LessonWorld::new(LessonSpec {
            duration: spec.duration,
            deaths: spec.deaths.clone(),
            ..LessonSpec::default()
        })?;
        if let Some(&kind) = spec.controller.iter().find(|k| !k.is_lesson()) {
            return Err(SettingError::NotALessonController(kind).into());
        }
        let cells = [
            spec.desired.len(),
            spec.period.len(),
            spec.delay.len(),
            spec.startup.len(),
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
        Ok(Grid {
            spec,
            base,
            cells: cells as u64,
        })
    }

    /// The settings the grid was built from.
    pub fn spec(&self) -> &GridSpec {
        &self.spec
    }

    /// How many cells the grid holds.
    pub fn cells(&self) -> u64 {
        self.cells
    }

    /// The parameters of cell `index` (below [`Self::cells`]), in row order.
    pub fn cell(&self, index: u64) -> Cell {
        let s = &self.spec;
        let mut i = index;
        let mut digit = |len: u64| {
            let d = i % len;
            i /= len;
            d
        };
        // The fastest axis comes off first.
        let controller = s.controller[digit(s.controller.len() as u64) as usize];
        let startup = s.startup.get(digit(s.startup.len()));
        let delay = s.delay.get(digit(s.delay.len()));
        let period = s.period.get(digit(s.period.len()));
        let desired = s.desired.get(digit(s.desired.len()));
        Cell {
            desired,
            period,
            delay,
            startup,
            controller,
        }
    }

    /// The scenario of a cell of this grid.
    pub fn scenario(&self, cell: Cell) -> LessonWorld {
        self.base.with_cell(cell)
    }

    /// Simulates cell `index` and returns its row.
    pub fn row(&self, index: u64) -> SweepRow {
        let cell = self.cell(index);
        let scenario = self.scenario(cell);
        let metrics = simulate(&scenario);
        let exact = predict(scenario.spec()).overshoot;
        let prediction = lesson_prediction(cell.desired, cell.delay, cell.startup, cell.period);
        SweepRow {
            desired: cell.desired,
            period: cell.period,
            delay: cell.delay,
            startup: cell.startup,
            duration: self.spec.duration,
            controller: cell.controller,
            metrics,
            lesson_prediction: prediction,
            lesson_match: i128::from(metrics.overshoot) == prediction,
            prediction: exact,
            prediction_match: metrics.overshoot == exact,
        }
    }

    /// The cell numbers of chunk `k`.
    fn chunk(&self, k: u64, split: Split) -> Range<u64> {
        let start = k * split.chunk_cells;
        start..(start + split.chunk_cells).min(self.cells)
    }

    fn chunks(&self, split: Split) -> u64 {
        self.cells.div_ceil(split.chunk_cells)
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

/// One row of a sweep: a cell's parameters, its metrics, and the lesson's relation on it.
///
/// Its JSON keys, in order, are the parameters (named as `setpoint run`'s flags), the keys of
/// [`Metrics`], then `lesson_prediction` and `lesson_match`. The CSV columns are the same.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SweepRow {
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
    /// The controller, by its command-line name.
    #[serde(serialize_with = "controller_name")]
    pub controller: ControllerKind,
    /// What the run measured.
    #[serde(flatten)]
    pub metrics: Metrics,
    /// The lesson's relation `desired × (⌈(G + B) / U⌉ − 1)`, in copies; negative when
    /// `G + B = 0`.
    pub lesson_prediction: i128,
    /// Whether the measured overshoot equals `lesson_prediction`.
    pub lesson_match: bool,
    /// The exact predictor's overshoot ([`crate::predict::predict`], `docs/relation.md`), in
    /// copies: 0 for `intent`, which counts its own work in flight and never overshoots.
    pub prediction: u64,
    /// Whether the measured overshoot equals `prediction`.
    pub prediction_match: bool,
}

fn controller_name<S: Serializer>(c: &ControllerKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
}

impl SweepRow {
    /// The CSV header, without a newline.
    pub fn csv_header() -> String {
        format!(
            "desired,period,delay,startup,duration,controller,{},lesson_prediction,lesson_match,prediction,prediction_match",
            Metrics::CSV_HEADER
        )
    }

    /// Appends the row in `format`, with a newline.
    pub fn write_to(&self, format: RowFormat, out: &mut String) {
        match format {
            RowFormat::Csv => {
                // Writing into a String cannot fail.
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{},{},{}",
                    self.desired,
                    self.period,
                    self.delay,
                    self.startup,
                    self.duration,
                    self.controller.name(),
                    self.metrics.csv_row(),
                    self.lesson_prediction,
                    self.lesson_match,
                    self.prediction,
                    self.prediction_match
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
    /// Cells whose measured overshoot differs from the lesson's relation.
    pub mismatched: u64,
    /// Cells whose overshoot is above zero.
    pub overshooting: u64,
    /// Cells whose measured overshoot differs from the exact predictor (0 is the claim).
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

/// Simulates every cell of `grid` on the current rayon pool and counts. `progress` is told how
/// many cells each finished chunk held, from any thread, in no particular order.
pub fn summarize(grid: &Grid, progress: &(dyn Fn(u64) + Sync)) -> Summary {
    summarize_split(grid, progress, SPLIT)
}

fn summarize_split(grid: &Grid, progress: &(dyn Fn(u64) + Sync), split: Split) -> Summary {
    (0..grid.chunks(split))
        .into_par_iter()
        .map(|k| {
            let cells = grid.chunk(k, split);
            let mut s = Summary::default();
            for i in cells.clone() {
                let row = grid.row(i);
                s.cells += 1;
                s.mismatched += u64::from(!row.lesson_match);
                s.overshooting += u64::from(row.metrics.overshoot > 0);
                s.prediction_mismatched += u64::from(!row.prediction_match);
            }
            progress(cells.end - cells.start);
            s
        })
        .reduce(Summary::default, Summary::add)
}

/// Simulates every cell of `grid` on the current rayon pool and writes one row per cell to `out`,
/// in cell order, preceded by the header for CSV. The bytes written do not depend on the number
/// of threads. At most a few tens of thousands of rows are held in memory at once: the next block
/// of chunks is computed while the previous one is written. `progress` is told how many cells each
/// finished chunk held.
pub fn write_rows<W: Write + Send>(
    grid: &Grid,
    format: RowFormat,
    out: &mut W,
    progress: &(dyn Fn(u64) + Sync),
) -> io::Result<()> {
    write_rows_split(grid, format, out, progress, SPLIT)
}

fn write_rows_split<W: Write + Send>(
    grid: &Grid,
    format: RowFormat,
    out: &mut W,
    progress: &(dyn Fn(u64) + Sync),
    split: Split,
) -> io::Result<()> {
    if format == RowFormat::Csv {
        writeln!(out, "{}", SweepRow::csv_header())?;
    }
    let format_block = |block: u64| -> Vec<String> {
        let first = block * split.chunks_per_block;
        let last = (first + split.chunks_per_block).min(grid.chunks(split));
        (first..last)
            .into_par_iter()
            .map(|k| {
                let cells = grid.chunk(k, split);
                let mut text = String::with_capacity(160 * (cells.end - cells.start) as usize);
                for i in cells.clone() {
                    grid.row(i).write_to(format, &mut text);
                }
                progress(cells.end - cells.start);
                text
            })
            .collect()
    };
    let blocks = grid.chunks(split).div_ceil(split.chunks_per_block);
    let mut done: Vec<String> = Vec::new();
    for block in 0..blocks {
        let (written, next) = rayon::join(|| write_all(out, &done), || format_block(block));
        written?;
        done = next;
    }
    write_all(out, &done)?;
    out.flush()
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
    fn grids_refuse_the_labs_controllers_instead_of_panicking_in_a_cell() {
        let err = Grid::new(GridSpec {
            controller: vec![Ledger, ControllerKind::Named],
            ..GridSpec::default()
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("runs only in the general engine"),
            "{err}"
        );
    }

    #[test]
    fn controllers_parse_as_a_list_and_refuse_ranges_and_unknown_names() {
        assert_eq!(
            parse_controllers("intent,ledger").unwrap(),
            vec![Intent, Ledger]
        );
        for bad in ["", "ledger,", "ledger..=intent", "pid", "ledger,named"] {
            let msg = parse_controllers(bad).unwrap_err().to_string();
            assert!(
                msg.contains("accepted: a list of ledger, intent"),
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
            let row = g.row(i);
            let m = simulate(
                &LessonWorld::new(LessonSpec {
                    desired: row.desired,
                    period: row.period,
                    delay: row.delay,
                    startup: row.startup,
                    controller: row.controller,
                    ..LessonSpec::default()
                })
                .unwrap(),
            );
            assert_eq!(row.metrics, m, "cell {i}");
            assert_eq!(
                row.lesson_prediction,
                lesson_prediction(row.desired, row.delay, row.startup, row.period)
            );
            assert_eq!(
                row.lesson_match,
                i128::from(m.overshoot) == row.lesson_prediction
            );
        }
    }

    #[test]
    fn the_lesson_row_at_g20_reads_as_the_lesson_prints_it() {
        let g = Grid::new(GridSpec {
            delay: Axis::single(20),
            ..GridSpec::default()
        })
        .unwrap();
        let mut csv = String::new();
        g.row(0).write_to(RowFormat::Csv, &mut csv);
        assert_eq!(
            csv,
            "6,15,20,5,900,ledger,61,0.5245901639344263,16,8,16,8,6,375,2,12,200,6,true,6,true\n"
        );
        let mut json = String::new();
        g.row(0).write_to(RowFormat::Jsonl, &mut json);
        assert_eq!(
            json,
            "{\"desired\":6,\"period\":15,\"delay\":20,\"startup\":5,\"duration\":900,\"controller\":\"ledger\",\
             \"rounds\":61,\"work_per_round\":0.5245901639344263,\"created\":16,\"unneeded\":8,\
             \"delete_commands\":16,\"deleted\":8,\"overshoot\":6,\"stable\":375,\"died\":2,\
             \"peak_live\":12,\"copy_seconds_above\":200,\"lesson_prediction\":6,\"lesson_match\":true,\"prediction\":6,\"prediction_match\":true}\n"
        );
    }

    #[test]
    fn the_csv_header_has_one_column_per_row_field() {
        let header = SweepRow::csv_header();
        let g = grid("0", "15", "5");
        let mut row = String::new();
        g.row(0).write_to(RowFormat::Csv, &mut row);
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
                g.row(i).write_to(format, &mut expected);
            }
            assert_eq!(String::from_utf8(one).unwrap(), expected, "{format:?}");
        }
    }

    #[test]
    fn summary_counts_agree_with_the_rows_on_any_thread_count() {
        let g = grid("0..=90:10", "1..=60:4", "0..=10:5");
        let rows: Vec<SweepRow> = (0..g.cells()).map(|i| g.row(i)).collect();
        let expected = Summary {
            cells: g.cells(),
            mismatched: rows.iter().filter(|r| !r.lesson_match).count() as u64,
            overshooting: rows.iter().filter(|r| r.metrics.overshoot > 0).count() as u64,
            prediction_mismatched: rows.iter().filter(|r| !r.prediction_match).count() as u64,
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
                    SMALL,
                )
            });
            assert_eq!(got, expected, "{threads} threads");
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
        let s = summarize(&g, &|_| {});
        assert_eq!((s.cells, s.mismatched), (56, 0));
    }
}
