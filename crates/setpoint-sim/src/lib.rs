//! setpoint-sim: the deterministic lab for reconciliation loops.
//!
//! It reproduces the world of the lesson "The Reconciliation Loop" (rules CA19–CA25): copies
//! that take `startup` seconds to start, a ledger that shows the world `delay` seconds late, a
//! loop that runs a [`setpoint_core::Controller`] pass every `period` seconds, and scripted
//! deaths. It measures the lesson's metrics exactly, for any parameters, and goes past the
//! lesson: several workloads, random per-report delays, faults, every controller.
//!
//! **One scenario, one entry point.** A caller builds one [`Scenario`] (from a [`ScenarioSpec`],
//! or a scenario file) and calls [`run`]. Which engine runs it is an internal choice that the
//! [`Outcome`] reports (`engine`) and that never changes a number:
//! - the **fast engine** ([`engine`]) runs every scenario the lesson's world can express (one
//!   workload, `ledger` or `intent`, a fixed whole-second delay, deaths by count). It is
//!   event-driven, never holds one record per copy, and its cost grows with the rounds that act;
//! - the **general engine** ([`world`]) runs everything else, one record per copy on a
//!   time-ordered event queue.
//!
//! Property tests check that both give the same metrics wherever both apply. Sweeps over
//! millions of lesson-world cells, the predictor and the boundary scan drive the fast engine
//! directly, through its compact input [`LessonWorld`]. `docs/model.md` gives the rules, the
//! metrics, the extensions and the engines.
//!
//! # Layout
//! - [`scenario`]: the one validated scenario ([`Scenario`], [`ScenarioSpec`]), its events, and
//!   [`run`] / [`run_traced`], which pick the engine.
//! - [`scenario_file`]: scenario files in TOML, with file, line and key in every error.
//! - [`delay`]: report-delay models and the world's seeded generator ([`delay::WorldRng`]).
//! - [`empirical`]: measured delay distributions, drawn by inverse-CDF sampling.
//! - [`calibrate`]: empirical models fitted from measurements (Prometheus histograms,
//!   Kubernetes lists), and their model files.
//! - [`pipeline`]: how reports travel to the ledger (per report, in order per node, snapshots,
//!   per copy) and on which node each copy runs.
//! - [`metrics`]: [`Metrics`], what a run measures, the per-second series ([`TraceRow`]) and
//!   [`metrics_from_series`]; re-exported from [`setpoint_core::metrics`], where the runtime
//!   counts with the same definitions without depending on the lab.
//! - [`lesson_world`]: the fast engine's input ([`LessonWorld`], [`LessonSpec`], [`Death`]) and
//!   the limits every setting shares ([`Limit`]).
//! - [`engine`]: [`simulate`], the fast event-driven engine of the lesson's world.
//! - [`world`]: the general engine.
//! - [`montecarlo`]: one scenario over many seeds: mean, p50, p95 and max of every metric.
//! - [`sweep`]: grids of scenarios ([`Grid`]), run in parallel and reported in cell order.
//! - [`sweep_file`]: a sweep's settings from a scenario file, the grid flags on top.
//! - [`merge`]: the outputs of a sharded sweep joined into the whole sweep's bytes.
//! - [`lesson`]: the lesson's tables, byte for byte, and the relation scan.
//! - [`predict`]: [`predict::predict`], the exact overshoot predictor and closed forms.
//! - [`boundary`]: where the lesson's relation holds and fails, region by region.
//! - [`advise`]: the advisor: a loop period and a controller for a delay and a startup time.
//! - [`output`]: the one output schema (`docs/output.md`): flat [`output::Record`]s of runs,
//!   Monte Carlo summaries and sweep rows, as JSON lines, CSV or a table.
//! - [`report`]: the one-line description of a scenario, and the text of a summary.
//! - [`format`](mod@format): JavaScript-compatible number formatting for the lesson's tables.
//!
//! # Example
//! ```
//! use setpoint_sim::{run, Scenario, ScenarioSpec};
//! use setpoint_sim::delay::DelayModel;
//!
//! let scenario = Scenario::new(ScenarioSpec {
//!     delay: DelayModel::fixed_seconds(20),
//!     ..ScenarioSpec::default()
//! })
//! .unwrap();
//! let outcome = run(&scenario, 1).unwrap();
//! let m = &outcome.workloads[0].metrics;
//! assert_eq!((m.created, m.unneeded, m.overshoot, m.stable), (16, 8, 6, Some(375)));
//! assert_eq!(outcome.engine, "fast");
//! ```

pub mod advise;
pub mod boundary;
pub mod calibrate;
pub mod delay;
pub mod empirical;
pub mod engine;
pub mod format;
pub mod lesson;
pub mod lesson_world;
pub mod limits;
pub mod merge;
pub mod montecarlo;
pub mod output;
pub mod pipeline;
pub mod predict;
pub mod report;
mod row_writer;
pub mod scenario;
pub mod scenario_file;
#[cfg(test)]
mod series;
pub mod sweep;
pub mod sweep_file;
pub mod world;

pub use engine::{simulate, simulate_spans, simulate_traced, TraceSpan};
pub use lesson_world::{parse_deaths, Death, LessonSpec, LessonWorld, Limit, SettingError};
pub use scenario::{
    run, run_spans, run_traced, Outcome, Scenario, ScenarioError, ScenarioSpec, WorkloadMetrics,
};
pub use setpoint_core::metrics;
pub use setpoint_core::metrics::{metrics_from_series, Metrics, TraceRow};
pub use sweep::{Axis, Grid, GridError, GridSpec, RowFormat, Summary, SweepRow};
