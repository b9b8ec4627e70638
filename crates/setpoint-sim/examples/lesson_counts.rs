//! The lesson sweep's two halves in instructions, for callgrind on a noisy machine (issue 24):
//! `lesson_counts engine|predict|none` runs the fast engine or the exact predictor (or
//! neither: the loop's own cost) on each of the 100,000 cells of `setpoint sweep --delay
//! 0..=199 --period 1..=100 --startup 0..=4` (desired 6, ledger, 900 s, deaths 300:2) and
//! prints the sum of the overshoots.
//!
//! A half's instructions a cell are the difference of its count and `none`'s, over 100,000:
//! `valgrind --tool=callgrind --callgrind-out-file=/dev/null
//! target/release/examples/lesson_counts predict` against `... none`. The sweep's own figure
//! is `scripts/engine-counts.sh`'s last row; this splits it without a build of the binary.

use std::hint::black_box;

use setpoint_sim::predict::predict;
use setpoint_sim::{simulate, LessonSpec, LessonWorld};

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if !matches!(mode.as_str(), "engine" | "predict" | "none") {
        eprintln!("usage: lesson_counts engine|predict|none");
        std::process::exit(2);
    }
    let mut sum = 0u64;
    for startup in 0..=4 {
        for delay in 0..=199 {
            for period in 1..=100 {
                let spec = LessonSpec {
                    delay,
                    period,
                    startup,
                    ..LessonSpec::default()
                };
                // Both halves pay for the same checked world, so `none` takes it off both.
                let world = LessonWorld::new(black_box(spec)).expect("valid");
                sum += match mode.as_str() {
                    "engine" => simulate(&world).overshoot,
                    "predict" => predict(world.spec()).overshoot,
                    _ => black_box(&world).spec().desired,
                };
            }
        }
    }
    println!("{sum}");
}
