//! `setpoint calibrate` on the shipped samples (`scenarios/empirical/`): summaries pinned by
//! snapshots, the model file, `empirical:FILE` in `run`, `sweep` and `advise`, the picture, and
//! one-line refusals of malformed measurements.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The workspace root: the shipped samples are named from there, as the README names them.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("calibrate-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Runs `setpoint ARGS` from the workspace root.
fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_setpoint"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the binary runs")
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

fn refused(args: &[&str]) -> String {
    let out = run(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    let err = String::from_utf8(out.stderr).expect("utf-8");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

const PROM: &str = "scenarios/empirical/report-delay.prom";
const PODS: &str = "scenarios/empirical/pods.json";
const EVENTS: &str = "scenarios/empirical/events.json";

#[test]
fn the_shipped_samples_calibrate_to_pinned_summaries() {
    let json = ok(&["calibrate", PROM, PODS, EVENTS, "--format", "json"]);
    insta::assert_snapshot!("samples_json", json);
    for line in json.lines() {
        let v: Value = serde_json::from_str(line).expect("one object per line");
        for key in [
            "schema", "delay", "source", "count", "p50_ms", "p90_ms", "p99_ms", "max_ms", "ks",
        ] {
            assert!(v.get(key).is_some(), "{key} in {line}");
        }
        let q: Vec<u64> = ["min_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms"]
            .iter()
            .map(|k| v[k].as_u64().expect("whole ms"))
            .collect();
        assert!(
            q.windows(2).all(|w| w[0] <= w[1]),
            "quantiles in order: {line}"
        );
    }
    insta::assert_snapshot!("pods_csv", ok(&["calibrate", PODS, "--format", "csv"]));
    insta::assert_snapshot!("prom_table", ok(&["calibrate", PROM]));
}

#[test]
fn the_model_file_is_pinned_and_drives_run_sweep_and_advise() {
    let dir = scratch("model");
    let rd = dir.join("rd.toml");
    let st = dir.join("st.toml");
    let (rd_s, st_s) = (rd.to_str().unwrap(), st.to_str().unwrap());
    ok(&["calibrate", PROM, "-o", rd_s]);
    ok(&["calibrate", PODS, "-o", st_s]);
    insta::assert_snapshot!("prom_model_file", std::fs::read_to_string(&rd).unwrap());
    let (g, b) = (format!("empirical:{rd_s}"), format!("empirical:{st_s}"));

    // Deterministic from the seed, and the seed matters.
    let args = |seed: &'static str| {
        vec![
            "run",
            "--delay-model",
            g.as_str(),
            "--startup-model",
            b.as_str(),
            "--seed",
            seed,
            "--format",
            "json",
        ]
    };
    let (a, again, other) = (ok(&args("4")), ok(&args("4")), ok(&args("5")));
    assert_eq!(a, again);
    assert_ne!(a, other);
    let rec: Value = serde_json::from_str(a.lines().next().unwrap()).unwrap();
    assert_eq!(rec["engine"], "general");
    assert!(
        rec["setup"].as_str().unwrap().contains("startup empirical"),
        "{rec}"
    );

    let rows = ok(&[
        "sweep",
        "--delay-model",
        &format!("{g},fixed:20"),
        "-U",
        "15,90",
    ]);
    assert_eq!(rows.lines().count(), 5, "a header and four cells: {rows}");
    assert!(rows.contains(&format!(",{g},")), "{rows}");

    // advise: the period is set against the measured worst case and says why.
    let advice: Value = serde_json::from_str(&ok(&[
        "advise",
        "-G",
        &g,
        "--startup-model",
        &b,
        "--runs",
        "20",
        "--format",
        "json",
    ]))
    .unwrap();
    let worst = advice["worst_delay_s"].as_u64().unwrap();
    let startup = advice["startup"].as_u64().unwrap();
    let period = advice["recommended_period"].as_u64().unwrap();
    assert!(period >= worst + startup, "{advice}");
    assert_eq!(advice["recommended_controller"], "named");
    let reasons: Vec<&str> = advice["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains(&format!(
            "report delay is the distribution measured in {rd_s}"
        ))),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains(&format!(
            "startup time is the distribution measured in {st_s}"
        ))),
        "{reasons:?}"
    );

    // The wrong kind of model for the flag is refused, naming what the file holds.
    let e = refused(&["run", "--delay-model", &b]);
    assert!(
        e.contains("holds no report-delay model (it holds: startup"),
        "{e}"
    );
}

#[test]
fn the_calibration_picture_is_a_png() {
    let dir = scratch("plot");
    let (model, png, svg) = (dir.join("m.toml"), dir.join("cdf.png"), dir.join("cdf.svg"));
    ok(&[
        "calibrate",
        PROM,
        "-o",
        model.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    ok(&[
        "plot",
        "calibration",
        model.to_str().unwrap(),
        "-o",
        png.to_str().unwrap(),
    ]);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let svg = std::fs::read_to_string(&svg).unwrap();
    // Twelve finite buckets, each a measured dot, and the legend's.
    assert_eq!(svg.matches("<circle").count(), 13);
    let e = refused(&["calibrate", PROM, "--plot", "-"]);
    assert!(e.contains("--plot -"), "{e}");
}

#[test]
fn malformed_measurements_are_refused_in_one_line_naming_file_and_place() {
    let dir = scratch("bad");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let cases = [
        (write("down.prom", "d_bucket{le=\"1\"} 5\nd_bucket{le=\"2\"} 3\nd_bucket{le=\"+Inf\"} 5\n"), vec![], "down.prom: line 2: series d: the count 3"),
        (write("noinf.prom", "d_bucket{le=\"1\"} 5\n"), vec![], "noinf.prom: line 1: series d has no le=\"+Inf\" bucket"),
        (write("empty.prom", "d_bucket{le=\"+Inf\"} 0\n"), vec![], "empty.prom: d: no samples"),
        (write("other.prom", "d_bucket{le=\"+Inf\"} 4\n"), vec!["--metric", "startup_seconds"], "no histogram named 'startup_seconds'"),
        (write("pods.json", "{\"kind\":\"List\",\"items\":[{\"kind\":\"Pod\",\"metadata\":{},\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}]}"), vec![], "pods.json: items[0].metadata.creationTimestamp: missing"),
        (write("text.txt", "hello\n"), vec![], "neither a Prometheus histogram"),
    ];
    for (file, extra, what) in cases {
        let mut args = vec!["calibrate", file.as_str()];
        args.extend(extra);
        let e = refused(&args);
        assert!(e.contains(what), "{what}: {e}");
    }
    let e = refused(&["run", "--delay-model", "empirical:no/such/model.toml"]);
    assert!(e.contains("no/such/model.toml: cannot read it"), "{e}");
    let e = refused(&["calibrate", PODS, "--as", "report-delay"]);
    assert!(e.contains("holds no report-delay delay"), "{e}");
    let e = refused(&["calibrate"]);
    assert!(e.contains("needs a FILE"), "{e}");
}

#[test]
fn too_few_samples_are_said_on_stderr_and_in_the_summary() {
    let dir = scratch("few");
    let p = dir.join("few.prom");
    std::fs::write(
        &p,
        "d_bucket{le=\"1\"} 3\nd_bucket{le=\"+Inf\"} 5\nd_sum 6\n",
    )
    .unwrap();
    let out = run(&["calibrate", p.to_str().unwrap(), "--format", "json"]);
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("only 5 observations, fewer than 30"), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["few_samples"], true);
}
