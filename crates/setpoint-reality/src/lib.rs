//! setpoint-reality: model against reality. The one crate that needs both halves of setpoint:
//! it runs the lesson's scenario on the real runtime ([`setpoint_runtime`]: a SQLite store, the
//! controller host, a node agent, real processes, on compressed time), measures it with the
//! runtime's event log, and sets the result against the lab's prediction ([`setpoint_sim`]).
//!
//! The split is deliberate: the runtime counts with the metric definitions of
//! [`setpoint_core::metrics`] and never depends on the simulator, and the lab never depends on
//! the runtime. Whatever compares the two lives here, where the dependency on both is visible.
//!
//! # Layout
//! - [`calibrate`]: empirical delay models fitted from the runtime's own event log
//!   (`setpoint calibrate --store`), with the report pipeline it shows.
//! - [`experiment`]: the lesson's cells ([`RealLesson`]) on real processes, each cell's real
//!   measurement next to the lab's metrics ([`CellOutcome`]), and [`experiment::run_all`].
//! - [`jitter`]: the same cells under a random report-delay model: the agent's report delays
//!   drawn from the lab's model with the lab's seeded generator, against the lab's run and its
//!   spread over seeds ([`jitter::JitterOutcome`]).
//! - `measure_vs_lab` (tests only): a literal log of the lesson's world measures exactly what
//!   the lab's engine computes.

pub mod calibrate;
pub mod experiment;
pub mod jitter;
#[cfg(test)]
mod measure_vs_lab;

pub use experiment::{run_all, CellOutcome, ExperimentError, RealLesson};
