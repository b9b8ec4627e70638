//! setpoint-sim: the deterministic lab for reconciliation loops.
//!
//! It reproduces the world of the lesson "The Reconciliation Loop" (rules CA19–CA25): copies
//! that take `startup` seconds to start, a ledger that shows the world `delay` seconds late, a
//! loop that runs a [`setpoint_core::Controller`] pass every `period` seconds, and scripted
//! deaths. It measures the lesson's metrics exactly, for any parameters.
//!
//! The engine is event-driven: its cost grows with the rounds that act and the events that
//! happen, not with seconds × copies, and it never holds one record per copy. `docs/model.md`
//! gives the rules, the metrics and the corner-case choices.
//!
//! # Layout
//! - [`scenario`]: the validated input ([`Scenario`], [`ScenarioSpec`], [`Death`]) and its limits.
//! - [`engine`]: [`simulate`], the event-driven engine.
//! - [`metrics`]: [`Metrics`], what a run measures, the per-second series ([`TraceRow`]) and
//!   [`metrics_from_series`]; re-exported from [`setpoint_core::metrics`], where the runtime
//!   counts with the same definitions without depending on the lab.
//! - [`lesson`]: the lesson's tables, byte for byte, and the relation scan.
//! - [`predict`]: [`predict::predict`], the exact overshoot predictor and closed forms.
//! - [`advise`]: the advisor: a loop period and a controller for a delay and a startup time.
//! - [`boundary`]: where the lesson's relation holds and fails, region by region.
//! - [`format`]: JavaScript-compatible number formatting for those tables.
//! - [`sweep`]: grids of scenarios ([`Grid`]), run in parallel and reported in cell order.
//!
//! Beyond the lesson's world (several workloads, random per-report delays, faults, every
//! controller):
//! - [`lab`]: the validated lab scenario ([`lab::LabScenario`]), its events, and [`lab::run`],
//!   which takes the fast engine when the lesson's world can express the scenario.
//! - [`world`]: the general engine, one record per copy and a time-ordered event queue.
//! - [`delay`]: report-delay models and the world's seeded generator ([`delay::WorldRng`]).
//! - [`scenario_file`]: scenario files in TOML, with file, line and key in every error.
//! - [`montecarlo`]: one scenario over many seeds: mean, p50, p95 and max of every metric.
//! - [`report`]: the text and CSV forms of lab runs and summaries.
//!
//! # Example
//! ```
//! use setpoint_sim::{simulate, Scenario, ScenarioSpec};
//!
//! let scenario = Scenario::new(ScenarioSpec { delay: 20, ..ScenarioSpec::default() }).unwrap();
//! let m = simulate(&scenario);
//! assert_eq!((m.created, m.unneeded, m.overshoot, m.stable), (16, 8, 6, Some(375)));
//! ```

pub mod advise;
pub mod boundary;
pub mod delay;
pub mod engine;
pub mod format;
pub mod lab;
pub mod lesson;
pub mod montecarlo;
pub mod predict;
pub mod report;
pub mod scenario;
pub mod scenario_file;
#[cfg(test)]
mod series;
pub mod sweep;
pub mod world;

pub use engine::{simulate, simulate_traced};
pub use scenario::{parse_deaths, Death, Limit, Scenario, ScenarioError, ScenarioSpec};
pub use setpoint_core::metrics;
pub use setpoint_core::metrics::{metrics_from_series, Metrics, TraceRow};
pub use sweep::{Axis, Grid, GridError, GridSpec, RowFormat, Summary, SweepRow};
