//! `setpoint plot`: pictures of one run (timeline) and of a grid (heatmap), as SVG, PNG or HTML.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use setpoint_plot::{
    heatmap_svg, timeline_svg, Downsample, Heatmap, Marker, Span, SpanKind, Timeline,
};
use setpoint_sim::lesson::{RelationGrid, RelationScan};
use setpoint_sim::scenario::{Event, Scenario, Toll};
use setpoint_sim::scenario_file;
use setpoint_sim::{simulate_traced, Axis, LessonSpec, LessonWorld};

use crate::args::{LessonArgs, WorldArgs};
use crate::destination::{self, Output};
use crate::sweep::{delay_axis, period_axis};
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

/// `setpoint plot timeline`: a scenario file, or the flags of `setpoint run`.
#[derive(Debug, Args)]
pub struct TimelineArgs {
    /// A scenario file (TOML, see `scenarios/`). It sets the whole world; only --seed and
    /// --workload may accompany it. Without it, the flags below describe the lesson's world.
    pub scenario: Option<PathBuf>,
    /// With a scenario file: which workload to draw (default: the first).
    #[arg(long, value_name = "NAME")]
    pub workload: Option<String>,
    /// With a scenario file: the seed of the world's random numbers (default: the file's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// The lesson's world, when no scenario file is given.
    #[command(flatten)]
    pub lesson: LessonArgs,
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
    /// Loop periods U (columns), in seconds.
    #[arg(short = 'U', long = "periods", visible_alias = "period", default_value = "1..=60",
          value_name = "GRID", value_parser = period_axis, allow_hyphen_values = true)]
    pub periods: Axis,
    /// Everything else about the world.
    #[command(flatten)]
    pub world: WorldArgs,
    /// Where to write the picture: FILE.svg, FILE.png (rasterized with the bundled font),
    /// FILE.html (a page around the SVG), or - for SVG on standard output.
    #[arg(short = 'o', long, value_name = "FILE.svg|FILE.png|FILE.html|-", value_parser = destination::picture)]
    pub output: Output,
}

/// Runs `plot` and returns the line it prints. `matches` are the subcommand's, to refuse run
/// flags typed next to a scenario file.
pub fn run(command: &PlotCommand, matches: Option<&clap::ArgMatches>) -> anyhow::Result<String> {
    match command {
        PlotCommand::Timeline(a) => {
            file_sets_the_world(matches, a.scenario.is_some())?;
            let svg = match &a.scenario {
                Some(path) => {
                    let (scenario, seed) = load_lab(path, a.seed)?;
                    timeline_of_lab(
                        &scenario,
                        &path.display().to_string(),
                        a.workload.as_deref(),
                        seed,
                    )?
                }
                None => {
                    if a.workload.is_some() || a.seed.is_some() {
                        return Err(BadInput(
                            "--workload and --seed go with a scenario file; accepted: setpoint plot timeline SCENARIO.toml --workload NAME --seed N".into(),
                        )
                        .into());
                    }
                    timeline_of(&LessonWorld::new(a.lesson.spec())?)?
                }
            };
            a.output.write_picture(&svg)
        }
        PlotCommand::Heatmap(a) => {
            setpoint_sim::limits::check_picture_cells(
                a.delays.len().saturating_mul(a.periods.len()),
            )?;
            let svg = heatmap_of(&a.world.spec(0, 1), &a.delays, &a.periods)?;
            a.output.write_picture(&svg)
        }
    }
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

/// Loads a scenario file, with `seed` (if given) in place of the file's.
pub fn load_lab(path: &Path, seed: Option<u64>) -> anyhow::Result<(Scenario, u64)> {
    let mut spec = scenario_file::load(path)?;
    if let Some(seed) = seed {
        spec.seed = seed;
    }
    let scenario = Scenario::new(spec)?;
    let seed = scenario.spec().seed;
    Ok((scenario, seed))
}

/// Refuses run flags typed next to a scenario file: the file sets the world.
pub fn file_sets_the_world(
    matches: Option<&clap::ArgMatches>,
    has_file: bool,
) -> Result<(), BadInput> {
    let Some(m) = matches.filter(|_| has_file) else {
        return Ok(());
    };
    for id in [
        "period",
        "delay",
        "desired",
        "startup",
        "duration",
        "deaths",
        "controller",
    ] {
        if m.value_source(id) == Some(clap::parser::ValueSource::CommandLine) {
            return Err(BadInput(format!(
                "--{id} cannot change a scenario file here: the file sets the world; accepted alongside a file: --seed, --workload, -o (or use 'setpoint run FILE --{id} ...')"
            )));
        }
    }
    Ok(())
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
    let spans: Vec<Span> = spec
        .events
        .iter()
        .filter(|e| e.workload.as_deref().is_none_or(|w| w == name))
        .filter_map(|e| match e.event {
            Event::Outage { seconds } => Some((e.at, seconds, SpanKind::Outage)),
            Event::Stale { seconds } => Some((e.at, seconds, SpanKind::Stale)),
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
    let title = format!(
        "{file}: {name}, {}, U={}: overshoot {}, peak {}, stable {stable}{seeded}",
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
    })?)
}
