//! A hostile store (issue 25, part 6): values written straight into the store, as any client with
//! write access can, beside a healthy workload run by the real binary (a controller and an
//! agent as separate processes) on etcd with stock limits and on SQLite. Each bad key harms
//! only itself: the healthy workload goes on being reconciled (a killed copy is replaced), `get`
//! and `status` exit 0 and name every bad key as a problem, the controller stays small, the
//! store's revision rate stays what it was (no hot loop), a bad key is logged once, not once a
//! period, and a placement no assignment owns is removed before long and never counted.

use std::time::{Duration, Instant};

use rustix::process::Signal;
use serde_json::Value;
use setpoint_runtime::process::signal_group;
use setpoint_runtime::store::Txn;
use setpoint_runtime::testing::EtcdCluster;
use setpoint_runtime::{SqliteStore, Store};

use super::harness::Rig;

/// The keys written by hand that must show as problems while they stay, with what each is.
const BAD_KEYS: [(&str, &str); 9] = [
    ("/workloads/many", "copies = 10,000,000"),
    ("/workloads/hot", "period_ms = 1"),
    ("/counters/wrap", "u64::MAX counter"),
    ("/workloads/evil", "bad JSON"),
    ("/counters/evil", "bad JSON"),
    ("/reports/n9", "bad JSON"),
    ("/nodes/phantom", "a node record under no lease"),
    ("/nodes/n2", "bad JSON"),
    ("/loops/wrap", "bad JSON"),
];

/// The placement written by hand for a copy no assignment has.
const GHOST: &str = "/placements/n1/ghost/000000000000";

/// The controller's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// How many revisions the store made per second over `span`.
fn revision_rate(store: &dyn Store, span: Duration) -> f64 {
    let first = store.revision().unwrap();
    let t = Instant::now();
    std::thread::sleep(span);
    let last = store.revision().unwrap();
    (last - first) as f64 / t.elapsed().as_secs_f64()
}

/// The pids of workload `good`'s copies that run now.
fn good_pids(r: &Rig) -> Vec<u32> {
    r.marked()
        .into_iter()
        .filter(|m| m.copy.starts_with("good-"))
        .map(|m| m.pid)
        .collect()
}

/// The value at `key`, as JSON.
fn value(store: &dyn Store, key: &str) -> Value {
    serde_json::from_str(&store.get(key).unwrap().unwrap().value).unwrap()
}

/// The keys of `problems` in a `get` or `status` JSON.
fn problem_keys(v: &Value) -> Vec<String> {
    v["problems"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// The whole case on one store: `r` runs on it, `store` writes into it directly.
fn hostile_records_harm_only_themselves(r: &mut Rig, store: &dyn Store) {
    let file = r.write(
        "good.toml",
        "[[workload]]\nname = \"good\"\ncommand = [\"sleep\", \"120\"]\ncopies = 2\n\
         controller = \"intent\"\nperiod = \"200ms\"\nstartup = \"100ms\"\ngrace = \"500ms\"\n",
    );
    r.start("n1", &["agent", "--node", "n1", "--report-every", "100ms"]);
    let controller = r.start("controller", &["controller", "--lease-ttl", "1s"]);
    r.until("the store exists", |r| r.try_status().is_some());
    r.ok(&["apply", "-f", &file]);
    r.until("2 copies of good live", |r| {
        good_pids(r).len() == 2 && r.try_get("good").is_some_and(|g| g["live"] == 2)
    });
    let calm = revision_rate(store, Duration::from_secs(3));

    // The hostile writes, all at once.
    let spec = value(store, "/workloads/good");
    let with = |name: &str, field: &str, v: Value| {
        let mut s = spec.clone();
        s["name"] = name.into();
        s[field] = v;
        s.to_string()
    };
    let placed = store.read(&["/placements/n1/good/"]).unwrap();
    let mut ghost: Value = serde_json::from_str(&placed.entries[0].value).unwrap();
    ghost["workload"] = "ghost".into();
    ghost["copy"] = "ghost-0".into();
    ghost["n"] = 0.into();
    let phantom = serde_json::json!({
        "node": "phantom", "host": "h", "place": "p", "agent_pid": 1, "acquired_ms": 0,
        "ttl_ms": 1, "report_every_ms": 1, "lease": 7
    });
    let forged = serde_json::json!({ "holder": "forged", "acquired_ms": 0, "ttl_ms": 1 });
    let txn = Txn::new()
        .put("/workloads/many", with("many", "copies", 10_000_000.into()))
        .put("/workloads/hot", with("hot", "period_ms", 1.into()))
        .put("/workloads/wrap", with("wrap", "copies", 1.into()))
        .put("/counters/wrap", r#"{"next":18446744073709551615}"#)
        .put("/workloads/evil", "{not json")
        .put("/counters/evil", r#"{"next":"#)
        .put("/reports/n9", "[]")
        .put("/nodes/phantom", phantom.to_string())
        .put("/nodes/n2", "{not json")
        .put("/loops/wrap", "{not json")
        .put(GHOST, ghost.to_string())
        .put("/leader", forged.to_string());
    store.commit(&txn).unwrap();
    let written = Instant::now();

    // The healthy workload is reconciled: a killed copy is replaced, on the live node only.
    let victim = good_pids(r)[0];
    signal_group(victim, Signal::KILL).unwrap();
    r.until("the killed copy of good is replaced", |r| {
        let pids = good_pids(r);
        pids.len() == 2 && !pids.contains(&victim)
    });
    // The placement nothing owns is removed, and its copy does not run.
    r.until(
        "the ghost placement is collected and ghost-0 stopped",
        |r| store.get(GHOST).unwrap().is_none() && r.marked().iter().all(|m| m.copy != "ghost-0"),
    );
    // A forged lease-less leader is replaced by the controller's claim.
    r.until("the controller leads again", |r| {
        r.try_status().is_some_and(|s| {
            s["leader"]["holder"]
                .as_str()
                .is_some_and(|h| h != "forged")
        })
    });

    // `get` and `status` exit 0 and name every bad key.
    let get = r.json(&["get", "--format", "json"]);
    let status = r.json(&["status", "--format", "json"]);
    let table = r.ok(&["get"]);
    for (key, what) in BAD_KEYS {
        assert!(
            problem_keys(&get).iter().any(|k| k == key),
            "get names {key} ({what}): {get}"
        );
        assert!(
            problem_keys(&status).iter().any(|k| k == key),
            "status names {key} ({what}): {status}"
        );
        assert!(table.contains(&format!("problem {key}: ")), "{table}");
    }
    let names: Vec<&str> = get["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["name"].as_str())
        .collect();
    assert_eq!(names, ["good"], "{get}");
    r.until("the healthy workload has its 2 copies live", |r| {
        r.try_get("good").is_some_and(|g| g["live"] == 2)
    });
    let phantom_live = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["node"] == "phantom" && n["live"] == true);
    assert!(
        !phantom_live,
        "a lease-less node record is no node: {status}"
    );

    // No hot loop, a small controller, and each bad key logged once, not once a period.
    let hostile = revision_rate(store, Duration::from_secs(4));
    let rss = rss_kib(controller);
    assert!(rss < 200 * 1024, "the controller is resident at {rss} KiB");
    assert!(
        hostile <= calm * 2.0 + 10.0,
        "{hostile:.1} revisions/s with the hostile keys, {calm:.1} before"
    );
    let periods = written.elapsed().as_millis() / 200;
    assert!(periods >= 25, "the check spans many periods ({periods})");
    let log = r.log("controller");
    for (key, _) in BAD_KEYS {
        let lines = log.lines().filter(|l| l.contains(key)).count();
        assert!(
            (1..=2).contains(&lines),
            "{key} is logged {lines} times over {periods} periods:\n{log}"
        );
    }
    eprintln!(
        "revisions/s: {calm:.1} calm, {hostile:.1} hostile; controller RSS {rss} KiB; \
         {periods} periods"
    );
}

#[test]
fn hostile_records_on_etcd_harm_only_themselves() {
    let Some(etcd) = EtcdCluster::start_or_skip("cli::hostile::etcd", 1) else {
        return;
    };
    let mut r = Rig::on_store(&etcd.url());
    let store = etcd.store();
    hostile_records_harm_only_themselves(&mut r, &store);
}

#[test]
fn hostile_records_on_sqlite_harm_only_themselves() {
    let mut r = Rig::new();
    std::fs::create_dir_all(r.data_dir()).unwrap();
    r.start("init", &["controller", "--lease-ttl", "1s"]);
    r.until("the store file exists", |r| r.store_file().is_file());
    r.signal("init", Signal::TERM);
    let store = SqliteStore::open(&r.data_dir()).unwrap();
    hostile_records_harm_only_themselves(&mut r, &store);
}
