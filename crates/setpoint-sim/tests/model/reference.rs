//! The differential test against the lesson's reference model, run by node.
//!
//! It runs `scripts/reference-batch.mjs`, which imports `../shared/reference/reconcile.mjs`, on
//! 2,000 generated scenarios in one node process and compares every metric. Where setpoint
//! deliberately differs (docs/model.md, "Corner cases"), it checks the documented difference
//! exactly instead. When node or the reference folder is missing, it says why and skips.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use serde_json::{json, Value};
use setpoint_core::ControllerKind;
use setpoint_sim::{simulate, LessonSpec, LessonWorld, Metrics};

use crate::generators;

const CASES: usize = 2000;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs the reference on every spec, or explains why it cannot.
pub fn reference(specs: &[LessonSpec]) -> Result<Vec<Value>, String> {
    let folder = std::env::var_os("SETPOINT_REFERENCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/reference"));
    if !folder.join("reconcile.mjs").exists() {
        return Err(format!("no reference model at {}", folder.display()));
    }
    let input: String = specs
        .iter()
        .map(|s| {
            let deaths: Vec<[u64; 2]> = s.deaths.iter().map(|d| [d.at, d.count]).collect();
            json!({
                "desired": s.desired, "U": s.period, "G": s.delay, "B": s.startup,
                "duration": s.duration, "intent": s.controller == ControllerKind::Intent,
                "deaths": deaths,
            })
            .to_string()
                + "\n"
        })
        .collect();
    let mut child = Command::new("node")
        .arg(repo().join("scripts/reference-batch.mjs"))
        .env("SETPOINT_REFERENCE", &folder)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("node could not be started: {e}"))?;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the reference driver failed");
    Ok(String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect())
}

/// What the reference must print for a scenario on which setpoint measured `m`: the same
/// numbers, except for the documented corner cases, translated back to the reference's rules.
/// `workRound` is left out: it is compared bit for bit separately.
pub fn expected_reference(spec: &LessonSpec, m: &Metrics) -> Value {
    let scheduled: u64 = spec.deaths.iter().map(|d| d.count).sum();
    // The reference subtracts every scheduled death, setpoint only those that killed a copy.
    let unneeded = m.unneeded + m.died as i64 - scheduled as i64;
    // The reference reports a run that never drifted as stable from second 1 (or never, for a
    // run of length 0); setpoint reports it as stable from second 0.
    let stable = match m.stable {
        Some(0) if spec.duration == 0 => Value::Null,
        Some(0) => json!(1),
        Some(s) => json!(s),
        None => Value::Null,
    };
    json!({
        "round": m.rounds, "created": m.created,
        "unneeded": unneeded, "commands": m.delete_commands, "deleted": m.deleted,
        "overshoot": m.overshoot, "stable": stable,
    })
}

#[test]
fn engine_agrees_with_the_reference_model() {
    let mut runner = TestRunner::deterministic();
    let strategy = generators::scenario(30);
    let specs: Vec<LessonSpec> = (0..CASES)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect();
    let refs = match reference(&specs) {
        Ok(r) => r,
        Err(why) => {
            eprintln!("skipped the differential test: {why}");
            return;
        }
    };
    assert_eq!(refs.len(), specs.len());
    let mut corner = 0;
    for (spec, r) in specs.iter().zip(&refs) {
        let m = simulate(&LessonWorld::new(spec.clone()).unwrap());
        let want = expected_reference(spec, &m);
        assert_eq!(
            r["workRound"].as_f64().unwrap().to_bits(),
            m.work_per_round.to_bits(),
            "work/round for {spec:?}"
        );
        let mut got = r.clone();
        got.as_object_mut().unwrap().remove("workRound");
        assert_eq!(got, want, "scenario {spec:?}");
        if r["unneeded"] != json!(m.unneeded) || r["stable"] != json!(m.stable) {
            corner += 1;
        }
    }
    eprintln!(
        "differential: {} scenarios, 0 mismatches; {corner} fall in a documented corner case",
        specs.len()
    );
}
