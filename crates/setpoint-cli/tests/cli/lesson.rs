//! Runs the real `setpoint` binary: golden lesson outputs, formats, exit codes and messages.

use std::path::PathBuf;
use std::process::{Command, Output};

pub(crate) fn setpoint(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_setpoint"))
        .args(args)
        .output()
        .expect("the setpoint binary runs")
}

pub(crate) fn stdout(args: &[&str]) -> String {
    let out = setpoint(args);
    assert!(
        out.status.success(),
        "setpoint {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn golden(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cli/golden")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn lesson_loop_prints_the_lessons_first_block_byte_for_byte() {
    assert_eq!(stdout(&["lesson", "loop"]), golden("lesson-loop.txt"));
}

#[test]
fn lesson_relation_prints_the_lessons_second_block_byte_for_byte() {
    assert_eq!(
        stdout(&["lesson", "relation"]),
        golden("lesson-relation.txt")
    );
}

#[test]
fn lesson_prints_both_blocks_separated_by_one_empty_line() {
    let want = format!(
        "{}\n{}",
        golden("lesson-loop.txt"),
        golden("lesson-relation.txt")
    );
    assert_eq!(stdout(&["lesson"]), want);
}

#[test]
fn golden_files_are_the_references_own_output() {
    // The stored golden text must not drift from the reference folder when it is present.
    let folder = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference");
    for name in ["lesson-loop.txt", "lesson-relation.txt"] {
        match std::fs::read_to_string(folder.join(name)) {
            Ok(text) => assert_eq!(text, golden(name), "{name}"),
            Err(e) => eprintln!("skipped comparing {name} with the reference folder: {e}"),
        }
    }
}

#[test]
fn run_json_has_the_metadata_then_the_lesson_keys_in_order() {
    let text = stdout(&["run", "-G", "60", "--format", "json"]);
    let keys = [
        "schema",
        "scenario",
        "setup",
        "seed",
        "engine",
        "workload",
        "rounds",
        "work_per_round",
        "created",
        "unneeded",
        "delete_commands",
        "deleted",
        "overshoot",
        "stable",
    ];
    let at: Vec<usize> = keys
        .iter()
        .map(|k| {
            text.find(&format!("\"{k}\":"))
                .unwrap_or_else(|| panic!("{k} missing"))
        })
        .collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "keys out of order: {text}"
    );
    assert!(text.starts_with(&format!("{{\"schema\":{},", setpoint_sim::output::SCHEMA)));
    assert_eq!(text.lines().count(), 1, "one workload, one line");
}

#[test]
fn run_json_reports_null_when_never_stable() {
    let text = stdout(&["run", "--deaths", "896:2", "-G", "5", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["stable"], serde_json::Value::Null);
    assert_eq!(v["unneeded"], -2);
}

#[test]
fn run_flags_long_and_short_agree() {
    let short = stdout(&["run", "-U", "10", "-G", "30", "-B", "3", "--format", "json"]);
    let long = stdout(&[
        "run",
        "--period",
        "10",
        "--delay",
        "30",
        "--startup",
        "3",
        "--format",
        "json",
    ]);
    assert_eq!(short, long);
    assert_ne!(short, stdout(&["run", "--format", "json"]));
}

#[test]
fn relation_prints_measured_and_predicted_tables() {
    insta::assert_snapshot!(stdout(&["relation"]));
}

#[test]
fn relation_json_counts_mismatches_outside_the_lessons_grid() {
    let text = stdout(&[
        "relation", "--delay", "0", "--period", "5", "-B", "0", "--format", "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["cell_count"], 1);
    // G + B = 0: the lesson's relation predicts −6, the measurement is 0.
    assert_eq!(v["cells"][0]["lesson_prediction"], -6);
    assert_eq!(v["mismatched"], 1);
}

#[test]
fn relation_boundary_counts_regions_and_the_predictor_has_no_mismatch() {
    let text = stdout(&[
        "relation",
        "--boundary",
        "--delay",
        "0..=30:5",
        "--period",
        "1..=20",
        "--startup",
        "0..=12:3",
    ]);
    assert!(text.starts_with("cells: 700\n"), "{text}");
    assert!(text.contains("U <= B/2"), "{text}");
    assert!(text.contains("G + B = 0"), "{text}");
    assert!(
        text.contains("exact predictor (docs/relation.md): 0 mismatches"),
        "{text}"
    );
    assert!(!text.contains("unexplained"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&stdout(&[
        "relation",
        "--boundary",
        "--delay",
        "0..=30:5",
        "--period",
        "1..=20",
        "--startup",
        "0..=12:3",
        "--format",
        "json",
    ]))
    .unwrap();
    assert_eq!(json["cells"], 700);
    assert_eq!(json["predictor_mismatches"], 0);
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("setpoint-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn plot_timeline_and_heatmap_write_svg_files() {
    let dir = temp_dir("plot");
    let tl = dir.join("run.svg");
    let hm = dir.join("overshoot.svg");
    stdout(&["plot", "timeline", "-G", "60", "-o", tl.to_str().unwrap()]);
    stdout(&[
        "plot",
        "heatmap",
        "--delay",
        "0..=30:10",
        "--period",
        "1..=20",
        "-o",
        hm.to_str().unwrap(),
    ]);
    let tl = std::fs::read_to_string(tl).unwrap();
    let hm = std::fs::read_to_string(hm).unwrap();
    assert!(tl.starts_with("<svg") && tl.contains("overshoot 24, peak 30, stable at 495 s"));
    assert!(hm.starts_with("<svg") && hm.contains("boundary U = G + B (B = 5)"));
    let out = setpoint(&[
        "plot", "heatmap", "--delay", "0..=1000", "--period", "1..=1000", "-o", "-",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("more than the 200000 accepted"));
}

#[test]
fn report_is_one_self_contained_page() {
    let dir = temp_dir("report");
    let page = dir.join("report.html");
    stdout(&["report", "-G", "20", "-o", page.to_str().unwrap()]);
    let html = std::fs::read_to_string(page).unwrap();
    for needle in [
        "<!DOCTYPE html>",
        "This run",
        "Timeline",
        "<svg",
        "measured boundary",
    ] {
        assert!(html.contains(needle), "missing {needle}");
    }
    // The lesson's tables, escaped for HTML but otherwise as printed.
    assert!(html.contains(&golden("lesson-loop.txt")));
    // Nothing that would make the browser fetch anything.
    for fetch in [
        "src=", "href=", "url(", "@import", "<script", "<link", "<iframe",
    ] {
        assert!(
            !html.contains(fetch),
            "the page would fetch something: {fetch}"
        );
    }
}

#[test]
fn advise_recommends_a_period_past_the_blind_window_and_explains_it() {
    let text = stdout(&["advise", "-G", "30", "-B", "5"]);
    assert!(
        text.contains("recommended: controller named, loop period U = 45 s"),
        "{text}"
    );
    assert!(
        text.contains("overshoots by 12 copies"),
        "the lesson's U=15, G=30 cell: {text}"
    );
    let first = stdout(&[
        "advise",
        "-G",
        "lesson-chain",
        "--runs",
        "50",
        "--format",
        "json",
    ]);
    let json: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(json["recommended_period"], 45);
    assert_eq!(json["worst_delay_s"], 27);
    assert_eq!(json["seed"], 1);
    let again = stdout(&[
        "advise",
        "-G",
        "lesson-chain",
        "--runs",
        "50",
        "--format",
        "json",
    ]);
    assert_eq!(first, again, "same seed, same advice, byte for byte");
    let other = stdout(&[
        "advise",
        "-G",
        "uniform:0:40",
        "--runs",
        "50",
        "--seed",
        "7",
    ]);
    assert!(other.contains("seeds 7..56"), "{other}");
}

fn scenario(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn scenario_runs_trace_every_workload_every_second() {
    let dir = temp_dir("lab-trace");
    let trace = dir.join("faults.csv");
    stdout(&[
        "run",
        &scenario("faults.toml"),
        "--trace",
        trace.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&trace).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("workload,t,desired,live,seen,pending,created,delete_commands,deleted,died")
    );
    let rows: Vec<&str> = lines.collect();
    // Two workloads, seconds 0 to 3000.
    assert_eq!(rows.len(), 2 * 3001);
    assert!(rows[0].starts_with("api,0,6,"));
    assert!(rows[1].starts_with("db,0,3,"));
    // The same seed gives the same trace, byte for byte.
    let again = dir.join("again.csv");
    stdout(&[
        "run",
        &scenario("faults.toml"),
        "--trace",
        again.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::read_to_string(again).unwrap(), text);
    // The lesson's scenario file traces exactly as the flags do.
    let (a, b) = (dir.join("a.csv"), dir.join("b.csv"));
    stdout(&[
        "run",
        &scenario("lesson.toml"),
        "-G",
        "60",
        "--trace",
        a.to_str().unwrap(),
    ]);
    stdout(&["run", "-G", "60", "--trace", b.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_to_string(a).unwrap(),
        std::fs::read_to_string(b).unwrap()
    );
}

#[test]
fn plot_and_report_take_every_controller_and_delay_model_and_flags_override_files() {
    let dir = temp_dir("lab-every");
    let svg = dir.join("t.svg");
    let svg_s = svg.to_str().unwrap();
    for controller in ["ledger", "intent", "expectations", "named", "gated"] {
        stdout(&[
            "plot",
            "timeline",
            "--controller",
            controller,
            "--delay-model",
            "lesson-chain",
            "-o",
            svg_s,
        ]);
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(
            text.contains(&format!("{controller}, U=15")),
            "{controller}"
        );
    }
    // A flag typed next to a file overrides it, as in `setpoint run`.
    stdout(&[
        "plot",
        "timeline",
        &scenario("faults.toml"),
        "-U",
        "40",
        "-o",
        svg_s,
    ]);
    assert!(std::fs::read_to_string(&svg).unwrap().contains("U=40"));
    let page = dir.join("r.html");
    stdout(&[
        "report",
        "--controller",
        "gated",
        "--delay-model",
        "uniform:0:40",
        "--seed",
        "3",
        "-o",
        page.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(page).unwrap();
    assert!(
        html.contains("gated") && html.contains("seed 3"),
        "the page names what ran"
    );
    let heat = dir.join("h.svg");
    stdout(&[
        "plot",
        "heatmap",
        "--controller",
        "expectations",
        "-G",
        "0..=60:20",
        "-U",
        "5..=45:20",
        "--runs",
        "3",
        "--colour",
        "p_overshoot",
        "-o",
        heat.to_str().unwrap(),
    ]);
    assert!(std::fs::read_to_string(heat)
        .unwrap()
        .contains("p_overshoot (% of runs)"));
}

#[test]
fn plot_and_report_take_a_scenario_file() {
    let dir = temp_dir("lab-plot");
    let svg = dir.join("api.svg");
    stdout(&[
        "plot",
        "timeline",
        &scenario("faults.toml"),
        "--workload",
        "api",
        "-o",
        svg.to_str().unwrap(),
    ]);
    let svg = std::fs::read_to_string(svg).unwrap();
    for label in [
        "faults.toml: api, named",
        "restart",
        "outage 90 s",
        "stale 120 s",
    ] {
        assert!(svg.contains(label), "missing {label}");
    }
    let page = dir.join("faults.html");
    stdout(&[
        "report",
        &scenario("faults.toml"),
        "-o",
        page.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(page).unwrap();
    assert!(html.contains("Timeline: api") && html.contains("Timeline: db"));
    for fetch in ["src=", "href=", "url(", "<script", "<link"] {
        assert!(
            !html.contains(fetch),
            "the page would fetch something: {fetch}"
        );
    }
    for (args, needle) in [
        (
            vec![
                "plot",
                "timeline",
                &scenario("faults.toml") as &str,
                "--workload",
                "nope",
                "-o",
                "-",
            ],
            "no workload 'nope'",
        ),
        (
            vec![
                "run",
                &scenario("faults.toml"),
                "--runs",
                "3",
                "--trace",
                "/dev/null",
            ],
            "--trace writes the seconds of one run",
        ),
    ] {
        let out = setpoint(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn long_runs_with_many_copies_work() {
    let text = stdout(&[
        "run",
        "--desired",
        "1000000",
        "--duration",
        "10000000",
        "-G",
        "60",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["rounds"], 10_000_000 / 15 + 1);
    assert_eq!(v["overshoot"], 4_000_000);
}

/// Each bad input: exit 2, one line on stderr that names the flag and what it accepts.
#[test]
fn bad_input_gets_one_clear_line_and_exit_code_2() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["merge", "/nonexistent/shard-1.csv"],
            &["cannot read the shard output /nonexistent/shard-1.csv"],
        ),
        (
            &["run", "-U", "0"],
            &["--period", "accepted 1 to 1000000000"],
        ),
        (
            &["run", "--period", "-5"],
            &["--period", "-5", "accepted 1 to"],
        ),
        (
            &["run", "-G", "abc"],
            &["--delay", "not a whole number", "accepted 0 to"],
        ),
        (&["run", "-G", "-1"], &["--delay", "accepted 0 to"]),
        (&["run", "-B", "1.5"], &["--startup", "not a whole number"]),
        (
            &["run", "--duration", "99999999999999999999999"],
            &["--duration", "out of range"],
        ),
        (
            &["run", "--duration", "1000000001"],
            &["--duration", "accepted 0 to 1000000000"],
        ),
        (
            &["run", "--desired", "100000001"],
            &["--desired", "accepted 0 to 100000000 copies"],
        ),
        (&["run", "--desired", "-3"], &["--desired", "out of range"]),
        (&["run", "--deaths", "300-2"], &["--deaths", "AT:COUNT"]),
        (&["run", "--deaths", "300:x"], &["--deaths", "AT:COUNT"]),
        (&["run", "--deaths", "-1:2"], &["--deaths", "out of range"]),
        (&["run", "--deaths", ""], &["--deaths", "AT:COUNT"]),
        (
            &["run", "--deaths", "1:99999999999999999999"],
            &["--deaths", "out of range"],
        ),
        (
            &["run", "--controller", "pid"],
            &[
                "--controller",
                "[possible values: ledger, intent, expectations, named, gated]",
            ],
        ),
        (&["run", "--format", "xml"], &["--format", "table"]),
        (&["run", "--bogus"], &["--bogus"]),
        (
            &["relation", "--period", "5,0"],
            &["--period", "values 1 to 1000000000"],
        ),
        (&["relation", "--delay", "1,,2"], &["--delay", "empty"]),
        (
            &["relation", "--desired", "1,2"],
            &["--desired", "one value", "--boundary"],
        ),
        (
            &["relation", "--deaths", "1:1;2:2"],
            &["--deaths", "one value"],
        ),
        (
            &["relation", "--boundary", "--deaths", "300:2;x"],
            &["--deaths", "AT:COUNT"],
        ),
        (
            &[
                "relation",
                "--boundary",
                "--delay",
                "0..=99999",
                "--period",
                "1..=99999",
            ],
            &["cells", "narrow a range"],
        ),
        (&["lesson", "everything"], &["everything", "loop"]),
        (
            &["advise", "-G", "soon"],
            &["--delay", "lesson-chain", "whole number"],
        ),
        (
            &["advise", "-G", "5", "--runs", "0"],
            &["--runs", "accepted 1 to"],
        ),
        (
            &["advise", "-G", "5", "--period", "0,5"],
            &["--period", "values 1 to 1000000000"],
        ),
        (&[], &["subcommand", "lesson", "experiment"]),
        (
            &["plot"],
            &["'setpoint plot' needs a subcommand: timeline, heatmap"],
        ),
    ];
    for (args, needles) in cases {
        let out = setpoint(args);
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
        assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        for needle in *needles {
            assert!(
                err.contains(needle),
                "{args:?}: '{needle}' missing from: {err}"
            );
        }
    }
}

#[test]
fn help_and_version_succeed_on_stdout() {
    assert!(stdout(&["--help"]).contains("Exit codes"));
    assert!(stdout(&["--version"]).starts_with("setpoint "));
    assert!(stdout(&["run", "--help"]).contains("--deaths"));
}

/// `run --format json` agrees with the reference model on scenarios outside the lesson's rows,
/// through the real binary. (The library-level differential test covers 2,000 more.)
#[test]
fn run_json_agrees_with_the_reference_through_the_binary() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let folder = repo.join("../shared/reference");
    if !folder.join("reconcile.mjs").exists()
        || Command::new("node").arg("--version").output().is_err()
    {
        eprintln!("skipped: node or {} is missing", folder.display());
        return;
    }
    let cases: &[(u64, u64, u64, u64, &str, bool)] = &[
        // desired, U, G, B, deaths, intent
        (6, 15, 20, 5, "300:2", false),
        (6, 5, 30, 5, "300:2", false),
        (10, 7, 45, 3, "100:4,100:1,350:3", false),
        (10, 7, 45, 3, "100:4,100:1,350:3", true),
        (3, 1, 12, 0, "60:2,61:2", false),
        (12, 20, 90, 10, "200:5", true),
        (1, 2, 0, 0, "4:1", false),
        (8, 9, 17, 8, "27:3,54:3,81:3", false),
    ];
    for &(desired, u, g, b, deaths, intent) in cases {
        let args = [
            "run".to_string(),
            "--desired".into(),
            desired.to_string(),
            "-U".into(),
            u.to_string(),
            "-G".into(),
            g.to_string(),
            "-B".into(),
            b.to_string(),
            "--deaths".into(),
            deaths.into(),
            "--controller".into(),
            if intent { "intent" } else { "ledger" }.into(),
            "--format".into(),
            "json".into(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let ours: serde_json::Value = serde_json::from_str(&stdout(&args)).unwrap();
        let d: Vec<[u64; 2]> = deaths
            .split(',')
            .map(|e| {
                let (a, c) = e.split_once(':').unwrap();
                [a.parse().unwrap(), c.parse().unwrap()]
            })
            .collect();
        let input = serde_json::json!({"desired": desired, "U": u, "G": g, "B": b, "intent": intent, "deaths": d});
        let out = Command::new("node")
            .arg(folder.join("run-case.mjs"))
            .arg(input.to_string())
            .output()
            .unwrap();
        let theirs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for (mine, refs) in [
            ("rounds", "round"),
            ("created", "created"),
            ("delete_commands", "commands"),
            ("deleted", "deleted"),
            ("overshoot", "overshoot"),
        ] {
            assert_eq!(ours[mine], theirs[refs], "{mine} for {args:?}");
        }
        // docs/model.md: setpoint subtracts the copies deaths killed, the reference every
        // scheduled death.
        let scheduled: i64 = d.iter().map(|e| e[1] as i64).sum();
        let translated =
            ours["unneeded"].as_i64().unwrap() + ours["died"].as_i64().unwrap() - scheduled;
        assert_eq!(
            serde_json::json!(translated),
            theirs["unneeded"],
            "unneeded for {args:?}"
        );
        assert_eq!(
            ours["work_per_round"].as_f64().unwrap().to_bits(),
            theirs["workRound"].as_f64().unwrap().to_bits()
        );
    }
}
