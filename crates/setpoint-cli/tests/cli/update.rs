//! The lab's `update` event against the runtime's rolling update, on the real binary: the same
//! workload and update in both, the same surge, and the same replacements in the same order at
//! the same times, within the lab's whole ticks. And bad update settings in a scenario file.

use std::process::{Command, Stdio};
use std::time::Duration;

use setpoint_core::rollout::Amount;
use setpoint_sim::scenario::{
    run_traced, ControllerSpec, Event, Scenario, ScenarioSpec, TimedEvent, Workload,
};

use setpoint_runtime::testing::Wait;

use super::trust::{apply, cmdline, get, rig, stamp_ms, up, up_log};

/// One pass that acted: when (ms from the rollout's first action), copies created, delete
/// commands.
type Act = (u64, u64, u64);

/// The lab's prediction, in ticks of 100 ms: U = 2, B = 3, reports 1 tick late, 4 copies,
/// surge 2, none unavailable, the update at tick 50. Returns the acting passes from the
/// update on and the most copies that ran at once.
fn lab() -> (Vec<Act>, u64) {
    let scenario = Scenario::new(ScenarioSpec {
        period: 2,
        duration: 200,
        delay: setpoint_sim::delay::DelayModel::fixed_seconds(1),
        controller: ControllerSpec::new(setpoint_core::ControllerKind::Intent),
        workloads: vec![Workload {
            name: "web".into(),
            desired: 4,
            startup: 3,
        }],
        events: vec![TimedEvent {
            at: 50,
            workload: None,
            event: Event::Update {
                max_surge: Amount::Copies(2),
                max_unavailable: Amount::Copies(0),
                progress_deadline: 600,
                counts_pending: true,
            },
        }],
        unique_names: true,
        seed: 1,
        pipeline: Default::default(),
        startup_model: None,
    })
    .unwrap();
    let mut acts = Vec::new();
    let out = run_traced(&scenario, 1, &mut |_, r| {
        if r.t >= 50 && (r.created > 0 || r.delete_commands > 0) {
            acts.push((r.t * 100, r.created, r.delete_commands));
        }
    })
    .unwrap();
    let w = &out.workloads[0];
    assert_eq!(w.rollout.surge, Some(2));
    assert_eq!(w.rollout.rollout_overshoot, Some(0));
    let first = acts[0].0;
    for a in &mut acts {
        a.0 -= first;
    }
    (acts, w.metrics.peak_live)
}

const WEB: &str = "[[workload]]\nname = \"web\"\ncontroller = \"intent\"\ncommand = [\"sleep\", \"COMMAND\"]\ncopies = 4\nperiod = \"200ms\"\nstartup = \"300ms\"\ngrace = \"300ms\"\nrollout = { max_surge = 2, max_unavailable = 0 }\n";

/// `target 4, counted 5: created [web-4, web-5], 0 delete commands, deleted []` as
/// (created, delete commands).
fn act_of(line: &str) -> Option<(u64, u64)> {
    let rest = line.split("loop web: target ").nth(1)?;
    let created = rest.split("created [").nth(1)?.split(']').next()?;
    let created = created.split(", ").filter(|s| !s.is_empty()).count() as u64;
    let deletes = rest
        .split("], ")
        .nth(1)?
        .split(" delete commands")
        .next()?
        .parse()
        .ok()?;
    Some((created, deletes))
}

#[test]
fn the_lab_predicts_the_runtimes_rolling_update_surge_and_replacements() {
    let (predicted, lab_peak) = lab();
    // Two new copies at once; both reported ready, two old ones stop; once those are reported
    // gone, the next two: 600 ms a step.
    assert_eq!(
        predicted,
        [(0, 2, 0), (400, 0, 2), (600, 2, 0), (1000, 0, 2)],
        "the lab's replacements"
    );
    assert_eq!(lab_peak, 6, "desired 4 + surge 2");

    let mut r = rig();
    up(&mut r, 1, Stdio::null());
    r.until("the store exists", |r| r.store_file().is_file());
    assert!(apply(&r, &WEB.replace("COMMAND", "300")).status.success());
    r.until("4 copies run", |r| {
        get(r, "web")["on_ledger"] == 4 && r.marked().len() == 4
    });
    let before = up_log(&r).lines().count();
    assert!(apply(&r, &WEB.replace("COMMAND", "301")).status.success());
    // Polled every 10ms, to see the most and the fewest copies that ever ran at once.
    let mut wait = Wait::new(
        "the rollout to finish",
        Duration::from_secs(30),
        Duration::from_millis(10),
    );
    let (mut most, mut fewest) = (0, usize::MAX);
    loop {
        let procs = r.marked();
        most = most.max(procs.len());
        fewest = fewest.min(procs.len());
        if up_log(&r).contains("loop web: rollout of generation 2 complete") {
            break;
        }
        match wait.again() {
            Ok(pause) => std::thread::sleep(pause),
            Err(t) => panic!("{t}: rollout did not finish\n{}", r.logs()),
        }
    }
    let log = up_log(&r);
    let acts: Vec<(u64, u64, u64)> = log
        .lines()
        .skip(before)
        .filter_map(|l| act_of(l).map(|(c, d)| (stamp_ms(l), c, d)))
        .collect();
    let first = acts.first().expect("the rollout acted").0;
    let real: Vec<Act> = acts.iter().map(|&(t, c, d)| (t - first, c, d)).collect();
    println!("rolling update: lab {predicted:?}, runtime {real:?} (ms, created, delete commands); peak lab {lab_peak}, runtime {most}");
    // Copy by copy: the k-th creation and the k-th delete command of each. The lab acts at
    // whole ticks of 100 ms; the runtime's step is never shorter by more than a tick, and longer
    // by up to two rounds (400 ms): two copies the lab makes ready in one tick can be seen ready at two
    // passes (their processes start milliseconds apart), and the agent needs time to see an
    // assignment and start its process, which the lab counts as no time (measured under a load
    // of 4 to 8 on 2 cores: up to 351 ms late).
    let each = |a: &[Act]| {
        let mut created = Vec::new();
        let mut deleted = Vec::new();
        for &(t, c, d) in a {
            created.extend(std::iter::repeat_n(t, c as usize));
            deleted.extend(std::iter::repeat_n(t, d as usize));
        }
        (created, deleted)
    };
    let (lab_c, lab_d) = each(&predicted);
    let (real_c, real_d) = each(&real);
    assert_eq!(
        (real_c.len(), real_d.len()),
        (4, 4),
        "every copy replaced once\n{log}"
    );
    // Each step is timed from the one that allowed it, so that lateness does not add up: the
    // k-th deletion from the k-th creation (the new copy must be ready and reported), the k-th
    // creation from the deletion two before it (the surge is full until that copy is reported
    // gone).
    let steps = |c: &[u64], d: &[u64]| {
        let mut out: Vec<(String, u64)> = Vec::new();
        for k in 0..4 {
            out.push((format!("deletion {k} after creation {k}"), d[k] - c[k]));
            if k >= 2 {
                out.push((
                    format!("creation {k} after deletion {}", k - 2),
                    c[k] - d[k - 2],
                ));
            }
        }
        out
    };
    for ((what, p), (_, m)) in steps(&lab_c, &lab_d).iter().zip(steps(&real_c, &real_d)) {
        assert!(
            m + 100 >= *p && m <= p + 400,
            "{what}: lab {p} ms, runtime {m} ms\n{log}"
        );
    }
    // In the same order: a new copy is ready before an old one stops, so the k-th deletion
    // follows the k-th creation by at least the startup time, and the next two creations wait
    // for the two deletions before them.
    for (k, (c, d)) in real_c.iter().zip(&real_d).enumerate() {
        assert!(
            *d >= c + 300,
            "deletion {k} at {d} ms, creation {k} at {c} ms"
        );
        if k >= 2 {
            assert!(
                *c >= real_d[k - 2],
                "creation {k} at {c} ms before deletion {}",
                k - 2
            );
        }
    }
    assert_eq!(
        most as u64, lab_peak,
        "the same surge: at most desired + 2, and used"
    );
    assert!(fewest >= 4, "{fewest} copies ran at once: none unavailable");
    let procs = r.marked();
    assert_eq!(procs.len(), 4);
    assert!(procs.iter().all(|p| cmdline(p.pid) == "sleep 301"));
}

#[test]
fn update_settings_out_of_range_in_a_scenario_file_are_refused_with_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    for (bad, key, accepted) in [
        (
            "max_surge = 0\nmax_unavailable = 0",
            "event[1].max_unavailable",
            "accepted at least one of the two above 0",
        ),
        (
            "max_surge = \"101%\"",
            "event[1].max_surge",
            "a percentage from \"0%\" to \"100%\"",
        ),
        (
            "max_unavailable = -2",
            "event[1].max_unavailable",
            "accepted a number of copies from 0",
        ),
        (
            "progress_deadline = 0",
            "event[1].progress_deadline",
            "accepted 1 to",
        ),
        (
            "counts_pending = 3",
            "event[1].counts_pending",
            "expected a boolean",
        ),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(
            &path,
            format!("[[workload]]\nname = \"web\"\ndesired = 4\n\n[[event]]\nat = 10\nkind = \"update\"\n{bad}\n"),
        )
        .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_setpoint"))
            .arg("run")
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert_eq!(err.lines().count(), 1, "{bad}: one line: {err}");
        let line = bad.lines().last().unwrap();
        let at = 8 + bad.lines().count() - 1;
        assert!(
            err.contains(&format!("bad.toml:{at}: {key}: ")) && err.contains(accepted),
            "{line}: {err}"
        );
        assert!(!err.contains("panicked"));
    }
}

#[test]
fn a_timeline_shades_the_rollout_and_titles_its_surge() {
    let out = Command::new(env!("CARGO_BIN_EXE_setpoint"))
        .args([
            "plot",
            "timeline",
            "scenarios/rolling-update.toml",
            "--duration",
            "700",
            "-o",
            "-",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let svg = String::from_utf8(out.stdout).unwrap();
    assert!(svg.contains("overshoot 0, surge 2, peak 10"), "title");
    assert!(
        svg.contains("rolling update: copies above desired within the surge are deliberate"),
        "legend"
    );
    assert!(
        svg.contains("update (surge 25%, unavailable 0)"),
        "event label"
    );
    // Without an update: no rollout in the legend, no surge in the title.
    let out = Command::new(env!("CARGO_BIN_EXE_setpoint"))
        .args(["plot", "timeline", "-G", "20", "-o", "-"])
        .output()
        .unwrap();
    let svg = String::from_utf8(out.stdout).unwrap();
    assert!(!svg.contains("rolling update") && !svg.contains("surge"));
}
