//! The engines' work in instructions, for callgrind on a noisy machine (issue 24):
//! `engine_counts ENGINE N` runs the lesson's world at G = 60 (ledger) N times on the fast
//! engine (`fast`) or the general one (`general`), or the general engine's `named` run with
//! the lesson's chain of delays (`chain`, seed 7), and prints the last run's copy-events.
//!
//! The instructions of one run are the difference of two counts over the difference of N:
//! `valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/engine_counts
//! fast 1000` against `... fast 0` (scripts/engine-counts.sh does it).

use std::hint::black_box;

use setpoint_core::ControllerKind;
use setpoint_sim::delay::DelayModel;
use setpoint_sim::scenario::{ControllerSpec, Scenario, ScenarioSpec};
use setpoint_sim::world::run_general;
use setpoint_sim::{simulate, LessonWorld, Metrics};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(engine), Some(Ok(n))) = (args.get(1), args.get(2).map(|n| n.parse::<u64>())) else {
        eprintln!("usage: engine_counts fast|general|chain N");
        std::process::exit(2);
    };
    let lesson = LessonWorld::lesson(60, ControllerKind::Ledger);
    let general = Scenario::from_lesson(&lesson);
    let chain = Scenario::new(ScenarioSpec {
        delay: DelayModel::lesson_chain(),
        controller: ControllerSpec::new(ControllerKind::Named),
        ..ScenarioSpec::default()
    })
    .expect("valid");
    let mut last: Option<Metrics> = None;
    for _ in 0..n {
        last = Some(match engine.as_str() {
            "fast" => simulate(black_box(&lesson)),
            "general" => run_general(black_box(&general), 1).expect("runs").workloads[0].metrics,
            "chain" => run_general(black_box(&chain), 7).expect("runs").workloads[0].metrics,
            other => {
                eprintln!("unknown engine '{other}'; accepted: fast, general, chain");
                std::process::exit(2);
            }
        });
    }
    if let Some(m) = last {
        println!("{}", m.created + m.delete_commands + m.died);
    }
}
