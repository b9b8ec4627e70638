//! Node identity and liveness with the real binary: node leases, lost nodes, fencing, and one
//! agent per node name. A controller and agents run as separate processes on one SQLite data
//! directory, with real copies (`sleep`) on compressed time. Every wait polls with a deadline,
//! and a guard kills every process a test started (by pid) and every copy they left.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use serde_json::Value;
use setpoint_runtime::process::{find_marked, signal_group};

use super::harness::{sleeping, Rig};

/// Declares `named` copies of `nm` and `intent` copies of `it`.
/// Two workloads side by side: `named` keeps names 0…N-1, `intent` counts.
fn apply(c: &Rig, named: u64, intent: u64) {
    let nm = sleeping("nm", named, "named", 120, "200ms", "100ms", "300ms");
    let it = sleeping("it", intent, "intent", 120, "200ms", "100ms", "300ms");
    c.apply(&format!("{nm}\n{it}"));
}

/// Starts an agent for `node` with R = 50ms and a node lease of `ttl`.
fn agent(c: &mut Rig, node: &str, ttl: &str, extra: &[&str]) {
    let mut args = vec![
        "agent",
        "--node",
        node,
        "--report-every",
        "50ms",
        "--sync-every",
        "50ms",
        "--node-timeout",
        ttl,
    ];
    args.extend_from_slice(extra);
    c.start(&format!("agent-{node}"), &args);
}

/// Waits until `want` holds. Also checks, at every poll, that no `named` name runs twice.
fn until(c: &Rig, what: &str, want: impl Fn(&Rig) -> bool) {
    c.until(what, |c| {
        let p = c.processes();
        let doubled: Vec<_> = p
            .iter()
            .filter(|(c, pids)| c.starts_with("nm-") && pids.len() > 1)
            .collect();
        assert!(doubled.is_empty(), "two copies of one name: {doubled:?}");
        want(c)
    });
}

/// Whether `n` copies of `workload` run, once each, all live on the ledger.
fn converged(c: &Rig, workload: &str, n: u64) -> bool {
    let p: Vec<_> = c
        .processes()
        .into_iter()
        .filter(|(c, _)| c.starts_with(&format!("{workload}-")))
        .collect();
    let g = c.get(workload);
    p.len() as u64 == n
        && p.iter().all(|(_, pids)| pids.len() == 1)
        && g["on_ledger"] == n
        && g["pending_create"] == 0
}

fn names(p: &BTreeMap<String, Vec<u32>>, prefix: &str) -> Vec<String> {
    p.keys()
        .filter(|c| c.starts_with(prefix))
        .cloned()
        .collect()
}

/// The reproduction: 3 agents, a node lease of 1s, `named` 6 copies beside `intent` 2.
/// SIGKILL one agent and its copies: once its lease ends, `intent` is replaced on the other
/// nodes at once; `named` holds the lost node's names (the controller cannot tell a dead agent
/// from a paused one whose copies still run) and says so, until `node forget` confirms the node
/// is gone; then it creates them again under the same names. No name ever runs twice.
#[test]
fn named_replaces_the_copies_of_a_killed_agent_once_its_node_is_forgotten() {
    let mut c = Rig::new();
    c.start("controller", &["controller", "--lease-ttl", "1s"]);
    for n in ["a", "b", "c"] {
        agent(&mut c, n, "1s", &[]);
    }
    until(&c, "three live nodes", |c| {
        c.status()["nodes"]
            .as_array()
            .is_some_and(|n| n.iter().filter(|n| n["live"] == true).count() == 3)
    });
    apply(&c, 6, 3);
    until(&c, "6 named and 3 intent copies", |c| {
        converged(c, "nm", 6) && converged(c, "it", 3)
    });
    let on_a = c.processes_of("a");
    let lost_names = names(&on_a, "nm-");
    assert_eq!(lost_names.len(), 2, "{on_a:?}");

    // The agent dies, and so do its copies.
    c.signal("agent-a", Signal::KILL);
    for m in find_marked(&c.mark("a")) {
        let _ = signal_group(m.pid, Signal::KILL);
    }
    until(&c, "intent replaced, named waiting for node a", |c| {
        converged(c, "it", 3)
            && c.get("nm")["idle"]["text"]
                == "waiting for a to confirm its copies ended (setpoint node forget a)"
    });
    assert_eq!(
        c.processes()
            .keys()
            .filter(|k| k.starts_with("nm-"))
            .count(),
        4
    );
    let out = c.ok(&["node", "forget", "a"]);
    assert!(out.contains(": 2 assignments released"), "{out}");
    let forgotten = Instant::now();
    until(&c, "the node's names run again elsewhere", |c| {
        converged(c, "nm", 6) && converged(c, "it", 3)
    });
    let took = forgotten.elapsed();
    let after = c.processes();
    assert_eq!(
        names(&after, "nm-"),
        (0..6).map(|n| format!("nm-{n}")).collect::<Vec<_>>()
    );
    assert!(c.processes_of("a").is_empty());
    println!(
        "lost node: lease 1s, {} named names replaced {}ms after node forget",
        lost_names.len(),
        took.as_millis()
    );
    // A pass period or two; far less than the test's deadline.
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let s = c.status();
    // The forgotten node is no longer listed (issue 23: it stayed forever), only counted.
    assert!(
        s["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["node"] != "a"),
        "{s}"
    );
    assert_eq!(s["forgotten"], 1, "{s}");
    let table = c.ok(&["status"]);
    assert!(
        table.contains("1 lost node confirmed gone with 'node forget' not listed"),
        "{table}"
    );
    for n in s["nodes"].as_array().unwrap() {
        assert_eq!(n["lease"]["ttl_ms"], 1000, "{s}");
        assert!(n["since_report_ms"].as_u64().unwrap() < 1000, "{s}");
    }
    // `kill` goes through the store to the agent that runs the copy.
    let out = c.ok(&["kill", "nm", "1"]);
    assert_eq!(out, "killed nm-0\n");
    until(&c, "nm-0 replaced", |c| converged(c, "nm", 6));
    let nm = c.get("nm");
    assert!(
        nm["copies"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["node"] != "a"),
        "the lost node's assignments are gone: {nm}"
    );
}

/// Issue 11's stall: every node stopped with Ctrl-C, then a new controller and an agent with a
/// new name. The old nodes gave their leases up, so their assignments no longer hold the names
/// and `named` creates them on the new node.
#[test]
fn named_comes_back_on_a_new_node_after_every_earlier_node_stopped_with_ctrl_c() {
    let mut c = Rig::new();
    c.start("controller", &["controller", "--lease-ttl", "1s"]);
    agent(&mut c, "a", "10s", &[]);
    agent(&mut c, "b", "10s", &[]);
    apply(&c, 3, 1);
    until(&c, "3 named copies", |c| {
        converged(c, "nm", 3) && converged(c, "it", 1)
    });
    for d in ["agent-a", "agent-b", "controller"] {
        assert!(c.signal(d, Signal::INT).success(), "{d} stopped cleanly");
    }
    assert!(c.processes().is_empty());

    // A 10s node lease, given up on Ctrl-C: no waiting for it.
    let started = Instant::now();
    c.start("controller2", &["controller", "--lease-ttl", "1s"]);
    agent(&mut c, "edge-a", "10s", &["--report-delay", "300ms"]);
    until(&c, "3 named copies on the new node", |c| {
        converged(c, "nm", 3) && converged(c, "it", 1)
    });
    assert_eq!(
        names(&c.processes_of("edge-a"), "nm-"),
        ["nm-0", "nm-1", "nm-2"]
    );
    println!(
        "after Ctrl-C of every node: named back on a new node in {}ms (node lease 10s, given up)",
        started.elapsed().as_millis()
    );
}

/// One agent per node name on a data directory: a second agent of a running node, and a second
/// `up`, are refused with one line and exit 2, and start nothing. A restarted agent (after a
/// crash) is not refused: it takes its predecessor's lease over and adopts its copies.
#[test]
fn a_second_agent_or_up_on_a_taken_node_is_refused_and_a_crashed_one_comes_back() {
    let mut c = Rig::new();
    c.start("controller", &["controller", "--lease-ttl", "1s"]);
    agent(&mut c, "a", "2s", &[]);
    apply(&c, 2, 1);
    until(&c, "3 copies", |c| {
        converged(c, "nm", 2) && converged(c, "it", 1)
    });
    let before = c.processes();

    for args in [
        vec!["agent", "--node", "a"],
        vec!["up", "--nodes", "1", "--node-timeout", "2s"],
    ] {
        let mut args = args.clone();
        if args[0] == "up" {
            // `up` names its nodes node-1…: run one on this data directory first.
            agent(&mut c, "node-1", "2s", &[]);
            until(&c, "node-1 is live", |c| {
                c.status()["nodes"]
                    .as_array()
                    .is_some_and(|n| n.iter().any(|n| n["node"] == "node-1" && n["live"] == true))
            });
            args.push("--report-every");
            args.push("50ms");
        }
        let out = c.run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or_default();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(last.starts_with("error: node '"), "{args:?}: {err}");
        assert!(last.contains("runs one agent"), "{args:?}: {err}");
    }
    // Nothing was doubled.
    assert_eq!(names(&c.processes(), ""), names(&before, ""));

    // A crash: the agent dies, its copies live on. Its successor holds the lock the kernel
    // released, takes the lease over (the node never goes lost) and adopts the same processes.
    let before = c.processes_of("a");
    c.signal("agent-a", Signal::KILL);
    agent(&mut c, "a", "2s", &[]);
    until(&c, "the restarted agent reports", |c| {
        std::fs::read_to_string(c.log_path("agent-a"))
            .unwrap_or_default()
            .contains("taken over from the previous agent here")
    });
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(c.processes_of("a"), before, "the same processes, adopted");
}

/// A controller paused past its leader lease (SIGSTOP, then SIGCONT) is deposed: the other one
/// leads, and every write the old one tries after waking is refused on the fence. The event log
/// shows it: each round carries the fencing token of the leader that wrote it, and after the
/// takeover none carries the old one.
#[test]
fn a_leader_paused_past_its_lease_has_every_write_refused_after_it_wakes() {
    let mut c = Rig::new();
    agent(&mut c, "a", "5s", &[]);
    c.start("c1", &["controller", "--lease-ttl", "500ms"]);
    until(&c, "a leader", |c| !c.status()["leader"].is_null());
    c.start("c2", &["controller", "--lease-ttl", "500ms"]);
    apply(&c, 2, 1);
    until(&c, "3 copies", |c| {
        converged(c, "nm", 2) && converged(c, "it", 1)
    });
    let holder = c.status()["leader"]["holder"].as_str().unwrap().to_owned();
    let pid: u32 = holder.split('/').nth(1).unwrap().parse().unwrap();
    let (old, other) = if c.pid("c1") == pid {
        ("c1", "c2")
    } else {
        ("c2", "c1")
    };
    c.send(old, Signal::STOP);
    let paused = Instant::now();
    until(&c, "the other controller leads", |c| {
        c.status()["leader"]["holder"]
            .as_str()
            .is_some_and(|h| h != holder)
    });
    let takeover = paused.elapsed();
    // Scale while the old leader sleeps, so that it wakes on stale state with work to do.
    apply(&c, 3, 2);
    until(&c, "the new leader converged", |c| {
        converged(c, "nm", 3) && converged(c, "it", 2)
    });
    std::thread::sleep(Duration::from_millis(300));
    c.send(old, Signal::CONT);
    let woke = Instant::now();
    until(&c, "the old leader noticed", |c| {
        std::fs::read_to_string(c.log_path(old))
            .unwrap_or_default()
            .contains("lost the leader lease")
    });
    std::thread::sleep(Duration::from_millis(1_000));
    assert!(
        converged(&c, "nm", 3) && converged(&c, "it", 2),
        "nothing doubled"
    );
    // The event log: which fencing token wrote each round.
    let events = events_by_fence(&c.data_dir());
    let fences: Vec<u64> = events.keys().copied().collect();
    assert_eq!(fences.len(), 2, "two leaders wrote rounds: {events:?}");
    let (first, second) = (&events[&fences[0]], &events[&fences[1]]);
    assert!(
        first.last().unwrap() < second.first().unwrap(),
        "the first leader wrote nothing after the second began: {events:?}"
    );
    println!(
        "leader pause: takeover {}ms after SIGSTOP (lease 500ms); old leader ({old}) noticed {}ms \
         after SIGCONT; rounds by fence {:?}, the old one's last at {} < the new one's first at {}; \
         {other} leads",
        takeover.as_millis(),
        woke.elapsed().as_millis(),
        events.iter().map(|(f, r)| (*f, r.len())).collect::<Vec<_>>(),
        first.last().unwrap(),
        second.first().unwrap()
    );
}

/// The event log's round times, by the fencing token of the leader that wrote them.
fn events_by_fence(data_dir: &Path) -> BTreeMap<u64, Vec<u64>> {
    let conn = store_events(data_dir);
    let mut out: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (key, value) in conn {
        if !key.contains("/round/") {
            continue;
        }
        let v: Value = serde_json::from_str(&value).unwrap();
        let fence = v["fence"].as_u64().unwrap_or(0);
        out.entry(fence)
            .or_default()
            .push(v["at_ms"].as_u64().unwrap());
    }
    for times in out.values_mut() {
        times.sort_unstable();
    }
    out
}

/// Every event-log entry, read through the library's store (read-only use).
fn store_events(data_dir: &Path) -> Vec<(String, String)> {
    use setpoint_runtime::Store;
    let store = setpoint_runtime::SqliteStore::open(data_dir).unwrap();
    store
        .read(&["/events/"])
        .unwrap()
        .entries
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect()
}
