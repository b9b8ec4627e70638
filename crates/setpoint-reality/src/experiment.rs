//! The lesson's scenario on the real runtime: real processes, a real SQLite store, the real
//! controller and agent, on compressed time; measured with [`setpoint_runtime::measure`] and set against the
//! lab's prediction.
//!
//! One **cell** is one report delay G and one controller. It runs the lesson's world (6 copies,
//! U = 15 s, B = 5 s, 2 copies killed at second 300, 900 seconds) with every duration multiplied
//! by the time scale: at 0.01, U is 150 ms, B 50 ms, G = 60 s is 600 ms, and the run lasts 9 s.
//! The agent's added report delay is G; it reports, reads its assignments and looks at its
//! processes every half virtual second (5 ms at 0.01), so the ledger lags the world by G plus
//! that pipeline, which the measurement's [`Jitter`](setpoint_runtime::measure::Jitter) quantifies.
//!
//! A cell's clock starts at its loop's first pass (virtual second 0). The kill at second 300 is
//! `SIGKILL` to the process groups of the two oldest copies that the agent has running (ready).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use setpoint_core::ControllerKind;
use setpoint_sim::pipeline::{Pipeline, PipelineSpec};
use setpoint_sim::{run, LessonSpec, Metrics, Scenario};

use setpoint_runtime::agent::{read_all_node_states, run_agent, AgentConfig};
use setpoint_runtime::controller::{run_controller, ControllerConfig};
use setpoint_runtime::events::EVENTS;
use setpoint_runtime::measure::{measure, MeasureError, Measurement, Spread, WindowSpec};
use setpoint_runtime::model::{encode, report_key, Phase, WorkloadSpec};
use setpoint_runtime::ops;
use setpoint_runtime::report_delay::ReportDelays;
use setpoint_runtime::rt::{blocking, shutdown_pair};
use setpoint_runtime::store::{
    Namespaced, OpenError, OpenMode, Revision, SqliteStore, Store, StoreError, StoreUrl, Txn,
};

/// How far apart cells that run at once start, in real milliseconds.
const STAGGER_MS: u64 = 97;

/// The workload's name in every cell.
pub const WORKLOAD: &str = "collector";

/// The settings of a real lesson run.
#[derive(Clone, Debug, PartialEq)]
pub struct RealLesson {
    /// Real milliseconds per virtual second, divided by 1000. Default 0.01.
    pub time_scale: f64,
    /// Each cell gets its own data directory below this one: `{controller}-g{G}`.
    pub data_dir: PathBuf,
    /// What each copy runs. Default `sleep 100000`.
    pub program: Vec<String>,
    /// The report delays G, in virtual seconds. Default the lesson's 0, 5, 10, 20, 30, 60.
    pub delays: Vec<u64>,
    /// The controllers. Default `ledger` and `intent`.
    pub controllers: Vec<ControllerKind>,
    /// How many cells run at once. Default 6.
    pub jobs: usize,
    /// The store the cells share, each under its own prefix `/experiment/{controller}-g{G}`;
    /// `None` (the default) gives each cell its own SQLite store in its data directory.
    pub store: Option<StoreUrl>,
    /// The report pipeline the lab side of a jittered cell models. Default
    /// [`agent_pipeline`]: the one setpoint's agent runs in these cells.
    pub pipeline: PipelineSpec,
}

/// How often the agent of a real cell reports its node, in virtual milliseconds: every half
/// virtual second.
pub const AGENT_REPORT_EVERY_MS: u64 = 500;

/// The report pipeline of setpoint's agent, in the lab's terms (`docs/model.md`, "The report
/// pipeline"): `in-order` snapshots of its one node every [`AGENT_REPORT_EVERY_MS`]. Every
/// `report_every` the agent observes its whole node and queues the snapshot with its own
/// delay; it writes its queue front first, so a snapshot whose delay is short waits behind an
/// older one whose delay is long, and of the snapshots due together only the newest is written
/// (which changes nothing the ledger shows: it is the latest of them).
pub fn agent_pipeline() -> PipelineSpec {
    PipelineSpec {
        mode: Pipeline::InOrder,
        nodes: 1,
        report_every_ms: AGENT_REPORT_EVERY_MS,
    }
}

impl RealLesson {
    /// The lesson's cells at time scale 0.01 in `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            time_scale: 0.01,
            data_dir: data_dir.into(),
            program: vec!["sleep".into(), "100000".into()],
            delays: setpoint_sim::lesson::LESSON_DELAYS.to_vec(),
            controllers: ControllerKind::LESSON.to_vec(),
            jobs: 6,
            store: None,
            pipeline: agent_pipeline(),
        }
    }

    /// One virtual second in real milliseconds.
    pub fn second_ms(&self) -> f64 {
        1000.0 * self.time_scale
    }

    /// `seconds` of virtual time as a real duration.
    pub fn real(&self, seconds: u64) -> Duration {
        Duration::from_secs_f64(seconds as f64 * self.time_scale)
    }

    /// Checks the settings: the scale must make every lesson duration at least 1 ms long.
    pub fn validate(&self) -> Result<(), ExperimentError> {
        if !(0.001..=10.0).contains(&self.time_scale) {
            return Err(ExperimentError::BadInput(format!(
                "--time-scale {} is out of range: accepted 0.001 to 10",
                self.time_scale
            )));
        }
        if self.program.is_empty() {
            return Err(ExperimentError::BadInput("the program is empty".into()));
        }
        if self.jobs == 0 {
            return Err(ExperimentError::BadInput(
                "--jobs 0 is out of range: accepted at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// Why a real run failed.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// A setting is out of range; the message names it.
    #[error("{0}")]
    BadInput(String),
    /// A data directory could not be prepared; check permissions and disk space.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The runtime did not do what the experiment waited for (say, the agent never reported);
    /// the message says what.
    #[error("{0}")]
    Stalled(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The shared store could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The run could not be measured.
    #[error(transparent)]
    Measure(#[from] MeasureError),
    /// The agent failed.
    #[error(transparent)]
    Agent(#[from] setpoint_runtime::agent::AgentError),
}

/// One cell's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CellOutcome {
    /// Report delay G, in virtual seconds.
    pub delay: u64,
    /// The controller.
    #[serde(serialize_with = "kind_name")]
    pub controller: ControllerKind,
    /// What the lab predicts for the lesson's world.
    pub simulated: Metrics,
    /// What the real run measured.
    pub measured: Measurement,
    /// The copies killed at second 300.
    pub killed: Vec<String>,
    /// How late the kill came after its place at second 300, in real milliseconds.
    pub kill_late_ms: i64,
    /// The store's own delay, in real microseconds: from a report-sized commit to a pass being
    /// able to read it ([`store_delay_us`]), measured after the run on the cell's store.
    pub store_delay_us: Spread,
}

/// How long the store itself holds a report back from a pass: from the commit of a
/// report-sized value (2 kB) to a read that shows it, through the same watch cache a pass reads
/// on a store that pushes changes (so: the commit's round trip, and on etcd its Raft commit and
/// the watch's delivery), `n` times, in microseconds.
pub fn store_delay_us(store: &Arc<dyn Store>, n: usize) -> Result<Spread, StoreError> {
    const PROBE: &str = "/probe/";
    let key = format!("{PROBE}report");
    let (reader, cache) = setpoint_runtime::cache::cached(store, &[PROBE]);
    let pad = "x".repeat(2000);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let t0 = std::time::Instant::now();
        let rev =
            store.commit(&setpoint_runtime::store::Txn::new().put(&key, format!("{i}{pad}")))?;
        if let Some(c) = &cache {
            if !c.wait_for(rev, Duration::from_secs(5)) {
                return Err(StoreError::Unavailable(
                    "the watch did not deliver a probe within 5 s".into(),
                ));
            }
        }
        let seen = reader.get(&key)?.map(|e| e.mod_revision);
        if seen < Some(rev) {
            return Err(StoreError::Unavailable(format!(
                "a read after revision {rev} showed {seen:?}"
            )));
        }
        samples.push(t0.elapsed().as_micros() as i64);
    }
    store.commit(&setpoint_runtime::store::Txn::new().delete(&key))?;
    Ok(Spread::of(samples))
}

fn kind_name<S: serde::Serializer>(k: &ControllerKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(k.name())
}

/// The lesson's world (defaults of [`LessonSpec`]), for a cell.
pub fn lesson_spec(delay: u64, controller: ControllerKind) -> LessonSpec {
    LessonSpec {
        delay,
        controller,
        ..LessonSpec::default()
    }
}

/// What the lab computes for a cell's world, for any controller, through the lab's one entry
/// point ([`setpoint_sim::run`]): the fast engine for `ledger` and `intent`, the general engine
/// for the others.
pub fn lab_metrics(world: &LessonSpec) -> Result<Metrics, ExperimentError> {
    let bad = |e: setpoint_sim::ScenarioError| ExperimentError::BadInput(e.to_string());
    let scenario = Scenario::from_lesson_spec(world).map_err(bad)?;
    Ok(run(&scenario, 1).map_err(bad)?.workloads[0].metrics)
}

/// Runs one cell on real processes and measures it.
pub async fn run_cell(
    cfg: &RealLesson,
    delay: u64,
    controller: ControllerKind,
) -> Result<CellOutcome, ExperimentError> {
    let world = lesson_spec(delay, controller);
    let name = format!("{}-g{delay}", controller.name());
    let real = run_real(cfg, &world, &name, ReportDelays::default()).await?;
    Ok(CellOutcome {
        delay,
        controller,
        simulated: lab_metrics(&world)?,
        measured: real.measured,
        killed: real.killed,
        kill_late_ms: real.kill_late_ms,
        store_delay_us: real.store_delay_us,
    })
}

/// What one real run measured.
pub struct RealRun {
    /// The lesson's metrics of the run.
    pub measured: Measurement,
    /// The copies killed.
    pub killed: Vec<String>,
    /// How late the last kill came, in real milliseconds.
    pub kill_late_ms: i64,
    /// The store's own delay, in real microseconds ([`store_delay_us`]).
    pub store_delay_us: Spread,
}

/// Runs `world` on real processes in the cell directory `name` (under `cfg.data_dir`, and the
/// store prefix `/experiment/{name}` on a shared store), with the agent's report delay
/// `world.delay` or, when `delays` is not empty, the jittered schedule `delays` (real
/// milliseconds); measures it.
pub async fn run_real(
    cfg: &RealLesson,
    world: &LessonSpec,
    name: &str,
    delays: ReportDelays,
) -> Result<RealRun, ExperimentError> {
    let (world, controller) = (world.clone(), world.controller);
    let scaled = |s: u64| (s as f64 * cfg.second_ms()).round() as u64;
    let dir = cfg.data_dir.join(name);
    let dir_err = |source| ExperimentError::DataDir {
        path: dir.clone(),
        source,
    };
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(dir_err(e)),
        _ => {}
    }
    std::fs::create_dir_all(&dir).map_err(dir_err)?;
    let store: Arc<dyn Store> = match &cfg.store {
        None => Arc::new(SqliteStore::open(&dir)?),
        Some(url) => {
            let url = url.clone();
            let prefix = format!("/experiment/{name}");
            tokio::task::spawn_blocking(move || {
                let shared = url.open(OpenMode::Create)?;
                let cell = Namespaced::new(shared, prefix);
                cell.clear()?;
                Ok::<_, ExperimentError>(Arc::new(cell))
            })
            .await
            .map_err(|e| ExperimentError::Stalled(format!("opening the store panicked: {e}")))??
        }
    };
    let spec = WorkloadSpec {
        name: WORKLOAD.into(),
        command: cfg.program.clone(),
        copies: world.desired,
        controller,
        period_ms: scaled(world.period).max(1),
        startup_ms: scaled(world.startup),
        readiness: None,
        grace_ms: 1_000,
        env: Default::default(),
        backoff: Default::default(),
        rollout: Default::default(),
        restart: Default::default(),
        generation: 0,
        stop_when_cut_off_ms: None,
    };
    ops::apply(&*store, std::slice::from_ref(&spec)).map_err(|e| match e {
        ops::OpError::Store(s) => ExperimentError::Store(s),
        other => ExperimentError::Stalled(other.to_string()),
    })?;

    let half = Duration::from_secs_f64(
        (cfg.time_scale * AGENT_REPORT_EVERY_MS as f64 / 1000.0).max(0.001),
    );
    let mut acfg = AgentConfig::new("node-1", dir.join("nodes"));
    acfg.report_every = half;
    acfg.sync_every = half;
    acfg.tick = half;
    acfg.report_delay = Duration::from_millis(scaled(world.delay));
    acfg.report_delays = delays;
    let state_dir = acfg.state_dir.clone();
    let (agent_stop, agent_shutdown) = shutdown_pair();
    let agent = tokio::spawn(run_agent(Arc::clone(&store), acfg, agent_shutdown));
    let result = drive(cfg, &store, &world, &spec, &state_dir).await;
    agent_stop.fire();
    let stopped = agent.await;
    let outcome = result?;
    if let Ok(Err(e)) = stopped {
        return Err(e.into());
    }
    let (measured, killed, kill_late_ms) = outcome;
    let probe = Arc::clone(&store);
    let store_delay_us = tokio::task::spawn_blocking(move || store_delay_us(&probe, 30))
        .await
        .map_err(|e| ExperimentError::Stalled(format!("the store probe panicked: {e}")))??;
    Ok(RealRun {
        measured,
        killed,
        kill_late_ms,
        store_delay_us,
    })
}

/// Waits for the agent, runs the controller for the whole scenario, kills at the scripted
/// seconds, and measures before the agent stops the copies.
async fn drive(
    cfg: &RealLesson,
    store: &Arc<dyn Store>,
    world: &LessonSpec,
    spec: &WorkloadSpec,
    state_dir: &std::path::Path,
) -> Result<(Measurement, Vec<String>, i64), ExperimentError> {
    // The first pass must find a live node, as the lesson's first round creates at once.
    wait_for(store, "the agent's first report", |s| {
        Ok(s.get(&report_key("node-1"))?.is_some())
    })
    .await?;
    let mut ccfg = ControllerConfig::new(setpoint_runtime::controller::default_holder());
    ccfg.poll = Duration::from_millis(10);
    let (controller_stop, controller_shutdown) = shutdown_pair();
    let controller = tokio::spawn(run_controller(Arc::clone(store), ccfg, controller_shutdown));
    let first_round = format!("{EVENTS}{WORKLOAD}/round/");
    let origin = wait_for_value(store, "the loop's first pass", move |s| {
        let read = s.read(&[&first_round])?;
        Ok(read.entries.first().and_then(|e| {
            serde_json::from_str::<setpoint_runtime::events::RoundEvent>(&e.value)
                .ok()
                .map(|r| r.at_ms)
        }))
    })
    .await;
    let origin = match origin {
        Ok(o) => o,
        Err(e) => {
            controller_stop.fire();
            let _ = controller.await;
            return Err(e);
        }
    };
    let at_real = |second: u64| origin + (second as f64 * cfg.second_ms()).round() as u64;

    let mut killed = Vec::new();
    let mut kill_late_ms = 0;
    let mut deaths = world.deaths.clone();
    deaths.sort_by_key(|d| d.at);
    for d in deaths.iter().filter(|d| d.at <= world.duration) {
        sleep_until(store, at_real(d.at)).await;
        let now = store.now_ms();
        kill_late_ms = now as i64 - at_real(d.at) as i64;
        let (dir, name, count) = (state_dir.to_path_buf(), spec.name.clone(), d.count);
        killed.extend(blocking(store, move |s| kill_ready(s, &dir, &name, count)).await?);
    }
    // The end of the last second, then one more tick for the agent's last events.
    sleep_until(store, at_real(world.duration + 1) + 20).await;
    controller_stop.fire();
    let _ = controller.await;
    let period_ms = spec.period_ms;
    let (duration, scale) = (world.duration, cfg.time_scale);
    let measured = blocking(store, move |s| {
        measure(
            s,
            WORKLOAD,
            &WindowSpec {
                since_ms: Some(origin),
                last: Some(duration),
                time_scale: scale,
                period_ms: Some(period_ms),
                now_ms: s.now_ms(),
            },
        )
    })
    .await?;
    Ok((measured, killed, kill_late_ms))
}

/// Kills the `count` oldest copies of `workload` that run and are ready, as the lesson's deaths
/// strike the oldest live copies, and returns their identities. The deaths are **commanded**:
/// each goes to its agent as a kill request, as `setpoint kill` sends it, so the copy's report
/// says it was killed on purpose and the controller replaces it at once, as the lesson's
/// controllers do, instead of backing off as after a crash.
pub fn kill_ready(
    store: &dyn Store,
    state_dir: &std::path::Path,
    workload: &str,
    count: u64,
) -> Result<Vec<String>, StoreError> {
    let mut ready: Vec<(u64, String, String, Revision)> = read_all_node_states(state_dir)
        .into_iter()
        .flat_map(|s| {
            let node = s.node;
            s.copies.into_iter().map(move |r| (node.clone(), r))
        })
        .filter(|(_, r)| {
            r.assignment.workload == workload
                && r.phase == Phase::Running
                && !r.stopping
                && r.pid != 0
        })
        .map(|(node, r)| (r.assignment.n, node, r.assignment.copy, r.incarnation))
        .collect();
    ready.sort();
    ready.truncate(count as usize);
    if ready.is_empty() {
        return Ok(Vec::new());
    }
    let lease = store.grant(Duration::from_secs(30))?;
    let now = store.now_ms();
    let mut txn = Txn::new();
    let mut requests = Vec::new();
    for (_, node, copy, incarnation) in &ready {
        let key = format!("{}{copy}", setpoint_runtime::remote::kills_of(node));
        let req = setpoint_runtime::remote::KillRequest {
            copy: copy.clone(),
            incarnation: *incarnation,
            requested_ms: now,
            outcome: None,
        };
        txn = txn.expect(&key, 0).put_leased(&key, encode(&req), lease);
        requests.push((key, copy.clone()));
    }
    if let Err(e) = store.commit(&txn) {
        let _ = store.revoke(lease);
        return Err(e);
    }
    let batch = setpoint_runtime::remote::KillBatch { lease, requests };
    let outcomes = setpoint_runtime::remote::await_kills(store, &batch, Duration::from_secs(10))?;
    Ok(outcomes
        .into_iter()
        .filter(|(_, o)| o.as_deref().is_some_and(|o| o.starts_with("killed")))
        .map(|(copy, _)| copy)
        .collect())
}

async fn sleep_until(store: &Arc<dyn Store>, at_ms: u64) {
    let now = store.now_ms();
    if at_ms > now {
        tokio::time::sleep(Duration::from_millis(at_ms - now)).await;
    }
}

async fn wait_for(
    store: &Arc<dyn Store>,
    what: &str,
    ready: impl Fn(&dyn Store) -> Result<bool, StoreError> + Send + Sync + Clone + 'static,
) -> Result<(), ExperimentError> {
    wait_for_value(store, what, move |s| Ok(ready(s)?.then_some(()))).await
}

async fn wait_for_value<T: Send + 'static>(
    store: &Arc<dyn Store>,
    what: &str,
    probe: impl Fn(&dyn Store) -> Result<Option<T>, StoreError> + Send + Sync + Clone + 'static,
) -> Result<T, ExperimentError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let p = probe.clone();
        if let Some(v) = blocking(store, move |s| p(s)).await? {
            return Ok(v);
        }
        if std::time::Instant::now() >= deadline {
            return Err(ExperimentError::Stalled(format!(
                "timed out after 30s waiting for {what}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Runs every cell of `cfg`, `cfg.jobs` at a time, and returns them in the order of
/// `cfg.controllers`, then `cfg.delays`.
pub async fn run_all(cfg: &RealLesson) -> Result<Vec<CellOutcome>, ExperimentError> {
    cfg.validate()?;
    let cells: Vec<(ControllerKind, u64)> = cfg
        .controllers
        .iter()
        .flat_map(|&c| cfg.delays.iter().map(move |&g| (c, g)))
        .collect();
    let mut out = Vec::with_capacity(cells.len());
    for chunk in cells.chunks(cfg.jobs) {
        let mut set = tokio::task::JoinSet::new();
        for (i, &(c, g)) in chunk.iter().enumerate() {
            let cfg = cfg.clone();
            // Staggered starts, so that the cells' first batches of copies do not all spawn in
            // the same milliseconds.
            let stagger = Duration::from_millis(STAGGER_MS * i as u64);
            set.spawn(async move {
                tokio::time::sleep(stagger).await;
                (i, run_cell(&cfg, g, c).await)
            });
        }
        let mut done: Vec<(usize, Result<CellOutcome, ExperimentError>)> = Vec::new();
        while let Some(r) = set.join_next().await {
            done.push(r.map_err(|e| ExperimentError::Stalled(format!("a cell panicked: {e}")))?);
        }
        done.sort_by_key(|d| d.0);
        for (_, r) in done {
            out.push(r?);
        }
    }
    Ok(out)
}
