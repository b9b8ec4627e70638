//! `--format csv` on the data commands outside the lab's runs: `experiment lesson`, `measure`,
//! `get` and `status`. One flat row per record in the one schema (`docs/output.md`), the same
//! values as the command's JSON, and the keys pinned by snapshots.

use serde_json::Value;

use crate::lab_cmd::{ok, run};

/// CSV text as (header, rows), split on commas (no value here holds one).
fn csv(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut lines = text.lines();
    let split = |l: &str| l.split(',').map(str::to_owned).collect::<Vec<_>>();
    let header = split(lines.next().expect("a header"));
    let rows: Vec<Vec<String>> = lines.map(split).collect();
    for r in &rows {
        assert_eq!(r.len(), header.len(), "one flat row per record: {r:?}");
    }
    (header, rows)
}

/// The value of `key` in `row` under `header`.
fn at<'a>(header: &[String], row: &'a [String], key: &str) -> &'a str {
    let i = header
        .iter()
        .position(|k| k == key)
        .unwrap_or_else(|| panic!("no {key}"));
    &row[i]
}

/// A JSON value as CSV writes it: null empty, strings bare.
fn as_csv(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[test]
fn experiment_csv_rows_are_the_labs_runs() {
    let text = ok(&[
        "experiment",
        "lesson",
        "--delay",
        "0,20,60",
        "--controller",
        "ledger,named",
        "--format",
        "csv",
    ]);
    insta::assert_snapshot!("experiment_lesson_csv", text);
    let (header, rows) = csv(&text);
    assert_eq!(rows.len(), 6);
    for row in &rows {
        let (c, g) = (at(&header, row, "controller"), at(&header, row, "delay"));
        let lab = ok(&["run", "-G", g, "--controller", c, "--format", "json"]);
        let lab: Value = serde_json::from_str(&lab).unwrap();
        for k in [
            "rounds",
            "created",
            "unneeded",
            "deleted",
            "overshoot",
            "stable",
        ] {
            assert_eq!(
                at(&header, row, &format!("lab_{k}")),
                as_csv(&lab[k]),
                "{k} {c} {g}"
            );
            assert_eq!(at(&header, row, &format!("real_{k}")), "", "no --real");
        }
    }
}

/// One real cell (9 s of compressed time), then the same store read by `measure`, `get` and
/// `status` in CSV and JSON.
#[test]
fn real_experiment_measure_get_and_status_print_csv_rows() {
    let dir = std::path::PathBuf::from(format!("/tmp/spc-lab12-formats-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let text = ok(&[
        "experiment",
        "lesson",
        "--real",
        "--delay",
        "20",
        "--controller",
        "ledger",
        "--data-dir",
        dir.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    let (header, rows) = csv(&text);
    insta::assert_snapshot!("experiment_real_csv_keys", header.join("\n"));
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(at(&header, row, "time_scale"), "0.01");
    assert_eq!(at(&header, row, "killed"), "2", "{text}");
    let real: u64 = at(&header, row, "real_created").parse().unwrap();
    assert!(real >= 8, "6 copies and 2 replacements at least: {text}");

    let cell = dir.join("ledger-g20");
    let cell = cell.to_str().unwrap();
    let store = ["--data-dir", cell];
    let both = |cmd: &[&str]| {
        let mut c = cmd.to_vec();
        c.extend(store);
        let mut j = c.clone();
        j.extend(["--format", "json"]);
        c.extend(["--format", "csv"]);
        (ok(&c), serde_json::from_str::<Value>(&ok(&j)).unwrap())
    };

    let (text, json) = both(&["measure", "--time-scale", "0.01", "--last", "900"]);
    let (header, rows) = csv(&text);
    insta::assert_snapshot!("measure_csv_keys", header.join("\n"));
    assert_eq!(rows.len(), 1);
    let m = &json["workloads"][0];
    assert_eq!(at(&header, &rows[0], "workload"), "collector");
    for k in ["rounds", "created", "overshoot", "died", "peak_live"] {
        assert_eq!(at(&header, &rows[0], k), as_csv(&m["metrics"][k]), "{k}");
    }
    for k in ["count", "p50", "max"] {
        let key = if k == "count" {
            format!("ready_to_ledger_{k}")
        } else {
            format!("ready_to_ledger_{k}_ms")
        };
        assert_eq!(
            at(&header, &rows[0], &key),
            as_csv(&m["jitter"]["ready_to_ledger"][k])
        );
    }

    let (text, json) = both(&["get"]);
    let (header, rows) = csv(&text);
    insta::assert_snapshot!("get_csv_keys", header.join("\n"));
    let w = &json["workloads"][0];
    assert_eq!(rows.len(), 1);
    for (csv_key, json_key) in [
        ("workload", "name"),
        ("controller", "controller"),
        ("period_ms", "period_ms"),
        ("desired", "desired"),
        ("on_ledger", "on_ledger"),
        ("generation", "generation"),
    ] {
        assert_eq!(
            at(&header, &rows[0], csv_key),
            as_csv(&w[json_key]),
            "{csv_key}"
        );
    }
    assert_eq!(at(&header, &rows[0], "period_ms"), "150");

    let (text, json) = both(&["status"]);
    let (header, rows) = csv(&text);
    insta::assert_snapshot!("status_csv_keys", header.join("\n"));
    let nodes = json["nodes"].as_array().unwrap();
    assert_eq!(rows.len(), nodes.len());
    assert_eq!(at(&header, &rows[0], "node"), "node-1");
    assert_eq!(at(&header, &rows[0], "revision"), as_csv(&json["revision"]));
    assert_eq!(at(&header, &rows[0], "workloads"), "1");
    for k in ["running", "exited", "assigned", "report_lag_ms"] {
        assert_eq!(at(&header, &rows[0], k), as_csv(&nodes[0][k]), "{k}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_format_names_the_flag_and_the_accepted_values() {
    for cmd in [
        &["get", "--format", "xml"][..],
        &["status", "--format", "xml"],
        &["measure", "--format", "xml"],
        &["experiment", "lesson", "--format", "xml"],
    ] {
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("--format"), "{err}");
        assert!(err.contains("table, json, csv"), "{err}");
    }
}
