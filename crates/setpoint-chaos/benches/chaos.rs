//! Runs per second of the chaos world on one core, one seed per iteration, with the runtime's own
//! machines: the shipped fault model `scenarios/chaos/partitions.toml` (3 agents, 2 controllers,
//! 6 copies, 10 simulated minutes, with faults) and the checker's own model `checker.toml` (one
//! simulated minute).

// criterion_group! defines an undocumented public function.
#![allow(missing_docs)]

use criterion::{
    criterion_group, criterion_main, measurement::WallTime, BenchmarkGroup, Criterion,
};
use setpoint_chaos::adapt::{make, Bugs};
use setpoint_chaos::faults::parse;
use setpoint_chaos::runner::run_seed;
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

fn bench(c: &mut Criterion) {
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
