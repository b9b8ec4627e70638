//! Recovery after a restart: what the driver finds ([`Recovery`], by the pure rule
//! [`recovery_from`]).

use super::{CopyRecord, NodeState};
use crate::model::Phase;
use crate::process::{self, Marked};

/// One state-file record as the driver found it after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundRecord {
    /// The record as the state file holds it.
    pub record: CopyRecord,
    /// The live process proven to be this copy (pid, start ticks): the recorded pid with its
    /// start time and nonce, or, for a record without a pid, a marked process holding its
    /// nonce. `None`: no such process lives.
    pub process: Option<(u32, u64)>,
}

/// What the driver found when asked to [`AgentOutput::Recover`](super::AgentOutput::Recover).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The state file's records, each with its live process if one is proven its own.
    pub records: Vec<FoundRecord>,
    /// The live processes carrying the agent's mark that no record claimed.
    pub unclaimed: Vec<Marked>,
    /// The agent's own user id (a marked process of another user is left alone).
    pub own_uid: u32,
}

/// What an agent finds after a restart, from its state file (`saved`, `None` if there is
/// none), the live processes carrying its mark (`marked`) and its user id (`me`): each record
/// with its live process if that is proven its own (a record without a pid by a marked process
/// holding its nonce, a record with one by `proves_own(pid, start_ticks, nonce)`), and the
/// marked processes no record claims. Pure, so that the tokio driver (on the state file and
/// `/proc`) and the chaos world (on the simulated node's) answer [`AgentOutput::Recover`](super::AgentOutput::Recover)
/// by one rule.
pub fn recovery_from(
    saved: Option<NodeState>,
    mut marked: Vec<process::Marked>,
    me: u32,
    proves_own: impl Fn(u32, u64, &str) -> bool,
) -> Recovery {
    let mut records = Vec::new();
    for record in saved.map(|s| s.copies).unwrap_or_default() {
        let mut process = None;
        if record.phase != Phase::Exited && record.pid == 0 && !record.nonce.is_empty() {
            let own = marked.iter().position(|m| {
                m.copy == record.assignment.copy
                    && m.uid == me
                    && m.nonce.as_deref() == Some(record.nonce.as_str())
            });
            if let Some(i) = own {
                let m = marked.remove(i);
                process = Some((m.pid, m.start_ticks));
            }
        }
        if process.is_none()
            && record.phase != Phase::Exited
            && record.pid != 0
            && proves_own(record.pid, record.start_ticks, &record.nonce)
        {
            marked.retain(|m| m.pid != record.pid);
            process = Some((record.pid, record.start_ticks));
        }
        records.push(FoundRecord { record, process });
    }
    Recovery {
        records,
        unclaimed: marked,
        own_uid: me,
    }
}
