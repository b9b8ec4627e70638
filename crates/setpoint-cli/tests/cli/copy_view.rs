//! Issue 23.1, copies you can see, with the real binary on a running cluster: `get copies`
//! (node, pid, state, age, restarts, last exit), `events`, `describe`, and `--watch` on `get`
//! and `status`.

use serde_json::Value;

use super::harness::{sleeping, Rig};
use super::runtime::up;

/// The rows of `get copies [WORKLOAD] --format json`.
fn copies(c: &Rig, workload: &str) -> Vec<Value> {
    let v = c.json(&["get", "copies", workload, "--format", "json"]);
    assert_eq!(v["schema"], 2, "{v}");
    v["copies"].as_array().cloned().unwrap_or_default()
}

/// A `named` workload whose one copy fails to start (it exits within its startup time) and is
/// tried again after a short backoff.
const CRASHING: &str = "[[workload]]\nname = \"bad\"\ncommand = [\"sh\", \"-c\", \"exit 3\"]\n\
    copies = 1\ncontroller = \"named\"\nperiod = \"100ms\"\nstartup = \"5s\"\n\
    backoff = { initial = \"300ms\", max = \"2s\" }\n";

#[test]
fn get_copies_shows_each_copys_node_pid_state_restarts_and_last_exit_as_the_store_holds_them() {
    let mut c = Rig::new();
    up(&mut c, 2);
    c.until("two nodes report", |c| {
        c.status()["nodes"].as_array().is_some_and(|n| n.len() == 2)
    });
    c.apply(&sleeping("web", 2, "intent", 120, "100ms", "0s", "500ms"));
    c.until("two running copies of web", |c| {
        let rows = copies(c, "web");
        rows.len() == 2 && rows.iter().all(|r| r["state"] == "running")
    });
    // Each row's pid is the process the agent started for that copy, on the row's node.
    let procs = c.processes();
    for r in copies(&c, "web") {
        let copy = r["copy"].as_str().unwrap();
        let pid = r["pid"].as_u64().unwrap() as u32;
        assert_eq!(procs.get(copy), Some(&vec![pid]), "{r}");
        assert!(r["node"].as_str().unwrap().starts_with("node-"), "{r}");
        assert_eq!(
            (r["restarts"].as_u64(), r["assigned"].as_bool()),
            (Some(0), Some(true))
        );
        assert!(r["last_exit"].is_null(), "{r}");
    }

    // A killed copy is replaced by a new number; its death is in the event log.
    let killed = c.kill_copies("web", 1);
    assert_eq!(killed.len(), 1);
    c.until("the kill is in the event log", |c| {
        let v = c.json(&["events", "web", "--since", "1m", "--format", "json"]);
        v["events"].as_array().unwrap().iter().any(|e| {
            e["copy"] == killed[0].as_str() && e["event"] == "exit" && e["detail"] == "signal 9"
        })
    });
    c.until(
        "two running copies again, none of them the killed one",
        |c| {
            let rows = copies(c, "web");
            rows.iter().filter(|r| r["state"] == "running").count() == 2
                && rows
                    .iter()
                    .all(|r| r["copy"] != killed[0].as_str() || r["state"] != "running")
        },
    );

    // A `named` copy that keeps failing to start: the same name comes back, so its restarts
    // count, and between tries it is crash-looping with its exit.
    c.apply(CRASHING);
    c.until("bad-0 crash-looping after a restart", |c| {
        copies(c, "bad").iter().any(|r| {
            r["copy"] == "bad-0"
                && r["state"] == "crash-looping"
                && r["last_exit"] == "exit status 3"
                && r["restarts"].as_u64().is_some_and(|n| n >= 1)
        })
    });

    // The table: one line per copy under a fixed header; CSV with the schema first.
    let table = c.ok(&["get", "copies"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["COPY", "NODE", "PID", "STATE", "AGE", "RESTARTS", "LAST", "EXIT"]
    );
    // bad-0 is listed only while an incarnation is assigned or reported (between a collected
    // copy and the next try it has no row), so only web's two running copies are sure.
    let running = table
        .lines()
        .filter(|l| l.starts_with("web-") && l.split_whitespace().nth(3) == Some("running"))
        .count();
    assert_eq!(running, 2, "{table}");
    let csv = c.ok(&["get", "copies", "web", "--format", "csv"]);
    assert!(
        csv.starts_with("schema,workload,copy,n,node,pid,state,age_ms,restarts,last_exit,"),
        "{csv}"
    );

    // describe: the declaration, the backoff, the copies and the events of one workload.
    let d = c.ok(&["describe", "bad"]);
    for needle in [
        "Name:        bad",
        "Controller:  named",
        "Command:     sh -c exit 3",
    ] {
        assert!(d.contains(needle), "{needle} in\n{d}");
    }
    assert!(d.contains("Backoff:     bad-0: "), "{d}");
    assert!(d.contains("exit status 3"), "{d}");
    let v = c.json(&["describe", "bad", "--format", "json"]);
    assert_eq!(v["spec"]["name"], "bad");
    assert!(
        v["workload"]["backoff"][0]["restarts"].as_u64().unwrap() >= 1,
        "{v}"
    );
    assert!(!v["events"].as_array().unwrap().is_empty(), "{v}");

    // A name that is neither declared nor logged is the user's to fix.
    for args in [
        &["describe", "nosuch"][..],
        &["events", "nosuch"],
        &["get", "copies", "nosuch"],
    ] {
        let out = c.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn watch_prints_again_only_when_the_data_changes_and_stops_at_its_bound() {
    let mut c = Rig::new();
    up(&mut c, 1);
    c.until("one node reports", |c| {
        c.status()["nodes"].as_array().is_some_and(|n| n.len() == 1)
    });
    c.apply(&sleeping("w", 1, "intent", 120, "100ms", "0s", "500ms"));
    c.until("w runs", |c| {
        copies(c, "w").iter().any(|r| r["state"] == "running")
    });
    // Nothing changes but the clocks: one print in a second of 20 reads.
    let mut watch = c
        .command(&[
            "get",
            "copies",
            "--watch",
            "--watch-every",
            "50ms",
            "--watch-max",
            "2",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(
        watch.try_wait().unwrap(),
        None,
        "a second output with no change"
    );
    // A change: the copy dies and is replaced; the watch prints again and stops at its bound.
    c.kill_copies("w", 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while watch.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    if watch.try_wait().unwrap().is_none() {
        let _ = watch.kill();
    }
    let out = watch.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("COPY ").count(), 2, "{text}");

    // --watch on status, bounded the same way; without --watch its settings are refused.
    let out = c.ok(&["status", "--watch", "--watch-max", "1", "--format", "json"]);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert_eq!(
        c.run(&["get", "--watch-every", "1s"]).status.code(),
        Some(2)
    );
}
