//! Long work bounded and visible (issue 25): `chaos --runs` over its budget is refused in one
//! line; without a terminal no progress is drawn; a chaos search stopped by SIGINT or SIGTERM
//! prints the rows of the seeds it ran and where it stopped, and exits 128 + the signal; so does
//! a `sweep --summary` of 10^8 cells, with the counts of the cells it simulated.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use super::lab_cmd::{ok, refused};

const BIN: &str = env!("CARGO_BIN_EXE_setpoint");

fn model() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/chaos/checker.toml"
    )
    .to_owned()
}

#[test]
fn chaos_runs_over_the_budget_are_refused_in_the_users_terms() {
    let err = refused(&["chaos", &model(), "--runs", "1000001"]);
    assert!(
        err.contains("1000001 runs is over one command's budget: accepted 1 to 1000000"),
        "{err}"
    );
    assert!(err.contains("--seed S --runs N"), "{err}");
    // The old spelling counts against the same budget.
    let err = refused(&["chaos", &model(), "--seeds", "100000000"]);
    assert!(err.contains("over one command's budget"), "{err}");
    let err = refused(&["chaos", &model(), "--runs", "0"]);
    assert!(err.contains("accepted 1 to 1000000"), "{err}");
}

#[test]
fn without_a_terminal_no_progress_is_drawn() {
    let out = Command::new(BIN)
        .args(["chaos", &model(), "--runs", "20", "--format", "csv"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    // Only the closing timing line: no bar, no carriage return, no escape sequence.
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("chaos: 20 seeds in "), "{err}");
    assert!(!err.contains('\r') && !err.contains('\u{1b}'), "{err:?}");
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 21);
    // --quiet is accepted everywhere and changes no output.
    assert_eq!(
        ok(&["--quiet", "run", "-G", "60"]),
        ok(&["run", "-G", "60"])
    );
}

fn stop_with(signal: Signal, code: i32) {
    let child = Command::new(BIN)
        .args(["chaos", &model(), "--runs", "1000000", "--format", "csv"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let some seeds run (a chunk of the debug build takes well under a second), then stop it.
    std::thread::sleep(Duration::from_millis(1500));
    let pid = Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, signal).unwrap();
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    let took = started.elapsed();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(code), "{err}");
    let line = err.lines().last().unwrap_or_default();
    let name = if code == 130 { "SIGINT" } else { "SIGTERM" };
    assert!(
        line.starts_with(&format!("chaos: stopped by {name} after ")),
        "{err}"
    );
    assert!(line.contains(" of 1000000 runs"), "{line}");
    // The rows printed are the seeds it names, 1 to the last, in order.
    let text = String::from_utf8(out.stdout).unwrap();
    let seeds: Vec<u64> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
        .collect();
    assert!(!seeds.is_empty(), "{err}");
    assert_eq!(seeds, (1..=seeds.len() as u64).collect::<Vec<_>>());
    let last = seeds.len();
    assert!(line.contains(&format!("seeds 1..={last}, ")), "{line}");
    assert!(
        line.ends_with(&format!("go on with --seed {}", last + 1)),
        "{line}"
    );
    assert!(took < Duration::from_secs(20), "stopping took {took:?}");
}

#[test]
fn a_chaos_search_stopped_by_sigint_or_sigterm_prints_what_it_has() {
    stop_with(Signal::INT, 130);
    stop_with(Signal::TERM, 143);
}

#[test]
fn a_sweep_summary_of_the_most_cells_stopped_by_sigint_prints_the_counts_so_far() {
    // 10^8 cells, the most one sweep may ask for: about a minute in a release build.
    let child = Command::new(BIN)
        .args([
            "sweep",
            "--summary",
            "-G",
            "0..=9999",
            "-U",
            "1..=10000",
            "--format",
            "csv",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let pid = Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, Signal::INT).unwrap();
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    let took = started.elapsed();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(130), "{err}");
    let line = err.lines().last().unwrap_or_default();
    assert!(line.starts_with("sweep: stopped by SIGINT after "), "{err}");
    assert!(line.contains(" of 100000000 cells"), "{line}");
    // The one row counts the cells the line names.
    let text = String::from_utf8(out.stdout).unwrap();
    let row: Vec<&str> = text.lines().nth(1).unwrap().split(',').collect();
    let cells: u64 = row[1].parse().unwrap();
    assert!(cells > 0 && cells < 100_000_000, "{text}");
    assert!(
        line.contains(&format!("after {cells} of ")),
        "{line}\n{text}"
    );
    assert!(took < Duration::from_secs(10), "stopping took {took:?}");
}
