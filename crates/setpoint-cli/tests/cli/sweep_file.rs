//! `setpoint sweep FILE.toml --grid …`: the scenario file gives every setting that the grid
//! flags typed on the command line do not, and each row is the run of the file with the cell's
//! parameters and seed.

use serde_json::Value;

use crate::lab_cmd::run;

fn rows(args: &[&str]) -> Vec<Value> {
    let out = run(args);
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const JITTER: &str = r#"
period = 20
duration = 600
seed = 9
[controller]
kind = "ledger"
[delay]
model = "uniform"
min = 5
max = 30
[[workload]]
name = "collector"
desired = 5
startup = 4
[[event]]
at = 200
kind = "deaths"
count = 2
"#;

const METRICS: [&str; 9] = [
    "rounds",
    "created",
    "unneeded",
    "delete_commands",
    "deleted",
    "overshoot",
    "stable",
    "peak_live",
    "copy_seconds_above",
];

#[test]
fn each_row_is_the_files_run_with_the_cells_period_and_seed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jitter.toml");
    std::fs::write(&file, JITTER).unwrap();
    let file = file.display().to_string();
    let swept = rows(&["sweep", &file, "-U", "10,20,40", "--format", "json"]);
    assert_eq!(swept.len(), 3);
    let mut overshoots = Vec::new();
    for (row, period) in swept.iter().zip(["10", "20", "40"]) {
        // The file's settings where no flag was typed.
        assert_eq!(row["delay_model"], "uniform:5:30", "{row}");
        assert_eq!(row["controller"], "ledger");
        assert_eq!(
            (row["desired"].as_u64(), row["startup"].as_u64()),
            (Some(5), Some(4))
        );
        assert_eq!(row["duration"], 600);
        assert_eq!(row["period"].to_string(), period);
        // A seed past 2^53 is a JSON string (docs/output.md, "Numbers").
        let seed = row["seed"]
            .as_str()
            .map_or_else(|| row["seed"].to_string(), str::to_owned);
        let one = &rows(&[
            "run", &file, "-U", period, "--seed", &seed, "--format", "json",
        ])[0];
        for k in METRICS {
            assert_eq!(row[k], one[k], "{k} of U={period}: {row} vs {one}");
        }
        overshoots.push(row["overshoot"].as_u64().unwrap());
    }
    assert!(
        overshoots.iter().any(|&o| o > 0),
        "ledger under jitter overshoots somewhere: {overshoots:?}"
    );
    // The file's seed is the base seed: another one changes the cells' seeds.
    let other = rows(&[
        "sweep", &file, "-U", "10", "--seed", "1", "--format", "json",
    ]);
    assert_ne!(other[0]["seed"], swept[0]["seed"]);
}

#[test]
fn typed_flags_replace_the_files_settings() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jitter.toml");
    std::fs::write(&file, JITTER).unwrap();
    let file = file.display().to_string();
    let swept = rows(&[
        "sweep",
        &file,
        "-G",
        "10,30",
        "--controller",
        "ledger,intent",
        "--deaths",
        "none",
        "--format",
        "json",
    ]);
    let cells: Vec<(String, String, u64)> = swept
        .iter()
        .map(|r| {
            (
                r["delay_model"].as_str().unwrap().to_owned(),
                r["controller"].as_str().unwrap().to_owned(),
                r["died"].as_u64().unwrap(),
            )
        })
        .collect();
    let expect = |m: &str, c: &str| (m.to_owned(), c.to_owned(), 0);
    assert_eq!(
        cells,
        [
            expect("fixed:10", "ledger"),
            expect("fixed:10", "intent"),
            expect("fixed:30", "ledger"),
            expect("fixed:30", "intent"),
        ]
    );
    // The lesson's world again (fixed whole seconds, a lesson controller): the fast engine.
    assert!(swept.iter().all(|r| r["engine"] == "fast"), "{swept:?}");
    let models = rows(&[
        "sweep",
        &file,
        "--delay-model",
        "fixed:5,lesson-chain",
        "--format",
        "json",
    ]);
    assert_eq!(models[1]["delay_model"], "lesson-chain");
}

#[test]
fn a_file_a_sweep_cannot_hold_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("outage.toml");
    std::fs::write(
        &file,
        format!("{JITTER}[[event]]\nat = 100\nkind = \"outage\"\nseconds = 30\n"),
    )
    .unwrap();
    let out = run(&["sweep", &file.display().to_string(), "-U", "10,20"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("the event 'outage' at second 100 cannot be swept; accepted: a scenario file with one workload"),
        "{err}"
    );
    let out = run(&["sweep", "/nonexistent/x.toml"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
