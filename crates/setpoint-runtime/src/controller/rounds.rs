//! Idle rounds write nothing: which of a loop's rounds its pass writes to the event log.
//!
//! The lesson's loop runs every U, and `measure` computes the lesson's metrics from the rounds
//! ([`crate::events::RoundEvent`]): per second the desired count, the ledger and the copies in
//! flight of the last round at or before it, the delete commands, and how many rounds ran. A
//! round that did nothing (no creation, no delete command) and shows what the loop's last round
//! showed adds nothing to that but the count, and the count is arithmetic: the loop runs on the
//! grid `start + k·U`. So such a round is not written ([`RoundMemo::plan`]), and `measure`
//! counts it on the grid after the last round written
//! ([`crate::events::elided_rounds`]). What keeps that count exact:
//! - a round is left out only after a round of the same loop that was written and committed,
//!   or left out itself: a new loop (a new leader, a restarted controller) writes its first;
//! - a grid point with no pass (an overrun skips rounds) or whose pass failed is *missed*: the
//!   next round is written, with `missed` saying how many grid points before it ran no round;
//! - a pass that conflicts writes its retry's round (the retry is the same grid point);
//! - at least one round is written every `round_resync` (`--round-resync`, default 5 min):
//!   its commit compares the declaration and the fence, so a pass reading a stale cache
//!   still meets a conflict then.
//!
//! What it cannot know: a loop that ends without a round (its leader lost, the workload
//! undeclared) ran its idle rounds until some time after its last entry; `measure` counts them
//! up to the workload's next entry or the end of the window (docs/runtime.md, "Idle rounds").

use setpoint_core::ControllerKind;

use crate::events::RoundEvent;
use crate::model::Snapshot;

/// Whether a pass of workload `name` on `snapshot` decides nothing by the clock, so that the
/// same snapshot later gives the same pass: its controller keeps no timed memory (`ledger`,
/// `intent` and `named` do not; `expectations` expires its expectations, `gated` compares
/// report times), and its loop record holds no timer: no crash-loop backoff still holding a
/// creation back at the snapshot's time, no rolling update (its progress deadline), and no idle
/// stretch still to be announced.
///
/// A backoff entry stays in the record after its wait is over (it keeps the restart count and
/// the last exit that `get` shows, and the failure count that the next crash doubles or
/// resets), but once its next try is due it decides nothing by the clock: a pass later on the
/// same snapshot creates what this one does. Before 2026-12-07 any entry counted as a timer, so
/// one crash left its workload's loop running a pass every period for good (91 % of the passes
/// of `partitions.toml`'s chaos runs read an unchanged revision).
pub(super) fn timeless(snapshot: &Snapshot, name: &str) -> bool {
    let Some(w) = snapshot.workloads.get(name) else {
        return false;
    };
    let kind_timeless = matches!(
        w.value.controller,
        ControllerKind::Ledger | ControllerKind::Intent | ControllerKind::Named
    );
    let record_timeless = snapshot.loops.get(name).is_none_or(|r| {
        r.value.backoff.values().all(|b| !b.blocks(snapshot.now_ms))
            && r.value.rollout.is_none()
            && r.value.idle.is_none_or(|i| i.announced)
    });
    kind_timeless && record_timeless
}

/// One loop's memory of its rounds.
#[derive(Debug, Default)]
pub(super) struct RoundMemo {
    /// What the loop's last round showed, if it was written and committed or left out; `None`
    /// after a failure, so that the next round is written.
    last: Option<RoundEvent>,
    /// The store time of the last round written.
    written_ms: u64,
    /// Grid points since the last round entry that ran no round or whose round was lost.
    missed: u64,
    /// The round of the pass in flight, to be remembered once its writes commit.
    in_flight: Option<RoundEvent>,
}

impl RoundMemo {
    /// `rounds` grid points passed with no pass (an overrun).
    pub(super) fn skipped(&mut self, rounds: u64) {
        self.missed += rounds;
        if rounds > 0 {
            self.last = None;
        }
    }

    /// Completes the pass's `round` (its `missed`) and says whether it is written (`Some`) or
    /// left out (`None`, remembered at once): left out when it is idle, shows what the loop's
    /// last round showed, nothing was missed since, and the last written round is less than
    /// `resync_ms` old (0: every round is written).
    pub(super) fn plan(&mut self, mut round: RoundEvent, resync_ms: u64) -> Option<RoundEvent> {
        round.missed = self.missed;
        let leave_out = resync_ms > 0
            && round.missed == 0
            && round.is_idle()
            && self.last.as_ref().is_some_and(|l| round.shows_same(l))
            && round.at_ms < self.written_ms.saturating_add(resync_ms);
        if leave_out {
            self.last = Some(round);
            return None;
        }
        self.in_flight = Some(round.clone());
        Some(round)
    }

    /// Whether a round at `at_ms` that shows what the last one showed may be left out: one
    /// was remembered, nothing was missed since, and the resync is not due.
    pub(super) fn may_leave_out(&self, at_ms: u64, resync_ms: u64) -> bool {
        resync_ms > 0
            && self.missed == 0
            && self.last.is_some()
            && at_ms < self.written_ms.saturating_add(resync_ms)
    }

    /// The pass's writes all committed: its round, if written, is the loop's last.
    pub(super) fn committed(&mut self) {
        if let Some(r) = self.in_flight.take() {
            self.written_ms = r.at_ms;
            self.last = Some(r);
            self.missed = 0;
        }
    }

    /// The pass's commit conflicted and it reads again: the retry is the same grid point,
    /// and writes its round.
    pub(super) fn retried(&mut self) {
        self.in_flight = None;
        self.last = None;
    }

    /// The pass ended without its round written (a failed read or write, or contention): that
    /// grid point is missed, and the next round is written.
    pub(super) fn lost(&mut self) {
        self.in_flight = None;
        self.last = None;
        self.missed += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(at_ms: u64, on_ledger: u64, created: u64) -> RoundEvent {
        RoundEvent {
            at_ms,
            desired: 3,
            on_ledger,
            in_flight: 0,
            created,
            delete_commands: 0,
            commanded: Vec::new(),
            fence: Some(7),
            period_ms: 100,
            missed: 0,
        }
    }

    #[test]
    fn the_first_round_of_a_loop_is_written_and_an_unchanged_idle_one_after_it_is_not() {
        let mut m = RoundMemo::default();
        assert!(
            m.plan(round(0, 3, 0), 1_000).is_some(),
            "a new loop's first"
        );
        m.committed();
        assert!(m.plan(round(100, 3, 0), 1_000).is_none());
        assert!(m.plan(round(200, 3, 0), 1_000).is_none());
        // What the round shows changed: written.
        assert!(m.plan(round(300, 2, 0), 1_000).is_some());
        m.committed();
        // A round that acts is written even if it shows the same.
        assert!(m.plan(round(400, 2, 1), 1_000).is_some());
    }

    #[test]
    fn an_unwritten_round_is_not_remembered_until_its_commit() {
        let mut m = RoundMemo::default();
        assert!(m.plan(round(0, 3, 0), 1_000).is_some());
        // Not committed (still in flight, or failed): the next is written.
        assert!(m.plan(round(100, 3, 0), 1_000).is_some());
        m.retried();
        assert!(
            m.plan(round(100, 3, 0), 1_000).is_some(),
            "the retry is written"
        );
        m.committed();
        assert!(m.plan(round(200, 3, 0), 1_000).is_none());
    }

    #[test]
    fn a_missed_or_lost_round_makes_the_next_one_written_and_counted() {
        let mut m = RoundMemo::default();
        m.plan(round(0, 3, 0), 1_000);
        m.committed();
        m.skipped(2);
        let r = m
            .plan(round(300, 3, 0), 1_000)
            .expect("written after an overrun");
        assert_eq!(r.missed, 2);
        m.committed();
        assert!(m.plan(round(400, 3, 0), 1_000).is_none());
        m.plan(round(500, 3, 0), 1_000);
        m.lost();
        let r = m
            .plan(round(600, 3, 0), 1_000)
            .expect("written after a loss");
        assert_eq!(r.missed, 1);
        m.committed();
        assert_eq!(m.plan(round(700, 3, 0), 1_000), None);
    }

    #[test]
    fn a_round_is_written_every_resync_and_every_round_with_no_resync() {
        let mut m = RoundMemo::default();
        m.plan(round(0, 3, 0), 250);
        m.committed();
        assert!(m.plan(round(100, 3, 0), 250).is_none());
        assert!(m.plan(round(200, 3, 0), 250).is_none());
        assert!(
            m.plan(round(300, 3, 0), 250).is_some(),
            "250 ms since the last written"
        );
        m.committed();
        assert!(m.plan(round(400, 3, 0), 250).is_none());
        assert!(
            m.plan(round(500, 3, 0), 0).is_some(),
            "0 writes every round"
        );
    }
}
