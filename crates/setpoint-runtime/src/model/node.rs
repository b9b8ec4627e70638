//! Node identity and liveness: each agent holds its node's name under a store lease.
//!
//! - **One agent per node name.** An agent creates `/nodes/{name}` under a fresh lease, and
//!   only if the key is absent (the claim of [`crate::agent::AgentCore`]). A second agent with the same name, on any machine,
//!   finds the key and is refused ([`NodeError::Taken`]). On one data directory, a lock file
//!   (`{state_dir}/{name}.lock`, held with `flock` for the agent's lifetime) refuses a second
//!   agent even before the store is asked ([`NodeError::Locked`]). The kernel drops the lock when
//!   its holder dies, so an agent that holds it knows that the previous agent of this node *on
//!   this data directory* is gone: it may take over that agent's lease and adopt its copies.
//! - **A node is live while its lease is.** Passes treat a node without `/nodes/{name}` as lost:
//!   its copies leave the ledger, its assignments are removed and the controller replaces them
//!   elsewhere. No controller clock decides it; the store's lease expiry does.
//! - **An agent fences itself.** The agent renews its lease every quarter TTL (without waiting
//!   for an earlier renewal that hangs on a dead store member). It measures the
//!   lease's end from the moment it *sent* the last renewal that succeeded, which is no later
//!   than the store's own deadline. If renewals stop succeeding (a partition, a stalled store, a
//!   long pause), it sends SIGTERM to every copy at 3/4 of the TTL and SIGKILL at 9/10, so its
//!   copies are gone before the store can let anyone reassign their names. It does this from its
//!   own clock, without waiting to hear from the store. It then gives the old lease up and
//!   claims the name again under a new one. [`crate::agent`] holds this logic, without I/O.
//!
//! What it cannot fence: an agent that is itself killed (SIGKILL) or paused (SIGSTOP, a long
//! GC pause) while its copies run on. Its copies outlive it, and its lease ends at the store
//! all the same. For a workload that reuses names (`named`) that would let the name run twice,
//! so a lost node's `named` assignments are **held**, not freed, until it is confirmed that
//! their copies ended ([`crate::model::view::WorkloadView::held_assignments`]):
//! - the node's last report shows the copy exited (an agent that shut down cleanly), or
//! - the node is claimed again and its new agent reports the copy exited (a resumed agent
//!   fences first; a restarted one adopts the copy or finds it dead), or
//! - an operator confirms the node is gone: `setpoint node forget NODE` writes a
//!   [`Forgotten`] record at `/forgotten/{node}` ([`forget`]), which releases every assignment
//!   created on the node at or before its revision.
//!
//! Workloads that give every replacement a new name keep the old rule: a lost node's
//! assignments are removed at once (no identity can run twice; an extra copy is overshoot).
//! `docs/runtime.md` ("Lost nodes") states the rule and its cost.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use super::keys::{forgotten_key, node_key, FORGOTTEN, NODES};

use super::keys::{placements_of, report_key};
use super::records::{decode, encode};
use crate::store::{LeaseId, Revision, Store, StoreError, Txn};

/// The record an agent keeps at `/nodes/{name}` under its lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The node's name.
    pub node: String,
    /// The machine the agent runs on (`/etc/machine-id`, else the host name).
    pub host: String,
    /// The agent's state directory, canonical: with `host`, where the agent lives.
    pub place: String,
    /// The agent's process id.
    pub agent_pid: u32,
    /// When the agent took the name, in store milliseconds.
    pub acquired_ms: u64,
    /// The lease's time to live, in milliseconds.
    pub ttl_ms: u64,
    /// The agent's reporting period R, in milliseconds.
    pub report_every_ms: u64,
    /// The store lease the record lives under (set when the name is claimed).
    #[serde(default)]
    pub lease: LeaseId,
}

impl NodeRecord {
    /// Whether `other` was written by an agent at the same place (same machine, same state
    /// directory) as this one.
    pub fn same_place(&self, other: &NodeRecord) -> bool {
        self.host == other.host && self.place == other.place
    }
}

/// This machine's identity: `/etc/machine-id`, or the host name if there is none.
pub fn host_id() -> String {
    let id = std::fs::read_to_string("/etc/machine-id")
        .or_else(|_| std::fs::read_to_string("/proc/sys/kernel/hostname"))
        .unwrap_or_default();
    match id.trim() {
        "" => "unknown-host".to_owned(),
        id => id.to_owned(),
    }
}

/// Why an agent may not run as its node.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Another live agent holds the node's name in the store.
    #[error(
        "node '{node}' is already held by agent pid {pid} on host {host} ({place}): a node name \
         runs one agent; stop that agent or choose another --node"
    )]
    Taken {
        /// The node's name.
        node: String,
        /// The holder's process id.
        pid: u32,
        /// The holder's machine.
        host: String,
        /// The holder's state directory.
        place: String,
    },
    /// Another agent of this node runs on the same data directory.
    #[error(
        "node '{node}' already has an agent on {dir} (lock {lock} is held): a node name runs one \
         agent; stop it first"
    )]
    Locked {
        /// The node's name.
        node: String,
        /// The state directory.
        dir: String,
        /// The lock file.
        lock: String,
    },
    /// The lock file could not be created or locked.
    #[error("cannot lock {path}: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl NodeError {
    /// Whether the user must fix this (a name in use), rather than a failure to retry.
    pub fn is_refusal(&self) -> bool {
        matches!(self, NodeError::Taken { .. } | NodeError::Locked { .. })
    }
}

/// An exclusive lock on one node's name inside a state directory, held until dropped (or until
/// the process dies, when the kernel releases it).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Locks `{state_dir}/{node}.lock`, or fails with [`NodeError::Locked`] if another process
    /// holds it.
    pub fn acquire(state_dir: &Path, node: &str) -> Result<Self, NodeError> {
        let path = state_dir.join(format!("{node}.lock"));
        let io = |source| NodeError::Io {
            path: path.clone(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io)?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Self { _file: file }),
            Err(rustix::io::Errno::WOULDBLOCK) => Err(NodeError::Locked {
                node: node.to_owned(),
                dir: state_dir.display().to_string(),
                lock: path.display().to_string(),
            }),
            Err(e) => Err(io(e.into())),
        }
    }
}

/// An operator's confirmation, at `/forgotten/{node}`, that the copies of a lost node ended
/// (the machine is gone, or its agent and copies were killed by hand).
///
/// It covers only what existed when it was written: an assignment on the node whose
/// `create_revision` is at most `revision` is released while the node is lost. Copies placed
/// on the node after a later claim are held again if that claim is lost too.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forgotten {
    /// The node's name.
    pub node: String,
    /// The store revision the confirmation was decided on: it covers assignments created at
    /// or before it.
    pub revision: Revision,
    /// When it was written, in store milliseconds.
    pub forgotten_ms: u64,
}

/// Why `setpoint node forget` refused.
#[derive(Debug, thiserror::Error)]
pub enum ForgetError {
    /// The store knows no such node: no lease, no report, no assignment.
    #[error(
        "no node named '{0}': accepted a node that has reported or has copies assigned (see \
         'setpoint status')"
    )]
    Unknown(String),
    /// The node's agent holds its lease: it is not lost.
    #[error(
        "node '{node}' is live (agent pid {pid} on host {host} holds its lease): only a lost \
         node can be forgotten; stop its agent first"
    )]
    Live {
        /// The node's name.
        node: String,
        /// The agent's process id.
        pid: u32,
        /// The agent's machine.
        host: String,
    },
    /// The node was claimed, or others wrote, while the confirmation was written.
    #[error("node '{0}' changed while it was being forgotten; try again")]
    Contended(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ForgetError {
    /// Whether the user must fix this (a name that is wrong or a node that is live).
    pub fn is_refusal(&self) -> bool {
        matches!(self, ForgetError::Unknown(_) | ForgetError::Live { .. })
    }
}

/// Confirms that lost node `node`'s copies ended: writes its [`Forgotten`] record, only while
/// `/nodes/{node}` is absent (a compare-and-set, so a claim that races it wins and the
/// confirmation fails). Returns the record and how many assignments it releases.
pub fn forget(store: &dyn Store, node: &str) -> Result<(Forgotten, usize), ForgetError> {
    let key = node_key(node);
    let placed = placements_of(node);
    let report = report_key(node);
    let read = store.read(&[&key, &placed, &report])?;
    if let Some(e) = read.entries.iter().find(|e| e.key == key) {
        let r = decode::<NodeRecord>(e)?.value;
        return Err(ForgetError::Live {
            node: node.to_owned(),
            pid: r.agent_pid,
            host: r.host,
        });
    }
    let assigned = read
        .entries
        .iter()
        .filter(|e| e.key.starts_with(&placed))
        .count();
    if assigned == 0 && !read.entries.iter().any(|e| e.key == report) {
        return Err(ForgetError::Unknown(node.to_owned()));
    }
    let record = Forgotten {
        node: node.to_owned(),
        revision: read.revision,
        forgotten_ms: store.now_ms(),
    };
    let txn = Txn::new()
        .expect(&key, 0)
        .put(forgotten_key(node), encode(&record));
    match store.commit(&txn) {
        Ok(_) => Ok((record, assigned)),
        Err(e) if e.is_conflict() => Err(ForgetError::Contended(node.to_owned())),
        Err(e) => Err(e.into()),
    }
}

/// For tests of passes: marks `node` live, as its agent's lease would, with a lease of an hour.
pub fn fake_node(store: &dyn Store, node: &str) -> Result<LeaseId, StoreError> {
    let lease = store.grant(Duration::from_secs(3600))?;
    let record = NodeRecord {
        node: node.to_owned(),
        host: "test".into(),
        place: "test".into(),
        agent_pid: 0,
        acquired_ms: store.now_ms(),
        ttl_ms: 3_600_000,
        report_every_ms: 1_000,
        lease,
    };
    let key = node_key(node);
    let old = store.get(&key)?.map_or(0, |e| e.mod_revision);
    store.commit(
        &Txn::new()
            .expect(&key, old)
            .put_leased(&key, encode(&record), lease),
    )?;
    Ok(lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `forget` of a node the store never knew, or of a live one, is the operator's mistake
    /// (the CLI exits 2 and says what is accepted); a race or a store that fails is not (exit
    /// 1) (mutant 721 of the mutation sample took every error for a failure).
    #[test]
    fn forgetting_an_unknown_or_a_live_node_is_a_refusal_and_a_race_or_a_store_failure_is_not() {
        let store = crate::store::MemoryStore::new();
        let unknown = forget(&store, "nobody").unwrap_err();
        assert!(matches!(unknown, ForgetError::Unknown(_)), "{unknown:?}");
        fake_node(&store, "a").unwrap();
        let live = forget(&store, "a").unwrap_err();
        assert!(matches!(live, ForgetError::Live { .. }), "{live:?}");
        assert!(unknown.is_refusal() && live.is_refusal());
        assert!(!ForgetError::Contended("a".into()).is_refusal());
        assert!(!ForgetError::Store(StoreError::Unavailable("down".into())).is_refusal());
    }

    /// Only a compare-and-set that fails is a race to try again; a store that fails the write
    /// is its own error, so the operator is told what is wrong with the store, not to retry
    /// (mutant 564 of the mutation sample called every failure contended).
    #[test]
    fn forget_says_contended_only_for_a_race_and_passes_a_stores_failure_through() {
        // b has reported once (what forget reads is only that the report is there).
        let store = crate::store::MemoryStore::new();
        store
            .commit(&Txn::new().put(report_key("b"), "{}"))
            .unwrap();
        let refusing = crate::testing::refusing(store, 0);
        let err = forget(&refusing, "b").unwrap_err();
        assert!(
            matches!(&err, ForgetError::Store(StoreError::TooBig(_))),
            "{err}"
        );
        assert!(!err.is_refusal());
    }
    #[test]
    fn a_lock_on_the_data_directory_refuses_a_second_holder_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let held = DirLock::acquire(dir.path(), "a").unwrap();
        let err = DirLock::acquire(dir.path(), "a").unwrap_err();
        assert!(err.is_refusal(), "{err}");
        assert!(DirLock::acquire(dir.path(), "b").is_ok());
        drop(held);
        assert!(DirLock::acquire(dir.path(), "a").is_ok());
    }
}
