//! `setpoint plot`: pictures of one run (timeline) and of a grid (heatmap), as SVG, PNG or HTML.

use std::path::Path;

use anyhow::Context;

use clap::{Args, Subcommand};
use setpoint_plot::{
    heatmap_svg, timeline_svg, Downsample, Heatmap, Marker, Scale, Span, SpanKind, Timeline,
};
use setpoint_sim::lesson::{RelationGrid, RelationScan};
use setpoint_sim::scenario::{Event, Scenario, Toll};
use setpoint_sim::{simulate_spans, Axis, Grid, GridSpec, LessonSpec, LessonWorld};

use crate::destination::{self, Output};
use crate::scenario_args::ScenarioArgs;
use crate::shared_args::WorldArgs;
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
    /// A calibration's fitted CDFs against the measured ones, from a model file written by
    /// `setpoint calibrate -o`.
    Calibration(CalibrationArgs),
}

/// `setpoint plot calibration`.
#[derive(Debug, Args)]
pub struct CalibrationArgs {
    /// The model file (`setpoint calibrate -o MODEL.toml`).
    #[arg(value_name = "MODEL.toml")]
    pub model: std::path::PathBuf,
    /// Where to write the picture: FILE.svg, FILE.png (rasterized with the bundled font),
    /// FILE.html, or - for SVG on stdout.
    #[arg(short = 'o', long, value_name = "FILE.svg|FILE.png|FILE.html|-", value_parser = destination::picture)]
    pub output: Output,
}

/// The picture of `fits`, titled by where they came from.
pub fn calibration_svg(fits: &[setpoint_sim::calibrate::Fit]) -> anyhow::Result<String> {
    let mut from: Vec<&str> = fits.iter().map(|f| f.from.as_str()).collect();
    from.dedup();
    let title = format!(
        "calibration: fitted (lines) against measured CDF, {}",
        from.join(", ")
    );
    Ok(setpoint_plot::calibration_svg(&title, fits)?)
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
    /// A scenario file (TOML), as `sweep FILE.toml` takes it: it gives every setting that no
    /// flag typed on the command line gives (one workload, deaths by count as its only events).
    #[arg(value_name = "SCENARIO.toml")]
    pub scenario: Option<std::path::PathBuf>,
    /// Report delays G (rows), in seconds: a list or a range such as 0..=90.
    #[arg(short = 'G', long = "delay", alias = "delays", default_value = "0..=90",
          value_name = "GRID", value_parser = delay_axis, allow_hyphen_values = true)]
    pub delays: Axis,
    /// Report-delay models as the rows, in place of --delay, in the order given: a list of
    /// fixed:S, uniform:MIN:MAX and lesson-chain (seconds to the millisecond), such as
    /// fixed:20,uniform:0:40,lesson-chain. With random models, --runs N --colour p_overshoot
    /// shows how often each cell overshoots.
    #[arg(long, value_name = "LIST", value_parser = delay_models, conflicts_with = "delays")]
    pub delay_model: Option<DelayModels>,
    /// Every copy's startup time drawn from this model when it is created, in place of
    /// --startup (the syntax of --delay-model; empirical:FILE takes the file's startup model).
    /// Every cell then runs on the general engine, and the lesson's boundary takes the model's
    /// worst case as B.
    #[arg(long, value_name = "MODEL", value_parser = crate::shared_args::startup_model, conflicts_with = "startup")]
    pub startup_model: Option<setpoint_sim::delay::DelayModel>,
    /// Loop periods U (columns), in seconds.
    #[arg(short = 'U', long = "period", alias = "periods", default_value = "1..=60",
          value_name = "GRID", value_parser = period_axis, allow_hyphen_values = true)]
    pub periods: Axis,
    /// Everything else about the world.
    #[command(flatten)]
    pub world: WorldArgs,
    /// The expectations controller's TTL, in seconds [default: 300], as `sweep --ttl` (one
    /// value: the picture has no axis for it).
    #[arg(long, value_name = "SECONDS", value_parser = crate::shared_args::ttl)]
    pub ttl: Option<u64>,
    /// The expectations controller's burst limit, in copies per pass [default: 500].
    #[arg(long, value_name = "N", value_parser = crate::shared_args::burst)]
    pub burst: Option<u64>,
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

/// Runs `plot` and returns the line it prints. `matches` are `plot`'s, to refuse run
/// flags typed next to a scenario file.
pub fn run(command: &PlotCommand, matches: Option<&clap::ArgMatches>) -> anyhow::Result<String> {
    match command {
        PlotCommand::Timeline(a) => {
            let matches = matches
                .and_then(|m| m.subcommand_matches("timeline"))
                .context("the timeline subcommand's matches")?;
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
        PlotCommand::Calibration(a) => {
            let fits = setpoint_sim::calibrate::model_file::load(&a.model)
                .map_err(|e| BadInput(e.to_string()))?;
            a.output.write_picture(&calibration_svg(&fits)?)
        }
        PlotCommand::Heatmap(a) => {
            let rows = a
                .delay_model
                .as_ref()
                .map_or(a.delays.len(), |m| m.0.len() as u64);
            setpoint_sim::limits::check_picture_cells(rows.saturating_mul(a.periods.len()))?;
            let base = a.world.spec(0, 1);
            if a.ttl.is_some() || a.burst.is_some() {
                // The lesson's engine has no TTL: the grid path checks and applies them.
                let heat = matches.and_then(|m| m.subcommand_matches("heatmap"));
                return a
                    .output
                    .write_picture(&heatmap_of_grid(a, &heatmap_grid(a, &base, heat)?)?);
            }
            let svg = if base.controller.is_lesson()
                && a.runs == 1
                && a.colour == "overshoot"
                && a.delay_model.is_none()
                && a.startup_model.is_none()
                && a.scenario.is_none()
                && !a.pipeline.any()
            {
                heatmap_of(&base, &a.delays, &a.periods)?
            } else {
                let heat = matches.and_then(|m| m.subcommand_matches("heatmap"));
                heatmap_of_grid(a, &heatmap_grid(a, &base, heat)?)?
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
    let m = simulate_spans(scenario, &mut |span| rows.push_span(span));
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
    let outcome = setpoint_sim::run_spans(scenario, seed, &mut |w, span| {
        if w == index {
            rows.push_span(span);
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
        kind: Scale::Overshoot,
    })?)
}

/// The heatmap of any controller, coloured by any numeric column of the sweep's rows: the same
/// grid `setpoint sweep` runs, with delays as rows and periods as columns. `p_overshoot` is
/// drawn in percent (the picture's scale counts whole numbers); other values are rounded.
/// The grid a heatmap draws: the flags alone, or a scenario file's settings with the flags
/// typed on the command line on top (as `sweep FILE.toml` does).
fn heatmap_grid(
    a: &HeatmapArgs,
    base: &LessonSpec,
    matches: Option<&clap::ArgMatches>,
) -> anyhow::Result<GridSpec> {
    let typed = |id: &str| {
        matches.and_then(|m| m.value_source(id)) == Some(clap::parser::ValueSource::CommandLine)
    };
    let file = match &a.scenario {
        None => None,
        Some(path) => {
            let label = path.display().to_string();
            let spec = setpoint_sim::scenario_file::load(path)?;
            Some(
                setpoint_sim::sweep_file::grid_spec(&label, &spec)
                    .map_err(|e| BadInput(e.to_string()))?,
            )
        }
    };
    let set = |id: &str| file.is_none() || typed(id);
    let mut g = file.clone().unwrap_or_default();
    if set("desired") {
        g.desired = Axis::single(base.desired);
    }
    if let Some(m) = &a.startup_model {
        g.startup_models = vec![m.clone()];
    } else if set("startup") {
        g.startup = Axis::single(base.startup);
        g.startup_models = Vec::new();
    }
    if set("periods") {
        g.period = a.periods.clone();
    }
    if let Some(m) = a.delay_model.as_ref().filter(|_| set("delay_model")) {
        g.delay_models = m.0.clone();
    } else if set("delays") {
        g.delay = a.delays.clone();
        g.delay_models = Vec::new();
    }
    if set("controller") {
        g.controller = vec![base.controller];
    }
    if set("duration") {
        g.duration = base.duration;
    }
    if set("deaths") {
        g.deaths = base.deaths.clone();
    }
    if set("seed") {
        g.seed = a.seed;
    }
    g.runs = a.runs;
    if let Some(ttl) = a.ttl {
        g.ttl = Axis::single(ttl);
    }
    if let Some(burst) = a.burst {
        g.burst = Axis::single(burst);
    }
    for (what, n) in [
        ("desired count", g.desired.len()),
        ("startup", g.startup.len()),
        ("controller", g.controller.len() as u64),
    ] {
        if n != 1 {
            anyhow::bail!(BadInput(format!(
                "plot heatmap draws one {what}, got {n}; accepted: one value (sweep scans several)"
            )));
        }
    }
    for (given, flag) in [(a.ttl.is_some(), "--ttl"), (a.burst.is_some(), "--burst")] {
        if given && g.controller != [setpoint_core::ControllerKind::Expectations] {
            anyhow::bail!(BadInput(format!(
                "{flag} applies only to controller 'expectations'; accepted: --controller expectations"
            )));
        }
    }
    g.pipeline = a.pipeline.apply(g.pipeline);
    Ok(g)
}

/// The heatmap of any controller, coloured by any numeric column of the sweep's rows: the same
/// grid `setpoint sweep` runs, with delays (or delay models) as rows and periods as columns.
/// `p_overshoot` is drawn in percent (the picture's scale counts whole numbers); other values
/// are rounded.
fn heatmap_of_grid(a: &HeatmapArgs, spec: &GridSpec) -> anyhow::Result<String> {
    let grid = Grid::new(spec.clone())?;
    let column = setpoint_sim::sweep::column(&grid, &a.colour).map_err(|e| match e {
        e @ setpoint_sim::sweep::SweepError::NoColumn { .. } => {
            anyhow::Error::new(BadInput(format!("--colour: {e}")))
        }
        e => anyhow::Error::new(e),
    })?;
    // The rows: delays in seconds, or the models by their canonical text.
    let labels: Vec<String> = spec
        .delay_models
        .iter()
        .map(setpoint_sim::sweep::model_text)
        .collect();
    let delays: Vec<u64> = if labels.is_empty() {
        spec.delay.values().collect()
    } else {
        (0..labels.len() as u64).collect()
    };
    let (nd, np) = (delays.len(), spec.period.len() as usize);
    let one = |axis: &Axis| axis.values().next().unwrap_or_default();
    let desired = one(&spec.desired);
    // A startup model stands in the lesson's boundary by its worst case, as `advise` takes it.
    let (startup, startup_text) = match spec.startup_models.first() {
        Some(m) => {
            let worst = setpoint_sim::delay::whole_seconds(m.max_ms());
            let text = setpoint_sim::sweep::model_text(m);
            (worst, format!("B from {text} (worst {worst} s)"))
        }
        None => {
            let b = one(&spec.startup);
            (b, format!("B={b} s"))
        }
    };
    let controller = spec.controller[0];
    let percent = a.colour == "p_overshoot";
    // Grid cells go period-major; the picture goes row by row over delays.
    let mut values = vec![0u64; nd * np];
    for (i, v) in column.iter().enumerate() {
        let (p, d) = (i / nd, i % nd);
        let v = v.unwrap_or(0.0) * if percent { 100.0 } else { 1.0 };
        values[d * np + p] = v.round().max(0.0) as u64;
    }
    let title = format!(
        "{}{}, desired {}, {}, {} s run, controller {}{}",
        a.colour,
        if percent { " (% of runs)" } else { "" },
        desired,
        startup_text,
        spec.duration,
        controller,
        if spec.runs > 1 {
            format!(", {} runs per cell, seed {}", spec.runs, spec.seed)
        } else {
            String::new()
        }
    );
    let periods: Vec<u64> = spec.period.values().collect();
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
        startup,
        lesson_wrong: &[],
        row_labels: &labels,
        scale: &scale,
        kind: scale_of(&a.colour),
    })?)
}

/// The colour scale of a column: overshoot's (0 the goal, a log scale, the measured boundary)
/// for the overshoot columns and their predictions; a linear one from the smallest value to
/// the largest for every other (`stable`'s seconds are far from 0 and 0 is not their goal).
fn scale_of(column: &str) -> Scale {
    let overshoot = column == "p_overshoot"
        || column.starts_with("overshoot")
        || column.ends_with("prediction");
    if overshoot {
        Scale::Overshoot
    } else {
        Scale::Linear
    }
}
