//! The one integration-test binary of the CLI crate: every test here runs the real `setpoint`
//! binary. Each module is one area.
//!
//! # Layout
//! - [`lesson`]: golden lesson outputs, formats, exit codes and messages, plots and reports.
//! - [`scenarios`]: scenario files, seeds, Monte Carlo, flags over files.
//! - [`sweep`]: `setpoint sweep` rows, summaries and determinism.
//! - [`runtime`]: the runtime as a cluster of real processes on a SQLite store.
//! - [`reality`]: model against reality, `measure`, and the failpoint matrix.

mod distributed;
mod lesson;
mod output;
mod reality;
mod runtime;
mod scenarios;
mod sweep;
