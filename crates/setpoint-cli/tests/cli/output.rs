//! The one output schema (`docs/output.md`): snapshots pin one example of each kind of record,
//! and the tests check that keys and column order never depend on the controller, the engine,
//! the seed or where the settings came from.

use std::process::Command;

use serde_json::Value;

fn ok(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_setpoint"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("the binary runs");
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The keys of a JSON line in their printed order.
fn keys(line: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(line).expect("one JSON object");
    let mut at: Vec<(usize, String)> = v
        .as_object()
        .unwrap()
        .keys()
        .map(|k| (line.find(&format!("\"{k}\":")).unwrap(), k.clone()))
        .collect();
    at.sort();
    at.into_iter().map(|(_, k)| k).collect()
}

#[test]
fn run_records_snapshots() {
    insta::assert_snapshot!("run_json", ok(&["run", "-G", "60", "--format", "json"]));
    insta::assert_snapshot!(
        "run_csv",
        ok(&[
            "run",
            "-G",
            "20",
            "--controller",
            "intent",
            "--format",
            "csv"
        ])
    );
    insta::assert_snapshot!("run_table", ok(&["run", "-G", "60"]));
}

#[test]
fn a_run_with_an_update_fills_the_rollout_keys_and_keeps_the_key_order() {
    let with = ok(&["run", "scenarios/rolling-update.toml", "--format", "json"]);
    insta::assert_snapshot!("run_update_json", with);
    insta::assert_snapshot!(
        "run_update_table",
        ok(&["run", "scenarios/rolling-update.toml"])
    );
    let without = ok(&["run", "-G", "20", "--format", "json"]);
    assert_eq!(keys(&with), keys(&without));
    let v: Value = serde_json::from_str(&with).unwrap();
    assert_eq!(
        (v["surge_budget"].as_u64(), v["surge"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(v["rollout_overshoot"], 0);
    let v: Value = serde_json::from_str(&without).unwrap();
    assert!(v["surge"].is_null() && v["rollout_done"].is_null());
}

#[test]
fn monte_carlo_records_snapshots() {
    let args = [
        "run",
        "scenarios/lesson-chain.toml",
        "--runs",
        "20",
        "--seed",
        "4",
    ];
    insta::assert_snapshot!(
        "monte_carlo_json",
        ok(&[&args[..], &["--format", "json"]].concat())
    );
    insta::assert_snapshot!(
        "monte_carlo_csv",
        ok(&[&args[..], &["--format", "csv"]].concat())
    );
}

#[test]
fn sweep_rows_snapshots() {
    let grid = [
        "sweep",
        "-G",
        "0,30",
        "--controller",
        "ledger,named,expectations",
    ];
    insta::assert_snapshot!("sweep_csv", ok(&grid));
    insta::assert_snapshot!(
        "sweep_json",
        ok(&[&grid[..], &["--format", "json"]].concat())
    );
    insta::assert_snapshot!(
        "sweep_monte_carlo_csv",
        ok(&[
            "sweep",
            "--delay-model",
            "fixed:30,lesson-chain",
            "--controller",
            "intent,gated",
            "--runs",
            "10",
            "--format",
            "csv"
        ])
    );
    insta::assert_snapshot!(
        "sweep_summary_json",
        ok(&[&grid[..], &["--summary", "--format", "json"]].concat())
    );
}

#[test]
fn every_controller_engine_seed_and_source_prints_one_key_order() {
    let mut seen: Vec<(String, Vec<String>)> = Vec::new();
    for controller in ["ledger", "intent", "expectations", "named", "gated"] {
        for extra in [
            &["-G", "60"][..],
            &["--seed", "3"],
            &["--delay-model", "lesson-chain"],
            &["scenarios/lesson.toml"],
        ] {
            let mut args = vec!["run", "--controller", controller, "--format", "json"];
            args.extend(extra);
            let text = ok(&args);
            assert_eq!(text.lines().count(), 1, "{args:?}: one workload, one line");
            let v: Value = serde_json::from_str(text.trim()).unwrap();
            assert!(v["overshoot"].is_u64(), "jq .overshoot works: {args:?}");
            seen.push((
                format!("{args:?} engine {}", v["engine"]),
                keys(text.trim()),
            ));
        }
    }
    assert!(seen.iter().any(|(a, _)| a.contains("\"fast\"")));
    assert!(seen.iter().any(|(a, _)| a.contains("\"general\"")));
    for (args, k) in &seen {
        assert_eq!(k, &seen[0].1, "{args}");
    }
    // A file with two workloads prints two records with the same keys.
    let text = ok(&["run", "scenarios/faults.toml", "--format", "json"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(keys(lines[0]), seen[0].1);
    assert_eq!(keys(lines[1]), seen[0].1);
}

#[test]
fn csv_has_as_many_columns_as_json_has_keys_in_the_same_order() {
    for args in [
        &["run", "-G", "60"][..],
        &[
            "run",
            "--controller",
            "named",
            "--delay-model",
            "lesson-chain",
        ],
        &["run", "scenarios/faults.toml", "--runs", "5"],
        &["sweep", "-G", "0,30", "--controller", "ledger,named"],
        &["sweep", "--delay-model", "lesson-chain", "--runs", "4"],
    ] {
        let json = ok(&[args, &["--format", "json"]].concat());
        let csv = ok(&[args, &["--format", "csv"]].concat());
        let header: Vec<String> = csv
            .lines()
            .next()
            .unwrap()
            .split(',')
            .map(String::from)
            .collect();
        assert_eq!(header, keys(json.lines().next().unwrap()), "{args:?}");
        assert_eq!(csv.lines().count(), json.lines().count() + 1, "{args:?}");
    }
}

#[test]
fn relation_and_advise_print_csv_records_too() {
    for args in [
        &["relation", "--format", "csv"][..],
        &[
            "advise",
            "-G",
            "lesson-chain",
            "-B",
            "5",
            "--runs",
            "20",
            "--format",
            "csv",
        ],
        &["advise", "-G", "30", "-B", "5", "--format", "csv"],
    ] {
        let text = ok(args);
        let mut lines = text.lines();
        let header = lines.next().unwrap();
        assert!(header.starts_with("schema,"), "{args:?}: {header}");
        let n = header.split(',').count();
        let mut rows = 0;
        for l in lines {
            // Quoted cells (the delay model's description) hold commas; count outside quotes.
            let cells = l
                .split('"')
                .step_by(2)
                .map(|s| s.matches(',').count())
                .sum::<usize>()
                + 1;
            assert_eq!(cells, n, "{args:?}: {l}");
            rows += 1;
        }
        assert!(rows > 1, "{args:?}");
    }
    insta::assert_snapshot!(
        "relation_csv_head",
        ok(&["relation", "--format", "csv"])
            .lines()
            .take(4)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn experiment_takes_every_controller_and_predicts_through_the_labs_one_run() {
    let text = ok(&[
        "experiment",
        "lesson",
        "--controller",
        "ledger,named,expectations,gated",
        "--delay",
        "60",
    ]);
    // The lab's G = 60 row of each controller: the lesson's 24 for ledger, none for the others,
    // as `setpoint run` computes them.
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("60 "))
        .collect();
    assert_eq!(rows.len(), 4, "{text}");
    for (row, controller) in rows
        .iter()
        .zip(["ledger", "named", "expectations", "gated"])
    {
        let v: Value = serde_json::from_str(
            ok(&[
                "run",
                "-G",
                "60",
                "--controller",
                controller,
                "--format",
                "json",
            ])
            .trim(),
        )
        .unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[6], v["overshoot"].to_string(), "{controller}: {row}");
        assert_eq!(cells[2], v["created"].to_string(), "{controller}: {row}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_setpoint"))
        .args(["experiment", "lesson", "--controller", "pid"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("accepted ledger, intent, expectations, named or gated"));
}
