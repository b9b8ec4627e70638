//! Model against reality: `setpoint measure` (the lesson's metrics of a real run, from the event
//! log) and `setpoint experiment lesson --real` (the lesson's scenario on real processes, next to
//! the lab's table). The clap types live here; the work is done by setpoint-runtime.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use setpoint_core::ControllerKind;
use setpoint_reality::experiment::{self, CellOutcome, ExperimentError, RealLesson};
use setpoint_reality::jitter;
use setpoint_runtime::measure::{self, Measurement, Spread, WindowSpec};
use setpoint_runtime::model::{decode, workload_key, WorkloadSpec};
use setpoint_runtime::{events, parse_duration, OpenMode, StoreUrl};
use setpoint_sim::format::js_to_fixed2;
use setpoint_sim::lesson::{loop_row, LOOP_HEADER};
use setpoint_sim::{LessonSpec, Metrics};

use crate::BadInput;

/// The commands that hold the model against reality.
#[derive(Debug, Subcommand)]
pub enum RealityCommand {
    /// Compute the lesson's metrics of a real run from the store's event log.
    Measure(MeasureArgs),
    /// Run a scenario of the lab on the real runtime and compare.
    #[command(subcommand)]
    Experiment(ExperimentCommand),
}

/// Output formats: the one `--format` of every data command. JSON is one object; CSV one row per
/// workload (`measure`) or cell (`experiment lesson`), `docs/output.md`.
use crate::output::Format;

/// `setpoint measure`.
#[derive(Debug, Args)]
pub struct MeasureArgs {
    /// The data directory whose store holds the log.
    #[arg(long, default_value = ".setpoint", value_name = "DIR")]
    data_dir: PathBuf,
    /// The store that holds the log: sqlite:DIR,
    /// etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX] or etcd+https://… [default:
    /// sqlite:DATA_DIR].
    #[arg(long, value_name = "URL", value_parser = crate::etcd_args::StoreUrlParser)]
    store: Option<StoreUrl>,
    /// How to reach an etcd as deployed: TLS files and the user's password.
    #[command(flatten)]
    etcd: crate::etcd_args::EtcdArgs,
    /// Only this workload (default: every workload with a log).
    #[arg(value_name = "WORKLOAD")]
    workload: Option<String>,
    /// Virtual second 0: a duration ago (`10m`), or store milliseconds since the Unix epoch.
    /// Default: the workload's first logged pass.
    #[arg(long, value_name = "T")]
    since: Option<String>,
    /// Real milliseconds per virtual second, divided by 1000: 1 measures real seconds.
    #[arg(long, default_value = "1", value_name = "SCALE")]
    time_scale: f64,
    /// The last virtual second measured (default: the last complete second).
    #[arg(long, value_name = "SECONDS")]
    last: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
}

/// `setpoint experiment …`.
#[derive(Debug, Subcommand)]
pub enum ExperimentCommand {
    /// The lesson's first table (6 copies, U = 15, B = 5, 2 deaths at second 300, 900 seconds)
    /// for every G and both controllers; with --real, also on real processes.
    Lesson(LessonArgs),
}

/// `setpoint experiment lesson`.
#[derive(Debug, Args)]
pub struct LessonArgs {
    /// Run the cells on the embedded runtime with real processes (`sleep`) and compressed time.
    #[arg(long)]
    real: bool,
    /// Real milliseconds per virtual second, divided by 1000: at 0.01 a 900-second run takes 9 s.
    #[arg(long, default_value = "0.01", value_name = "SCALE")]
    time_scale: f64,
    /// How many cells run at once.
    #[arg(short = 'j', long, default_value = "6", value_name = "N")]
    jobs: usize,
    /// Where the cells' data directories go (one per cell, replaced on every run).
    #[arg(long, default_value = ".setpoint-experiment", value_name = "DIR")]
    data_dir: PathBuf,
    /// With --real: one store for every cell, each under its own key prefix, such as
    /// etcd://HOST:PORT[,HOST:PORT...] [default: a SQLite store in each cell's directory].
    #[arg(long, value_name = "URL", value_parser = crate::etcd_args::StoreUrlParser)]
    store: Option<StoreUrl>,
    /// How to reach an etcd as deployed: TLS files and the user's password.
    #[command(flatten)]
    etcd: crate::etcd_args::EtcdArgs,
    /// The report delays G, in seconds, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,5,10,20,30,60",
        value_name = "G,...",
        value_parser = whole_seconds,
        alias = "delays"
    )]
    delay: Vec<u64>,
    /// Random report-delay models, in place of --delays: a list of fixed:S, uniform:MIN:MAX
    /// and lesson-chain (seconds to the millisecond). With --real the agent's report delays are
    /// drawn from each model with --seed; each cell is set against the lab's run with that seed
    /// and the lab's overshoot over 200 seeds.
    #[arg(long, value_name = "LIST", value_parser = crate::sweep::delay_models, conflicts_with = "delay")]
    delay_model: Option<crate::sweep::DelayModels>,
    /// With --delay-model, without --real: the lab side's startup time drawn for every copy
    /// from this model (the syntax of --delay-model; empirical:FILE takes the file's startup
    /// model) in place of the lesson's 5 s. The real side's copies start in 5 s, so --real
    /// refuses it.
    #[arg(long, value_name = "MODEL", value_parser = crate::shared_args::startup_model, requires = "delay_model", conflicts_with = "real")]
    startup_model: Option<setpoint_sim::delay::DelayModel>,
    /// With --delay-model: the seed of the lab's run and of the agent's drawn delays.
    #[arg(long, default_value = "1", value_name = "N")]
    seed: u64,
    /// The controllers, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ledger,intent",
        value_name = "NAME,...",
        alias = "controllers"
    )]
    controller: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// With --real: also print the runtime's own log lines (each part's start, passes, exits)
    /// on stderr; without it only the result is printed.
    #[arg(short = 'v', long)]
    verbose: bool,
    /// The report pipeline of the lab's side of --delay-model cells [default: setpoint's
    /// agent: --pipeline in-order --nodes 1 --report-every 0.5].
    #[command(flatten)]
    pipeline: crate::pipeline_args::PipelineArgs,
}

/// Runs one command; returns what to print.
pub fn execute(cmd: RealityCommand) -> anyhow::Result<String> {
    match cmd {
        RealityCommand::Measure(a) => measure_cmd(&a),
        RealityCommand::Experiment(ExperimentCommand::Lesson(a)) => lesson(&a),
    }
}

fn measure_cmd(a: &MeasureArgs) -> anyhow::Result<String> {
    if !(a.time_scale > 0.0 && a.time_scale <= 1e6) {
        anyhow::bail!(BadInput(format!(
            "--time-scale {} is out of range: accepted above 0, up to 1000000",
            a.time_scale
        )));
    }
    let url = a.etcd.apply(
        a.store
            .clone()
            .unwrap_or_else(|| StoreUrl::sqlite(&a.data_dir)),
    )?;
    let store = url.open(OpenMode::ReadOnly)?;
    let store = &*store;
    let now_ms = store.now_ms();
    let since_ms = match &a.since {
        None => None,
        Some(t) => Some(parse_since(t, now_ms)?),
    };
    if let Some(since) = since_ms {
        let kept_from_ms = setpoint_runtime::retention::kept_from(store)?;
        if since < kept_from_ms {
            return Err(BadInput(
                measure::MeasureError::Compacted {
                    since_ms: since,
                    kept_from_ms,
                }
                .to_string(),
            )
            .into());
        }
    }
    let names = match &a.workload {
        Some(w) => vec![w.clone()],
        None => events::logged_workloads(store)?,
    };
    let mut all = Vec::new();
    for name in &names {
        let period_ms = store
            .get(&workload_key(name))?
            .map(|e| decode::<WorkloadSpec>(&e).map(|w| w.value.period_ms))
            .transpose()?;
        let spec = WindowSpec {
            since_ms,
            last: a.last,
            time_scale: a.time_scale,
            period_ms,
            now_ms,
        };
        match measure::measure(store, name, &spec) {
            Ok(m) => all.push(m),
            Err(e @ measure::MeasureError::NoEvents(_)) if a.workload.is_some() => {
                return Err(BadInput(e.to_string()).into())
            }
            Err(measure::MeasureError::NoEvents(_)) => {}
            Err(
                e @ (measure::MeasureError::EmptyWindow | measure::MeasureError::Compacted { .. }),
            ) => return Err(BadInput(e.to_string()).into()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(match a.format {
        Format::Json => crate::output::json_with_schema(&serde_json::json!({ "workloads": all }))?,
        Format::Table => measure_table(&all),
        // No workload measured prints nothing, as the table does.
        Format::Csv => setpoint_sim::output::print(
            &crate::records::measure_records(&all),
            setpoint_sim::output::Format::Csv,
            &[],
        ),
    })
}

/// `10m` (that long ago) or an integer (store milliseconds).
fn parse_since(t: &str, now_ms: u64) -> anyhow::Result<u64> {
    if let Ok(ms) = t.parse::<u64>() {
        return Ok(ms);
    }
    let ago = parse_duration(t).map_err(|e| {
        BadInput(format!(
            "--since '{t}': {e}; accepted a duration ago (10m) or store milliseconds"
        ))
    })?;
    Ok(now_ms.saturating_sub(ago.as_millis() as u64))
}

fn measure_table(all: &[Measurement]) -> String {
    let mut t = String::new();
    for m in all {
        let x = &m.metrics;
        let _ = writeln!(
            t,
            "workload {}: seconds 0 to {} from {} ms, time scale {} (1 s = {} ms)",
            m.workload,
            m.last_second,
            m.origin_ms,
            m.time_scale,
            m.window.second_ms()
        );
        let _ = writeln!(
            t,
            "rounds work/round created unneeded delete commands deleted overshoot stable(sec) died peak live copy-sec above"
        );
        let _ = writeln!(
            t,
            "{:>6} {:>10} {:>7} {:>8} {:>15} {:>7} {:>9} {:>11} {:>4} {:>9} {:>14}",
            x.rounds,
            js_to_fixed2(x.work_per_round),
            x.created,
            x.unneeded,
            x.delete_commands,
            x.deleted,
            x.overshoot,
            x.stable.map_or("none".into(), |s| s.to_string()),
            x.died,
            x.peak_live,
            x.copy_seconds_above
        );
        if m.restarts > 0 {
            let _ = writeln!(
                t,
                "restarts {}: creations that replaced a failed start (not counted as died or unneeded)",
                m.restarts
            );
        }
        t.push_str(&jitter_lines(m));
        t.push('\n');
    }
    t
}

fn spread_ms(s: &Spread) -> String {
    if s.count == 0 {
        return "-".into();
    }
    format!("{}/{}/{}/{} ms (n={})", s.min, s.p50, s.p99, s.max, s.count)
}

fn jitter_lines(m: &Measurement) -> String {
    let j = &m.jitter;
    let mut t = String::from("real delays, min/p50/p99/max:\n");
    for (what, s) in [
        ("ready to ledger", &j.ready_to_ledger),
        ("exit to ledger", &j.exit_to_ledger),
        ("create to start", &j.create_to_start),
        ("start to ready", &j.start_to_ready),
        ("round timing error", &j.round_error),
    ] {
        let _ = writeln!(t, "  {what:<19} {}", spread_ms(s));
    }
    t
}

fn lesson(a: &LessonArgs) -> anyhow::Result<String> {
    let controllers = a
        .controller
        .iter()
        .map(|c| {
            c.parse::<ControllerKind>().map_err(|_| {
                BadInput(format!(
                    "--controller '{c}': accepted ledger, intent, expectations, named or gated"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(&g) = a.delay.iter().find(|&&g| g > 3600) {
        anyhow::bail!(BadInput(format!(
            "--delay {g}: out of range: accepted 0 to 3600 seconds"
        )));
    }
    setpoint_runtime::rt::quiet_stderr(!a.verbose);
    let mut cfg = RealLesson::new(&a.data_dir);
    cfg.time_scale = a.time_scale;
    cfg.jobs = a.jobs;
    cfg.delays = a.delay.clone();
    cfg.controllers = controllers;
    cfg.store = a.store.clone().map(|u| a.etcd.apply(u)).transpose()?;
    cfg.pipeline = a.pipeline.apply(cfg.pipeline);
    cfg.pipeline
        .check()
        .map_err(|e| BadInput(format!("report pipeline: {e}")))?;
    if a.pipeline.any() && a.delay_model.is_none() {
        anyhow::bail!(BadInput(
            "--pipeline, --nodes and --report-every apply only with --delay-model (under a fixed whole-second delay the agent's pipeline delivers each report at its own due, as the lab does); accepted: them with --delay-model".into()
        ));
    }
    cfg.validate().map_err(|e| BadInput(e.to_string()))?;
    if let Some(models) = &a.delay_model {
        return jitter_lesson(a, &cfg, &models.0);
    }
    if a.seed != 1 {
        anyhow::bail!(BadInput(
            "--seed applies only with --delay-model: fixed delays draw no random number; accepted: --seed with --delay-model".into()
        ));
    }
    if !a.real {
        return Ok(match a.format {
            Format::Csv => lesson_csv(&cfg, None)?,
            // Without real cells there is no nested detail: the rows, one object each.
            Format::Json => lesson_records(&cfg, None, setpoint_sim::output::Format::Json)?,
            Format::Table => lesson_table(&cfg, None),
        });
    }
    let rt = async_runtime()?;
    let cells = rt
        .block_on(experiment::run_all(&cfg))
        .map_err(|e| match e {
            ExperimentError::BadInput(m) => anyhow::Error::new(BadInput(m)),
            other => anyhow::Error::new(other),
        })
        .context("the real lesson run failed")?;
    // The copies the agents stopped may take a moment to be reaped by the runtime's threads.
    rt.shutdown_timeout(Duration::from_secs(2));
    Ok(match a.format {
        Format::Json => crate::output::json_with_schema(&serde_json::json!({
            "time_scale": cfg.time_scale,
            "cells": cells,
        }))?,
        Format::Table => lesson_table(&cfg, Some(&cells)),
        Format::Csv => lesson_csv(&cfg, Some(&cells))?,
    })
}

/// The two-thread async runtime the real cells run on.
fn async_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// `experiment lesson --delay-model LIST`: the lab's side of every (controller, model) cell, and
/// with --real the real runs ([`setpoint_reality::jitter`]).
fn jitter_lesson(
    a: &LessonArgs,
    cfg: &RealLesson,
    models: &[setpoint_sim::delay::DelayModel],
) -> anyhow::Result<String> {
    let mut lab = Vec::new();
    for &c in &cfg.controllers {
        for m in models {
            let (one, runs) = jitter::lab_of(m, a.startup_model.as_ref(), c, a.seed, cfg.pipeline)
                .map_err(|e| BadInput(e.to_string()))?;
            lab.push((
                c.name(),
                setpoint_sim::sweep::model_text(m),
                a.seed,
                one,
                runs,
            ));
        }
    }
    let cells = if a.real {
        let rt = async_runtime()?;
        let cells = rt
            .block_on(jitter::run_jitter_all(cfg, models, a.seed))
            .map_err(|e| match e {
                ExperimentError::BadInput(m) => anyhow::Error::new(BadInput(m)),
                other => anyhow::Error::new(other),
            })
            .context("the real jittered run failed")?;
        rt.shutdown_timeout(Duration::from_secs(2));
        Some(cells)
    } else {
        None
    };
    let mut rows = crate::records::jitter_records(cfg.time_scale, &lab, cells.as_deref());
    let startup = a
        .startup_model
        .as_ref()
        .map(setpoint_sim::sweep::model_text);
    if let Some(text) = &startup {
        // Only with the flag, so every row without it keeps its bytes.
        for r in &mut rows {
            r.push("lab_startup_model", text.as_str());
        }
    }
    Ok(match a.format {
        Format::Csv => setpoint_sim::output::print(&rows, setpoint_sim::output::Format::Csv, &[]),
        Format::Json => match &cells {
            Some(cells) => crate::output::json_with_schema(&serde_json::json!({
                "time_scale": cfg.time_scale,
                "seed": a.seed,
                "cells": cells,
            }))?,
            None => setpoint_sim::output::print(&rows, setpoint_sim::output::Format::Json, &[]),
        },
        Format::Table => {
            let table = jitter_table_of(&lab, cells.as_deref(), &cfg.pipeline);
            match &startup {
                Some(text) => table.replacen(
                    "B=5 sec startup",
                    &format!("startup drawn from {text} (the lab's side)"),
                    1,
                ),
                None => table,
            }
        }
    })
}

/// The table of `experiment lesson --delay-model`: per cell the lab's row at the seed, the real
/// row with its differences, and the lab's overshoot over many seeds.
fn jitter_table_of(
    lab: &[crate::records::JitterLab],
    cells: Option<&[jitter::JitterOutcome]>,
    pipeline: &setpoint_sim::pipeline::PipelineSpec,
) -> String {
    let mut out = format!(
        "U=15 sec loop, B=5 sec startup, desired 6 copies, 2 deaths at sec 300, 900 sec run
lab pipeline: {}{}
",
        pipeline.describe(),
        if *pipeline == setpoint_reality::experiment::agent_pipeline() {
            " (setpoint's agent)"
        } else {
            ""
        }
    );
    let header = LOOP_HEADER.replacen("G(sec)", "      ", 1);
    let row = |m: &Metrics| loop_row(0, m)[6..].to_owned();
    for (controller, model, seed, one, runs) in lab {
        let _ = write!(
            out,
            "\ncontroller {controller}, report delay {model}, seed {seed}\n{header}\nlab   {}\n",
            row(one)
        );
        if let Some(c) = cells.and_then(|cs| {
            cs.iter()
                .find(|c| c.delay_model == *model && c.controller.name() == *controller)
        }) {
            let real = &c.measured.metrics;
            let _ = writeln!(out, "real  {}{}", row(real), differences(real, one));
        }
        let _ = writeln!(
            out,
            "lab over {} seeds: overshoot in {:.1}% of runs, mean {:.2}, p95 {}, max {}",
            runs.runs,
            100.0 * runs.p_overshoot,
            runs.overshoot_mean,
            runs.overshoot_p95,
            runs.overshoot_max
        );
    }
    out
}

/// One CSV row per cell, controllers slowest ([`crate::records::experiment_records`]).
fn lesson_csv(cfg: &RealLesson, cells: Option<&[CellOutcome]>) -> anyhow::Result<String> {
    lesson_records(cfg, cells, setpoint_sim::output::Format::Csv)
}

/// The lab's rows (and the real ones, if run) as records in `format`: CSV, or without --real
/// JSON lines of the same records.
fn lesson_records(
    cfg: &RealLesson,
    cells: Option<&[CellOutcome]>,
    format: setpoint_sim::output::Format,
) -> anyhow::Result<String> {
    let mut lab = Vec::new();
    for &c in &cfg.controllers {
        for &g in &cfg.delays {
            let m = experiment::lab_metrics(&experiment::lesson_spec(g, c))
                .map_err(|e| BadInput(e.to_string()))?;
            lab.push((g, c.name(), m));
        }
    }
    let rows = crate::records::experiment_records(cfg.time_scale, &lab, cells);
    Ok(setpoint_sim::output::print(&rows, format, &[]))
}

/// The lab's table, and with real cells, each measured row under its simulated one, the lab's
/// row for the measured delays, and the jitter.
fn lesson_table(cfg: &RealLesson, cells: Option<&[CellOutcome]>) -> String {
    let mut out = String::from(
        "U=15 sec loop, B=5 sec startup, desired 6 copies, 2 deaths at sec 300, 900 sec run\n",
    );
    if cells.is_some() {
        let half = cfg.second_ms() / 2.0;
        let _ = writeln!(
            out,
            "real: time scale {} (1 sec = {} ms: U = {} ms, B = {} ms, G = {} ms per sec); one agent, \
             tick, assignment read and report every {} ms; copies run `{}`",
            cfg.time_scale,
            cfg.second_ms(),
            15.0 * cfg.second_ms(),
            5.0 * cfg.second_ms(),
            cfg.second_ms(),
            half.max(1.0),
            cfg.program.join(" ")
        );
        out.push_str(
            "rows: lab = the lab's prediction; real = measured (differences named after it);\n      \
             lab+d = the lab with G and B lengthened by the measured pipeline (whole seconds)\n",
        );
    }
    for &controller in &cfg.controllers {
        let _ = write!(out, "\ncontroller: {}\n", controller.lesson_title());
        let lead = if cells.is_some() { "      " } else { "" };
        let _ = writeln!(out, "{lead}{LOOP_HEADER}");
        for &g in &cfg.delays {
            let lab = experiment::lab_metrics(&experiment::lesson_spec(g, controller))
                .expect("the lesson's world is valid for every controller");
            let Some(cells) = cells else {
                let _ = writeln!(out, "{}", loop_row(g, &lab));
                continue;
            };
            let Some(cell) = cells
                .iter()
                .find(|c| c.delay == g && c.controller == controller)
            else {
                continue;
            };
            let real = &cell.measured.metrics;
            let _ = writeln!(out, "lab   {}", loop_row(g, &lab));
            let _ = writeln!(
                out,
                "real  {}{}",
                loop_row(g, real),
                differences(real, &lab)
            );
            let (gd, bd) = calibrated(cell);
            let fitted = experiment::lab_metrics(&LessonSpec {
                delay: gd,
                startup: bd,
                ..experiment::lesson_spec(g, controller)
            })
            .expect("calibrated delays stay in range");
            let _ = writeln!(
                out,
                "lab+d {}{}   (G = {gd}, B = {bd})",
                loop_row(g, &fitted),
                differences(real, &fitted)
            );
        }
    }
    if let Some(cells) = cells {
        out.push_str(&jitter_table(cfg, cells));
    }
    out
}

/// The lab's G and B lengthened by the measured pipeline (medians), in whole virtual seconds:
/// B by the whole seconds a copy took beyond B to become ready after its pass (the live count is
/// taken at whole seconds), and G by the rest of the way to the ledger, rounded up and at least
/// 1: a real report always takes some time, so a real ledger never shows a change in the second
/// it happened, as the lab's ledger does when the change falls on a round.
pub fn calibrated(cell: &CellOutcome) -> (u64, u64) {
    let m = &cell.measured;
    let j = &m.jitter;
    let sec = m.window.second_ms();
    let world = experiment::lesson_spec(cell.delay, cell.controller);
    let beyond_b =
        (j.create_to_start.p50 + j.start_to_ready.p50) as f64 / sec - world.startup as f64;
    let beyond_g = j.ready_to_ledger.p50 as f64 / sec - world.delay as f64;
    let b_extra = beyond_b.floor().max(0.0);
    let g_extra = ((beyond_b + beyond_g - b_extra).ceil() as u64).max(1);
    (world.delay + g_extra, world.startup + b_extra as u64)
}

/// `  <- differs: overshoot 6 (lab 0), …`, or nothing.
fn differences(real: &Metrics, lab: &Metrics) -> String {
    let stable = |m: &Metrics| m.stable.map_or("none".into(), |s| s.to_string());
    let pairs = [
        (
            "work/round",
            js_to_fixed2(real.work_per_round),
            js_to_fixed2(lab.work_per_round),
        ),
        ("created", real.created.to_string(), lab.created.to_string()),
        (
            "unneeded",
            real.unneeded.to_string(),
            lab.unneeded.to_string(),
        ),
        (
            "delete commands",
            real.delete_commands.to_string(),
            lab.delete_commands.to_string(),
        ),
        ("deleted", real.deleted.to_string(), lab.deleted.to_string()),
        (
            "overshoot",
            real.overshoot.to_string(),
            lab.overshoot.to_string(),
        ),
        ("stable", stable(real), stable(lab)),
    ];
    let diff: Vec<String> = pairs
        .iter()
        .filter(|(_, r, l)| r != l)
        .map(|(what, _, l)| format!("{what} (lab {l})"))
        .collect();
    if diff.is_empty() {
        String::new()
    } else {
        format!("  <- differs: {}", diff.join(", "))
    }
}

fn jitter_table(cfg: &RealLesson, cells: &[CellOutcome]) -> String {
    let sec = cfg.second_ms();
    let vs = |ms: i64| format!("{:.2}", ms as f64 / sec);
    let mut out = format!(
        "\nreal jitter, in virtual seconds (1 sec = {sec} ms): p50/p99/max\n\
         controller  G  ready->ledger minus G    create->ready minus B    exit->ledger minus G     round error     rounds  kill late  store delay\n"
    );
    for c in cells {
        let j = &c.measured.jitter;
        let g_ms = (c.delay as f64 * sec).round() as i64;
        let b_ms = (5.0 * sec).round() as i64;
        let minus = |s: &Spread, by: i64| {
            if s.count == 0 {
                "-".to_owned()
            } else {
                format!("{}/{}/{}", vs(s.p50 - by), vs(s.p99 - by), vs(s.max - by))
            }
        };
        let to_ready = Spread {
            count: j.create_to_start.count.min(j.start_to_ready.count),
            min: j.create_to_start.min + j.start_to_ready.min,
            p50: j.create_to_start.p50 + j.start_to_ready.p50,
            p99: j.create_to_start.p99 + j.start_to_ready.p99,
            max: j.create_to_start.max + j.start_to_ready.max,
        };
        let _ = writeln!(
            out,
            "{:<10} {:>3}  {:<23}  {:<23}  {:<23}  {:<14} {:>6}  {:>8}  {}",
            c.controller.name(),
            c.delay,
            minus(&j.ready_to_ledger, g_ms),
            minus(&to_ready, b_ms),
            minus(&j.exit_to_ledger, g_ms),
            minus(&j.round_error, 0),
            c.measured.metrics.rounds,
            vs(c.kill_late_ms),
            store_delay(&c.store_delay_us, sec),
        );
    }
    out.push_str(
        "(create->ready sums the p50s, p99s and maxima of create->start and start->ready;\n          store delay: a report-sized commit until a pass can read it, p50/p99 in virtual seconds)\n",
    );
    out
}

/// A store delay in microseconds, as p50/p99 in virtual seconds of `sec` real milliseconds.
fn store_delay(s: &Spread, sec: f64) -> String {
    if s.count == 0 {
        return "-".into();
    }
    let vs = |us: i64| us as f64 / 1000.0 / sec;
    format!("{:.3}/{:.3}", vs(s.p50), vs(s.p99))
}

/// One report delay of `--delays`: a whole number of seconds (its range is checked with the
/// rest of the experiment's settings).
fn whole_seconds(s: &str) -> Result<u64, String> {
    s.trim().parse().map_err(|_| {
        format!("'{s}' is not a whole number of seconds; accepted: a list like 0,5,10")
    })
}
