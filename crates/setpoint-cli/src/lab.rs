//! `setpoint run`: one scenario from flags or a file (flags override the file), on whichever
//! engine fits; seeds, Monte Carlo, traces and every controller.

use anyhow::Context;
use clap::ArgMatches;
use setpoint_sim::montecarlo::monte_carlo;
use setpoint_sim::scenario::Scenario;
use setpoint_sim::{output, report};

use crate::args::RunArgs;
use crate::output::Format;

/// Runs `setpoint run` in the lab. `matches` tells which flags the command line gave.
pub fn run(args: &RunArgs, matches: &ArgMatches) -> anyhow::Result<String> {
    if args.trace.is_some() && args.runs.is_some() {
        return Err(crate::BadInput(
            "--trace writes the seconds of one run; accepted: --trace without --runs, or --runs without --trace".into(),
        )
        .into());
    }
    let (label, scenario) = args.world.build(matches)?;
    let seed = scenario.spec().seed;
    match args.runs {
        None => {
            let outcome = match &args.trace {
                None => setpoint_sim::run(&scenario, seed)?,
                Some(path) => write_trace(&scenario, seed, path)?,
            };
            single(args, &label, &scenario, &outcome)
        }
        Some(runs) => summary(args, &label, &scenario, runs, seed),
    }
}

/// Runs one seed of `scenario`, writing every workload's seconds to `path` as CSV.
fn write_trace(
    scenario: &Scenario,
    seed: u64,
    path: &std::path::Path,
) -> anyhow::Result<setpoint_sim::Outcome> {
    use std::io::Write;
    let spec = scenario.spec();
    setpoint_sim::limits::check_trace(spec.duration, spec.workloads.len() as u64)?;
    let file = std::fs::File::create(path)
        .with_context(|| format!("cannot create the trace file {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let names: Vec<&str> = scenario
        .spec()
        .workloads
        .iter()
        .map(|w| w.name.as_str())
        .collect();
    let mut failed = writeln!(out, "{}", setpoint_sim::TraceRow::CSV_HEADER).err();
    let outcome = setpoint_sim::run_traced(scenario, seed, &mut |w, row| {
        if failed.is_none() {
            failed = writeln!(out, "{}", row.csv(names[w])).err();
        }
    })?;
    if let Some(e) = failed {
        return Err(e).with_context(|| format!("writing the trace file {}", path.display()));
    }
    out.flush()
        .with_context(|| format!("writing the trace file {}", path.display()))?;
    Ok(outcome)
}

fn single(
    args: &RunArgs,
    label: &str,
    scenario: &Scenario,
    outcome: &setpoint_sim::Outcome,
) -> anyhow::Result<String> {
    Ok(match args.format {
        Format::Table => report::outcome_table(label, scenario, outcome),
        format => output::print(
            &output::run_records(label, scenario, outcome),
            format.into(),
            &[],
        ),
    })
}

fn summary(
    args: &RunArgs,
    label: &str,
    scenario: &Scenario,
    runs: u64,
    seed: u64,
) -> anyhow::Result<String> {
    let spinner = crate::progress::spinner(&format!("run: {runs} runs"));
    let summary = monte_carlo(scenario, seed, runs);
    spinner.finish_and_clear();
    let summary = summary?;
    Ok(match args.format {
        Format::Table => report::summary_table(label, scenario, &summary),
        format => output::print(
            &output::monte_carlo_records(label, scenario, &summary),
            format.into(),
            &[],
        ),
    })
}
