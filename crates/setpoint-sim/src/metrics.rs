//! What one run measures. `docs/model.md` defines each metric exactly.

use serde::Serialize;

/// The lesson's metrics for one run, plus three that the lesson does not print.
///
/// The first eight fields, in this order, are the keys of `setpoint run --format json`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
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
