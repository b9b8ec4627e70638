//! Runs the real `setpoint` binary as a cluster: `up`, `controller` and `agent` processes on a
//! SQLite store in a temporary data directory, with real copies (`sleep`) on compressed time.
//! Every wait polls with a deadline; a guard kills every process a test started.

use std::time::{Duration, Instant};

use rustix::process::Signal;
use serde_json::Value;

use super::harness::{assert_one_line, sleeping, Rig};

/// One workload, `collector`, of real copies (`sleep`) on compressed time.
pub(crate) fn collector(copies: u64, controller: &str, period: &str, startup: &str) -> String {
    sleeping(
        "collector",
        copies,
        controller,
        120,
        period,
        startup,
        "500ms",
    )
}

/// Declares `collector` with U = 200ms and a startup of 100ms.
pub(crate) fn apply(c: &Rig, copies: u64, controller: &str) {
    c.apply(&collector(copies, controller, "200ms", "100ms"));
}

/// Starts `up` with `nodes` nodes, R = 50ms and a leader lease of 1s.
pub(crate) fn up(c: &mut Rig, nodes: u32) {
    up_with(c, nodes, &[]);
}

/// [`up`] with `extra` flags after the usual ones.
pub(crate) fn up_with(c: &mut Rig, nodes: u32, extra: &[&str]) {
    let nodes = nodes.to_string();
    let mut args = vec![
        "up",
        "--nodes",
        &nodes,
        "--report-every",
        "50ms",
        "--lease-ttl",
        "1s",
    ];
    args.extend_from_slice(extra);
    c.start("up", &args);
}

/// Waits until `n` copies of `collector` run, once each, and `get` shows them live and on the
/// ledger.
pub(crate) fn converged(c: &Rig, n: u64) {
    c.until(&format!("{n} live copies"), |c| {
        let p = c.processes();
        let g = c.get("collector");
        p.len() as u64 == n
            && p.values().all(|pids| pids.len() == 1)
            && g["live"] == n
            && g["on_ledger"] == n
            && g["pending_create"] == 0
    });
}

/// Kills `n` copies of `collector` and waits until their processes are gone; their names.
fn kill(c: &Rig, n: u64) -> Vec<String> {
    let killed = c.kill_copies("collector", n);
    assert_eq!(killed.len() as u64, n);
    c.until("the killed copies are gone", |c| {
        let p = c.processes();
        killed.iter().all(|k| !p.contains_key(k))
    });
    killed
}

fn copy_numbers(g: &Value) -> Vec<u64> {
    g["copies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c["copy"]
                .as_str()
                .unwrap()
                .rsplit('-')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

#[test]
fn up_keeps_six_real_copies_through_kills_scaling_and_a_crash_restart() {
    let mut c = Rig::new();
    up(&mut c, 3);
    c.until("three nodes report", |c| {
        c.status()["nodes"].as_array().is_some_and(|n| n.len() == 3)
    });
    apply(&c, 6, "intent");
    converged(&c, 6);
    // Spread over the three nodes, two each.
    let s = c.status();
    let assigned: Vec<u64> = s["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["assigned"].as_u64().unwrap())
        .collect();
    assert_eq!(assigned, [2, 2, 2]);
    assert!(s["leader"]["holder"]
        .as_str()
        .unwrap()
        .starts_with("controller/"));

    // Kills: replaced, with new identities.
    assert_eq!(kill(&c, 2), ["collector-0", "collector-1"]);
    converged(&c, 6);
    assert_eq!(*copy_numbers(&c.get("collector")).iter().max().unwrap(), 7);

    // A crash of the whole process (controller and agents): the copies live on, and the next
    // `up` adopts them: the same processes, none doubled, none orphaned.
    let before = c.processes();
    c.signal("up", Signal::KILL);
    assert_eq!(c.processes(), before);
    up(&mut c, 3);
    c.until("a new leader", |c| !c.status()["leader"].is_null());
    converged(&c, 6);
    assert_eq!(c.processes(), before);

    // Scale up and down.
    apply(&c, 9, "intent");
    converged(&c, 9);
    apply(&c, 3, "intent");
    converged(&c, 3);
    assert_eq!(c.get("collector")["copies"].as_array().unwrap().len(), 3);

    // Ctrl-C stops everything cleanly, copies included.
    assert!(c.signal("up", Signal::INT).success());
    assert!(c.processes().is_empty());
}

#[test]
fn two_controller_processes_elect_one_leader_and_the_other_takes_over_within_a_ttl() {
    let mut c = Rig::new();
    c.start("agent", &["agent", "--node", "a", "--report-every", "50ms"]);
    c.start("c1", &["controller", "--lease-ttl", "1s"]);
    c.start("c2", &["controller", "--lease-ttl", "1s"]);
    // A second acting leader would start with empty memory and create the copies again.
    apply(&c, 3, "intent");
    converged(&c, 3);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        copy_numbers(&c.get("collector")),
        [0, 1, 2],
        "nothing created twice"
    );

    let holder = c.status()["leader"]["holder"].as_str().unwrap().to_owned();
    let pid: u32 = holder.split('/').nth(1).unwrap().parse().unwrap();
    let leader = if c.pid("c1") == pid { "c1" } else { "c2" };
    let died = Instant::now();
    c.signal(leader, Signal::KILL);
    c.until("the other controller leads", |c| {
        c.status()["leader"]["holder"]
            .as_str()
            .is_some_and(|h| h != holder)
    });
    let takeover = died.elapsed();
    assert!(takeover < Duration::from_millis(1_600), "took {takeover:?}");

    kill(&c, 1);
    converged(&c, 3);
    assert_eq!(copy_numbers(&c.get("collector")), [1, 2, 3]);
}

#[test]
fn runtime_bad_input_gets_one_line_and_exit_code_2() {
    let c = Rig::new();
    let bad = c.dir().join("bad.toml");
    std::fs::write(
        &bad,
        "[[workload]]\nname = \"a\"\ncommand = []\ncopies = 1\n",
    )
    .unwrap();
    for (args, needle) in [
        (
            vec!["apply", "-f", bad.to_str().unwrap()],
            "command: it is empty",
        ),
        (
            vec!["apply", "-f", "/nonexistent.toml"],
            "reading /nonexistent.toml",
        ),
        // No command has made a store here yet: read commands refuse instead of creating one.
        (vec!["get", "nope"], "no store in"),
        (vec!["delete", "nope"], "no store in"),
        (vec!["up", "--lease-ttl", "5"], "the unit is missing"),
        (vec!["agent", "--node", "Bad_Name"], "not a valid name"),
    ] {
        assert_one_line(&c.run(&args), 2, &[needle], &format!("{args:?}"));
    }
    // Nothing of a rejected file was applied.
    let ok = c.dir().join("ok.toml");
    std::fs::write(
        &ok,
        "[[workload]]\nname = \"good\"\ncommand = [\"true\"]\ncopies = 1\n[[workload]]\nname = \"bad\"\ncommand = [\"true\"]\ncopies = -3\n",
    )
    .unwrap();
    // A workload already stored must survive the rejected file untouched.
    let keep = c.dir().join("keep.toml");
    std::fs::write(
        &keep,
        "[[workload]]\nname = \"keep\"\ncommand = [\"true\"]\ncopies = 2\n",
    )
    .unwrap();
    c.ok(&["apply", "-f", keep.to_str().unwrap()]);
    let before = c.ok(&["get", "--format", "json"]);
    assert_eq!(
        c.run(&["apply", "-f", ok.to_str().unwrap()]).status.code(),
        Some(2)
    );
    let after = c.ok(&["get", "--format", "json"]);
    assert!(
        after.contains(r#""name":"keep""#) || after.contains(r#""workload":"keep""#),
        "{after}"
    );
    assert!(
        !after.contains("good") && !after.contains("\"bad\""),
        "{after}"
    );
    assert_eq!(before, after, "the rejected file changed nothing");
}
