//! The command line, as clap types: the top-level [`Cli`], its subcommands and `run`'s arguments.
//! They stay in this crate; `into_spec` turns them into the validated types of setpoint-sim. The
//! argument types several commands share are in [`crate::shared_args`].

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::shared_args::runs;

/// Reconciliation loops that converge without overshoot: the lab simulates them, the runtime
/// keeps real processes running with the same controllers.
#[derive(Debug, Parser)]
#[command(name = "setpoint", version)]
#[command(after_help = GROUPS)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// No progress bars (they are drawn only when stderr is a terminal anyway).
    #[arg(short = 'q', long, global = true)]
    pub quiet: bool,
}

/// The two halves of the command set, under the top-level help. A test checks that every
/// subcommand is named here.
const GROUPS: &str = "\
The lab (deterministic simulation, fast): lesson, run, relation, plot, report, advise, sweep, merge,
  calibrate (an empirical delay model from measurements).
The runtime (real processes, declared in a store): controller and agent keep the copies running
  (up runs a controller and N agents in one process); apply, get, delete, kill, status and logs
  declare, show and disturb the workloads (get copies, describe and events look into them);
  node forget confirms a lost node is gone.
The runtime in the lab: chaos (the runtime's own machines in a simulated world, with faults).
Model against reality: measure (a real run's metrics), experiment (a lab scenario on real processes).
Shell: completions, man.

Exit codes: 0 success, 1 failure, 2 bad input, 130/143 a long command (chaos) stopped by
SIGINT/SIGTERM after printing what it had.";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the lesson's tables exactly as the lesson prints them.
    Lesson {
        /// Which block: `loop` (the metric tables), `relation` (the period scan); both if omitted.
        #[arg(value_enum)]
        part: Option<LessonPart>,
    },
    /// Simulate one scenario and print its metrics: the lesson's world from flags, or a scenario
    /// file (TOML) whose settings the flags given override.
    Run(RunArgs),
    /// Scan report delay against loop period and test the lesson's relation on every cell.
    Relation(crate::relation::RelationArgs),
    /// Draw pictures (SVG, PNG or HTML): a run's timeline, or a heatmap of overshoot over G x U.
    #[command(subcommand)]
    Plot(crate::plot::PlotCommand),
    /// Write one self-contained HTML page: the lesson's tables, a run's metrics and prediction,
    /// its timeline and the overshoot heatmap.
    Report(crate::report::ReportArgs),
    /// Recommend a loop period and a controller for a report delay and a startup time, with the
    /// reasoning.
    Advise(crate::advise::AdviseArgs),
    /// Fit an empirical delay model from measurements: Prometheus histograms, Kubernetes pod
    /// or event lists, or the runtime's own event log.
    Calibrate(crate::calibrate::CalibrateArgs),
    /// Run a grid of scenarios in parallel: one row per cell, or only the counts.
    Sweep(crate::sweep::SweepArgs),
    /// Join the outputs of `sweep --shard I/N`, in any order, into the whole sweep's bytes.
    Merge(crate::merge::MergeArgs),
    /// Run the runtime's own controller host and agents in a simulated world under fault
    /// schedules, check invariants after every run, shrink failures to replay files.
    Chaos(crate::chaos::ChaosArgs),
    /// The real runtime's commands.
    #[command(flatten)]
    Runtime(crate::runtime::RuntimeCommand),
    /// Model against reality: measure real runs, run the lab's scenarios on real processes.
    #[command(flatten)]
    Reality(crate::reality::RealityCommand),
    /// Shell completions and the manual page.
    #[command(flatten)]
    Shell(crate::shell::ShellCommand),
}

/// A block of the lesson's output.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LessonPart {
    /// The metric tables for both controllers.
    Loop,
    /// The period scan and the overshoot table.
    Relation,
}

/// `setpoint run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The scenario: flags, or a file and the flags that override it.
    #[command(flatten)]
    pub world: crate::scenario_args::ScenarioArgs,
    /// Output format (`docs/output.md`): one record per workload.
    #[arg(long, value_enum, default_value = "table")]
    pub format: crate::output::Format,
    /// Monte Carlo: run N seeds (SEED, SEED+1, ...) and print mean, p50, p95 and max of every
    /// metric.
    #[arg(long, value_name = "N", value_parser = runs, allow_negative_numbers = true)]
    pub runs: Option<u64>,
    /// Also write one CSV row per second to FILE: t, desired, live, seen, pending, created,
    /// delete commands, deletions and deaths.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
}
