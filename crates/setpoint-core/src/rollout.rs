//! Rolling updates: the rule both drivers apply, free of I/O and of any clock.
//!
//! A workload's copies each carry the **generation** of the template they were created from;
//! copies of an older one are replaced under two budgets, Kubernetes' `maxSurge` and
//! `maxUnavailable` (25 % each by default, surge rounded up, unavailable rounded down):
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
//! says so.
//!
//! `named` cannot surge: two copies of one name would be a duplicate. It replaces name by name,
//! at most `unavailable` (at least 1) names at a time ([`named_step`]); the `named` controller
//! then creates each stopped name again, from the new generation.
//!
//! The runtime (`setpoint-runtime`'s `rollout`) and the lab (`setpoint-sim`'s general engine)
//! both build the [`Copy`](struct@Copy) list from their view and call [`step`] or [`named_step`], so the lab
//! predicts the runtime's surge.

use serde::{Deserialize, Serialize};

use crate::{Action, Name};

/// A budget: a number of copies, or a percentage of the desired count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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

impl Amount {
    /// Reads `"25%"` (a percentage, 0 to 100) or `"3"` (copies); `None` for anything else.
    pub fn from_text(text: &str) -> Option<Amount> {
        let t = text.trim();
        match t.strip_suffix('%') {
            Some(p) => p
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|p| *p <= 100)
                .map(Amount::Percent),
            None => t.parse::<u64>().ok().map(Amount::Copies),
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

impl Budget {
    /// The budgets for `desired` copies under `max_surge` and `max_unavailable`. If both round
    /// to 0, one copy may be unavailable (as Kubernetes does), or the rollout could never move.
    pub fn new(max_surge: Amount, max_unavailable: Amount, desired: u64) -> Budget {
        let surge = max_surge.resolve(desired, true);
        let mut unavailable = max_unavailable.resolve(desired, false);
        if surge == 0 && unavailable == 0 {
            unavailable = 1;
        }
        Budget { surge, unavailable }
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

/// Adds a name-by-name rollout's deletions (`extra`, numbers from [`named_step`]) to the
/// `named` controller's `action` towards `desired`: merged into its delete list, or as an
/// action of their own (having counted the copies on the ledger) when the controller had
/// nothing to do. Another kind of action is passed on unchanged (`named` returns only
/// [`Action::Named`]).
pub fn with_deletions(
    action: Option<Action>,
    extra: &[u64],
    desired: u64,
    copies: &[Copy],
) -> Option<Action> {
    if extra.is_empty() {
        return action;
    }
    let extra = extra.iter().copied().map(Name);
    match action {
        Some(Action::Named {
            target,
            counted,
            create,
            mut delete,
        }) => {
            delete.extend(extra);
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
            target: desired,
            counted: copies.iter().filter(|c| c.on_ledger).count() as u64,
            create: Vec::new(),
            delete: extra.collect(),
        }),
        other => other,
    }
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
    fn amounts_read_percentages_and_copies_and_refuse_the_rest() {
        assert_eq!(Amount::from_text("25%"), Some(Amount::Percent(25)));
        assert_eq!(Amount::from_text(" 3 "), Some(Amount::Copies(3)));
        assert_eq!(Amount::from_text("101%"), None);
        assert_eq!(Amount::from_text("-1"), None);
        assert_eq!(Amount::from_text("a%"), None);
        assert_eq!(
            Budget::new(Amount::Percent(25), Amount::Percent(25), 6),
            Budget {
                surge: 2,
                unavailable: 1
            }
        );
        assert_eq!(
            Budget::new(Amount::Copies(0), Amount::Percent(10), 3).unavailable,
            1,
            "two zeros allow one unavailable"
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
    fn a_named_rollouts_deletions_join_the_controllers_action_or_make_one() {
        let copies = [old(0), old(1)];
        assert_eq!(with_deletions(None, &[], 2, &copies), None);
        assert_eq!(
            with_deletions(None, &[1], 2, &copies),
            Some(Action::Named {
                target: 2,
                counted: 2,
                create: vec![],
                delete: vec![Name(1)],
            })
        );
        let own = Action::Named {
            target: 3,
            counted: 2,
            create: vec![Name(2)],
            delete: vec![Name(1)],
        };
        assert_eq!(
            with_deletions(Some(own), &[0, 1], 3, &copies),
            Some(Action::Named {
                target: 3,
                counted: 2,
                create: vec![Name(2)],
                delete: vec![Name(0), Name(1)],
            })
        );
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
