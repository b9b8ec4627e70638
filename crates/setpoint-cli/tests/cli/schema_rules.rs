//! docs/output.md's rules, held on every data command's JSON, CSV and table with the real
//! binary: JSON objects start with `schema`, no JSON integer is past 2^53 − 1 (larger ones are
//! strings), CSV headers start with `schema`, tables carry no `schema` column and no float with
//! more than two decimals.

use serde_json::Value;

use super::lab_cmd::ok;

/// Every data command, as the arguments before `--format F`, small enough for a test. The
/// runtime's `get` and `status` run on a store made here.
fn commands(store: &str, file: &str) -> Vec<Vec<String>> {
    let cmds: Vec<Vec<&str>> = vec![
        vec!["run", "-G", "60"],
        vec!["run", "scenarios/lesson-chain.toml", "--runs", "5"],
        vec![
            "sweep",
            "-G",
            "0..=40:20",
            "-U",
            "10,30",
            "--controller",
            "ledger,named",
        ],
        vec![
            "sweep",
            "--delay-model",
            "uniform:0:40",
            "-U",
            "10",
            "--runs",
            "3",
        ],
        vec![
            "sweep",
            "--startup-model",
            "uniform:2:8,fixed:3",
            "-U",
            "10",
            "--runs",
            "3",
        ],
        vec!["sweep", "-G", "0..=10", "-U", "5..=15", "--summary"],
        vec!["relation", "-G", "20", "-U", "15"],
        vec!["advise", "-G", "20"],
        vec!["chaos", "scenarios/chaos/partitions.toml", "--runs", "2"],
        vec!["experiment", "lesson", "--delay", "0,20"],
        vec!["get", "--data-dir", store],
        vec!["status", "--data-dir", store],
        vec!["get", "copies", "--data-dir", store],
        vec!["events", "--data-dir", store],
        vec!["describe", "w", "--data-dir", store],
    ];
    let _ = file;
    cmds.into_iter()
        .map(|c| c.into_iter().map(str::to_owned).collect())
        .collect()
}

/// Integers past 2^53 − 1 anywhere in `v`.
fn inexact(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Number(n) if n.as_u64().is_some_and(|u| u > (1 << 53) - 1) => {
            out.push(format!("{path} = {n}"));
        }
        Value::Number(n) if n.as_i64().is_some_and(|i| i.unsigned_abs() > (1 << 53) - 1) => {
            out.push(format!("{path} = {n}"));
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                inexact(x, &format!("{path}[{i}]"), out);
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                inexact(x, &format!("{path}.{k}"), out);
            }
        }
        _ => {}
    }
}

/// A float cell with more than two decimals, if any.
fn long_decimal(text: &str) -> Option<&str> {
    text.split_whitespace().find(|w| {
        let w = w.trim_end_matches([',', ';', ')']);
        w.split_once('.').is_some_and(|(i, f)| {
            !i.is_empty()
                && i.bytes().all(|b| b.is_ascii_digit() || b == b'-')
                && f.len() > 2
                && f.bytes().all(|b| b.is_ascii_digit())
        })
    })
}

#[test]
fn every_data_commands_json_csv_and_table_keep_the_schema_rules() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let file = dir.path().join("w.toml");
    std::fs::write(
        &file,
        "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"1\"]\ncopies = 2\n",
    )
    .unwrap();
    let (store, file) = (store.to_str().unwrap(), file.to_str().unwrap());
    ok(&["apply", "-f", file, "--data-dir", store]);
    // The tests run in the crate's directory; the scenarios are the workspace's.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for cmd in commands(store, file) {
        let cmd: Vec<String> = cmd
            .into_iter()
            .map(|a| {
                if a.starts_with("scenarios/") {
                    format!("{root}/{a}")
                } else {
                    a
                }
            })
            .collect();
        let with = |format: &str| {
            let mut a: Vec<&str> = cmd.iter().map(String::as_str).collect();
            a.extend(["--format", format]);
            ok(&a)
        };
        let what = cmd.join(" ");

        let json = with("json");
        assert!(!json.is_empty(), "{what}: no JSON");
        for line in json.lines() {
            assert!(line.starts_with("{\"schema\":2"), "{what}: {line}");
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: {e}"));
            let mut bad = Vec::new();
            inexact(&v, "", &mut bad);
            assert!(bad.is_empty(), "{what}: integers a double changes: {bad:?}");
        }

        // `describe` has no CSV: its parts have different columns (`get copies` and `events` give
        // them as rows).
        let no_csv = (cmd[0] == "relation" && cmd.contains(&"--boundary".to_owned()))
            || cmd[0] == "describe";
        if !no_csv {
            let csv = with("csv");
            let header = csv.lines().next().unwrap_or_default();
            assert!(header.starts_with("schema,"), "{what}: CSV header {header}");
        }

        let table = with("table");
        let header = table
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default();
        assert!(
            !table
                .lines()
                .any(|l| l.split_whitespace().next() == Some("schema")),
            "{what}: a table repeats schema: {header}"
        );
        assert_eq!(
            long_decimal(&table),
            None,
            "{what}: a table with more than two decimals"
        );
    }
}

#[test]
fn the_checks_catch_what_they_look_for() {
    let mut bad = Vec::new();
    inexact(
        &serde_json::json!({"seed": 9_007_199_254_740_992_u64, "n": 3}),
        "",
        &mut bad,
    );
    assert_eq!(bad, [".seed = 9007199254740992"]);
    assert_eq!(long_decimal("a 0.648 b"), Some("0.648"));
    assert_eq!(long_decimal("a 0.65 v0.1.2 b"), None);
}
