//! How a controller runs: [`ControllerConfig`] (what `setpoint controller` takes) and
//! [`HostConfig`] (what the I/O-free [`Host`](super::Host) takes on top of it).
//!
//! These sit apart from both the machine and its driver so that each imports them and neither
//! imports the other's file for them.

use std::time::Duration;

/// The default deadline of a store request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// `d` in whole milliseconds, without `Duration::as_millis`'s 128-bit division (the host
/// reads its durations at every step: 3 % of a chaos run went to that division).
pub(super) fn millis(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000)
        .saturating_add(u64::from(d.subsec_millis()))
}

/// How often an idle loop writes its round anyway: 5 minutes, as the agents' report resync.
pub const DEFAULT_ROUND_RESYNC: Duration = Duration::from_secs(300);

/// How a controller runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerConfig {
    /// Who this controller is, as the leader record shows it.
    pub holder: String,
    /// The leader lease's time to live: how long a dead leader blocks a takeover.
    ///
    /// ## Warning
    /// A TTL shorter than a slow store write lets the lease lapse under a live leader, which
    /// then stops acting until it wins the lease again.
    pub lease_ttl: Duration,
    /// Also run a workload's pass as soon as its declaration changes, not only every period.
    pub wake_on_change: bool,
    /// How often the store is polled for leadership and declaration changes.
    pub poll: Duration,
    /// Events older than this are removed from the event log ([`crate::retention`]).
    pub event_retention: Duration,
    /// An idle round that shows what its loop's last round showed is not written, but one is
    /// written at least this long after the loop's last written round (a steady store then
    /// sees one small write per loop this often, and a pass reading a stale cache still meets
    /// a conflict then). Zero writes every round. Default [`DEFAULT_ROUND_RESYNC`].
    pub round_resync: Duration,
    /// Skip a pass that is provably a no-op: its loop's last pass wrote nothing, decided
    /// nothing by the clock, and read the revision the watch cache is still at, and its round
    /// may be left out (`controller/rounds.rs`). On by default.
    pub skip_quiet_passes: bool,
    /// Where the driver counts its metrics ([`crate::metrics`]); none by default.
    pub metrics: crate::metrics::MetricsSink,
    /// How often the store's history is compacted, keeping one interval of it
    /// ([`super::HistorySchedule`]); zero never compacts. Default [`DEFAULT_HISTORY_COMPACTION`].
    pub history_compaction: Duration,
}

/// The default interval of [`ControllerConfig::history_compaction`]: one minute. The
/// Kubernetes API server's `--etcd-compaction-interval` is five, but its writes are one small
/// object per pod; an agent's report lists all its node's copies and is rewritten whole, and a
/// creation of 100,000 copies on 100 nodes filled a stock etcd's 2 GiB within five minutes
/// (docs/performance-runtime.md). A watch that lags by more than the history kept reads afresh.
pub const DEFAULT_HISTORY_COMPACTION: Duration = Duration::from_secs(60);

impl ControllerConfig {
    /// A controller named `holder`: lease TTL 5s, no wake-up on change,
    /// poll every 100ms, an idle round written every 5 minutes.
    pub fn new(holder: impl Into<String>) -> Self {
        Self {
            holder: holder.into(),
            lease_ttl: Duration::from_secs(5),
            wake_on_change: false,
            poll: Duration::from_millis(100),
            event_retention: Duration::from_millis(crate::retention::DEFAULT_RETENTION_MS),
            round_resync: DEFAULT_ROUND_RESYNC,
            skip_quiet_passes: true,
            metrics: Default::default(),
            history_compaction: DEFAULT_HISTORY_COMPACTION,
        }
    }
}

/// A name for this controller process: `controller/{pid}/{nanoseconds}`.
pub fn default_holder() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("controller/{}/{nanos}", std::process::id())
}

/// How a [`Host`](super::Host) runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostConfig {
    /// Who it is, its lease, its poll, its retention: what the tokio controller took.
    pub controller: ControllerConfig,
    /// Whether the store pushes changes ([`crate::store::Store::watches`]): then the leader
    /// keeps a watch cache of the runtime's prefixes and serves passes from it.
    pub watch_cache: bool,
    /// How long a store request may stay unanswered before it counts as failed.
    pub request_timeout: Duration,
    /// Injected bug, for the chaos checker only (no CLI flag or file sets it): the pass and
    /// garbage-collection transactions do not compare `/leader`.
    #[doc(hidden)]
    pub bug_fencing_off: bool,
    /// Injected bug, for the chaos checker only: garbage collection judges ownership by the
    /// workload's name alone, not its uid.
    #[doc(hidden)]
    pub bug_gc_ignores_owner_uid: bool,
}

impl HostConfig {
    /// A host running `controller`, without a watch cache, with the default request deadline.
    pub fn new(controller: ControllerConfig) -> Self {
        Self {
            controller,
            watch_cache: false,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            bug_fencing_off: false,
            bug_gc_ignores_owner_uid: false,
        }
    }

    /// The poll, in milliseconds, at least one (a zero poll would step the machine forever at
    /// one instant).
    pub(crate) fn poll_ms(&self) -> u64 {
        millis(self.controller.poll).max(1)
    }

    /// The leader lease's time to live, in milliseconds.
    pub(crate) fn ttl_ms(&self) -> u64 {
        millis(self.controller.lease_ttl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_poll_counts_as_one_millisecond() {
        let mut c = ControllerConfig::new("c");
        c.poll = Duration::ZERO;
        assert_eq!(HostConfig::new(c.clone()).poll_ms(), 1);
        c.poll = Duration::from_millis(250);
        assert_eq!(HostConfig::new(c).poll_ms(), 250);
    }

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let c = ControllerConfig::new("c1");
        assert_eq!(c.holder, "c1");
        assert_eq!(c.lease_ttl, Duration::from_secs(5));
        assert_eq!(c.poll, Duration::from_millis(100));
        assert!(!c.wake_on_change);
        let h = HostConfig::new(c);
        assert_eq!(h.request_timeout, DEFAULT_REQUEST_TIMEOUT);
        assert_eq!(h.ttl_ms(), 5_000);
        assert!(!h.watch_cache && !h.bug_fencing_off && !h.bug_gc_ignores_owner_uid);
    }
}
