//! What a reconciliation pass may look at.
//!
//! The view is deliberately narrow. A pass sees how many copies the ledger shows, which is the
//! lagging picture built from node reports, and, for batches it created itself, how many of those
//! copies still exist without having reached the ledger. It does not see the world.
//!
//! The controllers beyond the lesson's two need a little more, all of it still the ledger's
//! picture: which copies it shows ([`LedgerView::shows`], [`LedgerView::oldest_on_ledger`]), how far
//! it has caught up with the world ([`LedgerView::reported_before`]), and, for copies with
//! deterministic names, which names it shows and whether a name is still on its way
//! ([`LedgerView::names_on_ledger`], [`LedgerView::name_in_flight`]).

use std::fmt;

/// A point in time, in whole ticks of the driver's clock. The simulator's tick is one second.
pub type Time = u64;

/// The declared state of one workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desired {
    /// How many copies should run, as a count of copies.
    pub copies: u64,
}

/// The deterministic identity of one copy: the position of the copy in its workload's creation
/// order, starting at 0. A driver names the copy `{workload}-{n}`, so a repeated creation of the
/// same identity is a lookup that finds it already present, never a second copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CopyId(pub u64);

impl fmt::Display for CopyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The deterministic name of a copy: the `k` of `{workload}-{k}`. The `named` controller wants
/// exactly the names `0 … n − 1` to run; a copy created under a name that already runs is not
/// created again where copies run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(pub u64);

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The copies one pass created: identities `first`, `first + 1`, …, `first + count − 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Batch {
    /// The identity of the first copy of the batch.
    pub first: CopyId,
    /// How many copies the batch holds.
    pub count: u64,
}

impl Batch {
    /// The identity one past the last copy of the batch.
    pub fn end(&self) -> u64 {
        self.first.0 + self.count
    }
}

/// The observed state a pass reads: a ledger that lags the world.
///
/// Implementations must keep one promise that controllers rely on: once a copy stops being in
/// flight (it reached the ledger, or it is gone), it never becomes in flight again. That lets a
/// controller forget a batch as soon as none of it is in flight.
pub trait LedgerView {
    /// The time of this pass, in the driver's ticks.
    fn now(&self) -> Time;

    /// How many copies the ledger shows now: copies whose start has been reported and whose end
    /// has not been reported yet. A copy that has already died but whose death has not reached the
    /// ledger is still counted: that is the staleness the lesson measures.
    fn on_ledger(&self) -> u64;

    /// How many copies of `batch` still exist and have not yet reached the ledger: work in
    /// flight. A copy that died or was deleted before reaching the ledger is not in flight.
    fn in_flight(&self, batch: Batch) -> u64;

    /// The identity the next created copy will receive. A pass that creates copies names them
    /// from here, so the identities are decided by the pass, not by whoever carries it out.
    fn next_copy(&self) -> CopyId;

    /// Whether the ledger shows `copy` now. A copy the ledger has not heard of yet, or whose end it
    /// has heard of, is not shown.
    fn shows(&self, copy: CopyId) -> bool;

    /// The copies that `n` delete commands would reach: the `n` oldest (lowest [`CopyId`]) copies
    /// the ledger shows, oldest first; fewer when the ledger shows fewer (CA25).
    fn oldest_on_ledger(&self, n: u64) -> Vec<CopyId>;

    /// The copies of `batch` in flight (those [`LedgerView::in_flight`] counts), newest (highest
    /// [`CopyId`]) first. A controller that counted them sends its delete commands to them before
    /// the ledger's copies ([`crate::Controller::delete_targets`]).
    fn in_flight_copies(&self, batch: Batch) -> Vec<CopyId>;

    /// How recent the ledger's word on `copy` (one it shows) is: every change of the copy
    /// before this time would be on the ledger. By default [`LedgerView::reported_before`],
    /// the age of the whole ledger; a driver whose ledger is made of reports of different
    /// ages (the runtime's, one per node) answers per copy.
    fn seen_at(&self, copy: CopyId) -> Time {
        let _ = copy;
        self.reported_before()
    }

    /// Whether the reports show `copy`, one not on the ledger yet, started: its process is up,
    /// not ready yet. A controller deleting its own work in flight takes those not started
    /// first ([`crate::Controller::delete_targets`]). A view that cannot tell answers no, the
    /// default.
    fn started(&self, copy: CopyId) -> bool {
        let _ = copy;
        false
    }

    /// Whether a delete command already reached `copy` (one the ledger shows): its end is on
    /// its way to the ledger, and another command to it is harmless. A view that cannot tell
    /// answers no, the default.
    fn commanded(&self, copy: CopyId) -> bool {
        let _ = copy;
        false
    }

    /// How far the ledger has caught up with the world: every change of the world (a copy
    /// starting or ending) that happened at a time before the returned time is on the ledger.
    /// With a fixed report delay `G` this is `now + 1 − G`; an outage or a stale view holds it
    /// back.
    fn reported_before(&self) -> Time;

    /// The names the ledger shows, ascending and without repeats. Views of copies without names
    /// show none, which is the default.
    fn names_on_ledger(&self) -> Vec<Name> {
        Vec::new()
    }

    /// Whether a copy called `name` still exists without having reached the ledger: a named
    /// creation in flight. Views of copies without names have none, which is the default.
    fn name_in_flight(&self, name: Name) -> bool {
        let _ = name;
        false
    }
}
