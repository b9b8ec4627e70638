//! The one integration-test binary of the CLI crate: every test here runs the real `setpoint`
//! binary. Each module is one area.
//!
//! # Layout
//! - [`hardening`]: a store that cannot be lost silently, an agent that trusts nothing it is
//!   handed, and `apply` refusing what can never run (issue 14).
//! - [`lesson`]: golden lesson outputs, formats, exit codes and messages, plots and reports.
//! - [`scenarios`]: scenario files, seeds, Monte Carlo, flags over files.
//! - [`sweep`]: `setpoint sweep` rows, summaries and determinism.
//! - [`runtime`]: the runtime as a cluster of real processes on a SQLite store.
//! - [`reality`]: model against reality, `measure`, and the failpoint matrix.
//! - [`store`]: `--store URL` on every runtime command; the runtime on etcd.
//! - [`trust`]: crash-loop backoff, clean shutdown through a closed pipe, idle reasons, refused
//!   settings (issue 11).

mod hardening;
mod lesson;
mod reality;
mod runtime;
mod scenarios;
mod store;
mod sweep;
mod trust;
