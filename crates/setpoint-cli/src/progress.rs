//! Long work made visible and stoppable (issue 25): a progress bar on stderr when stderr is a
//! terminal and `--quiet` is not given, and a watch for SIGINT and SIGTERM that lets a long
//! command stop between pieces of work and print what it has.
//!
//! Exit code of an interrupted command: 128 + the signal's number (130 for Ctrl-C, 143 for
//! SIGTERM), as shells report a command a signal ended, after it printed what it had.

use std::io::{self, IsTerminal};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};

/// `--quiet`: no progress bars, whatever stderr is.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Turns progress bars off (`--quiet`).
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether bars draw: stderr is a terminal and `--quiet` was not given.
fn shown() -> bool {
    !QUIET.load(Ordering::Relaxed) && io::stderr().is_terminal()
}

/// A bar over `len` pieces of work (`unit`: "cells", "runs"), labelled `what`, or a hidden one.
pub fn bar(what: &str, len: u64, unit: &str) -> ProgressBar {
    if !shown() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} {what} [{{bar:40}}] {{human_pos}}/{{human_len}} {unit}, {{elapsed}} elapsed, eta {{eta}}{{msg}}"
        ))
        .expect("the template is valid")
        .progress_chars("=> "),
    );
    // Drawn at once and kept moving, though the first piece of work may take seconds.
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

/// A spinner with the time spent, for work whose size is known but not counted as it goes
/// (`run --runs`, `advise`), or a hidden one.
pub fn spinner(what: &str) -> ProgressBar {
    if !shown() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template(&format!("{{spinner}} {what}, {{elapsed}} elapsed"))
            .expect("the template is valid"),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

/// A command stopped by a signal after it printed what it had: exit 128 + the signal.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by {name}")]
pub struct Interrupted {
    /// The signal's name.
    pub name: &'static str,
    /// The exit code, 128 + the signal's number.
    pub code: u8,
}

/// Watches for SIGINT and SIGTERM from its creation on, on a thread of its own; a command asks
/// [`Stop::signal`] between pieces of work. Without it the signal would end the process at
/// once, with nothing printed.
pub struct Stop {
    got: Arc<AtomicI32>,
}

impl Stop {
    /// Starts watching. A second signal, or a failure to install the handlers, ends the
    /// process as the signal would by default.
    pub fn watch() -> Self {
        let got = Arc::new(AtomicI32::new(0));
        let seen = Arc::clone(&got);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
            else {
                let _ = ready_tx.send(());
                return;
            };
            rt.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut int), Ok(mut term)) = (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                ) else {
                    let _ = ready_tx.send(());
                    return;
                };
                let _ = ready_tx.send(());
                let first = tokio::select! {
                    _ = int.recv() => 2,
                    _ = term.recv() => 15,
                };
                seen.store(first, Ordering::Relaxed);
                // A second signal: the user means it.
                tokio::select! {
                    _ = int.recv() => {},
                    _ = term.recv() => {},
                }
                std::process::exit(128 + first);
            });
        });
        // The handlers are in place before the work starts.
        let _ = ready_rx.recv();
        Stop { got }
    }

    /// The signal that asked to stop, if one did.
    pub fn signal(&self) -> Option<Interrupted> {
        match self.got.load(Ordering::Relaxed) {
            2 => Some(Interrupted {
                name: "SIGINT",
                code: 130,
            }),
            15 => Some(Interrupted {
                name: "SIGTERM",
                code: 143,
            }),
            _ => None,
        }
    }
}
