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
//!
//! # Layout
//! - `axis`: the numeric axes ([`Axis`]) and the lists of controllers and models.
//! - `shard`: which contiguous part of the cells one machine runs ([`Shard`]).
//! - `grid`: the validated grid ([`Grid`]), which cell each number is ([`Cell`]), and the
//!   scenario each cell runs.
//! - `seed`: a cell's seed ([`cell_seed`]) and the canonical names of its delay and startup.
//! - `runner`: the per-cell runners: the fast engine for lesson cells, the general engine for
//!   the rest, and Monte Carlo rows.
//! - `row`: the single-run row ([`SweepRow`]) and its CSV and JSON writing.
//! - `parallel`: every cell of a shard on the rayon pool: [`summarize`], [`write_rows`],
//!   [`column()`].

mod axis;
mod grid;
mod parallel;
mod row;
mod runner;
mod seed;
mod shard;

pub use axis::{parse_controllers, parse_delay_models, parse_startup_models, Axis};
pub use grid::{Cell, CellDelay, Grid, GridSpec};
pub use parallel::{column, summarize, summarize_until, write_rows, Summary, SweepError};
pub use row::{RowFormat, SweepRow};
pub use seed::{cell_seed, model_text, ModelName, StartupName};
pub use shard::{Shard, MAX_SHARDS};

use thiserror::Error;

use crate::lesson_world::SettingError;

/// The largest grid a sweep accepts, in cells. A cell costs well under a microsecond on the
/// lesson's settings, so this is a few minutes of work and, as CSV, about ten gigabytes of output:
/// past it a grid is a mistake more often than a plan.
pub const MAX_CELLS: u64 = 100_000_000;
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

/// Grids the tests of several parts share.
#[cfg(test)]
mod testing {
    use super::{parse_startup_models, Axis, Grid, GridSpec};
    use crate::lesson_world::Limit;
    use setpoint_core::ControllerKind::{Intent, Ledger};

    pub(super) fn axis(limit: Limit, text: &str) -> Axis {
        Axis::parse(limit, text).unwrap()
    }

    pub(super) fn grid(delay: &str, period: &str, startup: &str) -> Grid {
        Grid::new(GridSpec {
            delay: axis(Limit::DELAY, delay),
            period: axis(Limit::PERIOD, period),
            startup: axis(Limit::STARTUP, startup),
            controller: vec![Ledger, Intent],
            ..GridSpec::default()
        })
        .unwrap()
    }

    /// A grid over startup models, delays, periods and the two lesson controllers.
    pub(super) fn startup_grid(models: &str, seed: u64) -> Grid {
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
}
