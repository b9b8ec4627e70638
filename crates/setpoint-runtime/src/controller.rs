//! The controller process: leader election, one reconcile loop per workload, garbage collection.
//!
//! - **Leader lease.** A controller acts only while it holds the leader record `/leader`,
//!   written under a store lease with a time to live and created only if absent. The leader
//!   renews the lease every third of its TTL. A follower retries every `poll`, so it takes over
//!   within one TTL (plus one poll) of the leader's death. Every write of the leader compares the
//!   record's revision (a fencing token), so a leader that lost its lease cannot write.
//! - **Loops.** Each workload has its own task: a pass every period U of that workload (and, if
//!   asked, also when its declaration changes). A task runs its passes one after another, so at
//!   most one pass per workload is in flight; a task is stopped and awaited before its
//!   replacement starts.
//! - **Garbage collection.** Assignments whose owner is gone are removed; the agents then stop
//!   the copies.
//! - **Watch cache.** On a store that pushes changes (etcd), the leader reads through a
//!   [`crate::cache::Cache`] of the runtime's prefixes: one read, then a watch. With
//!   `wake_on_change`, a new node report also wakes every workload's loop (still one pass at a
//!   time per workload; reports during a pass wake it once more), but the passes' own writes
//!   never do.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use setpoint_core::{Action, Controller, ControllerKind, Expectations, ExpectationsConfig};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cache::cached;
use crate::model::{
    decode, encode, Leader, WorkloadSpec, ASSIGNMENTS, COUNTERS, LEADER, REPORTS, WORKLOADS,
};
use crate::reconcile::{collect_orphans, run_pass, PassError, PassSettings};
use crate::rt::{blocking, log, shutdown_pair, Reach, Shutdown, ShutdownTrigger};
use crate::store::{LeaseId, Revision, Store, StoreError, Txn};

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

/// The leadership this controller holds.
#[derive(Clone, Copy, Debug)]
struct Held {
    lease: LeaseId,
    /// The leader record's revision: the fencing token.
    fence: Revision,
}

/// Tries to become leader: creates `/leader` under a new lease if nobody holds it.
fn try_acquire(store: &dyn Store, cfg: &ControllerConfig) -> Result<Option<Held>, StoreError> {
    if store.get(LEADER)?.is_some() {
        return Ok(None);
    }
    let lease = store.grant(cfg.lease_ttl)?;
    let record = Leader {
        holder: cfg.holder.clone(),
        acquired_ms: store.now_ms(),
        ttl_ms: cfg.lease_ttl.as_millis() as u64,
    };
    match store.commit(
        &Txn::new()
            .expect(LEADER, 0)
            .put_leased(LEADER, encode(&record), lease),
    ) {
        Ok(fence) => Ok(Some(Held { lease, fence })),
        Err(e) => {
            let _ = store.revoke(lease);
            if e.is_conflict() {
                Ok(None)
            } else {
                Err(e)
            }
        }
    }
}

/// What a workload's loop is running: a change to any of it restarts the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LoopKey {
    uid: Revision,
    period_ms: u64,
    kind: ControllerKind,
}

struct Worker {
    key: LoopKey,
    stop: ShutdownTrigger,
    wake: watch::Sender<Revision>,
    handle: JoinHandle<()>,
}

/// Runs a controller until `shutdown` fires. While it is not the leader it only waits for the
/// lease; on shutdown it gives the lease up so that another controller takes over at once.
pub async fn run_controller(
    store: Arc<dyn Store>,
    cfg: ControllerConfig,
    mut shutdown: Shutdown,
) -> Result<(), StoreError> {
    let who = format!("controller {}", cfg.holder);
    let mut tick = tokio::time::interval(cfg.poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reach = Reach::default();
    loop {
        let mut standby_said = false;
        let held = loop {
            tokio::select! {
                _ = shutdown.wait() => return Ok(()),
                _ = tick.tick() => {}
            }
            let c = cfg.clone();
            match blocking(&store, move |s| try_acquire(s, &c)).await {
                Ok(Some(h)) => break h,
                Ok(None) if !standby_said => {
                    reach.answered(&who);
                    standby_said = true;
                    log(
                        &who,
                        "standby: another controller holds the lease; waiting for it",
                    );
                }
                Ok(None) => reach.answered(&who),
                Err(e) if e.is_lost() => {
                    log(&who, format!("{e}: this controller stops"));
                    return Err(e);
                }
                Err(e) => reach.failed(&who, format!("cannot reach the store: {e}")),
            }
        };
        reach.answered(&who);
        log(&who, format!("became the leader (lease {})", held.lease));
        let stopped = lead(&store, &cfg, held, &mut shutdown, &who).await;
        if stopped {
            let lease = held.lease;
            match blocking(&store, move |s| s.revoke(lease)).await {
                Ok(()) => {}
                // `lead` said so already.
                Err(e) if e.is_lost() => return Err(e),
                Err(e) => log(&who, format!("cannot give up the lease: {e}")),
            }
            log(&who, "stopped");
            return Ok(());
        }
        log(&who, "lost the leader lease; following");
    }
}

/// Acts as leader until shutdown (returns true) or until leadership is lost (returns false).
async fn lead(
    store: &Arc<dyn Store>,
    cfg: &ControllerConfig,
    held: Held,
    shutdown: &mut Shutdown,
    who: &str,
) -> bool {
    let (lost_tx, lost_rx) = watch::channel(false);
    // On a store that pushes changes, passes read a watch cache instead of every key.
    let (store, cache) = cached(
        store,
        &[
            WORKLOADS,
            COUNTERS,
            ASSIGNMENTS,
            REPORTS,
            LEADER,
            crate::node::NODES,
        ],
    );
    let store = &store;
    let changes = cache
        .as_ref()
        .filter(|_| cfg.wake_on_change)
        .map(|c| c.subscribe());
    let mut workers: BTreeMap<String, Worker> = BTreeMap::new();
    let mut tick = tokio::time::interval(cfg.poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let renew_every = cfg.lease_ttl / 3;
    let mut renewed = Instant::now();
    let mut last_gc = Instant::now() - Duration::from_secs(3600);
    let mut last_compaction = Instant::now();
    let mut seen_revision = None;
    let mut reach = Reach::default();
    let settings = PassSettings {
        fence: Some(held.fence),
        max_attempts: 5,
    };
    let stopped = loop {
        tokio::select! {
            _ = shutdown.wait() => break true,
            _ = tick.tick() => {}
        }
        if *lost_rx.borrow() {
            break false;
        }
        if last_compaction.elapsed()
            >= Duration::from_millis(crate::retention::COMPACT_EVERY_MS).min(cfg.event_retention)
        {
            last_compaction = Instant::now();
            let keep = cfg.event_retention.as_millis() as u64;
            match blocking(store, move |s| {
                crate::retention::compact_events(s, s.now_ms(), keep)
            })
            .await
            {
                Ok(0) => {}
                Ok(n) => log(
                    who,
                    format!("compacted the event log: {n} old entries removed"),
                ),
                Err(e) => log(who, format!("cannot compact the event log: {e}")),
            }
        }
        if renewed.elapsed() >= renew_every {
            let lease = held.lease;
            match blocking(store, move |s| s.keep_alive(lease)).await {
                Ok(()) => renewed = Instant::now(),
                Err(StoreError::LeaseExpired(_)) => break false,
                Err(e) if e.is_lost() => {
                    log(who, format!("{e}: this controller stops"));
                    break true;
                }
                Err(e) => {
                    log(who, format!("cannot renew the lease: {e}"));
                    if renewed.elapsed() >= cfg.lease_ttl {
                        break false;
                    }
                }
            }
        }
        // Declarations: start, restart, wake and stop loops when they change.
        let revision = match blocking(store, |s| s.revision()).await {
            Ok(r) => {
                reach.answered(who);
                r
            }
            Err(e) if e.is_lost() => {
                log(who, format!("{e}: this controller stops"));
                break true;
            }
            Err(e) => {
                reach.failed(who, format!("cannot read the store: {e}"));
                continue;
            }
        };
        if seen_revision != Some(revision) {
            match blocking(store, |s| s.read(&[WORKLOADS])).await {
                Ok(read) => {
                    seen_revision = Some(revision);
                    let mut declared = BTreeMap::new();
                    for e in &read.entries {
                        match decode::<WorkloadSpec>(e) {
                            Ok(w) => {
                                declared.insert(w.value.name.clone(), w);
                            }
                            Err(err) => log(who, err),
                        }
                    }
                    for (name, w) in &declared {
                        let key = LoopKey {
                            uid: w.create_revision,
                            period_ms: w.value.period_ms,
                            kind: w.value.controller,
                        };
                        if let Some(old) = workers.get(name) {
                            if old.key == key {
                                old.wake.send_if_modified(|r| {
                                    let changed = *r != w.mod_revision;
                                    *r = w.mod_revision;
                                    changed
                                });
                                continue;
                            }
                        }
                        if let Some(old) = workers.remove(name) {
                            old.stop.fire();
                            let _ = old.handle.await;
                        }
                        workers.insert(
                            name.clone(),
                            spawn_worker(
                                store,
                                name,
                                key,
                                w.mod_revision,
                                settings,
                                Wake {
                                    declaration: cfg.wake_on_change,
                                    changes: changes.clone(),
                                },
                                &lost_tx,
                            ),
                        );
                    }
                    let gone: Vec<String> = workers
                        .keys()
                        .filter(|n| !declared.contains_key(*n))
                        .cloned()
                        .collect();
                    for name in gone {
                        if let Some(old) = workers.remove(&name) {
                            old.stop.fire();
                            let _ = old.handle.await;
                        }
                        log(who, format!("{name}: no longer declared; its loop ends"));
                    }
                }
                Err(e) => log(who, format!("cannot read declarations: {e}")),
            }
        }
        if last_gc.elapsed() >= Duration::from_secs(1) {
            last_gc = Instant::now();
            match blocking(store, move |s| collect_orphans(s, Some(held.fence))).await {
                Ok(gone) if !gone.is_empty() => log(
                    who,
                    format!("collected orphaned assignments: {}", gone.join(", ")),
                ),
                Ok(_) => {}
                Err(PassError::NotLeader) => break false,
                Err(e) => log(who, format!("garbage collection failed: {e}")),
            }
        }
    };
    for (_, w) in std::mem::take(&mut workers) {
        w.stop.fire();
        let _ = w.handle.await;
    }
    stopped
}

/// What wakes a workload's loop besides its period.
struct Wake {
    /// A change of its declaration.
    declaration: bool,
    /// A new node report, as the watch cache sees it.
    changes: Option<watch::Receiver<Revision>>,
}

fn spawn_worker(
    store: &Arc<dyn Store>,
    name: &str,
    key: LoopKey,
    revision: Revision,
    settings: PassSettings,
    wake: Wake,
    lost: &watch::Sender<bool>,
) -> Worker {
    let (stop, mut stopped) = shutdown_pair();
    let Wake {
        declaration: wake_on_change,
        mut changes,
    } = wake;
    let (wake, mut woken) = watch::channel(revision);
    let store = Arc::clone(store);
    let name = name.to_owned();
    let lost = lost.clone();
    let handle = tokio::spawn(async move {
        let who = format!("loop {name}");
        let mut controller = runtime_controller(key.kind);
        let mut every = tokio::time::interval(Duration::from_millis(key.period_ms));
        // Rounds stay on the grid `start + k·U`, as the lesson's rounds sit at multiples of U: a
        // pass that overruns skips the rounds it missed rather than shifting every later round
        // (measured by `setpoint experiment lesson --real`, docs/model-vs-reality.md).
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = stopped.wait() => return,
                _ = every.tick() => {}
                Ok(()) = woken.changed(), if wake_on_change => {}
                Some(()) = changed(&mut changes) => {}
            }
            let n = name.clone();
            let (c, result) = blocking(&store, move |s| {
                let r = run_pass(s, &n, &mut controller, &settings);
                (controller, r)
            })
            .await;
            controller = c;
            match result {
                Ok(r) => {
                    let what = match &r.action {
                        Some(Action::Create {
                            target, counted, ..
                        }) if !r.created.is_empty() => Some(format!(
                            "target {target}, counted {counted}: created {}",
                            r.created.join(", ")
                        )),
                        // Nothing written: the idle reason below says why, once.
                        Some(Action::Create { .. }) => None,
                        Some(Action::Delete { target, counted }) => Some(format!(
                            "target {target}, counted {counted}: {} delete commands, deleted [{}]",
                            r.delete_commands,
                            r.deleted.join(", ")
                        )),
                        Some(Action::Named {
                            target, counted, ..
                        }) if r.wrote() || r.delete_commands > 0 => Some(format!(
                            "target {target}, counted {counted}: created [{}], {} delete commands, deleted [{}]",
                            r.created.join(", "),
                            r.delete_commands,
                            r.deleted.join(", ")
                        )),
                        Some(Action::Named { .. }) | None => None,
                    };
                    for f in &r.failures {
                        log(&who, f);
                    }
                    if let Some(note) = &r.rollout {
                        log(&who, note);
                    }
                    if let Some(what) = what {
                        log(&who, what);
                    }
                    if let Some(idle) = r.idle {
                        log(
                            &who,
                            crate::loops::describe_idle(&idle, r.held_back, r.unplaced),
                        );
                    }
                    if !r.collected.is_empty() {
                        log(&who, format!("collected exited {}", r.collected.join(", ")));
                    }
                    if !r.lost.is_empty() {
                        log(
                            &who,
                            format!("removed {} of lost nodes (lease ended)", r.lost.join(", ")),
                        );
                    }
                    if r.conflicts > 0 {
                        log(
                            &who,
                            format!("{} conflicts, retried on fresh state", r.conflicts),
                        );
                    }
                }
                Err(PassError::NotLeader) => {
                    lost.send_replace(true);
                    return;
                }
                Err(PassError::Gone(_)) => return,
                // The leader's loop notices too, says so once and stops every loop.
                Err(PassError::Store(e)) if e.is_lost() => return,
                Err(e) => log(&who, format!("pass failed: {e}")),
            }
        }
    });
    Worker {
        key,
        stop,
        wake,
        handle,
    }
}

/// Waits for the watch cache to move, if passes are woken by changes (`None` waits forever).
async fn changed(changes: &mut Option<watch::Receiver<Revision>>) -> Option<()> {
    match changes {
        Some(rx) => rx.changed().await.ok(),
        None => std::future::pending().await,
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
