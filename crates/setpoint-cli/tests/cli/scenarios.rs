//! The `setpoint` binary on scenario files: every shipped scenario runs clean, `lesson.toml`
//! reproduces the lesson's rows, seeds give byte-identical output, and bad files fail with
//! file, line and key.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use setpoint_sim::lesson::loop_row;
use setpoint_sim::Metrics;

fn setpoint(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_setpoint"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("the setpoint binary runs")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

/// The single line of an error, and the exit code.
fn failure(out: &Output) -> (i32, String) {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    (out.status.code().unwrap_or(-1), err.trim_end().to_owned())
}

/// The records `--format json` prints, one JSON object per line (one per workload).
fn json(args: &[&str]) -> Vec<Value> {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    stdout(&setpoint(&all))
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

fn metrics(w: &Value) -> Metrics {
    let u = |k: &str| w[k].as_u64().unwrap_or_else(|| panic!("{k} in {w}"));
    Metrics {
        rounds: u("rounds"),
        work_per_round: w["work_per_round"].as_f64().unwrap(),
        created: u("created"),
        unneeded: w["unneeded"].as_i64().unwrap(),
        delete_commands: u("delete_commands"),
        deleted: u("deleted"),
        overshoot: u("overshoot"),
        stable: w["stable"].as_u64(),
        died: u("died"),
        peak_live: u("peak_live"),
        copy_seconds_above: u("copy_seconds_above"),
    }
}

/// The lesson's first table, byte for byte (the golden copy the CLI tests pin).
fn lesson_loop_reference() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/golden/lesson-loop.txt");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_shipped_scenario_runs_clean() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("scenarios"))
        .expect("scenarios/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    for file in files {
        let name = format!("scenarios/{}", file.file_name().unwrap().to_str().unwrap());
        let out = setpoint(&["run", &name]);
        let text = stdout(&out);
        assert!(out.stderr.is_empty(), "{name}");
        assert!(text.starts_with(&format!("scenario {name}: ")), "{text}");
        for w in json(&["run", &name]) {
            assert!(
                w["stable"].is_u64(),
                "{name}: every shipped scenario settles: {w}"
            );
        }
    }
}

#[test]
fn lesson_toml_reproduces_every_row_of_the_lessons_table() {
    let reference = lesson_loop_reference();
    let mut rows = reference.lines().filter(|l| {
        l.trim_start()
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
    });
    for controller in ["ledger", "intent"] {
        for delay in [0u64, 5, 10, 20, 30, 60] {
            let v = json(&[
                "run",
                "scenarios/lesson.toml",
                "-G",
                &delay.to_string(),
                "--controller",
                controller,
            ]);
            assert_eq!(v.len(), 1);
            assert_eq!(
                v[0]["engine"], "fast",
                "the lesson's world takes the fast engine"
            );
            let m = metrics(&v[0]);
            assert_eq!(
                loop_row(delay, &m),
                rows.next().unwrap(),
                "G={delay} {controller}"
            );
        }
    }
    assert_eq!(rows.next(), None);
}

#[test]
fn lesson_toml_alone_is_the_lessons_g20_row_and_matches_the_flag_run() {
    let file = json(&["run", "scenarios/lesson.toml"]);
    let flags = json(&["run", "-G", "20"]);
    assert_eq!(metrics(&file[0]), metrics(&flags[0]));
    // The same keys in the same order, whatever the source of the settings.
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&file[0]), keys(&flags[0]));
    assert_eq!(
        (&file[0]["seed"], &file[0]["engine"]),
        (&Value::from(1), &Value::from("fast"))
    );
}

#[test]
fn the_same_seed_gives_byte_identical_output_and_prints_it() {
    let run = |seed: &str| {
        stdout(&setpoint(&[
            "run",
            "scenarios/lesson-chain.toml",
            "--seed",
            seed,
        ]))
    };
    let a = run("7");
    assert_eq!(a, run("7"));
    assert!(a.lines().next().unwrap().contains("; seed 7;"), "{a}");
    let others: Vec<String> = ["8", "9", "10", "11"].iter().map(|s| run(s)).collect();
    assert!(others.iter().any(|o| o.lines().nth(2) != a.lines().nth(2)));

    let mc = |fmt: &str| {
        stdout(&setpoint(&[
            "run",
            "scenarios/faults.toml",
            "--runs",
            "12",
            "--format",
            fmt,
        ]))
    };
    for fmt in ["table", "json", "csv"] {
        assert_eq!(mc(fmt), mc(fmt), "{fmt}");
    }
    assert!(mc("table").contains("12 runs, seeds 7 to 18"));
}

#[test]
fn monte_carlo_reports_mean_p50_p95_and_max_per_workload() {
    let v = json(&[
        "run",
        "scenarios/faults.toml",
        "--runs",
        "10",
        "--seed",
        "1",
    ]);
    assert_eq!(v.len(), 2, "one flat record per workload");
    for w in &v {
        assert_eq!(w["runs"], 10);
        assert_eq!(w["first_seed"], 1);
        let (p50, p95, max) = (
            w["created_p50"].as_f64().unwrap(),
            w["created_p95"].as_f64().unwrap(),
            w["created_max"].as_f64().unwrap(),
        );
        assert!(p50 <= p95 && p95 <= max, "{w}");
        let p = w["p_overshoot"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&p), "{w}");
    }
}

#[test]
fn flags_override_the_file() {
    // U ≥ G + B: the ledger-only loop stops overshooting.
    let v = json(&["run", "scenarios/lesson.toml", "--period", "35"]);
    assert_eq!(v[0]["overshoot"], 0);
    let v = json(&[
        "run",
        "scenarios/faults.toml",
        "--desired",
        "2",
        "--deaths",
        "none",
    ]);
    for w in &v {
        assert_eq!(w["died"], 0, "--deaths replaces the file's deaths");
    }
    let v = json(&[
        "run",
        "scenarios/named-restart.toml",
        "--controller",
        "intent",
    ]);
    assert_eq!(v[0]["overshoot"], 2, "intent overshoots after the restart");
    let v = json(&[
        "run",
        "scenarios/lesson.toml",
        "--delay-model",
        "uniform:10:30",
        "--seed",
        "3",
    ]);
    assert_eq!(v[0]["seed"], 3);
    assert_eq!(v[0]["engine"], "general");
}

#[test]
fn every_controller_and_event_works_from_the_command_line() {
    for controller in ["ledger", "intent", "expectations", "named", "gated"] {
        let v = json(&["run", "scenarios/faults.toml", "--controller", controller]);
        assert_eq!(v.len(), 2);
        for w in &v {
            assert!(w["setup"]
                .as_str()
                .unwrap()
                .starts_with(&format!("controller {controller}")));
        }
    }
    let v = json(&[
        "run",
        "--controller",
        "expectations",
        "--ttl",
        "10",
        "-G",
        "30",
    ]);
    assert!(v[0]["overshoot"].as_u64().unwrap() > 0);
}

#[test]
fn bad_scenario_files_fail_with_file_line_and_key() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let lesson = std::fs::read_to_string(repo().join("scenarios/lesson.toml")).unwrap();
    let line = |needle: &str| lesson.lines().position(|l| l.starts_with(needle)).unwrap() + 1;
    let cases = [
        (
            "count = 2",
            "cuont = 2",
            "event[1].cuont: unknown field `cuont`",
        ),
        (
            "desired = 6",
            "desired = \"6\"",
            "workload[1].desired: invalid type: string",
        ),
        (
            "seconds = 20",
            "seconds = -20",
            "delay.seconds: -20 is out of range",
        ),
        (
            "kind = \"ledger\"",
            "kind = \"pid\"",
            "controller.kind: unknown controller 'pid'",
        ),
    ];
    for (i, (from, to, expected)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad-{i}.toml"));
        std::fs::write(&path, lesson.replacen(from, to, 1)).unwrap();
        let (code, err) = failure(&setpoint(&["run", path.to_str().unwrap()]));
        assert_eq!(code, 2, "{err}");
        let located = format!("error: {}:{}: {expected}", path.display(), line(from));
        assert!(err.starts_with(&located), "{err}\nexpected: {located}");
    }
}

#[test]
fn settings_for_another_controller_and_bad_models_exit_2() {
    let (code, err) = failure(&setpoint(&["run", "--ttl", "30"]));
    assert_eq!(
        (code, err.as_str()),
        (
            2,
            "error: --ttl applies only to controller 'expectations', not 'ledger'"
        )
    );
    let (code, err) = failure(&setpoint(&["run", "--delay-model", "uniform:9:3"]));
    assert_eq!(code, 2);
    assert!(err.contains("uniform min 9 is above max 3"), "{err}");
    let (code, _) = failure(&setpoint(&["run", "scenarios/missing.toml"]));
    assert_eq!(code, 2);
    let (code, err) = failure(&setpoint(&[
        "run",
        "scenarios/lesson.toml",
        "--runs",
        "3",
        "--trace",
        "/dev/null",
    ]));
    assert_eq!(code, 2);
    assert!(
        err.starts_with("error: --trace writes the seconds of one run"),
        "{err}"
    );
}
