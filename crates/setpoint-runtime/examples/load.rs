//! Load: N copies of `sleep` across A in-process agents on one store (SQLite, or etcd with the
//! watch cache), kept by the `intent` controller's passes. It prints pass latency, store writes
//! per pass, the keys each pass takes from the store, the read load of the controller and of the
//! agents, creations per second from `apply` to all copies on the ledger, the store's write
//! rate, and report-to-ledger latency (from the event log).
//!
//! ```text
//! cargo run --release -p setpoint-runtime --example load -- copies=1000 agents=10 period_ms=1000 seconds=20
//! ```
//!
//! Settings (`key=value`, all optional): `copies` (1000), `agents` (10), `period_ms` U (1000),
//! `seconds` of steady state measured after every copy is on the ledger (20), `sync_ms` (the
//! agents' assignment read period, 100), `report_ms` (R, 1000), `dir` (a temporary directory),
//! `store` (a store URL, such as `etcd://127.0.0.1:2379`; default `sqlite:DIR`), `simulate`
//! (1: the agents simulate their copies instead of starting processes, `--simulate-copies`),
//! `tick_ms` (the agents' tick, 25 by default), `blocking_threads` (tokio's blocking pool, 512
//! by default).
//!
//! The passes run here, not in `run_controller`, so that each can be timed: the same
//! `run_pass`, without the leader lease and garbage collection around it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use setpoint_core::{Controller, ControllerKind};
use setpoint_runtime::cache::cached;
use setpoint_runtime::controller::reconcile::PassSettings;
use setpoint_runtime::measure::{measure, WindowSpec};
use setpoint_runtime::model::WorkloadSpec;
use setpoint_runtime::model::{ASSIGNMENTS, COUNTERS, LEADER, REPORTS, WORKLOADS};
use setpoint_runtime::store::{LeaseId, Read, Revision, Txn, Watcher};
use setpoint_runtime::{
    ops, run_agent, run_pass, shutdown_pair, AgentConfig, OpenMode, Store, StoreError, StoreUrl,
};

/// Counts what passes through a store.
#[derive(Default)]
struct Counts {
    reads: AtomicU64,
    keys_read: AtomicU64,
    commits: AtomicU64,
    keys_written: AtomicU64,
}

struct Counting {
    inner: Arc<dyn Store>,
    counts: Arc<Counts>,
}

impl Store for Counting {
    fn read(&self, prefixes: &[&str]) -> Result<Read, StoreError> {
        let r = self.inner.read(prefixes)?;
        self.counts.reads.fetch_add(1, Relaxed);
        self.counts
            .keys_read
            .fetch_add(r.entries.len() as u64, Relaxed);
        Ok(r)
    }
    fn commit(&self, txn: &Txn) -> Result<Revision, StoreError> {
        let r = self.inner.commit(txn)?;
        self.counts.commits.fetch_add(1, Relaxed);
        self.counts
            .keys_written
            .fetch_add(txn.ops.len() as u64, Relaxed);
        Ok(r)
    }
    fn revision(&self) -> Result<Revision, StoreError> {
        self.inner.revision()
    }
    fn grant(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        self.inner.grant(ttl)
    }
    fn keep_alive(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.inner.keep_alive(lease)
    }
    fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.inner.revoke(lease)
    }
    fn now_ms(&self) -> u64 {
        self.inner.now_ms()
    }
    fn watches(&self) -> bool {
        self.inner.watches()
    }
    fn watch(&self, p: &[&str], after: Revision) -> Option<Result<Box<dyn Watcher>, StoreError>> {
        self.inner.watch(p, after)
    }
}

fn setting(args: &BTreeMap<String, String>, key: &str, default: u64) -> u64 {
    args.get(key).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{key}={v}: not a number"))
    })
}

fn pct(sorted: &[f64], p: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[(p * sorted.len()).div_ceil(100).max(1) - 1]
}

/// This process's CPU time so far (user + system), in seconds, from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let text = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = &text[text.rfind(')').map_or(0, |i| i + 1)..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the command name; the
    // kernel counts them in clock ticks of 1/100 s.
    (f.get(11).unwrap_or(&0) + f.get(12).unwrap_or(&0)) as f64 / 100.0
}

fn snapshot(c: &Counts) -> [u64; 4] {
    [
        c.reads.load(Relaxed),
        c.keys_read.load(Relaxed),
        c.commits.load(Relaxed),
        c.keys_written.load(Relaxed),
    ]
}

fn main() {
    let args: BTreeMap<String, String> = std::env::args()
        .skip(1)
        .filter_map(|a| a.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect();
    // Every store call of an agent holds a blocking thread while it waits: a thousand agents
    // fill tokio's default 512 and their renewals queue behind the other calls.
    let blocking = setting(&args, "blocking_threads", 512) as usize;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(blocking)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(run(args));
}

async fn run(args: BTreeMap<String, String>) {
    let copies = setting(&args, "copies", 1000);
    let agents = setting(&args, "agents", 10);
    let period_ms = setting(&args, "period_ms", 1000);
    let seconds = setting(&args, "seconds", 20);
    let sync_ms = setting(&args, "sync_ms", 100);
    let report_ms = setting(&args, "report_ms", 1000);
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let dir = args
        .get("dir")
        .map_or_else(|| tmp.path().to_owned(), std::path::PathBuf::from);
    let url: StoreUrl = args.get("store").map_or_else(
        || StoreUrl::sqlite(&dir),
        |u| u.parse().unwrap_or_else(|e| panic!("{e}")),
    );
    let simulate = setting(&args, "simulate", 0) == 1;
    let raw = url.open(OpenMode::Create).expect("the store");
    let agent_counts = Arc::new(Counts::default());
    let pass_counts = Arc::new(Counts::default());
    let agent_store: Arc<dyn Store> = Arc::new(Counting {
        inner: Arc::clone(&raw),
        counts: Arc::clone(&agent_counts),
    });
    // The controller's side: the store, counted, under the watch cache (on a store that pushes
    // changes, as the controller does), counted again as the passes see it.
    let store_counts = Arc::new(Counts::default());
    let counted: Arc<dyn Store> = Arc::new(Counting {
        inner: Arc::clone(&raw),
        counts: Arc::clone(&store_counts),
    });
    let (under_cache, cache) = cached(
        &counted,
        &[WORKLOADS, COUNTERS, ASSIGNMENTS, REPORTS, LEADER],
    );
    let pass_store: Arc<dyn Store> = Arc::new(Counting {
        inner: under_cache,
        counts: Arc::clone(&pass_counts),
    });

    let (stop, shutdown) = shutdown_pair();
    let mut tasks = Vec::new();
    let mut groups: Vec<Arc<dyn Store>> = Vec::new();
    for i in 1..=agents {
        let mut cfg = AgentConfig::new(format!("node-{i:02}"), dir.join("nodes"));
        cfg.sync_every = Duration::from_millis(sync_ms);
        cfg.report_every = Duration::from_millis(report_ms);
        cfg.simulate_copies = simulate;
        if let Some(t) = args.get("tick_ms") {
            cfg.tick = Duration::from_millis(t.parse().expect("tick_ms"));
        }
        // Agents share a connection in groups, as `setpoint agent --simulate-nodes` does: on
        // one HTTP/2 connection, a thousand agents' small answers trip h2's budget for small
        // DATA frames (the connection is closed with ENHANCE_YOUR_CALM).
        let group = (i as usize - 1) / setpoint_runtime::agent::AGENTS_PER_CONNECTION;
        if matches!(url, StoreUrl::Etcd(_)) && groups.len() <= group {
            // A ramp, as `--simulate-nodes` starts its agents: a thousand claims within one
            // second would miss etcd's deadlines on two cores.
            if group > 0 {
                tokio::time::sleep(setpoint_runtime::agent::SIMULATED_RAMP).await;
            }
            groups.push(Arc::new(Counting {
                inner: url.open(OpenMode::Create).expect("the store"),
                counts: Arc::clone(&agent_counts),
            }) as Arc<dyn Store>);
        }
        let own = groups
            .get(group)
            .map_or_else(|| Arc::clone(&agent_store), Arc::clone);
        tasks.push(tokio::spawn(run_agent(own, cfg, shutdown.clone())));
    }
    let spec = WorkloadSpec {
        name: "load".into(),
        command: vec!["sleep".into(), "100000".into()],
        copies,
        controller: ControllerKind::Intent,
        period_ms,
        startup_ms: 500,
        readiness: None,
        grace_ms: 2000,
        env: Default::default(),
        backoff: Default::default(),
        rollout: Default::default(),
        restart: Default::default(),
        generation: 0,
        stop_when_cut_off_ms: None,
    };
    // Every agent reports before the declaration, so placement spreads the copies.
    while ops::status(&*pass_store).expect("status").nodes.len() < agents as usize {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ops::apply(&*pass_store, &[spec]).expect("apply");
    let settings = PassSettings {
        fence: None,
        max_attempts: 5,
    };
    let mut controller = Controller::new(ControllerKind::Intent);
    let mut every = tokio::time::interval(Duration::from_millis(period_ms));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let started = Instant::now();
    let mut converged: Option<Duration> = None;
    let mut steady_from = None;
    let mut latencies = Vec::new();
    let mut writes = Vec::new();
    let mut keys = Vec::new();
    let mut reads_per_pass = Vec::new();
    let mut from_store = Vec::new();
    let changes = || cache.as_ref().map_or(0, |c| c.stats().changes);
    let mut last_changes = 0;
    let mut base = (snapshot(&agent_counts), Instant::now(), 0u64);
    let mut rev_base = 0;
    let mut pass_counts_base = [0u64; 4];
    let mut cpu_base = 0.0;
    loop {
        every.tick().await;
        let before = snapshot(&pass_counts);
        let store_before = store_counts.keys_read.load(Relaxed);
        let s = Arc::clone(&pass_store);
        let t = Instant::now();
        let (c, r) = tokio::task::spawn_blocking(move || {
            let r = run_pass(&*s, "load", &mut controller, &settings);
            (controller, r)
        })
        .await
        .expect("the pass");
        let took = t.elapsed();
        controller = c;
        r.expect("a pass");
        let after = snapshot(&pass_counts);
        if converged.is_none() {
            let st = ops::get(&*pass_store, Some("load")).expect("get");
            if st[0].on_ledger == copies {
                converged = Some(started.elapsed());
                steady_from = Some(pass_store.now_ms());
                base = (snapshot(&agent_counts), Instant::now(), after[1]);
                pass_counts_base = snapshot(&pass_counts);
                rev_base = raw.revision().expect("revision");
                last_changes = changes();
                cpu_base = cpu_seconds();
                eprintln!(
                    "all {copies} copies on the ledger after {:.1}s",
                    started.elapsed().as_secs_f64()
                );
            }
            continue;
        }
        latencies.push(took.as_secs_f64() * 1000.0);
        writes.push((after[2] - before[2]) as f64);
        keys.push((after[3] - before[3]) as f64);
        reads_per_pass.push((after[1] - before[1]) as f64);
        // What the pass took from the store itself: keys read past the cache (all of them on
        // a store without one), and the changes the watch delivered since the last pass.
        let now_changes = changes();
        from_store.push(
            (store_counts.keys_read.load(Relaxed) - store_before + now_changes - last_changes)
                as f64,
        );
        last_changes = now_changes;
        if base.1.elapsed() >= Duration::from_secs(seconds) {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            panic!("did not converge");
        }
    }
    let elapsed = base.1.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_base;
    let revisions = raw.revision().expect("revision") - rev_base;
    let pass_now = snapshot(&pass_counts);
    let agent_now = snapshot(&agent_counts);
    let pass_keys_read = pass_counts.keys_read.load(Relaxed) - base.2;
    let m = measure(
        &*pass_store,
        "load",
        &WindowSpec {
            since_ms: None,
            last: None,
            time_scale: 1.0,
            period_ms: Some(period_ms),
            now_ms: pass_store.now_ms(),
        },
    )
    .expect("measure");
    latencies.sort_by(f64::total_cmp);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    println!(
        "store {url}, copies {copies}{}, agents {agents}, U {period_ms} ms, agent sync {sync_ms} ms, R {report_ms} ms, steady {elapsed:.1} s",
        if simulate { " (simulated)" } else { "" }
    );
    let conv = converged.map_or(f64::NAN, |d| d.as_secs_f64());
    println!(
        "apply to all {copies} on the ledger: {conv:.1} s ({:.0} creations/s); steady passes {}",
        copies as f64 / conv,
        latencies.len()
    );
    println!(
        "keys per pass: {:.0} read by the pass (cache or store), {:.1} taken from the store (reads past the cache + watch changes)",
        mean(&reads_per_pass),
        mean(&from_store)
    );
    println!(
        "store write rate, steady: {:.1} transactions/s ({:.1} revisions/s), {:.0} keys/s",
        (agent_now[2] - base.0[2] + pass_now[2] - pass_counts_base[2]) as f64 / elapsed,
        revisions as f64 / elapsed,
        (agent_now[3] - base.0[3] + pass_now[3] - pass_counts_base[3]) as f64 / elapsed,
    );
    println!(
        "pass latency ms: p50 {:.2}, p99 {:.2}, max {:.2}",
        pct(&latencies, 50),
        pct(&latencies, 99),
        latencies.last().copied().unwrap_or(0.0)
    );
    println!(
        "store writes per pass: {:.2} transactions, {:.2} keys; keys read per pass {:.0}",
        mean(&writes),
        mean(&keys),
        mean(&reads_per_pass)
    );
    println!(
        "read load, keys/s: controller {:.0}, agents {:.0} ({:.0} reads/s); agents' writes {:.0} txn/s",
        pass_keys_read as f64 / elapsed,
        (agent_now[1] - base.0[1]) as f64 / elapsed,
        (agent_now[0] - base.0[0]) as f64 / elapsed,
        (agent_now[2] - base.0[2]) as f64 / elapsed,
    );
    println!(
        "steady-state CPU of the whole process (controller passes and {agents} agents): {:.1} % of one core",
        100.0 * cpu / elapsed
    );
    let j = m.jitter;
    println!(
        "report-to-ledger (ready -> on the ledger) ms: p50 {}, p99 {}, max {} (n={}); create -> start ms: p50 {}, p99 {}, max {}",
        j.ready_to_ledger.p50,
        j.ready_to_ledger.p99,
        j.ready_to_ledger.max,
        j.ready_to_ledger.count,
        j.create_to_start.p50,
        j.create_to_start.p99,
        j.create_to_start.max
    );
    let _ = steady_from;
    stop.fire();
    for t in tasks {
        let _ = t.await;
    }
}
