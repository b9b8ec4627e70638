//! `setpoint plot`: pictures of one run (timeline) and of a grid (heatmap), as SVG, PNG or HTML.

use std::path::Path;

use anyhow::Context;

use clap::{Args, Subcommand};
use setpoint_plot::{
    heatmap_svg, timeline_svg, Downsample, Heatmap, Marker, Span, SpanKind, Timeline,
};
use setpoint_sim::lesson::{RelationGrid, RelationScan};
use setpoint_sim::scenario::{Event, Scenario, Toll};
use setpoint_sim::{simulate_traced, Axis, Grid, GridSpec, LessonSpec, LessonWorld};

use crate::args::WorldArgs;
use crate::destination::{self, Output};
use crate::scenario_args::ScenarioArgs;
use crate::sweep::{delay_axis, delay_models, period_axis, DelayModels};
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

/// `setpoint plot timeline`: the scenario of `setpoint run`, from flags or a file and the flags
/// that override it, with every controller and delay model.
#[derive(Debug, Args)]
pub struct TimelineArgs {
    /// The scenario.
    #[command(flatten)]
    pub world: ScenarioArgs,
    /// Which workload to draw (default: the first).
    #[arg(long, value_name = "NAME")]
    pub workload: Option<String>,
    /// Where to write the picture: FILE.svg, FILE.png (rasterized with the bundled font),
    /// FILE.html (a page around the SVG), or - for SVG on standard output.
    #[arg(short = 'o', long, value_name = "FILE.svg|FILE.png|FILE.html|-", value_parser = destination::picture)]
    pub output: Output,
}

/// `setpoint plot heatmap`.
#[derive(Debug, Args)]
pub struct HeatmapArgs {
    /// Report delays G (rows), in seconds: a list or a range such as 0..=90.
    #[arg(short = 'G', long = "delays", visible_alias = "delay", default_value = "0..=90",
          value_name = "GRID", value_parser = delay_axis, allow_hyphen_values = true)]
    pub delays: Axis,
    /// Report-delay models as the rows, in place of --delays, in the order given: a list of
    /// fixed:S, uniform:MIN:MAX and lesson-chain (seconds to the millisecond), such as
    /// fixed:20,uniform:0:40,lesson-chain. With random models, --runs N --colour p_overshoot
    /// shows how often each cell overshoots.
    #[arg(long, value_name = "LIST", value_parser = delay_models, conflicts_with = "delays")]
    pub delay_model: Option<DelayModels>,
    /// Loop periods U (columns), in seconds.
    #[arg(short = 'U', long = "periods", visible_alias = "period", default_value = "1..=60",
          value_name = "GRID", value_parser = period_axis, allow_hyphen_values = true)]
    pub periods: Axis,
    /// Everything else about the world.
    #[command(flatten)]
    pub world: WorldArgs,
    /// Monte Carlo: N seeded runs per cell (fixed delays draw no random number, so this matters
    /// for the general engine's controllers only through --colour's distributions).
    #[arg(long, default_value = "1", value_name = "N", value_parser = heat_runs)]
    pub runs: u64,
    /// The base seed of the cells' runs (`docs/output.md`, "Seeds").
    #[arg(long, default_value = "1", value_name = "N")]
    pub seed: u64,
    /// The report pipeline of every cell.
    #[command(flatten)]
    pub pipeline: crate::pipeline_args::PipelineArgs,
    /// What colours a cell: any numeric column of `setpoint sweep`'s rows for this grid, such as
    /// overshoot, or with --runs: p_overshoot (drawn in percent), overshoot_p95, overshoot_mean.
    #[arg(long, default_value = "overshoot", value_name = "KEY")]
    pub colour: String,
    /// Where to write the picture: FILE.svg, FILE.png (rasterized with the bundled font),
    /// FILE.html (a page around the SVG), or - for SVG on standard output.
    #[arg(short = 'o', long, value_name = "FILE.svg|FILE.png|FILE.html|-", value_parser = destination::picture)]
    pub output: Output,
}

fn heat_runs(s: &str) -> Result<u64, String> {
    setpoint_sim::montecarlo::RUNS
        .parse(s)
        .map_err(|e| e.to_string())
}

/// Runs `plot` and returns the line it prints. `matches` are the subcommand's, to refuse run
/// flags typed next to a scenario file.
pub fn run(command: &PlotCommand, matches: Option<&clap::ArgMatches>) -> anyhow::Result<String> {
    match command {
        PlotCommand::Timeline(a) => {
            let matches = matches.context("the timeline subcommand's matches")?;
            if let Some(path) = a.world.scenario.as_deref().filter(|p| is_chaos_file(p)) {
                let svg = crate::chaos_plot::timeline(path, a, matches)?;
                return a.output.write_picture(&svg);
            }
            let (label, scenario) = a.world.build(matches)?;
            let svg = match scenario.as_lesson() {
                // The lesson's world from flags: its own title (G, U, B).
                Some(lesson) if a.world.scenario.is_none() && a.workload.is_none() => {
                    timeline_of(&lesson)?
                }
                _ => timeline_of_lab(
                    &scenario,
                    &label,
                    a.workload.as_deref(),
                    scenario.spec().seed,
                )?,
            };
            a.output.write_picture(&svg)
        }
        PlotCommand::Heatmap(a) => {
            let rows = a
                .delay_model
                .as_ref()
                .map_or(a.delays.len(), |m| m.0.len() as u64);
            setpoint_sim::limits::check_picture_cells(rows.saturating_mul(a.periods.len()))?;
            let base = a.world.spec(0, 1);
            let svg = if base.controller.is_lesson()
                && a.runs == 1
                && a.colour == "overshoot"
                && a.delay_model.is_none()
                && !a.pipeline.any()
            {
                heatmap_of(&base, &a.delays, &a.periods)?
            } else {
                heatmap_of_grid(a, &base)?
            };
            a.output.write_picture(&svg)
        }
    }
}

/// Whether `path` holds a chaos fault model or replay file (`setpoint chaos`) rather than a lab
/// scenario; a file that cannot be read is left to the lab's reader to report.
fn is_chaos_file(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| setpoint_chaos::faults::looks_like_model(&t))
}

/// The timeline SVG of one scenario.
pub fn timeline_of(scenario: &LessonWorld) -> anyhow::Result<String> {
    let s = scenario.spec();
    // Memory stays bounded by the picture, not the duration: see `Downsample`.
    let mut rows = Downsample::new(0, s.duration, s.period);
    let m = simulate_traced(scenario, &mut |r| rows.push(r));
    let rows = rows.finish();
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
        spans: &[],
    })?)
}

/// A short label for a timeline event.
fn event_label(e: &Event) -> String {
    match e {
        Event::Deaths(Toll::Count(n)) => format!("{n} die"),
        Event::Deaths(Toll::PartsPerMillion(p)) => format!("{}% die", *p as f64 / 10_000.0),
        Event::Scale { desired } => format!("scale to {desired}"),
        Event::Outage { seconds } => format!("outage {seconds} s"),
        Event::Restart => "restart".to_owned(),
        Event::Stale { seconds } => format!("stale {seconds} s"),
        Event::LoseDeletes { count } => format!("lose {count} deletes"),
        Event::CrashLoop { after, starts, .. } => {
            format!("{starts} starts end after {after} s")
        }
        Event::Update {
            max_surge,
            max_unavailable,
            ..
        } => format!("update (surge {max_surge}, unavailable {max_unavailable})"),
    }
}

/// The timeline SVG of one workload of a lab scenario, run with `seed`.
pub fn timeline_of_lab(
    scenario: &Scenario,
    label: &str,
    workload: Option<&str>,
    seed: u64,
) -> anyhow::Result<String> {
    let spec = scenario.spec();
    let index = match workload {
        None => 0,
        Some(name) => spec
            .workloads
            .iter()
            .position(|w| w.name == name)
            .ok_or_else(|| {
                BadInput(format!(
                    "no workload '{name}' in {label}; accepted: {}",
                    spec.workloads
                        .iter()
                        .map(|w| w.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?,
    };
    let name = &spec.workloads[index].name;
    let mut rows = Downsample::new(0, spec.duration, spec.period);
    let outcome = setpoint_sim::run_traced(scenario, seed, &mut |w, r| {
        if w == index {
            rows.push(r);
        }
    })?;
    let rows = rows.finish();
    let m = &outcome.workloads[index].metrics;
    let events: Vec<Marker> = spec
        .events
        .iter()
        .filter(|e| e.at <= spec.duration && e.workload.as_deref().is_none_or(|w| w == name))
        .map(|e| Marker {
            t: e.at,
            label: event_label(&e.event),
        })
        .collect();
    // A rolling update is shaded from its event to the second its rollout was found done (or
    // the end of the run).
    let rollout_end = outcome.workloads[index]
        .rollout
        .rollout_done
        .unwrap_or(spec.duration);
    let spans: Vec<Span> = spec
        .events
        .iter()
        .filter(|e| e.workload.as_deref().is_none_or(|w| w == name))
        .filter_map(|e| match e.event {
            Event::Outage { seconds } => Some((e.at, seconds, SpanKind::Outage)),
            Event::Stale { seconds } => Some((e.at, seconds, SpanKind::Stale)),
            Event::Update { .. } => Some((e.at, rollout_end.max(e.at) - e.at, SpanKind::Rollout)),
            _ => None,
        })
        .map(|(from, seconds, kind)| Span {
            from,
            to: from.saturating_add(seconds),
            kind,
        })
        .collect();
    let stable = m
        .stable
        .map_or_else(|| "never".to_owned(), |t| format!("at {t} s"));
    let seeded = outcome
        .seed
        .map_or_else(String::new, |s| format!(", seed {s}"));
    let file = Path::new(label)
        .file_name()
        .map_or(label.to_owned(), |f| f.to_string_lossy().into_owned());
    let surge = outcome.workloads[index]
        .rollout
        .surge
        .map_or_else(String::new, |s| format!(", surge {s}"));
    let title = format!(
        "{file}: {name}, {}, U={}: overshoot {}{surge}, peak {}, stable {stable}{seeded}",
        spec.controller.kind, spec.period, m.overshoot, m.peak_live
    );
    Ok(timeline_svg(&Timeline {
        title,
        rows: &rows,
        period: spec.period,
        events: &events,
        spans: &spans,
    })?)
}

/// The heatmap SVG of a grid on `base` (its delay and period are ignored).
pub fn heatmap_of(base: &LessonSpec, delays: &Axis, periods: &Axis) -> anyhow::Result<String> {
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
        row_labels: &[],
        scale: "overshoot",
    })?)
}

/// The heatmap of any controller, coloured by any numeric column of the sweep's rows: the same
/// grid `setpoint sweep` runs, with delays as rows and periods as columns. `p_overshoot` is
/// drawn in percent (the picture's scale counts whole numbers); other values are rounded.
fn heatmap_of_grid(a: &HeatmapArgs, base: &LessonSpec) -> anyhow::Result<String> {
    let grid = Grid::new(GridSpec {
        desired: Axis::single(base.desired),
        period: a.periods.clone(),
        delay: a.delays.clone(),
        delay_models: a
            .delay_model
            .as_ref()
            .map(|m| m.0.clone())
            .unwrap_or_default(),
        startup: Axis::single(base.startup),
        controller: vec![base.controller],
        duration: base.duration,
        deaths: base.deaths.clone(),
        runs: a.runs,
        seed: a.seed,
        pipeline: a.pipeline.apply(Default::default()),
        ..GridSpec::default()
    })?;
    let column = setpoint_sim::sweep::column(&grid, &a.colour).map_err(|e| match e {
        e @ setpoint_sim::sweep::SweepError::NoColumn { .. } => {
            anyhow::Error::new(BadInput(format!("--colour: {e}")))
        }
        e => anyhow::Error::new(e),
    })?;
    // The rows: delays in seconds, or the models by their canonical text.
    let labels: Vec<String> = a.delay_model.as_ref().map_or_else(Vec::new, |m| {
        m.0.iter().map(setpoint_sim::sweep::model_text).collect()
    });
    let delays: Vec<u64> = if labels.is_empty() {
        a.delays.values().collect()
    } else {
        (0..labels.len() as u64).collect()
    };
    let (nd, np) = (delays.len(), a.periods.len() as usize);
    let percent = a.colour == "p_overshoot";
    // Grid cells go period-major; the picture goes row by row over delays.
    let mut values = vec![0u64; nd * np];
    for (i, v) in column.iter().enumerate() {
        let (p, d) = (i / nd, i % nd);
        let v = v.unwrap_or(0.0) * if percent { 100.0 } else { 1.0 };
        values[d * np + p] = v.round().max(0.0) as u64;
    }
    let title = format!(
        "{}{}, desired {}, B={} s, {} s run, controller {}{}",
        a.colour,
        if percent { " (% of runs)" } else { "" },
        base.desired,
        base.startup,
        base.duration,
        base.controller,
        if a.runs > 1 {
            format!(", {} runs per cell, seed {}", a.runs, a.seed)
        } else {
            String::new()
        }
    );
    let periods: Vec<u64> = a.periods.values().collect();
    let scale = if percent {
        format!("{} (%)", a.colour)
    } else {
        a.colour.clone()
    };
    Ok(heatmap_svg(&Heatmap {
        title,
        delays: &delays,
        periods: &periods,
        overshoot: &values,
        startup: base.startup,
        lesson_wrong: &[],
        row_labels: &labels,
        scale: &scale,
    })?)
}
