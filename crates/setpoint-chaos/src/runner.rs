//! One seed of a fault model, end to end: the setup, the run, the checks.

use setpoint_runtime::model::{encode, workload_key, WorkloadSpec};

use crate::check::{check, Check, Violation};
use crate::faults::{Fault, Model};
use crate::world::{run, Factory, Outcome, RunError, Setup};

/// What one seed gave.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Faults in its schedule.
    pub faults: usize,
    /// Events handled.
    pub events: u64,
    /// What it broke; empty when it passed.
    pub violations: Vec<Violation>,
}

impl SeedReport {
    /// Whether every check held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The declarations the operator writes at time 0, as `setpoint apply` would write them.
pub fn declarations(model: &Model) -> Vec<(String, String)> {
    model
        .workloads
        .iter()
        .map(|w| {
            let spec = WorkloadSpec {
                name: w.name.clone(),
                command: vec!["simulated".into(), w.name.clone()],
                copies: w.copies,
                controller: w.controller,
                period_ms: w.period_ms,
                startup_ms: w.startup_ms,
                readiness: None,
                grace_ms: w.grace_ms,
                env: Default::default(),
                backoff: Default::default(),
                rollout: Default::default(),
                restart: Default::default(),
                generation: 0,
                stop_when_cut_off_ms: w.stop_when_cut_off_ms,
            };
            (workload_key(&w.name), encode(&spec))
        })
        .collect()
}

/// The world's setup for `seed` with `schedule`.
pub fn setup(model: &Model, seed: u64, schedule: Vec<Fault>, trace: bool) -> Setup {
    Setup {
        roles: model.roles(),
        skews_ms: model.skews(seed),
        drifts_ppm: model.drifts(seed),
        net: model.net,
        start_ms: model.start_ms,
        term_exit_ms: model.term_exit_ms,
        duration_ms: model.duration_ms,
        event_budget: model.event_budget,
        declarations: declarations(model),
        schedule,
        trace,
    }
}

/// Runs `seed` with `schedule` and checks it; also returns the outcome (none if the budget
/// ran out).
pub fn run_checked(
    model: &Model,
    seed: u64,
    schedule: Vec<Fault>,
    factory: &Factory<'_>,
    trace: bool,
) -> (SeedReport, Option<Outcome>) {
    let s = setup(model, seed, schedule, trace);
    let faults = s.schedule.len();
    match run(&s, factory, seed) {
        Ok(out) => {
            let violations = check(model, &s.schedule, &s.declarations, &out);
            let r = SeedReport {
                seed,
                faults,
                events: out.events,
                violations,
            };
            (r, Some(out))
        }
        Err(e @ RunError::Budget { budget, at_ms, .. }) => {
            let tail = match &e {
                RunError::Budget { tail, .. } => tail.clone(),
            };
            (
                SeedReport {
                    seed,
                    faults,
                    events: budget,
                    violations: vec![Violation {
                        check: Check::Budget,
                        at_ms,
                        detail: e.to_string(),
                    }],
                },
                trace.then(|| Outcome {
                    events: budget,
                    end_ms: at_ms,
                    procs: Vec::new(),
                    unfenced: Vec::new(),
                    deletes: Vec::new(),
                    cut_leases: Vec::new(),
                    store: crate::store::SimStore::new(),
                    trace: tail,
                    leaders: Vec::new(),
                    protocol: Default::default(),
                    impostors: Default::default(),
                    shutdowns: Default::default(),
                }),
            )
        }
    }
}

/// Runs `seed` of `model` (its own schedule, drawn or explicit) and checks it.
pub fn run_seed(model: &Model, seed: u64, factory: &Factory<'_>) -> SeedReport {
    run_checked(model, seed, model.schedule(seed), factory, false).0
}

/// Runs `seeds` of `model` in parallel on the current rayon pool, with the runtime's machines
/// (and `bugs`); the reports come back in seed order whatever the thread count.
pub fn run_seeds(
    model: &Model,
    seeds: std::ops::Range<u64>,
    bugs: crate::adapt::Bugs,
) -> Vec<SeedReport> {
    use rayon::prelude::*;
    seeds
        .into_par_iter()
        .map(|seed| {
            let f = |i: usize, r: &crate::machine::Role, now: u64| {
                crate::adapt::make(model, bugs, seed, i, r, now)
            };
            run_seed(model, seed, &f)
        })
        .collect()
}

/// A failing seed's schedule shrunk to a minimal one that still breaks the same check, with
/// the runs spent; `None` if the seed passes.
pub fn shrink_seed(
    model: &Model,
    seed: u64,
    bugs: crate::adapt::Bugs,
) -> Option<(Vec<Fault>, Check, usize)> {
    let f = |i: usize, r: &crate::machine::Role, now: u64| {
        crate::adapt::make(model, bugs, seed, i, r, now)
    };
    let schedule = model.schedule(seed);
    let first = run_checked(model, seed, schedule.clone(), &f, false).0;
    let check = crate::shrink::first_check(&first.violations)?;
    let mut fails = |s: &[Fault]| {
        run_checked(model, seed, s.to_vec(), &f, false)
            .0
            .violations
            .iter()
            .any(|v| v.check == check)
    };
    let (min, tries) = crate::shrink::shrink(&schedule, &mut fails);
    Some((min, check, tries + 1))
}
