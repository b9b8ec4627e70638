//! What a workload's loop remembers in the store between passes: its crash-loop backoff and
//! why it is idle. Key `/loops/{name}`, value [`LoopRecord`], written by the pass in its own
//! transaction (compare-and-set), only when it changes.
//!
//! The controller keeps nothing it cannot rebuild: a new leader reads the record and backs off
//! exactly as the old one would have. The record carries the workload's uid, so a workload
//! deleted and applied again starts with a clean record.
//!
//! The rules are I/O-free ([`Gate`] works on a [`Snapshot`]); `reconcile::plan_pass` calls them.

use setpoint_core::{ControllerKind, LedgerView};

pub use super::keys::{loop_key, LOOPS};
pub use super::loop_record::{Idle, IdleReason, LoopRecord, RolloutRecord};

use super::backoff::Ending;
use super::keys::copy_name;
use super::records::{encode, Assignment, Phase, Stored};
use super::rollout;
use super::snapshot::Snapshot;
use super::view::WorkloadView;
use crate::store::{Revision, Txn};

/// The write that records, in workload `name`'s loop record, that the store refused its pass's
/// write as too big, in the store's words `why`, so that `get` and `status` show it; `None` if
/// the record says so already, or the workload is gone. The caller adds its fencing token.
pub fn refusal(snapshot: &Snapshot, name: &str, why: &str) -> Option<Txn> {
    let uid = snapshot.workloads.get(name)?.create_revision;
    let stored = snapshot.loops.get(name);
    let mut record = match stored {
        Some(s) if s.value.uid == uid => s.value.clone(),
        _ => LoopRecord {
            uid,
            ..LoopRecord::default()
        },
    };
    if record.refused.as_deref() == Some(why)
        && record
            .idle
            .is_some_and(|i| i.reason == IdleReason::WriteRefused)
    {
        return None;
    }
    let since_ms = match record.idle {
        Some(i) if i.reason == IdleReason::WriteRefused => i.since_ms,
        _ => snapshot.now_ms,
    };
    record.idle = Some(Idle {
        reason: IdleReason::WriteRefused,
        since_ms,
        announced: true,
    });
    record.refused = Some(why.to_owned());
    let key = loop_key(name);
    Some(
        Txn::new()
            .expect(&key, stored.map_or(0, |s| s.mod_revision))
            .put(&key, encode(&record)),
    )
}

/// The copies of a workload as the rollout counts them: every assigned copy (but those reported
/// exited, which this pass collects) and every copy on the ledger.
pub fn rollout_copies(view: &WorkloadView<'_>) -> Vec<rollout::Copy> {
    let generation = view.spec.value.generation;
    let exited: std::collections::BTreeSet<u64> =
        view.exited_assignments().map(|(_, a)| a.value.n).collect();
    // The assignments and the ledger, both in number order, walked side by side (at 100,000
    // copies a map of the union and a ledger lookup per copy were a sixth of a steady pass).
    let on_ledger_only = |n| rollout::Copy {
        n,
        current: true,
        assigned: false,
        on_ledger: true,
    };
    let mut ledger = view.ledger_copies().peekable();
    // Room for the union of both at once (at most their sum).
    let room = view.assigned_count() + usize::try_from(view.on_ledger()).unwrap_or(0);
    let mut out = Vec::with_capacity(room);
    for (n, assigned_generation) in view.assigned_generations() {
        while let Some(m) = ledger.next_if(|&m| m < n) {
            out.push(on_ledger_only(m));
        }
        let shown = ledger.next_if_eq(&n).is_some();
        if exited.contains(&n) {
            // Its work is over: only the ledger's word on it counts.
            if shown {
                out.push(on_ledger_only(n));
            }
            continue;
        }
        out.push(rollout::Copy {
            n,
            current: assigned_generation == generation,
            assigned: true,
            on_ledger: shown,
        });
    }
    out.extend(ledger.map(on_ledger_only));
    out
}

/// How copy `a` ended, from the report of its node, if that report shows this incarnation of
/// it exited.
pub fn ending_of(snapshot: &Snapshot, a: &Stored<Assignment>) -> Option<Ending> {
    let report = snapshot.reports.get(&a.value.node)?;
    let c = report.value.copies.iter().find(|c| {
        c.workload == a.value.workload
            && c.n == a.value.n
            && c.incarnation == a.create_revision
            && c.phase == Phase::Exited
    })?;
    Some(Ending {
        copy: c.copy.clone(),
        created_ms: a.value.created_ms,
        started_ms: c.started_ms,
        ready_ms: c.ready_ms,
        exited_ms: c.exited_ms.unwrap_or(report.value.observed_ms),
        how: c.exit.clone().unwrap_or_else(|| "ended".into()),
        commanded: c.stopping || c.killed,
    })
}

/// One pass's view of its loop record: the stored record brought up to date with the failed
/// starts this pass collects, and the holds they put on creation.
#[derive(Clone, Debug)]
pub struct Gate<'s> {
    kind: ControllerKind,
    /// The record in the snapshot, borrowed: a pass writes its record only when it differs.
    stored: Option<(Revision, &'s LoopRecord)>,
    /// The record as this pass leaves it.
    pub record: LoopRecord,
    /// Log lines, one per failed start this pass collected.
    pub failures: Vec<String>,
    /// Copies the controller wanted that the backoff held back.
    pub held_back: u64,
    /// A rollout event to log: begun, complete, stalled.
    pub rollout_note: Option<String>,
}

impl<'s> Gate<'s> {
    /// Reads workload `view`'s record from `snapshot` and records every failed start among the
    /// exited copies the pass is about to collect.
    pub fn prepare(snapshot: &'s Snapshot, view: &WorkloadView<'_>) -> Self {
        let spec = &view.spec.value;
        let stored = snapshot
            .loops
            .get(&spec.name)
            .map(|s| (s.mod_revision, &s.value));
        let mut record = match &stored {
            Some((_, r)) if r.uid == view.uid() => (*r).clone(),
            _ => LoopRecord {
                uid: view.uid(),
                ..LoopRecord::default()
            },
        };
        // A pass that commits clears a refusal ([`refusal`]); one refused again records it again.
        record.refused = None;
        let mut failures = Vec::new();
        for (_, a) in view.exited_assignments() {
            let Some(e) = ending_of(snapshot, a) else {
                continue;
            };
            if !e.counts() {
                continue;
            }
            let key = Self::key(spec.controller, &spec.name, a.value.n);
            let state = record.backoff.entry(key.clone()).or_default();
            let new_attempt = state.record(&spec.backoff, &e);
            let ran = e.ran_ms();
            let what = if e.before_ready() {
                "failed to start"
            } else {
                "crashed"
            };
            failures.push(if new_attempt {
                format!(
                    "{} {what} ({}, after {ran}ms): restart {}, next try of {key} in {}ms",
                    e.copy,
                    e.how,
                    state.restarts,
                    state.next_try_ms.saturating_sub(snapshot.now_ms)
                )
            } else {
                format!(
                    "{} {what} ({}, after {ran}ms): restart {}, same attempt",
                    e.copy, e.how, state.restarts
                )
            });
        }
        Self {
            kind: spec.controller,
            stored,
            record,
            failures,
            held_back: 0,
            rollout_note: None,
        }
    }

    /// Brings the rollout record up to date with `copies` at `now_ms`. Returns whether a rollout
    /// is to act this pass: old copies are left, or its new copies are not all on the ledger yet,
    /// and it has not stalled.
    pub fn rollout(
        &mut self,
        view: &WorkloadView<'_>,
        copies: &[rollout::Copy],
        now_ms: u64,
    ) -> bool {
        let spec = &view.spec.value;
        let old = copies.iter().filter(|c| !c.current).count() as u64;
        let updated = copies.iter().filter(|c| c.current && c.available()).count() as u64;
        let rec = match self.record.rollout {
            Some(r) if r.generation == spec.generation => r,
            _ if old == 0 => {
                // No rollout, or the last one's generation is all there is now.
                if let Some(r) = self.record.rollout.take() {
                    self.rollout_note =
                        Some(format!("rollout of generation {} complete", r.generation));
                }
                return false;
            }
            _ => {
                self.rollout_note = Some(format!(
                    "rollout of generation {} begins: {old} copies to replace",
                    spec.generation
                ));
                RolloutRecord {
                    generation: spec.generation,
                    started_ms: now_ms,
                    progress_ms: now_ms,
                    updated,
                    old,
                    stalled: false,
                }
            }
        };
        let mut rec = rec;
        if rollout::done(copies, spec.copies) {
            self.record.rollout = None;
            self.rollout_note = Some(format!(
                "rollout of generation {} complete: {updated}/{} updated",
                rec.generation, spec.copies
            ));
            return false;
        }
        if !rec.stalled && (updated > rec.updated || old < rec.old) {
            rec.progress_ms = now_ms;
        }
        rec.updated = rec.updated.max(updated);
        rec.old = rec.old.min(old);
        if !rec.stalled
            && now_ms.saturating_sub(rec.progress_ms) > spec.rollout.progress_deadline_ms
        {
            rec.stalled = true;
            self.rollout_note = Some(format!(
                "rollout of generation {} stalled: no progress in {}ms ({updated}/{} updated); it stops here",
                rec.generation, spec.rollout.progress_deadline_ms, spec.copies
            ));
        }
        self.record.rollout = Some(rec);
        !rec.stalled
    }

    /// Whether the rollout under way has stalled.
    pub fn stalled(&self) -> bool {
        self.record.rollout.is_some_and(|r| r.stalled)
    }

    /// The backoff key of copy `n`: the copy's name for `named`, the workload's otherwise.
    pub fn key(kind: ControllerKind, workload: &str, n: u64) -> String {
        if kind == ControllerKind::Named {
            copy_name(workload, n)
        } else {
            workload.to_owned()
        }
    }

    /// Whether creating copy `n` of `workload` is held back at `now_ms`; counts it if so.
    pub fn holds(&mut self, workload: &str, n: u64, now_ms: u64) -> bool {
        let key = Self::key(self.kind, workload, n);
        let held = self
            .record
            .backoff
            .get(&key)
            .is_some_and(|s| s.blocks(now_ms));
        self.held_back += u64::from(held);
        held
    }

    /// Sets the idle reason for this pass (`None`: it acted, or it is converged) and adds the
    /// record to `txn` if it changed. Returns the reason when it is to be logged: once per idle
    /// stretch, when it begins, except that waiting for expectations (which follows every
    /// creation) is logged only once it has lasted [`WAIT_WORTH_LOGGING`] periods.
    pub fn finish(
        &mut self,
        txn: Txn,
        key: &str,
        reason: Option<IdleReason>,
        now_ms: u64,
        period_ms: u64,
    ) -> (Txn, Option<Idle>) {
        let mut announce = None;
        match (self.record.idle.as_mut(), reason) {
            (Some(old), Some(r)) if old.reason == r => {
                if !old.announced
                    && now_ms.saturating_sub(old.since_ms)
                        >= WAIT_WORTH_LOGGING.saturating_mul(period_ms)
                {
                    old.announced = true;
                    announce = Some(*old);
                }
            }
            (_, Some(r)) => {
                let loud = r != IdleReason::WaitingForExpectations;
                let idle = Idle {
                    reason: r,
                    since_ms: now_ms,
                    announced: loud,
                };
                self.record.idle = Some(idle);
                announce = loud.then_some(idle);
            }
            (_, None) => self.record.idle = None,
        }
        let blank = LoopRecord {
            uid: self.record.uid,
            ..LoopRecord::default()
        };
        let unchanged = match &self.stored {
            Some((_, r)) => **r == self.record,
            None => self.record == blank,
        };
        if unchanged {
            return (txn, announce);
        }
        let rev = self.stored.as_ref().map_or(0, |(r, _)| *r);
        (
            txn.expect(key, rev).put(key, encode(&self.record)),
            announce,
        )
    }
}

/// How many periods a wait for expectations lasts before the log mentions it.
pub const WAIT_WORTH_LOGGING: u64 = 10;

/// Why a pass that wrote no creation or deletion is idle, or `None` if it is converged (the
/// ledger shows exactly the desired copies and nothing is pending) or acted.
pub fn idle_reason(
    kind: ControllerKind,
    view: &WorkloadView<'_>,
    acted: bool,
    unplaced: u64,
    held_back: u64,
) -> Option<IdleReason> {
    if acted {
        return None;
    }
    if held_back > 0 {
        return Some(IdleReason::BackingOff);
    }
    if unplaced > 0 {
        return Some(IdleReason::NoLiveNode);
    }
    let converged = view.on_ledger() == view.spec.value.copies
        && view.pending_creates() == 0
        && view.pending_deletes() == 0;
    if converged {
        return None;
    }
    if view.held_assignments().next().is_some() {
        return Some(IdleReason::WaitingForLostNode);
    }
    Some(match kind {
        ControllerKind::Gated => IdleReason::GatedOnOwnWrite,
        _ => IdleReason::WaitingForExpectations,
    })
}

/// The log line of an idle stretch that begins: its reason and what it holds back, naming the
/// lost nodes it waits for (`waiting_for`), as `get` and `status` do.
pub fn describe_idle(idle: &Idle, held_back: u64, unplaced: u64, waiting_for: &[String]) -> String {
    match idle.reason {
        IdleReason::BackingOff => format!("idle: backing off, {held_back} copies held back"),
        IdleReason::NoLiveNode => format!("idle: no live node, {unplaced} copies wanted"),
        r => format!("idle: {}", r.describe_with(waiting_for)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_log_line_names_the_lost_nodes_waited_for() {
        let idle = Idle {
            reason: IdleReason::WaitingForLostNode,
            since_ms: 0,
            announced: false,
        };
        let one = ["node-3".to_owned()];
        assert_eq!(
            describe_idle(&idle, 0, 0, &one),
            "idle: waiting for node-3 to confirm its copies ended (setpoint node forget node-3)"
        );
        let two = ["node-1".to_owned(), "node-3".to_owned()];
        assert!(describe_idle(&idle, 0, 0, &two).contains("node-1, node-3"));
        let backing_off = Idle {
            reason: IdleReason::BackingOff,
            ..idle
        };
        assert_eq!(
            describe_idle(&backing_off, 2, 0, &one),
            "idle: backing off, 2 copies held back"
        );
    }
    use crate::controller::reconcile::{run_pass, PassSettings};
    use crate::model::backoff::Restart;
    use crate::model::{
        assignment_key, report_key, workload_key, CopyReport, NodeReport, WorkloadSpec,
    };
    use crate::store::{MemoryStore, Store};
    use setpoint_core::Controller;

    const SETTINGS: PassSettings = PassSettings {
        fence: None,
        max_attempts: 3,
    };

    fn declare(store: &dyn Store, kind: ControllerKind) {
        declare_restart(store, kind, crate::model::backoff::Restart::Always);
    }

    fn declare_restart(store: &dyn Store, kind: ControllerKind, restart: Restart) {
        let w = WorkloadSpec {
            name: "w".into(),
            command: vec!["false".into()],
            copies: 1,
            controller: kind,
            period_ms: 100,
            startup_ms: 1_000,
            readiness: None,
            grace_ms: 100,
            backoff: crate::model::backoff::BackoffPolicy {
                initial_ms: 60_000,
                max_ms: 600_000,
                reset_ms: 3_600_000,
            },
            rollout: Default::default(),
            restart,
            generation: 1,
            env: Default::default(),
            stop_when_cut_off_ms: None,
        };
        store
            .commit(&Txn::new().put(workload_key("w"), encode(&w)))
            .unwrap();
    }

    /// Node `a` reports copy `n` exited `after_ms` after it started, ready or not.
    fn exited(store: &dyn Store, n: u64, after_ms: u64, ready: bool) {
        ended(store, n, after_ms, ready, false);
    }

    /// Copy `n` ended `after_ms` after its start; `killed`: on a kill request.
    fn ended(store: &dyn Store, n: u64, after_ms: u64, ready: bool, killed: bool) {
        ended_as(store, n, after_ms, ready, killed, "exit status 1");
    }

    /// Copy `n` ended `after_ms` after its start, as `how`.
    fn ended_as(store: &dyn Store, n: u64, after_ms: u64, ready: bool, killed: bool, how: &str) {
        let a = store.get(&assignment_key("w", n)).unwrap().unwrap();
        let uid = store
            .get(&workload_key("w"))
            .unwrap()
            .unwrap()
            .create_revision;
        let now = store.now_ms();
        put_report(
            store,
            vec![CopyReport {
                copy: copy_name("w", n),
                workload: "w".into(),
                owner_uid: uid,
                n,
                incarnation: a.create_revision,
                phase: Phase::Exited,
                pid: 0,
                start_ticks: 0,
                started_ms: now - after_ms,
                ready_ms: ready.then_some(now - after_ms),
                exited_ms: Some(now),
                exit: Some(how.into()),
                stopping: false,
                killed,
            }],
        );
    }

    /// Node `a` reports `copies`, now.
    /// Node `a` reports, and is live: its agent holds the node lease.
    fn put_report(store: &dyn Store, copies: Vec<CopyReport>) {
        if store
            .get(&crate::model::node::node_key("a"))
            .unwrap()
            .is_none()
        {
            crate::model::node::fake_node(store, "a").unwrap();
        }
        let now = store.now_ms();
        let r = NodeReport {
            node: "a".into(),
            observed_ms: now,
            reported_ms: now,
            agent_pid: 1,
            synced_revision: u64::MAX,
            copies,
        };
        store
            .commit(&Txn::new().put(report_key("a"), encode(&r)))
            .unwrap();
    }

    fn empty_report(store: &dyn Store) {
        put_report(store, Vec::new());
    }

    fn record(store: &dyn Store) -> LoopRecord {
        let e = store.get(&loop_key("w")).unwrap().unwrap();
        serde_json::from_str(&e.value).unwrap()
    }

    #[test]
    fn a_failed_start_holds_back_the_replacement_and_is_kept_in_the_store() {
        for kind in [
            ControllerKind::Intent,
            ControllerKind::Ledger,
            ControllerKind::Named,
        ] {
            let store = MemoryStore::new();
            declare(&store, kind);
            empty_report(&store);
            let mut c = Controller::new(kind);
            assert_eq!(
                run_pass(&store, "w", &mut c, &SETTINGS).unwrap().created,
                ["w-0"]
            );
            exited(&store, 0, 5, false);
            let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
            assert_eq!(r.collected, ["w-0"], "{kind:?}");
            assert!(r.created.is_empty(), "{kind:?}: held back, not replaced");
            assert_eq!((r.held_back, r.failures.len()), (1, 1), "{kind:?}");
            assert_eq!(r.idle.map(|i| i.reason), Some(IdleReason::BackingOff));
            let rec = record(&store);
            let key = if kind == ControllerKind::Named {
                "w-0"
            } else {
                "w"
            };
            assert_eq!(rec.backoff[key].failures, 1, "{kind:?}");
            // Another pass (a new leader, with a fresh controller) still backs off, and says
            // nothing new.
            let mut fresh = Controller::new(kind);
            let r = run_pass(&store, "w", &mut fresh, &SETTINGS).unwrap();
            assert!(r.created.is_empty() && r.idle.is_none(), "{kind:?}: {r:?}");
        }
    }

    #[test]
    fn the_record_of_a_deleted_workload_is_collected_with_its_orphans() {
        let store = MemoryStore::new();
        declare(&store, ControllerKind::Intent);
        let mut c = Controller::new(ControllerKind::Intent);
        run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert!(
            store.get(&loop_key("w")).unwrap().is_some(),
            "idle: no live node"
        );
        crate::controller::reconcile::collect_orphans(&store, None).unwrap();
        assert!(
            store.get(&loop_key("w")).unwrap().is_some(),
            "still declared"
        );
        store.commit(&Txn::new().delete(workload_key("w"))).unwrap();
        crate::controller::reconcile::collect_orphans(&store, None).unwrap();
        assert!(store.get(&loop_key("w")).unwrap().is_none());
    }

    #[test]
    fn a_copy_killed_on_command_is_replaced_at_once() {
        let store = MemoryStore::new();
        declare(&store, ControllerKind::Intent);
        empty_report(&store);
        let mut c = Controller::new(ControllerKind::Intent);
        run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        ended(&store, 0, 5_000, true, true);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(r.created, ["w-1"]);
        assert!(r.failures.is_empty());
        assert!(
            store.get(&loop_key("w")).unwrap().is_none(),
            "nothing to remember"
        );
    }

    #[test]
    fn a_batch_copy_done_by_its_restart_setting_is_kept_and_not_replaced() {
        for (restart, how, done) in [
            (Restart::OnFailure, "exit status 0", true),
            (Restart::OnFailure, "exit status 3", false),
            (Restart::Never, "exit status 3", true),
            (Restart::Always, "exit status 0", false),
        ] {
            let store = MemoryStore::new();
            declare_restart(&store, ControllerKind::Intent, restart);
            empty_report(&store);
            let mut c = Controller::new(ControllerKind::Intent);
            run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
            ended_as(&store, 0, 5_000, true, false, how);
            for _ in 0..3 {
                let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
                assert!(r.created.is_empty(), "{restart:?} {how}: {r:?}");
                assert_eq!(r.collected.is_empty(), done, "{restart:?} {how}: {r:?}");
                if !done {
                    break;
                }
            }
            let kept = store.get(&crate::model::assignment_key("w", 0)).unwrap();
            assert_eq!(kept.is_some(), done, "{restart:?} {how}");
            // A copy killed on command is replaced whatever the setting.
            if done {
                let store = MemoryStore::new();
                declare_restart(&store, ControllerKind::Intent, restart);
                empty_report(&store);
                let mut c = Controller::new(ControllerKind::Intent);
                run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
                ended_as(&store, 0, 5_000, true, true, "signal 9");
                let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
                assert_eq!(r.created, ["w-1"], "{restart:?}");
            }
        }
    }

    #[test]
    fn a_copy_that_crashes_after_its_startup_backs_off_as_a_failed_start_does() {
        let store = MemoryStore::new();
        declare(&store, ControllerKind::Intent);
        empty_report(&store);
        let mut c = Controller::new(ControllerKind::Intent);
        run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        // Ready, ran well past its startup time, then exited on its own.
        exited(&store, 0, 60_000, true);
        let r = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert!(r.created.is_empty(), "held back: {r:?}");
        assert_eq!(r.held_back, 1);
        // The store's clock is the wall clock: a millisecond may pass between the exit and
        // the pass (a CI rehearsal saw 59999ms).
        assert_eq!(r.failures.len(), 1, "{:?}", r.failures);
        let wait: u64 = r.failures[0]
            .strip_prefix(
                "w-0 crashed (exit status 1, after 60000ms): restart 1, next try of w in ",
            )
            .and_then(|rest| rest.strip_suffix("ms"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{:?}", r.failures));
        assert!((59_000..=60_000).contains(&wait), "{wait}");
        let rec = Snapshot::load(&store).unwrap().loops["w"].value.clone();
        assert_eq!(
            (rec.backoff["w"].failures, rec.backoff["w"].restarts),
            (1, 1)
        );
    }

    #[test]
    fn the_idle_reason_is_written_when_it_changes_and_announced_once() {
        let store = MemoryStore::new();
        declare(&store, ControllerKind::Intent);
        let mut c = Controller::new(ControllerKind::Intent);
        let first = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(first.idle.map(|i| i.reason), Some(IdleReason::NoLiveNode));
        let rev = store.get(&loop_key("w")).unwrap().unwrap().mod_revision;
        let again = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(again.idle, None, "announced once");
        assert_eq!(
            store.get(&loop_key("w")).unwrap().unwrap().mod_revision,
            rev,
            "not rewritten"
        );
        empty_report(&store);
        let acted = run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        assert_eq!(acted.created, ["w-0"]);
        assert_eq!(record(&store).idle, None);
    }
}
