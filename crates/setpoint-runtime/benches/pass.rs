//! What a controller pass costs in CPU at scale, without a store's latency (issue 21, parts 3
//! and 7; docs/performance-runtime.md, "A pass's own cost at 100,000 copies"): one `intent`
//! workload of C copies, all running, on N live nodes, in a memory store. Measured:
//!
//! - `snapshot_after_one_report`: the snapshot of a pass's read when one node's report changed
//!   since the last pass, reusing the last snapshot's unchanged values
//!   ([`Snapshot::from_read_reusing`], what the leader's watch cache serves a pass);
//! - `snapshot_patched_by_one_report`: the same snapshot, brought up to date by the one key that
//!   changed ([`Snapshot::patched`], what the leader's watch cache serves a pass now);
//! - `plan_steady`: planning the pass on that snapshot (the workload's view, the controller's
//!   decision, no writes), as `run_pass` does before its commit.
//!
//! ```text
//! cargo bench -p setpoint-runtime --bench pass
//! ```
//! `SETPOINT_BENCH_SCALES` (default `1000:100000,100:10000`) picks the `nodes:copies` pairs.

// criterion_group! defines an undocumented public function.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use setpoint_core::{Controller, ControllerKind};
use setpoint_runtime::controller::reconcile::plan_pass;
use setpoint_runtime::model::node::fake_node;
use setpoint_runtime::model::records::{Assignment, CopyReport, NodeReport, Phase, Stored};
use setpoint_runtime::model::{encode, report_key, Snapshot, WorkloadSpec, ASSIGNMENTS};
use setpoint_runtime::store::{Entry, MemoryStore, Op, Read, Store, Txn};
use setpoint_runtime::{run_pass, PassSettings};

/// The allocator of the `setpoint` binary, so these figures are the binary's (a pass's large
/// vectors come back from mimalloc's pages instead of new pages of the system's).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SETTINGS: PassSettings = PassSettings {
    fence: None,
    max_attempts: 3,
};

fn spec(copies: u64) -> WorkloadSpec {
    setpoint_runtime::parse_workloads(&format!(
        "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"60\"]\ncopies = {copies}\n\
         controller = \"intent\"\nperiod = \"1s\"\nstartup = \"0s\"\ngrace = \"1s\"\n"
    ))
    .expect("the bench's workload parses")
    .remove(0)
}

/// `node`'s report: `placed`, the assignments on it, running and ready.
fn report(
    store: &dyn Store,
    snapshot: &Snapshot,
    node: &str,
    placed: &[&Stored<Assignment>],
) -> Txn {
    let uid = snapshot.workloads["w"].create_revision;
    let copies = placed
        .iter()
        .map(|a| CopyReport {
            copy: a.value.copy.clone(),
            workload: "w".into(),
            owner_uid: uid,
            n: a.value.n,
            incarnation: a.create_revision,
            phase: Phase::Running,
            pid: 0,
            start_ticks: 0,
            started_ms: 0,
            ready_ms: Some(0),
            exited_ms: None,
            exit: None,
            stopping: false,
            killed: false,
        })
        .collect();
    let r = NodeReport {
        node: node.into(),
        observed_ms: store.now_ms(),
        reported_ms: store.now_ms(),
        agent_pid: 1,
        synced_revision: snapshot.revision,
        copies,
    };
    Txn::new().put(report_key(node), encode(&r))
}

/// Each node's report of `snapshot`'s assignments.
fn reports(store: &dyn Store, snapshot: &Snapshot) -> Vec<Txn> {
    let mut by_node: BTreeMap<&str, Vec<&Stored<Assignment>>> = BTreeMap::new();
    for a in snapshot.assignments.values() {
        by_node.entry(a.value.node.as_str()).or_default().push(a);
    }
    by_node
        .iter()
        .map(|(node, placed)| report(store, snapshot, node, placed))
        .collect()
}

/// A store holding `copies` copies of `w` running on `nodes` nodes, and its read.
fn cluster(nodes: usize, copies: u64) -> (MemoryStore, Read) {
    let store = MemoryStore::new();
    let names: Vec<String> = (1..=nodes).map(|i| format!("sim-{i:04}")).collect();
    for n in &names {
        fake_node(&store, n).expect("a memory store takes a node");
    }
    setpoint_runtime::ops::apply(&store, &[spec(copies)]).expect("the workload is declared");
    let mut controller = Controller::new(ControllerKind::Intent);
    for _ in 0..10_000 {
        run_pass(&store, "w", &mut controller, &SETTINGS).expect("a pass runs");
        let s = Snapshot::load(&store).unwrap();
        if s.assignments_of("w").count() as u64 >= copies {
            break;
        }
    }
    let s = Snapshot::load(&store).unwrap();
    assert_eq!(s.assignments_of("w").count() as u64, copies, "all created");
    for txn in reports(&store, &s) {
        store.commit(&txn).unwrap();
    }
    let read = store.read(&Snapshot::PREFIXES).unwrap();
    (store, read)
}

/// The `nodes:copies` pairs of `SETPOINT_BENCH_SCALES`; one that does not parse is refused in
/// one line, exit 2.
fn scales() -> Vec<(usize, u64)> {
    let text =
        std::env::var("SETPOINT_BENCH_SCALES").unwrap_or_else(|_| "1000:100000,100:10000".into());
    text.split(',')
        .map(|p| {
            let pair = p.split_once(':').and_then(|(n, c)| {
                let n: usize = n.trim().parse().ok()?;
                let c: u64 = c.trim().parse().ok()?;
                (n > 0 && c > 0).then_some((n, c))
            });
            pair.unwrap_or_else(|| {
                eprintln!(
                    "pass bench: SETPOINT_BENCH_SCALES: '{p}' is not NODES:COPIES with two \
                     positive whole numbers (accepted: for example 1000:100000,100:10000)"
                );
                std::process::exit(2)
            })
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("pass");
    g.sample_size(20);
    for (nodes, copies) in scales() {
        let (store, read) = cluster(nodes, copies);
        let now = store.now_ms();
        let before = Snapshot::from_read(&read, now).unwrap();
        // One node's report written again (a copy became ready, say): a new value at a new
        // revision, everything else unchanged.
        store.commit(&reports(&store, &before)[0]).unwrap();
        let after = store.read(&Snapshot::PREFIXES).unwrap();
        assert_eq!(
            after
                .entries
                .iter()
                .filter(|e| e.key.starts_with(ASSIGNMENTS))
                .count() as u64,
            copies
        );
        let id = format!("{nodes}_nodes_{copies}_copies");
        g.bench_function(BenchmarkId::new("snapshot_after_one_report", &id), |b| {
            b.iter_batched(
                || before.clone(),
                |earlier| Snapshot::from_read_reusing(black_box(&after), now, Some(earlier)),
                criterion::BatchSize::LargeInput,
            )
        });
        // The same, brought up to date by the one key that changed (what the leader's watch
        // cache does since it keeps the keys its watch changed).
        let changed = match &reports(&store, &before)[0].ops[0] {
            Op::Put { key, .. } | Op::Delete { key } => key.clone(),
        };
        let by_key: BTreeMap<&str, &Entry> =
            after.entries.iter().map(|e| (e.key.as_str(), e)).collect();
        g.bench_function(
            BenchmarkId::new("snapshot_patched_by_one_report", &id),
            |b| {
                b.iter_batched(
                    || before.clone(),
                    |earlier| {
                        Snapshot::patched(
                            earlier,
                            after.revision,
                            now,
                            [black_box(changed.as_str())],
                            |k| by_key.get(k).copied(),
                        )
                    },
                    criterion::BatchSize::LargeInput,
                )
            },
        );
        let snapshot = Snapshot::from_read(&after, now).unwrap();
        let mut controller = Controller::new(ControllerKind::Intent);
        let plan = plan_pass(&snapshot, "w", &mut controller, &SETTINGS).unwrap();
        assert!(plan.txn.ops.is_empty(), "steady: nothing to write");
        g.bench_function(BenchmarkId::new("plan_steady", &id), |b| {
            b.iter(|| plan_pass(black_box(&snapshot), "w", &mut controller, &SETTINGS))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
