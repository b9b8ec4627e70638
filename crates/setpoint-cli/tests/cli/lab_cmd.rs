//! The binary run as a command, for the modules of issue 12's later parts (`formats`, `shards`,
//! `sweep_file`, `heatmap_models`, `jitter_real`): no real-process harness, only the command,
//! its exit status and its output.

use std::process::{Command, Output};

/// Runs `setpoint ARGS` to the end.
pub fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_setpoint"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Standard output of a command that must succeed.
pub fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The one line on stderr of a command refused as bad input: exit 2, nothing on stdout.
pub fn refused(args: &[&str]) -> String {
    let out = run(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    let err = String::from_utf8(out.stderr).expect("utf-8");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}
