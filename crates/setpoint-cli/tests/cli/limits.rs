//! The audit's corpus (issue 14): inputs that once aborted on memory or ran for minutes. Each is
//! refused up front with one line and exit 2, or finishes within a memory cap
//! (`docs/limits.md`).

use std::process::{Command, Output};

/// Runs the binary with its address space capped at `mb` megabytes, so an allocation of
/// gigabytes fails loudly instead of swapping the machine.
fn capped(mb: u64, args: &[&str]) -> Output {
    let bin = env!("CARGO_BIN_EXE_setpoint");
    Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("ulimit -v {}; exec \"$0\" \"$@\"", mb * 1024))
        .arg(bin)
        .args(args)
        .output()
        .expect("sh runs")
}

fn refused(args: &[&str], needles: &[&str]) {
    let out = capped(2048, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: '{n}' missing from {err}");
    }
}

#[test]
fn report_grids_follow_the_run_with_a_step_instead_of_aborting() {
    let dir = tempfile::tempdir().unwrap();
    for args in [["-G", "92403435"], ["-U", "1000000"]] {
        let page = dir.path().join("r.html");
        let out = capped(
            2048,
            &["report", args[0], args[1], "-o", page.to_str().unwrap()],
        );
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(
            html.contains("<svg") && html.len() < 5_000_000,
            "{}",
            html.len()
        );
    }
}

#[test]
fn a_long_timeline_keeps_a_bounded_picture() {
    // Ten million seconds under a 1 GB cap: one row per second would be 800 MB of rows alone.
    let long = capped(
        1024,
        &["plot", "timeline", "--duration", "10000000", "-o", "-"],
    );
    assert!(
        long.status.success(),
        "{}",
        String::from_utf8_lossy(&long.stderr)
    );
    let short = capped(1024, &["plot", "timeline", "-o", "-"]);
    assert!(long.stdout.len() < 2 * short.stdout.len() + 100_000);
    let svg = String::from_utf8(long.stdout).unwrap();
    assert!(roxmltree::Document::parse(&svg).is_ok());
}

#[test]
fn a_trace_over_the_row_limit_is_refused_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    refused(
        &[
            "run",
            "--duration",
            "1000000000",
            "--trace",
            trace.to_str().unwrap(),
        ],
        &["the trace would need 1000000001 rows", "20000000 accepted"],
    );
    assert!(!trace.exists(), "nothing written");
}

#[test]
fn a_hundred_million_general_engine_copies_are_refused_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/named-restart.toml"),
    )
    .unwrap();
    let big: String = text
        .lines()
        .map(|l| {
            if l.starts_with("desired") {
                "desired = 100000000".to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(big.contains("desired = 100000000"));
    let file = dir.path().join("big.toml");
    std::fs::write(&file, big).unwrap();
    // Refused under a 256 MB cap: the check comes before any record is kept.
    let out = capped(256, &["run", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("100000000 copies at least"), "{err}");
    assert!(err.contains("5000000 accepted"), "{err}");
}

#[test]
fn advise_refuses_a_monte_carlo_over_budget_and_names_no_duration_it_made_up() {
    for g in ["uniform:0:100000000", "uniform:0:1000000000"] {
        let started = std::time::Instant::now();
        refused(
            &["advise", "-G", g],
            &["advise's Monte Carlo would need", "simulated seconds"],
        );
        assert!(started.elapsed().as_secs() < 10, "refused up front");
        let out = capped(2048, &["advise", "-G", g]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("duration"), "{err}");
    }
}

#[test]
fn heatmap_grids_over_the_picture_limit_are_refused() {
    refused(
        &[
            "plot",
            "heatmap",
            "-G",
            "0..=1000000000:1",
            "-U",
            "1",
            "-o",
            "-",
        ],
        &["the heatmap would need 1000000001 cells", "200000 accepted"],
    );
}
