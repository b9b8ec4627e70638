//! Runs per second of the chaos world on one core: the shipped fault model
//! `scenarios/chaos/partitions.toml` (3 agents, 2 controllers, 6 copies, 10 simulated minutes,
//! with faults), one seed per iteration, with the runtime's own machines; and the checker's
//! own model `checker.toml` (one simulated minute).

// criterion_group! defines an undocumented public function.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use setpoint_chaos::adapt::{make, Bugs};
use setpoint_chaos::faults::parse;
use setpoint_chaos::runner::run_seed;
use setpoint_chaos::Role;

fn bench(c: &mut Criterion) {
    let text = include_str!("../../../scenarios/chaos/partitions.toml");
    let model = parse("partitions.toml", text).unwrap();
    let mut g = c.benchmark_group("chaos");
    g.sample_size(10);
    let mut seed = 0u64;
    g.bench_function("partitions_600s_one_seed", |b| {
        b.iter(|| {
            seed += 1;
            let f = |i: usize, r: &Role, now: u64| make(&model, Bugs::default(), seed, i, r, now);
            run_seed(&model, seed, &f)
        })
    });
    let text = include_str!("../../../scenarios/chaos/checker.toml");
    let checker = parse("checker.toml", text).unwrap();
    let mut seed = 0u64;
    g.bench_function("checker_60s_one_seed", |b| {
        b.iter(|| {
            seed += 1;
            let f = |i: usize, r: &Role, now: u64| make(&checker, Bugs::default(), seed, i, r, now);
            run_seed(&checker, seed, &f)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
