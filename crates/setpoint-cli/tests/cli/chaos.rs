//! `setpoint chaos` as a command: fault models refused with file, line and key; flag values
//! refused; replay files of fixed findings pass and of open ones fail; output the same on any
//! thread count; json and csv records; the event budget; `plot timeline` of a replay file.

use std::path::{Path, PathBuf};

use crate::lab_cmd::{ok, refused, run};

/// Two controllers, two agents, three copies, 60 s; agent partitions up to 12 s (longer than
/// the node lease) and an agent restart: every seed passes; the bad-model cases edit it.
const BASE: &str = r#"description = "a small model for the CLI's tests"
seconds = 60
settle = 20

[cluster]
controllers = 2
agents = 2

[[workload]]
name = "web"
copies = 3

[[fault]]
kind = "partition"
count = 2
target = "agent"
min_ms = 1000
max_ms = 12000

[[fault]]
kind = "restart"
count = 1
target = "agent"
"#;

/// Two controllers, two agents, three copies, 30 s with no settle window; an agent pause of
/// 12 s up to the run's end and an agent restart: a seed whose pause ends too near the end fails
/// `not-converged` (of seeds 1 to 4, seed 2), the others pass.
const SMALL: &str = r#"description = "a small model for the CLI's tests"
seconds = 30
settle = 0

[cluster]
controllers = 2
agents = 2

[[workload]]
name = "web"
copies = 3

[[fault]]
kind = "pause"
count = 1
target = "agent"
min_ms = 12000
max_ms = 30000

[[fault]]
kind = "restart"
count = 1
target = "agent"
"#;

fn chaos_file(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/chaos")
        .join(name)
        .display()
        .to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn bad_fault_models_are_refused_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "count = 1\ntarget = \"agent\"\n",
            "count = -1\ntarget = \"agent\"\n",
        ),
        ("kind = \"restart\"", "kind = \"reboot\""),
        (
            "kind = \"restart\"\ncount = 1\ntarget = \"agent\"",
            "kind = \"lose-state\"\ncount = 1\ntarget = \"controller\"",
        ),
        (
            "kind = \"restart\"\ncount = 1\ntarget = \"agent\"",
            "kind = \"pid-reuse\"\ncount = 1\ntarget = \"controller\"",
        ),
        (
            "kind = \"restart\"\ncount = 1\ntarget = \"agent\"",
            "kind = \"impostor\"\ncount = 1\nmin_ms = 500",
        ),
        ("target = \"agent\"\n", "target = \"everyone\"\n"),
        ("max_ms = 12000", "max_ms = 500"),
        ("copies = 3", "copies = 3\nreplicas = 2"),
        ("agents = 2", "agents = 0"),
        ("seconds = 60", "seconds = \"sixty\""),
    ];
    let mut lines = Vec::new();
    for (from, to) in cases {
        assert!(BASE.contains(from), "{from}");
        let path = write(dir.path(), "bad.toml", &BASE.replacen(from, to, 1));
        let err = refused(&["chaos", &path]);
        assert!(
            !err.contains("panicked") && !err.contains("backtrace"),
            "{err}"
        );
        lines.push(err.replace(&path, "bad.toml"));
    }
    insta::assert_snapshot!("bad_fault_models", lines.concat());
}

#[test]
fn flag_values_out_of_range_are_refused_naming_what_is_accepted() {
    let model = chaos_file("checker.toml");
    for (args, accepted) in [
        (vec!["--runs", "0"], "accepted 1 to 1000000"),
        (vec!["--format", "xml"], "table, json, csv"),
        (vec!["--jobs", "0"], "1..=1024"),
        (vec!["--seed", "abc"], "--seed"),
    ] {
        let err = refused(&[&["chaos", model.as_str()], &args[..]].concat());
        assert!(err.contains(accepted), "{args:?}: {err}");
    }
    // --replay of a model (no seed, no explicit schedule) says what a replay file is.
    let err = refused(&["chaos", "--replay", &model]);
    assert!(err.contains("--replay needs a replay file"), "{err}");
}

/// A replay that fails on purpose (no open finding is left to use): the only agent is paused
/// until the run ends, so at the end it has just fenced its copies and nothing runs.
const FAILING_REPLAY: &str = r#"seconds = 20
settle = 0
seed = 1
[cluster]
controllers = 1
agents = 1
[[workload]]
name = "web"
controller = "named"
copies = 2
[[event]]
at_ms = 5000
kind = "pause"
host = 1
duration_ms = 15000
"#;

#[test]
fn a_fixed_findings_replay_passes_and_a_failing_one_fails_with_its_trace() {
    let fixed = run(&[
        "chaos",
        "--replay",
        &chaos_file("regressions/agent-paused-past-its-lease.toml"),
    ]);
    assert_eq!(fixed.status.code(), Some(0), "{fixed:?}");
    let dir = tempfile::tempdir().unwrap();
    let failing = write(dir.path(), "failing.toml", FAILING_REPLAY);
    let open = run(&["chaos", "--replay", &failing]);
    assert_eq!(open.status.code(), Some(1));
    let text = String::from_utf8(open.stdout).unwrap();
    assert!(
        text.contains("violation not-converged at 20000 ms"),
        "the verdict, then the trace"
    );
    assert!(
        text.contains("fault start Pause host"),
        "the trace shows the fault"
    );
}

#[test]
fn seeds_give_the_same_bytes_on_one_thread_and_two_and_json_and_csv_one_record_each() {
    let dir = tempfile::tempdir().unwrap();
    let model = write(dir.path(), "small.toml", SMALL);
    let out = |format: &str, threads: &str| {
        let o = run(&[
            "chaos", &model, "--runs", "4", "--format", format, "--jobs", threads, "--shrink", "0",
        ]);
        assert_eq!(o.status.code(), Some(1), "seed 2 fails: {o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let json = out("json", "1");
    assert_eq!(json, out("json", "2"));
    let records: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seeds: Vec<u64> = records
        .iter()
        .map(|r| r["seed"].as_u64().unwrap())
        .collect();
    assert_eq!(seeds, [1, 2, 3, 4], "one record per seed, in seed order");
    for r in &records {
        let pass = r["verdict"] == "pass";
        assert_eq!(pass, r["violations"] == 0, "{r}");
        assert_eq!(pass, r["first"].is_null(), "{r}");
    }
    let csv = out("csv", "2");
    assert_eq!(csv.lines().count(), 5, "a header and one row per seed");
    assert_eq!(
        csv.lines().next(),
        Some("schema,seed,faults,events,verdict,violations,first")
    );
    let table = out("table", "2");
    assert_eq!(table, out("table", "1"));
    insta::assert_snapshot!("small_model_table", table.replace(&model, "small.toml"));
}

#[test]
fn a_run_over_its_event_budget_stops_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let model = write(
        dir.path(),
        "budget.toml",
        &SMALL.replacen("settle = 0", "settle = 0\nevent_budget = 500", 1),
    );
    let started = std::time::Instant::now();
    let o = run(&["chaos", &model, "--runs", "2", "--shrink", "0"]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("budget") && text.contains("exceeded its event budget of 500 events"),
        "{text}"
    );
    assert!(started.elapsed().as_secs() < 60, "it stops, it never hangs");
}

#[test]
fn a_shrunk_failure_replays_and_plot_timeline_draws_it_as_svg_and_png() {
    let dir = tempfile::tempdir().unwrap();
    let model = write(dir.path(), "small.toml", SMALL);
    let out_dir = dir.path().join("failures");
    let o = run(&[
        "chaos",
        &model,
        "--seed",
        "2",
        "--shrink",
        "1",
        "--out-dir",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let replay = out_dir.join("seed-2.toml").display().to_string();
    assert_eq!(run(&["chaos", "--replay", &replay]).status.code(), Some(1));

    let svg = ok(&["plot", "timeline", &replay, "-o", "-"]);
    let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    let texts: Vec<&str> = doc
        .descendants()
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    let all = texts.join("\n");
    assert!(
        all.contains("seed 2") && all.contains("FAILED not-converged"),
        "{all}"
    );
    for lane in [
        "/leader",
        "controller-0",
        "controller-1",
        "node-1",
        "node-2",
    ] {
        assert!(texts.contains(&lane), "lane {lane}");
    }
    assert!(all.contains("pause"), "{all}");
    let png = dir.path().join("seed-2.png");
    ok(&["plot", "timeline", &replay, "-o", png.to_str().unwrap()]);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");

    // A passing model draws too, without a violation; lab flags do not apply.
    let clean = ok(&["plot", "timeline", &model, "--seed", "1", "-o", "-"]);
    assert!(clean.contains("every check held") && !clean.contains("first violation"));
    let err = refused(&["plot", "timeline", &replay, "--delay", "5", "-o", "-"]);
    assert!(err.contains("--delay does not apply"), "{err}");
    let err = refused(&["plot", "timeline", &replay, "--workload", "db", "-o", "-"]);
    assert!(
        err.contains("no workload 'db'") && err.contains("accepted: web"),
        "{err}"
    );
}
