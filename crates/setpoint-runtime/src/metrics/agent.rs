//! An agent's metrics, every series labelled by its `node`. Counted by the agent's driver
//! ([`crate::agent::run_agent`]) from what passes through it: store calls, starts, exits, the
//! reports it writes, the state file's copies, the logs it tends.

use std::collections::{BTreeMap, BTreeSet};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::model::{NodeReport, Phase};
use crate::store::Revision;

/// Buckets of the report lag, in seconds: 5 ms to 30 s, fine where report delays usually lie
/// (tens to hundreds of milliseconds), so that `setpoint calibrate` fits them closely.
pub const REPORT_LAG_BUCKETS: [f64; 22] = [
    0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5,
    0.75, 1.0, 2.0, 5.0, 10.0, 30.0,
];

/// A node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabel {
    /// The node's name.
    pub node: String,
}

/// A node and a label value of one more dimension.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeState {
    /// The node's name.
    pub node: String,
    /// The copy's phase: `starting`, `running`, `exited`.
    pub state: String,
}

/// A node and why a copy ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeCause {
    /// The node's name.
    pub node: String,
    /// `exit_zero`, `exit_nonzero`, `signal`, `vanished` (an adopted process gone) or `other`.
    pub cause: String,
}

/// A node and a result.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeResult {
    /// The node's name.
    pub node: String,
    /// `ok`, `conflict` or `error`.
    pub result: String,
}

/// A node's store call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeCall {
    /// The node's name.
    pub node: String,
    /// `read`, `commit`, `grant`, `keep_alive`, `revoke`, `revision`.
    pub kind: String,
    /// `ok`, `conflict` or `error`.
    pub result: String,
}

fn lag_histogram() -> Histogram {
    Histogram::new(REPORT_LAG_BUCKETS)
}

fn call_histogram() -> Histogram {
    Histogram::new(super::STORE_BUCKETS)
}

/// The agents' metrics (names in `docs/runtime.md`, "Metrics").
#[derive(Debug)]
pub struct AgentMetrics {
    copies: Family<NodeState, Gauge>,
    starts: Family<NodeLabel, Counter>,
    start_failures: Family<NodeLabel, Counter>,
    exits: Family<NodeCause, Counter>,
    report_lag: Family<NodeLabel, Histogram, fn() -> Histogram>,
    reports: Family<NodeResult, Counter>,
    renewals: Family<NodeResult, Counter>,
    renewal_latency: Family<NodeLabel, Histogram, fn() -> Histogram>,
    fencings: Family<NodeLabel, Counter>,
    log_bytes: Family<NodeLabel, Gauge>,
    store_calls: Family<NodeCall, Histogram, fn() -> Histogram>,
}

impl AgentMetrics {
    /// Registers every agent metric in `r`.
    pub(super) fn register(r: &mut Registry) -> Self {
        let m = Self {
            copies: Family::default(),
            starts: Family::default(),
            start_failures: Family::default(),
            exits: Family::default(),
            report_lag: Family::new_with_constructor(lag_histogram),
            reports: Family::default(),
            renewals: Family::default(),
            renewal_latency: Family::new_with_constructor(call_histogram),
            fencings: Family::default(),
            log_bytes: Family::default(),
            store_calls: Family::new_with_constructor(call_histogram),
        };
        let p = "setpoint_agent_";
        r.register(
            format!("{p}copies"),
            "Copies the agent's state file records, by phase",
            m.copies.clone(),
        );
        r.register(
            format!("{p}starts"),
            "Copies started as processes",
            m.starts.clone(),
        );
        r.register(
            format!("{p}start_failures"),
            "Copies whose process could not be started",
            m.start_failures.clone(),
        );
        r.register(
            format!("{p}exits"),
            "Copy processes seen to end, by cause",
            m.exits.clone(),
        );
        r.register(
            format!("{p}report_lag_seconds"),
            "Time from a copy becoming ready to the first report showing it ready being written (ready to ledger)",
            m.report_lag.clone(),
        );
        r.register(
            format!("{p}reports"),
            "Reports written to the store, by result",
            m.reports.clone(),
        );
        r.register(
            format!("{p}lease_renewals"),
            "Renewals of the node lease, by result",
            m.renewals.clone(),
        );
        r.register(
            format!("{p}lease_renewal_duration_seconds"),
            "Time a renewal of the node lease took",
            m.renewal_latency.clone(),
        );
        r.register(
            format!("{p}fencings"),
            "Times the agent fenced itself (stopped every copy) for want of a lease renewal",
            m.fencings.clone(),
        );
        r.register(
            format!("{p}log_bytes"),
            "Bytes in the logs of the copies running on the node (current files), as last tended",
            m.log_bytes.clone(),
        );
        r.register(
            format!("{p}store_request_duration_seconds"),
            "Store calls of the agent by kind and result",
            m.store_calls.clone(),
        );
        m
    }

    fn node(node: &str) -> NodeLabel {
        NodeLabel { node: node.into() }
    }

    /// Zero series for `node`, so that a scrape shows the agent before anything happened.
    pub fn announce(&self, node: &str) {
        let n = Self::node(node);
        let _ = self.starts.get_or_create(&n);
        let _ = self.fencings.get_or_create(&n);
        let _ = self.report_lag.get_or_create(&n);
        self.copies_now(node, &[]);
    }

    /// One store call of `node`.
    pub fn store_call(&self, node: &str, kind: &str, result: &str, seconds: f64) {
        self.store_calls
            .get_or_create(&NodeCall {
                node: node.into(),
                kind: kind.into(),
                result: result.into(),
            })
            .observe(seconds);
        let r = NodeResult {
            node: node.into(),
            result: result.into(),
        };
        if kind == "keep_alive" {
            self.renewals.get_or_create(&r).inc();
            self.renewal_latency
                .get_or_create(&Self::node(node))
                .observe(seconds);
        }
    }

    /// A report written (or not).
    pub fn report_written(&self, node: &str, result: &str) {
        self.reports
            .get_or_create(&NodeResult {
                node: node.into(),
                result: result.into(),
            })
            .inc();
    }

    /// The phases of the copies the state file records now.
    pub fn copies_now(&self, node: &str, phases: &[Phase]) {
        for (phase, name) in [
            (Phase::Starting, "starting"),
            (Phase::Running, "running"),
            (Phase::Exited, "exited"),
        ] {
            let n = phases.iter().filter(|p| **p == phase).count();
            self.copies
                .get_or_create(&NodeState {
                    node: node.into(),
                    state: name.into(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// A copy started (`ok`) or failed to start.
    pub fn started(&self, node: &str, ok: bool) {
        let n = Self::node(node);
        if ok {
            self.starts.get_or_create(&n).inc();
        } else {
            self.start_failures.get_or_create(&n).inc();
        }
    }

    /// A copy's process ended, for `cause`.
    pub fn exited(&self, node: &str, cause: &str) {
        self.exits
            .get_or_create(&NodeCause {
                node: node.into(),
                cause: cause.into(),
            })
            .inc();
    }

    /// The agent fenced itself `n` more times.
    pub fn fenced(&self, node: &str, n: u64) {
        if n > 0 {
            self.fencings.get_or_create(&Self::node(node)).inc_by(n);
        }
    }

    /// The bytes in the running copies' logs now.
    pub fn log_bytes(&self, node: &str, bytes: u64) {
        self.log_bytes
            .get_or_create(&Self::node(node))
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// A report lag of `seconds` for `node`.
    pub fn report_lag(&self, node: &str, seconds: f64) {
        self.report_lag
            .get_or_create(&Self::node(node))
            .observe(seconds);
    }
}

/// The copies already counted in the report lag: each copy's readiness is counted once, when
/// the first report that shows it ready is written.
#[derive(Debug, Default)]
pub struct LagTracker {
    /// (copy, incarnation) of copies counted, and their ready time.
    counted: BTreeMap<(String, Revision), u64>,
}

impl LagTracker {
    /// The lags, in milliseconds, of the copies that `report` (written at `written_ms`) shows
    /// ready for the first time; forgets the copies it no longer holds.
    pub fn written(&mut self, report: &NodeReport, written_ms: u64) -> Vec<u64> {
        let mut lags = Vec::new();
        let mut held = BTreeSet::new();
        for c in &report.copies {
            let key = (c.copy.clone(), c.incarnation);
            held.insert(key.clone());
            if let Some(ready) = c.ready_ms {
                if c.exited_ms.is_none() && !self.counted.contains_key(&key) {
                    lags.push(written_ms.saturating_sub(ready));
                    self.counted.insert(key, ready);
                }
            }
        }
        self.counted.retain(|k, _| held.contains(k));
        lags
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CopyReport;

    fn copy(name: &str, ready: Option<u64>) -> CopyReport {
        CopyReport {
            copy: name.into(),
            workload: "w".into(),
            owner_uid: 1,
            n: 1,
            incarnation: 7,
            phase: Phase::Running,
            pid: 1,
            start_ticks: 1,
            started_ms: 0,
            ready_ms: ready,
            exited_ms: None,
            exit: None,
            stopping: false,
            killed: false,
        }
    }

    #[test]
    fn a_copys_readiness_counts_once_from_its_ready_time_to_the_write() {
        let mut t = LagTracker::default();
        let mut r = NodeReport {
            node: "n".into(),
            observed_ms: 0,
            reported_ms: 0,
            agent_pid: 1,
            copies: vec![copy("w-1", None)],
            synced_revision: 0,
        };
        assert!(t.written(&r, 100).is_empty(), "not ready yet");
        r.copies = vec![copy("w-1", Some(150)), copy("w-2", Some(180))];
        assert_eq!(t.written(&r, 400), [250, 220]);
        assert!(t.written(&r, 1_400).is_empty(), "counted once");
        r.copies.remove(0);
        assert!(t.written(&r, 1_500).is_empty());
        let mut again = copy("w-1", Some(2_000));
        again.incarnation = 9;
        r.copies.push(again);
        assert_eq!(
            t.written(&r, 2_100),
            [100],
            "a new incarnation counts again"
        );
    }

    #[test]
    fn the_lag_histogram_is_served_in_seconds_with_its_node() {
        let m = super::super::Metrics::new();
        m.agent.report_lag("node-1", 0.12);
        let text = m.encode();
        assert!(
            text.contains("# TYPE setpoint_agent_report_lag_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains(
                "setpoint_agent_report_lag_seconds_bucket{le=\"0.125\",node=\"node-1\"} 1"
            ),
            "{text}"
        );
    }
}
