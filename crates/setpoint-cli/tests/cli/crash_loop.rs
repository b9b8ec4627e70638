//! Issue 22, items 3 and 5, on the real binary.
//!
//! - A copy that crashes after its startup backs off on the kubelet schedule, and `get copies`
//!   and `get` show it crash-looping with its last exit and restart count; a copy killed on
//!   command (`setpoint kill`) is still replaced at once.
//! - An agent that comes back after its node lease ended, and adopts copies that were replaced
//!   elsewhere meanwhile, costs no healthy copy on another node: on SQLite and on etcd.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use serde_json::Value;
use setpoint_runtime::testing::EtcdCluster;

use super::harness::{sleeping, Rig};
use super::runtime::{up, up_with};

/// The rows of `get copies WORKLOAD --format json`.
fn copies(c: &Rig, workload: &str) -> Vec<Value> {
    let v = c.json(&["get", "copies", workload, "--format", "json"]);
    v["copies"].as_array().cloned().unwrap_or_default()
}

/// How many copies of `workload` the event log shows created.
fn creations(c: &Rig, workload: &str) -> usize {
    let v = c.json(&["events", workload, "--since", "10m", "--format", "json"]);
    v["events"]
        .as_array()
        .map_or(0, |e| e.iter().filter(|e| e["event"] == "create").count())
}

/// A copy that is ready after 500 ms and exits with status 3 two seconds after it started.
const CRASHES_AFTER_STARTUP: &str = "[[workload]]\nname = \"late\"\n\
    command = [\"sh\", \"-c\", \"sleep 2; exit 3\"]\ncopies = 1\nperiod = \"1s\"\n\
    startup = \"500ms\"\ngrace = \"300ms\"\n";

/// Issue 22, item 5: on today's main the copy is replaced every ~3 s without end (about ten
/// starts in 30 s) and `get` shows no backoff. With every uncommanded exit counted, the default
/// schedule (10 s, 20 s, …) allows at most 3 starts in 30 s: at 0 s, ~12 s and ~34 s.
#[test]
fn a_copy_that_crashes_after_its_startup_backs_off_and_shows_crash_looping() {
    let mut c = Rig::new();
    up(&mut c, 1);
    c.until("the node reports", |c| {
        c.try_status()
            .is_some_and(|s| s["nodes"].as_array().is_some_and(|n| n.len() == 1))
    });
    c.apply(CRASHES_AFTER_STARTUP);
    let applied = Instant::now();
    c.until("the first copy crashed and is crash-looping", |c| {
        copies(c, "late").iter().any(|r| {
            r["state"] == "crash-looping"
                && r["last_exit"] == "exit status 3"
                && r["restarts"].as_u64() == Some(1)
        })
    });
    let g = c.get("late");
    let b = &g["backoff"][0];
    assert_eq!(
        (
            b["key"].as_str(),
            b["last_exit"].as_str(),
            b["failures"].as_u64()
        ),
        (Some("late"), Some("exit status 3"), Some(1)),
        "{g}"
    );
    let table = c.ok(&["get"]);
    let row = table.lines().find(|l| l.starts_with("late")).unwrap();
    assert!(
        row.contains("BACKOFF late-") && row.contains("exit status 3"),
        "{table}"
    );
    // Over 30 s from the apply: the schedule's starts, and no more.
    c.until_within(
        "a second try after the 10s backoff",
        Duration::from_secs(30),
        |c| creations(c, "late") >= 2,
    );
    let left = Duration::from_secs(30).saturating_sub(applied.elapsed());
    std::thread::sleep(left);
    let made = creations(&c, "late");
    assert!(
        (2..=3).contains(&made),
        "{made} starts in 30 s: the backoff allows 2 or 3\n{}",
        c.logs()
    );
    let rows = copies(&c, "late");
    assert!(
        rows.iter().any(|r| r["state"] == "crash-looping"
            && r["last_exit"] == "exit status 3"
            && r["restarts"].as_u64() >= Some(2)),
        "{rows:?}"
    );
}

/// A copy killed on command is a commanded death: replaced at once, no backoff recorded.
#[test]
fn a_copy_killed_on_command_is_replaced_at_once_without_backoff() {
    let mut c = Rig::new();
    up(&mut c, 1);
    c.apply(&sleeping(
        "web", 2, "intent", 120, "200ms", "100ms", "300ms",
    ));
    c.until("two running copies", |c| {
        c.processes().len() == 2 && c.get("web")["on_ledger"] == 2
    });
    let killed = c.kill_copies("web", 1);
    assert_eq!(killed.len(), 1);
    let t = c.until("two running copies again, a new one", |c| {
        let p = c.processes();
        p.len() == 2 && !p.contains_key(&killed[0]) && c.get("web")["on_ledger"] == 2
    });
    assert!(t < Duration::from_secs(8), "replaced after {t:?}");
    let g = c.get("web");
    assert!(
        g["backoff"].as_array().is_none_or(|b| b.is_empty()),
        "a commanded death records no backoff: {g}"
    );
}

/// Issue 22, item 3: `up --nodes 2` plus `agent --node x`, `intent` 6 at U = 1 s. SIGKILL agent
/// x, wait for its lease to end and its copies to be replaced on node-1 and node-2, start it
/// again: it adopts its old copies and stops them, and the controller must not count them. On
/// today's main it counts 8 and deletes two healthy copies on the other nodes: live drops to 4.
fn a_returning_node_costs_no_healthy_copy(mut c: Rig) {
    up_with(&mut c, 2, &["--node-timeout", "2s"]);
    // x reports every second, the default: its first report after the restart, which shows
    // the adopted copies still running while it stops them, stands for a whole period.
    let agent_x = ["agent", "--node", "x", "--node-timeout", "2s"];
    c.start("agent-x", &agent_x);
    c.until("three nodes report", |c| {
        c.try_status()
            .is_some_and(|s| s["nodes"].as_array().is_some_and(|n| n.len() == 3))
    });
    // Copies that take their whole grace period to stop (they ignore SIGTERM), as a server
    // draining its connections does: the returning agent's reports show them for 2 s.
    c.apply(
        "[[workload]]\nname = \"web\"\ncommand = [\"sh\", \"-c\", \"trap '' TERM; exec sleep 300\"]\n\
         copies = 6\ncontroller = \"intent\"\nperiod = \"1s\"\nstartup = \"100ms\"\ngrace = \"2s\"\n",
    );
    c.until("6 copies live, some of them on x", |c| {
        let g = c.get("web");
        c.processes().len() == 6 && g["live"] == 6 && !c.processes_of("x").is_empty()
    });
    let on_x: Vec<String> = c.processes_of("x").into_keys().collect();

    c.signal("agent-x", Signal::KILL);
    c.until_within(
        "x's copies replaced on node-1 and node-2",
        Duration::from_secs(40),
        |c| {
            let others = c.processes_on(&["node-1", "node-2"]);
            others.len() == 6 && c.get("web")["live"] == 6
        },
    );
    let others: BTreeMap<String, Vec<(String, u32)>> = c.processes_on(&["node-1", "node-2"]);

    c.start("agent-x", &agent_x);
    let mut lowest = u64::MAX;
    c.until_within(
        "x stopped its adopted copies",
        Duration::from_secs(30),
        |c| {
            lowest = lowest.min(c.get("web")["live"].as_u64().unwrap_or(0));
            c.processes_of("x").is_empty()
        },
    );
    // A few controller passes more: nothing of node-1's and node-2's is deleted.
    c.during(Duration::from_secs(4), Duration::from_millis(200), |c| {
        lowest = lowest.min(c.get("web")["live"].as_u64().unwrap_or(0));
    });
    assert!(lowest >= 6, "live dropped to {lowest}\n{}", c.logs());
    assert_eq!(
        c.processes_on(&["node-1", "node-2"]),
        others,
        "every healthy copy on the other nodes runs on, with the same pid"
    );
    let log = std::fs::read_to_string(c.log_path("agent-x")).unwrap_or_default();
    for copy in &on_x {
        assert!(
            log.contains(&format!("stopping {copy}")),
            "x stops its own {copy}\n{log}"
        );
    }
    assert_eq!(c.get("web")["live"], 6);
}

#[test]
fn a_returning_node_costs_no_healthy_copy_on_sqlite() {
    a_returning_node_costs_no_healthy_copy(Rig::new());
}

#[test]
fn a_returning_node_costs_no_healthy_copy_on_etcd() {
    let Some(etcd) = EtcdCluster::start_or_skip("cli::crash_loop::returning_node", 1) else {
        return;
    };
    a_returning_node_costs_no_healthy_copy(Rig::on_store(&etcd.url()));
    drop(etcd);
}
