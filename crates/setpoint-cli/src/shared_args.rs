//! The argument types several commands share, and their value parsers: the lesson's world
//! ([`WorldArgs`], [`LessonArgs`]) and the deaths list ([`DeathList`]). This module imports no
//! subcommand, so that every subcommand and the top-level `Cli` can import it
//! without an import circle.

use clap::Args;
use setpoint_core::ControllerKind;
use setpoint_sim::delay::{parse_delay_model, DelayModel};
use setpoint_sim::montecarlo::RUNS;
use setpoint_sim::scenario::{BURST, TTL};
use setpoint_sim::{parse_deaths, Death, LessonSpec, Limit};

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
pub(crate) fn runs(s: &str) -> Result<u64, String> {
    limited(RUNS)(s)
}
pub(crate) fn ttl(s: &str) -> Result<u64, String> {
    limited(TTL)(s)
}
pub(crate) fn burst(s: &str) -> Result<u64, String> {
    limited(BURST)(s)
}
pub(crate) fn startup_model(s: &str) -> Result<DelayModel, String> {
    setpoint_sim::delay::parse_startup_model(s)
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
