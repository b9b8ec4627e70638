//! What a reconciliation pass returns.

use crate::view::{Batch, Name};

/// One correction, phrased as a target rather than an increment.
///
/// Every action carries the `target` the pass wants and the number of copies it `counted` as
/// already there. The size of the correction is their difference. Whoever carries the action out
/// can therefore tell a stale action from a fresh one, and a pass repeated on the same view asks
/// for the same end state again instead of "one more".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Bring the workload up to `target` copies: create the copies of `batch`, whose size is
    /// `target − counted`.
    Create {
        /// The copy count the pass wants.
        target: u64,
        /// The copies the pass counted as existing (on the ledger, plus work in flight if the
        /// controller counts it).
        counted: u64,
        /// The identities of the copies to create.
        batch: Batch,
    },
    /// Bring the workload down to `target` copies: send `counted − target` delete commands, one
    /// to each of the oldest copies the ledger shows. A command that reaches a copy that has
    /// already died counts as work but deletes nothing (CA25).
    Delete {
        /// The copy count the pass wants.
        target: u64,
        /// The copies the pass counted as existing.
        counted: u64,
    },
    /// Bring a workload of named copies to exactly the names `0 … target − 1`: create each name
    /// of `create` and send one delete command to each name of `delete`. Where copies run, a
    /// creation under a name that already exists (starting or running) does nothing, and a
    /// delete command reaches the copies of that name that exist, if any.
    Named {
        /// The number of names the pass wants running.
        target: u64,
        /// The wanted names the pass counted as existing (on the ledger or commanded earlier).
        counted: u64,
        /// The names to create, ascending.
        create: Vec<Name>,
        /// The names to delete, ascending.
        delete: Vec<Name>,
    },
}

impl Action {
    /// How many copies the action creates, or how many delete commands it sends (for
    /// [`Action::Named`], both together).
    pub fn size(&self) -> u64 {
        match self {
            Action::Create { batch, .. } => batch.count,
            Action::Delete { target, counted } => counted - target,
            Action::Named { create, delete, .. } => (create.len() + delete.len()) as u64,
        }
    }
}
