//! `setpoint sweep`: its flags, and the driver that runs a grid with a progress bar.

use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args};
use indicatif::ProgressBar;
use setpoint_core::ControllerKind;
use setpoint_sim::delay::DelayModel;
use setpoint_sim::merge;
use setpoint_sim::montecarlo::RUNS;
use setpoint_sim::output::{self, Record};
use setpoint_sim::scenario::{BURST, TTL};
use setpoint_sim::sweep::{
    self, parse_controllers, parse_delay_models, parse_startup_models, Shard, SweepError,
};
use setpoint_sim::{parse_deaths, Axis, Grid, GridSpec, Limit, RowFormat};

use crate::output::Format;
use crate::shared_args::DeathList;

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
    /// A scenario file (TOML, see `scenarios/`) that gives every setting the grid flags typed
    /// on the command line do not: one workload, deaths by count as its only events.
    #[arg(value_name = "SCENARIO.toml")]
    pub scenario: Option<PathBuf>,
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
    /// Report-delay models to scan, in place of --delay: a list of fixed:S, uniform:MIN:MAX and
    /// lesson-chain (seconds to the millisecond), such as fixed:20,lesson-chain.
    #[arg(long, value_name = "LIST", value_parser = delay_models, conflicts_with = "delay")]
    pub delay_model: Option<DelayModels>,
    /// Startup-time models to scan, in place of --startup: a list in the syntax of
    /// --delay-model (empirical:FILE takes the file's startup model). Each copy's startup is
    /// drawn when it is created; every cell runs on the general engine.
    #[arg(long, value_name = "LIST", value_parser = startup_models, conflicts_with = "startup")]
    pub startup_model: Option<DelayModels>,
    /// TTLs of the expectations controller to scan, in seconds [default: 300].
    #[arg(long, value_name = "GRID", value_parser = ttl_axis, allow_hyphen_values = true)]
    pub ttl: Option<Axis>,
    /// Burst limits of the expectations controller to scan, in copies per pass [default: 500].
    #[arg(long, value_name = "GRID", value_parser = burst_axis, allow_hyphen_values = true)]
    pub burst: Option<Axis>,
    /// Controllers to scan: a list of ledger, intent, expectations, named, gated. Cells outside
    /// the lesson's world (another controller, a random delay) run on the general engine.
    #[arg(long, default_value = "ledger", value_name = "LIST", value_parser = controllers)]
    pub controller: ControllerList,
    /// Monte Carlo: N seeded runs per cell; each row then carries the mean, p50, p95 and max of
    /// every metric and p_overshoot.
    #[arg(long, default_value = "1", value_name = "N", value_parser = runs, allow_negative_numbers = true)]
    pub runs: u64,
    /// The base seed; each cell's seeds derive from it and the cell's coordinates.
    #[arg(long, default_value = "1", value_name = "N")]
    pub seed: u64,
    /// Run only shard I of N (I from 1): a contiguous 1/N of the cells, in cell order, and end
    /// with a trailer line naming the shard and the grid's cell count (CSV and JSON).
    /// `setpoint merge` joins the shards' outputs, in any order, into the whole sweep's bytes.
    /// A Kubernetes Indexed Job or a Slurm array passes its index here (`docs/distributed.md`).
    #[arg(long, value_name = "I/N", value_parser = shard)]
    pub shard: Option<Shard>,
    /// The last second of every run (seconds 0 to DURATION are simulated).
    #[arg(long, default_value = "900", value_name = "SECONDS", value_parser = duration, allow_negative_numbers = true)]
    pub duration: u64,
    /// Scripted deaths of every run: at second AT the COUNT oldest live copies die; `none` for none.
    #[arg(long, default_value = "300:2", value_name = "AT:COUNT[,AT:COUNT...]",
          value_parser = deaths, allow_hyphen_values = true)]
    pub deaths: DeathList,
    /// Output format of the rows, or of the counts with --summary (`docs/output.md`); `jsonl`
    /// is another name for json.
    #[arg(long, value_enum, default_value = "csv")]
    pub format: Format,
    /// Print only the counts: cells, cells that mismatch the lesson's relation, cells with
    /// overshoot above zero.
    #[arg(long)]
    pub summary: bool,
    /// The report pipeline of every cell.
    #[command(flatten)]
    pub pipeline: crate::pipeline_args::PipelineArgs,
}

/// A parsed `--controller` list. A newtype, so that clap takes the whole list as one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerList(pub Vec<ControllerKind>);

/// A parsed `--delay-model` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayModels(pub Vec<DelayModel>);

pub(crate) fn delay_models(s: &str) -> Result<DelayModels, String> {
    parse_delay_models(s)
        .map(DelayModels)
        .map_err(|e| e.to_string())
}
pub(crate) fn startup_models(s: &str) -> Result<DelayModels, String> {
    parse_startup_models(s)
        .map(DelayModels)
        .map_err(|e| e.to_string())
}
fn ttl_axis(s: &str) -> Result<Axis, String> {
    axis(TTL, s)
}
fn burst_axis(s: &str) -> Result<Axis, String> {
    axis(BURST, s)
}
fn runs(s: &str) -> Result<u64, String> {
    RUNS.parse(s).map_err(|e| e.to_string())
}
fn shard(s: &str) -> Result<Shard, String> {
    Shard::parse(s).map_err(|e| e.to_string())
}

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

/// Validates the grid, then runs it, writing to stdout as it goes. Every flag and the grid's
/// size (cells × runs) are checked before any cell runs. `matches` are the subcommand's: with a
/// scenario file, they tell which flags the command line typed, which replace the file's
/// settings.
pub fn run(args: SweepArgs, matches: Option<&ArgMatches>) -> anyhow::Result<()> {
    let grid = Grid::new(grid_spec(&args, matches)?)?;
    let range = grid.range();
    let bar = progress_bar("sweep", range.end - range.start);
    let tick = |n: u64| bar.inc(n);
    let mut out = io::BufWriter::with_capacity(
        1 << 16,
        AroundBar {
            bar: &bar,
            inner: io::stdout(),
        },
    );
    if args.summary {
        // A summary prints nothing until its end: stopped by a signal, it prints the counts of
        // the cells simulated so far and one line of how far it got.
        let stop = crate::progress::Stop::watch();
        let started = std::time::Instant::now();
        let s = sweep::summarize_until(&grid, &tick, &|| stop.signal().is_some());
        bar.finish_and_clear();
        let s = s?;
        let mut r = Record::new();
        r.push("cells", s.cells);
        r.push("mismatched", s.mismatched);
        r.push("overshooting", s.overshooting);
        r.push("prediction_mismatched", s.prediction_mismatched);
        let text = output::print(&[r], args.format.into(), &["schema"]);
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .context("writing to stdout")?;
        if let Some(i) = stop.signal() {
            eprintln!(
                "sweep: stopped by {} after {} of {} cells ({:.1} s): the counts above are of \
                 those cells only",
                i.name,
                s.cells,
                range.end - range.start,
                started.elapsed().as_secs_f64()
            );
            return Err(i.into());
        }
        return Ok(());
    }
    let format = match args.format {
        Format::Csv => RowFormat::Csv,
        Format::Json => RowFormat::Jsonl,
        Format::Table => {
            // A table lines columns up, so it holds every row before it prints.
            let mut csv = Vec::new();
            let r = sweep::write_rows(&grid, RowFormat::Csv, &mut csv, &tick);
            bar.finish_and_clear();
            r?;
            let text = String::from_utf8(csv).context("rows are UTF-8")?;
            let text = output::table_from_csv(&text);
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .context("writing to stdout")?;
            return Ok(());
        }
    };
    let r = sweep::write_rows(&grid, format, &mut out, &tick).and_then(|()| {
        // A shard ends with its trailer, written only once every row is out, so that
        // `setpoint merge` can tell a missing or unfinished shard (`setpoint_sim::merge`).
        if let Some(shard) = args.shard {
            let csv = format == RowFormat::Csv;
            out.write_all(merge::trailer(shard, grid.cells(), csv).as_bytes())?;
            out.flush()?;
        }
        Ok(())
    });
    bar.finish_and_clear();
    match r {
        Err(SweepError::Io(e)) => Err(anyhow::Error::new(e).context("writing to stdout")),
        other => Ok(other?),
    }
}

/// The grid the flags describe: the flags alone, or the scenario file's settings with the flags
/// typed on the command line on top.
fn grid_spec(args: &SweepArgs, matches: Option<&ArgMatches>) -> anyhow::Result<GridSpec> {
    let typed =
        |id: &str| matches.and_then(|m| m.value_source(id)) == Some(ValueSource::CommandLine);
    let base = match &args.scenario {
        None => None,
        Some(path) => {
            let label = path.display().to_string();
            let file = setpoint_sim::scenario_file::load(path)?;
            let spec = setpoint_sim::sweep_file::grid_spec(&label, &file)
                .map_err(|e| crate::BadInput(e.to_string()))?;
            Some(spec)
        }
    };
    // Without a file every flag counts, defaults included; with one, the typed flags only.
    let from_file = base.is_some();
    let set = |id: &str| !from_file || typed(id);
    let controllers = match (&base, set("controller")) {
        (Some(b), false) => b.controller.clone(),
        _ => args.controller.0.clone(),
    };
    let expectations = controllers.contains(&ControllerKind::Expectations);
    for (given, flag) in [
        (args.ttl.is_some(), "--ttl"),
        (args.burst.is_some(), "--burst"),
    ] {
        if given && !expectations {
            return Err(crate::BadInput(format!(
                "{flag} applies only to controller 'expectations', which --controller does not list; accepted: --controller with expectations in the list"
            ))
            .into());
        }
    }
    let mut g = base.unwrap_or_default();
    g.controller = controllers;
    if set("desired") {
        g.desired = args.desired.clone();
    }
    if set("period") {
        g.period = args.period.clone();
    }
    if let Some(models) = &args.startup_model {
        g.startup_models = models.0.clone();
    } else if set("startup") {
        g.startup = args.startup.clone();
        g.startup_models.clear();
    }
    if let Some(models) = &args.delay_model {
        g.delay_models = models.0.clone();
    } else if set("delay") {
        g.delay = args.delay.clone();
        g.delay_models.clear();
    }
    if let Some(ttl) = &args.ttl {
        g.ttl = ttl.clone();
    }
    if let Some(burst) = &args.burst {
        g.burst = burst.clone();
    }
    if set("duration") {
        g.duration = args.duration;
    }
    if set("deaths") {
        g.deaths = args.deaths.0.clone();
    }
    if set("seed") {
        g.seed = args.seed;
    }
    g.runs = args.runs;
    g.shard = args.shard.unwrap_or(Shard::WHOLE);
    g.pipeline = args.pipeline.apply(g.pipeline);
    Ok(g)
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

/// A bar over `cells`, labelled `what`, on stderr when stderr is a terminal (and no
/// `--quiet`); otherwise one that draws nothing, so pipes and logs stay clean.
pub(crate) fn progress_bar(what: &str, cells: u64) -> ProgressBar {
    crate::progress::bar(what, cells, "cells")
}
