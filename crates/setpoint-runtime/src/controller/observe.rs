//! What the host tells its driver about its passes, for the metrics
//! ([`crate::metrics::ControllerMetrics`]): one [`PassObservation`] per pass ended and per loop
//! that skipped rounds, taken with [`super::Host::take_passes`]. The host only records them; it
//! never reads them back, so they change nothing it does.

use std::collections::BTreeMap;

use super::reconcile::PassReport;

/// One pass that ended, or rounds a loop skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassObservation {
    /// The workload.
    pub workload: String,
    /// How the pass ended: `wrote`, `unchanged`, `partial` or `failed`, or `skipped` (not run:
    /// provably a no-op); `None` when this only reports skipped rounds.
    pub outcome: Option<&'static str>,
    /// From the pass's start (its read was sent) to its end, in the host's milliseconds.
    pub duration_ms: u64,
    /// Copies created.
    pub created: u64,
    /// Copies whose assignment a delete command removed.
    pub deleted: u64,
    /// Attempts lost to conflicts.
    pub conflicts: u64,
    /// Copies crash-loop backoff held back.
    pub held_back: u64,
    /// The reason of an idle stretch that began with this pass (`backing_off`, …).
    pub idle: Option<String>,
    /// Rounds of the grid skipped because a pass overran them.
    pub skipped_rounds: u64,
}

/// The passes in flight (their start) and the observations not taken yet.
#[derive(Debug, Default)]
pub(super) struct Observations {
    started: BTreeMap<String, u64>,
    done: Vec<PassObservation>,
}

/// At most this many observations wait; past it the oldest are dropped (a driver that never
/// takes them must not grow the host without bound).
const MAX_WAITING: usize = 10_000;

impl Observations {
    /// A pass of `workload` started at `now`.
    pub(super) fn begin(&mut self, workload: &str, now: u64) {
        self.started.insert(workload.to_owned(), now);
    }

    /// `rounds` of `workload`'s grid were skipped.
    pub(super) fn skipped(&mut self, workload: &str, rounds: u64) {
        self.push(PassObservation {
            skipped_rounds: rounds,
            ..empty(workload)
        });
    }

    /// A pass of `workload` was not run: provably a no-op (`rounds.rs`).
    pub(super) fn skipped_quiet(&mut self, workload: &str) {
        self.push(PassObservation {
            outcome: Some("skipped"),
            ..empty(workload)
        });
    }

    /// The pass of `workload` ended at `now` with `report`.
    pub(super) fn end(&mut self, workload: &str, now: u64, report: &PassReport) {
        let outcome = if report.stopped.is_some() {
            "partial"
        } else if report.wrote() {
            "wrote"
        } else {
            "unchanged"
        };
        let idle = report.idle.map(|i| {
            serde_json::to_value(i.reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        });
        let o = PassObservation {
            outcome: Some(outcome),
            duration_ms: self.elapsed(workload, now),
            created: report.created.len() as u64,
            deleted: report.deleted.len() as u64,
            conflicts: u64::from(report.conflicts),
            held_back: report.held_back,
            idle,
            ..empty(workload)
        };
        self.push(o);
    }

    /// The pass of `workload` failed at `now` after `conflicts` lost attempts.
    pub(super) fn failed(&mut self, workload: &str, now: u64, conflicts: u64) {
        let o = PassObservation {
            outcome: Some("failed"),
            duration_ms: self.elapsed(workload, now),
            conflicts,
            ..empty(workload)
        };
        self.push(o);
    }

    /// The observations so far, oldest first, leaving none.
    pub(super) fn take(&mut self) -> Vec<PassObservation> {
        std::mem::take(&mut self.done)
    }

    fn elapsed(&mut self, workload: &str, now: u64) -> u64 {
        self.started
            .remove(workload)
            .map_or(0, |t| now.saturating_sub(t))
    }

    fn push(&mut self, o: PassObservation) {
        if self.done.len() >= MAX_WAITING {
            self.done.remove(0);
        }
        self.done.push(o);
    }
}

fn empty(workload: &str) -> PassObservation {
    PassObservation {
        workload: workload.to_owned(),
        outcome: None,
        duration_ms: 0,
        created: 0,
        deleted: 0,
        conflicts: 0,
        held_back: 0,
        idle: None,
        skipped_rounds: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_is_timed_from_its_start_and_reports_what_it_did() {
        let mut o = Observations::default();
        o.begin("w", 1_000);
        let report = PassReport {
            created: vec!["w-1".into(), "w-2".into()],
            conflicts: 1,
            ..Default::default()
        };
        o.end("w", 1_250, &report);
        o.skipped("w", 3);
        o.begin("w", 2_000);
        o.failed("w", 2_040, 5);
        let t = o.take();
        assert_eq!(t.len(), 3);
        assert_eq!(
            (t[0].outcome, t[0].duration_ms, t[0].created),
            (Some("wrote"), 250, 2)
        );
        assert_eq!((t[1].outcome, t[1].skipped_rounds), (None, 3));
        assert_eq!(
            (t[2].outcome, t[2].duration_ms, t[2].conflicts),
            (Some("failed"), 40, 5)
        );
        assert!(o.take().is_empty());
    }

    #[test]
    fn a_pass_that_deleted_copies_reports_how_many_for_the_deleted_metric() {
        let mut o = Observations::default();
        o.begin("w", 0);
        let report = PassReport {
            delete_commands: 3,
            deleted: vec!["w-0".into(), "w-4".into()],
            ..Default::default()
        };
        o.end("w", 10, &report);
        let t = o.take();
        assert_eq!(
            (t[0].outcome, t[0].created, t[0].deleted),
            (Some("wrote"), 0, 2),
            "copies whose assignment the pass removed, not its delete commands"
        );
    }

    /// A pass that lost its commit to another writer and won on fresh state still counts the
    /// lost attempts for the conflicts metric, as a failed pass does (mutant 576 of the mutation
    /// sample counted only failed passes' conflicts).
    #[test]
    fn a_pass_that_wrote_after_conflicts_reports_them_for_the_conflicts_metric() {
        let mut o = Observations::default();
        o.begin("w", 0);
        let report = PassReport {
            created: vec!["w-3".into()],
            conflicts: 2,
            ..Default::default()
        };
        o.end("w", 10, &report);
        o.begin("v", 10);
        o.failed("v", 20, 5);
        let t = o.take();
        let seen: Vec<(Option<&str>, u64)> = t.iter().map(|p| (p.outcome, p.conflicts)).collect();
        assert_eq!(seen, [(Some("wrote"), 2), (Some("failed"), 5)]);
    }

    #[test]
    fn a_pass_whose_backoff_held_copies_back_reports_how_many_for_the_held_back_gauge() {
        let mut o = Observations::default();
        o.begin("w", 0);
        let report = PassReport {
            held_back: 2,
            ..Default::default()
        };
        o.end("w", 10, &report);
        let t = o.take();
        assert_eq!((t[0].outcome, t[0].held_back), (Some("unchanged"), 2));
    }
}
