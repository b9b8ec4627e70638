//! `named`: deterministic identities instead of remembered counts.
//!
//! The desired copies of a workload are the names `0 … n − 1` (a driver prints them as
//! `{workload}-{k}`). A pass creates only the names that are neither on the ledger nor already
//! commanded by this controller, and deletes the names at or above `n`. Where copies run, a
//! creation under a name that already exists is a no-op. That rule, not the controller's memory,
//! is what makes a repeat harmless: after a restart the controller has forgotten what it
//! commanded, commands the missing names again, and the copies still starting under those names
//! absorb the repeat. No name ever runs twice.
//!
//! The memory is only an economy: it saves the commands a restart would repeat. A commanded name
//! is remembered while a copy of that name is in flight; once it reached the ledger (or died on
//! the way), the ledger answers for it.

use std::collections::BTreeSet;

use crate::action::Action;
use crate::view::{Desired, LedgerView, Name};

/// The `named` controller: the names it commanded whose copies are still in flight.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Named {
    commanded: BTreeSet<Name>,
}

impl Named {
    /// Forgets what it commanded, as a restart does.
    pub fn restart(&mut self) {
        self.commanded.clear();
    }

    /// One pass: creates the missing names below `desired`, deletes the names at or above it.
    pub fn pass<V: LedgerView>(&mut self, desired: Desired, view: &V) -> Option<Action> {
        let n = desired.copies;
        let on: BTreeSet<Name> = view.names_on_ledger().into_iter().collect();
        self.commanded.retain(|&k| view.name_in_flight(k));

        let wanted_on = on.range(..Name(n)).count() as u64;
        let wanted_commanded = self
            .commanded
            .range(..Name(n))
            .filter(|k| !on.contains(k))
            .count() as u64;
        let counted = wanted_on + wanted_commanded;

        let create: Vec<Name> = (0..n)
            .map(Name)
            .filter(|k| !on.contains(k) && !self.commanded.contains(k))
            .take((n - counted) as usize)
            .collect();
        let delete: Vec<Name> = on
            .range(Name(n)..)
            .chain(self.commanded.range(Name(n)..))
            .copied()
            .collect::<BTreeSet<Name>>()
            .into_iter()
            .collect();

        for k in &delete {
            self.commanded.remove(k);
        }
        self.commanded.extend(create.iter().copied());
        if create.is_empty() && delete.is_empty() {
            return None;
        }
        Some(Action::Named {
            target: n,
            counted,
            create,
            delete,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::Fake;

    const FOUR: Desired = Desired { copies: 4 };

    fn names(v: &[u64]) -> Vec<Name> {
        v.iter().copied().map(Name).collect()
    }

    #[test]
    fn creates_only_the_missing_names() {
        let mut c = Named::default();
        let a = c.pass(FOUR, &Fake::named(&[0, 2])).unwrap();
        assert_eq!(
            a,
            Action::Named {
                target: 4,
                counted: 2,
                create: names(&[1, 3]),
                delete: vec![]
            }
        );
    }

    #[test]
    fn does_not_command_a_name_twice_while_it_is_in_flight() {
        let mut c = Named::default();
        c.pass(FOUR, &Fake::named(&[0, 2])).unwrap();
        let mut v = Fake::named(&[0, 2]);
        v.names_in_flight = names(&[1, 3]).into_iter().collect();
        assert_eq!(c.pass(FOUR, &v), None);
    }

    #[test]
    fn after_a_restart_it_commands_the_names_again_and_relies_on_the_no_op() {
        let mut c = Named::default();
        c.pass(FOUR, &Fake::named(&[0, 2])).unwrap();
        c.restart();
        let mut v = Fake::named(&[0, 2]);
        v.names_in_flight = names(&[1, 3]).into_iter().collect();
        let a = c.pass(FOUR, &v).unwrap();
        assert_eq!(a.size(), 2, "the same two names, which the world absorbs");
    }

    #[test]
    fn deletes_names_at_or_above_the_desired_count() {
        let mut c = Named::default();
        let a = c.pass(FOUR, &Fake::named(&[0, 1, 2, 3, 4, 7])).unwrap();
        assert_eq!(
            a,
            Action::Named {
                target: 4,
                counted: 4,
                create: vec![],
                delete: names(&[4, 7])
            }
        );
    }

    #[test]
    fn scaling_down_also_deletes_commanded_names_still_in_flight() {
        let mut c = Named::default();
        c.pass(Desired { copies: 6 }, &Fake::named(&[0, 1, 2, 3]))
            .unwrap();
        let mut v = Fake::named(&[0, 1, 2, 3]);
        v.names_in_flight = names(&[4, 5]).into_iter().collect();
        let a = c.pass(FOUR, &v).unwrap();
        assert_eq!(
            a,
            Action::Named {
                target: 4,
                counted: 4,
                create: vec![],
                delete: names(&[4, 5])
            }
        );
    }
}
