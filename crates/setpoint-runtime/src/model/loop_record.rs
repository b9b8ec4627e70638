//! A workload loop's record in the store, `/loops/{name}` ([`LoopRecord`]): its crash-loop
//! backoff, why it is idle, the rolling update under way. The rules that read and write it are
//! in [`super::loops`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::backoff::BackoffState;
use crate::store::Revision;

/// Why a pass that is not converged acted on nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdleReason {
    /// It wants copies and no node has reported within the node timeout.
    NoLiveNode,
    /// It waits for copies it commanded (created or deleted) to show on the ledger.
    WaitingForExpectations,
    /// `gated`: it waits until the ledger has caught up with its own last write.
    GatedOnOwnWrite,
    /// Its copies failed to start; it creates none before the next try.
    BackingOff,
    /// A rolling update stopped making progress within its deadline.
    RolloutPaused,
    /// `named`: copies it wants are held on lost nodes (their agent may be paused or dead with
    /// the copies still running); it waits for each node to be claimed again or forgotten.
    WaitingForLostNode,
    /// The store refused the pass's write as too big ([`crate::store::StoreError::TooBig`]);
    /// the loop record's [`LoopRecord::refused`] has the store's words.
    WriteRefused,
}

impl IdleReason {
    /// The reason in words, as logs, `get` and `status` show it.
    pub fn describe(self) -> &'static str {
        match self {
            IdleReason::NoLiveNode => "no live node",
            IdleReason::WaitingForExpectations => "waiting for expectations",
            IdleReason::GatedOnOwnWrite => "gated on its own write",
            IdleReason::BackingOff => "backing off",
            IdleReason::RolloutPaused => "rollout paused",
            IdleReason::WaitingForLostNode => "waiting for a lost node to confirm its copies ended",
            IdleReason::WriteRefused => "the store refused its write as too big",
        }
    }

    /// The reason in words, naming the nodes waited for (the loop record's
    /// [`LoopRecord::waiting_for`]) and what to do about them.
    pub fn describe_with(self, waiting_for: &[String]) -> String {
        match (self, waiting_for) {
            (IdleReason::WaitingForLostNode, [node]) => format!(
                "waiting for {node} to confirm its copies ended (setpoint node forget {node})"
            ),
            (IdleReason::WaitingForLostNode, [_, _, ..]) => format!(
                "waiting for {} to confirm their copies ended (setpoint node forget NODE, for \
                 each node that is gone)",
                waiting_for.join(", ")
            ),
            (r, _) => r.describe().to_owned(),
        }
    }
}

/// An idle stretch: its reason and when it began.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Idle {
    /// Why.
    pub reason: IdleReason,
    /// Since when, in store milliseconds.
    pub since_ms: u64,
    /// Whether the log has said so.
    #[serde(default)]
    pub announced: bool,
}

/// A workload loop's record in the store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopRecord {
    /// The uid of the workload it belongs to.
    pub uid: Revision,
    /// Why the loop is idle, while it is idle and not converged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<Idle>,
    /// Backoff by key: the workload's name, or for `named` each copy name.
    #[serde(default)]
    pub backoff: BTreeMap<String, BackoffState>,
    /// The rolling update under way, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutRecord>,
    /// `named`: the lost nodes whose held copies the loop waits to hear have ended, in name
    /// order ([`crate::model::view::WorkloadView::waiting_for`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_for: Vec<String>,
    /// The store's words when it refused the last pass's write as too big
    /// ([`IdleReason::WriteRefused`]); cleared by the next pass that commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// A rolling update under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutRecord {
    /// The generation it rolls out.
    pub generation: u64,
    /// When it began (store milliseconds).
    pub started_ms: u64,
    /// When it last made progress: a copy of the new generation became available, or an old
    /// one went.
    pub progress_ms: u64,
    /// Copies of the new generation available at the last progress.
    pub updated: u64,
    /// Copies of older generations left at the last progress.
    pub old: u64,
    /// No progress within the progress deadline: the rollout stopped.
    pub stalled: bool,
}
