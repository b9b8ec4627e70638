//! Benchmarks of the engine: the lesson's scenario, the big scenario of issue 3, a slice of the
//! million-cell sweep, and the same run at growing `desired` (whose cost must stay flat).
//!
//! Run with `cargo bench -p setpoint-sim`; `scripts/compare-reference.sh` measures the whole
//! process against the reference model instead.

// criterion_group! defines an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use setpoint_core::ControllerKind;
use setpoint_sim::sweep::{summarize, write_rows};
use setpoint_sim::{
    simulate, Axis, Death, Grid, GridSpec, LessonSpec, LessonWorld, Limit, RowFormat,
};

/// `setpoint run --desired 10000 --duration 86400 -G 60 -U 15 -B 5 --deaths 300:3333`.
fn big(desired: u64) -> LessonWorld {
    LessonWorld::new(LessonSpec {
        desired,
        period: 15,
        delay: 60,
        startup: 5,
        duration: 86_400,
        deaths: vec![Death {
            at: 300,
            count: desired / 3,
        }],
        controller: ControllerKind::Ledger,
    })
    .expect("valid")
}

fn lesson(c: &mut Criterion) {
    let scenario = LessonWorld::lesson(60, ControllerKind::Ledger);
    c.bench_function("lesson/ledger_g60", |b| {
        b.iter(|| simulate(black_box(&scenario)))
    });
    c.bench_function("lesson/both_blocks", |b| {
        b.iter(setpoint_sim::lesson::lesson_all)
    });
}

fn big_scenario(c: &mut Criterion) {
    let scenario = big(10_000);
    c.bench_function("big/desired_10000_duration_86400", |b| {
        b.iter(|| simulate(black_box(&scenario)))
    });
}

fn desired_scan(c: &mut Criterion) {
    let mut group = c.benchmark_group("desired");
    for desired in [6, 10_000, 1_000_000, 100_000_000] {
        let scenario = big(desired);
        group.bench_with_input(BenchmarkId::from_parameter(desired), &scenario, |b, s| {
            b.iter(|| simulate(black_box(s)))
        });
    }
    group.finish();
}

/// Every startup and period of the million-cell sweep at delays 0, 50, 100, 150 and 199: 25,000
/// cells spread over the whole range of blind windows, on one thread.
fn sweep_slice(c: &mut Criterion) {
    let grid = Grid::new(GridSpec {
        delay: Axis::parse(Limit::DELAY, "0,50,100,150,199").expect("valid"),
        period: Axis::parse(Limit::PERIOD, "1..=100").expect("valid"),
        startup: Axis::parse(Limit::STARTUP, "0..=49").expect("valid"),
        ..GridSpec::default()
    })
    .expect("valid");
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a pool");
    let mut group = c.benchmark_group("sweep");
    group.throughput(Throughput::Elements(grid.cells()));
    group.bench_function("slice_25000_cells_1_thread", |b| {
        b.iter(|| pool.install(|| summarize(black_box(&grid), &|_| {})))
    });
    // The same cells written as CSV rows: the row writer's cost on top of the simulations.
    group.bench_function("slice_25000_cells_csv_rows_1_thread", |b| {
        b.iter(|| {
            pool.install(|| {
                write_rows(
                    black_box(&grid),
                    RowFormat::Csv,
                    &mut std::io::sink(),
                    &|_| {},
                )
            })
        })
    });
    group.finish();
}

/// The general engine against the fast one on the lesson's world (G = 60, the same metrics), per
/// run and per copy-event (a creation, a delete command, a death); and a slice of the Monte Carlo
/// target (10,000 cells x 100 runs, lesson-chain, ledger/intent/named): 102 cells x 100 runs,
/// on one thread.
fn general_engine(c: &mut Criterion) {
    use setpoint_sim::delay::DelayModel;
    use setpoint_sim::scenario::{ControllerSpec, Scenario, ScenarioSpec};
    use setpoint_sim::world::run_general;
    let lesson = LessonWorld::lesson(60, ControllerKind::Ledger);
    let general = Scenario::from_lesson(&lesson);
    let m = simulate(&lesson);
    let events = m.created + m.delete_commands + m.died;
    let mut group = c.benchmark_group("engines");
    group.throughput(Throughput::Elements(events));
    group.bench_function("fast_lesson_g60_per_copy_event", |b| {
        b.iter(|| simulate(black_box(&lesson)))
    });
    group.bench_function("general_lesson_g60_per_copy_event", |b| {
        b.iter(|| run_general(black_box(&general), 1))
    });
    let chain = Scenario::new(ScenarioSpec {
        delay: DelayModel::lesson_chain(),
        controller: ControllerSpec::new(ControllerKind::Named),
        ..ScenarioSpec::default()
    })
    .expect("valid");
    group.bench_function("general_named_lesson_chain_run", |b| {
        b.iter(|| run_general(black_box(&chain), 7))
    });
    group.finish();

    let grid = Grid::new(GridSpec {
        delay_models: vec![DelayModel::lesson_chain()],
        period: Axis::parse(Limit::PERIOD, "1..=100:3").expect("valid"),
        controller: vec![
            ControllerKind::Ledger,
            ControllerKind::Intent,
            ControllerKind::Named,
        ],
        runs: 100,
        ..GridSpec::default()
    })
    .expect("valid");
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a pool");
    let mut group = c.benchmark_group("monte_carlo_sweep");
    group.throughput(Throughput::Elements(grid.cells() * 100));
    group.sample_size(10);
    group.bench_function("lesson_chain_102_cells_x_100_runs_1_thread", |b| {
        b.iter(|| pool.install(|| summarize(black_box(&grid), &|_| {})))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = lesson, big_scenario, desired_scan, sweep_slice, general_engine
}
criterion_main!(benches);
