//! The controller process: the tokio driver of the controller host, [`crate::host::Host`].
//!
//! The host machine does the work, without I/O: leader election under a lease with a fencing
//! token, one reconcile loop per workload on the grid of its period, garbage collection,
//! event-log compaction, and on a store that pushes changes the watch cache. Its module
//! documentation states the timing rules. [`run_controller`] only steps it, carries out its
//! store requests on blocking threads, follows its watches, sleeps until it asks to be woken,
//! and prints its log lines. The same machine runs on virtual time in the chaos world.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use setpoint_core::{Controller, ControllerKind, Expectations, ExpectationsConfig};
use tokio::sync::mpsc;

use crate::host::{Host, HostConfig, HostInput, HostOutput, Purpose};
use crate::machine::{carry_out, follow_watch, Followed, Replied, ReqId, StoreRequest};
use crate::rt::{log, Shutdown};
use crate::store::{Store, StoreError};

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
}

impl ControllerConfig {
    /// A controller named `holder`: lease TTL 5s, no wake-up on change,
    /// poll every 100ms.
    pub fn new(holder: impl Into<String>) -> Self {
        Self {
            holder: holder.into(),
            lease_ttl: Duration::from_secs(5),
            wake_on_change: false,
            poll: Duration::from_millis(100),
            event_retention: Duration::from_millis(crate::retention::DEFAULT_RETENTION_MS),
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

/// Runs a controller until `shutdown` fires. While it is not the leader it only waits for the
/// lease; on shutdown it gives the lease up so that another controller takes over at once.
///
/// This is the tokio driver of the I/O-free [`Host`]: it steps the machine, carries out its
/// store requests on blocking threads (several at once; their replies come back through a
/// channel, in whatever order they finish), follows its watches on threads of their own, sleeps
/// until the machine's [`Wake`](crate::machine::Wake), and prints its log lines.
pub async fn run_controller(
    store: Arc<dyn Store>,
    cfg: ControllerConfig,
    mut shutdown: Shutdown,
) -> Result<(), StoreError> {
    let mut host_cfg = HostConfig::new(cfg);
    host_cfg.watch_cache = store.watches();
    let started = Instant::now();
    let clock = move || started.elapsed().as_millis() as u64;
    let mut host = Host::new(host_cfg, clock());
    let (tx, mut rx) = mpsc::unbounded_channel::<HostInput>();
    let mut watches: BTreeMap<ReqId, Arc<AtomicBool>> = BTreeMap::new();
    let mut input = HostInput::Tick;
    let mut asked_to_stop = false;
    loop {
        let mut wake = None;
        for out in host.step(clock(), input) {
            match out {
                HostOutput::Request {
                    id,
                    request,
                    purpose,
                } => carry_out_async(&store, &tx, &mut watches, id, request, purpose),
                HostOutput::Log { who, line } => log(&who, line),
                HostOutput::Wake(w) => wake = Some(w.0),
                HostOutput::Stopped(result) => {
                    for stop in watches.values() {
                        stop.store(true, Ordering::SeqCst);
                    }
                    return result;
                }
            }
        }
        let sleep = Duration::from_millis(wake.map_or(1_000, |w| w.saturating_sub(clock())));
        input = tokio::select! {
            _ = shutdown.wait(), if !asked_to_stop => {
                asked_to_stop = true;
                HostInput::Shutdown
            }
            Some(i) = rx.recv() => i,
            _ = tokio::time::sleep(sleep) => HostInput::Tick,
        };
    }
}

/// Starts one request of the machine: a one-shot call on a blocking thread, a watch on a thread
/// of its own, or the end of a watch.
fn carry_out_async(
    store: &Arc<dyn Store>,
    tx: &mpsc::UnboundedSender<HostInput>,
    watches: &mut BTreeMap<ReqId, Arc<AtomicBool>>,
    id: ReqId,
    request: StoreRequest,
    purpose: Purpose,
) {
    match request {
        StoreRequest::CancelWatch(watch) => {
            if let Some(stop) = watches.remove(&watch) {
                stop.store(true, Ordering::SeqCst);
            }
        }
        StoreRequest::Watch { prefixes, after } => {
            let stop = Arc::new(AtomicBool::new(false));
            watches.insert(id, Arc::clone(&stop));
            let (store, tx) = (Arc::clone(store), tx.clone());
            std::thread::Builder::new()
                .name("setpoint-watch".into())
                .spawn(move || {
                    follow_watch(&*store, id, &prefixes, after, &stop, |f| {
                        tx.send(match f {
                            Followed::Replied(r) => HostInput::Replied(r),
                            Followed::Delivery(d) => HostInput::Watch(d),
                        })
                        .is_ok()
                    })
                })
                .expect("a thread can be started");
        }
        request => {
            let (store, tx) = (Arc::clone(store), tx.clone());
            tokio::task::spawn_blocking(move || {
                let fail = match (&request, purpose) {
                    (StoreRequest::Commit(_), Purpose::Pass) => {
                        Some(("pass-before-commit", "pass-after-commit"))
                    }
                    (StoreRequest::Commit(_), Purpose::Gc) => {
                        Some(("gc-before-commit", "gc-after-commit"))
                    }
                    _ => None,
                };
                if let Some((before, _)) = fail {
                    crate::failpoint::hit(before);
                }
                let result = carry_out(&*store, &request);
                if let (Some((_, after)), Ok(_)) = (fail, &result) {
                    crate::failpoint::hit(after);
                }
                // The machine may have stopped meanwhile: then nobody listens.
                let _ = tx.send(HostInput::Replied(Replied { id, result }));
            });
        }
    }
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

#[cfg(test)]
mod runtime_controller_tests {
    use super::*;

    #[test]
    fn expectations_ttl_is_scaled_to_milliseconds() {
        match runtime_controller(ControllerKind::Expectations) {
            Controller::Expectations(e) => assert_eq!(e.config().ttl, 300_000),
            other => panic!("{other:?}"),
        }
    }
}
