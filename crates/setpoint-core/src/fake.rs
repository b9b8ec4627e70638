//! A hand-set [`LedgerView`] for the unit tests of the controllers.

use std::collections::{BTreeMap, BTreeSet};

use crate::view::{Batch, CopyId, LedgerView, Name, Time};

/// A view whose every answer is set by hand.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fake {
    /// The time of the pass.
    pub now: Time,
    /// The copies the ledger shows.
    pub shown: BTreeSet<CopyId>,
    /// Copies in flight, per batch start.
    pub in_flight: BTreeMap<u64, u64>,
    /// The identity of the next copy.
    pub next: u64,
    /// What [`LedgerView::reported_before`] answers.
    pub reported_before: Time,
    /// The names the ledger shows.
    pub names: BTreeSet<Name>,
    /// The names in flight.
    pub names_in_flight: BTreeSet<Name>,
    /// The copies shown that a delete command reached.
    pub commanded: BTreeSet<CopyId>,
    /// The copies in flight the reports show started.
    pub started: BTreeSet<CopyId>,
}

impl Fake {
    /// A ledger that shows copies `0 … ledger − 1`; the next copy is `next`.
    pub fn new(ledger: u64, next: u64) -> Self {
        Fake {
            shown: (0..ledger).map(CopyId).collect(),
            next,
            ..Fake::default()
        }
    }

    /// A ledger that shows the given names (and as many copies).
    pub fn named(names: &[u64]) -> Self {
        Fake {
            shown: (0..names.len() as u64).map(CopyId).collect(),
            names: names.iter().copied().map(Name).collect(),
            next: names.len() as u64,
            ..Fake::default()
        }
    }
}

impl LedgerView for Fake {
    fn now(&self) -> Time {
        self.now
    }
    fn on_ledger(&self) -> u64 {
        self.shown.len() as u64
    }
    fn in_flight(&self, batch: Batch) -> u64 {
        self.in_flight.get(&batch.first.0).copied().unwrap_or(0)
    }
    fn next_copy(&self) -> CopyId {
        CopyId(self.next)
    }
    fn shows(&self, copy: CopyId) -> bool {
        self.shown.contains(&copy)
    }
    fn oldest_on_ledger(&self, n: u64) -> Vec<CopyId> {
        self.shown.iter().copied().take(n as usize).collect()
    }
    fn commanded(&self, copy: CopyId) -> bool {
        self.commanded.contains(&copy)
    }
    fn started(&self, copy: CopyId) -> bool {
        self.started.contains(&copy)
    }
    /// The fake says only how many of a batch are in flight: it takes them to be its newest.
    fn in_flight_copies(&self, batch: Batch) -> Vec<CopyId> {
        let k = self.in_flight(batch).min(batch.count);
        (batch.end() - k..batch.end()).rev().map(CopyId).collect()
    }
    fn reported_before(&self) -> Time {
        self.reported_before
    }
    fn names_on_ledger(&self) -> Vec<Name> {
        self.names.iter().copied().collect()
    }
    fn name_in_flight(&self, name: Name) -> bool {
        self.names_in_flight.contains(&name)
    }
}
