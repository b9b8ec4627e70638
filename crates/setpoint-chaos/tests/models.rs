//! The chaos checker as the test of a mutation run (issue 22 part 3, `docs/chaos.md`): every
//! shipped fault model, a fixed range of seeds each, every check.
//!
//! `cargo mutants` (`scripts/mutants.sh`) runs this test for each mutant of the runtime, so a
//! mutant counts as caught only if the chaos checker notices it, not the runtime's own unit
//! tests. It is `#[ignore]`d so that `cargo test --workspace` stays fast; run it with
//!
//! ```text
//! cargo test --release -p setpoint-chaos --test models -- --ignored
//! ```
//!
//! `SETPOINT_MUTANTS_SEEDS=N` runs seeds `1..=N` of each model instead of [`SEEDS`] (for
//! measuring how long a run takes, not for the mutation run, whose figures are for [`SEEDS`]).

use setpoint_chaos::adapt::Bugs;
use setpoint_chaos::faults::{load, shipped};
use setpoint_chaos::runner::run_seeds;

/// Seeds `1..=SEEDS` of each shipped model (60 runs a model; 660 over the eleven models of the
/// time of this measure took about 20 s of one core in a release build: 13.5 s for 40 seeds,
/// 34 s for 100, at load 2 to 4), so that a mutant's test
/// stays well under its timeout however busy the shared 2-core machine is (docs/chaos.md,
/// "Issue 22 part 3").
const SEEDS: u64 = 60;

/// Every shipped fault model passes every check on seeds `1..=SEEDS`. Stops at the first
/// model with a failing seed and names its seeds and checks, so a caught mutant costs less
/// than a missed one. Ignored by default: it is the mutation run's test (module doc).
#[test]
#[ignore = "the mutation run's test (scripts/mutants.sh): run with --release -- --ignored"]
fn every_shipped_fault_model_passes_every_check_on_its_first_seeds() {
    let seeds: u64 = std::env::var("SETPOINT_MUTANTS_SEEDS")
        .ok()
        .map_or(SEEDS, |s| {
            s.parse().expect("SETPOINT_MUTANTS_SEEDS: a number")
        });
    let all = shipped("");
    assert!(all.len() >= 6, "{all:?}");
    for path in all {
        let model = load(&path).unwrap();
        let started = std::time::Instant::now();
        let reports = run_seeds(&model, 1..seeds + 1, Bugs::default());
        let failed: Vec<String> = reports
            .iter()
            .filter(|r| !r.passed())
            .map(|r| {
                let v = &r.violations[0];
                format!(
                    "seed {}: {} at {} ms: {}",
                    r.seed,
                    v.check.name(),
                    v.at_ms,
                    v.detail
                )
            })
            .collect();
        println!(
            "{}: seeds 1..={seeds}: {} failed ({:.1} s)",
            path.display(),
            failed.len(),
            started.elapsed().as_secs_f64()
        );
        assert!(
            failed.is_empty(),
            "{}: {} of {seeds} seeds failed:\n{}",
            path.display(),
            failed.len(),
            failed.join("\n")
        );
    }
}
