//! `gated`: read-your-writes.
//!
//! After every write the controller waits until the ledger has caught up with it, and skips
//! passes until then (the idea behind Kubernetes KEP-5647: compare the cache's version with the
//! version of your own last write before acting on the cache). A creation is caught up with once
//! none of its copies is in flight any more. A deletion at time `w` is caught up with once the
//! ledger reports every change before `w + 1`, whether or not the delete command arrived: a lost
//! command then shows as a copy still on the ledger, and the next pass sends another.
//!
//! It never acts twice on one stale picture, and it needs no TTL; the price is that it does
//! nothing else while it waits, so a copy that dies meanwhile is replaced one wait later. A
//! restart forgets the last write, and the first pass after it reads the ledger unguarded.

use crate::action::Action;
use crate::controller::toward;
use crate::view::{Batch, Desired, LedgerView, Time};

/// The last write of a [`Gated`] controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    /// It created this batch.
    Created(Batch),
    /// It sent delete commands at this time.
    Deleted(Time),
}

/// The `gated` controller: its last write, until the ledger has caught up with it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gated {
    last: Option<Write>,
}

impl Gated {
    /// Forgets the last write, as a restart does.
    pub fn restart(&mut self) {
        self.last = None;
    }

    /// One pass: nothing while the ledger lags the last write; otherwise the ledger-only
    /// correction, which becomes the new last write.
    pub fn pass<V: LedgerView>(&mut self, desired: Desired, view: &V) -> Option<Action> {
        if let Some(w) = self.last {
            let caught_up = match w {
                Write::Created(batch) => view.in_flight(batch) == 0,
                Write::Deleted(at) => view.reported_before() > at,
            };
            if !caught_up {
                return None;
            }
            self.last = None;
        }
        let action = toward(desired.copies, view.on_ledger(), view);
        self.last = match &action {
            Some(Action::Create { batch, .. }) => Some(Write::Created(*batch)),
            Some(Action::Delete { .. }) => Some(Write::Deleted(view.now())),
            _ => None,
        };
        action
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::Fake;
    use crate::view::CopyId;

    const SIX: Desired = Desired { copies: 6 };

    #[test]
    fn skips_passes_until_its_creation_reached_the_ledger() {
        let mut c = Gated::default();
        assert_eq!(c.pass(SIX, &Fake::new(4, 4)).unwrap().size(), 2);
        let mut v = Fake::new(4, 6);
        v.in_flight.insert(4, 1);
        assert_eq!(c.pass(SIX, &v), None);
        v.in_flight.insert(4, 0);
        v.shown = (0..6).map(CopyId).collect();
        assert_eq!(c.pass(SIX, &v), None);
    }

    #[test]
    fn a_deletion_is_caught_up_with_once_the_ledger_reports_past_it() {
        let mut c = Gated::default();
        let mut v = Fake::new(8, 8);
        v.now = 30;
        assert_eq!(c.pass(SIX, &v).unwrap().size(), 2);
        v.now = 45;
        v.reported_before = 30;
        assert_eq!(c.pass(SIX, &v), None, "the ledger lags the deletion");
        v.reported_before = 31;
        // The delete commands were lost: the ledger, caught up, still shows eight.
        assert_eq!(c.pass(SIX, &v).unwrap().size(), 2);
    }

    #[test]
    fn a_restart_reads_the_stale_ledger_unguarded() {
        let mut c = Gated::default();
        c.pass(SIX, &Fake::new(4, 4)).unwrap();
        c.restart();
        let mut v = Fake::new(4, 6);
        v.in_flight.insert(4, 2);
        assert_eq!(c.pass(SIX, &v).unwrap().size(), 2);
    }
}
