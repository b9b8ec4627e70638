//! The facts of each assignment a controller's commit removes ([`DeleteRecord`]), read from the
//! store just before the commit, with the store's values decoded once per write.
//!
//! A removal is judged by the workload's owned assignments and its nodes' reports as the store
//! holds them: decoding them afresh at every removal cost a tenth of a run's world (a node
//! report is long), though most were not written since the last removal. [`Decoded`] keeps
//! what each key's value gave, with the `mod_revision` it was decoded at; the store gives every
//! write a new revision, so an entry at the same revision holds the same value.

use std::collections::{BTreeMap, BTreeSet};

use setpoint_runtime::model::{
    decode, keys::node_key, report_key, Assignment, NodeReport, Phase, WorkloadSpec, ASSIGNMENTS,
};
use setpoint_runtime::store::{Entry, Op, Revision, Txn};

use super::{DeleteRecord, World};
use crate::store::SimStore;

/// What a removal reads of an assignment.
#[derive(Clone, Debug)]
struct Placed {
    owner_uid: Revision,
    workload: String,
    copy: String,
    node: String,
}

/// Values decoded from store entries, by key, each with the `mod_revision` of the entry it was
/// decoded from (`None`: it does not decode).
type Kept<T> = BTreeMap<String, (Revision, Option<T>)>;

/// Store values decoded for [`removals`].
#[derive(Debug, Default)]
pub(super) struct Decoded {
    assignments: Kept<Placed>,
    /// A workload's desired copies.
    specs: Kept<u64>,
    /// A node report's running copies, as (the report's node, pid).
    reports: Kept<Vec<(String, u32)>>,
}

/// What `map` holds for `e`, decoded by `f` unless it holds `e`'s key at `e`'s revision.
fn kept<'a, T>(
    map: &'a mut Kept<T>,
    e: &Entry,
    f: impl FnOnce(&Entry) -> Option<T>,
) -> Option<&'a T> {
    if map
        .get(&e.key)
        .is_none_or(|(rev, _)| *rev != e.mod_revision)
    {
        map.insert(e.key.clone(), (e.mod_revision, f(e)));
    }
    map.get(&e.key).and_then(|(_, v)| v.as_ref())
}

impl Decoded {
    fn assignment(&mut self, e: &Entry) -> Option<&Placed> {
        kept(&mut self.assignments, e, |e| {
            decode::<Assignment>(e).ok().map(|a| Placed {
                owner_uid: a.value.owner_uid,
                workload: a.value.workload,
                copy: a.value.copy,
                node: a.value.node,
            })
        })
    }

    fn desired(&mut self, e: &Entry) -> Option<u64> {
        kept(&mut self.specs, e, |e| {
            decode::<WorkloadSpec>(e).ok().map(|w| w.value.copies)
        })
        .copied()
    }

    fn running(&mut self, e: &Entry) -> Option<&[(String, u32)]> {
        kept(&mut self.reports, e, |e| {
            decode::<NodeReport>(e).ok().map(|r| {
                let node = r.value.node;
                r.value
                    .copies
                    .into_iter()
                    .filter(|c| c.phase == Phase::Running)
                    .map(|c| (node.clone(), c.pid))
                    .collect()
            })
        })
        .map(Vec::as_slice)
    }
}

/// The assignments `txn` removes, each with what `store` holds before the commit (and without
/// the removals earlier in the same commit): see [`DeleteRecord`]. Values are decoded through
/// `decoded`.
pub(super) fn removals(
    store: &SimStore,
    decoded: &mut Decoded,
    now: u64,
    host: usize,
    txn: &Txn,
) -> Vec<DeleteRecord> {
    let mut out = Vec::new();
    let mut gone: BTreeSet<String> = BTreeSet::new();
    for op in &txn.ops {
        let Op::Delete { key } = op else { continue };
        if !key.starts_with(ASSIGNMENTS) {
            continue;
        }
        let Some(a) = store
            .entry(key)
            .and_then(|e| decoded.assignment(e))
            .cloned()
        else {
            continue;
        };
        let wkey = setpoint_runtime::model::workload_key(&a.workload);
        let decl = store.entry(&wkey);
        let uid = decl.map(|e| e.create_revision);
        let desired = decl.and_then(|e| decoded.desired(e)).unwrap_or(0);
        let prefix = format!("{ASSIGNMENTS}{}/", a.workload);
        let mut owned_copies: Vec<(String, String)> = Vec::new();
        for e in store.entries() {
            if !e.key.starts_with(&prefix) || gone.contains(&e.key) {
                continue;
            }
            let Some(o) = decoded.assignment(e) else {
                continue;
            };
            if Some(o.owner_uid) == uid && store.entry(&node_key(&o.node)).is_some() {
                owned_copies.push((o.copy.clone(), o.node.clone()));
            }
        }
        gone.insert(key.clone());
        let nodes: BTreeSet<&String> = owned_copies.iter().map(|(_, node)| node).collect();
        let mut shown_running = BTreeSet::new();
        for node in nodes {
            if let Some(running) = store
                .entry(&report_key(node))
                .and_then(|e| decoded.running(e))
            {
                shown_running.extend(running.iter().cloned());
            }
        }
        out.push(DeleteRecord {
            at_ms: now,
            host,
            owned: Some(a.owner_uid) == uid,
            node_live: store.entry(&node_key(&a.node)).is_some(),
            desired,
            owned_copies,
            shown_running,
            workload: a.workload,
            copy: a.copy,
            node: a.node,
        });
    }
    out
}

impl World<'_> {
    /// [`removals`] of `txn`, committed by `host` now.
    pub(super) fn removals(&mut self, host: usize, txn: &Txn) -> Vec<DeleteRecord> {
        removals(&self.store, &mut self.decoded, self.now, host, txn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use setpoint_runtime::model::{assignment_key, workload_key};

    /// An assignment of copy `w-n` of workload `w` on `node`, owned by `uid`, as JSON.
    fn assignment(w: &str, n: u64, node: &str, uid: u64) -> String {
        format!(
            r#"{{"copy":"{w}-{n}","workload":"{w}","owner_uid":{uid},"n":{n},"node":"{node}","command":["sleep","1"],"startup_ms":0,"readiness":null,"grace_ms":100,"created_ms":0}}"#
        )
    }

    /// A report of `node` with copies of `w` as (n, pid, running), as JSON.
    fn report(node: &str, copies: &[(u64, u32, bool)]) -> String {
        let copies: Vec<String> = copies
            .iter()
            .map(|(n, pid, running)| {
                let phase = if *running { "running" } else { "exited" };
                format!(
                    r#"{{"copy":"w-{n}","workload":"w","owner_uid":1,"n":{n},"phase":"{phase}","pid":{pid},"start_ticks":0,"started_ms":0,"ready_ms":null,"exited_ms":null,"exit":null,"stopping":false}}"#
                )
            })
            .collect();
        format!(
            r#"{{"node":"{node}","observed_ms":0,"reported_ms":0,"agent_pid":1,"copies":[{}]}}"#,
            copies.join(",")
        )
    }

    fn spec(copies: u64) -> String {
        format!(
            r#"{{"name":"w","command":["sleep","1"],"copies":{copies},"controller":"intent","period_ms":1000,"startup_ms":0,"readiness":null,"grace_ms":100}}"#
        )
    }

    /// Random stores (assignments of two workloads on three nodes, owned by the declaration or
    /// not, some that do not decode; declarations; node keys; reports, rewritten), and
    /// commits that remove assignments, each recorded twice: through the decoded values kept
    /// since the first commit, and decoding everything afresh (a new [`Decoded`]), as before.
    /// The records must be the same. Keeping a decoded value past a rewrite of its key (the
    /// revision not compared) fails it.
    #[test]
    fn removals_through_kept_decodings_are_the_removals_decoded_afresh() {
        #[derive(Clone, Debug)]
        enum Write {
            /// Assignment `n` of workload `w` or `v` on node `a`, `b` or `c`, owned by uid 0
            /// (the first declaration) or not, or a value that does not decode.
            Place(bool, u64, u8, bool, bool),
            /// Workload `w`'s declaration, with this many copies.
            Declare(u64),
            /// A node's key, or its removal.
            Node(u8, bool),
            /// A node's report: copies with pids, running or not.
            Report(u8, Vec<(u64, u32, bool)>),
            /// Removes these assignments of `w` (and one of `v`) in one commit, recorded.
            Remove(Vec<u64>, bool),
        }
        let write = prop_oneof![
            (
                any::<bool>(),
                0u64..4,
                0u8..3,
                any::<bool>(),
                prop::bool::weighted(0.1)
            )
                .prop_map(|(w, n, node, own, bad)| Write::Place(w, n, node, own, bad)),
            (0u64..4).prop_map(Write::Declare),
            (0u8..3, prop::bool::weighted(0.8)).prop_map(|(n, up)| Write::Node(n, up)),
            (
                0u8..3,
                proptest::collection::vec((0u64..4, 1u32..9, any::<bool>()), 0..4)
            )
                .prop_map(|(n, c)| Write::Report(n, c)),
            (proptest::collection::vec(0u64..5, 1..4), any::<bool>())
                .prop_map(|(ns, v)| Write::Remove(ns, v)),
        ];
        let recorded = std::cell::Cell::new(0u64);
        proptest!(ProptestConfig::with_cases(256), |(writes in proptest::collection::vec(write, 1..40))| {
            let mut store = SimStore::new();
            let mut kept = Decoded::default();
            let node = |n: u8| ["a", "b", "c"][n as usize];
            // The uid of `w`'s declaration, once made: its create revision.
            let mut uid = 0u64;
            for (i, write) in writes.into_iter().enumerate() {
                let txn = match write {
                    Write::Place(v, n, at, own, bad) => {
                        let w = if v { "v" } else { "w" };
                        let value = if bad {
                            "{".to_owned()
                        } else {
                            assignment(w, n, node(at), if own { uid } else { uid + 1 })
                        };
                        Txn::new().put(assignment_key(w, n), value)
                    }
                    Write::Declare(copies) => Txn::new().put(workload_key("w"), spec(copies)),
                    Write::Node(n, true) => Txn::new().put(node_key(node(n)), "{}"),
                    Write::Node(n, false) => Txn::new().delete(node_key(node(n))),
                    Write::Report(n, copies) => {
                        Txn::new().put(report_key(node(n)), report(node(n), &copies))
                    }
                    Write::Remove(ns, v) => {
                        let mut txn = Txn::new();
                        for n in ns {
                            txn = txn.delete(assignment_key("w", n));
                        }
                        if v {
                            txn = txn.delete(assignment_key("v", 0));
                        }
                        let now = i as u64;
                        let fresh = removals(&store, &mut Decoded::default(), now, 0, &txn);
                        let through = removals(&store, &mut kept, now, 0, &txn);
                        prop_assert_eq!(&through, &fresh);
                        recorded.set(recorded.get() + fresh.len() as u64);
                        txn
                    }
                };
                store.commit(&txn).expect("an unconditional commit");
                if uid == 0 {
                    uid = store.entry(&workload_key("w")).map_or(0, |e| e.create_revision);
                }
            }
        });
        assert!(recorded.get() > 0, "no removal was recorded");
    }
}
