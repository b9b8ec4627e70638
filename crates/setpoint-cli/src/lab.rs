//! `setpoint run`: one scenario from flags or a file (flags override the file), on whichever
//! engine fits; seeds, Monte Carlo, traces and every controller.

use anyhow::Context;
use clap::parser::ValueSource;
use clap::ArgMatches;
use setpoint_sim::delay::DelayModel;
use setpoint_sim::montecarlo::monte_carlo;
use setpoint_sim::scenario::{
    ControllerSpec, Event, Scenario, ScenarioSpec, TimedEvent, Toll, Workload,
};
use setpoint_sim::scenario_file;
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
    let (label, scenario) = build(args, matches)?;
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

/// The lab scenario that `run`'s arguments describe: the file, if one is given, with the flags
/// typed on the command line on top; otherwise the flags alone. Returns a label for outputs too.
pub fn build(args: &RunArgs, matches: &ArgMatches) -> anyhow::Result<(String, Scenario)> {
    let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    let (label, mut spec) = match &args.scenario {
        Some(path) => (path.display().to_string(), scenario_file::load(path)?),
        None => (
            "(command line)".to_owned(),
            ScenarioSpec {
                events: Vec::new(),
                ..ScenarioSpec::default()
            },
        ),
    };
    // Without a file every flag counts, defaults included: they are the lesson's settings.
    let set = |id: &str| args.scenario.is_none() || given(id);
    let w = &args.lesson.world;
    if set("period") {
        spec.period = args.lesson.period;
    }
    if set("duration") {
        spec.duration = w.duration;
    }
    if let Some(model) = &args.delay_model {
        spec.delay = model.clone();
    } else if set("delay") {
        spec.delay = DelayModel::fixed_seconds(args.lesson.delay);
    }
    if args.scenario.is_none() {
        spec.workloads = vec![Workload {
            name: "collector".into(),
            desired: w.desired,
            startup: w.startup,
        }];
    } else {
        for workload in &mut spec.workloads {
            if given("desired") {
                workload.desired = w.desired;
            }
            if given("startup") {
                workload.startup = w.startup;
            }
        }
    }
    if set("deaths") {
        spec.events.retain(|e| !matches!(e.event, Event::Deaths(_)));
        spec.events.extend(w.deaths.0.iter().map(|d| TimedEvent {
            at: d.at,
            workload: None,
            event: Event::Deaths(Toll::Count(d.count)),
        }));
    }
    if set("controller") {
        spec.controller = ControllerSpec {
            kind: w.controller,
            ..spec.controller
        };
    }
    for (value, flag) in [(args.ttl, "--ttl"), (args.burst, "--burst")] {
        if value.is_some() && spec.controller.kind != setpoint_core::ControllerKind::Expectations {
            return Err(setpoint_sim::ScenarioError::DoesNotApply {
                setting: flag.to_owned(),
                controller: spec.controller.kind,
            }
            .into());
        }
    }
    if let Some(ttl) = args.ttl {
        spec.controller.expectations.ttl = ttl;
    }
    if let Some(burst) = args.burst {
        spec.controller.expectations.burst = burst;
    }
    if let Some(seed) = args.seed {
        spec.seed = seed;
    }
    Ok((label, Scenario::new(spec)?))
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
    let summary = monte_carlo(scenario, seed, runs)?;
    Ok(match args.format {
        Format::Table => report::summary_table(label, scenario, &summary),
        format => output::print(
            &output::monte_carlo_records(label, scenario, &summary),
            format.into(),
            &[],
        ),
    })
}
