//! The controller process: the tokio driver of the controller host, [`Host`].
//!
//! The host machine does the work, without I/O: leader election under a lease with a fencing
//! token, one reconcile loop per workload on the grid of its period, garbage collection,
//! event-log compaction, and on a store that pushes changes the watch cache. Its module
//! documentation and its parts' state the timing rules. [`run_controller`] only steps it, carries out its
//! store requests on blocking threads, follows its watches, sleeps until it asks to be woken,
//! and prints its log lines. The same machine runs on virtual time in the chaos world.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::config::{ControllerConfig, HostConfig};
use super::history::HistorySchedule;
use super::host::{Host, HostInput, HostOutput, Purpose};
use crate::machine::{carry_out_until, follow_watch, Followed, Replied, ReqId, StoreRequest};
use crate::rt::Shutdown;
use crate::store::{Store, StoreError};

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
    let metrics = cfg.metrics.clone();
    let compaction = compact_history(&store, cfg.history_compaction, cfg.holder.clone());
    let mut host_cfg = HostConfig::new(cfg);
    host_cfg.watch_cache = store.watches();
    let started = Instant::now();
    let clock = move || started.elapsed().as_millis() as u64;
    let request_timeout = host_cfg.request_timeout;
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
                } => {
                    let until = Instant::now() + request_timeout;
                    let call = Call {
                        id,
                        request,
                        purpose,
                        until,
                    };
                    carry_out_async(&store, &tx, &mut watches, call, &metrics)
                }
                HostOutput::Log { who, line } => {
                    // The fencing token of the leadership the line was said under, if any.
                    let fields = crate::rt::Fields {
                        fence: host.fence(),
                        ..Default::default()
                    };
                    crate::rt::log_at(crate::logging::level_of(&line), &who, &fields, line);
                }
                HostOutput::Wake(w) => wake = Some(w.0),
                HostOutput::Stopped(result) => {
                    for stop in watches.values() {
                        stop.store(true, Ordering::SeqCst);
                    }
                    if let Some(c) = &compaction {
                        c.abort();
                    }
                    return result;
                }
            }
        }
        if let Some(m) = metrics.get() {
            count(&m.controller, &mut host);
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

/// Compacts the store's history on its schedule ([`HistorySchedule`]) until the returned task
/// is aborted; `None` (nothing started) when compaction is off or the store keeps no history
/// (the embedded stores, which do not watch). A failed read of the revision is tried again ten
/// seconds later (the host already says the store does not answer); a failed compaction is
/// logged and tried again at the next tick.
fn compact_history(
    store: &Arc<dyn Store>,
    interval: Duration,
    who: String,
) -> Option<tokio::task::JoinHandle<()>> {
    let mut schedule = HistorySchedule::new(interval);
    if !schedule.on() || !store.watches() {
        return None;
    }
    let store = Arc::clone(store);
    Some(tokio::spawn(async move {
        let started = Instant::now();
        loop {
            let s = Arc::clone(&store);
            let read = tokio::task::spawn_blocking(move || s.revision()).await;
            let now = started.elapsed().as_millis() as u64;
            let Ok(Ok(revision)) = read else {
                tokio::time::sleep(interval.min(Duration::from_secs(10))).await;
                continue;
            };
            if let Some(before) = schedule.read(now, revision) {
                let s = Arc::clone(&store);
                if let Ok(Err(e)) =
                    tokio::task::spawn_blocking(move || s.compact_history(before)).await
                {
                    let line =
                        format!("cannot compact the store's history before revision {before}: {e}");
                    crate::rt::log_at(
                        tracing::Level::WARN,
                        &who,
                        &crate::rt::Fields::default(),
                        line,
                    );
                }
            }
            tokio::time::sleep(schedule.wait(now)).await;
        }
    }))
}

/// Counts what the host did in its last step into `m`.
fn count(m: &crate::metrics::ControllerMetrics, host: &mut Host) {
    for p in host.take_passes() {
        m.pass(&p);
    }
    m.leadership(host.fence());
    if let Some(stats) = host.cache_stats() {
        m.cache(&stats);
    }
    m.cache_position(host.cache_position());
}

/// One request of the machine, as the driver carries it out: the machine gives it up at `until`.
struct Call {
    id: ReqId,
    request: StoreRequest,
    purpose: Purpose,
    until: Instant,
}

/// Starts one request of the machine: a one-shot call on a blocking thread, a watch on a thread
/// of its own, or the end of a watch. One-shot calls are timed into `metrics`.
fn carry_out_async(
    store: &Arc<dyn Store>,
    tx: &mpsc::UnboundedSender<HostInput>,
    watches: &mut BTreeMap<ReqId, Arc<AtomicBool>>,
    call: Call,
    metrics: &crate::metrics::MetricsSink,
) {
    let Call {
        id,
        request,
        purpose,
        until,
    } = call;
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
            let metrics = metrics.clone();
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
                let began = Instant::now();
                let result = carry_out_until(&*store, &request, until);
                if let Some(m) = metrics.get() {
                    m.controller.store_call(
                        crate::metrics::request_kind(&request),
                        crate::metrics::result_label(&result),
                        began.elapsed().as_secs_f64(),
                    );
                }
                if let (Some((_, after)), Ok(_)) = (fail, &result) {
                    crate::failpoint::hit(after);
                }
                // The machine may have stopped meanwhile: then nobody listens.
                let _ = tx.send(HostInput::Replied(Replied { id, result }));
            });
        }
    }
}
