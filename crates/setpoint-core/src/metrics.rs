//! The lesson's metrics: what one run measures, the per-second series a run leaves, and the
//! metrics of such a series.
//!
//! They live in the core, not in the simulator, because two drivers count with them: the lab's
//! engines, on virtual time, and the runtime's measurement of real runs (`setpoint measure`),
//! from its event log. Neither needs the other to count. `docs/model.md` ("The metrics")
//! defines each metric exactly.
//!
//! The lab's fast engine keeps its own running tally, because it never visits most seconds;
//! [`metrics_from_series`] is the slow, literal form of the same definitions, and the lab's tests
//! check that both agree on every lesson row and on generated scenarios.

use serde::Serialize;

use crate::Time;

/// The lesson's metrics for one run, plus three that the lesson does not print.
///
/// The first eight fields, in this order, are the keys of `setpoint run --format json`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Metrics {
    /// Rounds the loop ran: one at every multiple of the period in `0..=duration`.
    pub rounds: u64,
    /// `(created + delete_commands) / rounds`: corrections per round.
    pub work_per_round: f64,
    /// Copies created.
    pub created: u64,
    /// `created − (desired + died)`: creations beyond the initial copies and one replacement per
    /// copy that a scripted death killed. Negative when the run ends with replacements owed.
    pub unneeded: i64,
    /// Delete commands sent, including those that reached an already dead copy.
    pub delete_commands: u64,
    /// Copies that a delete command actually deleted.
    pub deleted: u64,
    /// The largest `live − desired` seen at the end of any second, and never below 0.
    pub overshoot: u64,
    /// The first second from which the live count equals desired through the end of the run;
    /// `None` when it differs at the last second.
    pub stable: Option<u64>,
    /// Copies that scripted deaths killed (a death strikes only live copies).
    pub died: u64,
    /// The largest number of copies live at the end of any second.
    pub peak_live: u64,
    /// Copy-seconds spent above desired: the sum over seconds of `max(0, live − desired)`.
    pub copy_seconds_above: u64,
}

impl Metrics {
    /// The CSV header: the JSON keys, in order.
    pub const CSV_HEADER: &'static str = "rounds,work_per_round,created,unneeded,delete_commands,deleted,overshoot,stable,died,peak_live,copy_seconds_above";

    /// One CSV row in the order of [`Self::CSV_HEADER`]. `stable` is empty when it is `None`;
    /// `work_per_round` is the shortest text that reads back as the same double.
    pub fn csv_row(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{},{},{},{}",
            self.rounds,
            self.work_per_round,
            self.created,
            self.unneeded,
            self.delete_commands,
            self.deleted,
            self.overshoot,
            self.stable.map_or_else(String::new, |s| s.to_string()),
            self.died,
            self.peak_live,
            self.copy_seconds_above
        )
    }
}

/// One second of a run: the state at the end of second `t` and what happened during it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TraceRow {
    /// The second.
    pub t: Time,
    /// Declared copies.
    pub desired: u64,
    /// Copies running at the end of the second.
    pub live: u64,
    /// Copies the ledger shows at the end of the second.
    pub seen: u64,
    /// Copies created and alive that have not reached the ledger yet (work in flight), whether or
    /// not the controller counts them.
    pub pending: u64,
    /// Copies created during the second.
    pub created: u64,
    /// Delete commands sent during the second.
    pub delete_commands: u64,
    /// Copies deleted by those commands.
    pub deleted: u64,
    /// Copies killed by scripted deaths during the second.
    pub died: u64,
}

impl TraceRow {
    /// The CSV header of a trace: the workload's name, then the row's fields.
    pub const CSV_HEADER: &'static str =
        "workload,t,desired,live,seen,pending,created,delete_commands,deleted,died";

    /// The row as CSV for `workload`, without a newline.
    pub fn csv(&self, workload: &str) -> String {
        format!(
            "{workload},{},{},{},{},{},{},{},{},{}",
            self.t,
            self.desired,
            self.live,
            self.seen,
            self.pending,
            self.created,
            self.delete_commands,
            self.deleted,
            self.died
        )
    }
}

/// The metrics of `rows`, one per second in order, with `rounds` rounds in that span.
///
/// - `created`, `delete_commands`, `deleted`, `died`: the sums of the rows' counts;
/// - `work_per_round`: `(created + delete_commands) / rounds` (0 when there was no round);
/// - `unneeded`: `created − (first desired + every increase of desired + died)`;
/// - `overshoot`: the largest `live − desired`, never below 0; `peak_live`: the largest `live`;
/// - `copy_seconds_above`: the sum of `max(0, live − desired)`;
/// - `stable`: the `t` of the first row from which `live = desired` through the last row;
///   `None` when the last row differs (or there is no row).
pub fn metrics_from_series(rows: &[TraceRow], rounds: u64) -> Metrics {
    let mut m = Metrics {
        rounds,
        work_per_round: 0.0,
        created: 0,
        unneeded: 0,
        delete_commands: 0,
        deleted: 0,
        overshoot: 0,
        stable: None,
        died: 0,
        peak_live: 0,
        copy_seconds_above: 0,
    };
    let mut needed: u64 = rows.first().map_or(0, |r| r.desired);
    let mut last_desired = needed;
    let mut stable_from: Option<u64> = None;
    for r in rows {
        m.created = m.created.saturating_add(r.created);
        m.delete_commands = m.delete_commands.saturating_add(r.delete_commands);
        m.deleted = m.deleted.saturating_add(r.deleted);
        m.died = m.died.saturating_add(r.died);
        needed = needed.saturating_add(r.desired.saturating_sub(last_desired));
        last_desired = r.desired;
        m.peak_live = m.peak_live.max(r.live);
        let above = r.live.saturating_sub(r.desired);
        m.overshoot = m.overshoot.max(above);
        m.copy_seconds_above = m.copy_seconds_above.saturating_add(above);
        if r.live == r.desired {
            stable_from.get_or_insert(r.t);
        } else {
            stable_from = None;
        }
    }
    m.stable = stable_from;
    m.unneeded = i64::try_from(m.created).unwrap_or(i64::MAX)
        - i64::try_from(needed.saturating_add(m.died)).unwrap_or(i64::MAX);
    if rounds > 0 {
        m.work_per_round = (m.created + m.delete_commands) as f64 / rounds as f64;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(t: Time, desired: u64, live: u64) -> TraceRow {
        TraceRow {
            t,
            desired,
            live,
            seen: live,
            pending: 0,
            created: 0,
            delete_commands: 0,
            deleted: 0,
            died: 0,
        }
    }

    #[test]
    fn an_empty_series_is_never_stable_and_did_no_work() {
        let m = metrics_from_series(&[], 0);
        assert_eq!((m.stable, m.work_per_round, m.unneeded), (None, 0.0, 0));
    }

    #[test]
    fn stable_is_the_first_second_of_the_last_run_of_agreement() {
        let rows = [
            row(0, 2, 0),
            row(1, 2, 2),
            row(2, 2, 3),
            row(3, 2, 2),
            row(4, 2, 2),
        ];
        let m = metrics_from_series(&rows, 1);
        assert_eq!(
            (m.stable, m.overshoot, m.peak_live, m.copy_seconds_above),
            (Some(3), 1, 3, 1)
        );
        let m = metrics_from_series(&rows[..3], 1);
        assert_eq!(m.stable, None);
    }

    #[test]
    fn unneeded_counts_creations_beyond_desired_its_increases_and_deaths() {
        let mut rows = [row(0, 2, 2), row(1, 4, 4), row(2, 4, 3), row(3, 4, 5)];
        rows[0].created = 2;
        rows[1].created = 2;
        rows[2].died = 1;
        rows[3].created = 2;
        let m = metrics_from_series(&rows, 2);
        // needed: 2 at first, +2 on the increase, +1 for the death: 6 created, 5 needed.
        assert_eq!((m.created, m.died, m.unneeded), (6, 1, 1));
        assert_eq!(m.work_per_round, 3.0);
    }
}
