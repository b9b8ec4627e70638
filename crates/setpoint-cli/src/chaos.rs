//! `setpoint chaos`: the runtime's own controller host and agents in the lab's simulated world
//! (crate setpoint-chaos), under fault schedules drawn from a fault model, checked after every
//! run; a failing seed is shrunk to a minimal schedule and written as a replay file.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use setpoint_chaos::adapt::Bugs;
use setpoint_chaos::check::Violation;
use setpoint_chaos::runner::{run_checked, run_seeds, shrink_seed, SeedReport};
use setpoint_sim::output::{print, Record, Value};

use crate::output::Format;

/// `setpoint chaos` arguments.
#[derive(Debug, Args)]
pub struct ChaosArgs {
    /// The fault model (TOML, `docs/chaos.md`), or with --replay a replay file written by a
    /// failing run.
    #[arg(required_unless_present = "lesson")]
    pub scenario: Option<PathBuf>,
    /// Instead of a fault model: the lesson's cells (6 copies, U = 15, B = 5, 2 deaths at
    /// second 300, 900 seconds) run by the runtime in the world, scaled as `experiment lesson
    /// --real` runs them, printed beside the lab's prediction.
    #[arg(long, conflicts_with_all = ["replay", "runs", "shrink"])]
    pub lesson: bool,
    /// With --lesson: world milliseconds per virtual second, divided by 1000 (0.01: 1 s = 10 ms,
    /// as `experiment lesson --real`).
    #[arg(
        long,
        default_value = "0.01",
        value_name = "SCALE",
        requires = "lesson"
    )]
    pub time_scale: f64,
    /// With --lesson: the report delays G, in seconds, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,5,10,20,30,60",
        value_name = "G,...",
        requires = "lesson",
        alias = "delays"
    )]
    pub delay: Vec<u64>,
    /// With --lesson: the controllers, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ledger,intent",
        value_name = "NAME,...",
        requires = "lesson",
        alias = "controllers"
    )]
    pub controller: Vec<String>,
    /// How many seeded runs: seeds S, S+1, … S+N−1, with S from --seed.
    #[arg(long, alias = "seeds", default_value = "1", value_name = "N", value_parser = chaos_runs)]
    pub runs: u64,
    /// The first seed.
    #[arg(long, default_value = "1", value_name = "S")]
    pub seed: u64,
    /// Replay the file's own seed and schedule exactly, and print the run's trace after its
    /// verdict.
    #[arg(long)]
    pub replay: bool,
    /// Output format: table (failing seeds and a summary), json or csv (one record per seed).
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Worker threads (default: all cores). Output is the same on any number.
    #[arg(short = 'j', long, alias = "threads", value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub jobs: Option<u64>,
    /// How many failing seeds to shrink and write as replay files (0: none).
    #[arg(long, default_value = "3", value_name = "K")]
    pub shrink: usize,
    /// Where shrunk replay files go.
    #[arg(
        long,
        alias = "out",
        default_value = "chaos-failures",
        value_name = "DIR"
    )]
    pub out_dir: PathBuf,
}

/// The most runs one `chaos` command takes (docs/limits.md): a ten-minute model costs about
/// 40 ms of CPU a run, so 10^6 runs are about 11 hours of CPU; a larger search is split over
/// commands or machines with `--seed`.
pub const MAX_CHAOS_RUNS: u64 = 1_000_000;

fn chaos_runs(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if (1..=MAX_CHAOS_RUNS).contains(&n) => Ok(n),
        Ok(0) | Err(_)
            if !s.bytes().all(|b| b.is_ascii_digit()) || s.trim_start_matches('0').is_empty() =>
        {
            Err(format!(
                "'{s}' is not a count of runs: accepted 1 to {MAX_CHAOS_RUNS}"
            ))
        }
        _ => Err(format!(
            "{s} runs is over one command's budget: accepted 1 to {MAX_CHAOS_RUNS} (a ten-minute \
             model costs about 40 ms of CPU a run, so {MAX_CHAOS_RUNS} runs are about 11 hours); \
             split a larger search with --seed S --runs N (docs/limits.md)"
        )),
    }
}

/// The failure of a chaos run: some seed broke an invariant (exit 1).
#[derive(Debug, thiserror::Error)]
#[error("{failed} of {seeds} seeds failed a check")]
pub struct ChaosFailed {
    failed: usize,
    seeds: u64,
}

fn record(r: &SeedReport) -> Record {
    let mut rec = Record::new();
    rec.push("seed", r.seed);
    rec.push("faults", r.faults as u64);
    rec.push("events", r.events);
    let first = r.violations.first();
    rec.push(
        "verdict",
        first.map_or("pass".to_owned(), |v| v.check.name().to_owned()),
    );
    rec.push("violations", r.violations.len() as u64);
    rec.push(
        "first",
        first.map_or(Value::Null, |v: &Violation| {
            Value::Str(format!("at {} ms: {}", v.at_ms, v.detail))
        }),
    );
    rec
}

/// Runs `setpoint chaos`.
pub fn run(args: &ChaosArgs) -> anyhow::Result<()> {
    let Some(scenario) = &args.scenario else {
        return write_stdout(&crate::chaos_lesson::run(args)?);
    };
    let model = setpoint_chaos::faults::load(scenario)?;
    if args.replay {
        return replay(args, &model);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.jobs.unwrap_or(0) as usize)
        .build()
        .context("starting the worker threads")?;
    let end = args.seed.checked_add(args.runs).ok_or_else(|| {
        crate::BadInput(format!(
            "--seed {} plus --runs {} overflows: keep S + N below 2^64",
            args.seed, args.runs
        ))
    })?;
    let started = std::time::Instant::now();
    // In chunks, so that a bar can move and a signal can stop the search between two of them
    // with what it found; each seed's run is the same whatever the chunks.
    let stop = crate::progress::Stop::watch();
    let bar = crate::progress::bar("chaos", args.runs, "runs");
    let chunk = 8 * pool.current_num_threads().max(1) as u64;
    let mut reports: Vec<SeedReport> = Vec::new();
    let mut from = args.seed;
    let mut interrupted = None;
    while from < end {
        if let Some(i) = stop.signal() {
            interrupted = Some(i);
            break;
        }
        let to = end.min(from.saturating_add(chunk));
        reports.extend(pool.install(|| run_seeds(&model, from..to, Bugs::default())));
        bar.inc(to - from);
        let failures = reports.iter().filter(|r| !r.passed()).count();
        if failures > 0 {
            bar.set_message(format!(", {failures} failed"));
        }
        from = to;
    }
    bar.finish_and_clear();
    let wall = started.elapsed();
    let failed: Vec<&SeedReport> = reports.iter().filter(|r| !r.passed()).collect();
    if let Some(i) = interrupted {
        // What it has: the rows of the seeds run, then one line of where it stopped; no
        // shrinking, which could take as long again.
        let rows: Vec<Record> = match args.format {
            Format::Table => failed.iter().map(|r| record(r)).collect(),
            _ => reports.iter().map(record).collect(),
        };
        write_stdout(&print(&rows, args.format.into(), &["schema"]))?;
        let last = reports
            .last()
            .map_or("none".to_owned(), |r| r.seed.to_string());
        let first_failed = failed.first().map_or(String::new(), |r| {
            format!("; first failing seed {}", r.seed)
        });
        eprintln!(
            "chaos: stopped by {} after {} of {} runs ({:.1} s): seeds {}..={last}, {} failed{first_failed}; \
             go on with --seed {}",
            i.name,
            reports.len(),
            args.runs,
            wall.as_secs_f64(),
            args.seed,
            failed.len(),
            from
        );
        return Err(i.into());
    }
    let mut text = match args.format {
        Format::Table => {
            let rows: Vec<Record> = failed.iter().map(|r| record(r)).collect();
            // The schema version is for programs: a table leaves it out, as every table does.
            let mut t = print(&rows, args.format.into(), &["schema"]);
            let events: u64 = reports.iter().map(|r| r.events).sum();
            t.push_str(&format!(
                "{} seeds from {} of {}: {} failed, {events} events\n",
                reports.len(),
                args.seed,
                scenario.display(),
                failed.len()
            ));
            t
        }
        _ => {
            let rows: Vec<Record> = reports.iter().map(record).collect();
            print(&rows, args.format.into(), &[])
        }
    };
    eprintln!(
        "chaos: {} seeds in {:.2} s ({:.0} runs/s)",
        reports.len(),
        wall.as_secs_f64(),
        reports.len() as f64 / wall.as_secs_f64().max(1e-9)
    );
    for r in failed.iter().take(args.shrink) {
        let Some((min, check, tries)) =
            pool.install(|| shrink_seed(&model, r.seed, Bugs::default()))
        else {
            continue;
        };
        std::fs::create_dir_all(&args.out_dir)
            .with_context(|| format!("creating {}", args.out_dir.display()))?;
        let path = args.out_dir.join(format!("seed-{}.toml", r.seed));
        let comment = format!(
            "seed {} of {} failed '{}'; shrunk from {} faults to {} in {tries} runs.\nReplay: setpoint chaos --replay {}",
            r.seed,
            scenario.display(),
            check.name(),
            r.faults,
            min.len(),
            path.display()
        );
        std::fs::write(&path, model.replay_file(r.seed, &min, &comment))
            .with_context(|| format!("writing {}", path.display()))?;
        if args.format == Format::Table {
            text.push_str(&format!(
                "seed {}: '{}' shrunk from {} faults to {} in {tries} runs: {}\n",
                r.seed,
                check.name(),
                r.faults,
                min.len(),
                path.display()
            ));
        }
    }
    write_stdout(&text)?;
    if failed.is_empty() {
        Ok(())
    } else {
        Err(ChaosFailed {
            failed: failed.len(),
            seeds: args.runs,
        }
        .into())
    }
}

fn replay(args: &ChaosArgs, model: &setpoint_chaos::Model) -> anyhow::Result<()> {
    let scenario = args
        .scenario
        .as_deref()
        .unwrap_or(std::path::Path::new("-"));
    let (Some(seed), Some(schedule)) = (model.seed, model.schedule.clone()) else {
        return Err(crate::BadInput(format!(
            "{}: --replay needs a replay file, with `seed` and an explicit schedule (`[[event]]` tables, or `event = []`), as a failing run writes",
            scenario.display()
        ))
        .into());
    };
    let f = |i: usize, r: &setpoint_chaos::Role, now: u64| {
        setpoint_chaos::adapt::make(model, Bugs::default(), seed, i, r, now)
    };
    let (report, out) = run_checked(model, seed, schedule, &f, true);
    let mut text = print(&[record(&report)], args.format.into(), &[]);
    if let Some(out) = out {
        for v in &report.violations {
            text.push_str(&format!(
                "violation {} at {} ms: {}\n",
                v.check.name(),
                v.at_ms,
                v.detail
            ));
        }
        for line in out.trace {
            text.push_str(&line);
            text.push('\n');
        }
    }
    write_stdout(&text)?;
    if report.passed() {
        Ok(())
    } else {
        Err(ChaosFailed {
            failed: 1,
            seeds: 1,
        }
        .into())
    }
}

fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing to stdout")
}
