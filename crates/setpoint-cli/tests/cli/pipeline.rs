//! `--pipeline`, `--nodes` and `--report-every` (`docs/model.md`, "The report pipeline").

use crate::lab_cmd::{ok, run};

/// The rows of `run` without the setup line, which names the pipeline.
fn rows(args: &[&str]) -> String {
    let mut a = vec!["run", "--format", "table"];
    a.extend(args);
    ok(&a).lines().skip(1).collect::<Vec<_>>().join("\n")
}

#[test]
fn per_report_is_the_default_and_in_order_coincides_with_it_under_a_fixed_delay() {
    let plain = ok(&["run", "-G", "20"]);
    assert_eq!(ok(&["run", "-G", "20", "--pipeline", "per-report"]), plain);
    // In order on three nodes, under a fixed delay: the same rows, and still the fast engine.
    let in_order = ok(&["run", "-G", "20", "--pipeline", "in-order", "--nodes", "3"]);
    assert!(
        in_order.contains("pipeline in-order on 3 nodes") && in_order.contains("engine fast"),
        "{in_order}"
    );
    assert_eq!(
        rows(&["-G", "20", "--pipeline", "in-order", "--nodes", "3"]),
        rows(&["-G", "20"])
    );
}

#[test]
fn under_jitter_the_agents_pipeline_lags_and_overshoots_more_than_per_report() {
    let overshoot = |extra: &[&str]| {
        let mut a = vec![
            "sweep",
            "--delay-model",
            "uniform:5:30",
            "--runs",
            "100",
            "--format",
            "json",
        ];
        a.extend(extra);
        let text = ok(&a);
        let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        v["overshoot_mean"].as_f64().unwrap()
    };
    let per_report = overshoot(&[]);
    let agent = overshoot(&["--pipeline", "in-order", "--report-every", "0.5"]);
    assert!(
        agent > per_report + 2.0,
        "agent {agent}, per-report {per_report}"
    );
}

#[test]
fn bad_pipeline_settings_are_one_line_and_exit_2() {
    for (args, says) in [
        (
            &["run", "--pipeline", "fifo"][..],
            "accepted are per-report, in-order",
        ),
        (&["run", "--nodes", "0"], "1 to 100000"),
        (
            &["run", "--pipeline", "snapshot", "--report-every", "0.5"],
            "applies only to the in-order pipeline",
        ),
        (
            &["sweep", "--pipeline", "per-copy", "--report-every", "1"],
            "applies only to the in-order pipeline",
        ),
        (
            &["experiment", "lesson", "--pipeline", "in-order"],
            "apply only with --delay-model",
        ),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
