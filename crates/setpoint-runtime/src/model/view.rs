//! The ledger as a pass sees it: one workload's share of a [`Snapshot`].
//!
//! - **On the ledger**: copies that a live node's last report shows `running`, owned by this
//!   workload (same name and uid) through a live owner link: their assignment is current, or
//!   was removed by a controller during the lease the node holds now. A copy that died, or
//!   whose assignment was deleted, stays on the ledger until a report says otherwise: that is
//!   the lag the lesson measures. A copy assigned under the node's earlier lease, whose
//!   assignment was released when the node was lost, does not count: an agent that comes back
//!   adopts and stops it, and it was replaced elsewhere. A copy that ended and is **done** by
//!   its workload's `restart` setting (`on-failure` after exit status 0, `never` after any end
//!   of its own) stays on the ledger too, with its assignment, so it is not replaced.
//! - **In flight**: assignments of the workload that exist, sit on a live node, and whose copy
//!   has neither reached the ledger nor been reported exited.
//! - **Next copy**: the workload's counter, which only grows.
//! - **Lost**: assignments on a node without a lease. For a workload that gives replacements
//!   new names they are **released** at once (the pass removes them). For `named`, whose
//!   replacement would reuse the name, they are **held** until it is confirmed that the copy
//!   ended: the node's last report shows it exited (its agent shut down cleanly), or the node
//!   is claimed again (it is live, and its new agent's report says what runs), or an operator
//!   forgot the node after the assignment was created ([`crate::model::node::forget`]).

use std::collections::{BTreeMap, BTreeSet};

use setpoint_core::{Batch, ControllerKind, CopyId, LedgerView, Name, Time};

use super::records::{Assignment, Phase, Stored, WorkloadSpec};
use super::snapshot::Snapshot;
use crate::store::Revision;

/// A map of node names asked only by name, never iterated (so its order reaches nothing),
/// with [`WordHash`]: a view asks it once per assignment, and at 100,000 copies the standard
/// SipHash was an eighth of a steady pass, FNV-1a's byte-at-a-time loop a tenth. The names are
/// the store's, which only the runtime's own processes and its operators write.
type NameMap<'a, V> =
    std::collections::HashMap<&'a str, V, std::hash::BuildHasherDefault<WordHash>>;

/// A multiplicative hash taking eight bytes a step (the rustc compiler's FxHash scheme), for
/// [`NameMap`]: not keyed, so not for names an adversary picks.
#[derive(Clone, Copy, Debug, Default)]
struct WordHash(u64);

impl WordHash {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for WordHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.add(u64::from_le_bytes(w.try_into().expect("eight bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }

    fn write_u8(&mut self, b: u8) {
        self.add(u64::from(b));
    }
}

/// Entries by copy number, one a number, in number order: the view's maps, as a sorted vector
/// asked by binary search and walked in order. A pass builds its view afresh from the snapshot,
/// and at 100,000 copies the ordered maps' node-by-node building and lookups were most of a
/// steady pass (`cargo bench -p setpoint-runtime --bench pass`, docs/performance-runtime.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ByNumber<T>(Vec<(u64, T)>);

impl<T: Copy> ByNumber<T> {
    /// From entries in any order; of two for one number the later is kept, as an ordered map's
    /// insert keeps it. Entries already in number order (the store's keys give the assignments
    /// so) cost one walk; numbers that fill most of their span (a workload's copies, reported
    /// node by node) are placed by number in one walk; others are sorted (stably, so the later
    /// of two stays last).
    fn from_entries(mut entries: Vec<(u64, T)>) -> Self {
        if !entries.is_sorted_by_key(|&(n, _)| n) {
            let (low, high) = entries.iter().fold((u64::MAX, 0), |(low, high), &(n, _)| {
                (low.min(n), high.max(n))
            });
            let span = high - low + 1;
            if span <= 2 * entries.len() as u64 {
                let mut slots: Vec<Option<T>> = vec![None; span as usize];
                for &(n, t) in &entries {
                    slots[(n - low) as usize] = Some(t);
                }
                entries.clear();
                entries.extend(
                    (low..=high)
                        .zip(slots)
                        .filter_map(|(n, slot)| slot.map(|t| (n, t))),
                );
                return ByNumber(entries);
            }
            entries.sort_by_key(|&(n, _)| n);
        }
        let mut kept = 0;
        for i in 0..entries.len() {
            if kept > 0 && entries[kept - 1].0 == entries[i].0 {
                entries[kept - 1] = entries[i];
            } else {
                entries[kept] = entries[i];
                kept += 1;
            }
        }
        entries.truncate(kept);
        ByNumber(entries)
    }

    fn get(&self, n: u64) -> Option<T> {
        self.0
            .binary_search_by_key(&n, |&(m, _)| m)
            .ok()
            .map(|i| self.0[i].1)
    }

    fn contains(&self, n: u64) -> bool {
        self.0.binary_search_by_key(&n, |&(m, _)| m).is_ok()
    }

    /// The entries whose numbers are in `from..to`.
    fn range(&self, from: u64, to: u64) -> &[(u64, T)] {
        let start = self.0.partition_point(|&(m, _)| m < from);
        let end = start + self.0[start..].partition_point(|&(m, _)| m < to);
        &self.0[start..end]
    }

    fn iter(&self) -> impl DoubleEndedIterator<Item = (u64, T)> + '_ {
        self.0.iter().copied()
    }

    fn numbers(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().map(|&(n, _)| n)
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// One of the workload's assignments as the view keeps it: with the two fields its walks read
/// copied beside it, so that a walk of 100,000 reads them from one vector instead of from each
/// assignment's place in the snapshot's map (a cache miss each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held<'s> {
    key: &'s str,
    a: &'s Stored<Assignment>,
    /// `a.create_revision`.
    incarnation: Revision,
    /// `a.value.generation`.
    generation: u64,
    /// Whether `a.value.node` holds its lease.
    live: bool,
}

/// One workload's ledger, built from a snapshot.
#[derive(Clone, Debug)]
pub struct WorkloadView<'s> {
    now_ms: u64,
    /// The declaration.
    pub spec: &'s Stored<WorkloadSpec>,
    /// Copy numbers on the ledger, each with the incarnation reported running.
    ledger: ByNumber<Revision>,
    /// Copies the reports show started, not ready yet (owned, as the ledger's): in flight, but
    /// with a process up.
    starting: BTreeSet<u64>,
    /// Copies (number, incarnation) reported exited by a live node.
    exited: BTreeSet<(u64, Revision)>,
    /// The oldest observation among the last reports of the live nodes that hold this
    /// workload's assignments or run its copies, in store milliseconds.
    reported_before: u64,
    /// The workload's assignments by copy number, with their keys.
    assigned: ByNumber<Held<'s>>,
    /// Assignments under this workload's name that belong to an earlier declaration of it (another
    /// uid), by copy number: garbage collection removes them, unless they are held.
    foreign: BTreeMap<u64, &'s Stored<Assignment>>,
    /// The snapshot, for what confirms that a lost node's copy ended.
    snapshot: &'s Snapshot,
    /// Copies of this workload's name that a node's last report shows alive (a forgotten lost
    /// node's aside), as `(number, incarnation)` pairs sorted and without repeats: gathered at
    /// most once per view, so that a pass creating many names does not scan every report for
    /// each, and at its first question, since only a pass that creates names asks (at 100,000
    /// copies gathering and sorting them was a tenth of every steady pass). A sorted vector
    /// rather than a set per number: the sets' allocations were a large part of a pass.
    reported_alive: std::cell::OnceCell<Vec<(u64, Revision)>>,
    /// [`WorkloadView::pending_creates`], once counted.
    pending_creates: std::cell::OnceCell<u64>,
    /// The assignments placed on a node that is not live, in number order: found once per
    /// view, since several questions of a pass walk them (at 100,000 copies a walk of every
    /// assignment asking the live nodes by name was a third of a steady pass).
    lost: Vec<(&'s str, &'s Stored<Assignment>)>,
    next: u64,
}

impl<'s> WorkloadView<'s> {
    /// The view of workload `name`, or `None` if it is not declared. A node whose agent holds
    /// no lease is lost: its copies are neither on the ledger nor in flight.
    pub fn new(snapshot: &'s Snapshot, name: &str) -> Option<Self> {
        let spec = snapshot.workloads.get(name)?;
        let uid = spec.create_revision;
        // The workload's assignments in one walk: this declaration's (by number), and an
        // earlier declaration's under the same name (`foreign`: garbage collection removes them).
        // The same walk notes whether each live node holds an assignment of this workload, and
        // whether each assignment's node is live, each asking a hash map of the live nodes
        // (ordered sets of 100,000 names, or one per question, were a fifth of a steady pass;
        // a second walk of the assignments, each read again from the snapshot, a third of one:
        // `cargo bench -p setpoint-runtime --bench pass`).
        let mut hosting: NameMap<'_, bool> =
            snapshot.nodes.keys().map(|n| (n.as_str(), false)).collect();
        // Room for them at once (growing a vector of 100,000 by doubling was a fourteenth of a
        // steady pass): no more than the counter has handed out, nor than the store holds.
        let next = snapshot.counters.get(name).map_or(0, |c| c.value.next);
        let room = usize::try_from(next)
            .unwrap_or(usize::MAX)
            .min(snapshot.assignments.len());
        let mut mine: Vec<(u64, Held<'_>)> = Vec::with_capacity(room);
        let mut foreign: BTreeMap<u64, &Stored<Assignment>> = BTreeMap::new();
        for (k, a) in snapshot.assignments_of(name) {
            if a.value.owner_uid == uid {
                let hosts = hosting.get_mut(a.value.node.as_str());
                let live = hosts.is_some();
                if let Some(hosts) = hosts {
                    *hosts = true;
                }
                let held = Held {
                    key: k.as_str(),
                    a,
                    incarnation: a.create_revision,
                    generation: a.value.generation,
                    live,
                };
                mine.push((a.value.n, held));
            } else {
                foreign.insert(a.value.n, a);
            }
        }
        // In number order already (an assignment's key is its workload's and number's, the
        // number zero-padded: `crate::model::trust`), so this is one walk.
        let assigned = ByNumber::from_entries(mine);
        let lost: Vec<_> = assigned
            .iter()
            .filter(|(_, h)| !h.live)
            .map(|(_, h)| (h.key, h.a))
            .collect();
        // The ledger's entries as the reports give them, the later of two for one number
        // winning; made a map once, in number order (100,000 inserts one by one were a tenth
        // of a steady pass).
        let mut shown: Vec<(u64, Revision)> = Vec::with_capacity(assigned.len());
        let mut exited = BTreeSet::new();
        let mut starting = BTreeSet::new();
        let mut reported_before = snapshot.now_ms;
        for (node, record) in &snapshot.nodes {
            // Only a report of the agent that holds the lease now counts: one left by an earlier
            // holder describes copies that were fenced or died with it.
            let acquired = record.value.acquired_ms;
            let Some(report) = snapshot
                .reports
                .get(node)
                .map(|r| &r.value)
                .filter(|r| r.reported_ms >= acquired)
            else {
                continue;
            };
            // Only the nodes of this workload's copies tell how far the ledger has caught up
            // with them: their agents report every R while they hold a `gated` copy
            // (`Assignment::heartbeat`), others (with reports on change) only with news.
            let mut hosts = hosting.get(node.as_str()).copied().unwrap_or_default();
            let claimed = record.create_revision;
            for c in &report.copies {
                // The uid first: it is in the report's record, where the name is a string of
                // its own elsewhere in memory (another workload's copies cost no read of it).
                if c.owner_uid != uid || c.workload != name {
                    continue;
                }
                hosts |= c.phase != Phase::Exited;
                match c.phase {
                    Phase::Running if owned(&assigned, c.n, c.incarnation, claimed) => {
                        shown.push((c.n, c.incarnation));
                    }
                    Phase::Running => {}
                    Phase::Exited
                        if !(c.stopping || c.killed)
                            && spec
                                .value
                                .restart
                                .done(c.exit.as_deref().unwrap_or_default())
                            && owned(&assigned, c.n, c.incarnation, claimed) =>
                    {
                        // Done by the workload's `restart` setting: its work is over, and it
                        // still counts, so that nothing is created in its place.
                        shown.push((c.n, c.incarnation));
                    }
                    Phase::Exited => {
                        exited.insert((c.n, c.incarnation));
                    }
                    Phase::Starting if owned(&assigned, c.n, c.incarnation, claimed) => {
                        starting.insert(c.n);
                    }
                    Phase::Starting => {}
                }
            }
            if hosts {
                reported_before = reported_before.min(report.observed_ms);
            }
        }
        // Of two entries for one number the later is kept.
        let ledger = ByNumber::from_entries(shown);
        Some(Self {
            reported_alive: std::cell::OnceCell::new(),
            pending_creates: std::cell::OnceCell::new(),
            lost,
            now_ms: snapshot.now_ms,
            spec,
            ledger,
            exited,
            starting,
            reported_before,
            assigned,
            foreign,
            snapshot,
            next,
        })
    }

    /// The workload's uid: the owner link its assignments carry.
    pub fn uid(&self) -> Revision {
        self.spec.create_revision
    }

    /// The copy numbers on the ledger, oldest first: where delete commands go.
    pub fn ledger_copies(&self) -> impl Iterator<Item = u64> + '_ {
        self.ledger.numbers()
    }

    /// The copy numbers that have an assignment: every copy commanded to run and not yet
    /// commanded to stop.
    pub fn assigned_copies(&self) -> impl Iterator<Item = u64> + '_ {
        self.assigned.numbers()
    }

    /// The copy numbers that have an assignment, with it, in number order.
    pub fn assignments(&self) -> impl Iterator<Item = (u64, &'s Stored<Assignment>)> + '_ {
        self.assigned.iter().map(|(n, h)| (n, h.a))
    }

    /// The assignment of copy `n` and its key, if it has one.
    pub fn assignment(&self, n: u64) -> Option<(&'s str, &'s Stored<Assignment>)> {
        self.assigned.get(n).map(|h| (h.key, h.a))
    }

    /// How many copies have an assignment.
    pub fn assigned_count(&self) -> usize {
        self.assigned.len()
    }

    /// The copy numbers that have an assignment, each with its assignment's generation, in
    /// number order.
    pub fn assigned_generations(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.assigned.iter().map(|(n, h)| (n, h.generation))
    }

    /// Assignments whose copy (this incarnation of it) a live node reported exited: their work
    /// is over.
    pub fn exited_assignments(
        &self,
    ) -> impl Iterator<Item = (&'s str, &'s Stored<Assignment>)> + '_ {
        // Most passes see no copy exited: then no assignment is walked.
        let walked = if self.exited.is_empty() {
            &self.assigned.0[..0]
        } else {
            &self.assigned.0[..]
        };
        walked
            .iter()
            .filter(|(n, h)| self.exited.contains(&(*n, h.incarnation)))
            .map(|(_, h)| (h.key, h.a))
    }

    /// Whether the ledger shows copy `n` (the counterpart of `LedgerView::shows`).
    pub fn shows(&self, n: u64) -> bool {
        self.ledger.contains(n)
    }

    /// The `k` oldest copies on the ledger, where `k` delete commands go (the counterpart of
    /// `LedgerView::oldest_on_ledger`).
    pub fn oldest_on_ledger(&self, k: u64) -> Vec<u64> {
        self.ledger.numbers().take(k as usize).collect()
    }

    /// Every change of this workload's copies observed before this time (store milliseconds)
    /// is on the ledger: the oldest observation among the last reports of the live nodes that
    /// hold its assignments or run its copies (the counterpart of
    /// `LedgerView::reported_before`).
    pub fn reported_before(&self) -> u64 {
        self.reported_before
    }

    /// Assignments placed on a node that is lost (its lease expired or was given up). Their
    /// agent fenced their copies, or is dead, or is paused with the copies still running: only
    /// [`WorkloadView::released_assignments`] of them may go.
    pub fn lost_assignments(&self) -> impl Iterator<Item = (&'s str, &'s Stored<Assignment>)> + '_ {
        self.lost.iter().copied()
    }

    /// Whether the lost assignment `a` is released: its workload does not reuse names, or it
    /// is confirmed that its copy ended ([`ended_while_lost`]).
    fn released(&self, a: &Stored<Assignment>) -> bool {
        self.spec.value.controller != ControllerKind::Named || ended_while_lost(self.snapshot, a)
    }

    /// Lost assignments whose names are free: a pass removes them (and `named` then creates
    /// the name again on a live node).
    pub fn released_assignments(
        &self,
    ) -> impl Iterator<Item = (&'s str, &'s Stored<Assignment>)> + '_ {
        self.lost_assignments().filter(|(_, a)| self.released(a))
    }

    /// Lost `named` assignments whose copy may still run (a paused or dead agent's): they stay,
    /// and keep their names, until the node is claimed again or forgotten. For `named` this
    /// includes an earlier declaration's assignments under the workload's name, which garbage
    /// collection holds by the same rule ([`crate::controller::reconcile::plan_gc`]).
    pub fn held_assignments(&self) -> impl Iterator<Item = (&'s str, &'s Stored<Assignment>)> + '_ {
        let named = self.spec.value.controller == ControllerKind::Named;
        let foreign = self
            .foreign
            .values()
            .filter(move |a| named && !self.is_live(&a.value.node))
            .filter(|a| !ended_while_lost(self.snapshot, a))
            .map(|a| ("", *a));
        self.lost_assignments()
            .filter(|(_, a)| !self.released(a))
            .chain(foreign)
    }

    /// Whether an earlier declaration of the workload still has an assignment for copy `n`
    /// (the name is not free until garbage collection removes it), or a node's last report shows
    /// a copy of that name still alive that no assignment of this declaration accounts for: an
    /// earlier declaration's copy whose assignment is gone but whose agent has not been seen to
    /// stop it (it may be paused: found by the million-seed chaos run, a redeclaration while an
    /// agent was paused within its node lease). A forgotten lost node's report does not count.
    pub fn name_taken_by_earlier(&self, n: u64) -> bool {
        if self.foreign.contains_key(&n) {
            return true;
        }
        let ours = self.assigned.get(n).map(|h| h.incarnation);
        let alive = self
            .reported_alive
            .get_or_init(|| self.gather_reported_alive());
        let from = alive.partition_point(|&(m, _)| m < n);
        alive[from..]
            .iter()
            .take_while(|&&(m, _)| m == n)
            .any(|&(_, i)| Some(i) != ours)
    }

    /// [`WorkloadView::reported_alive`]: every report's copies of this workload's name not
    /// exited, of any declaration, but a forgotten lost node's.
    fn gather_reported_alive(&self) -> Vec<(u64, Revision)> {
        let name = self.spec.value.name.as_str();
        let snapshot = self.snapshot;
        let mut alive: Vec<(u64, Revision)> = Vec::new();
        for (node, r) in &snapshot.reports {
            if !snapshot.nodes.contains_key(node) && snapshot.forgotten.contains_key(node) {
                continue;
            }
            alive.extend(
                r.value
                    .copies
                    .iter()
                    .filter(|c| c.workload == name && c.phase != Phase::Exited)
                    .map(|c| (c.n, c.incarnation)),
            );
        }
        alive.sort_unstable();
        alive.dedup();
        alive
    }

    /// Whether copy `n`'s assignment is held ([`WorkloadView::held_assignments`]).
    pub fn is_held(&self, n: u64) -> bool {
        self.assigned
            .get(n)
            .is_some_and(|h| !self.is_live(&h.a.value.node) && !self.released(h.a))
    }

    /// The lost nodes that hold assignments of this workload, in name order: whose copies it
    /// waits to hear have ended.
    pub fn waiting_for(&self) -> Vec<String> {
        let nodes: BTreeSet<&str> = self
            .held_assignments()
            .map(|(_, a)| a.value.node.as_str())
            .collect();
        nodes.into_iter().map(str::to_owned).collect()
    }

    /// Whether a copy named `n` exists and has not reached the ledger: a named creation in
    /// flight (the counterpart of `LedgerView::name_in_flight`).
    pub fn name_in_flight(&self, n: u64) -> bool {
        self.assigned
            .get(n)
            .is_some_and(|h| self.is_in_flight(n, &h))
    }

    /// The copy numbers of `batch` in flight, oldest first.
    fn in_flight_of(&self, batch: Batch) -> impl DoubleEndedIterator<Item = u64> + '_ {
        self.assigned
            .range(batch.first.0, batch.end())
            .iter()
            .filter(|(n, h)| self.is_in_flight(*n, h))
            .map(|&(n, _)| n)
    }

    fn is_in_flight(&self, n: u64, h: &Held<'_>) -> bool {
        self.in_flight_unless_shown(self.ledger.get(n) == Some(h.incarnation), n, h)
    }

    /// Whether copy `n` of `a` is in flight, given whether the ledger `shown` this incarnation
    /// of it: not shown, not reported exited, on a live node. Cheapest first: in a steady
    /// workload nearly every copy is on the ledger, and a number's lookup costs less than a node
    /// name's.
    fn in_flight_unless_shown(&self, shown: bool, n: u64, h: &Held<'_>) -> bool {
        !shown && !self.exited.contains(&(n, h.incarnation)) && h.live
    }

    /// Whether `node` holds its lease: its reports are recent enough to believe.
    fn is_live(&self, node: &str) -> bool {
        self.snapshot.nodes.contains_key(node)
    }

    /// Copies created and not yet on the ledger (all of them, not only one controller's): the
    /// copies in flight (`is_in_flight`), counted by walking the assignments and the
    /// ledger side by side (both in number order) instead of asking the ledger for each; at
    /// 100,000 copies the lookups were an eighth of a steady pass.
    pub fn pending_creates(&self) -> u64 {
        // A pass asks twice (its report, and whether it is idle): counted once.
        *self
            .pending_creates
            .get_or_init(|| self.count_pending_creates())
    }

    fn count_pending_creates(&self) -> u64 {
        let mut ledger = self.ledger.iter().peekable();
        let mut count = 0;
        for (n, h) in self.assigned.iter() {
            while ledger.next_if(|&(m, _)| m < n).is_some() {}
            let shown = ledger
                .peek()
                .is_some_and(|&(m, i)| m == n && i == h.incarnation);
            if self.in_flight_unless_shown(shown, n, &h) {
                count += 1;
            }
        }
        count
    }

    /// Copies on the ledger whose assignment is gone: commanded to stop, stop not yet reported.
    /// The ledger and the assignments walked side by side, as in
    /// [`WorkloadView::pending_creates`].
    pub fn pending_deletes(&self) -> u64 {
        let mut assigned = self.assigned.numbers().peekable();
        let mut count = 0;
        for n in self.ledger.numbers() {
            while assigned.next_if(|&m| m < n).is_some() {}
            if assigned.peek() != Some(&n) {
                count += 1;
            }
        }
        count
    }
}

/// Whether a copy `n` of incarnation `incarnation` that a node reports running has a live owner
/// link, and so counts on the ledger: its assignment is current (this incarnation of it
/// exists), or it was assigned during the lease its node holds now (`claimed`, the revision
/// that created the node's record), so a controller removed its assignment on purpose and the
/// copy stays on the ledger until a report shows it ended, the lag the lesson measures.
///
/// A copy assigned under an earlier lease whose assignment is gone was released when its node
/// was lost, and replaced elsewhere: an agent that comes back and adopts it is about to stop it.
/// Counting it would make a controller delete as many healthy copies on other nodes (issue 22,
/// item 3).
fn owned(assigned: &ByNumber<Held<'_>>, n: u64, incarnation: Revision, claimed: Revision) -> bool {
    // The lease's test first: it needs no lookup, and in a steady cluster nearly every copy
    // was assigned during its node's lease (at 100,000 copies the lookups were a fifth of a
    // steady pass, `cargo bench -p setpoint-runtime --bench pass`).
    incarnation > claimed
        || assigned
            .get(n)
            .is_some_and(|h| h.incarnation == incarnation)
}

/// Whether it is confirmed that the copy of `a` (this incarnation) ended, though its node is
/// lost: the node's last report lists it `exited` (an agent that stopped cleanly), or an
/// operator forgot the node after `a` was created ([`crate::model::node::forget`]).
pub fn ended_while_lost(snapshot: &Snapshot, a: &Stored<Assignment>) -> bool {
    let copy = CopyOf {
        node: &a.value.node,
        workload: &a.value.workload,
        n: a.value.n,
        incarnation: a.create_revision,
    };
    copy_ended_while_lost(snapshot, &copy)
}

/// One incarnation of one copy on one node, named without its assignment (a placement's key
/// names it too).
#[derive(Clone, Copy, Debug)]
pub struct CopyOf<'a> {
    /// The node it is placed on.
    pub node: &'a str,
    /// Its workload.
    pub workload: &'a str,
    /// Its number.
    pub n: u64,
    /// The revision that created its assignment (and placement).
    pub incarnation: Revision,
}

/// [`ended_while_lost`] of a copy named by its parts.
pub fn copy_ended_while_lost(snapshot: &Snapshot, copy: &CopyOf<'_>) -> bool {
    let forgotten = snapshot
        .forgotten
        .get(copy.node)
        .is_some_and(|f| copy.incarnation <= f.value.revision);
    let reported = snapshot.reports.get(copy.node).is_some_and(|r| {
        r.value.copies.iter().any(|c| {
            c.workload == copy.workload
                && c.n == copy.n
                && c.incarnation == copy.incarnation
                && c.phase == Phase::Exited
        })
    });
    forgotten || reported
}

impl LedgerView for WorkloadView<'_> {
    fn now(&self) -> Time {
        self.now_ms
    }

    fn on_ledger(&self) -> u64 {
        self.ledger.len() as u64
    }

    fn in_flight(&self, batch: Batch) -> u64 {
        self.in_flight_of(batch).count() as u64
    }

    fn next_copy(&self) -> CopyId {
        CopyId(self.next)
    }

    fn shows(&self, copy: CopyId) -> bool {
        WorkloadView::shows(self, copy.0)
    }

    fn oldest_on_ledger(&self, n: u64) -> Vec<CopyId> {
        WorkloadView::oldest_on_ledger(self, n)
            .into_iter()
            .map(CopyId)
            .collect()
    }

    fn in_flight_copies(&self, batch: Batch) -> Vec<CopyId> {
        self.in_flight_of(batch).rev().map(CopyId).collect()
    }

    fn reported_before(&self) -> Time {
        self.reported_before
    }

    /// The ledger's word on every copy it shows is current, as far as `intent`'s order of
    /// victims asks ([`setpoint_core::Controller::delete_targets`], its second group). That
    /// group guards the lesson's case: a copy whose start reaches the ledger after it died in
    /// flight, and after a batch replaced it. Here it cannot happen: a node's reports replace
    /// each other in order, so a copy reported exited is never shown running again, and the
    /// assignments of a lost node, whose copies left flight unseen, are released, so their
    /// copies count for nothing when it comes back. A copy shown running that a batch was made
    /// without was not replaced by it; the batch is the surplus. (A report's own age says
    /// nothing here: a node whose copies do not change writes none until its resync, and the
    /// hosts' clocks differ.)
    fn seen_at(&self, _copy: CopyId) -> Time {
        Time::MAX
    }

    fn started(&self, copy: CopyId) -> bool {
        self.starting.contains(&copy.0)
    }

    /// A copy on the ledger whose assignment is gone was commanded to stop.
    fn commanded(&self, copy: CopyId) -> bool {
        !self.assigned.contains(copy.0)
    }

    /// A copy's number is its name: `named` wants copies `0 … n − 1` of the workload.
    fn names_on_ledger(&self) -> Vec<Name> {
        self.ledger.numbers().map(Name).collect()
    }

    fn name_in_flight(&self, name: Name) -> bool {
        WorkloadView::name_in_flight(self, name.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::records::{encode, put_assignment, CopyReport, NodeReport};
    use crate::model::{assignment_key, copy_name, report_key, workload_key};
    use crate::store::{MemoryStore, Store, Txn};

    /// One copy a node's report shows: its number, whether its incarnation is its assignment's,
    /// its phase (0 starting, 1 running, 2 exited), whether it was stopping, and whether it
    /// belongs to an earlier declaration of the workload (another owner uid).
    type Shown = (u64, bool, u8, bool, bool);

    /// Which nodes' reports are stale (written before their node's claim: an earlier holder's)
    /// and which lost nodes an operator forgot, as bit masks over `a`, `b`, `c`.
    #[derive(Clone, Copy, Debug, Default)]
    struct Aged {
        stale: u8,
        forgot: u8,
    }

    /// A store with workload `w` (generation `generation`), nodes `a`, `b`, `c` of which those
    /// in `live` hold their lease, the assignments `(n, node, generation, foreign)` and what each
    /// live node's report shows.
    fn snapshot(
        generation: u64,
        live: u8,
        assigned: &[(u64, usize, u64, bool)],
        shown: &[Vec<Shown>; 3],
        aged: Aged,
    ) -> Snapshot {
        let store = MemoryStore::new();
        let nodes = ["a", "b", "c"];
        let mut spec = crate::controller::reconcile::tests::test_spec(
            "w",
            5,
            setpoint_core::ControllerKind::Intent,
            100,
        );
        spec.generation = generation;
        store
            .commit(&Txn::new().put(workload_key("w"), encode(&spec)))
            .unwrap();
        let uid = store
            .get(&workload_key("w"))
            .unwrap()
            .unwrap()
            .create_revision;
        for (i, node) in nodes.iter().enumerate() {
            if live & (1 << i) != 0 {
                crate::model::node::fake_node(&store, node).unwrap();
            }
        }
        let mut incarnations = BTreeMap::new();
        for &(n, node, g, foreign) in assigned {
            let key = assignment_key("w", n);
            if incarnations.contains_key(&n) {
                continue;
            }
            let a = Assignment {
                owner_uid: if foreign { uid + 1_000 } else { uid },
                node: nodes[node].into(),
                generation: g,
                ..crate::agent::fixtures::assignment(n)
            };
            let rev = store.commit(&put_assignment(Txn::new(), &key, &a)).unwrap();
            incarnations.insert(n, rev);
        }
        for (i, node) in nodes.iter().enumerate() {
            let copies = shown[i]
                .iter()
                .map(|&(n, own, phase, stopping, earlier)| CopyReport {
                    copy: copy_name("w", n),
                    workload: "w".into(),
                    owner_uid: if earlier { uid + 1_000 } else { uid },
                    n,
                    incarnation: match (own, incarnations.get(&n)) {
                        (true, Some(&r)) => r,
                        _ => 999_999,
                    },
                    phase: [Phase::Starting, Phase::Running, Phase::Exited][phase as usize],
                    pid: 1,
                    start_ticks: 0,
                    started_ms: 0,
                    ready_ms: None,
                    exited_ms: None,
                    exit: (phase == 2).then(|| "exit status 1".to_owned()),
                    stopping,
                    killed: false,
                })
                .collect();
            let stale = aged.stale & (1 << i) != 0;
            let at = if stale { 0 } else { store.now_ms() + 1_000 };
            let report = NodeReport {
                node: (*node).into(),
                observed_ms: at,
                reported_ms: at,
                agent_pid: 1,
                synced_revision: 0,
                copies,
            };
            store
                .commit(&Txn::new().put(report_key(node), encode(&report)))
                .unwrap();
        }
        for (i, node) in nodes.iter().enumerate() {
            if aged.forgot & !live & (1 << i) != 0 {
                crate::model::node::forget(&store, node).unwrap();
            }
        }
        Snapshot::load(&store).unwrap()
    }

    /// What `rollout_copies` gave before it walked the two sides together: the union of the
    /// assigned copies not reported exited and the copies on the ledger, in a map.
    fn rollout_copies_slow(view: &WorkloadView<'_>) -> Vec<crate::model::rollout::Copy> {
        let generation = view.spec.value.generation;
        let exited: BTreeSet<u64> = view.exited_assignments().map(|(_, a)| a.value.n).collect();
        let mut out = BTreeMap::new();
        for n in view.assigned_copies().filter(|n| !exited.contains(n)) {
            let (_, a) = view.assignment(n).unwrap();
            out.insert(
                n,
                crate::model::rollout::Copy {
                    n,
                    current: a.value.generation == generation,
                    assigned: true,
                    on_ledger: view.shows(n),
                },
            );
        }
        for n in view.ledger_copies() {
            out.entry(n).or_insert(crate::model::rollout::Copy {
                n,
                current: true,
                assigned: false,
                on_ledger: true,
            });
        }
        out.into_values().collect()
    }

    fn shown() -> impl proptest::strategy::Strategy<Value = Vec<Shown>> {
        proptest::collection::vec(
            (
                0u64..12,
                proptest::bool::weighted(0.8),
                0u8..3,
                proptest::bool::ANY,
                proptest::bool::weighted(0.15),
            ),
            0..10,
        )
    }

    proptest::proptest! {
        /// `ByNumber::from_entries` is a map's inserts one by one, the later of two for one
        /// number kept: over entries in order, dense enough to be placed by number, and sparse
        /// enough to be sorted, with repeats.
        #[test]
        fn by_number_is_an_ordered_maps_inserts(
            entries in proptest::collection::vec((0u64..40, 0u32..1_000), 0..60),
            sorted in proptest::bool::ANY,
            spread in proptest::sample::select(vec![1u64, 3, 1_000]),
        ) {
            let mut entries: Vec<(u64, u32)> =
                entries.into_iter().map(|(n, v)| (n * spread, v)).collect();
            if sorted {
                entries.sort_by_key(|&(n, _)| n);
            }
            let map: BTreeMap<u64, u32> = entries.iter().copied().collect();
            let by = ByNumber::from_entries(entries);
            proptest::prop_assert_eq!(&by.0, &map.into_iter().collect::<Vec<_>>());
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        /// The counts and the rollout's copies, walked side by side, are what asking the ledger
        /// copy by copy gives: over assignments on live and lost nodes, of this declaration and
        /// an earlier one, of two generations, and reports of every phase and incarnation.
        #[test]
        fn the_side_by_side_walks_equal_asking_copy_by_copy(
            generation in 0u64..2,
            live in 0u8..8,
            assigned in proptest::collection::vec(
                (0u64..12, 0usize..3, 0u64..2, proptest::bool::weighted(0.1)),
                0..12,
            ),
            a in shown(),
            b in shown(),
            c in shown(),
            stale in 0u8..8,
            forgot in 0u8..8,
        ) {
            let s = snapshot(generation, live, &assigned, &[a, b, c], Aged { stale, forgot });
            let v = WorkloadView::new(&s, "w").unwrap();
            // The ledger, one insert at a time in the nodes' and the reports' order (a later
            // entry for a number replaces an earlier one), and the lost assignments, asked one
            // by one.
            let uid = v.uid();
            // This declaration's assignments by number, from the snapshot (a later key for one
            // number replacing an earlier one, as a map's insert does).
            let mine: BTreeMap<u64, &Stored<Assignment>> = s
                .assignments_of("w")
                .filter(|(_, a)| a.value.owner_uid == uid)
                .map(|(_, a)| (a.value.n, a))
                .collect();
            let owns = |n: u64, incarnation: Revision, claimed: Revision| {
                incarnation > claimed || mine.get(&n).is_some_and(|a| a.create_revision == incarnation)
            };
            let mut ledger = BTreeMap::new();
            for (node, record) in &s.nodes {
                let Some(r) = s.reports.get(node).filter(|r| r.value.reported_ms >= record.value.acquired_ms) else {
                    continue;
                };
                for c in r.value.copies.iter().filter(|c| c.workload == "w" && c.owner_uid == uid) {
                    let own = owns(c.n, c.incarnation, record.create_revision);
                    let done = c.phase == Phase::Exited
                        && !(c.stopping || c.killed)
                        && v.spec.value.restart.done(c.exit.as_deref().unwrap_or_default());
                    if own && (c.phase == Phase::Running || done) {
                        ledger.insert(c.n, c.incarnation);
                    }
                }
            }
            proptest::prop_assert_eq!(&v.ledger.0, &ledger.iter().map(|(&n, &i)| (n, i)).collect::<Vec<_>>());
            let lost: Vec<u64> = mine
                .values()
                .filter(|a| !s.nodes.contains_key(&a.value.node))
                .map(|a| a.value.n)
                .collect();
            let found: Vec<u64> = v.lost.iter().map(|(_, a)| a.value.n).collect();
            proptest::prop_assert_eq!(found, lost);
            // In flight: not shown in this incarnation, not reported exited by a live node, on a
            // live node; asked of every assignment and every report.
            let exited = |n: u64, incarnation: Revision| {
                s.nodes.iter().any(|(node, record)| {
                    s.reports.get(node).filter(|r| r.value.reported_ms >= record.value.acquired_ms).is_some_and(|r| {
                        r.value.copies.iter().any(|c| {
                            c.workload == "w" && c.owner_uid == uid && c.n == n
                                && c.incarnation == incarnation && c.phase == Phase::Exited
                        })
                    })
                })
            };
            let creates = mine
                .values()
                .filter(|a| {
                    ledger.get(&a.value.n) != Some(&a.create_revision)
                        && !exited(a.value.n, a.create_revision)
                        && s.nodes.contains_key(&a.value.node)
                })
                .count();
            let deletes = ledger.keys().filter(|n| !mine.contains_key(n)).count();
            proptest::prop_assert_eq!(v.pending_creates(), creates as u64);
            proptest::prop_assert_eq!(v.pending_deletes(), deletes as u64);
            proptest::prop_assert_eq!(
                crate::model::loops::rollout_copies(&v),
                rollout_copies_slow(&v)
            );
            // A name is taken by an earlier declaration when one of its assignments has that
            // number, or when any report but a forgotten lost node's shows a copy of that name
            // alive in an incarnation other than this declaration's assignment's: asked of
            // every assignment and every report, number by number.
            for n in 0..12 {
                let ours = v.assignment(n).map(|(_, a)| a.create_revision);
                let earlier = s
                    .assignments_of("w")
                    .any(|(_, a)| a.value.n == n && a.value.owner_uid != uid);
                let alive = s.reports.iter().any(|(node, r)| {
                    (s.nodes.contains_key(node) || !s.forgotten.contains_key(node))
                        && r.value.copies.iter().any(|c| {
                            c.workload == "w"
                                && c.n == n
                                && c.phase != Phase::Exited
                                && Some(c.incarnation) != ours
                        })
                });
                proptest::prop_assert_eq!(v.name_taken_by_earlier(n), earlier || alive, "copy {}", n);
            }
        }
    }
}
