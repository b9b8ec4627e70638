//! The command line, as clap types. They stay in this crate; `into_spec` turns them into the
//! validated types of setpoint-sim.

use clap::{Args, Parser, Subcommand, ValueEnum};
use setpoint_core::ControllerKind;
use setpoint_sim::delay::{parse_delay_model, DelayModel};
use setpoint_sim::montecarlo::RUNS;
use setpoint_sim::scenario::{BURST, TTL};
use setpoint_sim::{parse_deaths, Death, LessonSpec, Limit};

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
The lab (deterministic simulation, fast): lesson, run, relation, plot, report, advise, sweep, merge.
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

/// Settings every simulation command shares.
#[derive(Debug, Args)]
pub struct WorldArgs {
    /// Declared copies.
    #[arg(long, default_value = "6", value_name = "N", value_parser = desired, allow_negative_numbers = true)]
    pub desired: u64,
    /// Startup time B: seconds from creation to running.
    #[arg(short = 'B', long, default_value = "5", value_name = "SECONDS", value_parser = startup, allow_negative_numbers = true)]
    pub startup: u64,
    /// The last second of the run (seconds 0 to DURATION are simulated).
    #[arg(long, default_value = "900", value_name = "SECONDS", value_parser = duration, allow_negative_numbers = true)]
    pub duration: u64,
    /// Scripted deaths: at second AT the COUNT oldest live copies die; `none` for none.
    #[arg(long, default_value = "300:2", value_name = "AT:COUNT[,AT:COUNT...]",
          value_parser = deaths, allow_hyphen_values = true)]
    pub deaths: DeathList,
    /// The controller that runs each pass.
    #[arg(long, default_value = "ledger", value_parser = controller())]
    pub controller: ControllerKind,
}

/// The lesson's world on the command line: the loop period, the report delay and the rest.
/// `run`, `plot timeline` and `report` share it.
#[derive(Debug, Args)]
pub struct LessonArgs {
    /// Loop period U: seconds between rounds.
    #[arg(short = 'U', long, default_value = "15", value_name = "SECONDS", value_parser = period, allow_negative_numbers = true)]
    pub period: u64,
    /// Report delay G: seconds the ledger lags the world.
    #[arg(short = 'G', long, default_value = "0", value_name = "SECONDS", value_parser = delay, allow_negative_numbers = true)]
    pub delay: u64,
    /// Everything else about the world.
    #[command(flatten)]
    pub world: WorldArgs,
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

/// A parsed `--deaths` list. A newtype, so that clap takes the whole list as one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeathList(pub Vec<Death>);

impl WorldArgs {
    /// The raw scenario with the given delay and period.
    pub fn spec(&self, delay: u64, period: u64) -> LessonSpec {
        LessonSpec {
            desired: self.desired,
            period,
            delay,
            startup: self.startup,
            duration: self.duration,
            deaths: self.deaths.0.clone(),
            controller: self.controller,
        }
    }
}

fn limited(limit: Limit) -> impl Fn(&str) -> Result<u64, String> {
    move |s| limit.parse(s).map_err(|e| e.to_string())
}

fn desired(s: &str) -> Result<u64, String> {
    limited(Limit::DESIRED)(s)
}
fn period(s: &str) -> Result<u64, String> {
    limited(Limit::PERIOD)(s)
}
fn delay(s: &str) -> Result<u64, String> {
    limited(Limit::DELAY)(s)
}
fn startup(s: &str) -> Result<u64, String> {
    limited(Limit::STARTUP)(s)
}
fn duration(s: &str) -> Result<u64, String> {
    limited(Limit::DURATION)(s)
}
fn runs(s: &str) -> Result<u64, String> {
    limited(RUNS)(s)
}
pub(crate) fn ttl(s: &str) -> Result<u64, String> {
    limited(TTL)(s)
}
pub(crate) fn burst(s: &str) -> Result<u64, String> {
    limited(BURST)(s)
}
pub(crate) fn delay_model(s: &str) -> Result<DelayModel, String> {
    parse_delay_model(s)
}
fn deaths(s: &str) -> Result<DeathList, String> {
    parse_deaths(s).map(DeathList).map_err(|e| e.to_string())
}
/// The controllers, listed with a line each in `--help` and in the error for a wrong name.
fn controller() -> impl clap::builder::TypedValueParser<Value = ControllerKind> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(ControllerKind::ALL.map(|k| {
        PossibleValue::new(k.name()).help(match k {
            ControllerKind::Ledger => "trusts the ledger alone; overshoots on a stale one",
            ControllerKind::Intent => "also counts its own creations the ledger does not show yet",
            ControllerKind::Expectations => {
                "Kubernetes ReplicaSet style: waits for its writes to be seen or expire (--ttl, --burst)"
            }
            ControllerKind::Named => "deterministic names 0..n-1; creates only names not seen or commanded",
            ControllerKind::Gated => "read-your-writes: skips passes until the ledger caught up with its last write",
        })
    }))
    .try_map(|s| s.parse::<ControllerKind>())
}
