//! `setpoint plot`: pictures of one run (timeline) and of a grid (heatmap), as SVG files.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use setpoint_plot::{heatmap_svg, timeline_svg, Heatmap, Marker, Timeline};
use setpoint_sim::lesson::{RelationGrid, RelationScan};
use setpoint_sim::{simulate_traced, Axis, Limit, Scenario, ScenarioSpec};

use crate::args::WorldArgs;
use crate::BadInput;

/// `setpoint plot`.
#[derive(Debug, Subcommand)]
pub enum PlotCommand {
    /// Live, seen and desired copies over time for one run, with rounds and events marked.
    Timeline(TimelineArgs),
    /// Overshoot over report delay x loop period, with the lesson's boundary U = G + B and the
    /// measured one.
    Heatmap(HeatmapArgs),
}

/// `setpoint plot timeline`: the flags of `setpoint run`.
#[derive(Debug, Args)]
pub struct TimelineArgs {
    /// Loop period U: seconds between rounds.
    #[arg(short = 'U', long, default_value = "15", value_name = "SECONDS", value_parser = period, allow_negative_numbers = true)]
    pub period: u64,
    /// Report delay G: seconds the ledger lags the world.
    #[arg(short = 'G', long, default_value = "0", value_name = "SECONDS", value_parser = delay, allow_negative_numbers = true)]
    pub delay: u64,
    /// Everything else about the world.
    #[command(flatten)]
    pub world: WorldArgs,
    /// The SVG file to write.
    #[arg(short = 'o', long, value_name = "FILE.svg")]
    pub output: PathBuf,
}

/// `setpoint plot heatmap`.
#[derive(Debug, Args)]
pub struct HeatmapArgs {
    /// Report delays G (rows), in seconds: a list or a range such as 0..=90.
    #[arg(short = 'G', long = "delays", visible_alias = "delay", default_value = "0..=90",
          value_name = "GRID", value_parser = delay_axis, allow_hyphen_values = true)]
    pub delays: Axis,
    /// Loop periods U (columns), in seconds.
    #[arg(short = 'U', long = "periods", visible_alias = "period", default_value = "1..=60",
          value_name = "GRID", value_parser = period_axis, allow_hyphen_values = true)]
    pub periods: Axis,
    /// Everything else about the world.
    #[command(flatten)]
    pub world: WorldArgs,
    /// The SVG file to write.
    #[arg(short = 'o', long, value_name = "FILE.svg")]
    pub output: PathBuf,
}

fn period(s: &str) -> Result<u64, String> {
    Limit::PERIOD.parse(s).map_err(|e| e.to_string())
}
fn delay(s: &str) -> Result<u64, String> {
    Limit::DELAY.parse(s).map_err(|e| e.to_string())
}
fn delay_axis(s: &str) -> Result<Axis, String> {
    Axis::parse(Limit::DELAY, s).map_err(|e| e.to_string())
}
fn period_axis(s: &str) -> Result<Axis, String> {
    Axis::parse(Limit::PERIOD, s).map_err(|e| e.to_string())
}

/// The most cells a heatmap draws: beyond this the SVG gets too heavy to open.
const MAX_HEATMAP_CELLS: u64 = 200_000;

/// Runs `plot` and returns the line it prints.
pub fn run(command: &PlotCommand) -> anyhow::Result<String> {
    match command {
        PlotCommand::Timeline(a) => {
            let scenario = Scenario::new(a.world.spec(a.delay, a.period))?;
            let svg = timeline_of(&scenario)?;
            write(&a.output, &svg)?;
            Ok(format!("wrote {}\n", a.output.display()))
        }
        PlotCommand::Heatmap(a) => {
            let cells = a.delays.len().saturating_mul(a.periods.len());
            if cells > MAX_HEATMAP_CELLS {
                return Err(BadInput(format!(
                    "the heatmap would have {cells} cells: accepted at most {MAX_HEATMAP_CELLS}; give the ranges a step, such as 0..=600:10"
                ))
                .into());
            }
            let svg = heatmap_of(&a.world.spec(0, 1), &a.delays, &a.periods)?;
            write(&a.output, &svg)?;
            Ok(format!("wrote {}\n", a.output.display()))
        }
    }
}

/// The timeline SVG of one scenario.
pub fn timeline_of(scenario: &Scenario) -> anyhow::Result<String> {
    let s = scenario.spec();
    let mut rows = Vec::new();
    let m = simulate_traced(scenario, &mut |r| rows.push(*r));
    let events: Vec<Marker> = s
        .deaths
        .iter()
        .filter(|d| d.at <= s.duration)
        .map(|d| Marker {
            t: d.at,
            label: format!("{} die", d.count),
        })
        .collect();
    let stable = m
        .stable
        .map_or_else(|| "never".to_owned(), |t| format!("at {t} s"));
    let title = format!(
        "G={} U={} B={} desired {}, controller {}: overshoot {}, peak {}, stable {stable}",
        s.delay, s.period, s.startup, s.desired, s.controller, m.overshoot, m.peak_live
    );
    Ok(timeline_svg(&Timeline {
        title,
        rows: &rows,
        period: s.period,
        events: &events,
    })?)
}

/// The heatmap SVG of a grid on `base` (its delay and period are ignored).
pub fn heatmap_of(base: &ScenarioSpec, delays: &Axis, periods: &Axis) -> anyhow::Result<String> {
    let grid = RelationGrid {
        base: base.clone(),
        delays: delays.values().collect(),
        periods: periods.values().collect(),
    };
    let scan = RelationScan::try_run(&grid)?;
    let overshoot: Vec<u64> = scan.cells.iter().map(|c| c.overshoot).collect();
    let lesson_wrong: Vec<bool> = scan.cells.iter().map(|c| !c.lesson_match).collect();
    let title = format!(
        "overshoot, desired {}, B={} s, {} s run, controller {}",
        base.desired, base.startup, base.duration, base.controller
    );
    Ok(heatmap_svg(&Heatmap {
        title,
        delays: &grid.delays,
        periods: &grid.periods,
        overshoot: &overshoot,
        startup: base.startup,
        lesson_wrong: &lesson_wrong,
    })?)
}

fn write(path: &Path, svg: &str) -> anyhow::Result<()> {
    std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))
}
