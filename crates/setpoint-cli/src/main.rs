//! The `setpoint` binary: parses the command line, hands validated settings to the libraries and
//! prints what they return.
//!
//! Exit codes: 0 success (a closed output pipe counts as success), 1 failure, 2 bad input.

mod args;
mod runtime;

use std::io::{self, Write};
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use serde::Serialize;
use setpoint_sim::lesson::{self, RelationGrid, RelationScan};
use setpoint_sim::{simulate, Scenario, ScenarioError};

use args::{Cli, Command, LessonPart, RelationArgs, RunArgs, RunFormat, TableFormat};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    match execute(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.downcast_ref::<ScenarioError>().is_some() || runtime::is_bad_input(&e) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Help and version go to stdout with status 0; any other parse error becomes one line on
/// stderr with status 2.
fn clap_exit(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ => {
            match e.kind() {
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => eprintln!(
                    "error: a subcommand is required: lesson, run or relation (see 'setpoint --help')"
                ),
                _ => eprintln!("{} (see 'setpoint --help')", one_line(&e.to_string())),
            }
            ExitCode::from(2)
        }
    }
}

/// Folds clap's multi-line message into one line: the error itself, plus the accepted values
/// and tips that clap prints below it, without the usage block.
fn one_line(text: &str) -> String {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut out = lines.next().unwrap_or("error: bad command line").to_owned();
    for l in lines {
        if l.starts_with('[') || l.starts_with("tip:") {
            out.push_str(if l.starts_with('[') { " " } else { "; " });
            out.push_str(l);
        }
    }
    out
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

fn execute(cli: Cli) -> anyhow::Result<()> {
    let text = match cli.command {
        Command::Lesson { part } => match part {
            None => lesson::lesson_all(),
            Some(LessonPart::Loop) => lesson::lesson_loop(),
            Some(LessonPart::Relation) => lesson::lesson_relation(),
        },
        Command::Run(args) => run(&args)?,
        Command::Relation(args) => relation(&args)?,
        Command::Runtime(cmd) => runtime::execute(cmd)?,
    };
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing to stdout")?;
    Ok(())
}

fn run(args: &RunArgs) -> anyhow::Result<String> {
    let scenario = Scenario::new(args.world.spec(args.delay, args.period))?;
    let m = simulate(&scenario);
    Ok(match args.format {
        RunFormat::Table => format!(
            "{}\n{}\n",
            lesson::LOOP_HEADER,
            lesson::loop_row(args.delay, &m)
        ),
        RunFormat::Json => format!("{}\n", serde_json::to_string(&m)?),
        RunFormat::Csv => format!("{}\n{}\n", setpoint_sim::Metrics::CSV_HEADER, m.csv_row()),
    })
}

/// The JSON form of a relation scan.
#[derive(Serialize)]
struct RelationJson<'a> {
    desired: u64,
    startup: u64,
    duration: u64,
    controller: &'a str,
    cells: &'a [lesson::RelationCell],
    cell_count: usize,
    mismatched: usize,
}

fn relation(args: &RelationArgs) -> anyhow::Result<String> {
    let grid = RelationGrid {
        base: args.world.spec(0, 1),
        delays: args.delays.0.clone(),
        periods: args.periods.0.clone(),
    };
    let scan = RelationScan::try_run(&grid)?;
    let w = &args.world;
    Ok(match args.format {
        TableFormat::Json => format!(
            "{}\n",
            serde_json::to_string(&RelationJson {
                desired: w.desired,
                startup: w.startup,
                duration: w.duration,
                controller: w.controller.name(),
                cells: &scan.cells,
                cell_count: scan.cells.len(),
                mismatched: scan.mismatched(),
            })?
        ),
        TableFormat::Table => format!(
            "measured overshoot (row: report delay G, column: loop period U); desired {}, B={} sec, {} sec run, controller {}\n{}\nlesson's prediction: desired x (ceil((G+B)/U) - 1)\n{}\nrelation: overshoot = desired x (ceil((G+B)/U) - 1); {} cells, {} mismatched\n",
            w.desired,
            w.startup,
            w.duration,
            w.controller,
            scan.overshoot_table(5),
            scan.prediction_table(5),
            scan.cells.len(),
            scan.mismatched()
        ),
    })
}
