//! One reconcile pass, synchronous: read a snapshot, ask the setpoint-core controller, write its
//! action as one compare-and-set transaction. A conflict means the pass read stale state, so it
//! runs again on a fresh read.
//!
//! What a pass writes, and what it compares:
//! - always: the workload's declaration is unchanged (its `mod_revision`), and, when the pass
//!   runs under a leader lease, the leader record is still the one this controller wrote (a
//!   fencing token: a deposed leader's writes fail);
//! - `Create`: the counter moves from the batch's first number to its end, and each assignment
//!   `{workload}/{n}` is created only if absent. Two passes that raced for the same numbers
//!   cannot both win;
//! - `Delete`: the assignments of the oldest copies on the ledger are removed, each only if
//!   unchanged; `intent` orders them ([`setpoint_core::Controller::delete_targets`]): after
//!   copies already commanded, its own creations still in flight go, newest first, before the
//!   copies it did not count when it made them. A command to a copy whose assignment is already
//!   gone counts and does nothing. The reports of the nodes holding the workload's copies must
//!   be unchanged (up to [`REPORT_GUARDS`] nodes; not for `ledger`, which acts on its read as
//!   the lesson's does): a death reported after the read makes the pass run again on it rather
//!   than delete past it (chaos finding 16);
//! - garbage: assignments whose copy a node reported exited are removed, and so are the
//!   assignments of lost nodes (no node lease: [`crate::model::node`]) that are released
//!   ([`WorkloadView::released_assignments`]): every one of a workload that gives replacements
//!   new names, and for `named` only those of a node an operator forgot. A lost node's other
//!   `named` assignments are held, names and all, because a paused or killed agent's copies may
//!   still run; a delete command does not remove them either;
//! - the event log ([`crate::events`]): the pass's round, each creation and each removal by a
//!   delete command, each created only if absent, in the same transaction. A pass that does
//!   nothing else still writes its round.

use std::collections::BTreeMap;

use setpoint_core::{Action, Controller, Desired, LedgerView};

use crate::events::{self, CopyEvent, CopyEventKind, RoundEvent};
use crate::model::loops;
use crate::model::rollout;
use crate::model::view::WorkloadView;
use crate::model::{
    assignment_key, copy_name, counter_key, encode, put_assignment, remove_assignment, report_key,
    workload_key, Assignment, Counter, Snapshot, Stored, LEADER,
};
use crate::store::limits::{Mark, Part};
use crate::store::{Revision, Store, StoreError, Txn, TxnLimits};
use setpoint_core::ControllerKind;

/// How a pass runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassSettings {
    /// The leader record's `mod_revision` when this controller took the lease; every write
    /// compares it. `None` runs without a leader (tests, single-shot tools).
    pub fence: Option<Revision>,
    /// How many times a pass may meet a conflict before it gives up until its next round.
    pub max_attempts: u32,
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    /// What the controller decided, if anything.
    pub action: Option<Action>,
    /// The identities of the copies created.
    pub created: Vec<String>,
    /// Delete commands sent, including those that reached a copy already commanded to stop.
    pub delete_commands: u64,
    /// Copies whose assignment a delete command removed.
    pub deleted: Vec<String>,
    /// Copies a delete command was meant for and not sent to: in flight, on a node that has not
    /// reported since its agent could have started them ([`start_unknown`]).
    pub delete_held: Vec<String>,
    /// Assignments removed because their copy had exited.
    pub collected: Vec<String>,
    /// Assignments removed because their node is lost (its lease ended) and they are released.
    pub lost: Vec<String>,
    /// `named` copies whose assignments are held on lost nodes: not replaced until each node
    /// is claimed again or forgotten.
    pub held: Vec<String>,
    /// The lost nodes those are on, in name order.
    pub waiting_for: Vec<String>,
    /// Copies the controller wanted but no live node could take; nothing was written for them.
    pub unplaced: u64,
    /// Attempts lost to conflicts before this one committed.
    pub conflicts: u32,
    /// The revision written, or the revision read if nothing was written.
    pub revision: Revision,
    /// Copies the controller wanted that crash-loop backoff held back ([`crate::model::backoff`]).
    pub held_back: u64,
    /// One log line per failed start this pass collected.
    pub failures: Vec<String>,
    /// An idle stretch to log: it began with this pass (or has lasted long enough to mention).
    pub idle: Option<crate::model::loops::Idle>,
    /// A rolling update began, completed or stalled with this pass.
    pub rollout: Option<String>,
    /// The pass's writes took several transactions and stopped after some had committed:
    /// why, in words ([`crate::batches`]). What landed is in the lists above.
    pub stopped: Option<String>,
}

impl PassReport {
    /// Whether the pass changed anything in the store.
    pub fn wrote(&self) -> bool {
        !(self.created.is_empty()
            && self.deleted.is_empty()
            && self.collected.is_empty()
            && self.lost.is_empty())
    }
}

/// Why a pass did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PassError {
    /// This controller no longer holds the leader lease; another one acts now.
    #[error("not the leader any more")]
    NotLeader,
    /// The workload is no longer declared; its loop should end.
    #[error("workload '{0}' is not declared")]
    Gone(String),
    /// Every attempt met a conflict; the next round will try again.
    #[error("gave up after {0} conflicting attempts")]
    Contended(u32),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A pass's writes, ready to commit.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The transaction to commit, whole: [`Plan::writes`] cuts it into transactions that fit.
    pub txn: Txn,
    /// What the pass did, if the transaction commits.
    pub report: PassReport,
    /// The parts of `txn` that concern one copy each (its creation or removal, with its event),
    /// which commit together; in the order of `txn`.
    pub parts: Vec<Part>,
    /// The copy each part concerns, by the same index.
    pub part_copies: Vec<String>,
    /// How many comparisons open `txn` and guard every transaction of it: the declaration's
    /// revision and, under a leader, the fencing token.
    pub guards: usize,
    /// The pass's round entry and its key, appended after `txn` by [`Plan::writes`]; `None`
    /// leaves it out (an idle round the host does not write: docs/runtime.md, "Idle rounds").
    pub round: Option<RoundEvent>,
    round_key: String,
}

impl Plan {
    /// The plan's writes as transactions within `limits`, and what the pass did if they all
    /// commit: one transaction, exactly `txn`, whenever it fits.
    pub fn writes(mut self, limits: &TxnLimits) -> (PassReport, crate::batches::Writes) {
        if let Some(round) = self.round.take() {
            let txn = std::mem::take(&mut self.txn);
            self.txn = events::append(txn, std::mem::take(&mut self.round_key), encode(&round));
        }
        let pieces = crate::store::limits::split(&self.txn, self.guards, &self.parts, limits);
        let writes = crate::batches::Writes::new(
            pieces
                .into_iter()
                .map(|p| (p.txn, self.part_copies[p.parts].to_vec()))
                .collect(),
        );
        (self.report, writes)
    }

    fn part(&mut self, mark: Mark, txn: &Txn, copy: &str) {
        self.parts.push(Part::since(mark, txn));
        self.part_copies.push(copy.to_owned());
    }
}

impl PassReport {
    /// Forgets `copies`: their writes did not land.
    pub fn without(&mut self, copies: &[String]) {
        for list in [
            &mut self.created,
            &mut self.deleted,
            &mut self.collected,
            &mut self.lost,
        ] {
            list.retain(|c| !copies.contains(c));
        }
    }
}

/// The most nodes whose reports and leases a delete pass requires unchanged at its commit
/// (`guard_reports`), two compares each, well within etcd's 128 a transaction; a workload
/// spread wider commits without them, as before.
pub const REPORT_GUARDS: usize = 32;

/// `txn` requiring the report and the node record (its lease) of every node that holds an
/// assignment of `view`'s workload to be the ones in `snapshot` (absent if absent), when they
/// are at most [`REPORT_GUARDS`]: the count stood on those reports, and on those nodes being
/// live (a node lost since no longer counts its copies: lease-pressure seed 78,718, where a
/// delete committed on a slow link after the node whose two copies it had counted was lost).
fn guard_reports(mut txn: Txn, snapshot: &Snapshot, view: &WorkloadView<'_>) -> Txn {
    let nodes: std::collections::BTreeSet<&str> = view
        .assigned_copies()
        .filter_map(|n| view.assignment(n))
        .map(|(_, a)| a.value.node.as_str())
        .collect();
    if nodes.len() > REPORT_GUARDS {
        return txn;
    }
    for node in nodes {
        let rev = snapshot.reports.get(node).map_or(0, |r| r.mod_revision);
        txn = txn.expect(report_key(node), rev);
        let rev = snapshot.nodes.get(node).map_or(0, |r| r.mod_revision);
        txn = txn.expect(crate::model::node::node_key(node), rev);
    }
    txn
}

/// Decides one pass on `snapshot`: runs `controller` and turns its action into a transaction.
/// Changes the controller's memory as its pass does.
pub fn plan_pass(
    snapshot: &Snapshot,
    name: &str,
    controller: &mut Controller,
    settings: &PassSettings,
) -> Result<Plan, PassError> {
    if let Some(fence) = settings.fence {
        if snapshot.leader.as_ref().map(|l| l.mod_revision) != Some(fence) {
            return Err(PassError::NotLeader);
        }
    }
    let view = WorkloadView::new(snapshot, name).ok_or_else(|| PassError::Gone(name.to_owned()))?;
    let spec = &view.spec.value;
    let mut txn = Txn::new().expect(workload_key(name), view.spec.mod_revision);
    if let Some(fence) = settings.fence {
        txn = txn.expect(LEADER, fence);
    }
    let mut plan = Plan {
        txn: Txn::new(),
        report: PassReport::default(),
        parts: Vec::new(),
        part_copies: Vec::new(),
        guards: txn.compares.len(),
        round: None,
        round_key: String::new(),
    };
    let mut report = PassReport {
        revision: snapshot.revision,
        ..PassReport::default()
    };
    let mut gate = loops::Gate::prepare(snapshot, &view);
    let before = controller.clone();
    let copies = loops::rollout_copies(&view);
    let rolling = gate.rollout(&view, &copies, snapshot.now_ms);
    let action = if gate.stalled() && spec.controller != ControllerKind::Named {
        None
    } else if rolling && spec.controller != ControllerKind::Named {
        // A rolling update drives the copies until it is done; the controller takes over again
        // from an exact ledger.
        rollout::as_action(spec, &copies, view.next_copy().0)
    } else {
        let a = controller.pass(
            Desired {
                copies: spec.copies,
            },
            &view,
        );
        if rolling {
            rollout::with_named_step(a, spec, &copies)
        } else {
            a
        }
    };
    let mut commanded = Vec::new();
    match action.as_ref() {
        None => {}
        Some(&Action::Create { batch, .. }) => {
            let held = gate.holds(name, batch.first.0, snapshot.now_ms);
            let nodes = place(snapshot, batch.count);
            if held {
                // Backing off after failed starts: as with no live node, write nothing and let
                // the controller forget it tried.
                *controller = before;
                gate.held_back = batch.count;
            } else if nodes.is_empty() {
                // Nothing can run the copies: write nothing, and let the controller forget
                // it tried, so the next pass decides afresh.
                *controller = before;
                report.unplaced = batch.count;
            } else {
                let counter = snapshot.counters.get(name);
                txn = txn
                    .expect(counter_key(name), counter.map_or(0, |c| c.mod_revision))
                    .put(counter_key(name), encode(&Counter { next: batch.end() }));
                for (i, node) in (batch.first.0..batch.end()).zip(nodes) {
                    let key = assignment_key(name, i);
                    let mark = Mark::at(&txn);
                    txn = log_copy(txn, name, CopyEventKind::Create, i, snapshot, &node);
                    let a = new_assignment(name, i, node, &view, snapshot.now_ms);
                    report.created.push(a.copy.clone());
                    txn = put_assignment(txn, &key, &a);
                    plan.part(mark, &txn, &a.copy);
                }
            }
        }
        Some(Action::Named { create, delete, .. }) => {
            // Names are copy numbers. A name whose earlier assignment still exists (its copy
            // exited and is collected below) is created on the next pass, under a fresh key, so
            // agents tell the new incarnation from the old one.
            let fresh: Vec<u64> = create
                .iter()
                .map(|k| k.0)
                .filter(|&k| !gate.holds(name, k, snapshot.now_ms))
                .filter(|&k| view.assignment(k).is_none() && !view.name_taken_by_earlier(k))
                .collect();
            let nodes = place(snapshot, fresh.len() as u64);
            if nodes.is_empty() && !fresh.is_empty() {
                *controller = before.clone();
                report.unplaced = fresh.len() as u64;
            } else if let Some(&last) = fresh.last() {
                // Keep the sequence counter past every name in use, so the numbering
                // controllers never reuse one.
                let counter = snapshot.counters.get(name);
                let next = counter.map_or(0, |c| c.value.next).max(last + 1);
                txn = txn
                    .expect(counter_key(name), counter.map_or(0, |c| c.mod_revision))
                    .put(counter_key(name), encode(&Counter { next }));
                for (k, node) in fresh.iter().copied().zip(nodes) {
                    let mark = Mark::at(&txn);
                    txn = log_copy(txn, name, CopyEventKind::Create, k, snapshot, &node);
                    let a = new_assignment(name, k, node, &view, snapshot.now_ms);
                    report.created.push(a.copy.clone());
                    let key = assignment_key(name, k);
                    txn = put_assignment(txn, &key, &a);
                    plan.part(mark, &txn, &a.copy);
                }
            }
            report.delete_commands = delete.len() as u64;
            for k in delete {
                commanded.push(k.0);
                // A held copy may still run: removing its assignment would free its name.
                if view.is_held(k.0) {
                    continue;
                }
                if let Some((key, stored)) = view.assignment(k.0) {
                    let mark = Mark::at(&txn);
                    txn = log_removal(txn, name, snapshot, stored);
                    txn = remove_assignment(txn, key, stored);
                    report.deleted.push(stored.value.copy.clone());
                    plan.part(mark, &txn, &stored.value.copy);
                }
            }
        }
        Some(a @ Action::Delete { .. }) => {
            // CA25: the commands go to the oldest copies the ledger shows, after `intent`'s
            // own creations still in flight (`Controller::delete_targets`, chaos finding 13).
            // One that reaches a copy already commanded to stop counts and deletes nothing.
            report.delete_commands = a.size();
            // The count stood on the reports of the nodes that hold the workload's copies: a
            // report written since the read (a copy that died, or started) makes the commit
            // conflict, and the pass is planned again on it. Without it a death reported between
            // the read and the commit was deleted past (chaos finding 16, lease-pressure seed
            // 4,847: api-3's exit event was written 0.7 s before the commit that deleted three of
            // its replacements, which the guard now makes conflict). Guards of every piece of a
            // split pass; up to `REPORT_GUARDS` nodes.
            // Not for `ledger`: the lesson's controller acts on what it read, by definition,
            // and the real runtime reproduces the lesson's rows (`experiment lesson --real`); a
            // report landing within its pass would make its count differ from the lesson's.
            if spec.controller != ControllerKind::Ledger {
                debug_assert_eq!(txn.compares.len(), plan.guards, "guards come first");
                txn = guard_reports(txn, snapshot, &view);
                plan.guards = txn.compares.len();
            }
            let targets = controller.delete_targets(&view, a.size());
            for n in targets.into_iter().map(|c| c.0) {
                // A copy in flight whose node has not reported since its agent could have read
                // its assignment may have started unseen: a delete command now could remove a
                // copy that runs while none is surplus. It is held, and the surplus corrected
                // on the next pass after that report (chaos finding 19).
                if start_unknown(snapshot, &view, n) {
                    report.delete_held.push(copy_name(name, n));
                    report.delete_commands -= 1;
                    continue;
                }
                commanded.push(n);
                if let Some((key, stored)) = view.assignment(n) {
                    let mark = Mark::at(&txn);
                    txn = log_removal(txn, name, snapshot, stored);
                    txn = remove_assignment(txn, key, stored);
                    report.deleted.push(stored.value.copy.clone());
                    plan.part(mark, &txn, &stored.value.copy);
                }
            }
        }
    }
    report.action = action;
    for (key, stored) in view.exited_assignments() {
        if !report.deleted.contains(&stored.value.copy) {
            let mark = Mark::at(&txn);
            txn = remove_assignment(txn, key, stored);
            report.collected.push(stored.value.copy.clone());
            plan.part(mark, &txn, &stored.value.copy);
        }
    }
    // A lost node's released assignments go: their copies were fenced by their agent, or their
    // names are never reused, or an operator confirmed the node is gone. The held ones stay
    // and keep their names, so `named` cannot start a second copy of a name that may still run.
    // Each removal requires the node still lost when it commits: a node whose agent claimed it
    // again since the snapshot may have adopted the copy, which is then healthy and counted
    // (chaos finding 11), so the pass conflicts and is planned again on fresh state.
    for (key, stored) in view.released_assignments() {
        if !report.deleted.contains(&stored.value.copy) {
            let mark = Mark::at(&txn);
            txn = txn.expect(crate::model::node::node_key(&stored.value.node), 0);
            txn = remove_assignment(txn, key, stored);
            report.lost.push(stored.value.copy.clone());
            plan.part(mark, &txn, &stored.value.copy);
        }
    }
    report.held = view
        .held_assignments()
        .map(|(_, a)| a.value.copy.clone())
        .collect();
    report.waiting_for = view.waiting_for();
    gate.record.waiting_for = report.waiting_for.clone();
    let acted = !(report.created.is_empty() && report.deleted.is_empty());
    let reason = if gate.stalled() {
        Some(loops::IdleReason::RolloutPaused)
    } else {
        loops::idle_reason(
            spec.controller,
            &view,
            acted,
            report.unplaced,
            gate.held_back,
        )
    };
    report.rollout = gate.rollout_note.take();
    let (t, idle) = gate.finish(
        txn,
        &loops::loop_key(name),
        reason,
        snapshot.now_ms,
        spec.period_ms,
    );
    txn = t;
    report.idle = idle;
    report.held_back = gate.held_back;
    report.failures = std::mem::take(&mut gate.failures);
    let round = RoundEvent {
        at_ms: snapshot.now_ms,
        desired: spec.copies,
        on_ledger: view.on_ledger(),
        in_flight: view.pending_creates(),
        created: report.created.len() as u64,
        delete_commands: report.delete_commands,
        commanded,
        fence: settings.fence,
        period_ms: spec.period_ms,
        missed: 0,
    };
    plan.round = Some(round);
    plan.round_key = events::round_key(name, snapshot.now_ms, snapshot.revision);
    plan.txn = txn;
    plan.report = report;
    Ok(plan)
}

/// Whether copy `n` of the view's workload may have started without any report showing it:
/// it has an assignment, no report shows it running or starting, and its node's report
/// in `snapshot` is missing or was observed before the agent had read that assignment
/// ([`crate::model::NodeReport::synced_revision`] older than the assignment's revision).
///
/// A delete command to such a copy is a guess. In chaos finding 19 (lease-pressure seed
/// 12,459) a new leader counted two copies on a node cut off past its lease as gone and made
/// two replacements; the node came back, its report showed its copy again, and the surplus of
/// one went to the newest replacement, which had started 0.7 s before on another node while
/// that node's report, written before its agent read the assignment, showed nothing: four ran
/// for four wanted, and one was deleted. Waiting for the report costs a surplus of one for a
/// report's round trip; the report then shows the copy running (a surplus among running
/// copies, corrected by the next pass) or, read and not started, free to delete.
pub fn start_unknown(snapshot: &Snapshot, view: &WorkloadView<'_>, n: u64) -> bool {
    let Some((_, a)) = view.assignment(n) else {
        return false;
    };
    if view.shows(n) || LedgerView::started(view, setpoint_core::CopyId(n)) {
        return false;
    }
    snapshot.unreported_since(&a.value.node, a.mod_revision)
}

/// Adds copy `n`'s event of `kind`, tagged with the revision the pass read, to `txn`.
fn log_copy(
    txn: Txn,
    name: &str,
    kind: CopyEventKind,
    n: u64,
    snapshot: &Snapshot,
    node: &str,
) -> Txn {
    let event = CopyEvent {
        at_ms: snapshot.now_ms,
        node: node.to_owned(),
        pid: None,
        commanded: false,
        how: None,
    };
    events::append(
        txn,
        events::copy_event_key(name, kind, n, snapshot.revision),
        encode(&event),
    )
}

/// Adds the removal of `a`'s assignment by a delete command to `txn`'s log entries.
fn log_removal(txn: Txn, name: &str, snapshot: &Snapshot, a: &Stored<Assignment>) -> Txn {
    let event = CopyEvent {
        at_ms: snapshot.now_ms,
        node: a.value.node.clone(),
        pid: None,
        commanded: true,
        how: None,
    };
    events::append(
        txn,
        events::copy_event_key(name, CopyEventKind::Delete, a.value.n, a.create_revision),
        encode(&event),
    )
}

/// The assignment of copy `n` of workload `name` to `node`, owned by the workload.
fn new_assignment(
    name: &str,
    n: u64,
    node: String,
    view: &WorkloadView,
    now_ms: u64,
) -> Assignment {
    let spec = &view.spec.value;
    Assignment {
        copy: copy_name(name, n),
        workload: name.to_owned(),
        owner_uid: view.uid(),
        n,
        node,
        command: spec.command.clone(),
        startup_ms: spec.startup_ms,
        readiness: spec.readiness.clone(),
        grace_ms: spec.grace_ms,
        created_ms: now_ms,
        env: spec.env.clone(),
        generation: spec.generation,
        cut_off: spec.cut_off(),
        heartbeat: spec.controller == ControllerKind::Gated,
    }
}

/// Places `count` new copies on the live nodes, each on the node with the fewest assignments
/// (ties by name). Empty when no node is live.
fn place(snapshot: &Snapshot, count: u64) -> Vec<String> {
    let mut load: BTreeMap<&str, u64> = snapshot.nodes.keys().map(|n| (n.as_str(), 0)).collect();
    if load.is_empty() {
        return Vec::new();
    }
    for a in snapshot.assignments.values() {
        if let Some(l) = load.get_mut(a.value.node.as_str()) {
            *l += 1;
        }
    }
    (0..count)
        .map(|_| {
            let (&node, l) = load
                .iter_mut()
                .min_by_key(|(n, l)| (**l, **n))
                .expect("at least one live node");
            *l += 1;
            node.to_owned()
        })
        .collect()
}

/// Runs one pass of workload `name` to completion: read, decide, write; on a conflict, read
/// again and decide again, up to `settings.max_attempts` times.
pub fn run_pass(
    store: &dyn Store,
    name: &str,
    controller: &mut Controller,
    settings: &PassSettings,
) -> Result<PassReport, PassError> {
    let attempts = settings.max_attempts.max(1);
    for attempt in 0..attempts {
        let snapshot = Snapshot::load(store)?;
        // The controller keeps the memory of an attempt that loses: the batch it tried names
        // deterministic identities, so if the winner wrote the same ones they are found in
        // flight, and if nobody did, none of them is in flight and the batch is forgotten.
        let plan = plan_pass(&snapshot, name, controller, settings)?;
        let (mut report, mut writes) = plan.writes(&TxnLimits::ETCD_DEFAULT);
        report.conflicts = attempt;
        while let Some(txn) = writes.next_txn() {
            if txn.ops.is_empty() {
                return Ok(report);
            }
            crate::failpoint::hit("pass-before-commit");
            match store.commit(&txn) {
                Ok(rev) => {
                    crate::failpoint::hit("pass-after-commit");
                    writes.committed();
                    report.revision = rev;
                }
                Err(StoreError::Conflict { key, .. }) if key == LEADER => {
                    return Err(PassError::NotLeader)
                }
                Err(e) if writes.landed() > 0 && !e.is_lost() => {
                    writes.stop(&mut report, &e);
                    return Ok(report);
                }
                Err(StoreError::Conflict { .. }) => break,
                Err(other) => return Err(other.into()),
            }
        }
        if writes.landed() == writes.total() {
            return Ok(report);
        }
    }
    Err(PassError::Contended(attempts))
}

/// Removes every assignment whose owner is gone: its workload is not declared, or was deleted
/// and declared again (another uid). The agents then stop the copies. Returns the identities
/// removed.
pub fn collect_orphans(
    store: &dyn Store,
    fence: Option<Revision>,
) -> Result<Vec<String>, PassError> {
    let snapshot = Snapshot::load(store)?;
    let Some(plan) = plan_gc(&snapshot, fence, false)? else {
        return Ok(Vec::new());
    };
    let mut writes = plan.writes(&TxnLimits::ETCD_DEFAULT);
    while let Some(txn) = writes.next_txn() {
        crate::failpoint::hit("gc-before-commit");
        let committed = store.commit(&txn);
        match committed {
            Ok(_) => {
                crate::failpoint::hit("gc-after-commit");
                writes.committed();
            }
            // What landed is collected; the next sweep sees the rest.
            Err(e) if writes.landed() > 0 && !e.is_lost() && !e.is_conflict() => break,
            Err(e) => {
                gc_outcome(Err(e), Vec::new())?;
                break;
            }
        }
    }
    Ok(writes.done().to_vec())
}

/// Garbage collection's write, ready to commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcPlan {
    /// The transaction to commit, whole: [`GcPlan::writes`] cuts it into transactions that fit.
    pub txn: Txn,
    /// The identities of the copies whose assignments it removes.
    pub gone: Vec<String>,
    /// The parts of `txn` that remove one assignment (or one loop record) each.
    pub parts: Vec<Part>,
    /// The copy each part removes, by the same index (empty for a loop record).
    pub part_copies: Vec<String>,
    /// How many comparisons open `txn` and guard every transaction of it (the fencing token).
    pub guards: usize,
}

impl GcPlan {
    /// The plan's writes as transactions within `limits`, each with the copies it removes; one
    /// transaction, exactly `txn`, whenever it fits.
    pub fn writes(self, limits: &TxnLimits) -> crate::batches::Writes {
        let pieces = crate::store::limits::split(&self.txn, self.guards, &self.parts, limits);
        crate::batches::Writes::new(
            pieces
                .into_iter()
                .map(|p| {
                    let copies = self.part_copies[p.parts]
                        .iter()
                        .filter(|c| !c.is_empty())
                        .cloned()
                        .collect();
                    (p.txn, copies)
                })
                .collect(),
        )
    }
}

/// Decides one garbage collection on `snapshot`: the removal of every assignment whose owner is
/// gone, and of every loop record whose workload is gone, compared against the leader record's
/// revision `fence` if given. `None`: nothing to collect.
///
/// `ignore_owner_uid` is an injected bug for the chaos checker ([`crate::controller::HostConfig`]):
/// an assignment counts as owned whenever a workload of its name is declared, whatever its uid.
pub fn plan_gc(
    snapshot: &Snapshot,
    fence: Option<Revision>,
    ignore_owner_uid: bool,
) -> Result<Option<GcPlan>, PassError> {
    if fence.is_some() && snapshot.leader.as_ref().map(|l| l.mod_revision) != fence {
        return Err(PassError::NotLeader);
    }
    let mut txn = Txn::new();
    if let Some(f) = fence {
        txn = txn.expect(LEADER, f);
    }
    let guards = txn.compares.len();
    let (mut parts, mut part_copies) = (Vec::new(), Vec::new());
    let mut gone = Vec::new();
    for (key, a) in &snapshot.assignments {
        // A workload refused for a problem in its own records is not gone: its declaration
        // may be the record that failed, so its assignments are no orphans.
        if snapshot.refused.contains(&a.value.workload) {
            continue;
        }
        let owner = snapshot.workloads.get(&a.value.workload);
        let orphan = if ignore_owner_uid {
            owner.is_none()
        } else {
            owner.is_none_or(|w| w.create_revision != a.value.owner_uid)
        };
        // An orphan on a lost node may still run (its agent paused or dead): removing it would
        // free its name for a redeclared `named` workload. It is held, whatever the workload's
        // kind (the declaration that would tell is gone), until its copy is known to have ended.
        let node = &a.value.node;
        let lost_and_maybe_running =
            !snapshot.node_live(node) && !crate::model::view::ended_while_lost(snapshot, a);
        // On a live node, an orphan is held until the node's agent has reported from a read of
        // its placements that saw the assignment: a report from before cannot show a copy the
        // agent started since (and then, paused, did not report), so removing it would free a
        // name that may be running. Once a report shows the copy alive, the name stays taken by
        // that report (`WorkloadView::name_taken_by_earlier`).
        let unreported =
            snapshot.node_live(node) && snapshot.unreported_since(node, a.mod_revision);
        let held = lost_and_maybe_running || unreported;
        if orphan && !held {
            let mark = Mark::at(&txn);
            txn = remove_assignment(txn, key, a);
            gone.push(a.value.copy.clone());
            parts.push(Part::since(mark, &txn));
            part_copies.push(a.value.copy.clone());
        }
    }
    // A placement nothing owns (forged, or left by a hand): its copy may run on its node, so it
    // is held by the rules an orphan assignment is held by, then removed. Its key names the
    // copy; one that does not parse names none, and no agent ever ran it.
    for (key, g) in &snapshot.ghosts {
        let held = g.names.as_ref().is_some_and(|(node, workload, n)| {
            if snapshot.node_live(node) {
                snapshot.unreported_since(node, g.placed.mod_revision)
            } else {
                let copy = crate::model::view::CopyOf {
                    node,
                    workload,
                    n: *n,
                    incarnation: g.placed.create_revision,
                };
                // A node that never reported never ran anything.
                snapshot.reports.contains_key(node.as_str())
                    && !crate::model::view::copy_ended_while_lost(snapshot, &copy)
            }
        });
        if !held {
            let mark = Mark::at(&txn);
            txn = txn.expect(key, g.placed.mod_revision).delete(key);
            gone.push(key.clone());
            parts.push(Part::since(mark, &txn));
            part_copies.push(key.clone());
        }
    }
    // A loop record (backoff, idle reason, rollout) outlives nothing it belonged to.
    let mut stale_loops = false;
    for (name, rec) in &snapshot.loops {
        if snapshot.refused.contains(name) {
            continue;
        }
        let owner = snapshot.workloads.get(name);
        if owner.is_none_or(|w| w.create_revision != rec.value.uid) {
            let key = loops::loop_key(name);
            let mark = Mark::at(&txn);
            txn = txn.expect(&key, rec.mod_revision).delete(key);
            parts.push(Part::since(mark, &txn));
            part_copies.push(String::new());
            stale_loops = true;
        }
    }
    if gone.is_empty() && !stale_loops {
        return Ok(None);
    }
    Ok(Some(GcPlan {
        txn,
        gone,
        parts,
        part_copies,
        guards,
    }))
}

/// What garbage collection's commit means: the identities removed; nothing (someone else changed
/// an assignment meanwhile: the next sweep sees it); or [`PassError::NotLeader`] on a conflict
/// on the leader record.
pub fn gc_outcome(
    committed: Result<Revision, StoreError>,
    gone: Vec<String>,
) -> Result<Vec<String>, PassError> {
    match committed {
        Ok(_) => Ok(gone),
        Err(StoreError::Conflict { key, .. }) if key == LEADER => Err(PassError::NotLeader),
        Err(e) if e.is_conflict() => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{report_key, CopyReport, NodeReport, Phase, WorkloadSpec};
    use crate::store::MemoryStore;
    use crate::testing::FailingCommits;
    use setpoint_core::ControllerKind;

    /// A workload of `copies` copies of `sleep 60` kept by `kind` every `period_ms`, starting
    /// at once, stopping within 100 ms: the tests' workload.
    pub(crate) fn test_spec(
        name: &str,
        copies: u64,
        kind: ControllerKind,
        period_ms: u64,
    ) -> WorkloadSpec {
        WorkloadSpec {
            name: name.into(),
            command: vec!["sleep".into(), "60".into()],
            copies,
            controller: kind,
            period_ms,
            startup_ms: 0,
            readiness: None,
            grace_ms: 100,
            env: Default::default(),
            backoff: Default::default(),
            rollout: Default::default(),
            restart: Default::default(),
            generation: 0,
            stop_when_cut_off_ms: None,
        }
    }

    /// Declares workload `w` with `copies` copies kept by `ledger`.
    fn declare(store: &dyn Store, copies: u64) {
        declare_kind(store, copies, ControllerKind::Ledger);
    }

    /// Declares workload `w` with `copies` copies kept by `kind`.
    fn declare_kind(store: &dyn Store, copies: u64, kind: ControllerKind) {
        let w = test_spec("w", copies, kind, 200);
        let old = store
            .get(&workload_key("w"))
            .unwrap()
            .map_or(0, |e| e.mod_revision);
        store
            .commit(
                &Txn::new()
                    .expect(workload_key("w"), old)
                    .put(workload_key("w"), encode(&w)),
            )
            .unwrap();
    }

    /// Writes node `node`'s report: the given copy numbers of `w`, all in `phase`; the node
    /// holds a lease (it is live) from its first report on.
    pub(crate) fn report(store: &dyn Store, node: &str, copies: &[(u64, Phase)]) {
        report_synced(store, node, copies, u64::MAX);
    }

    /// [`report`], observed after a read of the node's placements at revision `synced`.
    fn report_synced(store: &dyn Store, node: &str, copies: &[(u64, Phase)], synced: Revision) {
        if store
            .get(&crate::model::node::node_key(node))
            .unwrap()
            .is_none()
        {
            crate::model::node::fake_node(store, node).unwrap();
        }
        let uid = store
            .get(&workload_key("w"))
            .unwrap()
            .unwrap()
            .create_revision;
        // Each copy runs the incarnation of its name that is assigned now.
        let incarnation = |n| {
            store
                .get(&assignment_key("w", n))
                .unwrap()
                .map_or(0, |e| e.create_revision)
        };
        let r = NodeReport {
            node: node.into(),
            observed_ms: store.now_ms(),
            reported_ms: store.now_ms(),
            agent_pid: 1,
            synced_revision: synced,
            copies: copies
                .iter()
                .map(|&(n, phase)| CopyReport {
                    copy: copy_name("w", n),
                    workload: "w".into(),
                    owner_uid: uid,
                    n,
                    incarnation: incarnation(n),
                    phase,
                    pid: 0,
                    start_ticks: 0,
                    started_ms: 0,
                    // Copies reported past starting became ready, and those reported exited
                    // were killed on command: a death replaced at once, not a crash that backs
                    // off (see `loops` for those).
                    ready_ms: (phase != Phase::Starting).then_some(0),
                    exited_ms: None,
                    exit: None,
                    stopping: false,
                    killed: phase == Phase::Exited,
                })
                .collect(),
        };
        store
            .commit(&Txn::new().put(report_key(node), encode(&r)))
            .unwrap();
    }

    const SETTINGS: PassSettings = PassSettings {
        fence: None,
        max_attempts: 3,
    };

    /// The identities of every assignment in `store`, in key order.
    pub(crate) fn names(store: &dyn Store) -> Vec<String> {
        Snapshot::load(store)
            .unwrap()
            .assignments
            .values()
            .map(|a| a.value.copy.clone())
            .collect()
    }

    #[test]
    fn creation_writes_deterministic_identities_with_an_owner_link_spread_over_nodes() {
        let store = MemoryStore::new();
        declare(&store, 3);
        report(&store, "b", &[]);
        report(&store, "a", &[]);
        let mut c = Controller::new(ControllerKind::Intent);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(r.created, ["w-0", "w-1", "w-2"]);
        let s = Snapshot::load(&store).unwrap();
        let uid = s.workloads["w"].create_revision;
        let nodes: Vec<_> = s
            .assignments
            .values()
            .map(|a| a.value.node.as_str())
            .collect();
        assert_eq!(nodes, ["a", "b", "a"]);
        assert!(s.assignments.values().all(|a| a.value.owner_uid == uid));
        assert_eq!(s.counters["w"].value.next, 3);
        // Intent counts its batch in flight: a second pass does nothing.
        assert_eq!(
            run_pass(&store, "w", &mut c, &SETTINGS).unwrap().action,
            None
        );
    }

    /// A pass whose creations take several transactions, and whose third commit fails with a
    /// passing error (a store that does not answer in time) after two landed, reports what
    /// landed and why it stopped, and returns: the next pass goes on (mutant 758 of the
    /// mutation sample made such a pass an error, which the report then never showed, so the
    /// copies of the two landed transactions were not counted as created).
    #[test]
    fn a_pass_whose_later_transaction_fails_reports_what_landed_and_why_it_stopped() {
        let inner = MemoryStore::new();
        declare_kind(&inner, 300, ControllerKind::Intent);
        report(&inner, "a", &[]);
        report(&inner, "b", &[]);
        let store = FailingCommits::new(inner, |_: &MemoryStore, n, _: &Txn| {
            (n == 3).then(|| StoreError::Unavailable("deadline exceeded".into()))
        });
        let mut c = Controller::new(ControllerKind::Intent);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).expect("the pass returns its report");
        let stopped = r.stopped.as_deref().unwrap_or_default();
        assert!(
            stopped.starts_with("wrote 2 of its ") && stopped.contains("deadline exceeded"),
            "{stopped:?}"
        );
        let landed = names(&store);
        assert!(!landed.is_empty() && landed.len() < 300, "{}", landed.len());
        let mut created = r.created.clone();
        created.sort();
        let mut landed_sorted = landed.clone();
        landed_sorted.sort();
        assert_eq!(
            created, landed_sorted,
            "the report counts what landed, no more"
        );
    }

    #[test]
    fn each_assignment_is_indexed_under_its_node_and_leaves_the_index_with_it() {
        let store = MemoryStore::new();
        declare(&store, 3);
        report(&store, "a", &[]);
        report(&store, "b", &[]);
        let mut c = Controller::new(ControllerKind::Ledger);
        run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        let placed = |node: &str| -> Vec<(String, u64)> {
            store
                .read(&[&crate::model::placements_of(node)])
                .unwrap()
                .entries
                .into_iter()
                .map(|e| (e.key, e.create_revision))
                .collect()
        };
        let a = placed("a");
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].0, crate::model::placement_key("a", "w", 0));
        // The index entry's create revision is the assignment's incarnation.
        let inc = store
            .get(&assignment_key("w", 0))
            .unwrap()
            .unwrap()
            .create_revision;
        assert_eq!(a[0].1, inc);
        assert_eq!(placed("b").len(), 1);
        // Copies exit and are collected; a scale-down deletes; the index follows.
        report(&store, "a", &[(0, Phase::Exited), (2, Phase::Running)]);
        report(&store, "b", &[(1, Phase::Running)]);
        declare(&store, 1);
        run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        let left: Vec<String> = names(&store);
        let indexed = placed("a").len() + placed("b").len();
        assert_eq!(indexed, left.len(), "{left:?}");
    }

    #[test]
    fn no_live_node_means_nothing_written_and_nothing_remembered() {
        let store = MemoryStore::new();
        declare(&store, 2);
        let mut c = Controller::new(ControllerKind::Intent);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!((r.unplaced, r.created.len()), (2, 0));
        assert_eq!(c, Controller::new(ControllerKind::Intent));
    }

    #[test]
    fn a_concurrent_write_makes_the_pass_conflict_and_retry_cleanly_on_fresh_state() {
        // Two controllers read the same state; the first commits, the second's write conflicts
        // on the counter and the assignments, and its retry sees the first one's copies.
        let store = MemoryStore::new();
        declare(&store, 2);
        report(&store, "a", &[]);
        let snapshot = Snapshot::load(&store).unwrap();
        let mut first = Controller::new(ControllerKind::Intent);
        let mut second = Controller::new(ControllerKind::Intent);
        let plan_one = plan_pass(&snapshot, "w", &mut first, &SETTINGS).unwrap();
        let plan_two = plan_pass(&snapshot, "w", &mut second, &SETTINGS).unwrap();
        store.commit(&plan_one.txn).unwrap();
        let lost = store.commit(&plan_two.txn).unwrap_err();
        assert!(lost.is_conflict(), "{lost}");
        assert_eq!(names(&store), ["w-0", "w-1"]);
        // The loser's loop reruns the pass on a fresh read. Its memory still holds the batch it
        // tried to write, and because identities are deterministic the winner wrote exactly
        // those copies: the retry finds them in flight and creates nothing.
        let r = run_pass(&store, "w", &mut second, &SETTINGS).unwrap();
        assert_eq!((r.action, r.created.len()), (None, 0));
        assert_eq!(names(&store), ["w-0", "w-1"]);
        // A controller with no such memory counts only the ledger, where the copies are not
        // yet: it creates new identities after the winner's, never the same ones twice. That
        // is why only the leader writes (see the fence test below).
        let mut amnesiac = Controller::new(ControllerKind::Intent);
        let r = run_pass(&store, "w", &mut amnesiac, &SETTINGS).unwrap();
        assert_eq!(r.created, ["w-2", "w-3"]);
    }

    #[test]
    fn a_write_landing_between_read_and_commit_is_retried_inside_run_pass() {
        // Another writer gets in just before the first commit.
        let store = FailingCommits::new(MemoryStore::new(), |inner: &MemoryStore, n, _: &Txn| {
            if n == 1 {
                declare(inner, 3);
            }
            None
        });
        declare(&store.inner, 2);
        report(&store.inner, "a", &[]);
        let mut c = Controller::new(ControllerKind::Ledger);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(r.conflicts, 1);
        // The retry read the new declaration (3 copies), not the stale one.
        assert_eq!(r.created, ["w-0", "w-1", "w-2"]);
    }

    #[test]
    fn a_collection_cut_short_after_a_batch_landed_returns_what_it_removed() {
        // 100 orphans: more than one transaction of a default etcd, so two batches; the store
        // is unavailable for the second.
        let store = FailingCommits::new(MemoryStore::new(), |_: &MemoryStore, n, _: &Txn| {
            (n == 2).then(|| StoreError::Unavailable("the disk is full".into()))
        });
        declare(&store.inner, 100);
        report(&store.inner, "a", &[]);
        let mut c = Controller::new(ControllerKind::Ledger);
        run_pass(&store.inner, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(names(&store.inner).len(), 100);
        store
            .inner
            .commit(&Txn::new().delete(workload_key("w")))
            .unwrap();
        declare(&store.inner, 0);
        let removed = collect_orphans(&store, None).unwrap();
        assert_eq!(store.commits(), 2);
        assert!(!removed.is_empty() && removed.len() < 100, "{removed:?}");
        let left = names(&store.inner);
        assert_eq!(left.len() + removed.len(), 100);
        assert!(
            removed.iter().all(|r| !left.contains(r)),
            "it says what it removed"
        );
        // The next sweep collects the rest.
        assert_eq!(collect_orphans(&store.inner, None).unwrap(), left);
    }

    #[test]
    fn delete_commands_go_to_the_oldest_copies_on_the_ledger_and_repeat_harmlessly() {
        let store = MemoryStore::new();
        declare(&store, 4);
        report(&store, "a", &[]);
        let mut c = Controller::new(ControllerKind::Ledger);
        run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        report(&store, "a", &[0, 1, 2, 3].map(|n| (n, Phase::Running)));
        declare(&store, 2);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(
            (r.delete_commands, r.deleted.clone()),
            (2, vec!["w-0".into(), "w-1".into()])
        );
        // The ledger still shows the four copies: the same two commands again, deleting nothing.
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!((r.delete_commands, r.deleted.len()), (2, 0));
        assert_eq!(names(&store), ["w-2", "w-3"]);
    }

    /// Four `intent` copies on nodes a and b, made by a first leader, and a new leader's
    /// `intent`, returned, that counted none of them and made four more (w-4 … w-7).
    fn new_leader_made_four_more(store: &MemoryStore) -> Controller {
        declare_kind(store, 4, ControllerKind::Intent);
        report(store, "a", &[]);
        report(store, "b", &[]);
        let mut first = Controller::new(ControllerKind::Intent);
        run_pass(store, "w", &mut first, &SETTINGS).unwrap();
        let mut second = Controller::new(ControllerKind::Intent);
        let r = run_pass(store, "w", &mut second, &SETTINGS).unwrap();
        assert_eq!(r.created, ["w-4", "w-5", "w-6", "w-7"]);
        second
    }

    #[test]
    fn a_new_leaders_intent_deletes_its_own_creations_before_copies_seen_running_since() {
        // Chaos finding 13: the leader changed before any report showed its copies; the new
        // leader's intent counted 0 and created 4 more. Fresh reports then show the first four
        // running: the surplus is the four that have not started.
        let store = MemoryStore::new();
        let mut second = new_leader_made_four_more(&store);
        let snapshot = Snapshot::load(&store).unwrap();
        for node in ["a", "b"] {
            let running: Vec<(u64, Phase)> = snapshot
                .assignments
                .values()
                .filter(|a| a.value.node == node && a.value.n < 4)
                .map(|a| (a.value.n, Phase::Running))
                .collect();
            report(&store, node, &running);
        }
        let r = run_pass(&store, "w", &mut second, &SETTINGS).unwrap();
        assert_eq!(r.delete_commands, 4);
        assert_eq!(r.deleted, ["w-7", "w-6", "w-5", "w-4"]);
        assert_eq!(names(&store), ["w-0", "w-1", "w-2", "w-3"]);
    }

    #[test]
    fn a_report_written_between_a_delete_passs_read_and_its_commit_makes_it_conflict() {
        for kind in [ControllerKind::Intent, ControllerKind::Expectations] {
            report_between_read_and_commit(&MemoryStore::new(), kind);
        }
    }

    /// Chaos finding 16: five run for four; one of them dies and its node reports it after the
    /// pass read. The pass's delete must not commit on the read's count.
    /// Five copies on nodes a and b; declared down to four, a pass plans one delete; b's first
    /// copy ends and b's report says so before the pass commits: the commit conflicts on b's
    /// report, and the pass planned again collects the exited copy and deletes nothing. On any
    /// store: the memory store here, a stock etcd in `stock_etcd_tests`.
    pub(crate) fn report_between_read_and_commit(store: &dyn Store, kind: ControllerKind) {
        declare_kind(store, 5, kind);
        report(store, "a", &[]);
        report(store, "b", &[]);
        let mut c = Controller::new(kind);
        run_pass(store, "w", &mut c, &SETTINGS).unwrap();
        let on = |node: &str| -> Vec<(u64, Phase)> {
            Snapshot::load(store)
                .unwrap()
                .assignments
                .values()
                .filter(|a| a.value.node == node)
                .map(|a| (a.value.n, Phase::Running))
                .collect()
        };
        let (a, b) = (on("a"), on("b"));
        report(store, "a", &a);
        report(store, "b", &b);
        declare_kind(store, 4, kind);
        let (r, txn) = planned(store, &mut c);
        assert_eq!(r.delete_commands, 1, "{kind:?}: {r:?}");
        // b's first copy ends, and b says so.
        let mut b_now = b.clone();
        b_now[0].1 = Phase::Exited;
        report(store, "b", &b_now);
        match store.commit(&txn) {
            Err(StoreError::Conflict { key, .. }) => assert_eq!(key, report_key("b")),
            other => panic!("{kind:?}: the delete committed on a stale count: {other:?}"),
        }
        // Planned again on what b said, the pass collects the exited copy and deletes nothing:
        // four run, as desired.
        let r = run_pass(store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(
            (r.delete_commands, r.collected.len()),
            (0, 1),
            "{kind:?}: {r:?}"
        );
        assert_eq!(names(store).len(), 4);
        // A pass that creates is not held to the reports: a report written meanwhile does not
        // refuse it.
        declare_kind(store, 6, kind);
        let (_, txn) = planned(store, &mut c);
        report(store, "a", &a);
        store.commit(&txn).unwrap();
    }

    /// A pass of `c` planned on `store` now, and its first transaction, not committed.
    fn planned(store: &dyn Store, c: &mut Controller) -> (PassReport, Txn) {
        let snapshot = Snapshot::load(store).unwrap();
        let plan = plan_pass(&snapshot, "w", c, &SETTINGS).unwrap();
        let (r, mut writes) = plan.writes(&TxnLimits::ETCD_DEFAULT);
        (r, writes.next_txn().unwrap())
    }

    #[test]
    fn a_node_lost_between_a_delete_passs_read_and_its_commit_makes_it_conflict() {
        // Lease-pressure seed 78,718: the count read included a node's copies, and the node
        // was lost before the commit; its copies no longer count, so the surplus is gone.
        let store = MemoryStore::new();
        declare_kind(&store, 4, ControllerKind::Intent);
        report(&store, "a", &[]);
        report(&store, "b", &[]);
        let mut c = Controller::new(ControllerKind::Intent);
        run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        report(&store, "a", &[(0, Phase::Running), (2, Phase::Running)]);
        report(&store, "b", &[(1, Phase::Running), (3, Phase::Running)]);
        declare_kind(&store, 3, ControllerKind::Intent);
        let (r, txn) = planned(&store, &mut c);
        assert_eq!(r.delete_commands, 1, "{r:?}");
        let node_b = crate::model::node::node_key("b");
        store.commit(&Txn::new().delete(&node_b)).unwrap();
        match store.commit(&txn) {
            Err(StoreError::Conflict { key, .. }) => assert_eq!(key, node_b),
            other => panic!("the delete committed past a node lost: {other:?}"),
        }
    }

    #[test]
    fn ledger_deletes_on_what_it_read_as_the_lesson_does() {
        // The lesson's `ledger` acts on its read: its delete is not held to the reports.
        let store = MemoryStore::new();
        declare_kind(&store, 2, ControllerKind::Ledger);
        report(&store, "a", &[]);
        let mut c = Controller::new(ControllerKind::Ledger);
        run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        report(&store, "a", &[(0, Phase::Running), (1, Phase::Running)]);
        declare_kind(&store, 1, ControllerKind::Ledger);
        let (r, txn) = planned(&store, &mut c);
        assert_eq!(r.delete_commands, 1, "{r:?}");
        report(&store, "a", &[(0, Phase::Running), (1, Phase::Exited)]);
        store.commit(&txn).unwrap();
    }

    #[test]
    fn a_copy_in_flight_is_not_deleted_before_its_node_reports_from_a_read_that_saw_it() {
        // Chaos finding 19: the surplus is the new leader's four creations, but each node's
        // report was observed before its agent read them, so any of them may have started
        // unseen. No delete command goes out until the reports catch up.
        let store = MemoryStore::new();
        let mut second = new_leader_made_four_more(&store);
        let snapshot = Snapshot::load(&store).unwrap();
        let made = snapshot
            .assignments
            .values()
            .filter(|a| a.value.n >= 4)
            .map(|a| a.mod_revision)
            .min()
            .unwrap();
        let running_of = |node: &str| -> Vec<(u64, Phase)> {
            snapshot
                .assignments
                .values()
                .filter(|a| a.value.node == node && a.value.n < 4)
                .map(|a| (a.value.n, Phase::Running))
                .collect()
        };
        report_synced(&store, "a", &running_of("a"), made - 1);
        report_synced(&store, "b", &running_of("b"), made - 1);
        let r = run_pass(&store, "w", &mut second, &SETTINGS).unwrap();
        assert_eq!((r.delete_commands, r.deleted.len()), (0, 0), "{r:?}");
        assert_eq!(r.delete_held, ["w-7", "w-6", "w-5", "w-4"]);
        assert_eq!(names(&store).len(), 8);
        // Node a has read them and started none; node b has not read them yet.
        report_synced(&store, "a", &running_of("a"), made);
        let r = run_pass(&store, "w", &mut second, &SETTINGS).unwrap();
        let on = |node: &str| -> Vec<String> {
            snapshot
                .assignments
                .values()
                .filter(|a| a.value.node == node && a.value.n >= 4)
                .map(|a| a.value.copy.clone())
                .collect()
        };
        let (mut deleted, mut held) = (r.deleted.clone(), r.delete_held.clone());
        deleted.sort();
        held.sort();
        assert_eq!((deleted, held), (on("a"), on("b")), "{r:?}");
        assert_eq!(r.delete_commands, on("a").len() as u64);
    }

    #[test]
    fn intent_deletes_its_creations_not_started_before_those_a_report_shows_started() {
        // Chaos finding 16 (restarts-during-partitions 29,399): as above, but one of the four
        // replacements is up on its node, not ready yet. The surplus of two is two of the
        // others, newest first.
        let store = MemoryStore::new();
        let mut second = new_leader_made_four_more(&store);
        let snapshot = Snapshot::load(&store).unwrap();
        let node_of = |n: u64| {
            snapshot
                .assignments
                .values()
                .find(|a| a.value.n == n)
                .map(|a| a.value.node.clone())
                .unwrap()
        };
        let up = 7;
        for node in ["a", "b"] {
            let mut copies: Vec<(u64, Phase)> = (0..2)
                .filter(|&n| node_of(n) == node)
                .map(|n| (n, Phase::Running))
                .collect();
            if node_of(up) == node {
                copies.push((up, Phase::Starting));
            }
            report(&store, node, &copies);
        }
        let r = run_pass(&store, "w", &mut second, &SETTINGS).unwrap();
        assert_eq!(r.delete_commands, 2, "{r:?}");
        assert_eq!(r.deleted, ["w-6", "w-5"]);
    }

    #[test]
    fn intents_repeated_delete_commands_go_where_the_first_went_not_to_its_work_in_flight() {
        // Four run; scaled to 2, the oldest two are commanded to stop, and the ledger still
        // shows them. Scaled to 5 and then 3 before it hears: the surplus is the two already on
        // their way out, not the copy just created.
        let store = MemoryStore::new();
        declare_kind(&store, 4, ControllerKind::Intent);
        report(&store, "a", &[]);
        let mut c = Controller::new(ControllerKind::Intent);
        run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        report(&store, "a", &[0, 1, 2, 3].map(|n| (n, Phase::Running)));
        declare_kind(&store, 2, ControllerKind::Intent);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(r.deleted, ["w-0", "w-1"]);
        declare_kind(&store, 5, ControllerKind::Intent);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(r.created, ["w-4"]);
        declare_kind(&store, 3, ControllerKind::Intent);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!((r.delete_commands, r.deleted.len()), (2, 0), "{r:?}");
        assert_eq!(names(&store), ["w-2", "w-3", "w-4"]);
    }

    #[test]
    fn exited_copies_are_collected_and_replaced_with_new_identities() {
        let store = MemoryStore::new();
        declare(&store, 2);
        report(&store, "a", &[]);
        let mut c = Controller::new(ControllerKind::Ledger);
        run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        report(&store, "a", &[(0, Phase::Exited), (1, Phase::Running)]);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(r.created, ["w-2"]);
        assert_eq!(r.collected, ["w-0"]);
        assert_eq!(names(&store), ["w-1", "w-2"]);
    }

    #[test]
    fn orphans_of_a_deleted_or_redeclared_workload_are_collected() {
        let store = MemoryStore::new();
        declare(&store, 2);
        report(&store, "a", &[]);
        let mut c = Controller::new(ControllerKind::Ledger);
        run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert!(collect_orphans(&store, None).unwrap().is_empty());
        store.commit(&Txn::new().delete(workload_key("w"))).unwrap();
        declare(&store, 2);
        assert_eq!(collect_orphans(&store, None).unwrap(), ["w-0", "w-1"]);
        // The counter survives: the new workload's copies get new identities.
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(r.created, ["w-2", "w-3"]);
    }

    /// Ends `node`'s lease, as the store does when its agent stops renewing (paused or dead).
    fn lose(store: &dyn Store, node: &str) {
        let e = store
            .get(&crate::model::node::node_key(node))
            .unwrap()
            .unwrap();
        let rec = crate::model::decode::<crate::model::node::NodeRecord>(&e).unwrap();
        store.revoke(rec.value.lease).unwrap();
        assert!(!Snapshot::load(store).unwrap().node_live(node));
    }

    /// Two copies of `w` kept by `kind`, `w-0` running on node `a` and `w-1` on node `b`.
    fn two_nodes_running(kind: ControllerKind) -> (MemoryStore, Controller) {
        let store = MemoryStore::new();
        declare_kind(&store, 2, kind);
        report(&store, "a", &[]);
        report(&store, "b", &[]);
        let mut c = Controller::new(kind);
        assert_eq!(
            run_pass(&store, "w", &mut c, &SETTINGS).unwrap().created,
            ["w-0", "w-1"]
        );
        report(&store, "a", &[(0, Phase::Running)]);
        report(&store, "b", &[(1, Phase::Running)]);
        assert_eq!(
            run_pass(&store, "w", &mut c, &SETTINGS).unwrap().action,
            None
        );
        (store, c)
    }

    fn idle_text(store: &dyn Store) -> Option<String> {
        let all = crate::ops::get(store, Some("w")).unwrap();
        all[0].idle.as_ref().map(|i| i.text.clone())
    }

    #[test]
    fn a_lost_nodes_named_copies_are_held_until_its_new_agent_reports_them_ended() {
        let (store, mut c) = two_nodes_running(ControllerKind::Named);
        // b's agent is paused past its lease: w-1 may still run there.
        lose(&store, "b");
        for _ in 0..3 {
            let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
            assert_eq!((r.created.len(), r.lost.len()), (0, 0), "{r:?}");
            assert_eq!(
                (r.held, r.waiting_for),
                (vec!["w-1".into()], vec!["b".into()])
            );
        }
        assert_eq!(names(&store), ["w-0", "w-1"]);
        let rec = Snapshot::load(&store).unwrap().loops["w"].value.clone();
        assert_eq!(
            rec.idle.map(|i| i.reason),
            Some(loops::IdleReason::WaitingForLostNode)
        );
        assert_eq!(
            idle_text(&store).as_deref(),
            Some("waiting for b to confirm its copies ended (setpoint node forget b)")
        );
        // The agent resumes, fences (its copy exits), claims the node again and reports.
        crate::model::node::fake_node(&store, "b").unwrap();
        report(&store, "b", &[(1, Phase::Exited)]);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!((r.collected, r.held), (vec!["w-1".into()], vec![]));
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(r.created, ["w-1"]);
        assert_eq!(
            Snapshot::load(&store).unwrap().loops["w"].value.waiting_for,
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_reclaimed_node_whose_agent_adopted_the_copy_keeps_it_where_it_runs() {
        let (store, mut c) = two_nodes_running(ControllerKind::Named);
        lose(&store, "b");
        run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        // A restarted agent of b adopts w-1, which ran on all along.
        crate::model::node::fake_node(&store, "b").unwrap();
        report(&store, "b", &[(1, Phase::Running)]);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!((r.action, r.held.len(), r.lost.len()), (None, 0, 0));
        let s = Snapshot::load(&store).unwrap();
        assert_eq!(s.assignments[&assignment_key("w", 1)].value.node, "b");
    }

    #[test]
    fn a_returning_nodes_adopted_copy_whose_assignment_was_released_is_not_counted() {
        // Issue 22, item 3: b is lost, its copy is replaced on a; b's agent comes back, adopts
        // w-1 and reports it running while it stops it. Counting it, intent would see three
        // copies and delete the oldest healthy one, w-0 on a.
        let (store, mut c) = two_nodes_running(ControllerKind::Intent);
        let before = store.get(&report_key("b")).unwrap().unwrap();
        let mut adopted = crate::model::decode::<NodeReport>(&before).unwrap().value;
        lose(&store, "b");
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(
            (r.lost.clone(), r.created.clone()),
            (vec!["w-1".into()], vec!["w-2".into()])
        );
        report(&store, "a", &[(0, Phase::Running), (2, Phase::Running)]);
        crate::model::node::fake_node(&store, "b").unwrap();
        adopted.observed_ms = store.now_ms();
        adopted.reported_ms = store.now_ms();
        adopted.copies[0].stopping = true;
        store
            .commit(&Txn::new().put(report_key("b"), encode(&adopted)))
            .unwrap();
        let s = Snapshot::load(&store).unwrap();
        let view = WorkloadView::new(&s, "w").unwrap();
        assert_eq!(view.ledger_copies().collect::<Vec<_>>(), [0, 2]);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!((r.action, r.deleted), (None, vec![]));
        assert_eq!(names(&store), ["w-0", "w-2"]);
        // A copy a controller commanded to stop during the node's lease still counts until a
        // report shows it ended: the lag the lesson measures.
        let r = {
            let mut more = c.clone();
            declare_kind(&store, 1, ControllerKind::Intent);
            run_pass(&store, "w", &mut more, &SETTINGS).unwrap()
        };
        assert_eq!(r.deleted, ["w-0"]);
        let s = Snapshot::load(&store).unwrap();
        let view = WorkloadView::new(&s, "w").unwrap();
        assert_eq!(
            view.ledger_copies().collect::<Vec<_>>(),
            [0, 2],
            "w-0 stays until reported"
        );
    }

    #[test]
    fn a_named_copy_the_lost_nodes_last_report_shows_exited_is_released() {
        // b's agent stops cleanly (Ctrl-C): it stops its copies, reports them exited, and
        // gives its lease up. Its last report answers for w-1.
        let (store, mut c) = two_nodes_running(ControllerKind::Named);
        report(&store, "b", &[(1, Phase::Exited)]);
        lose(&store, "b");
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!((r.lost, r.held), (vec!["w-1".into()], vec![]));
        assert_eq!(
            run_pass(&store, "w", &mut c, &SETTINGS).unwrap().created,
            ["w-1"]
        );
        // A report of an earlier incarnation of the name does not release the new one.
        report(&store, "a", &[(0, Phase::Running), (1, Phase::Running)]);
        let s = Snapshot::load(&store).unwrap();
        let stale = s.reports["b"].value.copies[0].incarnation;
        assert_ne!(
            stale,
            s.assignments[&assignment_key("w", 1)].create_revision
        );
    }

    #[test]
    fn a_forgotten_nodes_named_copies_are_released_and_a_later_claim_starts_fresh() {
        let (store, mut c) = two_nodes_running(ControllerKind::Named);
        // Only a lost node that the store knows can be forgotten.
        let live = crate::model::node::forget(&store, "a").unwrap_err();
        assert!(
            matches!(live, crate::model::node::ForgetError::Live { .. }),
            "{live}"
        );
        let unknown = crate::model::node::forget(&store, "c").unwrap_err();
        assert!(
            matches!(unknown, crate::model::node::ForgetError::Unknown(_)),
            "{unknown}"
        );
        lose(&store, "b");
        assert_eq!(
            run_pass(&store, "w", &mut c, &SETTINGS).unwrap().held,
            ["w-1"]
        );
        let (rec, released) = crate::model::node::forget(&store, "b").unwrap();
        assert_eq!((rec.node.as_str(), released), ("b", 1));
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!((r.lost, r.held), (vec!["w-1".into()], vec![]));
        // The name starts again, on the live node.
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(r.created, ["w-1"]);
        let s = Snapshot::load(&store).unwrap();
        assert_eq!(s.assignments[&assignment_key("w", 1)].value.node, "a");
        assert_eq!(idle_text(&store), None);
        // b is claimed again and given a new copy; lost again, that copy is held: the old
        // confirmation covers only what was on b when it was written.
        crate::model::node::fake_node(&store, "b").unwrap();
        report(&store, "b", &[]);
        declare_kind(&store, 3, ControllerKind::Named);
        assert_eq!(
            run_pass(&store, "w", &mut c, &SETTINGS).unwrap().created,
            ["w-2"]
        );
        lose(&store, "b");
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!((r.held, r.lost.len()), (vec!["w-2".into()], 0));
    }

    #[test]
    fn a_redeclared_workloads_orphan_on_a_lost_node_is_held_and_keeps_its_name() {
        let (store, _) = two_nodes_running(ControllerKind::Named);
        lose(&store, "b");
        // The workload is deleted and declared again (a new uid): w-1's old assignment on b is an
        // orphan, but b's agent may be paused with w-1 running.
        store.commit(&Txn::new().delete(workload_key("w"))).unwrap();
        declare_kind(&store, 2, ControllerKind::Named);
        assert_eq!(collect_orphans(&store, None).unwrap(), ["w-0"]);
        let mut fresh = Controller::new(ControllerKind::Named);
        // a's last report still shows the old w-0 running: its agent has not been seen to stop
        // it (it may be paused), so the name waits (finding 7 of docs/chaos.md).
        let r = run_pass(&store, "w", &mut fresh, &SETTINGS).unwrap();
        assert!(r.created.is_empty(), "{r:?}");
        report(&store, "a", &[]);
        let r = run_pass(&store, "w", &mut fresh, &SETTINGS).unwrap();
        assert_eq!(r.created, ["w-0"], "{r:?}");
        assert_eq!(
            (r.held, r.waiting_for),
            (vec!["w-1".into()], vec!["b".into()])
        );
        assert!(collect_orphans(&store, None).unwrap().is_empty());
        // Confirmed gone: the orphan goes, and the name starts again under the new uid.
        crate::model::node::forget(&store, "b").unwrap();
        assert_eq!(collect_orphans(&store, None).unwrap(), ["w-1"]);
        assert_eq!(
            run_pass(&store, "w", &mut fresh, &SETTINGS)
                .unwrap()
                .created,
            ["w-1"]
        );
    }

    #[test]
    fn a_placement_nothing_owns_is_held_like_an_orphan_then_collected() {
        let (store, _) = two_nodes_running(ControllerKind::Intent);
        let key = crate::model::report_key("a");
        let mut stale = crate::model::decode::<NodeReport>(&store.get(&key).unwrap().unwrap())
            .unwrap()
            .value;
        stale.synced_revision = 0;
        store.commit(&Txn::new().put(&key, encode(&stale))).unwrap();
        // Written by hand: a copy of no workload on live node a, one on a node that never
        // reported, a second placement of w-1 (assigned to b) on a, and a key of no shape.
        let ghost = crate::model::placement_key("a", "ghost", 0);
        let never = crate::model::placement_key("n9", "ghost", 1);
        let dup = crate::model::placement_key("a", "w", 1);
        let shapeless = "/placements/a/x".to_owned();
        let txn = Txn::new()
            .put(&ghost, "{}")
            .put(&never, "{}")
            .put(&dup, "{}")
            .put(&shapeless, "{not json");
        store.commit(&txn).unwrap();
        let s = Snapshot::load(&store).unwrap();
        assert_eq!(s.ghosts.len(), 4);
        assert_eq!(
            s.workloads.keys().collect::<Vec<_>>(),
            ["w"],
            "w is not refused"
        );
        // a's agent has not synced since: it may run them until it reports.
        assert_eq!(collect_orphans(&store, None).unwrap(), [shapeless, never]);
        report(&store, "a", &[(0, Phase::Running)]);
        assert_eq!(collect_orphans(&store, None).unwrap(), [ghost, dup]);
        let s = Snapshot::load(&store).unwrap();
        assert!(
            s.ghosts.is_empty() && s.problems.is_empty(),
            "{:?}",
            s.problems
        );
        assert_eq!(s.placements.len(), 2, "the owned placements stay");
        assert!(collect_orphans(&store, None).unwrap().is_empty());
    }

    #[test]
    fn a_redeclared_workloads_orphan_on_a_live_node_is_held_until_a_report_saw_its_assignment() {
        let (store, _) = two_nodes_running(ControllerKind::Named);
        store.commit(&Txn::new().delete(workload_key("w"))).unwrap();
        declare_kind(&store, 2, ControllerKind::Named);
        // a's agent last reported from a read older than w-0's assignment: it may have started
        // w-0 since and been paused before reporting it (finding 9 of docs/chaos.md).
        let key = crate::model::report_key("a");
        let mut stale = crate::model::decode::<NodeReport>(&store.get(&key).unwrap().unwrap())
            .unwrap()
            .value;
        stale.copies.clear();
        stale.synced_revision = 0;
        store.commit(&Txn::new().put(&key, encode(&stale))).unwrap();
        assert_eq!(collect_orphans(&store, None).unwrap(), ["w-1"], "w-0 held");
        let mut fresh = Controller::new(ControllerKind::Named);
        let r = run_pass(&store, "w", &mut fresh, &SETTINGS).unwrap();
        assert!(!r.created.contains(&"w-0".to_owned()), "{r:?}");
        // A report from a read that saw it, showing nothing running: the orphan goes, the name
        // starts again under the new uid.
        report(&store, "a", &[]);
        assert_eq!(collect_orphans(&store, None).unwrap(), ["w-0"]);
        let r = run_pass(&store, "w", &mut fresh, &SETTINGS).unwrap();
        assert!(r.created.contains(&"w-0".to_owned()), "{r:?}");
    }

    #[test]
    fn a_lost_nodes_counted_copies_are_freed_and_replaced_under_new_names_at_once() {
        for kind in [
            ControllerKind::Ledger,
            ControllerKind::Intent,
            ControllerKind::Gated,
        ] {
            let (store, mut c) = two_nodes_running(kind);
            lose(&store, "b");
            let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
            assert_eq!((r.lost, r.held), (vec!["w-1".into()], vec![]), "{kind:?}");
            assert_eq!(r.created, ["w-2"], "{kind:?}");
        }
    }

    #[test]
    fn a_release_planned_while_a_node_was_lost_conflicts_once_its_agent_claimed_it_again() {
        // Chaos finding 11: the pass is planned while b's lease is over; b's agent claims b
        // again and adopts w-1 before the pass commits. The release must not land: w-1 is
        // running, owned and one of exactly the 2 desired.
        let (store, mut c) = two_nodes_running(ControllerKind::Intent);
        lose(&store, "b");
        let snapshot = Snapshot::load(&store).unwrap();
        let plan = plan_pass(&snapshot, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(plan.report.lost, ["w-1"]);
        report(&store, "b", &[(1, Phase::Running)]);
        let refused = store.commit(&plan.txn).unwrap_err();
        assert!(refused.is_conflict(), "{refused}");
        assert_eq!(names(&store), ["w-0", "w-1"]);
        // Planned again on fresh state, the pass keeps w-1.
        let mut c = Controller::new(ControllerKind::Intent);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(
            (r.lost.len(), r.created.len(), r.deleted.len()),
            (0, 0, 0),
            "{r:?}"
        );
        assert_eq!(names(&store), ["w-0", "w-1"]);
    }

    #[test]
    fn a_deposed_leaders_pass_fails_on_the_fence() {
        let store = MemoryStore::new();
        declare(&store, 1);
        report(&store, "a", &[]);
        let lease = store.grant(std::time::Duration::from_secs(30)).unwrap();
        let fence = store
            .commit(&Txn::new().expect(LEADER, 0).put_leased(LEADER, "{}", lease))
            .unwrap();
        let settings = PassSettings {
            fence: Some(fence),
            ..SETTINGS
        };
        store.revoke(lease).unwrap();
        let mut c = Controller::new(ControllerKind::Ledger);
        assert_eq!(
            run_pass(&store, "w", &mut c, &settings),
            Err(PassError::NotLeader)
        );
        assert!(names(&store).is_empty());
    }
}
