//! Commands that work across machines: what runs now comes from the agents, and kills go
//! through the store to the agent that runs the copy.
//!
//! - **Live copies.** Each agent keeps `/live/{node}` ([`LiveRecord`]): the copies it runs and
//!   that are ready, written as soon as that set changes, without the emulated report delay, and
//!   under the node's lease so that it disappears with the node. `get` counts from these records
//!   ([`live_copies`]), never from the local `/proc`, so it shows the copies of every machine.
//! - **Kill requests.** `kill W N` picks the `N` oldest live copies of `W` and writes one
//!   request per copy at `/kills/{node}/{copy}` ([`KillRequest`]), under a lease of its own
//!   ([`request_kills`]). The agent of that node carries it out (SIGKILL to the copy's process
//!   group, checked by pid and start time) and writes the outcome in place
//!   ([`KillRequest::outcome`]). The command waits for the outcomes ([`await_kills`]), then
//!   revokes its lease, which removes the requests; a command that dies leaves nothing behind
//!   once its lease expires.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::model::node::NODES;
use crate::model::{decode, encode};
use crate::store::{LeaseId, Revision, Store, StoreError, Txn};

/// The key prefix of the agents' live records.
pub const LIVE: &str = "/live/";
/// The key prefix of kill requests.
pub const KILLS: &str = "/kills/";

/// The key of `node`'s live record.
pub fn live_key(node: &str) -> String {
    [LIVE, node].concat()
}

/// The prefix of the kill requests addressed to `node`.
pub fn kills_of(node: &str) -> String {
    // Not `format!`: an agent builds it at every sync (its machinery was most of the cost).
    [KILLS, node, "/"].concat()
}

/// One copy that an agent runs and that is ready.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LiveCopy {
    /// The copy's identity, `{workload}-{n}`.
    pub copy: String,
    /// The owning workload.
    pub workload: String,
    /// The owning workload's uid.
    pub owner_uid: Revision,
    /// The copy's number.
    pub n: u64,
    /// The assignment's incarnation.
    pub incarnation: Revision,
    /// Its process (group) id on its node.
    pub pid: u32,
}

/// What one agent runs now: written whenever the set changes, under the node lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveRecord {
    /// The node.
    pub node: String,
    /// When the agent saw this set, in store milliseconds.
    pub observed_ms: u64,
    /// The copies running and ready, by identity.
    pub copies: Vec<LiveCopy>,
}

/// A request to kill one copy, and once carried out, its outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillRequest {
    /// The copy to kill.
    pub copy: String,
    /// The incarnation meant: a later copy of the same name is left alone.
    pub incarnation: Revision,
    /// When it was asked for, in store milliseconds.
    pub requested_ms: u64,
    /// What the agent did: `killed pid P`, or why it did nothing. `None` until carried out.
    #[serde(default)]
    pub outcome: Option<String>,
}

/// The live copies of every live node (a node whose lease has ended shows none), by node.
pub fn live_copies(store: &dyn Store) -> Result<BTreeMap<String, LiveRecord>, StoreError> {
    let read = store.read(&[LIVE, NODES])?;
    let live_nodes: Vec<&str> = read
        .entries
        .iter()
        .filter_map(|e| e.key.strip_prefix(NODES))
        .collect();
    let mut out = BTreeMap::new();
    for e in &read.entries {
        if let Some(node) = e.key.strip_prefix(LIVE) {
            if live_nodes.contains(&node) {
                out.insert(node.to_owned(), decode::<LiveRecord>(e)?.value);
            }
        }
    }
    Ok(out)
}

/// Writes `record` as its node's live record, under the node's `lease`.
pub fn publish_live(
    store: &dyn Store,
    record: &LiveRecord,
    lease: LeaseId,
) -> Result<Revision, StoreError> {
    store.commit(&live_txn(record, lease))
}

/// The transaction that writes `record` as its node's live record, under the node's `lease`.
pub fn live_txn(record: &LiveRecord, lease: LeaseId) -> Txn {
    Txn::new().put_leased(live_key(&record.node), encode(record), lease)
}

/// The kill requests sent by one `kill` command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillBatch {
    /// The lease the requests live under.
    pub lease: LeaseId,
    /// Each request's key and copy, oldest copy first.
    pub requests: Vec<(String, String)>,
}

/// Asks the agents to kill the `count` oldest live copies of `workload` (fewer if fewer run):
/// one request per copy, under a new lease of `ttl`. Empty if no live node runs a copy.
pub fn request_kills(
    store: &dyn Store,
    workload: &str,
    count: u64,
    ttl: Duration,
) -> Result<KillBatch, StoreError> {
    let live = live_copies(store)?;
    let mut running: Vec<(u64, String, &LiveCopy)> = live
        .iter()
        .flat_map(|(node, r)| r.copies.iter().map(move |c| (c.n, node.clone(), c)))
        .filter(|(_, _, c)| c.workload == workload)
        .collect();
    running.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    running.truncate(count as usize);
    if running.is_empty() {
        return Ok(KillBatch {
            lease: 0,
            requests: Vec::new(),
        });
    }
    let lease = store.grant(ttl)?;
    let now = store.now_ms();
    let mut txn = Txn::new();
    let mut requests = Vec::new();
    for (_, node, c) in &running {
        let key = format!("{}{}", kills_of(node), c.copy);
        let req = KillRequest {
            copy: c.copy.clone(),
            incarnation: c.incarnation,
            requested_ms: now,
            outcome: None,
        };
        txn = txn.expect(&key, 0).put_leased(&key, encode(&req), lease);
        requests.push((key, c.copy.clone()));
    }
    if let Err(e) = store.commit(&txn) {
        let _ = store.revoke(lease);
        return Err(e);
    }
    Ok(KillBatch { lease, requests })
}

/// Waits up to `timeout` for the agents to carry out `batch`, polling every 50ms; then revokes
/// its lease, removing the requests. Returns each copy with its outcome (`None`: no agent
/// answered in time).
pub fn await_kills(
    store: &dyn Store,
    batch: &KillBatch,
    timeout: Duration,
) -> Result<Vec<(String, Option<String>)>, StoreError> {
    let deadline = Instant::now() + timeout;
    let mut outcomes: BTreeMap<String, Option<String>> = batch
        .requests
        .iter()
        .map(|(k, _)| (k.clone(), None))
        .collect();
    loop {
        let read = store.read(&[KILLS])?;
        for e in &read.entries {
            if let Some(slot) = outcomes.get_mut(&e.key) {
                *slot = decode::<KillRequest>(e)?.value.outcome;
            }
        }
        if outcomes.values().all(Option::is_some) || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if batch.lease != 0 {
        store.revoke(batch.lease)?;
    }
    Ok(batch
        .requests
        .iter()
        .map(|(k, copy)| (copy.clone(), outcomes.remove(k).flatten()))
        .collect())
}

/// The requests addressed to a node that it has not carried out yet, from a read of its
/// [`kills_of`] prefix: key, request, `mod_revision` and lease.
pub fn pending_kills(
    entries: &[crate::store::Entry],
    node: &str,
) -> Vec<(String, KillRequest, Revision, Option<LeaseId>)> {
    let prefix = kills_of(node);
    entries
        .iter()
        .filter(|e| e.key.starts_with(&prefix))
        .filter_map(|e| {
            let req = decode::<KillRequest>(e).ok()?.value;
            req.outcome
                .is_none()
                .then(|| (e.key.clone(), req, e.mod_revision, e.lease))
        })
        .collect()
}

/// The transaction that writes `req` (with its outcome) back in place: only if the request is
/// still at `revision`, keeping the requester's lease.
pub fn answer_txn(key: &str, req: &KillRequest, revision: Revision, lease: Option<LeaseId>) -> Txn {
    let txn = Txn::new().expect(key, revision);
    match lease {
        Some(l) => txn.put_leased(key, encode(req), l),
        None => txn.put(key, encode(req)),
    }
}

/// Records the outcome of a kill request in place, keeping the requester's lease.
pub fn answer_kill(
    store: &dyn Store,
    key: &str,
    mut req: KillRequest,
    revision: Revision,
    lease: Option<LeaseId>,
    outcome: String,
) -> Result<(), StoreError> {
    req.outcome = Some(outcome);
    match store.commit(&answer_txn(key, &req, revision, lease)) {
        // The requester gave up (its lease is gone) or answered itself: nothing to record.
        Ok(_) | Err(StoreError::LeaseExpired(_)) => Ok(()),
        Err(e) if e.is_conflict() => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    fn live(store: &dyn Store, node: &str, ns: &[u64]) -> LeaseId {
        let lease = crate::model::node::fake_node(store, node).unwrap();
        let record = LiveRecord {
            node: node.into(),
            observed_ms: 0,
            copies: ns
                .iter()
                .map(|&n| LiveCopy {
                    copy: format!("w-{n}"),
                    workload: "w".into(),
                    owner_uid: 1,
                    n,
                    incarnation: 10 + n,
                    pid: 100 + n as u32,
                })
                .collect(),
        };
        publish_live(store, &record, lease).unwrap();
        lease
    }

    #[test]
    fn kill_requests_go_to_the_oldest_live_copies_on_their_own_nodes_and_vanish_after() {
        let store = MemoryStore::new();
        live(&store, "a", &[1, 4]);
        let lost = live(&store, "b", &[0]);
        live(&store, "c", &[2, 3]);
        // b's lease ends: its copy is no longer live.
        store.revoke(lost).unwrap();
        assert_eq!(live_copies(&store).unwrap().len(), 2);
        let batch = request_kills(&store, "w", 2, Duration::from_secs(30)).unwrap();
        let keys: Vec<&str> = batch.requests.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["/kills/a/w-1", "/kills/c/w-2"]);
        // Agent a answers; c never does.
        let read = store.read(&[&kills_of("a")]).unwrap();
        let pending = pending_kills(&read.entries, "a");
        assert_eq!(pending.len(), 1);
        let (key, req, rev, lease) = pending.into_iter().next().unwrap();
        assert_eq!(req.incarnation, 11);
        answer_kill(&store, &key, req, rev, lease, "killed pid 101".into()).unwrap();
        let read = store.read(&[&kills_of("a")]).unwrap();
        assert!(pending_kills(&read.entries, "a").is_empty());
        let out = await_kills(&store, &batch, Duration::from_millis(200)).unwrap();
        assert_eq!(
            out,
            [
                ("w-1".to_owned(), Some("killed pid 101".to_owned())),
                ("w-2".to_owned(), None)
            ]
        );
        assert!(store.read(&[KILLS]).unwrap().entries.is_empty());
        // Nothing live of another workload: no request, no lease.
        let none = request_kills(&store, "other", 3, Duration::from_secs(30)).unwrap();
        assert!(none.requests.is_empty());
    }
}
