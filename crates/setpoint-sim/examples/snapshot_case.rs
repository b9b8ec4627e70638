//! The snapshot pipeline's long case (issue 24, part 4): `ledger`, U = 1 s, delays uniform
//! 3,703–41,799 ms, workloads of 8, 8 and 9 copies, 4 nodes, seed 7303134752413288063, the
//! pipeline property tests' shape of world. Its run took 18.9 s in release for 135 s of world
//! before the fix (a snapshot replaced in flight re-queued every report it carried).
//!
//! `snapshot_case [DURATION [MODE]]`: runs it for DURATION seconds (default 135) under MODE
//! (default `snapshot`) and prints the wall time and the workloads' copies created.

use std::time::Instant;

use setpoint_core::ControllerKind;
use setpoint_sim::delay::DelayModel;
use setpoint_sim::pipeline::{Pipeline, PipelineSpec};
use setpoint_sim::scenario::{ControllerSpec, Scenario, ScenarioSpec, Workload};
use setpoint_sim::world::run_general;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let duration = args.get(1).map_or(135, |d| d.parse().expect("a duration"));
    let mode: Pipeline = args
        .get(2)
        .map_or(Pipeline::Snapshot, |m| m.parse().expect("a pipeline"));
    let seed = 7303134752413288063;
    let spec = ScenarioSpec {
        period: 1,
        duration,
        delay: DelayModel::Uniform {
            min: 3_703,
            max: 41_799,
        },
        controller: ControllerSpec::new(ControllerKind::Ledger),
        workloads: [8, 8, 9]
            .iter()
            .enumerate()
            .map(|(i, &desired)| Workload {
                name: format!("w{i}"),
                desired,
                startup: 2,
            })
            .collect(),
        events: Vec::new(),
        unique_names: true,
        seed,
        pipeline: PipelineSpec {
            mode,
            nodes: 4,
            ..PipelineSpec::default()
        },
        startup_model: None,
    };
    let scenario = Scenario::new(spec).expect("a valid scenario");
    let start = Instant::now();
    let out = run_general(&scenario, seed).expect("runs");
    let took = start.elapsed();
    let created: Vec<u64> = out.workloads.iter().map(|w| w.metrics.created).collect();
    println!(
        "{duration} s under {mode}: {:.3} s wall, created {created:?}",
        took.as_secs_f64()
    );
}
