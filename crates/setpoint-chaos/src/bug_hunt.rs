//! The checker's own test: each injected bug of the runtime's machines is found by the checks
//! within a stated number of seeds of `scenarios/chaos/checker.toml`, and the same seeds pass
//! without the bug (so the finding is the bug's, not the checker's).

use crate::adapt::{make, Bugs};
use crate::check::Check;
use crate::faults::{parse, Model};
use crate::machine::Role;
use crate::runner::{run_seed, SeedReport};

/// The most seeds a bug may take to be found.
pub const WITHIN: u64 = 30;

fn model() -> Model {
    let text = include_str!("../../../scenarios/chaos/checker.toml");
    parse("scenarios/chaos/checker.toml", text).unwrap()
}

fn seed(m: &Model, seed: u64, bugs: Bugs) -> SeedReport {
    let f = |i: usize, r: &Role, now: u64| make(m, bugs, seed, i, r, now);
    run_seed(m, seed, &f)
}

/// The first seed within [`WITHIN`] where `bugs` break `check`; panics if none does, or if that
/// seed breaks it without the bug too.
fn hunt(bugs: Bugs, check: Check) -> u64 {
    let m = model();
    for s in 1..=WITHIN {
        let r = seed(&m, s, bugs);
        if r.violations.iter().any(|v| v.check == check) {
            let clean = seed(&m, s, Bugs::default());
            assert!(
                !clean.violations.iter().any(|v| v.check == check),
                "seed {s} breaks {check:?} without the bug: {:?}",
                clean.violations
            );
            return s;
        }
    }
    panic!("{bugs:?} not found by {check:?} within {WITHIN} seeds");
}

#[test]

fn fencing_off_is_found_as_an_unfenced_write() {
    hunt(
        Bugs {
            fencing_off: true,
            ..Bugs::default()
        },
        Check::Unfenced,
    );
}

#[test]

fn an_agent_that_does_not_fence_itself_is_found_as_a_late_fence() {
    // Before `named` held a lost node's names this showed as a double run; now the held names
    // keep the name single, and the check of the agent's own promise finds it.
    hunt(
        Bugs {
            no_self_fence: true,
            ..Bugs::default()
        },
        Check::LateFence,
    );
}

#[test]

fn gc_ignoring_the_owner_uid_is_found_after_a_redeclaration() {
    // The old incarnation's copies are never collected: the workload ends with too many.
    let mut m = model();
    m.faults.push(crate::faults::FaultRule {
        during: None,
        after: None,
        within_ms: 0,
        kind: crate::faults::FaultKind::Redeclare,
        count: 1,
        target: crate::faults::Target::Any,
        min_ms: 0,
        max_ms: 0,
    });
    let bugs = Bugs {
        gc_ignores_owner_uid: true,
        ..Bugs::default()
    };
    let found = (1..=WITHIN).find(|&s| !seed(&m, s, bugs).passed());
    let s = found.unwrap_or_else(|| panic!("not found within {WITHIN} seeds"));
    let clean = seed(&m, s, Bugs::default());
    assert!(
        clean.passed(),
        "seed {s} fails without the bug: {:?}",
        clean.violations
    );
}
