//! Every shrunk schedule that once broke a check is replayed and must pass
//! (`scenarios/chaos/regressions/`), and every open finding (`scenarios/chaos/open/`) still
//! breaks the check it names, so that a fix is noticed and the file moves to `regressions/`.

use std::path::Path;

use crate::adapt::{make, Bugs};
use crate::check::Check;
use crate::faults::parse;
use crate::machine::Role;
use crate::runner::{run_checked, SeedReport};

fn replay(path: &Path) -> SeedReport {
    let text = std::fs::read_to_string(path).unwrap();
    let model = parse(&path.display().to_string(), &text).unwrap();
    let seed = model.seed.expect("a replay file names its seed");
    let schedule = model
        .schedule
        .clone()
        .expect("a replay file has its schedule");
    let f = |i: usize, r: &Role, now: u64| make(&model, Bugs::default(), seed, i, r, now);
    run_checked(&model, seed, schedule, &f, false).0
}

#[test]
fn every_regression_scenario_passes_every_check() {
    let all = crate::faults::shipped("regressions");
    assert!(!all.is_empty());
    for path in all {
        let r = replay(&path);
        assert!(r.passed(), "{}: {:?}", path.display(), r.violations);
    }
}

/// The check an open finding's file says it breaks, on a comment line `# Breaks: CHECK`
/// (`double-run` if it names none, as the first open findings did).
fn breaks(path: &Path) -> Check {
    let text = std::fs::read_to_string(path).unwrap();
    let name = text
        .lines()
        .find_map(|l| l.strip_prefix("# Breaks: "))
        .map_or("double-run", str::trim);
    *Check::ALL
        .iter()
        .find(|c| c.name() == name)
        .unwrap_or_else(|| panic!("{}: no check named '{name}'", path.display()))
}

#[test]
fn every_open_finding_still_breaks_its_check() {
    for path in crate::faults::shipped("open") {
        let check = breaks(&path);
        let r = replay(&path);
        assert!(
            r.violations.iter().any(|v| v.check == check),
            "{} no longer fails '{}': if it is fixed, move it to scenarios/chaos/regressions/",
            path.display(),
            check.name()
        );
    }
}

/// Every shipped fault model parses, draws a schedule with a fault of each of its rules, and
/// its first seed passes every check: a model that no longer parses, or whose faults never
/// strike, is noticed here rather than in a long run.
#[test]
fn every_shipped_fault_model_parses_and_its_first_seed_passes() {
    let all = crate::faults::shipped("");
    assert!(all.len() >= 6, "{all:?}");
    for path in all {
        let text = std::fs::read_to_string(&path).unwrap();
        let model = parse(&path.display().to_string(), &text).unwrap();
        let schedule = model.schedule(1);
        // A rule switched off by swarm draws nothing; a `during` rule draws nothing when no
        // fault of its kind fits its targets.
        let on = model.rules_on(1);
        for (rule, _) in model
            .faults
            .iter()
            .zip(on)
            .filter(|(r, on)| r.count > 0 && *on && r.during.is_none())
        {
            assert!(
                schedule.iter().any(|f| f.kind == rule.kind),
                "{}: no {:?} drawn",
                path.display(),
                rule.kind
            );
        }
        let f = |i: usize, r: &Role, now: u64| make(&model, Bugs::default(), 1, i, r, now);
        let r = run_checked(&model, 1, schedule, &f, false).0;
        assert!(r.passed(), "{}: {:?}", path.display(), r.violations);
    }
}
