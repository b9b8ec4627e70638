//! The controller's metrics: its passes per workload, leadership, store calls and watch cache.
//! Counted by its driver ([`crate::controller::run_controller`]) from the store calls it
//! carries out and the passes the host reports ([`crate::controller::PassObservation`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::cache::CacheStats;
use crate::controller::PassObservation;

/// Buckets of a pass's duration, in seconds: 1 ms to 60 s. 10, 20 and 50 ms are among them,
/// the bounds the scale benchmark checks (`scripts/bench-scale.sh`), and 30 and 60 s, since a
/// pass that creates 10,000 copies on etcd commits about 250 transactions one after another.
const PASS_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A workload.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkloadLabel {
    /// The workload's name.
    pub workload: String,
}

/// A workload and how its pass ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The workload's name.
    pub workload: String,
    /// `wrote`, `unchanged`, `partial` (some of its transactions committed), `failed`, or
    /// `skipped` (not run: provably a no-op, docs/runtime.md "Idle rounds").
    pub outcome: String,
}

/// A workload and why it is idle.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IdleLabels {
    /// The workload's name.
    pub workload: String,
    /// The idle reason as the loop record stores it (`backing_off`, `no_live_node`, …).
    pub reason: String,
}

/// A store call: its kind and result.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// `read`, `commit`, `revision`, `grant`, `keep_alive`, `revoke`.
    pub kind: String,
    /// `ok`, `conflict` or `error`.
    pub result: String,
}

fn histogram_of_passes() -> Histogram {
    Histogram::new(PASS_BUCKETS)
}

fn histogram_of_calls() -> Histogram {
    Histogram::new(super::STORE_BUCKETS)
}

/// The controller's metrics (names in `docs/runtime.md`, "Metrics").
#[derive(Debug)]
pub struct ControllerMetrics {
    pass_duration: Family<WorkloadLabel, Histogram, fn() -> Histogram>,
    passes: Family<OutcomeLabels, Counter>,
    rounds_skipped: Family<WorkloadLabel, Counter>,
    created: Family<WorkloadLabel, Counter>,
    deleted: Family<WorkloadLabel, Counter>,
    conflicts: Family<WorkloadLabel, Counter>,
    held_back: Family<WorkloadLabel, Gauge>,
    idle: Family<IdleLabels, Counter>,
    leader: Gauge,
    fence: Gauge,
    store_calls: Family<CallLabels, Histogram, fn() -> Histogram>,
    cache_full_reads: Counter,
    cache_changes: Counter,
    cache_served: Counter,
    cache_passed_through: Counter,
    cache_revision: Gauge,
    cache_behind: Gauge,
    /// The watch cache's figures as last seen, to count their increase (they restart at 0 with
    /// each leadership).
    cache_seen: std::sync::Mutex<CacheStats>,
}

impl ControllerMetrics {
    /// Registers every controller metric in `r`.
    pub(super) fn register(r: &mut Registry) -> Self {
        let m = Self {
            pass_duration: Family::new_with_constructor(histogram_of_passes),
            passes: Family::default(),
            rounds_skipped: Family::default(),
            created: Family::default(),
            deleted: Family::default(),
            conflicts: Family::default(),
            held_back: Family::default(),
            idle: Family::default(),
            leader: Gauge::default(),
            fence: Gauge::default(),
            store_calls: Family::new_with_constructor(histogram_of_calls),
            cache_full_reads: Counter::default(),
            cache_changes: Counter::default(),
            cache_served: Counter::default(),
            cache_passed_through: Counter::default(),
            cache_revision: Gauge::default(),
            cache_behind: Gauge::default(),
            cache_seen: Default::default(),
        };
        let p = "setpoint_controller_";
        r.register(
            format!("{p}pass_duration_seconds"),
            "Time from a pass's read to its last commit (or its end), per workload",
            m.pass_duration.clone(),
        );
        r.register(
            format!("{p}passes"),
            "Passes ended, per workload and outcome",
            m.passes.clone(),
        );
        r.register(
            format!("{p}rounds_skipped"),
            "Rounds of the loop's grid skipped because a pass overran them",
            m.rounds_skipped.clone(),
        );
        r.register(
            format!("{p}copies_created"),
            "Copies a pass created (assignments written)",
            m.created.clone(),
        );
        r.register(
            format!("{p}copies_deleted"),
            "Copies whose assignment a pass's delete command removed",
            m.deleted.clone(),
        );
        r.register(
            format!("{p}pass_conflicts"),
            "Pass attempts lost to a compare-and-set conflict and rerun on a fresh read",
            m.conflicts.clone(),
        );
        r.register(
            format!("{p}backoff_held_copies"),
            "Copies the last pass wanted but crash-loop backoff held back",
            m.held_back.clone(),
        );
        r.register(
            format!("{p}idle_stretches"),
            "Idle stretches begun, per workload and reason",
            m.idle.clone(),
        );
        r.register(
            format!("{p}leader"),
            "1 while this controller holds the leader lease, else 0",
            m.leader.clone(),
        );
        r.register(
            format!("{p}fence_token"),
            "The fencing token of the leadership held (the revision of /leader when taken), 0 when not leading",
            m.fence.clone(),
        );
        r.register(
            format!("{p}store_request_duration_seconds"),
            "Store calls of the controller by kind and result",
            m.store_calls.clone(),
        );
        r.register(
            format!("{p}watch_cache_full_reads"),
            "Full reads of the watch cache: one when a leadership starts, one per resync",
            m.cache_full_reads.clone(),
        );
        r.register(
            format!("{p}watch_cache_changes"),
            "Key changes the watch cache's watch delivered",
            m.cache_changes.clone(),
        );
        r.register(
            format!("{p}watch_cache_served_reads"),
            "Pass reads served from the watch cache",
            m.cache_served.clone(),
        );
        r.register(
            format!("{p}watch_cache_passed_through_reads"),
            "Pass reads sent to the store (the cache not live, behind or not covering)",
            m.cache_passed_through.clone(),
        );
        r.register(
            format!("{p}watch_cache_revision"),
            "The store revision the leader's watch cache is at (compare etcd's current revision)",
            m.cache_revision.clone(),
        );
        r.register(
            format!("{p}watch_cache_behind_revisions"),
            "Revisions the watch cache is behind this controller's own newest write or conflict",
            m.cache_behind.clone(),
        );
        m
    }

    /// One store call of `kind` that took `seconds` and ended as `result`.
    pub fn store_call(&self, kind: &str, result: &str, seconds: f64) {
        self.store_calls
            .get_or_create(&CallLabels {
                kind: kind.into(),
                result: result.into(),
            })
            .observe(seconds);
    }

    /// The host's leadership now: its fencing token, if it leads.
    pub fn leadership(&self, fence: Option<u64>) {
        self.leader.set(i64::from(fence.is_some()));
        self.fence
            .set(fence.map_or(0, |f| i64::try_from(f).unwrap_or(i64::MAX)));
    }

    /// The leader's watch cache figures now (they restart with each leadership).
    pub fn cache(&self, now: &CacheStats) {
        let Ok(mut seen) = self.cache_seen.lock() else {
            return;
        };
        let restarted = now.full_reads < seen.full_reads;
        let delta = |n: u64, s: u64| if restarted { n } else { n.saturating_sub(s) };
        self.cache_full_reads
            .inc_by(delta(now.full_reads, seen.full_reads));
        self.cache_changes.inc_by(delta(now.changes, seen.changes));
        self.cache_served.inc_by(delta(now.served, seen.served));
        self.cache_passed_through
            .inc_by(delta(now.passed_through, seen.passed_through));
        *seen = *now;
    }

    /// The leader's watch cache position ([`crate::controller::Host::cache_position`]); both
    /// gauges 0 when not leading or without a cache.
    pub fn cache_position(&self, position: Option<(u64, u64)>) {
        let (at, behind) = position.unwrap_or((0, 0));
        self.cache_revision
            .set(i64::try_from(at).unwrap_or(i64::MAX));
        self.cache_behind
            .set(i64::try_from(behind).unwrap_or(i64::MAX));
    }

    /// A pass the host reports.
    pub fn pass(&self, p: &PassObservation) {
        let w = WorkloadLabel {
            workload: p.workload.clone(),
        };
        if p.skipped_rounds > 0 {
            self.rounds_skipped
                .get_or_create(&w)
                .inc_by(p.skipped_rounds);
        }
        let Some(outcome) = p.outcome else { return };
        // A skipped pass took no time: it would only pull the latency down.
        if outcome != "skipped" {
            self.pass_duration
                .get_or_create(&w)
                .observe(p.duration_ms as f64 / 1000.0);
        }
        self.passes
            .get_or_create(&OutcomeLabels {
                workload: p.workload.clone(),
                outcome: outcome.into(),
            })
            .inc();
        self.created.get_or_create(&w).inc_by(p.created);
        self.deleted.get_or_create(&w).inc_by(p.deleted);
        self.conflicts.get_or_create(&w).inc_by(p.conflicts);
        self.held_back
            .get_or_create(&w)
            .set(i64::try_from(p.held_back).unwrap_or(i64::MAX));
        if let Some(reason) = &p.idle {
            self.idle
                .get_or_create(&IdleLabels {
                    workload: p.workload.clone(),
                    reason: reason.clone(),
                })
                .inc();
        }
    }
}
