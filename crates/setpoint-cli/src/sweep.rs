//! `setpoint sweep`: its flags, and the driver that runs a grid with a progress bar.

use std::io::{self, IsTerminal, Write};

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use setpoint_core::ControllerKind;
use setpoint_sim::sweep::{self, parse_controllers};
use setpoint_sim::{parse_deaths, Axis, Grid, GridSpec, Limit, RowFormat};

use crate::args::DeathList;

/// `setpoint sweep`.
///
/// Each grid flag takes a list (`0,5,10`), an inclusive range (`0..=120`) or a stepped range
/// (`0..=120:5`); items of a list may be ranges. Cells come out with desired varying slowest and
/// controller fastest.
#[derive(Debug, Args)]
#[command(
    after_help = "Grid flags take a list like 0,5,10, an inclusive range like 0..=120, or a \
stepped range like 0..=120:5.\nRows come out in cell order (desired slowest, controller fastest), \
byte for byte the same on any number of threads (RAYON_NUM_THREADS sets it; default: all cores)."
)]
pub struct SweepArgs {
    /// Declared copies to scan.
    #[arg(long, default_value = "6", value_name = "GRID", value_parser = desired_axis, allow_hyphen_values = true)]
    pub desired: Axis,
    /// Loop periods U to scan, in seconds.
    #[arg(short = 'U', long, default_value = "15", value_name = "GRID", value_parser = period_axis, allow_hyphen_values = true)]
    pub period: Axis,
    /// Report delays G to scan, in seconds.
    #[arg(short = 'G', long, default_value = "0", value_name = "GRID", value_parser = delay_axis, allow_hyphen_values = true)]
    pub delay: Axis,
    /// Startup times B to scan, in seconds.
    #[arg(short = 'B', long, default_value = "5", value_name = "GRID", value_parser = startup_axis, allow_hyphen_values = true)]
    pub startup: Axis,
    /// Controllers to scan: a list of ledger, intent.
    #[arg(long, default_value = "ledger", value_name = "LIST", value_parser = controllers)]
    pub controller: ControllerList,
    /// The last second of every run (seconds 0 to DURATION are simulated).
    #[arg(long, default_value = "900", value_name = "SECONDS", value_parser = duration, allow_negative_numbers = true)]
    pub duration: u64,
    /// Scripted deaths of every run: at second AT the COUNT oldest live copies die; `none` for none.
    #[arg(long, default_value = "300:2", value_name = "AT:COUNT[,AT:COUNT...]",
          value_parser = deaths, allow_hyphen_values = true)]
    pub deaths: DeathList,
    /// Output format of the rows, or of the counts with --summary.
    #[arg(long, value_enum, default_value = "csv")]
    pub format: SweepFormat,
    /// Print only the counts: cells, cells that mismatch the lesson's relation, cells with
    /// overshoot above zero.
    #[arg(long)]
    pub summary: bool,
}

/// Output formats of `sweep`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum SweepFormat {
    /// A header line, then one line per cell.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

/// A parsed `--controller` list. A newtype, so that clap takes the whole list as one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerList(pub Vec<ControllerKind>);

pub(crate) fn axis(limit: Limit, s: &str) -> Result<Axis, String> {
    Axis::parse(limit, s).map_err(|e| e.to_string())
}
pub(crate) fn desired_axis(s: &str) -> Result<Axis, String> {
    axis(Limit::DESIRED, s)
}
pub(crate) fn period_axis(s: &str) -> Result<Axis, String> {
    axis(Limit::PERIOD, s)
}
pub(crate) fn delay_axis(s: &str) -> Result<Axis, String> {
    axis(Limit::DELAY, s)
}
pub(crate) fn startup_axis(s: &str) -> Result<Axis, String> {
    axis(Limit::STARTUP, s)
}
pub(crate) fn controllers(s: &str) -> Result<ControllerList, String> {
    parse_controllers(s)
        .map(ControllerList)
        .map_err(|e| e.to_string())
}
fn duration(s: &str) -> Result<u64, String> {
    Limit::DURATION.parse(s).map_err(|e| e.to_string())
}
fn deaths(s: &str) -> Result<DeathList, String> {
    parse_deaths(s).map(DeathList).map_err(|e| e.to_string())
}

/// Validates the grid, then runs it, writing to stdout as it goes. The grid's size is checked
/// before any cell runs.
pub fn run(args: SweepArgs) -> anyhow::Result<()> {
    let grid = Grid::new(GridSpec {
        desired: args.desired,
        period: args.period,
        delay: args.delay,
        startup: args.startup,
        controller: args.controller.0,
        duration: args.duration,
        deaths: args.deaths.0,
    })?;
    let bar = progress_bar("sweep", grid.cells());
    let tick = |n: u64| bar.inc(n);
    let mut out = io::BufWriter::with_capacity(
        1 << 16,
        AroundBar {
            bar: &bar,
            inner: io::stdout(),
        },
    );
    let result = if args.summary {
        let s = sweep::summarize(&grid, &tick);
        bar.finish_and_clear();
        match args.format {
            SweepFormat::Csv => writeln!(
                out,
                "cells,mismatched,overshooting,prediction_mismatched\n{},{},{},{}",
                s.cells, s.mismatched, s.overshooting, s.prediction_mismatched
            ),
            SweepFormat::Jsonl => writeln!(out, "{}", serde_json::to_string(&s)?),
        }
        .and_then(|()| out.flush())
    } else {
        let format = match args.format {
            SweepFormat::Csv => RowFormat::Csv,
            SweepFormat::Jsonl => RowFormat::Jsonl,
        };
        let r = sweep::write_rows(&grid, format, &mut out, &tick);
        bar.finish_and_clear();
        r
    };
    result.context("writing to stdout")
}

/// Standard output that lifts the progress bar while it writes, so that rows printed to the same
/// terminal are never overdrawn by it.
struct AroundBar<'a, W> {
    bar: &'a ProgressBar,
    inner: W,
}

impl<W: Write> Write for AroundBar<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bar.suspend(|| self.inner.write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.bar.suspend(|| self.inner.write_all(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A bar over `cells`, labelled `what`, on stderr when stderr is a terminal; otherwise one that
/// draws nothing, so pipes and logs stay clean.
pub(crate) fn progress_bar(what: &str, cells: u64) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(cells);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} {what} [{{bar:40}}] {{human_pos}}/{{human_len}} cells, {{elapsed}} elapsed, eta {{eta}}"
        ))
        .expect("the template is valid")
        .progress_chars("=> "),
    );
    bar
}
