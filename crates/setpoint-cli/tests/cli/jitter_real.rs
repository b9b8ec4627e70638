//! `experiment lesson --real --delay-model LIST`: the agent's report delays drawn from a random
//! model, on real processes, next to the lab on the same model.

use crate::lab_cmd::{ok, run};

fn field<'a>(header: &'a str, row: &'a str, key: &str) -> &'a str {
    let i = header
        .split(',')
        .position(|k| k == key)
        .unwrap_or_else(|| panic!("no {key}"));
    row.split(',').nth(i).unwrap()
}

/// One real cell (9 s): `intent` under delays uniform over 5 to 30 s (50 to 300 ms at the time
/// scale 0.01). The ledger's lag follows the drawn delays, not the fixed 0 s, and intent does
/// not overshoot, in the lab over 200 seeds nor for real.
#[test]
fn the_agents_report_delays_follow_the_drawn_model() {
    let dir = format!("/tmp/spc-lab12-jitter-{}", std::process::id());
    let text = ok(&[
        "experiment",
        "lesson",
        "--real",
        "--delay-model",
        "uniform:5:30",
        "--controller",
        "intent",
        "--seed",
        "4",
        "--data-dir",
        &dir,
        "--format",
        "csv",
    ]);
    let mut lines = text.lines();
    let (header, row) = (lines.next().unwrap(), lines.next().unwrap());
    assert_eq!(lines.next(), None, "{text}");
    let get = |k: &str| field(header, row, k);
    assert_eq!((get("delay_model"), get("seed")), ("uniform:5:30", "4"));
    assert_eq!((get("lab_runs"), get("lab_p_overshoot")), ("200", "0"));
    assert_eq!(get("real_overshoot"), "0", "{text}");
    assert_eq!(get("killed"), "2", "{text}");
    let ms = |k: &str| {
        get(k)
            .parse::<i64>()
            .unwrap_or_else(|_| panic!("{k}: {text}"))
    };
    // Ready to ledger: at least the shortest draw (50 ms), at most the longest plus the
    // pipeline; a report delay of 0 would give a few tens of milliseconds.
    assert!(ms("ready_to_ledger_min_ms") >= 50, "{text}");
    assert!(ms("ready_to_ledger_max_ms") <= 300 + 150, "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_model_or_a_seed_without_models_is_refused_before_any_run() {
    for (args, says) in [
        (&["--delay-model", "uniform:9:3"][..], "--delay-model"),
        (
            &["--delay-model", "fixed:20", "--delay", "5"],
            "cannot be used with",
        ),
        (&["--seed", "3"], "--seed applies only with --delay-model"),
    ] {
        let mut a = vec!["experiment", "lesson", "--real"];
        a.extend(args);
        a.extend(["--data-dir", "/tmp/spc-lab12-never"]);
        let out = run(&a);
        assert_eq!(out.status.code(), Some(2), "{a:?}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
    }
    assert!(!std::path::Path::new("/tmp/spc-lab12-never").exists());
}

/// `--startup-model` on the lab side: each row is `run` of the lesson's world under the agent's
/// pipeline with that startup model and the row's seed; the rows end with the model's text.
/// With --real, or without --delay-model, it is refused in one line.
#[test]
fn a_startup_model_draws_the_lab_sides_startups_as_run_does() {
    let text = ok(&[
        "experiment",
        "lesson",
        "--delay-model",
        "uniform:5:30,fixed:20",
        "--controller",
        "ledger,intent",
        "--startup-model",
        "uniform:2:8",
        "--seed",
        "4",
        "--format",
        "csv",
    ]);
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert!(header.ends_with(",lab_startup_model"), "{header}");
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 4, "{text}");
    for row in rows {
        let get = |k: &str| field(header, row, k);
        assert_eq!(get("lab_startup_model"), "uniform:2:8");
        let ran: serde_json::Value = serde_json::from_str(&ok(&[
            "run",
            "--delay-model",
            get("delay_model"),
            "--controller",
            get("controller"),
            "--startup-model",
            "uniform:2:8",
            "--pipeline",
            "in-order",
            "--nodes",
            "1",
            "--report-every",
            "0.5",
            "--seed",
            "4",
            "--format",
            "json",
        ]))
        .unwrap();
        for key in ["overshoot", "created", "stable", "copy_seconds_above"] {
            assert_eq!(
                get(&format!("lab_{key}")),
                ran[key].to_string(),
                "{key}: {row}"
            );
        }
    }
    // Without the flag the rows keep their columns.
    let plain = ok(&[
        "experiment",
        "lesson",
        "--delay-model",
        "fixed:20",
        "--format",
        "csv",
    ]);
    assert!(!plain.contains("lab_startup_model"), "{plain}");
    for args in [
        &["--startup-model", "uniform:2:8"][..],
        &[
            "--delay-model",
            "fixed:20",
            "--startup-model",
            "uniform:2:8",
            "--real",
        ],
        &[
            "--delay-model",
            "fixed:20",
            "--startup-model",
            "uniform:8:2",
        ],
    ] {
        let mut a = vec!["experiment", "lesson"];
        a.extend(args);
        a.extend(["--data-dir", "/tmp/spc-lab-startup-never"]);
        let out = run(&a);
        assert_eq!(out.status.code(), Some(2), "{a:?}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("--startup-model") || err.contains("--delay-model"),
            "{err}"
        );
    }
    assert!(!std::path::Path::new("/tmp/spc-lab-startup-never").exists());
}
