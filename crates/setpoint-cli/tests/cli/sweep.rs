//! `setpoint sweep`, run as the real binary: rows, summaries, determinism across thread counts,
//! and one-line errors with exit status 2.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn setpoint(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_setpoint"));
    cmd.args(args);
    cmd
}

fn run(args: &[&str]) -> Output {
    setpoint(args).output().expect("the binary runs")
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "{args:?}: {out:?}");
    assert!(
        out.stderr.is_empty(),
        "stderr is not a terminal, so no progress bar: {out:?}"
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

const PARAMS: [&str; 13] = [
    "schema",
    "cell",
    "desired",
    "period",
    "delay",
    "delay_model",
    "startup",
    "duration",
    "controller",
    "ttl",
    "burst",
    "seed",
    "engine",
];

/// The metric keys of `run --format json` in their printed order: every key after `workload`.
fn run_metric_keys() -> Vec<String> {
    let text = ok(&["run", "--format", "json"]);
    let v: Value = serde_json::from_str(&text).unwrap();
    let mut keys: Vec<(usize, String)> = v
        .as_object()
        .unwrap()
        .keys()
        .map(|k| (text.find(&format!("\"{k}\":")).unwrap(), k.clone()))
        .collect();
    keys.sort();
    let keys: Vec<String> = keys.into_iter().map(|(_, k)| k).collect();
    let at = keys.iter().position(|k| k == "workload").unwrap();
    keys[at + 1..].to_vec()
}

#[test]
fn csv_header_names_parameters_metrics_and_the_relation() {
    let text = ok(&["sweep"]);
    let header = text.lines().next().unwrap();
    let mut expected: Vec<String> = PARAMS.iter().map(|s| s.to_string()).collect();
    // A sweep row carries every metric key of a run record, in the same order; the rolling
    // update's keys are there too (null: no axis makes an update), so one schema holds.
    expected.extend(run_metric_keys());
    expected.push("lesson_prediction".into());
    expected.push("lesson_match".into());
    expected.push("prediction".into());
    expected.push("prediction_match".into());
    assert_eq!(header.split(',').collect::<Vec<_>>(), expected);
    assert_eq!(text.lines().count(), 2, "the default grid is one cell");
}

#[test]
fn jsonl_rows_carry_what_run_measures_for_the_same_cell() {
    let text = ok(&[
        "sweep",
        "--delay",
        "0,20,60",
        "--period",
        "5..=35:15",
        "--startup",
        "0,5",
        "--controller",
        "ledger,intent,named,gated",
        "--duration",
        "1200",
        "--deaths",
        "300:2,700:1",
        "--format",
        "jsonl",
    ]);
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 3 * 3 * 2 * 4);
    let metric_keys = run_metric_keys();
    for row in rows.iter().step_by(5) {
        let get = |k: &str| row[k].to_string();
        let ran: Value = serde_json::from_str(&ok(&[
            "run",
            "--format",
            "json",
            "-G",
            &get("delay"),
            "-U",
            &get("period"),
            "-B",
            &get("startup"),
            "--desired",
            &get("desired"),
            "--controller",
            row["controller"].as_str().unwrap(),
            "--duration",
            "1200",
            "--deaths",
            "300:2,700:1",
        ]))
        .unwrap();
        for key in &metric_keys {
            assert_eq!(row[key], ran[key], "{key} in {row}");
        }
        assert_eq!(row["engine"], ran["engine"]);
        assert_eq!(row["duration"], 1200);
        if row["lesson_prediction"].is_null() {
            assert_eq!(
                row["engine"], "general",
                "the relation is defined in the lesson's world"
            );
            continue;
        }
        let (d, g, b, u) = (
            row["desired"].as_i64().unwrap(),
            row["delay"].as_i64().unwrap(),
            row["startup"].as_i64().unwrap(),
            row["period"].as_i64().unwrap(),
        );
        let prediction = d * (((g + b) + u - 1) / u - 1);
        assert_eq!(row["lesson_prediction"], prediction);
        assert_eq!(
            row["lesson_match"],
            row["overshoot"].as_i64().unwrap() == prediction
        );
    }
}

#[test]
fn rows_come_out_in_cell_order_with_controller_fastest() {
    let text = ok(&[
        "sweep",
        "-G",
        "30,0",
        "-U",
        "15",
        "--controller",
        "intent,ledger",
    ]);
    let cells: Vec<(String, String)> = text
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[4].to_owned(), f[8].to_owned())
        })
        .collect();
    let expected = [
        ("30", "intent"),
        ("30", "ledger"),
        ("0", "intent"),
        ("0", "ledger"),
    ];
    assert_eq!(
        cells,
        expected.map(|(g, c)| (g.to_owned(), c.to_owned())).to_vec()
    );
}

#[test]
fn summary_of_the_lessons_grid_finds_no_mismatch() {
    let grid = [
        "sweep",
        "--delay",
        "0,10,20,30,45,60,90",
        "--period",
        "5,10,15,20,30,45,60,90",
        "--summary",
    ];
    assert_eq!(
        ok(&grid),
        format!(
            "schema,cells,mismatched,overshooting,prediction_mismatched\n{},56,0,32,0\n",
            setpoint_sim::output::SCHEMA
        ),
        "32 nonzero cells in the lesson's overshoot table"
    );
    let mut jsonl = grid.to_vec();
    jsonl.extend(["--format", "jsonl"]);
    assert_eq!(
        ok(&jsonl),
        format!(
            "{{\"schema\":{},\"cells\":56,\"mismatched\":0,\"overshooting\":32,\"prediction_mismatched\":0}}\n",
            setpoint_sim::output::SCHEMA
        )
    );
}

#[test]
fn output_is_byte_identical_on_one_thread_and_on_two() {
    // 14,000 cells: seven chunks, shared out differently on one thread and on two. (The
    // library's tests split a grid into many blocks, too.)
    let args = [
        "sweep",
        "--delay",
        "0..=199:2",
        "--period",
        "1..=70",
        "--startup",
        "0,49",
        "--controller",
        "ledger",
    ];
    let on = |threads: &str, extra: &[&str]| {
        let mut all = args.to_vec();
        all.extend(extra);
        let out = setpoint(&all)
            .env("RAYON_NUM_THREADS", threads)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        out.stdout
    };
    let one = on("1", &[]);
    assert_eq!(one.iter().filter(|&&b| b == b'\n').count(), 14_001);
    assert!(one == on("2", &[]), "csv differs between 1 and 2 threads");
    assert_eq!(on("1", &["--summary"]), on("2", &["--summary"]));
}

#[test]
fn a_closed_output_pipe_ends_the_sweep_quietly() {
    let mut child = setpoint(&["sweep", "--delay", "0..=199", "--period", "1..=100"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("schema,cell,desired,period,"));
    // The reader is dropped here, closing the pipe.
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
}

fn refused(args: &[&str]) -> String {
    let out = run(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    assert!(out.stdout.is_empty(), "{args:?}: nothing runs");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn bad_grid_specs_get_one_line_naming_the_flag_and_the_accepted_form() {
    for (flag, spec, says) in [
        ("--delay", "", "the list is empty"),
        ("--delay", "5..=1", "runs backwards"),
        ("--delay", "0..=10:0", "is zero"),
        ("--delay", "0..10", "not an inclusive range"),
        ("--period", "ten", "not a whole number"),
        ("--period", "0..=5", "period 0 is out of range"),
        ("--startup", "1,,2", "an item of the list is empty"),
        ("--desired", "-1", "out of range"),
        ("--desired", "0..=200000000", "out of range"),
        ("-G", "2000000000", "out of range"),
    ] {
        let err = refused(&["sweep", flag, spec]);
        let long = match flag {
            "-G" => "--delay",
            f => f,
        };
        assert!(err.contains(&format!("'{long} <GRID>'")), "{err}");
        assert!(err.contains(says), "{flag} {spec}: {err}");
        assert!(
            err.contains("accepted: a list like 0,5,10, an inclusive range like 0..=120, or a stepped range like 0..=120:5"),
            "{err}"
        );
    }
}

#[test]
fn bad_controller_lists_name_the_accepted_controllers() {
    for spec in ["pid", "ledger,", "ledger..=intent"] {
        let err = refused(&["sweep", "--controller", spec]);
        assert!(err.contains("'--controller <LIST>'"), "{err}");
        assert!(
            err.contains("accepted: a list of ledger, intent, expectations, named, gated"),
            "{err}"
        );
    }
}

#[test]
fn a_grid_too_large_is_refused_before_any_work() {
    let err = refused(&[
        "sweep",
        "--delay",
        "0..=1000000000",
        "--period",
        "1..=1000000000",
        "--startup",
        "0..=1000000000",
    ]);
    assert!(err.starts_with("error: the grid has "), "{err}");
    assert!(
        err.contains("more than the 100000000 a sweep accepts"),
        "{err}"
    );
}

#[test]
fn shared_flags_keep_their_run_checks() {
    let err = refused(&["sweep", "--deaths", "300"]);
    assert!(err.contains("'--deaths"), "{err}");
    let err = refused(&["sweep", "--format", "xml"]);
    assert!(err.contains("'--format"), "{err}");
}

#[test]
fn new_axes_and_flags_are_checked_before_any_work() {
    for (args, says) in [
        (
            &["sweep", "--ttl", "10"][..],
            "--ttl applies only to controller 'expectations'",
        ),
        (
            &["sweep", "--burst", "0", "--controller", "expectations"][..],
            "burst 0 is out of range",
        ),
        (
            &["sweep", "--delay-model", "fixed:20,gauss"][..],
            "unknown delay model 'gauss'",
        ),
        (
            &["sweep", "--delay-model", "uniform:9:1"][..],
            "uniform min 9 is above max 1",
        ),
        (
            &["sweep", "--delay-model", "lesson-chain", "-G", "5"][..],
            "cannot be used with",
        ),
        (&["sweep", "--runs", "0"][..], "runs 0 is out of range"),
        (&["sweep", "--shard", "3/2"][..], "accepted: I/N"),
        (
            &["sweep", "-G", "0..=99999", "--runs", "10000"][..],
            "cells x 10000 runs",
        ),
    ] {
        let err = refused(args);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn every_controller_and_delay_model_sweeps_with_ttl_and_burst_axes() {
    let text = ok(&[
        "sweep",
        "--delay-model",
        "fixed:30,uniform:0:60,lesson-chain",
        "--controller",
        "ledger,intent,expectations,named,gated",
        "--ttl",
        "10,300",
        "--burst",
        "2,500",
        "--format",
        "json",
    ]);
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 3 * 2 * 2 * 5);
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert!(rows.iter().all(|r| keys(r) == keys(&rows[0])), "one schema");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["cell"], i as u64);
        let expectations = r["controller"] == "expectations";
        assert_eq!(r["ttl"].is_null(), !expectations, "{r}");
    }
    // A TTL far below G + B brings the overshoot back that expectations prevent.
    let at = |ttl: u64, model: &str| {
        rows.iter()
            .find(|r| {
                r["controller"] == "expectations"
                    && r["ttl"] == ttl
                    && r["burst"] == 500
                    && r["delay_model"] == model
            })
            .unwrap()["overshoot"]
            .as_u64()
            .unwrap()
    };
    assert!(at(10, "fixed:30") > 0);
    assert_eq!(at(300, "fixed:30"), 0);
}

#[test]
fn monte_carlo_rows_are_flat_and_the_same_on_any_thread_count() {
    let args = [
        "sweep",
        "--delay-model",
        "lesson-chain",
        "-U",
        "10,30",
        "--controller",
        "ledger,named",
        "--runs",
        "20",
        "--seed",
        "5",
        "--format",
        "json",
    ];
    let on = |threads: &str| {
        let out = setpoint(&args)
            .env("RAYON_NUM_THREADS", threads)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let one = on("1");
    assert_eq!(one, on("2"));
    let rows: Vec<Value> = one
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 4);
    for r in &rows {
        assert_eq!(r["runs"], 20);
        let p = r["p_overshoot"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&p), "{r}");
        let (p50, p95, max) = (
            r["overshoot_p50"].as_f64().unwrap(),
            r["overshoot_p95"].as_f64().unwrap(),
            r["overshoot_max"].as_f64().unwrap(),
        );
        assert!(p50 <= p95 && p95 <= max, "{r}");
        assert_eq!(p > 0.0, max > 0.0, "{r}");
    }
    // Each cell alone gives the numbers it gives in the grid.
    let alone = ok(&[
        "sweep",
        "--delay-model",
        "lesson-chain",
        "-U",
        "30",
        "--controller",
        "named",
        "--runs",
        "20",
        "--seed",
        "5",
        "--format",
        "json",
    ]);
    let alone: Value = serde_json::from_str(alone.trim()).unwrap();
    for (k, v) in alone.as_object().unwrap() {
        if k != "cell" {
            assert_eq!(&rows[3][k], v, "{k}");
        }
    }
}

#[test]
fn shards_merged_in_any_order_are_the_whole_sweep_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let grid = [
        "sweep",
        "-G",
        "0..=60:15",
        "-U",
        "5..=40:5",
        "--controller",
        "ledger,intent,named",
    ];
    for format in ["csv", "json"] {
        let mut whole_args = grid.to_vec();
        whole_args.extend(["--format", format]);
        let whole = ok(&whole_args);
        let mut files = Vec::new();
        // Seven shards for 120 cells: uneven sizes; given to merge in a scrambled order.
        for i in [4, 1, 7, 3, 6, 2, 5] {
            let shard = format!("{i}/7");
            let mut args = whole_args.clone();
            args.extend(["--shard", &shard]);
            let path = dir.path().join(format!("{format}-{i}.out"));
            std::fs::write(&path, ok(&args)).unwrap();
            files.push(path.display().to_string());
        }
        let mut merge = vec!["merge"];
        merge.extend(files.iter().map(String::as_str));
        assert_eq!(ok(&merge), whole, "{format}");
        // The first shard left out: refused, exit 2.
        assert_eq!(merge[2], files[1]);
        let err = refused(&[&merge[..2], &merge[3..]].concat());
        assert!(
            err.contains("shard 1/7 (cells 0 to 16) is missing"),
            "{err}"
        );
    }
}

/// A JSON value as the command line types it: a string's text, anything else as printed.
fn typed(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

#[test]
fn a_sweep_with_startup_models_is_run_of_each_cell_with_its_seed() {
    let st = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/empirical/startup.toml"
    );
    let empirical = format!("empirical:{st}");
    let models = format!("uniform:1:9,fixed:3,{empirical}");
    let text = ok(&[
        "sweep",
        "--startup-model",
        &models,
        "-G",
        "0,20",
        "-U",
        "10,30",
        "--controller",
        "ledger,intent",
        "--format",
        "jsonl",
    ]);
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2 * 2 * 3 * 2);
    let metric_keys = run_metric_keys();
    let mut seeds = std::collections::BTreeSet::new();
    for row in &rows {
        assert_eq!(row["engine"], "general", "{row}");
        assert!(row["lesson_prediction"].is_null(), "{row}");
        seeds.insert(typed(&row["seed"]));
        let ran: Value = serde_json::from_str(&ok(&[
            "run",
            "--format",
            "json",
            "-G",
            &typed(&row["delay"]),
            "-U",
            &typed(&row["period"]),
            "--startup-model",
            &typed(&row["startup"]),
            "--controller",
            row["controller"].as_str().unwrap(),
            "--seed",
            &typed(&row["seed"]),
        ]))
        .unwrap();
        for key in &metric_keys {
            assert_eq!(row[key], ran[key], "{key} in {row}");
        }
        assert_eq!(row["engine"], ran["engine"]);
    }
    let startups: std::collections::BTreeSet<String> =
        rows.iter().map(|r| typed(&r["startup"])).collect();
    assert_eq!(
        startups,
        ["fixed:3", "uniform:1:9", empirical.as_str()]
            .map(str::to_owned)
            .into(),
        "the startup column holds each model's canonical text"
    );
    assert_eq!(seeds.len(), rows.len(), "every cell has its own seed");

    // A Monte Carlo row of a random startup model runs every seed; a fixed one runs once.
    let mc = |model: &str| -> Value {
        serde_json::from_str(&ok(&[
            "sweep",
            "--startup-model",
            model,
            "-G",
            "20",
            "-U",
            "15",
            "--runs",
            "30",
            "--format",
            "jsonl",
        ]))
        .unwrap()
    };
    let random = mc("uniform:0:30");
    let max = random["overshoot_max"].as_f64().unwrap();
    let mean = random["overshoot_mean"].as_f64().unwrap();
    assert!(max > mean, "startup draws vary the overshoot: {random}");
    let fixed = mc("fixed:5");
    assert_eq!(fixed["overshoot_max"], fixed["overshoot_mean"], "{fixed}");
}

#[test]
fn bad_startup_models_get_one_line_and_exit_2() {
    for (args, says) in [
        (
            &["sweep", "--startup-model", "fixed:5,gauss"][..],
            "unknown delay model 'gauss'",
        ),
        (
            &["sweep", "--startup-model", "uniform:9:1"][..],
            "uniform min 9 is above max 1",
        ),
        (&["sweep", "--startup-model", ""][..], "the list is empty"),
        (
            &["sweep", "--startup-model", "fixed:5", "-B", "3"][..],
            "cannot be used with",
        ),
        (
            &[
                "sweep",
                "--startup-model",
                concat!(
                    "empirical:",
                    env!("CARGO_MANIFEST_DIR"),
                    "/../../scenarios/empirical/report-delay.toml"
                ),
            ][..],
            "holds no startup model",
        ),
        (
            &["plot", "heatmap", "--startup-model", "gamma:1", "-o", "-"][..],
            "unknown delay model 'gamma:1'",
        ),
        (
            &[
                "plot",
                "heatmap",
                "--startup-model",
                "fixed:1",
                "-B",
                "2",
                "-o",
                "-",
            ][..],
            "cannot be used with",
        ),
    ] {
        let err = refused(args);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(err.contains("--startup-model"), "{args:?}: {err}");
    }
}

#[test]
fn a_scenario_files_startup_model_sweeps_as_run_of_the_file() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/measured-startup.toml"
    );
    let rows = ok(&["sweep", file, "-U", "15,90", "--format", "jsonl"]);
    for line in rows.lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        assert!(
            typed(&row["startup"]).ends_with("scenarios/empirical/startup.toml"),
            "{row}"
        );
        let ran: Value = serde_json::from_str(&ok(&[
            "run",
            file,
            "-U",
            &typed(&row["period"]),
            "--seed",
            &typed(&row["seed"]),
            "--format",
            "json",
        ]))
        .unwrap();
        for key in [
            "overshoot",
            "created",
            "stable",
            "peak_live",
            "copy_seconds_above",
        ] {
            assert_eq!(row[key], ran[key], "{key} in {row}");
        }
    }
    // A typed -B replaces the file's startup model: the lesson's fixed startup again.
    let fixed: Value =
        serde_json::from_str(ok(&["sweep", file, "-B", "13", "--format", "jsonl"]).trim()).unwrap();
    assert_eq!(fixed["startup"], 13);
}
