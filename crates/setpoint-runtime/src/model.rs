//! What the store holds, key by key, and a typed consistent snapshot of it.
//!
//! | key | value | written by |
//! | --- | --- | --- |
//! | `/workloads/{name}` | [`WorkloadSpec`] | `apply`, `delete` |
//! | `/counters/{name}` | [`Counter`]: the next copy number of the workload | the controller's passes |
//! | `/assignments/{name}/{n:012}` | [`Assignment`]: copy `{name}-{n}` placed on a node | the controller's passes and garbage collection |
//! | `/placements/{node}/{name}/{n:012}` | the same [`Assignment`], indexed by node: what that node's agent reads | written and removed in the same transactions as the assignment |
//! | `/reports/{node}` | [`NodeReport`]: the node's copies and their phases | the node's agent |
//! | `/leader` | [`Leader`], under the leader's lease | the controller holding the lease |
//! | `/loops/{name}` | [`LoopRecord`](crate::loops::LoopRecord): backoff and idle reason | the controller's passes, only when it changes |
//! | `/nodes/{node}` | [`NodeRecord`]: the node's agent, under its lease | that agent ([`crate::node`]) |
//!
//! A workload's *uid* is the `create_revision` of its key: deleting a workload and applying it
//! again gives a new uid, so assignments left by the old one are recognised as orphans.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use setpoint_core::ControllerKind;

use crate::node::{NodeRecord, NODES};
pub use crate::rules::CopyEnv;
use crate::store::{Entry, Read, Revision, Store, StoreError, Txn};

/// The key prefix of workload declarations.
pub const WORKLOADS: &str = "/workloads/";
/// The key prefix of copy-number counters.
pub const COUNTERS: &str = "/counters/";
/// The key prefix of copy assignments.
pub const ASSIGNMENTS: &str = "/assignments/";
/// The key prefix of the per-node index of assignments: an agent reads only its node's.
pub const PLACEMENTS: &str = "/placements/";
/// The key prefix of node reports.
pub const REPORTS: &str = "/reports/";
/// The key of the leader record.
pub const LEADER: &str = "/leader";

/// The key of a workload's declaration.
pub fn workload_key(name: &str) -> String {
    format!("{WORKLOADS}{name}")
}

/// The key of a workload's copy counter.
pub fn counter_key(name: &str) -> String {
    format!("{COUNTERS}{name}")
}

/// The key of copy `n` of a workload. The number is zero-padded so that key order is creation
/// order.
pub fn assignment_key(workload: &str, n: u64) -> String {
    format!("{ASSIGNMENTS}{workload}/{n:012}")
}

/// The key of copy `n` of `workload` in the index of `node`'s assignments.
pub fn placement_key(node: &str, workload: &str, n: u64) -> String {
    format!("{PLACEMENTS}{node}/{workload}/{n:012}")
}

/// The prefix of `node`'s placements.
pub fn placements_of(node: &str) -> String {
    format!("{PLACEMENTS}{node}/")
}

/// Adds the creation of assignment `a` at `key` to `txn`, only if `key` is absent, with its
/// entry in the node index. Both keys get the same revision, so the index entry's
/// `create_revision` is the assignment's incarnation.
pub fn put_assignment(txn: Txn, key: &str, a: &Assignment) -> Txn {
    let value = encode(a);
    txn.expect(key, 0)
        .put(key, value.clone())
        .put(placement_key(&a.node, &a.workload, a.n), value)
}

/// Adds the removal of assignment `a` at `key`, only if it is unchanged, and of its entry in
/// the node index, to `txn`.
pub fn remove_assignment(txn: Txn, key: &str, a: &Stored<Assignment>) -> Txn {
    txn.expect(key, a.mod_revision)
        .delete(key)
        .delete(placement_key(&a.value.node, &a.value.workload, a.value.n))
}

/// The key of a node's report.
pub fn report_key(node: &str) -> String {
    format!("{REPORTS}{node}")
}

/// The deterministic identity of copy `n` of `workload`, as the copy sees it in
/// `SETPOINT_COPY`.
pub fn copy_name(workload: &str, n: u64) -> String {
    format!("{workload}-{n}")
}

/// A declared workload: what to run and how many copies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// The workload's name: lowercase letters, digits and `-`, starting with a letter.
    pub name: String,
    /// The program and its arguments, run once per copy.
    pub command: Vec<String>,
    /// How many copies should run.
    pub copies: u64,
    /// The controller whose passes keep the copies, by name.
    #[serde(with = "kind_name")]
    pub controller: ControllerKind,
    /// The loop period U, in milliseconds.
    pub period_ms: u64,
    /// The startup time B, in milliseconds: a copy counts as running this long after it
    /// started, unless a readiness command is given.
    pub startup_ms: u64,
    /// A command that exits 0 once the copy is ready; replaces the startup time.
    pub readiness: Option<Vec<String>>,
    /// How long a copy may take to stop after SIGTERM before it gets SIGKILL, in milliseconds.
    pub grace_ms: u64,
    /// The copies' environment beyond setpoint's own variables (`env`, `env_passthrough`).
    #[serde(default, skip_serializing_if = "CopyEnv::is_empty")]
    pub env: CopyEnv,
    /// Crash-loop backoff after failed starts ([`crate::backoff`]); the kubelet's defaults.
    #[serde(default)]
    pub backoff: crate::backoff::BackoffPolicy,
    /// Rolling-update budgets and deadline ([`crate::rollout`]).
    #[serde(default)]
    pub rollout: crate::rollout::RolloutPolicy,
    /// Bumped by `apply` when what a copy runs (command, readiness) changes; set by `apply`, not
    /// by the workloads file.
    #[serde(default)]
    pub generation: u64,
}

mod kind_name {
    use serde::{Deserialize, Deserializer, Serializer};
    use setpoint_core::ControllerKind;

    pub fn serialize<S: Serializer>(k: &ControllerKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(k.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ControllerKind, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// The next copy number of a workload. It only grows, and it survives the workload's deletion,
/// so an identity is never given twice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    /// The number the next created copy gets.
    pub next: u64,
}

/// One copy placed on one node. Written once by a pass, never changed, removed when the copy
/// should stop (a delete command, or garbage collection).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// The copy's identity, `{workload}-{n}`.
    pub copy: String,
    /// The owning workload's name.
    pub workload: String,
    /// The owner link: the owning workload's uid (its key's create revision).
    pub owner_uid: Revision,
    /// The copy's number within its workload, in creation order.
    pub n: u64,
    /// The node that runs it.
    pub node: String,
    /// The program and its arguments, copied from the declaration at creation.
    pub command: Vec<String>,
    /// Startup time B, in milliseconds.
    pub startup_ms: u64,
    /// The readiness command, if any.
    pub readiness: Option<Vec<String>>,
    /// SIGTERM-to-SIGKILL grace period, in milliseconds.
    pub grace_ms: u64,
    /// When the pass created it, in store milliseconds.
    pub created_ms: u64,
    /// The copy's environment beyond setpoint's own variables, copied from the declaration.
    #[serde(default, skip_serializing_if = "CopyEnv::is_empty")]
    pub env: CopyEnv,
    /// The declaration's generation it was created from ([`crate::rollout`]).
    #[serde(default)]
    pub generation: u64,
}

/// A copy's phase as its agent reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The process runs but is not ready yet.
    Starting,
    /// The process is ready: this is what the ledger counts.
    Running,
    /// The process has ended.
    Exited,
}

/// One copy in a node report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyReport {
    /// The copy's identity.
    pub copy: String,
    /// The owning workload.
    pub workload: String,
    /// The owning workload's uid.
    pub owner_uid: Revision,
    /// The copy's number.
    pub n: u64,
    /// The `create_revision` of the assignment the copy runs: it tells this copy from an
    /// earlier one of the same name (a name can be assigned again after its copy is gone).
    #[serde(default)]
    pub incarnation: Revision,
    /// Its phase when observed.
    pub phase: Phase,
    /// The process id, which is also its process group id.
    pub pid: u32,
    /// The process's start time in clock ticks since boot (`/proc/PID/stat` field 22), which
    /// tells this process from a later one that reuses its pid.
    pub start_ticks: u64,
    /// When it was started, in store milliseconds.
    pub started_ms: u64,
    /// When it became ready.
    pub ready_ms: Option<u64>,
    /// When it was seen to have ended.
    pub exited_ms: Option<u64>,
    /// How it ended (`exit status 0`, `signal 9`, …).
    pub exit: Option<String>,
    /// Whether the agent is stopping it (its assignment is gone).
    pub stopping: bool,
}

/// What one node's agent last reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReport {
    /// The node's name.
    pub node: String,
    /// When the copies were observed, in store milliseconds.
    pub observed_ms: u64,
    /// When the report was written; later than `observed_ms` by the emulated reporting delay.
    pub reported_ms: u64,
    /// The agent's process id.
    pub agent_pid: u32,
    /// Every copy the agent knows, ordered by identity.
    pub copies: Vec<CopyReport>,
}

/// The record of the controller that holds the leader lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leader {
    /// Who holds it: `{hostname-ish}/{pid}/{nonce}`.
    pub holder: String,
    /// When it was acquired, in store milliseconds.
    pub acquired_ms: u64,
    /// The lease's time to live, in milliseconds.
    pub ttl_ms: u64,
}

/// A decoded value with its revisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored<T> {
    /// The value.
    pub value: T,
    /// The revision that created the key.
    pub create_revision: Revision,
    /// The revision that last wrote it: what a compare-and-set compares.
    pub mod_revision: Revision,
}

/// Decodes one entry's JSON value.
pub fn decode<T: DeserializeOwned>(e: &Entry) -> Result<Stored<T>, StoreError> {
    let value = serde_json::from_str(&e.value).map_err(|err| StoreError::Corrupt {
        key: e.key.clone(),
        reason: err.to_string(),
    })?;
    Ok(Stored {
        value,
        create_revision: e.create_revision,
        mod_revision: e.mod_revision,
    })
}

/// Encodes a value as JSON.
pub fn encode<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("setpoint's records always serialize")
}

/// Everything a pass or an operation reads, at one revision.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The store revision of the read.
    pub revision: Revision,
    /// The store's clock at the read, in milliseconds.
    pub now_ms: u64,
    /// Declarations by name.
    pub workloads: BTreeMap<String, Stored<WorkloadSpec>>,
    /// Counters by workload name.
    pub counters: BTreeMap<String, Stored<Counter>>,
    /// Assignments by key, so by workload and then creation order.
    pub assignments: BTreeMap<String, Stored<Assignment>>,
    /// Reports by node name.
    pub reports: BTreeMap<String, Stored<NodeReport>>,
    /// The leader record, while a controller holds the lease.
    pub leader: Option<Stored<Leader>>,
    /// Loop records (backoff, idle reason) by workload name ([`crate::loops`]).
    pub loops: BTreeMap<String, Stored<crate::loops::LoopRecord>>,
    /// The nodes whose agent holds its lease, by name: the live nodes.
    pub nodes: BTreeMap<String, Stored<NodeRecord>>,
    /// Operators' confirmations that lost nodes' copies ended, by node ([`crate::node::forget`]).
    pub forgotten: BTreeMap<String, Stored<crate::node::Forgotten>>,
}

impl Snapshot {
    /// The prefixes a snapshot reads, in one [`Store::read`].
    pub const PREFIXES: [&'static str; 8] = [
        WORKLOADS,
        COUNTERS,
        ASSIGNMENTS,
        REPORTS,
        LEADER,
        NODES,
        crate::loops::LOOPS,
        crate::node::FORGOTTEN,
    ];

    /// Reads the whole runtime state at one revision.
    pub fn load(store: &dyn Store) -> Result<Self, StoreError> {
        let now_ms = store.now_ms();
        let read = store.read(&Self::PREFIXES)?;
        Self::from_read(&read, now_ms)
    }

    /// The snapshot of `read` (a read of [`Snapshot::PREFIXES`]), taken when the store's clock
    /// showed `now_ms`: what [`Snapshot::load`] does after its read, without a store, so that an
    /// I/O-free machine ([`crate::controller::Host`]) builds it from a reply.
    pub fn from_read(read: &Read, now_ms: u64) -> Result<Self, StoreError> {
        Self::from_read_reusing(read, now_ms, None)
    }

    /// [`Snapshot::from_read`], taking each value whose key and `mod_revision` are unchanged
    /// since `earlier` (an earlier snapshot of the same store) from it instead of decoding it
    /// again. A key's `mod_revision` names one value of it, so the result is the same. The
    /// earlier snapshot is used up: it is brought up to the read in place, its unchanged
    /// values left where they are.
    pub fn from_read_reusing(
        read: &Read,
        now_ms: u64,
        earlier: Option<Snapshot>,
    ) -> Result<Self, StoreError> {
        Self::from_entries_reusing(read.revision, read.entries.iter(), now_ms, earlier)
    }

    /// [`Snapshot::from_read_reusing`] of a read at `revision` whose entries, in key order, are
    /// `entries`: how a watch cache's own entries become a snapshot without being copied first
    /// ([`crate::cache::CacheCore::entries`]).
    pub fn from_entries_reusing<'a>(
        revision: Revision,
        entries: impl Iterator<Item = &'a Entry>,
        now_ms: u64,
        earlier: Option<Snapshot>,
    ) -> Result<Self, StoreError> {
        /// Brings `map` up to `e` in place: an unchanged value stays, a changed one is decoded,
        /// a new one added; `seen` collects the names read, in order.
        fn take<'a, T: DeserializeOwned>(
            map: &mut BTreeMap<String, Stored<T>>,
            seen: &mut Vec<&'a str>,
            name: &'a str,
            e: &Entry,
        ) -> Result<(), StoreError> {
            match map.get_mut(name) {
                Some(s) if s.mod_revision == e.mod_revision => {}
                Some(s) => *s = decode(e)?,
                None => {
                    map.insert(name.to_owned(), decode(e)?);
                }
            }
            seen.push(name);
            Ok(())
        }
        /// Drops from `map` the names the read did not show.
        fn sweep<T>(map: &mut BTreeMap<String, Stored<T>>, seen: &mut [&str]) {
            // A read lists each prefix's keys in order; a store that did not is put in order.
            if !seen.is_sorted() {
                seen.sort_unstable();
            }
            let mut i = 0;
            map.retain(|k, _| {
                while i < seen.len() && seen[i] < k.as_str() {
                    i += 1;
                }
                i < seen.len() && seen[i] == k.as_str()
            });
        }
        let mut s = earlier.unwrap_or_default();
        s.revision = revision;
        s.now_ms = now_ms;
        let mut seen: [Vec<&'a str>; 7] = Default::default();
        let mut leader = s.leader.take();
        let mut leader_seen = false;
        for e in entries {
            let key = e.key.as_str();
            if let Some(name) = key.strip_prefix(WORKLOADS) {
                take(&mut s.workloads, &mut seen[0], name, e)?;
            } else if let Some(name) = key.strip_prefix(COUNTERS) {
                take(&mut s.counters, &mut seen[1], name, e)?;
            } else if key.starts_with(ASSIGNMENTS) {
                take(&mut s.assignments, &mut seen[2], key, e)?;
            } else if let Some(node) = key.strip_prefix(REPORTS) {
                take(&mut s.reports, &mut seen[3], node, e)?;
            } else if key == LEADER {
                leader = match leader.take() {
                    Some(l) if l.mod_revision == e.mod_revision => Some(l),
                    _ => Some(decode(e)?),
                };
                leader_seen = true;
            } else if let Some(name) = key.strip_prefix(crate::loops::LOOPS) {
                take(&mut s.loops, &mut seen[4], name, e)?;
            } else if let Some(node) = key.strip_prefix(NODES) {
                take(&mut s.nodes, &mut seen[5], node, e)?;
            } else if let Some(node) = key.strip_prefix(crate::node::FORGOTTEN) {
                take(&mut s.forgotten, &mut seen[6], node, e)?;
            }
        }
        s.leader = if leader_seen { leader } else { None };
        sweep(&mut s.workloads, &mut seen[0]);
        sweep(&mut s.counters, &mut seen[1]);
        sweep(&mut s.assignments, &mut seen[2]);
        sweep(&mut s.reports, &mut seen[3]);
        sweep(&mut s.loops, &mut seen[4]);
        sweep(&mut s.nodes, &mut seen[5]);
        sweep(&mut s.forgotten, &mut seen[6]);
        Ok(s)
    }

    /// Whether `node` is live: its agent holds its lease (`/nodes/{node}` exists). A node is
    /// lost when its lease expires or is given up, never by a clock of the reader's.
    pub fn node_live(&self, node: &str) -> bool {
        self.nodes.contains_key(node)
    }

    /// The assignments of workload `name`, in creation order.
    pub fn assignments_of(
        &self,
        name: &str,
    ) -> impl Iterator<Item = (&String, &Stored<Assignment>)> + '_ {
        let prefix = format!("{ASSIGNMENTS}{name}/");
        self.assignments
            .range(prefix.clone()..)
            .take_while(move |(k, _)| k.starts_with(&prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded write of the store: a value put on a key under the snapshot's prefixes or
    /// beside them, or a key deleted; now and then a value that does not decode, which the
    /// next write removes (so that most reads decode).
    fn write(store: &crate::store::MemoryStore, step: u64, x: u64) {
        let keys = [
            format!("{COUNTERS}w{}", x % 3),
            format!("{REPORTS}n{}", x % 2),
            LEADER.to_owned(),
            "/leaderboard".to_owned(),
            format!("/other/{}", x % 2),
        ];
        let key = keys[(x / 7 % keys.len() as u64) as usize].clone();
        let value = if key.starts_with(COUNTERS) {
            encode(&Counter { next: step })
        } else if let Some(node) = key.strip_prefix(REPORTS) {
            encode(&NodeReport {
                node: node.to_owned(),
                observed_ms: step,
                reported_ms: step,
                agent_pid: 1,
                copies: Vec::new(),
            })
        } else {
            encode(&Leader {
                holder: format!("h{step}"),
                acquired_ms: step,
                ttl_ms: 5000,
            })
        };
        let bad = format!("{COUNTERS}bad");
        let mut txn = if x % 5 == 0 {
            Txn::new().delete(key)
        } else {
            Txn::new().put(key, value)
        };
        txn = if x / 3 % 10 == 0 {
            txn.put(bad, "{not json")
        } else {
            txn.delete(bad)
        };
        store.commit(&txn).unwrap();
    }

    /// The oracle: every entry decoded into its map, one after another, the first value that
    /// does not decode failing it.
    fn decoded_afresh(read: &Read, now_ms: u64) -> Result<Snapshot, StoreError> {
        let mut s = Snapshot {
            revision: read.revision,
            now_ms,
            ..Snapshot::default()
        };
        for e in &read.entries {
            let k = e.key.as_str();
            if let Some(n) = k.strip_prefix(WORKLOADS) {
                s.workloads.insert(n.into(), decode(e)?);
            } else if let Some(n) = k.strip_prefix(COUNTERS) {
                s.counters.insert(n.into(), decode(e)?);
            } else if k.starts_with(ASSIGNMENTS) {
                s.assignments.insert(k.into(), decode(e)?);
            } else if let Some(n) = k.strip_prefix(REPORTS) {
                s.reports.insert(n.into(), decode(e)?);
            } else if k == LEADER {
                s.leader = Some(decode(e)?);
            } else if let Some(n) = k.strip_prefix(crate::loops::LOOPS) {
                s.loops.insert(n.into(), decode(e)?);
            } else if let Some(n) = k.strip_prefix(NODES) {
                s.nodes.insert(n.into(), decode(e)?);
            } else if let Some(n) = k.strip_prefix(crate::node::FORGOTTEN) {
                s.forgotten.insert(n.into(), decode(e)?);
            }
        }
        Ok(s)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Reusing an earlier snapshot's values gives what decoding every value gives, read
        /// after read, whatever changed between (the oracle: `decoded_afresh`); a value
        /// that does not decode fails both the same way, in whatever order the entries come.
        #[test]
        fn a_snapshot_reusing_the_last_one_equals_one_decoded_afresh(
            steps in proptest::collection::vec(0u64..1_000_000, 1..40),
        ) {
            let store = crate::store::MemoryStore::new();
            let mut memo: Option<Snapshot> = None;
            for (i, x) in steps.iter().enumerate() {
                write(&store, i as u64, *x);
                let mut read = store.read(&Snapshot::PREFIXES).unwrap();
                if x % 2 == 1 {
                    // A store may list its entries in another order: the result is the same.
                    read.entries.reverse();
                }
                let oracle = format!("{:?}", decoded_afresh(&read, i as u64));
                let fresh = Snapshot::from_read(&read, i as u64);
                let reused = Snapshot::from_read_reusing(&read, i as u64, memo.take());
                proptest::prop_assert_eq!(&oracle, &format!("{fresh:?}"));
                proptest::prop_assert_eq!(&oracle, &format!("{reused:?}"));
                memo = reused.ok();
            }
        }
    }

    #[test]
    fn assignment_keys_sort_in_creation_order() {
        let mut keys = [
            assignment_key("w", 10),
            assignment_key("w", 9),
            assignment_key("w", 100),
        ];
        keys.sort();
        assert_eq!(
            keys,
            [
                assignment_key("w", 9),
                assignment_key("w", 10),
                assignment_key("w", 100)
            ]
        );
        assert_eq!(copy_name("collector", 3), "collector-3");
    }

    #[test]
    fn a_workload_spec_round_trips_through_json_with_its_controller_by_name() {
        let w = WorkloadSpec {
            name: "collector".into(),
            command: vec!["sleep".into(), "60".into()],
            copies: 6,
            controller: ControllerKind::Intent,
            period_ms: 15_000,
            startup_ms: 5_000,
            readiness: None,
            grace_ms: 2_000,
            env: CopyEnv::default(),
            backoff: Default::default(),
            rollout: Default::default(),
            generation: 0,
        };
        let text = encode(&w);
        assert!(text.contains(r#""controller":"intent""#), "{text}");
        let back: WorkloadSpec = serde_json::from_str(&text).unwrap();
        assert_eq!(back, w);
    }
}
