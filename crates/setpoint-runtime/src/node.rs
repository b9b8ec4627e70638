//! Node identity and liveness: each agent holds its node's name under a store lease.
//!
//! - **One agent per node name.** An agent creates `/nodes/{name}` under a fresh lease, and
//!   only if the key is absent ([`claim`]). A second agent with the same name, on any machine,
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
//!   claims the name again under a new one ([`Fence`]).
//!
//! What it cannot fence: an agent that is itself killed (SIGKILL) or paused while its copies run
//! on. Its copies outlive it, and once its lease expires their names can be reassigned. A
//! restarted agent reaps them (they are no longer assigned); `docs/runtime.md` lists this window.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::model::{decode, encode};
use crate::process;
use crate::store::{LeaseId, Revision, Store, StoreError, Txn};

/// The key prefix of node leases.
pub const NODES: &str = "/nodes/";

/// The key of `node`'s lease record.
pub fn node_key(node: &str) -> String {
    format!("{NODES}{node}")
}

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
    /// The store lease the record lives under (set by [`claim`]).
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

/// A node name held under a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The lease the record lives under.
    pub lease: LeaseId,
    /// The record's `mod_revision` as this agent wrote it.
    pub revision: Revision,
    /// The lease's time to live, in milliseconds (an adopted lease keeps its own).
    pub ttl_ms: u64,
    /// Whether the lease was taken over from an earlier agent at the same place.
    pub adopted: bool,
}

/// Claims `record.node` for this agent: creates `/nodes/{node}` under a new lease of
/// `record.ttl_ms` if it is absent. If an agent at the same place holds it (one that died: the
/// caller holds the [`DirLock`]), takes that lease over instead, so the node never goes lost
/// across a restart. Any other holder means [`NodeError::Taken`].
pub fn claim(store: &dyn Store, record: &NodeRecord) -> Result<Claim, NodeError> {
    let key = node_key(&record.node);
    for _ in 0..10 {
        match store.get(&key)? {
            None => {
                let lease = store.grant(Duration::from_millis(record.ttl_ms))?;
                let mine = NodeRecord {
                    lease,
                    ..record.clone()
                };
                let txn = Txn::new()
                    .expect(&key, 0)
                    .put_leased(&key, encode(&mine), lease);
                match store.commit(&txn) {
                    Ok(revision) => {
                        return Ok(Claim {
                            lease,
                            revision,
                            ttl_ms: record.ttl_ms,
                            adopted: false,
                        })
                    }
                    Err(e) => {
                        let _ = store.revoke(lease);
                        if !e.is_conflict() {
                            return Err(e.into());
                        }
                    }
                }
            }
            Some(entry) => {
                let held: NodeRecord = decode(&entry)?.value;
                let Some(lease) = entry.lease.filter(|_| held.same_place(record)) else {
                    return Err(NodeError::Taken {
                        node: record.node.clone(),
                        pid: held.agent_pid,
                        host: held.host,
                        place: held.place,
                    });
                };
                match store.keep_alive(lease) {
                    Ok(()) => {
                        let mine = NodeRecord {
                            ttl_ms: held.ttl_ms,
                            lease,
                            ..record.clone()
                        };
                        let txn = Txn::new().expect(&key, entry.mod_revision).put_leased(
                            &key,
                            encode(&mine),
                            lease,
                        );
                        match store.commit(&txn) {
                            Ok(revision) => {
                                return Ok(Claim {
                                    lease,
                                    revision,
                                    ttl_ms: held.ttl_ms,
                                    adopted: true,
                                })
                            }
                            Err(e)
                                if e.is_conflict() || matches!(e, StoreError::LeaseExpired(_)) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                    // It expired between the read and now: the key goes with it.
                    Err(StoreError::LeaseExpired(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(StoreError::Unavailable(format!("{key} kept changing while this agent claimed it")).into())
}

/// When an agent whose last successful renewal was *sent* at `sent` must act, for a lease of
/// `ttl`: SIGTERM to every copy at 3/4 of the TTL, SIGKILL at 9/10. Both come before the store
/// can expire the lease, which is at least `ttl` after `sent`.
pub fn fence_times(sent: Instant, ttl: Duration) -> (Instant, Instant) {
    (sent + ttl * 3 / 4, sent + ttl * 9 / 10)
}

/// How often an agent renews a lease of `ttl`: every quarter of it.
pub fn renew_every(ttl: Duration) -> Duration {
    (ttl / 4).max(Duration::from_millis(10))
}

/// Where a node's lease stands, shared between the agent's loop and its lease keeper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// The lease is held: copies may run.
    Held(LeaseId),
    /// The lease could not be renewed in time: every copy has been (or is being) stopped, and
    /// no copy may start until the name is claimed again.
    Fenced,
    /// Another agent took the name while this one was fenced: this agent must exit.
    Refused,
}

/// The process groups of an agent's running copies (pid, start ticks), which the fence stops
/// without asking anyone, and the lease's state.
#[derive(Debug)]
pub struct Fence {
    groups: Mutex<Vec<(u32, u64)>>,
    state: Mutex<LeaseState>,
    refusal: Mutex<Option<String>>,
}

impl Fence {
    /// A fence for a lease that is held.
    pub fn new(lease: LeaseId) -> Arc<Self> {
        Arc::new(Self {
            groups: Mutex::new(Vec::new()),
            state: Mutex::new(LeaseState::Held(lease)),
            refusal: Mutex::new(None),
        })
    }

    /// Tells the fence which copies run now.
    pub fn set_groups(&self, groups: Vec<(u32, u64)>) {
        *self.groups.lock().unwrap_or_else(|p| p.into_inner()) = groups;
    }

    /// The lease's state.
    pub fn state(&self) -> LeaseState {
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_state(&self, s: LeaseState) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }

    /// Why the agent was refused, once [`LeaseState::Refused`].
    pub fn refusal(&self) -> Option<String> {
        self.refusal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Signals every known copy's group (verified by start time for SIGKILL).
    fn signal_all(&self, kill: bool) -> usize {
        let groups = self
            .groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut n = 0;
        for (pid, ticks) in groups {
            if !process::is_alive(pid, ticks) {
                continue;
            }
            n += 1;
            if kill {
                let _ = process::kill_verified(pid, ticks);
            } else {
                let _ = process::signal_group(pid, rustix::process::Signal::TERM);
            }
        }
        n
    }
}

/// How many renewals may be in flight at once. A renewal can hang on a dead etcd member until
/// the store's deadline; the next ones go out on time and may reach a live member.
const RENEWALS_IN_FLIGHT: usize = 8;

/// Keeps `claim` alive until `shutdown` fires; fences the copies when renewals stop succeeding
/// in time, then gives the old lease up and claims the name again. Returns the lease held at
/// shutdown, if any, so the caller can revoke it after stopping its copies.
///
/// A renewal goes out every quarter TTL whether or not the previous one has answered, and the
/// lease's end is counted from the moment the latest successful one was *sent*; the fence
/// timers run beside them, so a store that does not answer never delays the fence.
pub async fn keep(
    store: Arc<dyn Store>,
    record: NodeRecord,
    claim: Claim,
    fence: Arc<Fence>,
    mut shutdown: crate::rt::Shutdown,
) -> Option<LeaseId> {
    let who = format!("agent {}", record.node);
    let mut lease = claim.lease;
    let mut ttl = Duration::from_millis(claim.ttl_ms);
    let mut sent = Instant::now();
    let (tx, mut answers) = tokio::sync::mpsc::unbounded_channel();
    let mut in_flight = 0usize;
    loop {
        // Held: renew, and fence if the renewals stop succeeding in time.
        let mut next_renewal = Instant::now() + renew_every(ttl);
        let mut termed = false;
        let mut failing = false;
        let expired = loop {
            let (term_at, kill_at) = fence_times(sent, ttl);
            let alarm = if termed { kill_at } else { term_at };
            tokio::select! {
                _ = shutdown.wait() => return Some(lease),
                Some((at, l, r)) = answers.recv() => {
                    in_flight -= 1;
                    if l != lease || termed {
                        continue;
                    }
                    match r {
                        Ok(()) => {
                            if failing {
                                crate::rt::log(&who, format!("lease {lease} renewed again"));
                                failing = false;
                            }
                            sent = sent.max(at);
                        }
                        Err(StoreError::LeaseExpired(_)) => break true,
                        Err(e) => {
                            if !failing {
                                crate::rt::log(&who, format!("cannot renew lease {lease}: {e}"));
                                failing = true;
                            }
                        }
                    }
                }
                _ = tokio::time::sleep_until(next_renewal.into()), if in_flight < RENEWALS_IN_FLIGHT => {
                    let at = Instant::now();
                    next_renewal = at + renew_every(ttl);
                    in_flight += 1;
                    let (st, tx, l) = (Arc::clone(&store), tx.clone(), lease);
                    tokio::task::spawn_blocking(move || {
                        let _ = tx.send((at, l, st.keep_alive(l)));
                    });
                }
                _ = tokio::time::sleep_until(alarm.into()) => {
                    fence.set_state(LeaseState::Fenced);
                    if termed {
                        let n = fence.signal_all(true);
                        crate::rt::log(&who, format!(
                            "fenced: SIGKILL to {n} copies before the lease can end"
                        ));
                        break false;
                    }
                    termed = true;
                    let n = fence.signal_all(false);
                    crate::rt::log(&who, format!(
                        "lease {lease} not renewed for {}ms: fenced, stopping {n} copies (SIGTERM)",
                        term_at.duration_since(sent).as_millis()
                    ));
                }
            }
        };
        if expired {
            fence.set_state(LeaseState::Fenced);
            let n = fence.signal_all(true);
            crate::rt::log(
                &who,
                format!("lease {lease} has expired: fenced, SIGKILL to {n} copies"),
            );
        }
        // Fenced: make sure nothing survives, then claim the name again.
        loop {
            fence.signal_all(true);
            let st = Arc::clone(&store);
            let rec = NodeRecord {
                acquired_ms: store.now_ms(),
                ..record.clone()
            };
            let old = lease;
            let again = tokio::task::spawn_blocking(move || {
                match st.revoke(old) {
                    Ok(()) | Err(StoreError::LeaseExpired(_)) => {}
                    Err(e) => return Err(NodeError::Store(e)),
                }
                claim_fresh(&*st, &rec)
            });
            let r = tokio::select! {
                _ = shutdown.wait() => return None,
                r = again => r.unwrap_or_else(|e| Err(StoreError::Unavailable(e.to_string()).into())),
            };
            match r {
                Ok(c) => {
                    lease = c.lease;
                    ttl = Duration::from_millis(c.ttl_ms);
                    sent = Instant::now();
                    fence.set_state(LeaseState::Held(lease));
                    crate::rt::log(&who, format!("rejoined under lease {lease}"));
                    break;
                }
                Err(e) if e.is_refusal() => {
                    crate::rt::log(&who, format!("cannot rejoin: {e}"));
                    *fence.refusal.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                    fence.set_state(LeaseState::Refused);
                    return None;
                }
                Err(e) => {
                    crate::rt::log(&who, format!("cannot rejoin yet: {e}"));
                    tokio::select! {
                        _ = shutdown.wait() => return None,
                        _ = tokio::time::sleep(renew_every(ttl)) => {}
                    }
                }
            }
        }
    }
}

/// Claims the name under a new lease only: after fencing, even a record at this agent's own
/// place is an earlier lease of its own that it just revoked, or another agent's.
fn claim_fresh(store: &dyn Store, record: &NodeRecord) -> Result<Claim, NodeError> {
    let key = node_key(&record.node);
    if let Some(entry) = store.get(&key)? {
        let held: NodeRecord = decode(&entry)?.value;
        return Err(NodeError::Taken {
            node: record.node.clone(),
            pid: held.agent_pid,
            host: held.host,
            place: held.place,
        });
    }
    claim(store, record)
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
    use crate::store::MemoryStore;

    fn record(node: &str, place: &str) -> NodeRecord {
        NodeRecord {
            node: node.into(),
            host: "h".into(),
            place: place.into(),
            agent_pid: 7,
            acquired_ms: 0,
            ttl_ms: 200,
            report_every_ms: 50,
            lease: 0,
        }
    }

    #[test]
    fn a_second_agent_elsewhere_is_refused_and_one_at_the_same_place_takes_the_lease_over() {
        let store = MemoryStore::new();
        let first = claim(&store, &record("a", "/x")).unwrap();
        assert!(!first.adopted);
        let err = claim(&store, &record("a", "/y")).unwrap_err();
        assert!(err.is_refusal(), "{err}");
        assert!(
            err.to_string().contains("already held by agent pid 7"),
            "{err}"
        );
        // The same place (a restart after a crash): the same lease, kept alive.
        let again = claim(&store, &record("a", "/x")).unwrap();
        assert!(again.adopted);
        assert_eq!(again.lease, first.lease);
        // Another name is free.
        assert!(!claim(&store, &record("b", "/y")).unwrap().adopted);
    }

    #[test]
    fn the_name_is_free_again_once_the_lease_expires() {
        let store = MemoryStore::new();
        claim(&store, &record("a", "/x")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while store.get(&node_key("a")).unwrap().is_some() {
            assert!(Instant::now() < deadline, "the node lease never expired");
            std::thread::sleep(Duration::from_millis(20));
        }
        let c = claim(&store, &record("a", "/y")).unwrap();
        assert!(!c.adopted);
        // After fencing, a fresh claim refuses even a record of its own place.
        assert!(claim_fresh(&store, &record("a", "/y"))
            .unwrap_err()
            .is_refusal());
    }

    #[test]
    fn the_fence_acts_before_the_store_can_expire_the_lease() {
        let sent = Instant::now();
        let ttl = Duration::from_secs(4);
        let (term, kill) = fence_times(sent, ttl);
        assert_eq!(term - sent, Duration::from_secs(3));
        assert_eq!(kill - sent, Duration::from_millis(3600));
        assert!(kill < sent + ttl);
        // Three renewals fit before the SIGTERM: one lost renewal never fences.
        assert!(renew_every(ttl) * 2 < term - sent);
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
