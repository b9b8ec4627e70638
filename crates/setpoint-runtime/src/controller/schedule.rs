//! The per-workload pass scheduler: which loops run, when each one's next pass is due, and that
//! at most one pass per workload is in flight.
//!
//! - **Declarations** ([`Declarations`]): the leader polls the store's revision every poll, and
//!   reads `/workloads/` only when it moved; [`declared`] decodes that read, taking a
//!   declaration unchanged since the last snapshot from it.
//! - **Loops** ([`Schedule`]): one per declared workload, keyed by (uid, period, controller
//!   kind) ([`LoopKey`]): a change of any restarts it, an undeclared workload's loop ends.
//!   Rounds sit on the grid `start + k·U`; a pass that overruns skips the rounds it missed. A
//!   restarted loop waits for its predecessor's pass to be answered or to time out, so at most
//!   one pass per workload is in flight across restarts too. With `wake_on_change` a changed
//!   declaration (or a node report, through the watch cache) wakes a loop; a wake during a pass
//!   runs one more pass.
//! - **Attempts**: a pass whose commit conflicts reads again, up to [`MAX_ATTEMPTS`] in all,
//!   then gives up until its next round.
//!
//! The [`Host`](super::Host) sends each due pass's read and routes its replies; what a pass
//! plans and writes is [`super::reconcile`].

use std::collections::BTreeMap;

use setpoint_core::{Action, Controller, ControllerKind, Expectations, ExpectationsConfig};

use super::reconcile::PassReport;
use super::rounds::RoundMemo;
use crate::model::{Snapshot, Stored, WorkloadSpec, WORKLOADS};
use crate::store::{Read, Revision};

/// How many attempts a pass makes before a conflict makes it give up until its next round.
pub const MAX_ATTEMPTS: u32 = 5;

/// What a workload's loop is running: a change to any of it restarts the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LoopKey {
    /// The declaration's uid (its `create_revision`).
    uid: Revision,
    /// The loop period U, in milliseconds.
    period_ms: u64,
    /// The controller each pass calls.
    kind: ControllerKind,
}

/// One workload's loop.
#[derive(Debug)]
pub(super) struct Loop {
    key: LoopKey,
    /// Unique per loop: replies to an older loop of the same name are told apart by it.
    gen: u64,
    /// The controller, with its memory across passes.
    controller: Controller,
    /// Where the round grid starts.
    start_ms: u64,
    /// The next round on the grid.
    next_round_ms: u64,
    /// Woken by a change: run a pass as soon as none is in flight.
    woken: bool,
    /// The declaration's `mod_revision` last seen.
    decl_rev: Revision,
    /// The loop of this generation that has a pass in flight, if any (maybe an older one's).
    in_flight: Option<u64>,
    /// Conflicts met by the pass in flight.
    attempt: u32,
    /// The pass found the workload gone; it waits to be ended by the declarations.
    dead: bool,
    /// Rounds skipped since last taken ([`Schedule::take_skipped`]), for the metrics.
    skipped: u64,
    /// Which of its rounds the loop writes ([`super::rounds`]).
    rounds: RoundMemo,
    /// The revision of the last pass's snapshot if that pass was quiet ([`super::rounds`]):
    /// it wrote nothing and nothing in it depends on the time.
    quiet_at: Option<Revision>,
}

impl Loop {
    /// The controller a pass of this loop calls.
    pub(super) fn controller(&mut self) -> &mut Controller {
        &mut self.controller
    }

    /// Which of its rounds the loop writes.
    pub(super) fn rounds(&mut self) -> &mut RoundMemo {
        &mut self.rounds
    }

    /// Records how the pass that read at `read` ended: quiet (see [`super::rounds`]) or not.
    pub(super) fn ended_quiet(&mut self, read: Option<Revision>) {
        self.quiet_at = read;
    }

    /// Whether the pass due now is provably a no-op: the last pass was quiet at `revision`,
    /// the revision a snapshot would be read at now, and its round may be left out.
    pub(super) fn may_skip(&self, revision: Revision, round_at_ms: u64, resync_ms: u64) -> bool {
        self.quiet_at == Some(revision) && self.rounds.may_leave_out(round_at_ms, resync_ms)
    }

    /// Conflicts met by the pass in flight so far.
    pub(super) fn attempts(&self) -> u32 {
        self.attempt
    }

    /// The pass ended: the loop may start its next one.
    pub(super) fn free(&mut self) {
        self.in_flight = None;
    }

    /// The pass, reading the store at revision `read`, found its workload gone. If that read
    /// came after the declaration was created (`read` ≥ its uid), the workload is gone: the
    /// loop runs no more passes and waits for the declarations to end it. A read from before
    /// the declaration existed (a watch cache behind the read that declared it) proves
    /// nothing: the loop stays alive and its next round reads again. Marking it dead then left
    /// a declared workload without passes for good (seen on etcd: nothing created for 30 s).
    pub(super) fn gone(&mut self, read: Revision) {
        self.dead = read >= self.key.uid;
        self.in_flight = None;
    }

    /// The pass's commit conflicted. Returns whether it tries again on a fresh read; if not, it
    /// has made [`MAX_ATTEMPTS`] and ends until its next round.
    pub(super) fn conflicted(&mut self) -> bool {
        self.attempt += 1;
        if self.attempt < MAX_ATTEMPTS {
            return true;
        }
        self.in_flight = None;
        false
    }
}

/// The leader's loops, by workload name.
#[derive(Debug, Default)]
pub(super) struct Schedule {
    loops: BTreeMap<String, Loop>,
}

impl Schedule {
    /// The names of the workloads whose loops run, in order.
    pub(super) fn names(&self) -> Vec<String> {
        self.loops.keys().cloned().collect()
    }

    /// The loops whose pass starts now, each with its generation: those with none in flight
    /// that are not dead and whose round has come or that were woken. Each is counted as in
    /// flight from now, and a round moves to the next on the grid after `now_ms` (missed rounds
    /// are skipped).
    pub(super) fn due(&mut self, now_ms: u64) -> Vec<(String, u64)> {
        let mut due = Vec::new();
        for (name, lp) in self.loops.iter_mut() {
            if lp.dead || lp.in_flight.is_some() {
                continue;
            }
            let tick = now_ms >= lp.next_round_ms;
            if !(tick || lp.woken) {
                continue;
            }
            if tick {
                // The next round on the grid after now: missed rounds are skipped.
                let period = lp.key.period_ms.max(1);
                let missed = (now_ms - lp.next_round_ms) / period;
                lp.skipped += missed;
                lp.rounds.skipped(missed);
                let k = (now_ms - lp.start_ms) / period + 1;
                lp.next_round_ms = lp.start_ms + k * period;
            }
            lp.woken = false;
            lp.attempt = 0;
            lp.in_flight = Some(lp.gen);
            due.push((name.clone(), lp.gen));
        }
        due
    }

    /// The loops that skipped rounds since the last call, with how many, leaving none.
    pub(super) fn take_skipped(&mut self) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for (name, lp) in self.loops.iter_mut() {
            if lp.skipped > 0 {
                out.push((name.clone(), std::mem::take(&mut lp.skipped)));
            }
        }
        out
    }

    /// The earliest time a loop wants its next pass: now for a woken one, else its next round;
    /// none for loops with a pass in flight or dead.
    pub(super) fn next_wake(&self, now_ms: u64) -> Option<u64> {
        self.loops
            .values()
            .filter(|lp| lp.in_flight.is_none() && !lp.dead)
            .map(|lp| if lp.woken { now_ms } else { lp.next_round_ms })
            .min()
    }

    /// Every loop runs a pass as soon as it can.
    pub(super) fn wake_all(&mut self) {
        for lp in self.loops.values_mut() {
            lp.woken = true;
        }
    }

    /// Brings the loops in line with `declared` at `now_ms`: a new workload, or one whose key
    /// changed, gets a new loop (numbered from `next_gen`, which moves on) that starts its grid
    /// now and inherits its predecessor's pass in flight; a changed declaration with the same
    /// key wakes its loop if `wake_on_change`; the loops of workloads no longer declared end.
    /// Returns their names, in order.
    pub(super) fn declare(
        &mut self,
        declared: &BTreeMap<String, Stored<WorkloadSpec>>,
        now_ms: u64,
        wake_on_change: bool,
        next_gen: &mut u64,
    ) -> Vec<String> {
        for (name, w) in declared {
            let key = LoopKey {
                uid: w.create_revision,
                period_ms: w.value.period_ms,
                kind: w.value.controller,
            };
            let in_flight = match self.loops.get_mut(name) {
                Some(old) if old.key == key => {
                    if old.decl_rev != w.mod_revision {
                        old.decl_rev = w.mod_revision;
                        old.woken |= wake_on_change;
                    }
                    continue;
                }
                Some(old) => old.in_flight,
                None => None,
            };
            self.loops.insert(
                name.clone(),
                Loop {
                    key,
                    gen: *next_gen,
                    controller: runtime_controller(key.kind),
                    start_ms: now_ms,
                    next_round_ms: now_ms,
                    woken: false,
                    decl_rev: w.mod_revision,
                    in_flight,
                    attempt: 0,
                    dead: false,
                    skipped: 0,
                    rounds: RoundMemo::default(),
                    quiet_at: None,
                },
            );
            *next_gen += 1;
        }
        let mut ended = Vec::new();
        self.loops.retain(|name, _| {
            let keep = declared.contains_key(name);
            if !keep {
                ended.push(name.clone());
            }
            keep
        });
        ended
    }

    /// The loop of `name` if the pass of generation `gen` is its current one. A reply for an
    /// older loop of that name only frees the slot it held.
    pub(super) fn current(&mut self, name: &str, gen: u64) -> Option<&mut Loop> {
        let lp = self.loops.get_mut(name)?;
        if lp.gen != gen {
            if lp.in_flight == Some(gen) {
                lp.in_flight = None;
            }
            return None;
        }
        Some(lp)
    }

    /// The pass of generation `gen` of `name` ended.
    pub(super) fn end_pass(&mut self, name: &str, gen: u64) {
        if let Some(lp) = self.current(name, gen) {
            lp.free();
        }
    }
}

/// The leader's poll of the declarations: the store's revision every poll, `/workloads/` only
/// when it moved.
#[derive(Debug, Default)]
pub(super) struct Declarations {
    /// A poll (revision, then maybe the read) is in flight.
    declaring: bool,
    /// The revision of the last read of `/workloads/`.
    seen_revision: Option<Revision>,
}

impl Declarations {
    /// Whether a poll starts now (none is in flight); it is counted as in flight from now.
    pub(super) fn start(&mut self) -> bool {
        let start = !self.declaring;
        self.declaring = true;
        start
    }

    /// Whether a poll would find nothing to do if the store is at `revision`: one is in flight
    /// (so none starts), or `/workloads/` was last read at `revision` (so the poll ends at
    /// [`Self::moved`]). It changes nothing.
    pub(super) fn idle_at(&self, revision: Option<Revision>) -> bool {
        self.declaring || (revision.is_some() && self.seen_revision == revision)
    }

    /// The store is at `revision`. Returns whether `/workloads/` must be read; if not (nothing
    /// moved since the last read) the poll ends.
    pub(super) fn moved(&mut self, revision: Revision) -> bool {
        if self.seen_revision == Some(revision) {
            self.declaring = false;
            return false;
        }
        true
    }

    /// The poll ended (read or failed).
    pub(super) fn done(&mut self) {
        self.declaring = false;
    }

    /// `/workloads/` was read at `revision`.
    pub(super) fn read_at(&mut self, revision: Revision) {
        self.seen_revision = Some(revision);
    }
}

/// The declarations in a read of `/workloads/`, by name, and a line for each that does not
/// decode. One unchanged since `memo` (same `mod_revision`) is taken from it, not decoded.
pub(super) fn declared(
    read: &Read,
    memo: Option<&Snapshot>,
) -> (
    BTreeMap<String, Stored<WorkloadSpec>>,
    BTreeMap<String, String>,
) {
    let mut declared = BTreeMap::new();
    let mut errors = BTreeMap::new();
    for e in &read.entries {
        let unchanged = e
            .key
            .strip_prefix(WORKLOADS)
            .and_then(|name| memo?.workloads.get(name))
            .filter(|w| w.mod_revision == e.mod_revision)
            .cloned();
        match unchanged.map_or_else(|| crate::model::snapshot::checked::<WorkloadSpec>(e), Ok) {
            Ok(w) => {
                declared.insert(w.value.name.clone(), w);
            }
            Err(reason) => {
                errors.insert(e.key.clone(), reason);
            }
        }
    }
    (declared, errors)
}

/// A controller for the runtime, whose clock ticks in milliseconds: the settings that the core
/// states in its driver's ticks (the simulator's seconds) are scaled here, so `expectations` keeps
/// Kubernetes' 300-second TTL rather than 300 ms.
pub fn runtime_controller(kind: ControllerKind) -> Controller {
    match kind {
        ControllerKind::Expectations => {
            let seconds = ExpectationsConfig::default();
            Controller::Expectations(Expectations::new(ExpectationsConfig {
                ttl: seconds.ttl.saturating_mul(1000),
                burst: seconds.burst,
            }))
        }
        other => Controller::new(other),
    }
}

/// The log lines of a pass that completed, as the loop says them.
pub fn pass_log_lines(r: &PassReport) -> Vec<String> {
    let mut lines = Vec::new();
    let what = match &r.action {
        Some(Action::Create {
            target, counted, ..
        }) if !r.created.is_empty() => Some(format!(
            "target {target}, counted {counted}: created {}",
            r.created.join(", ")
        )),
        // Nothing written: the idle reason below says why, once.
        Some(Action::Create { .. }) => None,
        Some(Action::Delete { target, counted }) => Some(format!(
            "target {target}, counted {counted}: {} delete commands, deleted [{}]{}",
            r.delete_commands,
            r.deleted.join(", "),
            if r.delete_held.is_empty() {
                String::new()
            } else {
                format!(
                    ", held [{}] until their nodes report (they may have started unseen)",
                    r.delete_held.join(", ")
                )
            }
        )),
        Some(Action::Named {
            target, counted, ..
        }) if r.wrote() || r.delete_commands > 0 => Some(format!(
            "target {target}, counted {counted}: created [{}], {} delete commands, deleted [{}]",
            r.created.join(", "),
            r.delete_commands,
            r.deleted.join(", ")
        )),
        Some(Action::Named { .. }) | None => None,
    };
    lines.extend(r.failures.iter().cloned());
    lines.extend(r.rollout.iter().cloned());
    lines.extend(r.stopped.iter().cloned());
    lines.extend(what);
    if let Some(idle) = r.idle {
        lines.push(crate::model::loops::describe_idle(
            &idle,
            r.held_back,
            r.unplaced,
            &r.waiting_for,
        ));
    }
    if !r.collected.is_empty() {
        lines.push(format!("collected exited {}", r.collected.join(", ")));
    }
    if !r.lost.is_empty() {
        lines.push(format!(
            "removed {} of lost nodes (lease ended)",
            r.lost.join(", ")
        ));
    }
    if r.conflicts > 0 {
        lines.push(format!("{} conflicts, retried on fresh state", r.conflicts));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::encode;
    use crate::store::Entry;

    fn stored(name: &str, uid: Revision, rev: Revision, period_ms: u64) -> Stored<WorkloadSpec> {
        let mut value =
            super::super::reconcile::tests::test_spec(name, 1, ControllerKind::Intent, period_ms);
        value.name = name.into();
        Stored {
            value,
            create_revision: uid,
            mod_revision: rev,
        }
    }

    fn declare(
        s: &mut Schedule,
        ws: &[Stored<WorkloadSpec>],
        now: u64,
        wake: bool,
        gen: &mut u64,
    ) -> Vec<String> {
        let d = ws
            .iter()
            .map(|w| (w.value.name.clone(), w.clone()))
            .collect();
        s.declare(&d, now, wake, gen)
    }

    #[test]
    fn rounds_sit_on_the_grid_and_an_overrun_skips_the_missed_ones() {
        let mut s = Schedule::default();
        let mut gen = 1;
        declare(&mut s, &[stored("w", 1, 1, 100)], 1_000, false, &mut gen);
        assert_eq!(s.due(1_000), [("w".to_owned(), 1)]);
        assert_eq!(s.next_wake(1_000), None, "a pass in flight");
        assert!(s.due(1_100).is_empty(), "at most one pass in flight");
        // The pass took 350 ms: rounds 1 100, 1 200 and 1 300 are skipped.
        s.end_pass("w", 1);
        assert_eq!(s.next_wake(1_350), Some(1_100));
        assert_eq!(s.due(1_350).len(), 1);
        s.end_pass("w", 1);
        assert_eq!(s.next_wake(1_350), Some(1_400));
        assert!(s.due(1_399).is_empty());
    }

    #[test]
    fn a_late_round_counts_the_whole_periods_it_missed_for_the_skipped_metric() {
        let mut s = Schedule::default();
        let mut gen = 1;
        declare(&mut s, &[stored("w", 1, 1, 100)], 1_000, false, &mut gen);
        // Run 3 ms late: no round was missed.
        assert_eq!(s.due(1_003).len(), 1);
        s.end_pass("w", 1);
        assert!(s.take_skipped().is_empty(), "3 ms late is no round missed");
        // Next due at 1 100, run at 1 350: rounds 1 100 and 1 200 are missed.
        assert_eq!(s.due(1_350).len(), 1);
        s.end_pass("w", 1);
        assert_eq!(s.take_skipped(), [("w".to_owned(), 2)]);
    }

    #[test]
    fn a_changed_key_restarts_the_loop_which_waits_for_its_predecessors_pass() {
        let mut s = Schedule::default();
        let mut gen = 1;
        declare(&mut s, &[stored("w", 1, 1, 100)], 0, false, &mut gen);
        assert_eq!(s.due(0), [("w".to_owned(), 1)]);
        // Same key, a new revision (say a new copy count): the same loop goes on.
        declare(&mut s, &[stored("w", 1, 2, 100)], 10, false, &mut gen);
        assert_eq!(gen, 2);
        // A new period: a new loop, generation 2, whose first pass waits for the old one's.
        declare(&mut s, &[stored("w", 1, 3, 200)], 20, false, &mut gen);
        assert_eq!(gen, 3);
        assert!(
            s.due(20).is_empty(),
            "the old loop's pass is still in flight"
        );
        assert!(
            s.current("w", 1).is_none(),
            "the old loop's reply only frees the slot"
        );
        assert_eq!(s.due(20), [("w".to_owned(), 2)]);
        assert!(s.current("w", 2).is_some());
    }

    #[test]
    fn undeclared_workloads_loops_end_and_new_ones_start() {
        let mut s = Schedule::default();
        let mut gen = 1;
        declare(
            &mut s,
            &[stored("a", 1, 1, 100), stored("b", 2, 2, 100)],
            0,
            false,
            &mut gen,
        );
        assert_eq!(s.names(), ["a", "b"]);
        let ended = declare(&mut s, &[stored("c", 5, 5, 100)], 0, false, &mut gen);
        assert_eq!(ended, ["a", "b"]);
        assert_eq!(s.names(), ["c"]);
    }

    #[test]
    fn a_changed_declaration_wakes_its_loop_only_with_wake_on_change() {
        for wake in [false, true] {
            let mut s = Schedule::default();
            let mut gen = 1;
            declare(&mut s, &[stored("w", 1, 1, 10_000)], 0, wake, &mut gen);
            s.due(0);
            s.end_pass("w", 1);
            declare(&mut s, &[stored("w", 1, 2, 10_000)], 50, wake, &mut gen);
            assert_eq!(!s.due(50).is_empty(), wake, "wake {wake}");
            // Unchanged: nothing wakes.
            s.end_pass("w", 1);
            declare(&mut s, &[stored("w", 1, 2, 10_000)], 60, wake, &mut gen);
            assert!(s.due(60).is_empty());
            s.wake_all();
            assert_eq!(s.next_wake(70), Some(70));
        }
    }

    #[test]
    fn a_gone_workloads_loop_runs_no_more_passes() {
        let mut s = Schedule::default();
        let mut gen = 1;
        declare(&mut s, &[stored("w", 5, 5, 100)], 0, false, &mut gen);
        s.due(0);
        s.current("w", 1).unwrap().gone(5);
        assert!(s.due(10_000).is_empty());
        assert_eq!(s.next_wake(10_000), None);
    }

    #[test]
    fn a_pass_that_read_from_before_its_declaration_does_not_end_its_loop() {
        let mut s = Schedule::default();
        let mut gen = 1;
        declare(&mut s, &[stored("w", 5, 5, 100)], 0, false, &mut gen);
        s.due(0);
        // Read at revision 4, before the declaration (uid 5) was created: not evidence.
        s.current("w", 1).unwrap().gone(4);
        assert_eq!(s.next_wake(50), Some(100));
        assert_eq!(
            s.due(100),
            [("w".to_owned(), 1)],
            "the next round reads again"
        );
    }

    #[test]
    fn a_pass_gives_up_after_max_attempts_conflicts() {
        let mut s = Schedule::default();
        let mut gen = 1;
        declare(&mut s, &[stored("w", 1, 1, 100)], 0, false, &mut gen);
        s.due(0);
        let lp = s.current("w", 1).unwrap();
        let retries = (0..10).take_while(|_| lp.conflicted()).count();
        assert_eq!(retries as u32, MAX_ATTEMPTS - 1);
        assert_eq!(lp.attempts(), MAX_ATTEMPTS);
        assert!(s.due(50).is_empty());
        assert_eq!(s.next_wake(50), Some(100));
        assert_eq!(s.due(100).len(), 1, "its next round starts afresh");
        assert_eq!(s.current("w", 1).unwrap().attempts(), 0);
    }

    #[test]
    fn declarations_are_read_only_when_the_revision_moved() {
        let mut d = Declarations::default();
        assert!(d.start());
        assert!(!d.start(), "one poll at a time");
        assert!(d.moved(7), "never read");
        d.done();
        d.read_at(7);
        assert!(d.start());
        assert!(!d.moved(7));
        assert!(d.start(), "the unchanged poll ended");
        assert!(d.moved(8));
    }

    #[test]
    fn unchanged_declarations_are_taken_from_the_memo_and_bad_ones_are_named() {
        let w = stored("w", 3, 4, 100);
        let entry = |key: &str, value: String, rev| Entry {
            key: key.into(),
            value,
            create_revision: 3,
            mod_revision: rev,
            lease: None,
        };
        let read = Read {
            revision: 9,
            entries: vec![
                entry("/workloads/bad", "{".into(), 5),
                entry("/workloads/w", encode(&w.value), 4),
            ],
        };
        let (d, errors) = declared(&read, None);
        assert_eq!(d.keys().collect::<Vec<_>>(), ["w"]);
        assert_eq!(d["w"], w);
        assert_eq!(errors.len(), 1);
        // A memo whose value for w differs (as a decoded one never would) shows it was reused.
        let mut memo = Snapshot::default();
        let mut remembered = w.clone();
        remembered.value.copies = 99;
        memo.workloads.insert("w".into(), remembered.clone());
        assert_eq!(declared(&read, Some(&memo)).0["w"], remembered);
        // At another revision it is decoded afresh.
        memo.workloads.get_mut("w").unwrap().mod_revision = 3;
        assert_eq!(declared(&read, Some(&memo)).0["w"], w);
    }

    #[test]
    fn expectations_ttl_is_scaled_to_milliseconds() {
        match runtime_controller(ControllerKind::Expectations) {
            Controller::Expectations(e) => assert_eq!(e.config().ttl, 300_000),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_pass_says_what_it_did_then_its_conflicts() {
        let mut r = PassReport::default();
        assert!(pass_log_lines(&r).is_empty());
        r.conflicts = 2;
        assert_eq!(pass_log_lines(&r), ["2 conflicts, retried on fresh state"]);
        r.action = Some(Action::Delete {
            target: 1,
            counted: 3,
        });
        r.delete_commands = 2;
        r.deleted = vec!["w-1".into(), "w-2".into()];
        assert_eq!(
            pass_log_lines(&r),
            [
                "target 1, counted 3: 2 delete commands, deleted [w-1, w-2]",
                "2 conflicts, retried on fresh state"
            ]
        );
    }

    #[test]
    fn a_named_pass_says_what_it_created_and_deleted_and_nothing_when_it_wrote_nothing() {
        let named = Action::Named {
            target: 2,
            counted: 2,
            create: Vec::new(),
            delete: Vec::new(),
        };
        let mut r = PassReport {
            action: Some(named),
            ..PassReport::default()
        };
        assert!(
            pass_log_lines(&r).is_empty(),
            "nothing written, nothing said"
        );
        r.created = vec!["w-3".into()];
        r.delete_commands = 1;
        r.deleted = vec!["w-1".into()];
        assert_eq!(
            pass_log_lines(&r),
            ["target 2, counted 2: created [w-3], 1 delete commands, deleted [w-1]"]
        );
        // A delete command that reached a copy already stopping writes nothing, but is said.
        r.created.clear();
        r.deleted.clear();
        assert_eq!(
            pass_log_lines(&r),
            ["target 2, counted 2: created [], 1 delete commands, deleted []"]
        );
    }
}
