//! The one integration-test binary of the CLI crate: every test here runs the real `setpoint`
//! binary. Each module is one area.
//!
//! # Layout
//! - [`commandline`]: missing-argument messages, completions, the manual page and help.
//! - [`lesson`]: golden lesson outputs, formats, exit codes and messages, plots and reports.
//! - [`limits`]: the audit's corpus of inputs over the limits of docs/limits.md.
//! - [`pictures`]: `-o` formats (SVG, PNG, HTML, stdout) and the shapes in the pictures.
//! - [`scenarios`]: scenario files, seeds, Monte Carlo, flags over files.
//! - [`sweep`]: `setpoint sweep` rows, summaries and determinism.
//! - [`runtime`]: the runtime as a cluster of real processes on a SQLite store.
//! - [`reality`]: model against reality, `measure`, and the failpoint matrix.

mod commandline;
mod lesson;
mod limits;
mod output;
mod pictures;
mod reality;
mod runtime;
mod scenarios;
mod sweep;
