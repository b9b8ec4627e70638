//! The `setpoint` binary: parses the command line, hands validated settings to the libraries and
//! prints what they return.
//!
//! Exit codes: 0 success (a closed output pipe counts as success), 1 failure, 2 bad input, 130
//! or 143 a long command stopped by SIGINT or SIGTERM after printing what it had ([`progress`]).
// The doc comments of clap's arguments are their --help text, not rustdoc: URL patterns such
// as `etcd://[USER@]HOST:PORT[/PREFIX]` and `[IPv6]:PORT` read as broken links to rustdoc.
#![allow(rustdoc::broken_intra_doc_links)]

mod advise;
mod args;
mod calibrate;
mod chaos;
mod chaos_lesson;
mod chaos_plot;
mod destination;
mod etcd_args;
mod inspect;
mod lab;
mod merge;
mod output;
mod pipeline_args;
mod plot;
mod progress;
mod reality;
mod records;
mod relation;
mod report;
mod runtime;
mod runtime_table;
mod scenario_args;
mod shared_args;
mod shell;
mod sweep;
mod vocabulary;

use std::io::{self, Write};

/// The chaos world, sweeps and the runtime allocate many small, short-lived strings and maps;
/// mimalloc serves them faster than the system allocator (docs/performance.md, "Chaos").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches};
use setpoint_sim::lesson;
use setpoint_sim::scenario::ScenarioError;
use setpoint_sim::SettingError;

use args::{Cli, Command, LessonPart};

fn main() -> ExitCode {
    // The matches say which flags the command line gave, which a scenario file needs to know.
    let matches = match Cli::command().try_get_matches() {
        Ok(m) => m,
        Err(e) => return clap_exit(e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    progress::set_quiet(cli.quiet);
    match execute(cli, &matches) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<progress::Interrupted>().is_some() => {
            // The command said on stderr where it stopped.
            let i = e.downcast_ref::<progress::Interrupted>().expect("checked");
            ExitCode::from(i.code)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.downcast_ref::<SettingError>().is_some()
                || e.downcast_ref::<setpoint_sim::GridError>().is_some()
                || e.downcast_ref::<BadInput>().is_some()
                || e.downcast_ref::<ScenarioError>().is_some()
                || e.downcast_ref::<setpoint_sim::limits::LimitError>()
                    .is_some()
                || e.downcast_ref::<setpoint_sim::merge::MergeError>()
                    .is_some()
                || runtime::is_bad_input(&e)
                || e.downcast_ref::<setpoint_chaos::ModelError>().is_some()
                || e.downcast_ref::<setpoint_sim::advise::AdviceError>()
                    .is_some()
                || e.downcast_ref::<setpoint_sim::calibrate::CalibrateError>()
                    .is_some()
            {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Input the command line parsed but that does not make sense together, such as a list where
/// one value is needed. Exits with 2, like every bad input.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

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
            let (path, cmd) = command_path();
            let path = path.join(" ");
            match e.kind() {
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    // List the subcommands as clap knows them, so the list cannot go stale.
                    let names: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
                    eprintln!(
                        "error: '{path}' needs a subcommand: {} (see '{path} --help')",
                        names.join(", "),
                    )
                }
                ErrorKind::MissingRequiredArgument => {
                    use clap::error::{ContextKind, ContextValue};
                    let missing = match e.get(ContextKind::InvalidArg) {
                        Some(ContextValue::Strings(v)) => v.join(", "),
                        Some(ContextValue::String(v)) => v.clone(),
                        _ => "an argument".to_owned(),
                    };
                    // The command's whole usage line, not clap's, which lists only what was given.
                    let usage = cmd.clone().render_usage().to_string();
                    let usage = usage.trim().trim_start_matches("Usage:").trim();
                    let usage = usage
                        .strip_prefix(cmd.get_name())
                        .map_or_else(|| usage.to_owned(), |rest| format!("{path}{rest}"));
                    eprintln!(
                        "error: '{path}' needs {missing}; usage: {usage} (see '{path} --help')"
                    )
                }
                _ => eprintln!("{} (see '{path} --help')", one_line(&e.to_string())),
            }
            ExitCode::from(2)
        }
    }
}

/// The subcommand path the user typed (`setpoint plot timeline`) and that command, for messages
/// that point at the right `--help`.
fn command_path() -> (Vec<String>, clap::Command) {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    let mut path = vec!["setpoint".to_owned()];
    for arg in std::env::args().skip(1) {
        match cmd.find_subcommand(&arg) {
            Some(sub) => {
                path.push(arg.clone());
                cmd = sub.clone();
            }
            None if arg.starts_with('-') => continue,
            None => break,
        }
    }
    (path, cmd)
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

fn execute(cli: Cli, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    let text = match cli.command {
        Command::Lesson { part } => match part {
            None => lesson::lesson_all(),
            Some(LessonPart::Loop) => lesson::lesson_loop(),
            Some(LessonPart::Relation) => lesson::lesson_relation(),
        },
        Command::Run(args) => {
            let sub = matches
                .subcommand_matches("run")
                .context("the run subcommand's matches")?;
            lab::run(&args, sub)?
        }
        Command::Relation(args) => relation::run(&args)?,
        Command::Plot(command) => plot::run(&command, matches.subcommand_matches("plot"))?,
        Command::Report(args) => report::run(&args, matches.subcommand_matches("report"))?,
        Command::Advise(args) => advise::run(&args)?,
        Command::Calibrate(args) => calibrate::run(&args)?,
        Command::Sweep(args) => {
            return sweep::run(args, matches.subcommand_matches("sweep"));
        }
        Command::Merge(args) => merge::run(&args)?,
        Command::Chaos(args) => return chaos::run(&args),
        Command::Runtime(cmd) => runtime::execute(cmd)?,
        Command::Reality(cmd) => reality::execute(cmd)?,
        Command::Shell(cmd) => shell::execute(&cmd, Cli::command())?,
    };
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing to stdout")?;
    Ok(())
}
