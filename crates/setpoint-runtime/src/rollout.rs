//! Rolling updates: the decision, free of I/O.
//!
//! `apply` with a changed `command` or `readiness` bumps the workload's **generation**
//! ([`next_generation`]). Every assignment carries the generation it was created from; copies
//! of an older one are replaced under two budgets, Kubernetes' `maxSurge` and
//! `maxUnavailable` (25 % each by default):
//!
//! - **never more than `desired + surge` copies**, counting every copy that has an assignment
//!   *or* is still on the ledger (one commanded to stop and not reported stopped yet still
//!   runs, as far as anyone knows);
//! - **never fewer than `desired − unavailable` available**: a copy is available while it is on
//!   the ledger (reported running) and still assigned.
//!
//! The rollout is itself a loop that reads a delayed view, so it counts its own pending work:
//! its creations are assignments before they are on the ledger, its deletions leave the count
//! only once a report says the copy stopped. It never trusts a copy to be ready before a report
//! says so. A stale ledger can still show a dead old copy as available; docs/controllers.md
//! says what that costs.
//!
//! `named` cannot surge: two copies of one name would be a duplicate. It replaces name by name,
//! at most `unavailable` (at least 1) names at a time; the `named` controller then creates each
//! stopped name again, from the new generation.

use serde::{Deserialize, Serialize};
use setpoint_core::{Action, Name};

use crate::model::WorkloadSpec;

/// The default progress deadline: ten minutes, as Kubernetes' `progressDeadlineSeconds`.
pub const DEFAULT_PROGRESS_DEADLINE_MS: u64 = 600_000;

/// A budget: a number of copies, or a percentage of the desired count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Amount {
    /// This many copies.
    Copies(u64),
    /// This percentage of the desired copies (0 to 100).
    Percent(u64),
}

impl Amount {
    /// The amount for `desired` copies; percentages round up (`up`, the surge) or down (the
    /// unavailable budget), as Kubernetes rounds them.
    pub fn resolve(self, desired: u64, up: bool) -> u64 {
        match self {
            Amount::Copies(n) => n,
            Amount::Percent(p) => {
                let x = desired.saturating_mul(p);
                if up {
                    x.div_ceil(100)
                } else {
                    x / 100
                }
            }
        }
    }

    /// Whether the amount is 0 whatever the desired count.
    pub fn is_zero(self) -> bool {
        matches!(self, Amount::Copies(0) | Amount::Percent(0))
    }
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Amount::Copies(n) => write!(f, "{n}"),
            Amount::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A workload's rollout settings (`rollout = { max_surge = "25%", max_unavailable = "25%",
/// progress_deadline = "10m" }`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutPolicy {
    /// Copies above `desired` a rollout may run.
    pub max_surge: Amount,
    /// Copies below `desired` a rollout may leave unavailable.
    pub max_unavailable: Amount,
    /// A rollout that makes no progress for this long (milliseconds) is stalled and stops.
    pub progress_deadline_ms: u64,
}

impl Default for RolloutPolicy {
    fn default() -> Self {
        Self {
            max_surge: Amount::Percent(25),
            max_unavailable: Amount::Percent(25),
            progress_deadline_ms: DEFAULT_PROGRESS_DEADLINE_MS,
        }
    }
}

/// The two budgets in copies, for `desired` copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Copies allowed above desired.
    pub surge: u64,
    /// Copies allowed below desired, available.
    pub unavailable: u64,
}

impl RolloutPolicy {
    /// The budgets for `desired` copies. If both round to 0, one copy may be unavailable (as
    /// Kubernetes does), or the rollout could never move.
    pub fn budget(&self, desired: u64) -> Budget {
        let surge = self.max_surge.resolve(desired, true);
        let mut unavailable = self.max_unavailable.resolve(desired, false);
        if surge == 0 && unavailable == 0 {
            unavailable = 1;
        }
        Budget { surge, unavailable }
    }
}

/// The generation a declaration gets when applied over `old`: the same as `old`'s while what a
/// copy runs (command, readiness) is unchanged, one more when it changed, 1 for a new workload.
pub fn next_generation(old: Option<&WorkloadSpec>, new: &WorkloadSpec) -> u64 {
    match old {
        None => 1,
        Some(o) if o.command == new.command && o.readiness == new.readiness && o.env == new.env => {
            o.generation
        }
        Some(o) => o.generation + 1,
    }
}

/// The declaration of `name` stored in `read`, if it decodes.
pub fn stored_spec(read: &crate::store::Read, name: &str) -> Option<WorkloadSpec> {
    let key = crate::model::workload_key(name);
    let e = read.entries.iter().find(|e| e.key == key)?;
    crate::model::decode::<WorkloadSpec>(e)
        .ok()
        .map(|s| s.value)
}

/// `new` with the generation it gets when applied over what `read` stores.
pub fn with_generation(read: &crate::store::Read, new: &WorkloadSpec) -> WorkloadSpec {
    let old = stored_spec(read, &new.name);
    WorkloadSpec {
        generation: next_generation(old.as_ref(), new),
        ..new.clone()
    }
}

/// What applying `new` over `old` changes, one phrase per field, for `apply --dry-run`.
pub fn describe_changes(old: &WorkloadSpec, new: &WorkloadSpec) -> Vec<String> {
    let mut out = Vec::new();
    if old.copies != new.copies {
        out.push(format!("copies {} -> {}", old.copies, new.copies));
    }
    if old.generation != new.generation {
        let what: Vec<&str> = [
            (old.command != new.command, "command"),
            (old.readiness != new.readiness, "readiness"),
            (old.env != new.env, "env"),
        ]
        .into_iter()
        .filter_map(|(c, w)| c.then_some(w))
        .collect();
        let b = new.rollout.budget(new.copies);
        let how = if new.controller == setpoint_core::ControllerKind::Named {
            format!("name by name, at most {} at a time", b.unavailable.max(1))
        } else {
            format!("max surge {}, max unavailable {}", b.surge, b.unavailable)
        };
        out.push(format!(
            "{} changed: generation {} -> {}, a rolling update replaces every copy ({how})",
            what.join(" and "),
            old.generation,
            new.generation,
        ));
    }
    for (changed, what) in [
        (old.controller != new.controller, "controller"),
        (old.period_ms != new.period_ms, "period"),
        (old.startup_ms != new.startup_ms, "startup"),
        (old.grace_ms != new.grace_ms, "grace"),
        (old.backoff != new.backoff, "backoff"),
        (old.rollout != new.rollout, "rollout"),
    ] {
        if changed {
            out.push(format!("{what} changed (running copies keep running)"));
        }
    }
    out
}

/// The rollout's pass for a workload that is not `named`, as the action the pass writes: the
/// new copies get the next numbers from `next`, the deletions go to the copies [`step`] names.
pub fn as_action(spec: &WorkloadSpec, copies: &[Copy], next: u64) -> Option<Action> {
    let s = step(spec.copies, spec.rollout.budget(spec.copies), copies);
    if s.create == 0 && s.delete.is_empty() {
        return None;
    }
    let mut delete: Vec<Name> = s.delete.into_iter().map(Name).collect();
    delete.sort();
    Some(Action::Named {
        target: spec.copies,
        counted: copies.len() as u64,
        create: (next..next + s.create).map(Name).collect(),
        delete,
    })
}

/// Adds a name-by-name rollout's deletions ([`named_step`]) to the `named` controller's action.
pub fn with_named_step(
    action: Option<Action>,
    spec: &WorkloadSpec,
    copies: &[Copy],
) -> Option<Action> {
    let extra = named_step(spec.copies, spec.rollout.budget(spec.copies), copies);
    if extra.is_empty() {
        return action;
    }
    match action {
        Some(Action::Named {
            target,
            counted,
            create,
            mut delete,
        }) => {
            delete.extend(extra.into_iter().map(Name));
            delete.sort();
            delete.dedup();
            Some(Action::Named {
                target,
                counted,
                create,
                delete,
            })
        }
        None => Some(Action::Named {
            target: spec.copies,
            counted: copies.iter().filter(|c| c.on_ledger).count() as u64,
            create: Vec::new(),
            delete: extra.into_iter().map(Name).collect(),
        }),
        // `named` only ever returns `Named`; another action is passed on unchanged.
        other => other,
    }
}

/// One copy as the rollout counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copy {
    /// Its number.
    pub n: u64,
    /// Whether it runs the current generation.
    pub current: bool,
    /// Whether it has an assignment (commanded to run).
    pub assigned: bool,
    /// Whether the ledger shows it running.
    pub on_ledger: bool,
}

impl Copy {
    /// On the ledger and still assigned: what the availability budget counts.
    pub fn available(&self) -> bool {
        self.assigned && self.on_ledger
    }
}

/// What one rollout pass does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// New copies of the current generation to create.
    pub create: u64,
    /// Copies to delete (numbers), in order.
    pub delete: Vec<u64>,
}

/// Whether a rollout has old copies left: a copy of an older generation is assigned or still
/// on the ledger.
pub fn has_old(copies: &[Copy]) -> bool {
    copies.iter().any(|c| !c.current)
}

/// Whether a rollout to `desired` copies is over: no old copy left, and exactly `desired`
/// current copies, every one on the ledger, so the workload's controller takes over from an
/// exact count.
pub fn done(copies: &[Copy], desired: u64) -> bool {
    !has_old(copies) && copies.len() as u64 == desired && copies.iter().all(|c| c.available())
}

/// One pass of a rolling update towards `desired` copies of the current generation (not
/// `named`): create current copies while under `desired + surge` counted and under `desired`
/// current; delete old copies that are not available (they cost no availability), then old
/// available copies, oldest first, while at least `desired − unavailable` stay available; and
/// current copies above `desired`.
pub fn step(desired: u64, budget: Budget, copies: &[Copy]) -> Step {
    let total = copies.len() as u64;
    let current = copies.iter().filter(|c| c.current && c.assigned).count() as u64;
    let create = desired
        .saturating_add(budget.surge)
        .saturating_sub(total)
        .min(desired.saturating_sub(current));
    let mut available = copies.iter().filter(|c| c.available()).count() as u64;
    let floor = desired.saturating_sub(budget.unavailable);
    let mut delete = Vec::new();
    let old = |c: &&Copy| !c.current && c.assigned;
    for c in copies.iter().filter(old).filter(|c| !c.on_ledger) {
        delete.push(c.n);
    }
    for c in copies.iter().filter(old).filter(|c| c.on_ledger) {
        if available <= floor {
            break;
        }
        available -= 1;
        delete.push(c.n);
    }
    // Scaled down during the rollout: current copies above desired go, newest and unready first.
    let mut extra = current.saturating_sub(desired);
    let mut cur: Vec<&Copy> = copies.iter().filter(|c| c.current && c.assigned).collect();
    cur.sort_by_key(|c| (c.on_ledger, std::cmp::Reverse(c.n)));
    for c in cur {
        if extra == 0 {
            break;
        }
        extra -= 1;
        delete.push(c.n);
    }
    Step { create, delete }
}

/// One pass of a name-by-name rollout (`named`): the old names to delete now, oldest first, so
/// that at most `unavailable` (at least 1) of the `desired` names are unavailable.
pub fn named_step(desired: u64, budget: Budget, copies: &[Copy]) -> Vec<u64> {
    let wanted = |c: &&Copy| c.n < desired;
    let available = copies
        .iter()
        .filter(wanted)
        .filter(|c| c.available())
        .count() as u64;
    let allowed = budget.unavailable.max(1);
    let mut room = allowed.saturating_sub(desired.saturating_sub(available));
    let mut out = Vec::new();
    for c in copies
        .iter()
        .filter(wanted)
        .filter(|c| !c.current && c.assigned)
    {
        if !c.on_ledger {
            out.push(c.n);
        } else if room > 0 {
            room -= 1;
            out.push(c.n);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn old(n: u64) -> Copy {
        Copy {
            n,
            current: false,
            assigned: true,
            on_ledger: true,
        }
    }

    #[test]
    fn a_changed_command_readiness_or_env_bumps_the_generation_and_copies_alone_do_not() {
        let text = "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"9\"]\ncopies = 2\n";
        let mut old = crate::spec::parse_workloads(text).unwrap().remove(0);
        old.generation = 3;
        assert_eq!(next_generation(None, &old), 1);
        let same = WorkloadSpec {
            copies: 5,
            ..old.clone()
        };
        assert_eq!(next_generation(Some(&old), &same), 3);
        let mut env = old.clone();
        env.env.vars.insert("MODE".into(), "fast".into());
        assert_eq!(next_generation(Some(&old), &env), 4);
        assert!(describe_changes(
            &old,
            &WorkloadSpec {
                generation: 4,
                ..env
            }
        )
        .iter()
        .any(|c| c.starts_with("env changed")));
        let command = WorkloadSpec {
            command: vec!["sleep".into(), "10".into()],
            ..old.clone()
        };
        assert_eq!(next_generation(Some(&old), &command), 4);
    }

    #[test]
    fn percentages_round_as_kubernetes_rounds_them_and_two_zeros_allow_one() {
        let p = RolloutPolicy::default();
        assert_eq!(
            p.budget(6),
            Budget {
                surge: 2,
                unavailable: 1
            }
        );
        assert_eq!(
            p.budget(4),
            Budget {
                surge: 1,
                unavailable: 1
            }
        );
        assert_eq!(
            p.budget(1),
            Budget {
                surge: 1,
                unavailable: 0
            }
        );
        let zero = RolloutPolicy {
            max_surge: Amount::Copies(0),
            max_unavailable: Amount::Percent(10),
            ..p
        };
        assert_eq!(
            zero.budget(3),
            Budget {
                surge: 0,
                unavailable: 1
            }
        );
    }

    #[test]
    fn with_no_unavailability_a_new_copy_is_ready_before_an_old_one_stops() {
        let b = Budget {
            surge: 1,
            unavailable: 0,
        };
        let mut copies = vec![old(0), old(1), old(2)];
        let s = step(3, b, &copies);
        assert_eq!(
            s,
            Step {
                create: 1,
                delete: vec![]
            }
        );
        // Created, not on the ledger yet: nothing more, nothing stopped.
        copies.push(Copy {
            n: 3,
            current: true,
            assigned: true,
            on_ledger: false,
        });
        assert_eq!(step(3, b, &copies), Step::default());
        // On the ledger: one old copy may go; it still counts until reported stopped.
        copies[3].on_ledger = true;
        assert_eq!(step(3, b, &copies).delete, [0]);
        copies[0].assigned = false;
        assert_eq!(step(3, b, &copies), Step::default());
    }

    #[test]
    fn named_replaces_one_name_at_a_time_within_the_budget() {
        let b = Budget {
            surge: 2,
            unavailable: 1,
        };
        let mut copies = vec![old(0), old(1), old(2)];
        assert_eq!(named_step(3, b, &copies), [0]);
        copies[0].assigned = false;
        assert_eq!(named_step(3, b, &copies), Vec::<u64>::new());
    }

    /// Drives [`step`] against a world where creations reach the ledger a few rounds later and
    /// deletions leave it a few rounds later, and checks the two budgets at every round with a
    /// literal count.
    fn simulate(
        step: fn(u64, Budget, &[Copy]) -> Step,
        desired: u64,
        surge: u64,
        unavailable: u64,
        lags: &[u8],
    ) -> Result<(), String> {
        let b = Budget { surge, unavailable };
        let mut copies: Vec<(Copy, u32)> = (0..desired).map(|n| (old(n), 0)).collect();
        let mut next = desired;
        let mut lag = lags.iter().cycle();
        for round in 0..400 {
            let view: Vec<Copy> = copies.iter().map(|c| c.0).collect();
            // The oracle: a plain count of what the view shows.
            let counted = view.len() as u64;
            let available = view.iter().filter(|c| c.assigned && c.on_ledger).count() as u64;
            if counted > desired + b.surge {
                return Err(format!("round {round}: {counted} copies counted"));
            }
            let floor = desired.saturating_sub(b.unavailable.max(u64::from(b.surge == 0)));
            if available < floor {
                return Err(format!("round {round}: {available} available"));
            }
            if done(&view, desired) {
                return Ok(());
            }
            let s = step(desired, b, &view);
            for n in &s.delete {
                if let Some(c) = copies.iter_mut().find(|c| c.0.n == *n) {
                    c.0.assigned = false;
                    c.1 = u32::from(*lag.next().unwrap());
                }
            }
            for _ in 0..s.create {
                let c = Copy {
                    n: next,
                    current: true,
                    assigned: true,
                    on_ledger: false,
                };
                next += 1;
                copies.push((c, u32::from(*lag.next().unwrap())));
            }
            // Time passes: lags count down; a created copy reaches the ledger, a deleted one
            // leaves it.
            copies.retain_mut(|(c, l)| {
                if *l > 0 {
                    *l -= 1;
                    return true;
                }
                if c.assigned {
                    c.on_ledger = true;
                    true
                } else {
                    false
                }
            });
        }
        Err("did not finish in 400 rounds".into())
    }

    proptest! {
        #[test]
        fn a_rollout_never_exceeds_its_budgets_and_finishes(
            desired in 1u64..12,
            surge in 0u64..4,
            unavailable in 0u64..4,
            lags in proptest::collection::vec(0u8..4, 1..8),
        ) {
            let unavailable = if surge == 0 { unavailable.max(1) } else { unavailable };
            prop_assert_eq!(simulate(step, desired, surge, unavailable, &lags), Ok(()));
        }
    }

    /// The most copies that exist at once in a rollout of `desired` copies with `surge`, when a
    /// new copy reaches the ledger `lag` rounds after its creation and the step sees either
    /// every assignment (`counts_own_work`) or only what the ledger shows.
    fn peak(desired: u64, surge: u64, lag: u32, counts_own_work: bool) -> u64 {
        let b = Budget {
            surge,
            unavailable: 0,
        };
        let mut copies: Vec<(Copy, u32)> = (0..desired).map(|n| (old(n), 0)).collect();
        let mut next = desired;
        let mut most = 0;
        for _ in 0..200 {
            most = most.max(copies.len() as u64);
            let view: Vec<Copy> = copies
                .iter()
                .map(|c| c.0)
                .filter(|c| counts_own_work || c.on_ledger)
                .collect();
            if done(&copies.iter().map(|c| c.0).collect::<Vec<_>>(), desired) {
                break;
            }
            let s = step(desired, b, &view);
            for n in &s.delete {
                copies.retain(|c| c.0.n != *n);
            }
            for _ in 0..s.create {
                let c = Copy {
                    n: next,
                    current: true,
                    assigned: true,
                    on_ledger: false,
                };
                next += 1;
                copies.push((c, lag));
            }
            for (c, l) in &mut copies {
                if *l == 0 {
                    c.on_ledger = true;
                } else {
                    *l -= 1;
                }
            }
        }
        most
    }

    #[test]
    fn a_rollout_that_counted_only_the_ledger_would_surge_once_more_per_round_of_lag() {
        // 8 copies, surge 25 % = 2. A new copy reaches the ledger after B + G; with U the
        // period, `lag` passes run before it shows. Counting its own assignments, the rollout
        // never runs more than 10; counting the ledger alone it creates 2 more each blind pass.
        for lag in 0..4u32 {
            assert_eq!(peak(8, 2, lag, true), 10, "lag {lag}");
            assert_eq!(
                peak(8, 2, lag, false),
                8 + (2 * (u64::from(lag) + 1)).min(8),
                "lag {lag}"
            );
        }
    }

    #[test]
    fn the_checker_catches_a_step_that_ignores_a_budget() {
        fn greedy(desired: u64, b: Budget, copies: &[Copy]) -> Step {
            let s = step(desired, b, copies);
            let current = copies.iter().filter(|c| c.current && c.assigned).count() as u64;
            Step {
                create: desired.saturating_sub(current),
                ..s
            }
        }
        fn hasty(desired: u64, b: Budget, copies: &[Copy]) -> Step {
            let s = step(desired, b, copies);
            let old = copies
                .iter()
                .filter(|c| !c.current && c.assigned)
                .map(|c| c.n);
            Step {
                delete: old.collect(),
                ..s
            }
        }
        let lags = [2, 1];
        assert!(simulate(greedy, 4, 1, 0, &lags)
            .unwrap_err()
            .contains("copies counted"));
        assert!(simulate(hasty, 4, 1, 1, &lags)
            .unwrap_err()
            .contains("available"));
        assert_eq!(simulate(step, 4, 1, 1, &lags), Ok(()));
    }
}
