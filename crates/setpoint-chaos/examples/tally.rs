//! Every check each seed of a fault model breaks, not only the first: `cargo run --release
//! --example tally -- MODEL.toml FIRST LAST`. Prints one line per failing seed (its checks)
//! and, at the end, how many seeds broke each check.

use std::collections::BTreeMap;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let model = setpoint_chaos::faults::load(std::path::Path::new(&args[1])).expect("a model");
    let first: u64 = args[2].parse().expect("FIRST");
    let last: u64 = args[3].parse().expect("LAST");
    let reports = setpoint_chaos::runner::run_seeds(
        &model,
        first..last + 1,
        setpoint_chaos::adapt::Bugs::default(),
    );
    let mut by_check: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &reports {
        let mut checks: Vec<&str> = r.violations.iter().map(|v| v.check.name()).collect();
        checks.dedup();
        checks.sort();
        checks.dedup();
        if !checks.is_empty() {
            println!("seed {}: {}", r.seed, checks.join(" "));
            for v in r
                .violations
                .iter()
                .filter(|v| v.check.name() != "late-fence")
            {
                println!("    {} at {} ms: {}", v.check.name(), v.at_ms, v.detail);
            }
        }
        for c in checks {
            *by_check.entry(c).or_default() += 1;
        }
    }
    let failed = reports.iter().filter(|r| !r.passed()).count();
    println!(
        "{}: seeds {first}..={last}: {failed} failed; by check: {by_check:?}",
        args[1]
    );
}
