//! Model against reality, through the real `setpoint` binary: `measure` on a running cluster,
//! one bounded cell of `experiment lesson --real`, and the failpoint matrix (controller and agent
//! processes killed with SIGKILL at each failpoint, then restarted).
//!
//! Every wait polls with a deadline; a guard kills every process a test started. Nothing here
//! asserts a timing: the assertions are counts (copies, duplicates, overshoot).

use std::time::Duration;

use rustix::process::Signal;
use serde_json::Value;
use setpoint_runtime::process::find_marked;

use super::harness::{Rig, Start};
use super::runtime::collector;

/// How often the waits here poll.
const POLL: Duration = Duration::from_millis(20);

/// A rig whose waits poll every 20ms.
fn rig() -> Rig {
    Rig::new().poll(POLL)
}

/// Starts the agent of `node`, reporting every 50ms with `delay` added; a restarted one logs
/// after its predecessor.
fn agent(c: &mut Rig, node: &str, delay: &str, env: &[(&str, &str)]) {
    let args = [
        "agent",
        "--node",
        node,
        "--report-every",
        "50ms",
        "--report-delay",
        delay,
    ];
    let mut s = Start::new(&format!("agent-{node}"), &args).append();
    for (k, v) in env {
        s = s.env(k, v);
    }
    c.spawn(s);
}

/// Starts a controller with a leader lease of 300ms.
fn controller(c: &mut Rig, name: &str, env: &[(&str, &str)]) {
    let mut s = Start::new(name, &["controller", "--lease-ttl", "300ms"]).append();
    for (k, v) in env {
        s = s.env(k, v);
    }
    c.spawn(s);
}

/// Declares `collector` with its own U and startup.
fn apply(c: &Rig, copies: u64, controller: &str, period: &str, startup: &str) {
    c.apply(&collector(copies, controller, period, startup));
}

/// The assignments in the store, as `get` lists them (copy identities).
fn assigned(c: &Rig) -> Vec<String> {
    c.get("collector")["copies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["assigned"] == true)
        .map(|c| c["copy"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn measure_computes_the_lessons_metrics_of_a_real_cluster_from_its_event_log() {
    let mut c = rig();
    agent(&mut c, "a", "0", &[]);
    controller(&mut c, "controller", &[]);
    apply(&c, 3, "intent", "200ms", "50ms");
    c.until("three copies run, on the ledger", |c| {
        c.processes().len() == 3 && c.get("collector")["on_ledger"] == 3
    });
    let killed = c.ok(&["kill", "collector", "1"]);
    assert_eq!(killed.trim(), "killed collector-0");
    c.until("a replacement runs", |c| {
        let p = c.processes();
        p.len() == 3 && p.contains_key("collector-3")
    });
    // One more round so that the last second measured is after the replacement.
    std::thread::sleep(Duration::from_millis(400));
    let m = c.measure("collector", "0.01");
    let x = &m["metrics"];
    assert_eq!(x["created"], 4, "{m}");
    assert_eq!(x["died"], 1, "{m}");
    assert_eq!(x["unneeded"], 0, "{m}");
    assert_eq!(x["overshoot"], 0, "{m}");
    assert!(x["rounds"].as_u64().unwrap() >= 2, "{m}");
    assert_eq!(m["jitter"]["ready_to_ledger"]["count"], 4, "{m}");
    // The table names the workload and the metrics.
    let table = c.ok(&["measure", "--time-scale", "0.01"]);
    assert!(
        table.starts_with("workload collector: seconds 0 to "),
        "{table}"
    );
    assert!(table.contains("ready to ledger"), "{table}");
    // A workload without a log is the user's mistake.
    assert_eq!(c.run(&["measure", "nope"]).status.code(), Some(2));
}

#[test]
fn one_real_lesson_cell_runs_bounded_and_matches_the_lab_away_from_the_boundary() {
    // G = 5 with intent: the lab says 8 created, nothing unneeded, no overshoot; the boundary
    // U = G + B is 5 virtual seconds (50 ms at this scale) away.
    let c = rig();
    let out = c.run(&[
        "experiment",
        "lesson",
        "--real",
        "--time-scale",
        "0.01",
        "--delay",
        "5",
        "--controller",
        "intent",
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The runtime's parts log hundreds of lines; without --verbose none reach stderr.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.lines().count() <= 2, "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cell = &v["cells"][0];
    let real = &cell["measured"]["metrics"];
    let lab = &cell["simulated"];
    assert_eq!(cell["killed"].as_array().unwrap().len(), 2, "{cell}");
    for key in [
        "created",
        "unneeded",
        "delete_commands",
        "deleted",
        "overshoot",
        "died",
    ] {
        assert_eq!(real[key], lab[key], "{key}: {cell}");
    }
    // The cell's agent stopped every copy it started.
    let nodes = c.data_dir().join("intent-g5").join("nodes");
    let mark = nodes.canonicalize().unwrap().join("node-1");
    assert!(find_marked(&mark.display().to_string()).is_empty());
}

use std::os::unix::process::ExitStatusExt;

use setpoint_core::ControllerKind;
use setpoint_runtime::events::{read_log, CopyEventKind, Logged};
use setpoint_runtime::failpoint::ENV as FAILPOINTS;
use setpoint_runtime::{SqliteStore, Store};
use setpoint_sim::delay::DelayModel;
use setpoint_sim::scenario::{ControllerSpec, Event, Scenario, ScenarioSpec, TimedEvent, Workload};

fn store(c: &Rig) -> SqliteStore {
    SqliteStore::open(&c.data_dir()).unwrap()
}

/// The workload's event log.
fn log(c: &Rig) -> Vec<Logged> {
    read_log(&store(c), "collector").unwrap()
}

/// The times of the copy events of `kind`, by copy number.
fn copy_events(c: &Rig, kind: CopyEventKind) -> Vec<(u64, u64)> {
    log(c)
        .into_iter()
        .filter_map(|l| match l {
            Logged::Copy {
                kind: k, n, event, ..
            } if k == kind => Some((n, event.at_ms)),
            _ => None,
        })
        .collect()
}

/// The start times of the passes logged after `after_ms`.
fn rounds_after(c: &Rig, after_ms: u64) -> Vec<u64> {
    log(c)
        .into_iter()
        .filter_map(|l| match l {
            Logged::Round(r) if r.at_ms > after_ms => Some(r.at_ms),
            _ => None,
        })
        .collect()
}

/// Polls for `span`: no copy may ever run twice, nor more than `most` copies at once.
fn never_doubled(c: &Rig, span: Duration, most: usize) {
    c.during(span, POLL, |c| {
        let p = c.processes();
        assert!(
            p.values().all(|pids| pids.len() == 1) && p.len() <= most,
            "a copy runs twice, or too many run: {p:?}\n{}",
            c.logs()
        );
    });
}

/// Stops every agent cleanly and checks that no copy process is left: none orphaned.
fn stop_agents_and_check_no_orphan(c: &mut Rig) {
    let agents: Vec<String> = c
        .names()
        .into_iter()
        .filter(|k| k.starts_with("agent-"))
        .collect();
    for a in agents {
        assert!(c.signal(&a, Signal::TERM).success());
    }
    assert!(c.processes().is_empty(), "orphans: {:?}", c.processes());
}

/// Asserts that `name` died of a SIGKILL (its failpoint), not of anything else.
fn killed_by_failpoint(status: std::process::ExitStatus, fp: &str) {
    assert_eq!(status.signal(), Some(9), "{fp}: {status:?}");
}

#[test]
fn a_named_controller_killed_at_each_pass_failpoint_restarts_without_duplicates_and_converges_within_two_periods(
) {
    let period_ms = 500;
    for fp in ["pass-before-commit", "pass-after-commit"] {
        let mut c = rig();
        // G = 1 s, B = 100 ms, U = 500 ms: the restart falls inside the blind window.
        agent(&mut c, "a", "1s", &[]);
        apply(&c, 3, "named", "500ms", "100ms");
        controller(&mut c, "c1", &[(FAILPOINTS, &format!("{fp}=sigkill"))]);
        killed_by_failpoint(c.wait_exit("c1"), fp);
        let killed_at = store(&c).now_ms();
        let assigned_before = assigned(&c);
        controller(&mut c, "c2", &[]);
        c.until("three copies run", |c| c.processes().len() == 3);
        // Past the blind window: the ledger has caught up, and nothing ran twice meanwhile.
        never_doubled(&c, Duration::from_millis(1_500), 3);
        let p = c.processes();
        assert_eq!(
            p.keys().map(String::as_str).collect::<Vec<_>>(),
            ["collector-0", "collector-1", "collector-2"],
            "{fp}"
        );
        let creates = copy_events(&c, CopyEventKind::Create);
        assert_eq!(
            creates.len(),
            3,
            "{fp}: each name created once: {creates:?}"
        );
        // Convergence within two periods of the new leader's first pass, by the store's clock.
        let first = rounds_after(&c, killed_at)[0];
        let ready = copy_events(&c, CopyEventKind::Ready);
        assert_eq!(ready.len(), 3, "{fp}: {ready:?}");
        let last_ready = ready.iter().map(|r| r.1).max().unwrap();
        assert!(
            last_ready <= first + 2 * period_ms,
            "{fp}: converged {} ms after the restart's first pass",
            last_ready.saturating_sub(first)
        );
        // Nothing lost: the declaration, and every assignment the crash left.
        let g = c.get("collector");
        assert_eq!(g["desired"], 3, "{fp}");
        let after = assigned(&c);
        assert!(
            assigned_before.iter().all(|a| after.contains(a)),
            "{fp}: {assigned_before:?} then {after:?}"
        );
        stop_agents_and_check_no_orphan(&mut c);
        println!(
            "failpoint matrix: named  {fp:<19} SIGKILL; 3 names created once, never two copies of one; \
             ready {} ms after the new leader's first pass (limit {}); assignments kept {}/{}; no orphan",
            last_ready.saturating_sub(first),
            2 * period_ms,
            assigned_before.len(),
            assigned_before.len()
        );
    }
}

#[test]
fn an_intent_controller_killed_at_each_pass_failpoint_overshoots_exactly_as_the_lab_predicts() {
    // Real: U = 400 ms, B = 100 ms, G = 2 s. The lab runs the same world in ticks of 100 ms
    // (U = 4, B = 1, G = 20, plus 1 for the real pipeline) with a controller restart.
    for fp in ["pass-before-commit", "pass-after-commit"] {
        let mut c = rig();
        agent(&mut c, "a", "2s", &[]);
        apply(&c, 3, "intent", "400ms", "100ms");
        controller(&mut c, "c1", &[(FAILPOINTS, &format!("{fp}=sigkill"))]);
        killed_by_failpoint(c.wait_exit("c1"), fp);
        let killed_at = store(&c).now_ms();
        controller(&mut c, "c2", &[]);
        // Wait for the overshoot to be seen and corrected: three copies, on the ledger.
        c.until("the ledger catches up and the surplus is deleted", |c| {
            let g = c.get("collector");
            c.processes().len() == 3 && g["on_ledger"] == 3 && g["pending_create"] == 0
        });
        let log = log(&c);
        let origin = log
            .iter()
            .find_map(|l| match l {
                Logged::Round(r) => Some(r.at_ms),
                Logged::Copy { .. } => None,
            })
            .unwrap();
        let m = c.measure("collector", "0.1");
        let measured = m["metrics"]["overshoot"].as_u64().unwrap();
        // A crash before the write loses the pass: the lab's equivalent is a restart before the
        // first round. A crash after it: a restart before the new leader's first pass, rounded
        // up to the lab's round grid.
        let restart_at = if fp == "pass-before-commit" {
            0
        } else {
            let first = rounds_after(&c, killed_at)[0];
            (first - origin).div_ceil(100).div_ceil(4) * 4
        };
        let spec = ScenarioSpec {
            period: 4,
            duration: m["last_second"].as_u64().unwrap(),
            delay: DelayModel::Fixed(21_000),
            controller: ControllerSpec::new(ControllerKind::Intent),
            workloads: vec![Workload {
                name: "collector".into(),
                desired: 3,
                startup: 1,
            }],
            events: vec![TimedEvent {
                at: restart_at,
                workload: None,
                event: Event::Restart,
            }],
            unique_names: true,
            seed: 1,
            pipeline: Default::default(),
            startup_model: None,
        };
        let predicted = setpoint_sim::run(&Scenario::new(spec).unwrap(), 1)
            .unwrap()
            .workloads[0]
            .metrics
            .overshoot;
        assert!(
            restart_at < 21,
            "{fp}: the restart must fall inside the blind window"
        );
        assert_eq!(
            measured, predicted,
            "{fp}: restart at lab second {restart_at}; {m}"
        );
        assert_eq!(predicted, if fp == "pass-before-commit" { 0 } else { 3 });
        stop_agents_and_check_no_orphan(&mut c);
        println!(
            "failpoint matrix: intent {fp:<19} SIGKILL; restart at lab second {restart_at} (blind window 0-21): \
             overshoot measured {measured}, lab {predicted}; no orphan"
        );
    }
}

#[test]
fn a_controller_killed_at_each_garbage_collection_failpoint_still_collects_every_orphan() {
    for fp in ["gc-before-commit", "gc-after-commit"] {
        let mut c = rig();
        agent(&mut c, "a", "0", &[]);
        controller(&mut c, "c1", &[(FAILPOINTS, &format!("{fp}=sigkill"))]);
        apply(&c, 2, "named", "200ms", "50ms");
        c.until("two copies run", |c| c.processes().len() == 2);
        // Deleting the workload orphans its assignments; collecting them hits the failpoint.
        c.ok(&["delete", "collector"]);
        killed_by_failpoint(c.wait_exit("c1"), fp);
        controller(&mut c, "c2", &[]);
        c.until("the orphans' copies are stopped", |c| {
            c.processes().is_empty()
        });
        let left = c.ok(&["status", "--format", "json"]);
        let s: Value = serde_json::from_str(&left).unwrap();
        assert_eq!(s["nodes"][0]["assigned"], 0, "{fp}: {s}");
        stop_agents_and_check_no_orphan(&mut c);
        println!(
            "failpoint matrix: gc     {fp:<19} SIGKILL; the restarted leader collected both orphans; no orphan"
        );
    }
}

#[test]
fn an_agent_killed_at_each_failpoint_while_starting_copies_adopts_or_reaps_them_and_never_doubles_one(
) {
    for fp in [
        "agent-after-spawn=sigkill@2",
        "agent-after-record=sigkill@2",
        "agent-after-report=sigkill@3",
    ] {
        let mut c = rig();
        agent(&mut c, "a", "0", &[(FAILPOINTS, fp)]);
        controller(&mut c, "c1", &[]);
        apply(&c, 4, "intent", "300ms", "100ms");
        killed_by_failpoint(c.wait_exit("agent-a"), fp);
        // What the dead agent left running: orphans until an agent of the node returns.
        let left = c.processes();
        assert!(left.values().all(|p| p.len() == 1), "{fp}: {left:?}");
        agent(&mut c, "a", "0", &[]);
        c.until("four copies run, on the ledger", |c| {
            let p = c.processes();
            let g = c.get("collector");
            p.len() == 4 && g["on_ledger"] == 4 && g["pending_create"] == 0
        });
        never_doubled(&c, Duration::from_millis(600), 4);
        let now = c.processes();
        let mut adopted = 0;
        for (copy, pids) in &left {
            // Adopted (the same process) or reaped (gone, and replaced under a new name).
            if let Some(p) = now.get(copy) {
                assert_eq!(p, pids, "{fp}: {copy} was started again");
                adopted += 1;
            }
        }
        stop_agents_and_check_no_orphan(&mut c);
        println!(
            "failpoint matrix: agent  {fp:<28} SIGKILL with {} copies running; {adopted} adopted, {} reaped, \
             none doubled; 4 converged; no orphan",
            left.len(),
            left.len() - adopted
        );
    }
}
