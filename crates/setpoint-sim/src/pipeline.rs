//! The report pipeline: how the reports of a node travel to the ledger, and on which node each
//! copy runs.
//!
//! A report's delay is drawn from the delay model ([`crate::delay`]); the pipeline decides what
//! that delay means next to the reports made before it. `docs/model.md` ("The report pipeline")
//! defines every mode with a worked example; in short, for a report made at second `t` whose
//! draw is `d` ms, `due = t + ⌈d / 1000⌉`, and it is delivered at:
//! - [`Pipeline::PerReport`]: `due`: every report on its own, so reports overtake each other
//!   (the lesson's world, and the default);
//! - [`Pipeline::InOrder`]: `max(due, the delivery of the report made before it on its node)`:
//!   a short delay waits behind an older long one (setpoint's agent);
//! - [`Pipeline::Snapshot`]: `due`, and a report made while the node's previous one is still
//!   in flight replaces it: the older one's news goes with the newer one (so snapshots keep the
//!   node's order, each no later than under in-order);
//! - [`Pipeline::PerCopy`]: `max(due, the delivery of the copy's own previous report)` (the
//!   kubelet's per-pod status updates: a copy's end never overtakes its start).
//!
//! An outage holds a report at the ledger, after the pipeline: it shifts a delivery, never the
//! pipeline's order. With a fixed delay, per-report, in-order and per-copy deliver every report
//! at `due` (reports are made in time order, so `due` never goes back): they coincide, and the
//! lesson's fast engine serves all three. A snapshot can still replace another under a fixed
//! delay, and periodic snapshots ([`PipelineSpec::report_every_ms`]) move deliveries to the
//! node's snapshot times, so those go to the general engine.
//!
//! **Placement.** Copies are placed round robin over the world's creations: the `k`-th copy the
//! world creates (over every workload, counting from 0, in creation order) runs on node
//! `k mod nodes`.

use std::fmt;
use std::str::FromStr;

use crate::delay::Millis;
use setpoint_core::Time;

/// How reports travel to the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Pipeline {
    /// Every report takes its own delay; reports overtake each other. The lesson's world.
    #[default]
    PerReport,
    /// A report is delivered no earlier than the one made before it on the same node.
    InOrder,
    /// In order per node, and a newer report replaces the node's snapshot still in flight.
    Snapshot,
    /// A report is delivered no earlier than the same copy's previous report.
    PerCopy,
}

/// Every pipeline, in the order of their names in messages.
pub const PIPELINES: [Pipeline; 4] = [
    Pipeline::PerReport,
    Pipeline::InOrder,
    Pipeline::Snapshot,
    Pipeline::PerCopy,
];

impl Pipeline {
    /// The name in flags, files and outputs: `per-report`, `in-order`, `snapshot`, `per-copy`.
    pub fn name(self) -> &'static str {
        match self {
            Pipeline::PerReport => "per-report",
            Pipeline::InOrder => "in-order",
            Pipeline::Snapshot => "snapshot",
            Pipeline::PerCopy => "per-copy",
        }
    }
}

impl fmt::Display for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A pipeline name that is not one of [`PIPELINES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown report pipeline '{0}': accepted are per-report, in-order, snapshot, per-copy")]
pub struct UnknownPipeline(pub String);

impl FromStr for Pipeline {
    type Err = UnknownPipeline;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PIPELINES
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownPipeline(s.to_owned()))
    }
}

/// The most nodes a scenario may declare.
pub const MAX_NODES: u32 = 100_000;

/// The longest snapshot period accepted, in milliseconds: one hour.
pub const MAX_REPORT_EVERY_MS: Millis = 3_600_000;

/// The report pipeline of a scenario: its mode, its nodes and how often a node reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineSpec {
    /// The mode. Default [`Pipeline::PerReport`].
    pub mode: Pipeline,
    /// How many nodes the copies run on, `1 ..= MAX_NODES`; copies are placed round robin in
    /// creation order. Only `in-order` and `snapshot` read it. Default 1.
    pub nodes: u32,
    /// How often a node sends a snapshot of itself, in milliseconds; 0: one report per copy
    /// event, when it happens. Only `in-order` accepts a period: a node then reports at
    /// `0, R, 2R, …`, each snapshot with its own draw, and a copy event at second `t` travels
    /// in the first snapshot at or after `t` (setpoint's agent reports every R). Default 0.
    ///
    /// ## Warning
    /// With a period well below the delay, every event waits for the slowest of the many
    /// snapshots in flight before it, so the ledger lags by nearly the model's worst case.
    pub report_every_ms: Millis,
}

impl Default for PipelineSpec {
    fn default() -> Self {
        PipelineSpec {
            mode: Pipeline::PerReport,
            nodes: 1,
            report_every_ms: 0,
        }
    }
}

/// A pipeline setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    /// The node count is outside `1 ..= MAX_NODES`.
    #[error("nodes: {0} is out of range: accepted 1 to {MAX_NODES} nodes")]
    Nodes(u64),
    /// The snapshot period is above [`MAX_REPORT_EVERY_MS`].
    #[error("report every: {0} ms is out of range: accepted 0 to {MAX_REPORT_EVERY_MS} ms")]
    ReportEvery(Millis),
    /// A snapshot period was given to a mode that reports per copy event.
    #[error("report every applies only to the in-order pipeline, not '{0}'")]
    PeriodNeedsInOrder(Pipeline),
}

impl PipelineSpec {
    /// Checks the settings' ranges and that they apply to the mode.
    pub fn check(&self) -> Result<(), PipelineError> {
        if !(1..=MAX_NODES).contains(&self.nodes) {
            return Err(PipelineError::Nodes(u64::from(self.nodes)));
        }
        if self.report_every_ms > MAX_REPORT_EVERY_MS {
            return Err(PipelineError::ReportEvery(self.report_every_ms));
        }
        if self.report_every_ms > 0 && self.mode != Pipeline::InOrder {
            return Err(PipelineError::PeriodNeedsInOrder(self.mode));
        }
        Ok(())
    }

    /// Whether, under a fixed delay, every report is delivered at its own `due`, as under
    /// per-report: true for per-report, in-order and per-copy without a snapshot period.
    pub fn per_report_under_fixed_delay(&self) -> bool {
        self.mode != Pipeline::Snapshot && self.report_every_ms == 0
    }

    /// Whether the pipeline is the default, per-report one.
    pub fn is_per_report(&self) -> bool {
        self.mode == Pipeline::PerReport
    }

    /// The node of the `k`-th copy the world creates (from 0): round robin.
    pub fn node_of(&self, k: u64) -> u32 {
        (k % u64::from(self.nodes.max(1))) as u32
    }

    /// The one-line description: `in-order on 3 nodes`, `in-order every 0.5 s on 1 node`.
    pub fn describe(&self) -> String {
        let every = if self.report_every_ms > 0 {
            format!(" every {} s", crate::delay::seconds(self.report_every_ms))
        } else {
            String::new()
        };
        let s = if self.nodes == 1 { "" } else { "s" };
        format!("{}{every} on {} node{s}", self.mode, self.nodes)
    }
}

/// The state of one in-order lane (a node, or a copy): the delivery of its last report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lane {
    /// The second its last report is delivered (before any outage).
    pub last: Time,
}

impl Lane {
    /// The delivery of a report due at `due`: no earlier than the lane's last.
    pub fn send(&mut self, due: Time) -> Time {
        self.last = self.last.max(due);
        self.last
    }
}

/// The state of one node's snapshot pipeline: when the snapshot sent last is delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotLane {
    /// The delivery of the snapshot sent last, if any.
    pub flight: Option<Time>,
}

/// What became of a snapshot sent into a [`SnapshotLane`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// The second it is delivered (before any outage): its own due.
    pub at: Time,
    /// Whether it replaced the snapshot in flight, whose reports now travel with it.
    pub replaced: bool,
}

impl SnapshotLane {
    /// Sends a snapshot made at `made`, due at `due`: it is delivered at `due`, and replaces
    /// the node's last snapshot if that one is still in flight (delivered after `made`).
    ///
    /// Its own due is never earlier than a delivery still to come: the last snapshot is
    /// either replaced, or delivered by `made ≤ due`, and every one before it was delivered
    /// (or replaced) before it was sent. So snapshots keep the node's order, and each is
    /// delivered no later than under `in-order`, where it would wait for the one it replaced.
    pub fn send(&mut self, made: Time, due: Time) -> Sent {
        let replaced = self.flight.is_some_and(|at| at > made);
        self.flight = Some(due);
        Sent { at: due, replaced }
    }
}

/// A node that sends a snapshot every `every` ms, each with its own draw, in order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeriodicLane {
    /// The index of the next snapshot not yet drawn.
    pub next: u64,
    /// The delivery of the last snapshot drawn, in milliseconds.
    pub last_ms: Millis,
}

impl PeriodicLane {
    /// The second a copy event at second `t` reaches the ledger: with the first snapshot at or
    /// after `t` (index `k = ⌈1000 t / every⌉`), delivered at `max over j ≤ k of (j·every + d_j)`
    /// ms, rounded up to the second. `draw(j)` gives snapshot `j`'s delay, in index order. A
    /// snapshot `j` with `j·every + max_ms ≤ k·every` cannot be the largest, and is not drawn.
    pub fn send(
        &mut self,
        t: Time,
        every: Millis,
        max_ms: Millis,
        mut draw: impl FnMut(u64) -> Millis,
    ) -> Time {
        let k = t.saturating_mul(1000).div_ceil(every);
        if self.next <= k {
            let first = k.saturating_sub(max_ms / every);
            for j in self.next.max(first)..=k {
                self.last_ms = self
                    .last_ms
                    .max(j.saturating_mul(every).saturating_add(draw(j)));
            }
            self.next = k + 1;
        }
        self.last_ms.div_ceil(1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_parse_back_and_an_unknown_one_lists_the_accepted() {
        for p in PIPELINES {
            assert_eq!(p.name().parse::<Pipeline>(), Ok(p));
        }
        let e = "fifo".parse::<Pipeline>().unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown report pipeline 'fifo': accepted are per-report, in-order, snapshot, per-copy"
        );
    }

    #[test]
    fn settings_out_of_range_or_out_of_place_are_refused() {
        let ok = PipelineSpec::default();
        assert_eq!(ok.check(), Ok(()));
        let spec = |mode, nodes, every| PipelineSpec {
            mode,
            nodes,
            report_every_ms: every,
        };
        assert_eq!(
            spec(Pipeline::InOrder, 0, 0).check(),
            Err(PipelineError::Nodes(0))
        );
        assert_eq!(
            spec(Pipeline::Snapshot, 2, 500).check(),
            Err(PipelineError::PeriodNeedsInOrder(Pipeline::Snapshot))
        );
        assert_eq!(
            spec(Pipeline::InOrder, 2, MAX_REPORT_EVERY_MS + 1).check(),
            Err(PipelineError::ReportEvery(MAX_REPORT_EVERY_MS + 1))
        );
        assert_eq!(spec(Pipeline::InOrder, MAX_NODES, 500).check(), Ok(()));
    }

    #[test]
    fn copies_go_round_robin() {
        let p = PipelineSpec {
            nodes: 3,
            ..PipelineSpec::default()
        };
        let got: Vec<u32> = (0..7).map(|k| p.node_of(k)).collect();
        assert_eq!(got, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn a_snapshot_in_flight_is_replaced_and_a_delivered_one_is_not() {
        let mut lane = SnapshotLane::default();
        let sent = |at, replaced| Sent { at, replaced };
        // Made at 0, due 20: in flight.
        assert_eq!(lane.send(0, 20), sent(20, false));
        // Made at 5 with a short draw: it replaces the one in flight and goes at its own due.
        assert_eq!(lane.send(5, 9), sent(9, true));
        // Made at 9: the last one is delivered at 9, not after: nothing is replaced.
        assert_eq!(lane.send(9, 9), sent(9, false));
        assert_eq!(lane.send(9, 12), sent(12, false));
    }

    #[test]
    fn a_periodic_node_delivers_with_the_slowest_snapshot_before_it() {
        // Snapshots every 500 ms with draws 9 000, 1 000, 1 000, …: an event at second 1 goes
        // in snapshot 2 (1 000 ms) and waits for snapshot 0, delivered at 9 000 ms.
        let mut lane = PeriodicLane::default();
        let mut draws = [9_000u64, 1_000, 1_000, 1_000].into_iter();
        assert_eq!(lane.send(1, 500, 10_000, |_| draws.next().unwrap()), 9);
        assert_eq!(lane.next, 3);
        // An event in the same snapshot draws nothing more.
        assert_eq!(lane.send(1, 500, 10_000, |_| unreachable!()), 9);
        // Far later, only snapshots that could be the largest are drawn: 10 000 / 500 = 20
        // before snapshot 200, and snapshot 200 itself.
        let mut n = 0;
        assert_eq!(
            lane.send(100, 500, 10_000, |_| {
                n += 1;
                0
            }),
            100
        );
        assert_eq!(n, 21);
    }

    /// Reports in the order they are made: (node, made, due), made never going back.
    fn reports() -> impl Strategy<Value = Vec<(u32, Time, Time)>> {
        prop::collection::vec((0..3u32, 0..4u64, 0..40u64), 0..40).prop_map(|steps| {
            let mut made = 0;
            steps
                .into_iter()
                .map(|(node, gap, delay)| {
                    made += gap;
                    (node, made, made + delay)
                })
                .collect()
        })
    }

    /// In-order, from its definition: the largest due of the node's reports up to this one.
    fn in_order_oracle(reports: &[(u32, Time, Time)]) -> Vec<Time> {
        (0..reports.len())
            .map(|i| {
                let node = reports[i].0;
                reports[..=i]
                    .iter()
                    .filter(|r| r.0 == node)
                    .map(|r| r.2)
                    .max()
                    .expect("the report itself")
            })
            .collect()
    }

    /// Snapshot, from its definition: whether each report is replaced, that is whether the
    /// node's next report is made before it is due.
    fn replaced_oracle(reports: &[(u32, Time, Time)]) -> Vec<bool> {
        (0..reports.len())
            .map(|i| {
                let (node, _, due) = reports[i];
                reports[i + 1..]
                    .iter()
                    .find(|r| r.0 == node)
                    .is_some_and(|next| next.1 < due)
            })
            .collect()
    }

    proptest! {
        #[test]
        fn in_order_lanes_deliver_as_the_definition_says_and_never_out_of_order(
            rs in reports()
        ) {
            let mut lanes = [Lane::default(); 3];
            let got: Vec<Time> = rs.iter().map(|&(n, _, due)| lanes[n as usize].send(due)).collect();
            prop_assert_eq!(&got, &in_order_oracle(&rs));
            for (i, a) in rs.iter().enumerate() {
                for (j, b) in rs.iter().enumerate().skip(i + 1) {
                    if a.0 == b.0 {
                        prop_assert!(got[i] <= got[j], "report {} overtook {}", j, i);
                    }
                }
            }
        }

        #[test]
        fn snapshots_deliver_a_subset_of_in_orders_reports_never_later(rs in reports()) {
            let mut lanes = [SnapshotLane::default(); 3];
            let sent: Vec<Sent> = rs
                .iter()
                .map(|&(n, made, due)| lanes[n as usize].send(made, due))
                .collect();
            // A report's `replaced` tells of the node's previous report.
            let mut replaced = vec![false; rs.len()];
            for (j, s) in sent.iter().enumerate() {
                if s.replaced {
                    let i = (0..j).rev().find(|&i| rs[i].0 == rs[j].0).expect("a previous report");
                    replaced[i] = true;
                }
            }
            prop_assert_eq!(&replaced, &replaced_oracle(&rs));
            let in_order = in_order_oracle(&rs);
            let delivered: Vec<usize> = (0..rs.len()).filter(|&i| !replaced[i]).collect();
            for &i in &delivered {
                prop_assert_eq!(sent[i].at, rs[i].2);
                prop_assert!(sent[i].at <= in_order[i]);
            }
            // Delivered snapshots keep their node's order.
            for (x, &i) in delivered.iter().enumerate() {
                for &j in &delivered[x + 1..] {
                    if rs[i].0 == rs[j].0 {
                        prop_assert!(sent[i].at <= sent[j].at);
                    }
                }
            }
        }

        #[test]
        fn a_periodic_lane_is_the_slowest_snapshot_up_to_the_events_own(
            gaps in prop::collection::vec(0..30u64, 1..20),
            every in prop_oneof![Just(500u64), Just(1_000), Just(700), Just(3_000)],
            table in prop::collection::vec(0..=20_000u64, 400),
        ) {
            let max_ms = 20_000;
            let d = |j: u64| table[(j % table.len() as u64) as usize];
            let mut lane = PeriodicLane::default();
            let mut t = 0;
            for gap in gaps {
                t += gap;
                let k = (t * 1000).div_ceil(every);
                let oracle = (0..=k).map(|j| j * every + d(j)).max().unwrap().div_ceil(1000);
                prop_assert_eq!(lane.send(t, every, max_ms, d), oracle, "event at {}", t);
            }
        }
    }
}
