//! Runs per second of the chaos world on one core, one seed per iteration, with the runtime's own
//! machines: the shipped fault model `scenarios/chaos/partitions.toml` (3 agents, 2 controllers,
//! 6 copies, 10 simulated minutes, with faults) and the checker's own model `checker.toml` (one
//! simulated minute). Beside them, the floor under a run: the runtime's own work that a
//! ten-minute run repeats every simulated second whatever the world costs, one leader pass (the
//! snapshot of a converged store decoded, then planned) and one agent report (encoded, then
//! decoded by the leader), measured on the store a seed of `partitions.toml` ends with.

// criterion_group! defines an undocumented public function.
#![allow(missing_docs)]

use criterion::{
    criterion_group, criterion_main, measurement::WallTime, BenchmarkGroup, Criterion,
};
use setpoint_chaos::adapt::{make, Bugs};
use setpoint_chaos::faults::parse;
use setpoint_chaos::runner::{run_checked, run_seed};
use setpoint_chaos::Role;

/// The allocator of the `setpoint` binary, so these figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One benchmark: a new seed of `file` (its `text`) per iteration.
fn seeds_of(g: &mut BenchmarkGroup<'_, WallTime>, id: &str, file: &str, text: &str) {
    let model = parse(file, text).unwrap();
    let mut seed = 0u64;
    g.bench_function(id, |b| {
        b.iter(|| {
            seed += 1;
            let f = |i: usize, r: &Role, now: u64| make(&model, Bugs::default(), seed, i, r, now);
            run_seed(&model, seed, &f)
        })
    });
}

/// One pass and one report of the runtime at the end of seed 1 of `partitions.toml`.
fn floor(c: &mut Criterion, text: &str) {
    use setpoint_runtime::controller::reconcile::{plan_pass, PassSettings};
    use setpoint_runtime::controller::runtime_controller;
    use setpoint_runtime::model::{decode, encode, NodeReport, Snapshot};
    let model = parse("partitions.toml", text).unwrap();
    let f = |i: usize, r: &Role, now: u64| make(&model, Bugs::default(), 1, i, r, now);
    let (_, out) = run_checked(&model, 1, model.schedule(1), &f, false);
    let store = out.expect("seed 1 runs to its end").store;
    let prefixes: Vec<String> = Snapshot::PREFIXES.iter().map(|p| p.to_string()).collect();
    let read = store.read(&prefixes);
    let snapshot = Snapshot::from_read(&read, 0).unwrap();
    let (name, spec) = snapshot.workloads.iter().next().expect("a workload");
    let kind = spec.value.controller;
    let settings = PassSettings {
        fence: snapshot.leader.as_ref().map(|l| l.mod_revision),
        max_attempts: 3,
    };
    let report = snapshot
        .reports
        .values()
        .next()
        .expect("a report")
        .value
        .clone();
    let entry = read
        .entries
        .iter()
        .find(|e| e.key.starts_with(setpoint_runtime::model::REPORTS))
        .unwrap()
        .clone();
    let mut g = c.benchmark_group("floor");
    g.bench_function("leader_pass_decode_and_plan", |b| {
        let mut controller = runtime_controller(kind);
        b.iter(|| {
            let s = Snapshot::from_read(&read, 0).unwrap();
            plan_pass(&s, name, &mut controller, &settings).unwrap()
        })
    });
    g.bench_function("leader_pass_plan_only", |b| {
        let mut controller = runtime_controller(kind);
        b.iter(|| plan_pass(&snapshot, name, &mut controller, &settings).unwrap())
    });
    g.bench_function("agent_report_encode_and_decode", |b| {
        let mut e = entry.clone();
        b.iter(|| {
            e.value = encode(&report);
            decode::<NodeReport>(&e).unwrap()
        })
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    floor(c, include_str!("../../../scenarios/chaos/partitions.toml"));
    let mut g = c.benchmark_group("chaos");
    g.sample_size(10);
    let partitions = include_str!("../../../scenarios/chaos/partitions.toml");
    seeds_of(
        &mut g,
        "partitions_600s_one_seed",
        "partitions.toml",
        partitions,
    );
    let checker = include_str!("../../../scenarios/chaos/checker.toml");
    seeds_of(&mut g, "checker_60s_one_seed", "checker.toml", checker);
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
