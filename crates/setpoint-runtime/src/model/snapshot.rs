//! A typed, consistent snapshot of everything a pass or an operation reads, at one revision
//! ([`Snapshot`]), and how it is built from a read, reusing an earlier snapshot's unchanged
//! values.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;

use super::keys::{
    assignment_key, placement_key, ASSIGNMENTS, COUNTERS, FORGOTTEN, LEADER, LOOPS, NODES,
    PLACEMENTS, REPORTS, WORKLOADS,
};
use super::loop_record::LoopRecord;
use super::node::{Forgotten, NodeRecord};
use super::records::{decode, Assignment, Counter, Leader, NodeReport, Stored, WorkloadSpec};
use super::trust::{workload_of, Trusted};
use crate::store::{Entry, Read, Revision, Store, StoreError};

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
    /// Loop records (backoff, idle reason) by workload name ([`crate::model::loops`]).
    pub loops: BTreeMap<String, Stored<LoopRecord>>,
    /// The nodes whose agent holds its lease, by name: the live nodes.
    pub nodes: BTreeMap<String, Stored<NodeRecord>>,
    /// Operators' confirmations that lost nodes' copies ended, by node ([`crate::model::node::forget`]).
    pub forgotten: BTreeMap<String, Stored<Forgotten>>,
    /// The node index's entries (`/placements/{node}/{name}/{n:012}`) by key, with their
    /// revisions only: their values are the assignments' own, which the agents read and check.
    pub placements: BTreeMap<String, Placed>,
    /// The placements that nothing owns, by key: no assignment at this revision is theirs
    /// (its key, node and incarnation). They are problems too; garbage collection removes them
    /// ([`crate::controller::reconcile::plan_gc`]).
    pub ghosts: BTreeMap<String, Ghost>,
    /// The records that did not decode or broke a rule ([`crate::model::trust`]), by key, with
    /// the reason: left out of the maps above.
    pub problems: BTreeMap<String, String>,
    /// The workloads refused because one of their own records is a problem (their declaration,
    /// counter, loop record or an assignment): left out of `workloads`, so no pass runs for
    /// them, and garbage collection leaves their assignments alone.
    pub refused: BTreeSet<String>,
}

/// One entry of the node index: its revisions (a placement is written in the same transaction
/// as its assignment, so both share `create_revision`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placed {
    /// The revision that created the key: the assignment's incarnation.
    pub create_revision: Revision,
    /// The revision that last wrote it.
    pub mod_revision: Revision,
}

/// A placement no assignment owns ([`Snapshot::ghosts`]): its revisions and, if its key has the
/// shape of one, the node, workload and copy number it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ghost {
    /// The entry's revisions.
    pub placed: Placed,
    /// `(node, workload, n)` from the key, if it parses.
    pub names: Option<(String, String, u64)>,
}

/// `(node, workload, n)` of a key `/placements/{node}/{workload}/{n:012}`, if it has that shape.
pub fn parse_placement_key(key: &str) -> Option<(String, String, u64)> {
    let rest = key.strip_prefix(PLACEMENTS)?;
    let mut parts = rest.split('/');
    let (node, workload, n) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || node.is_empty() || workload.is_empty() {
        return None;
    }
    if n.len() != 12 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((node.to_owned(), workload.to_owned(), n.parse().ok()?))
}

/// Which part of a [`Snapshot`] a key of [`Snapshot::PREFIXES`] belongs to, with the name it is
/// kept under there: one rule for a snapshot built from a whole read and one brought up to date
/// by its changed keys ([`Snapshot::patched`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot<'a> {
    Workload(&'a str),
    Counter(&'a str),
    /// Kept by its whole key.
    Assignment,
    Report(&'a str),
    Leader,
    Loop(&'a str),
    Node(&'a str),
    Forgotten(&'a str),
    /// Kept by its whole key, revisions only.
    Placement,
    /// Beside the snapshot (`/leaderboard` is under the `/leader` range but is not the key).
    Other,
}

fn slot(key: &str) -> Slot<'_> {
    if let Some(name) = key.strip_prefix(WORKLOADS) {
        Slot::Workload(name)
    } else if let Some(name) = key.strip_prefix(COUNTERS) {
        Slot::Counter(name)
    } else if key.starts_with(ASSIGNMENTS) {
        Slot::Assignment
    } else if let Some(node) = key.strip_prefix(REPORTS) {
        Slot::Report(node)
    } else if key == LEADER {
        Slot::Leader
    } else if let Some(name) = key.strip_prefix(LOOPS) {
        Slot::Loop(name)
    } else if let Some(node) = key.strip_prefix(NODES) {
        Slot::Node(node)
    } else if let Some(node) = key.strip_prefix(FORGOTTEN) {
        Slot::Forgotten(node)
    } else if key.starts_with(PLACEMENTS) {
        Slot::Placement
    } else {
        Slot::Other
    }
}

/// The leader record of `e`, keeping `earlier` if it is that value (same `mod_revision`); a
/// record that does not decode is a problem and no leader.
fn leader_of(
    earlier: Option<Stored<Leader>>,
    e: &Entry,
    problems: &mut BTreeMap<String, String>,
) -> Option<Stored<Leader>> {
    match earlier {
        Some(l) if l.mod_revision == e.mod_revision => Some(l),
        _ => match checked(e) {
            Ok(l) => Some(l),
            Err(reason) => {
                problems.insert(e.key.clone(), reason);
                None
            }
        },
    }
}

/// What [`take`] did with a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Took {
    /// The map held this value already (same `mod_revision`).
    Kept,
    /// Decoded into the map.
    Decoded,
    /// It did not decode or broke a rule: out of the map, a problem of its key.
    Failed,
}

/// Brings `map`'s value `name` up to `e` in place: an unchanged value (same `mod_revision`)
/// stays, a changed one is decoded, one that fails is removed and becomes a problem of its key.
fn take<T: DeserializeOwned + Trusted>(
    map: &mut BTreeMap<String, Stored<T>>,
    problems: &mut BTreeMap<String, String>,
    name: &str,
    e: &Entry,
) -> Took {
    if map
        .get(name)
        .is_some_and(|s| s.mod_revision == e.mod_revision)
    {
        return Took::Kept;
    }
    match checked(e) {
        Ok(v) => {
            map.insert(name.to_owned(), v);
            Took::Decoded
        }
        Err(reason) => {
            map.remove(name);
            problems.insert(e.key.clone(), reason);
            Took::Failed
        }
    }
}

/// [`take`] of `e`, or the removal of `name` when its key is gone (`None`).
fn update<T: DeserializeOwned + Trusted>(
    map: &mut BTreeMap<String, Stored<T>>,
    problems: &mut BTreeMap<String, String>,
    name: &str,
    e: Option<&Entry>,
) {
    match e {
        Some(e) => {
            take(map, problems, name, e);
        }
        None => {
            map.remove(name);
        }
    }
}

/// The placement entry of `e`, written into `placements`; whether it changed.
fn place(placements: &mut BTreeMap<String, Placed>, e: &Entry) -> bool {
    let placed = Placed {
        create_revision: e.create_revision,
        mod_revision: e.mod_revision,
    };
    match placements.get_mut(e.key.as_str()) {
        Some(p) if *p == placed => false,
        Some(p) => {
            *p = placed;
            true
        }
        None => {
            placements.insert(e.key.clone(), placed);
            true
        }
    }
}

/// The workloads refused by `problems`: those with a problem in their own records.
fn refused_by(problems: &BTreeMap<String, String>) -> BTreeSet<String> {
    problems
        .keys()
        .filter_map(|key| key.strip_prefix(WORKLOADS).or_else(|| workload_of(key)))
        .map(str::to_owned)
        .collect()
}

/// Decodes `e` and checks it ([`Trusted`]): the record, or the reason it is a problem.
pub fn checked<T: DeserializeOwned + Trusted>(e: &Entry) -> Result<Stored<T>, String> {
    let v = decode::<T>(e).map_err(|err| match err {
        StoreError::Corrupt { reason, .. } => format!("not a valid record: {reason}"),
        other => other.to_string(),
    })?;
    v.value.check(e)?;
    Ok(v)
}

impl Snapshot {
    /// The prefixes a snapshot reads, in one [`Store::read`].
    pub const PREFIXES: [&'static str; 9] = [
        WORKLOADS,
        COUNTERS,
        ASSIGNMENTS,
        PLACEMENTS,
        REPORTS,
        LEADER,
        NODES,
        LOOPS,
        FORGOTTEN,
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
        /// Drops from `map` the names the read did not show; whether it dropped any.
        fn sweep<V>(map: &mut BTreeMap<String, V>, seen: &mut [&str]) -> bool {
            // A read lists each prefix's keys in order; a store that did not is put in order.
            if !seen.is_sorted() {
                seen.sort_unstable();
            }
            let before = map.len();
            let mut i = 0;
            map.retain(|k, _| {
                while i < seen.len() && seen[i] < k.as_str() {
                    i += 1;
                }
                i < seen.len() && seen[i] == k.as_str()
            });
            map.len() != before
        }
        let mut s = earlier.unwrap_or_default();
        // The ghosts depend only on the placements, the assignments and which keys failed to
        // decode; when none of these changed they are the earlier snapshot's (at 100,000
        // copies, finding them again took half of a snapshot's time when a report changed).
        let (earlier_ghosts, earlier_failed) = s.take_ghosts();
        let mut owners_changed = false;
        s.problems.clear();
        s.refused.clear();
        s.revision = revision;
        s.now_ms = now_ms;
        let mut seen: [Vec<&'a str>; 8] = Default::default();
        let mut leader = s.leader.take();
        let mut leader_seen = false;
        for e in entries {
            let key = e.key.as_str();
            let p = &mut s.problems;
            // Each map's names seen, for the sweep; a value that failed is not in its map.
            macro_rules! took {
                ($map:expr, $i:expr, $name:expr) => {{
                    let took = take(&mut $map, p, $name, e);
                    if took != Took::Failed {
                        seen[$i].push($name);
                    }
                    took
                }};
            }
            match slot(key) {
                Slot::Workload(name) => {
                    took!(s.workloads, 0, name);
                }
                Slot::Counter(name) => {
                    took!(s.counters, 1, name);
                }
                Slot::Assignment => owners_changed |= took!(s.assignments, 2, key) != Took::Kept,
                Slot::Report(node) => {
                    took!(s.reports, 3, node);
                }
                Slot::Leader => {
                    leader = leader_of(leader.take(), e, p);
                    leader_seen = true;
                }
                Slot::Loop(name) => {
                    took!(s.loops, 4, name);
                }
                Slot::Node(node) => {
                    took!(s.nodes, 5, node);
                }
                Slot::Forgotten(node) => {
                    took!(s.forgotten, 6, node);
                }
                Slot::Placement => {
                    owners_changed |= place(&mut s.placements, e);
                    seen[7].push(key);
                }
                Slot::Other => {}
            }
        }
        s.leader = if leader_seen { leader } else { None };
        sweep(&mut s.workloads, &mut seen[0]);
        sweep(&mut s.counters, &mut seen[1]);
        owners_changed |= sweep(&mut s.assignments, &mut seen[2]);
        sweep(&mut s.reports, &mut seen[3]);
        sweep(&mut s.loops, &mut seen[4]);
        sweep(&mut s.nodes, &mut seen[5]);
        sweep(&mut s.forgotten, &mut seen[6]);
        owners_changed |= sweep(&mut s.placements, &mut seen[7]);
        s.refused = refused_by(&s.problems);
        for name in &s.refused {
            s.workloads.remove(name);
        }
        // The ghosts depend only on the placements, the assignments and which keys failed.
        let ghosts = if owners_changed || !s.problems.keys().eq(earlier_failed.iter()) {
            ghosts(&s)
        } else {
            earlier_ghosts
        };
        s.set_ghosts(ghosts);
        Ok(s)
    }

    /// [`Snapshot::from_entries_reusing`] for a reader that knows which keys changed (a watch
    /// cache): `earlier`, a snapshot of [`Snapshot::PREFIXES`] at an earlier revision, brought
    /// up to `revision` by looking again only at the keys of `changed` (every key whose value
    /// changed since `earlier`'s revision, in any order; a key that did not change does no
    /// harm), whose values now are `entry_of`'s (`None`: deleted). The result is what a whole
    /// read at `revision` gives. Its work grows with the changes, not with the snapshot: of the
    /// ghosts only the placements a changed placement or assignment names are judged again
    /// (the placement its old and its new value own); every placement only when the set of
    /// failed keys changed.
    pub fn patched<'a, 'e>(
        earlier: Snapshot,
        revision: Revision,
        now_ms: u64,
        changed: impl IntoIterator<Item = &'a str>,
        entry_of: impl Fn(&str) -> Option<&'e Entry>,
    ) -> Self {
        let mut s = earlier;
        let (earlier_ghosts, earlier_failed) = s.take_ghosts();
        let earlier_refused = std::mem::take(&mut s.refused);
        s.revision = revision;
        s.now_ms = now_ms;
        let mut keys: Vec<&str> = changed.into_iter().collect();
        keys.sort_unstable();
        keys.dedup();
        // The placements whose ghost verdict may have changed: each changed placement, and for
        // each changed assignment the placement its old and its new value own.
        let mut rejudge: BTreeSet<String> = BTreeSet::new();
        let owned_placement =
            |a: &Stored<Assignment>| placement_key(&a.value.node, &a.value.workload, a.value.n);
        for key in keys {
            let p = &mut s.problems;
            p.remove(key);
            let e = entry_of(key);
            match slot(key) {
                Slot::Workload(name) => update(&mut s.workloads, p, name, e),
                Slot::Counter(name) => update(&mut s.counters, p, name, e),
                Slot::Assignment => {
                    if let Some(a) = s.assignments.get(key) {
                        rejudge.insert(owned_placement(a));
                    }
                    update(&mut s.assignments, p, key, e);
                    if let Some(a) = s.assignments.get(key) {
                        rejudge.insert(owned_placement(a));
                    }
                }
                Slot::Report(node) => update(&mut s.reports, p, node, e),
                Slot::Leader => s.leader = e.and_then(|e| leader_of(s.leader.take(), e, p)),
                Slot::Loop(name) => update(&mut s.loops, p, name, e),
                Slot::Node(node) => update(&mut s.nodes, p, node, e),
                Slot::Forgotten(node) => update(&mut s.forgotten, p, node, e),
                Slot::Placement => {
                    match e {
                        Some(e) => {
                            place(&mut s.placements, e);
                        }
                        None => {
                            s.placements.remove(key);
                        }
                    }
                    rejudge.insert(key.to_owned());
                }
                Slot::Other => {}
            }
        }
        s.refused = refused_by(&s.problems);
        // A workload refused no longer: its declaration, left out while it was, comes back.
        for name in earlier_refused.difference(&s.refused) {
            if s.workloads.contains_key(name) {
                continue;
            }
            if let Some(e) = entry_of(&format!("{WORKLOADS}{name}")) {
                take(&mut s.workloads, &mut s.problems, name, e);
            }
        }
        for name in &s.refused {
            s.workloads.remove(name);
        }
        let ghosts = if s.problems.keys().eq(earlier_failed.iter()) {
            // The same keys failed: only the placements an owner change touched may have
            // changed their verdict (a placement is owned by the assignment its key names, on
            // its node, of its incarnation), so only they are judged again; not every placement.
            let mut ghosts = earlier_ghosts;
            for key in &rejudge {
                match s.placements.get(key).and_then(|p| ghost_of(&s, key, p)) {
                    Some(g) => ghosts.insert(key.clone(), g),
                    None => ghosts.remove(key),
                };
            }
            ghosts
        } else {
            ghosts(&s)
        };
        s.set_ghosts(ghosts);
        s
    }

    /// Takes the ghosts out, with their problems: returns them and the keys left as problems
    /// (those that failed to decode or broke a rule).
    fn take_ghosts(&mut self) -> (BTreeMap<String, Ghost>, Vec<String>) {
        let ghosts = std::mem::take(&mut self.ghosts);
        for key in ghosts.keys() {
            self.problems.remove(key);
        }
        let failed = self.problems.keys().cloned().collect();
        (ghosts, failed)
    }

    /// Sets the ghosts and adds them to the problems. After the refusals: a ghost refuses
    /// nothing (it may name a healthy workload's copy).
    fn set_ghosts(&mut self, ghosts: BTreeMap<String, Ghost>) {
        for (key, g) in &ghosts {
            self.problems.insert(key.clone(), ghost_reason(g));
        }
        self.ghosts = ghosts;
    }

    /// The problems of this snapshot as lines, `{key}: {reason}`, in key order.
    pub fn problem_lines(&self) -> Vec<String> {
        self.problems
            .iter()
            .map(|(k, r)| format!("{k}: {r}"))
            .collect()
    }

    /// Whether no report of `node` comes from a read of its placements at or after `revision`
    /// (its report is missing, or its `synced_revision` is older): a copy assigned there at
    /// `revision` may have started without any report showing it.
    pub fn unreported_since(&self, node: &str, revision: Revision) -> bool {
        self.reports
            .get(node)
            .is_none_or(|r| r.value.synced_revision < revision)
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
        // Bounded by the range's end rather than a prefix test of each key: at 100,000 copies
        // the tests were a tenth of a steady pass.
        // Not `format!`: a pass asks at least once (its machinery was a tenth of a small
        // workload's `WorkloadView::new`). One string holds both bounds: `prefix_end`'s, and
        // the prefix without its last character.
        let end = [ASSIGNMENTS, name, "/\u{7f}"].concat();
        debug_assert_eq!(
            end,
            crate::store::prefix_end(&[ASSIGNMENTS, name, "/"].concat())
        );
        let prefix = &end[..end.len() - 1];
        self.assignments.range::<str, _>((
            std::ops::Bound::Included(prefix),
            std::ops::Bound::Excluded(&end[..]),
        ))
    }
}

/// The placements of `s` that no assignment owns: none at the key they name, or one on another
/// node or of another incarnation (a placement is written with its assignment, in one
/// transaction, so at any one revision each assignment has exactly its own). A key that does not
/// have a placement's shape is owned by nothing either. A placement whose assignment is there
/// but failed its checks is not judged: it may be that assignment's own.
fn ghosts(s: &Snapshot) -> BTreeMap<String, Ghost> {
    s.placements
        .iter()
        .filter_map(|(key, placed)| Some((key.clone(), ghost_of(s, key, placed)?)))
        .collect()
}

/// The placement at `key` as a ghost, if no assignment of `s` owns it ([`ghosts`]).
fn ghost_of(s: &Snapshot, key: &str, placed: &Placed) -> Option<Ghost> {
    let names = parse_placement_key(key);
    let owned = match &names {
        Some((node, workload, n)) => {
            let key = assignment_key(workload, *n);
            s.problems.contains_key(&key)
                || s.assignments.get(&key).is_some_and(|a| {
                    a.value.node == *node && a.create_revision == placed.create_revision
                })
        }
        None => false,
    };
    (!owned).then_some(Ghost {
        placed: *placed,
        names,
    })
}

/// What is wrong with ghost placement `g`, in one line.
fn ghost_reason(g: &Ghost) -> String {
    match &g.names {
        Some((_, workload, n)) => format!(
            "a placement that no assignment owns (none at {} on this node, of this incarnation): its copy is not counted, and garbage collection removes it",
            assignment_key(workload, *n)
        ),
        None => "not a placement key (accepted: /placements/NODE/WORKLOAD/NNNNNNNNNNNN); garbage collection removes it".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::records::encode;
    use crate::store::Txn;

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
            format!("{PLACEMENTS}n{}/w{}/{:012}", x % 2, x % 3, x % 2),
            format!("{WORKLOADS}w{}", x % 3),
        ];
        let key = keys[(x / 7 % keys.len() as u64) as usize].clone();
        let value = if let Some(name) = key.strip_prefix(WORKLOADS) {
            // A declaration: its workload is refused while one of its assignments does not
            // decode, and comes back when that one is fixed or gone.
            encode(&crate::controller::reconcile::tests::test_spec(
                name,
                1 + step % 4,
                setpoint_core::ControllerKind::Intent,
                100,
            ))
        } else if key.starts_with(COUNTERS) {
            encode(&Counter { next: step })
        } else if let Some(node) = key.strip_prefix(REPORTS) {
            encode(&NodeReport {
                node: node.to_owned(),
                observed_ms: step,
                reported_ms: step,
                agent_pid: 1,
                synced_revision: u64::MAX,
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
        if x % 11 < 4 {
            // An assignment: with its placement in one transaction (owned, as a pass writes
            // them), or alone (its earlier placement, or one on another node, is then a
            // ghost), or one that does not decode (a placement of it is not judged), or
            // removed.
            let (w, n, node) = (format!("w{}", x % 3), x % 2, format!("n{}", x / 13 % 2));
            let key = assignment_key(&w, n);
            let a = Assignment {
                copy: crate::model::copy_name(&w, n),
                workload: w.clone(),
                owner_uid: 1,
                n,
                node: node.clone(),
                command: vec!["sleep".into(), "60".into()],
                startup_ms: 0,
                readiness: None,
                grace_ms: 100,
                created_ms: step,
                env: Default::default(),
                generation: 0,
                cut_off: Default::default(),
                heartbeat: false,
            };
            let txn = match x % 11 {
                0 => Txn::new()
                    .put(&key, encode(&a))
                    .put(crate::model::placement_key(&node, &w, n), encode(&a)),
                1 => Txn::new().put(&key, encode(&a)),
                2 => Txn::new().put(&key, "{not json"),
                _ => Txn::new().delete(&key),
            };
            store.commit(&txn).unwrap();
            return;
        }
        let mut txn = if x % 5 == 0 {
            Txn::new().delete(key)
        } else if key == LEADER && x % 3 == 0 {
            // A leader under a lease: a valid record (under none it is a problem).
            let lease = store.grant(std::time::Duration::from_secs(600)).unwrap();
            Txn::new().put_leased(key, value, lease)
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

    /// The oracle: every entry decoded and checked into its map, one after another; one that
    /// fails is a problem and left out, and refuses its workload.
    fn decoded_afresh(read: &Read, now_ms: u64) -> Result<Snapshot, StoreError> {
        let mut s = Snapshot {
            revision: read.revision,
            now_ms,
            ..Snapshot::default()
        };
        fn put<T: DeserializeOwned + Trusted>(
            m: &mut BTreeMap<String, Stored<T>>,
            p: &mut BTreeMap<String, String>,
            n: &str,
            e: &Entry,
        ) {
            match checked(e) {
                Ok(v) => {
                    m.insert(n.into(), v);
                }
                Err(r) => {
                    p.insert(e.key.clone(), r);
                }
            }
        }
        for e in &read.entries {
            let k = e.key.as_str();
            let p = &mut s.problems;
            if let Some(n) = k.strip_prefix(WORKLOADS) {
                put(&mut s.workloads, p, n, e);
            } else if let Some(n) = k.strip_prefix(COUNTERS) {
                put(&mut s.counters, p, n, e);
            } else if k.starts_with(ASSIGNMENTS) {
                put(&mut s.assignments, p, k, e);
            } else if let Some(n) = k.strip_prefix(REPORTS) {
                put(&mut s.reports, p, n, e);
            } else if k == LEADER {
                s.leader = checked(e).map_err(|r| p.insert(e.key.clone(), r)).ok();
            } else if let Some(n) = k.strip_prefix(LOOPS) {
                put(&mut s.loops, p, n, e);
            } else if let Some(n) = k.strip_prefix(NODES) {
                put(&mut s.nodes, p, n, e);
            } else if let Some(n) = k.strip_prefix(FORGOTTEN) {
                put(&mut s.forgotten, p, n, e);
            } else if k.starts_with(PLACEMENTS) {
                let placed = Placed {
                    create_revision: e.create_revision,
                    mod_revision: e.mod_revision,
                };
                s.placements.insert(k.to_owned(), placed);
            }
        }
        for k in s.problems.keys() {
            if let Some(n) = k.strip_prefix(WORKLOADS).or_else(|| workload_of(k)) {
                s.refused.insert(n.to_owned());
            }
        }
        for n in &s.refused {
            s.workloads.remove(n);
        }
        s.ghosts = ghosts(&s);
        for (key, g) in &s.ghosts {
            s.problems.insert(key.clone(), ghost_reason(g));
        }
        Ok(s)
    }

    #[test]
    fn a_bad_record_is_a_problem_of_its_key_and_refuses_only_its_own_workload() {
        let store = crate::store::MemoryStore::new();
        let spec = |name: &str| WorkloadSpec {
            name: name.into(),
            command: vec!["sleep".into(), "60".into()],
            copies: 1,
            controller: setpoint_core::ControllerKind::Intent,
            period_ms: 100,
            startup_ms: 0,
            readiness: None,
            grace_ms: 0,
            env: Default::default(),
            backoff: Default::default(),
            rollout: Default::default(),
            restart: Default::default(),
            generation: 0,
            stop_when_cut_off_ms: None,
        };
        let mut many = spec("many");
        many.copies = 10_000_000;
        let mut hot = spec("hot");
        hot.period_ms = 1;
        let txn = Txn::new()
            .put("/workloads/good", encode(&spec("good")))
            .put("/workloads/wrap", encode(&spec("wrap")))
            .put("/counters/wrap", r#"{"next":18446744073709551615}"#)
            .put("/workloads/many", encode(&many))
            .put("/workloads/hot", encode(&hot))
            .put("/workloads/evil", "{not json")
            .put("/reports/n9", "[]")
            .put(LEADER, encode(&Leader { holder: "forged".into(), acquired_ms: 0, ttl_ms: 1 }))
            .put("/nodes/phantom", r#"{"node":"phantom","host":"h","place":"p","agent_pid":1,"acquired_ms":0,"ttl_ms":1,"report_every_ms":1}"#)
            .put("/placements/n1/ghost/000000000000", "{}")
            .put("/placements/n1/x", "{}");
        store.commit(&txn).unwrap();
        let good = crate::model::Assignment {
            workload: "good".into(),
            n: 0,
            copy: "good-0".into(),
            node: "n1".into(),
            owner_uid: 1,
            command: vec!["sleep".into(), "60".into()],
            env: Default::default(),
            generation: 0,
            startup_ms: 0,
            readiness: None,
            grace_ms: 0,
            created_ms: 0,
            cut_off: Default::default(),
            heartbeat: false,
        };
        let key = assignment_key("good", 0);
        store
            .commit(&crate::model::put_assignment(Txn::new(), &key, &good))
            .unwrap();
        // A forged second placement of a healthy copy, on another node: a ghost too.
        let forged = crate::model::placement_key("n2", "good", 0);
        store
            .commit(&Txn::new().put(&forged, encode(&good)))
            .unwrap();
        let s = Snapshot::load(&store).unwrap();
        assert_eq!(s.workloads.keys().collect::<Vec<_>>(), ["good"]);
        let keys: Vec<&str> = s.problems.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "/counters/wrap",
                "/leader",
                "/nodes/phantom",
                "/placements/n1/ghost/000000000000",
                "/placements/n1/x",
                "/placements/n2/good/000000000000",
                "/reports/n9",
                "/workloads/evil",
                "/workloads/hot",
                "/workloads/many"
            ]
        );
        assert!(s.leader.is_none() && s.nodes.is_empty() && s.reports.is_empty());
        assert!(
            s.problems["/workloads/many"].contains("accepted 0 to 10000"),
            "{:?}",
            s.problems
        );
        assert!(s.problems["/counters/wrap"].contains("out of range"));
        assert!(s.refused.contains("wrap") && s.refused.contains("evil"));
        assert!(!s.refused.contains("good") && !s.refused.contains("ghost"));
        assert_eq!(s.placements.len(), 4, "{:?}", s.placements);
        assert!(
            s.problems["/placements/n1/ghost/000000000000"]
                .contains("no assignment owns (none at /assignments/ghost/000000000000"),
            "{:?}",
            s.problems
        );
        assert!(s.problems["/placements/n1/x"].starts_with("not a placement key"));
        assert_eq!(s.ghosts.len(), 3);
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

        /// Bringing the last snapshot up to date by the keys that changed since (as the watch
        /// cache does) gives what decoding every value gives, read after read: whatever
        /// changed, with unchanged keys among the changed ones, and with reads skipped (the
        /// changes of several writes at once).
        #[test]
        fn a_snapshot_patched_by_its_changed_keys_equals_one_decoded_afresh(
            steps in proptest::collection::vec((0u64..1_000_000, 0u64..4), 1..60),
        ) {
            let store = crate::store::MemoryStore::new();
            let mut last: Option<(Snapshot, BTreeMap<String, Entry>)> = None;
            for (i, (x, skip)) in steps.iter().enumerate() {
                write(&store, i as u64, *x);
                if *skip == 0 {
                    continue;
                }
                let read = store.read(&Snapshot::PREFIXES).unwrap();
                let now: BTreeMap<String, Entry> =
                    read.entries.iter().map(|e| (e.key.clone(), e.clone())).collect();
                let oracle = format!("{:?}", decoded_afresh(&read, i as u64).unwrap());
                let patched = match last.take() {
                    None => Snapshot::from_read(&read, i as u64).unwrap(),
                    Some((earlier, before)) => {
                        let mut changed: Vec<&str> = before
                            .keys()
                            .chain(now.keys())
                            .filter(|k| {
                                before.get(*k).map(|e| e.mod_revision)
                                    != now.get(*k).map(|e| e.mod_revision)
                            })
                            .map(String::as_str)
                            .collect();
                        // Keys that did not change, and one under no prefix, do no harm.
                        changed.extend(now.keys().step_by(*skip as usize + 1).map(String::as_str));
                        changed.push("/other/0");
                        Snapshot::patched(earlier, read.revision, i as u64, changed, |k| now.get(k))
                    }
                };
                proptest::prop_assert_eq!(&oracle, &format!("{patched:?}"));
                last = Some((patched, now));
            }
        }
    }
}
