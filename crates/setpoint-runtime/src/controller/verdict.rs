//! What a part's finished piece of work means for the whole machine: nothing, a line to log,
//! the end of this host's leadership, or the end of the host.

use crate::store::StoreError;

/// How a collection, a compaction (or another piece of the leader's work) ended, for the
/// [`Host`](super::Host) to act on.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Nothing to say.
    Quiet,
    /// Log this line as the controller.
    Say(String),
    /// `/leader` is not this host's any more: it follows.
    Deposed,
    /// The store is gone for good: the host stops.
    Lost(StoreError),
}
