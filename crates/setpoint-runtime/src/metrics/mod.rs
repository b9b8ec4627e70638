//! The runtime's Prometheus metrics: one [`Metrics`] per process, holding the controller's
//! ([`ControllerMetrics`]) and the agents' ([`AgentMetrics`], every series labelled by `node`,
//! so that `setpoint up` serves its agents side by side), and their `/metrics` endpoint
//! ([`serve()`]).
//!
//! The machines (the controller host, the agent core) do no I/O and know nothing of this: their
//! drivers count what passes through them (store calls and their latency, starts, exits,
//! reports written, the state file's copies) and read what the machines keep
//! ([`crate::controller::Host::take_passes`], [`crate::agent::AgentCore::fencings`]). Every
//! metric is listed with its type, labels and meaning in `docs/runtime.md`, "Metrics".
//!
//! The endpoint serves these metrics only: no environment, no command lines, no store
//! contents beyond workload and node names.
//!
//! # Layout
//! - [`controller`]: the controller's metrics.
//! - [`agent`]: an agent's metrics.
//! - [`serve()`]: the HTTP endpoint (hyper), and [`bind`] for `--metrics-addr`.

pub mod agent;
pub mod controller;
pub mod serve;

use std::sync::Arc;

use prometheus_client::registry::Registry;

pub use agent::AgentMetrics;
pub use controller::ControllerMetrics;
pub use serve::{bind, parse_addr, serve, MetricsAddrError};

/// Buckets of store-call latency, in seconds: 0.5 ms to 10 s.
pub(crate) const STORE_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Every metric of one process, and the registry that encodes them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// The controller's (all zero in a process without a controller).
    pub controller: ControllerMetrics,
    /// The agents' (no series in a process without an agent).
    pub agent: AgentMetrics,
}

impl Metrics {
    /// Every metric registered, none observed yet.
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::default();
        let controller = ControllerMetrics::register(&mut registry);
        let agent = AgentMetrics::register(&mut registry);
        Arc::new(Self {
            registry,
            controller,
            agent,
        })
    }

    /// The Prometheus text exposition (OpenMetrics 1.0 text, ending in `# EOF`).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Where a driver counts: the process's [`Metrics`], or nowhere (no `--metrics-addr`).
#[derive(Clone, Debug, Default)]
pub struct MetricsSink(Option<Arc<Metrics>>);

impl MetricsSink {
    /// Counting into `m`.
    pub fn to(m: &Arc<Metrics>) -> Self {
        Self(Some(Arc::clone(m)))
    }

    /// The metrics, if counted.
    pub fn get(&self) -> Option<&Metrics> {
        self.0.as_deref()
    }
}

impl PartialEq for MetricsSink {
    /// The same metrics (or none on both sides).
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl Eq for MetricsSink {}

/// The `kind` label of a store request.
pub(crate) fn request_kind(r: &crate::machine::StoreRequest) -> &'static str {
    use crate::machine::StoreRequest as R;
    match r {
        R::Read { .. } => "read",
        R::Commit(_) => "commit",
        R::Revision => "revision",
        R::Grant { .. } => "grant",
        R::KeepAlive(_) => "keep_alive",
        R::Revoke(_) => "revoke",
        R::Watch { .. } => "watch",
        R::CancelWatch(_) => "cancel_watch",
    }
}

/// The `result` label of a store reply: `ok`, `conflict` (a compare-and-set lost) or `error`.
pub(crate) fn result_label(r: &crate::machine::StoreResult) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) if e.is_conflict() => "conflict",
        Err(_) => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinks_are_equal_when_they_count_into_the_same_metrics() {
        let (a, b) = (Metrics::new(), Metrics::new());
        assert_eq!(MetricsSink::to(&a), MetricsSink::to(&a));
        assert_ne!(MetricsSink::to(&a), MetricsSink::to(&b));
        assert_ne!(MetricsSink::to(&a), MetricsSink::default());
        assert_eq!(MetricsSink::default(), MetricsSink::default());
    }
}
