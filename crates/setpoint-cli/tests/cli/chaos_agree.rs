//! The simulated runtime against the real one, through the real `setpoint` binary: the same
//! lesson cells run by `experiment lesson --real` (real processes, SQLite, time scale 0.02) and
//! by `chaos --lesson` (the runtime's host and agent in the simulated world, scaled alike).
//!
//! The cells: `ledger` at G = 10, where the lab's copy reaches the ledger at the very second
//! of a round (U = G + B) and both runtimes, whose pipelines are never zero, resolve the tie
//! the other way (16 created, where the lab says 8); `ledger` at G = 30, whose deaths reach the
//! ledger at the very second of a round (48 delete commands, where the lab says 32); `intent`
//! at both. Each is at least 10 virtual seconds (200 ms) from the next tie, so a loaded machine's
//! later pipeline does not change a count (at 0.01 and G = 20, 5 s = 50 ms from a tie, a run
//! beside the whole workspace's tests did). The counts must be equal; the real `stable` no
//! earlier than the simulated one or the lab's, whichever is earlier (on an idle machine it is
//! within a second of the simulated one; under load the real pipeline grows, and at ledger
//! G = 30 a loaded CI run settled at 406, on the lab's side of the last change's tie).

use std::process::Command;

use serde_json::Value;
use setpoint_runtime::process::find_marked;

use super::harness::{Rig, BIN};

/// The counts that must be equal, by their JSON names.
const COUNTS: [&str; 6] = [
    "created",
    "unneeded",
    "delete_commands",
    "deleted",
    "overshoot",
    "died",
];

/// The rows of `chaos --lesson --format json` for `world` (`lab` or `chaos`), by
/// (controller, G).
fn rows(text: &str, world: &str) -> Vec<((String, u64), Value)> {
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["world"] == world)
        .map(|r| {
            let key = (
                r["controller"].as_str().unwrap().to_owned(),
                r["delay"].as_u64().unwrap(),
            );
            (key, r)
        })
        .collect()
}

#[test]
fn the_simulated_runtime_measures_what_the_real_one_measures_on_the_lessons_cells() {
    let c = Rig::new();
    let chaos = Command::new(BIN)
        .args([
            "chaos",
            "--lesson",
            "--time-scale",
            "0.02",
            "--delay",
            "10,30",
            "--controller",
            "ledger,intent",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        chaos.status.success(),
        "{}",
        String::from_utf8_lossy(&chaos.stderr)
    );
    let chaos = String::from_utf8(chaos.stdout).unwrap();
    let sim = rows(&chaos, "chaos");
    let lab = rows(&chaos, "lab");
    assert_eq!(sim.len(), 4, "{chaos}");

    let real = real_cells(&c, "10,30", "ledger,intent", "4");
    assert_eq!(real.len(), 4, "{real:?}");
    for cell in real {
        let key = (
            cell["controller"].as_str().unwrap().to_owned(),
            cell["delay"].as_u64().unwrap(),
        );
        let s = &sim.iter().find(|(k, _)| *k == key).unwrap().1;
        let differs = |cell: &Value| {
            let m = &cell["measured"]["metrics"];
            COUNTS.iter().any(|k| m[k] != s[k])
        };
        // A real cell runs beside three others on a machine that may be loaded (a CI run
        // beside the whole workspace's tests, or a developer's machine with other work): its
        // pipeline is the machine's, and a load of 10 on two cores once moved a round past a
        // tie's margin (ledger G = 10: 9 delete commands against 8, 2026-12-07). A cell that
        // differs runs once more, alone, in a fresh data directory; a real difference differs
        // again.
        let cell = if differs(&cell) {
            eprintln!("{key:?} differs from the simulated run: {cell}; running it again alone");
            let again = Rig::new();
            let mut cells = real_cells(&again, &key.1.to_string(), &key.0, "1");
            assert_no_copy_left(&again, &[format!("{}-g{}", key.0, key.1)]);
            cells.remove(0)
        } else {
            cell
        };
        let m = &cell["measured"]["metrics"];
        for k in COUNTS {
            assert_eq!(m[k], s[k], "{key:?} {k}: real {m} chaos {s}");
        }
        let l = &lab.iter().find(|(k, _)| *k == key).unwrap().1;
        let (rs, ss, ls) = (
            m["stable"].as_i64().unwrap(),
            s["stable"].as_i64().unwrap(),
            l["stable"].as_i64().unwrap(),
        );
        // The real pipeline is the simulated one plus the machine's own delays, which grow
        // with its load: a real run settles no earlier than the simulated one (less one
        // second for a luckier phase of the half-second grid), or, where the last change
        // itself lands on a tie (ledger at G = 30: lab 405, both runtimes 420 on an idle
        // machine), no earlier than the lab's side of that tie: a CI run under load measured
        // the runtimes' counts with stable 406. How much later is a timing, which this test
        // does not assert.
        assert!(
            rs + 1 >= ss.min(ls),
            "{key:?} stable: real {rs} chaos {ss} lab {ls}"
        );
    }
    // ledger at G = 10 and 30 are the lab's ties: both runtimes part from the lab the same way.
    let at_tie = |v: &Vec<((String, u64), Value)>, g: u64, key: &str| {
        v.iter()
            .find(|(k, _)| k.0 == "ledger" && k.1 == g)
            .unwrap()
            .1[key]
            .clone()
    };
    assert_eq!(at_tie(&lab, 10, "created"), 8);
    assert_eq!(at_tie(&sim, 10, "created"), 16);
    assert_eq!(at_tie(&lab, 30, "delete_commands"), 32);
    assert_eq!(at_tie(&sim, 30, "delete_commands"), 48);
    assert_no_copy_left(
        &c,
        &["ledger-g10", "ledger-g30", "intent-g10", "intent-g30"].map(String::from),
    );
}

/// The cells of `experiment lesson --real` at the test's time scale.
fn real_cells(rig: &Rig, delays: &str, controllers: &str, jobs: &str) -> Vec<Value> {
    let real = rig.json(&[
        "experiment",
        "lesson",
        "--real",
        "--time-scale",
        "0.02",
        "--delay",
        delays,
        "--controller",
        controllers,
        "--jobs",
        jobs,
        "--format",
        "json",
    ]);
    real["cells"].as_array().unwrap().clone()
}

/// Every cell's agent stopped every copy it started.
fn assert_no_copy_left(rig: &Rig, cells: &[String]) {
    for cell in cells {
        let nodes = rig.data_dir().join(cell).join("nodes");
        let mark = nodes.canonicalize().unwrap().join("node-1");
        assert!(find_marked(&mark.display().to_string()).is_empty());
    }
}

#[test]
fn chaos_lesson_refuses_a_time_scale_of_fractional_milliseconds() {
    let out = Command::new(BIN)
        .args(["chaos", "--lesson", "--time-scale", "0.0125"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--time-scale 0.0125") && err.contains("accepted"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
