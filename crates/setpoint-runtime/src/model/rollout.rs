//! Rolling updates: the runtime's side, free of I/O. The rule itself (the budgets, [`step`],
//! [`named_step`], [`done`]) is `setpoint_core::rollout`, which the lab applies too.
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

pub use setpoint_core::rollout::{done, has_old, named_step, step, Amount, Budget, Copy, Step};
use setpoint_core::{Action, Name};

pub use super::records::{RolloutPolicy, DEFAULT_PROGRESS_DEADLINE_MS};

use super::keys::workload_key;
use super::records::{decode, WorkloadSpec};
use crate::store::Read;

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
pub fn stored_spec(read: &Read, name: &str) -> Option<WorkloadSpec> {
    let key = workload_key(name);
    let e = read.entries.iter().find(|e| e.key == key)?;
    decode::<WorkloadSpec>(e).ok().map(|s| s.value)
}

/// `new` with the generation it gets when applied over what `read` stores.
pub fn with_generation(read: &Read, new: &WorkloadSpec) -> WorkloadSpec {
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
        (old.restart != new.restart, "restart"),
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
    setpoint_core::rollout::with_deletions(action, &extra, spec.copies, copies)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
