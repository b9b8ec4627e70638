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
//! - [`metrics`]: [`Metrics`], what a run measures.
//! - [`lesson`]: the lesson's tables, byte for byte, and the relation scan.
//! - [`predict`]: [`predict::predict`], the exact overshoot predictor and closed forms.
//! - [`boundary`]: where the lesson's relation holds and fails, region by region.
//! - [`format`]: JavaScript-compatible number formatting for those tables.
//! - [`sweep`]: grids of scenarios ([`Grid`]), run in parallel and reported in cell order.
//!
//! # Example
//! ```
//! use setpoint_sim::{simulate, Scenario, ScenarioSpec};
//!
//! let scenario = Scenario::new(ScenarioSpec { delay: 20, ..ScenarioSpec::default() }).unwrap();
//! let m = simulate(&scenario);
//! assert_eq!((m.created, m.unneeded, m.overshoot, m.stable), (16, 8, 6, Some(375)));
//! ```

pub mod boundary;
pub mod engine;
pub mod format;
pub mod lesson;
pub mod metrics;
pub mod predict;
pub mod scenario;
pub mod sweep;

pub use engine::{simulate, simulate_traced, TraceRow};
pub use metrics::Metrics;
pub use scenario::{parse_deaths, Death, Limit, Scenario, ScenarioError, ScenarioSpec};
pub use sweep::{Axis, Grid, GridError, GridSpec, RowFormat, Summary, SweepRow};
