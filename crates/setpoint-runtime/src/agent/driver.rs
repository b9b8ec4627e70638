//! The node agent's tokio driver ([`run_agent`]): runs the copies assigned to its node as real
//! processes and reports them.
//!
//! Its logic is the I/O-free machine [`AgentCore`]; [`run_agent`] is the thin
//! tokio driver around it: it carries the machine's store requests out on blocking threads
//! (several in flight, replies fed back through a channel), spawns, signals and reaps the
//! processes, runs readiness commands, checks adopted processes through `/proc`, writes the
//! state file and tends the copies' logs. What the machine does, every tick:
//! 1. looks at each copy's process: a child that ended is reaped and its whole group killed; an
//!    adopted process (one a previous agent started) is checked through `/proc` by pid *and*
//!    start time, so a reused pid is never mistaken for it;
//! 2. promotes starting copies to running after their startup time, or once their readiness
//!    command exits 0;
//! 3. every `sync_every`, reads the assignments of its node: starts each one it has not started
//!    (one it already runs, or that already ran and exited, is left alone: starting is keyed by
//!    the copy's identity, so a repeat is harmless), and stops each copy whose assignment is gone
//!    (SIGTERM to the group, SIGKILL after the grace period);
//! 4. every R (`report_every`), observes its copies; the observation is written to the store
//!    `report_delay` later, which emulates a longer reporting chain.
//!
//! Before anything else it takes its node's name: a lock in the state directory and a lease in
//! the store ([`crate::model::node`]). It keeps that lease alive, and if it cannot, it stops every copy
//! before the lease can end, then claims the name again.
//!
//! Its local state file (`{state_dir}/{node}.json`) records every copy (pid, start time, phase)
//! as soon as it is started. After a crash, the next agent adopts the copies whose assignment
//! still exists and reaps the others. Copies started but not yet recorded are found by the mark
//! in their environment ([`ENV_AGENT`](crate::process::ENV_AGENT)). A copy that exited stays
//! recorded until its assignment is removed, so it is never started a second time.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use rustix::process::Signal;

use super::{
    lease_file, read_all_node_states, read_lease_file, read_node_state, recovery_from, state_file,
    AgentCore, AgentCoreConfig, AgentError, AgentInput, AgentOutput, CopySignal, Ended, Nonces,
    Recovery,
};
use crate::machine::{carry_out_until, follow_watch, Followed, ReqId, StoreRequest};
use crate::model::node::{self, DirLock};
use crate::model::{encode, report_key, Assignment, Phase};
use crate::process::{self, Launch};
use crate::rt::{log, Shutdown};
use crate::store::{Op, Store};

/// How often the agent looks at its processes, unless configured otherwise.
const TICK: Duration = Duration::from_millis(25);
/// How long the real driver's machine waits for a store reply before counting it as failed.
const REQUEST_TIMEOUT_MS: u64 = 10_000;

/// How an agent runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentConfig {
    /// The node's name, as assignments and reports name it.
    pub node: String,
    /// Where the agent keeps its state file and the copies' logs.
    pub state_dir: PathBuf,
    /// The reporting period R.
    pub report_every: Duration,
    /// Added delay between observing the copies and writing the report.
    pub report_delay: Duration,
    /// An agent with no news writes its report at least this often (docs/runtime.md, "Reports on change").
    pub report_resync: Duration,
    /// Jittered added delays, one per report in turn, in place of `report_delay` when not empty
    /// ([`crate::report_delay`]).
    pub report_delays: crate::report_delay::ReportDelays,
    /// How often the agent reads its assignments.
    pub sync_every: Duration,
    /// How often the agent looks at its processes: readiness, exits and stops are noticed up to
    /// one tick late, and reports and assignment reads happen on ticks.
    pub tick: Duration,
    /// A copy's log file is cut before it passes this size, in bytes ([`crate::copy_output`]).
    pub log_max_bytes: u64,
    /// How many files a copy's log keeps, the current one included: its disk use is at most
    /// `log_max_bytes × log_max_files`.
    pub log_max_files: u32,
    /// The log of a copy that ended is removed this long after its last write.
    pub log_retention: Duration,
    /// The node lease's time to live: an agent that cannot renew it for this long is lost, and
    /// it stops its own copies before then ([`crate::model::node`]).
    pub lease_ttl: Duration,
    /// Report copies without starting processes (benchmarks of the control plane): a simulated
    /// copy has pid 0, becomes ready after its startup time, and ends only when it is stopped.
    pub simulate_copies: bool,
    /// Where the driver counts its metrics ([`crate::metrics`]); none by default.
    pub metrics: crate::metrics::MetricsSink,
    /// When the agent's process started (ms since the Unix epoch), if it did other work
    /// before [`run_agent`], such as a first attempt to open its store: the self-fence of its
    /// first claim counts from then. `None`: from when `run_agent` starts.
    pub started_ms: Option<u64>,
}

impl AgentConfig {
    /// An agent for `node` keeping state in `state_dir`: R = 1s, no added delay, a report
    /// resync every 5 minutes, assignments
    /// read every 100ms, a tick every 25ms, a node lease of 10s.
    pub fn new(node: impl Into<String>, state_dir: impl Into<PathBuf>) -> Self {
        Self {
            node: node.into(),
            state_dir: state_dir.into(),
            report_every: Duration::from_secs(1),
            report_delay: Duration::ZERO,
            report_resync: Duration::from_millis(super::config::DEFAULT_REPORT_RESYNC_MS),
            report_delays: Default::default(),
            sync_every: Duration::from_millis(100),
            tick: TICK,
            log_max_bytes: crate::retention::DEFAULT_LOG_MAX_BYTES,
            log_max_files: crate::retention::DEFAULT_LOG_MAX_FILES,
            log_retention: Duration::from_millis(crate::retention::DEFAULT_RETENTION_MS),
            lease_ttl: Duration::from_secs(10),
            simulate_copies: false,
            metrics: Default::default(),
            started_ms: None,
        }
    }
}

/// A process the driver looks after, for one copy.
#[derive(Debug)]
struct Proc {
    pid: u32,
    start_ticks: u64,
    /// The child handle, for copies this agent started; adopted copies have none.
    child: Option<Child>,
}

/// The driver's side of the agent: the processes, the paths, what the machine was told.
struct Driver {
    cfg: AgentConfig,
    who: String,
    mark: String,
    store: Arc<dyn Store>,
    procs: BTreeMap<String, Proc>,
    /// Readiness commands in progress, by copy.
    checks: BTreeMap<String, Child>,
    /// Where store replies and watch events go back to the machine.
    replies: tokio::sync::mpsc::UnboundedSender<AgentInput>,
    /// The watches being followed, by the id of the request that started each: set to stop it.
    watches: BTreeMap<ReqId, Arc<std::sync::atomic::AtomicBool>>,
    /// Copies spawned whose pid no state-file write has recorded yet.
    unsaved_starts: usize,
    /// Whether the last write of the lease file failed (logged once per change).
    lease_file_failing: bool,
    /// Whether a tending of the logs is still under way on its blocking thread.
    tending: Arc<std::sync::atomic::AtomicBool>,
    /// The copies already counted in the report lag ([`crate::metrics`]).
    lags: Arc<std::sync::Mutex<crate::metrics::agent::LagTracker>>,
}

impl Driver {
    fn file(&self) -> PathBuf {
        state_file(&self.cfg.state_dir, &self.cfg.node)
    }

    fn log_limits(&self) -> crate::copy_output::LogLimits {
        crate::copy_output::LogLimits {
            max_bytes: self.cfg.log_max_bytes,
            max_files: self.cfg.log_max_files,
        }
    }

    /// Starts reading `copy`'s output from its FIFO into its log, on a thread of its own, so
    /// that no output can hold up this loop ([`crate::copy_output`]).
    fn follow_output(&self, copy: &str) {
        let log_path = crate::logs::log_path(&self.cfg.state_dir, copy);
        if let Err(e) = crate::copy_output::follow_pipe(&log_path, self.log_limits()) {
            log(&self.who, format!("cannot read the output of {copy}: {e}"));
        }
    }

    /// Carries one output out; inputs it gives rise to go to `inputs`. Returns the machine's
    /// end, once it has stopped.
    async fn carry(
        &mut self,
        out: AgentOutput,
        inputs: &mut VecDeque<AgentInput>,
    ) -> Result<Option<Result<(), AgentError>>, AgentError> {
        match out {
            // Simulated copies (benchmarks of the control plane) are not processes: they
            // write no output, so there is no log to rotate or sweep, and they cannot outlive
            // their agent, so there is no lease file to keep for a later agent and no stray to
            // fence. At a thousand simulated nodes sharing one data directory these were the
            // process's largest costs (`scripts/bench-scale.sh`): every agent's sweep read every
            // node's state file every 10 s, and every renewal rewrote a file.
            AgentOutput::TendLogs { .. }
            | AgentOutput::LeaseKept { .. }
            | AgentOutput::StopStrays { .. }
                if self.cfg.simulate_copies => {}
            AgentOutput::Store {
                request: StoreRequest::CancelWatch(watch),
                ..
            } => {
                if let Some(stop) = self.watches.remove(&watch) {
                    stop.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
            AgentOutput::Store {
                id,
                request: StoreRequest::Watch { prefixes, after },
            } => {
                let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
                self.watches.insert(id, Arc::clone(&stop));
                let (store, tx) = (Arc::clone(&self.store), self.replies.clone());
                std::thread::Builder::new()
                    .name("setpoint-agent-watch".into())
                    .spawn(move || {
                        follow_watch(&*store, id, &prefixes, after, &stop, |f| {
                            tx.send(match f {
                                Followed::Replied(r) => AgentInput::Replied(r),
                                Followed::Delivery(d) => AgentInput::WatchDelivery(d),
                            })
                            .is_ok()
                        })
                    })
                    .expect("a thread can be started");
            }
            AgentOutput::Store { id, request } => {
                let store = Arc::clone(&self.store);
                let tx = self.replies.clone();
                let report = report_key(&self.cfg.node);
                let (metrics, node) = (self.cfg.metrics.clone(), self.cfg.node.clone());
                let lags = Arc::clone(&self.lags);
                let until = std::time::Instant::now() + Duration::from_millis(REQUEST_TIMEOUT_MS);
                tokio::task::spawn_blocking(move || {
                    let began = std::time::Instant::now();
                    let result = carry_out_until(&*store, &request, until);
                    if result.is_ok() && writes(&request, &report) {
                        crate::failpoint::hit("agent-after-report");
                    }
                    if let Some(m) = metrics.get() {
                        count_call(&m.agent, &node, &request, &result, began, &report);
                        if result.is_ok() {
                            if let Some(r) = written_report(&request, &report) {
                                let now = store.now_ms();
                                let lags = lags.lock().map(|mut t| t.written(&r, now));
                                for ms in lags.unwrap_or_default() {
                                    m.agent.report_lag(&node, ms as f64 / 1000.0);
                                }
                            }
                        }
                    }
                    let _ = tx.send(AgentInput::Replied(crate::machine::Replied { id, result }));
                });
            }
            AgentOutput::Wake(_) => {}
            AgentOutput::Start {
                copy,
                assignment,
                nonce,
            } => {
                let started = self.start(copy, &assignment, &nonce);
                if let Some(m) = self.cfg.metrics.get() {
                    let ok = matches!(started, AgentInput::Started { .. });
                    m.agent.started(&self.cfg.node, ok);
                }
                inputs.push_back(started);
            }
            AgentOutput::Adopt {
                copy,
                pid,
                start_ticks,
            } => {
                // A copy started through a FIFO waited for a reader while no agent ran; one
                // an older agent started writes its file itself.
                let log_path = crate::logs::log_path(&self.cfg.state_dir, &copy);
                if crate::copy_output::pipe_path(&log_path).exists() {
                    self.follow_output(&copy);
                }
                self.procs.insert(
                    copy,
                    Proc {
                        pid,
                        start_ticks,
                        child: None,
                    },
                );
            }
            AgentOutput::Signal {
                pid,
                start_ticks,
                signal,
                ..
            } => match signal {
                CopySignal::Term => {
                    let _ = process::signal_group(pid, Signal::TERM);
                }
                CopySignal::Kill => {
                    let _ = process::kill_verified(pid, start_ticks);
                }
            },
            AgentOutput::StopForeign {
                pid,
                start_ticks,
                grace_ms,
            } => {
                let _ = tokio::task::spawn_blocking(move || {
                    let _ = process::signal_group(pid, Signal::TERM);
                    let deadline = std::time::Instant::now() + Duration::from_millis(grace_ms);
                    while process::is_alive(pid, start_ticks)
                        && std::time::Instant::now() < deadline
                    {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    let _ = process::kill_verified(pid, start_ticks);
                })
                .await;
            }
            AgentOutput::StopStrays { signal, spare_kept } => {
                let mark = self.mark.clone();
                let own = crate::sandbox::own_uid();
                let found = tokio::task::spawn_blocking(move || process::find_marked(&mark))
                    .await
                    .unwrap_or_default();
                // A copy the last agent here recorded as kept while cut off is spared by the
                // fence, not by a shutdown.
                let saved = read_node_state(&self.file()).ok().flatten();
                let fenced = found.into_iter().filter(|m| {
                    m.uid == own
                        && !(spare_kept && super::recovery::kept_while_cut_off(saved.as_ref(), m))
                });
                let mut count = 0;
                for m in fenced {
                    count += 1;
                    let _ = match signal {
                        CopySignal::Term => process::signal_group(m.pid, Signal::TERM),
                        CopySignal::Kill => {
                            process::kill_verified(m.pid, m.start_ticks).map(|_| ())
                        }
                    };
                }
                inputs.push_back(AgentInput::StraysSignalled { count, spare_kept });
            }
            AgentOutput::Probe { copy, command, env } => {
                match process::spawn_check(&command, &copy, &env) {
                    Ok(c) => {
                        self.checks.insert(copy, c);
                    }
                    Err(_) => inputs.push_back(AgentInput::ProbeDone { copy, ok: false }),
                }
            }
            AgentOutput::Recover => inputs.push_back(AgentInput::Recovered(self.recover()?)),
            AgentOutput::SaveState(state) => {
                if let Some(m) = self.cfg.metrics.get() {
                    let phases: Vec<Phase> = state.copies.iter().map(|r| r.phase).collect();
                    m.agent.copies_now(&self.cfg.node, &phases);
                }
                let path = self.file();
                match crate::store::identity::write_private(&path, encode(&state).as_bytes()) {
                    Ok(()) => {
                        // Each copy started since the last write is now on disk with its pid.
                        for _ in 0..std::mem::take(&mut self.unsaved_starts) {
                            crate::failpoint::hit("agent-after-record");
                        }
                    }
                    Err(e) => log(&self.who, format!("cannot write {}: {e}", path.display())),
                }
            }
            AgentOutput::LeaseKept { sent_ms } => {
                let path = lease_file(&self.cfg.state_dir, &self.cfg.node);
                let wrote =
                    crate::store::identity::write_private(&path, format!("{sent_ms}\n").as_bytes());
                match (wrote, self.lease_file_failing) {
                    (Ok(()), true) => {
                        self.lease_file_failing = false;
                        log(&self.who, format!("wrote {} again", path.display()));
                    }
                    (Err(e), false) => {
                        self.lease_file_failing = true;
                        log(
                            &self.who,
                            format!(
                                "cannot write {}: {e} (a later agent here fences what this one \
                                 leaves running by its own start only)",
                                path.display()
                            ),
                        );
                    }
                    _ => {}
                }
            }
            AgentOutput::TendLogs { running, sweep } => self.tend_logs(running, sweep),
            AgentOutput::ReadLog {
                key,
                copy,
                from,
                tail,
                max_bytes,
            } => {
                // The machine checked the name and the bounds; checked again before any path.
                let read = if crate::logs::valid_copy_name(&copy) {
                    let tail = tail.map(|t| usize::try_from(t).unwrap_or(usize::MAX));
                    let max =
                        usize::try_from(max_bytes.min(crate::log_requests::MAX_CHUNK)).unwrap_or(0);
                    crate::logs::read_range(&self.cfg.state_dir, &copy, from, tail, max)
                        .map_err(|e| e.to_string())
                } else {
                    Err(format!("'{copy}' is not a copy name"))
                };
                inputs.push_back(AgentInput::LogRead { key, read });
            }
            AgentOutput::Log(line) => {
                let fields = crate::rt::Fields {
                    copy: crate::logging::copy_of(&line),
                    ..Default::default()
                };
                crate::rt::log_at(crate::logging::level_of(&line), &self.who, &fields, &line);
            }
            AgentOutput::Stopped(end) => return Ok(Some(end)),
        }
        Ok(None)
    }

    /// Spawns a copy (its record and nonce are on disk already).
    fn start(&mut self, copy: String, a: &Assignment, nonce: &str) -> AgentInput {
        // The name was checked by the rules of `apply`, so it is a plain file name.
        let log_path = crate::logs::log_path(&self.cfg.state_dir, &copy);
        let spawned = process::spawn_copy(&Launch {
            command: &a.command,
            copy: &a.copy,
            workload: &a.workload,
            node: &self.cfg.node,
            agent_mark: &self.mark,
            nonce,
            env: &a.env,
            log: &log_path,
        });
        match spawned {
            Ok((child, start_ticks)) => {
                crate::failpoint::hit("agent-after-spawn");
                self.follow_output(&copy);
                self.unsaved_starts += 1;
                let pid = child.id();
                self.procs.insert(
                    copy.clone(),
                    Proc {
                        pid,
                        start_ticks,
                        child: Some(child),
                    },
                );
                AgentInput::Started {
                    copy,
                    pid,
                    start_ticks,
                }
            }
            Err(e) => AgentInput::StartFailed {
                copy,
                why: e.to_string(),
            },
        }
    }

    /// Looks at every process and readiness command: what ended becomes an input. A copy is its
    /// whole group: whatever its leader left in it is killed, and so is its probe.
    fn poll(&mut self, inputs: &mut VecDeque<AgentInput>) {
        let mut ended = Vec::new();
        for (copy, p) in &mut self.procs {
            let how = match &mut p.child {
                Some(child) => match child.try_wait() {
                    Ok(Some(status)) => Some(ended_of(status)),
                    Ok(None) => None,
                    Err(e) => Some(Ended::Other(format!("cannot wait: {e}"))),
                },
                None => (!process::is_alive(p.pid, p.start_ticks)).then_some(Ended::Unknown),
            };
            if let Some(how) = how {
                ended.push((copy.clone(), how));
            }
        }
        for (copy, how) in ended {
            if let Some(p) = self.procs.remove(&copy) {
                let _ = process::signal_group(p.pid, Signal::KILL);
            }
            if let Some(mut c) = self.checks.remove(&copy) {
                let _ = process::signal_group(c.id(), Signal::KILL);
                let _ = c.wait();
            }
            if let Some(m) = self.cfg.metrics.get() {
                m.agent.exited(&self.cfg.node, exit_cause(&how));
            }
            inputs.push_back(AgentInput::Exited { copy, how });
        }
        let mut done = Vec::new();
        for (copy, c) in &mut self.checks {
            match c.try_wait() {
                Ok(None) => {}
                Ok(Some(status)) => done.push((copy.clone(), status.success())),
                Err(_) => done.push((copy.clone(), false)),
            }
        }
        for (copy, ok) in done {
            self.checks.remove(&copy);
            inputs.push_back(AgentInput::ProbeDone { copy, ok });
        }
    }

    /// Reads the state file and finds the processes carrying the agent's mark: each record's
    /// live process if it is proven the agent's own (by its nonce: recorded before the process
    /// started, so even a copy whose pid was never recorded is recognised), and the marked
    /// processes no record claims.
    fn recover(&self) -> Result<Recovery, AgentError> {
        let saved = match read_node_state(&self.file()) {
            Ok(saved) => saved,
            // A damaged state file is no reason to stay down: the copies it named are found by
            // their mark, and without a record of their nonce they are stopped as foreign
            // (the real copies start again), as after a lost file.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                log(
                    &self.who,
                    format!(
                        "the state file {} is not valid ({e}): starting without it",
                        self.file().display()
                    ),
                );
                None
            }
            Err(source) => {
                return Err(AgentError::StateDir {
                    path: self.file(),
                    source,
                })
            }
        };
        Ok(recovery_from(
            saved,
            process::find_marked(&self.mark),
            crate::sandbox::own_uid(),
            crate::sandbox::proves_own,
        ))
    }

    /// Rotates the logs of running copies an older agent started (which write their files
    /// themselves) past the size limit and, with `sweep`, removes the logs of copies that ended
    /// longer ago than the retention ([`crate::retention`]). On a blocking thread, never on this
    /// loop; a tending still under way skips this one. The current log files' sizes go to the
    /// metrics first.
    fn tend_logs(&self, running: BTreeSet<String>, sweep: bool) {
        use std::sync::atomic::Ordering;
        if let Some(m) = self.cfg.metrics.get() {
            let bytes: u64 = running
                .iter()
                .map(|copy| {
                    let path = crate::logs::log_path(&self.cfg.state_dir, copy);
                    std::fs::metadata(&path).map_or(0, |m| m.len())
                })
                .sum();
            m.agent.log_bytes(&self.cfg.node, bytes);
        }
        if self.tending.swap(true, Ordering::SeqCst) {
            return;
        }
        let busy = Arc::clone(&self.tending);
        let (who, state_dir, max_bytes) = (
            self.who.clone(),
            self.cfg.state_dir.clone(),
            self.cfg.log_max_bytes,
        );
        let retention = self.cfg.log_retention.as_millis() as u64;
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || {
            tend_logs(
                &who, &state_dir, max_bytes, retention, &*store, running, sweep,
            );
            busy.store(false, Ordering::SeqCst);
        });
    }
}

/// The work of [`Driver::tend_logs`].
fn tend_logs(
    who: &str,
    state_dir: &std::path::Path,
    max_bytes: u64,
    retention: u64,
    store: &dyn Store,
    mut running: BTreeSet<String>,
    sweep: bool,
) {
    for copy in &running {
        let path = crate::logs::log_path(state_dir, copy);
        if crate::copy_output::pipe_path(&path).exists() {
            continue; // its reader rotates it
        }
        match crate::retention::rotate_log(&path, max_bytes) {
            Ok(true) => log(who, format!("rotated the log of {copy}")),
            Ok(false) => {}
            Err(e) => log(who, format!("cannot rotate {}: {e}", path.display())),
        }
    }
    if !sweep {
        return;
    }
    // The agents of one data directory share the folder: a copy running on any node keeps
    // its log, as its node's state file says.
    for st in read_all_node_states(state_dir) {
        running.extend(
            st.copies
                .into_iter()
                .filter(|r| r.phase != Phase::Exited)
                .map(|r| r.assignment.copy),
        );
    }
    let dir = state_dir.join("logs");
    let now = store.now_ms();
    if let Err(e) = crate::retention::sweep_logs(&dir, &running, now, retention) {
        log(who, format!("cannot sweep {}: {e}", dir.display()));
    }
}

/// Whether `request` writes the key `key`.
fn writes(request: &StoreRequest, key: &str) -> bool {
    match request {
        StoreRequest::Commit(txn) => txn
            .ops
            .iter()
            .any(|op| matches!(op, Op::Put { key: k, .. } if k == key)),
        _ => false,
    }
}

/// Counts one store call of the agent: its latency by kind and result, and a report's result.
fn count_call(
    m: &crate::metrics::AgentMetrics,
    node: &str,
    request: &StoreRequest,
    result: &crate::machine::StoreResult,
    began: std::time::Instant,
    report: &str,
) {
    let label = crate::metrics::result_label(result);
    let kind = crate::metrics::request_kind(request);
    m.store_call(node, kind, label, began.elapsed().as_secs_f64());
    if writes(request, report) {
        m.report_written(node, label);
    }
}

/// The node report `request` writes at `key`, if it writes one.
fn written_report(request: &StoreRequest, key: &str) -> Option<crate::model::NodeReport> {
    let StoreRequest::Commit(txn) = request else {
        return None;
    };
    txn.ops.iter().find_map(|op| match op {
        Op::Put { key: k, value, .. } if k == key => serde_json::from_str(value).ok(),
        _ => None,
    })
}

/// The `cause` label of an exit.
fn exit_cause(how: &Ended) -> &'static str {
    match how {
        Ended::Code(0) => "exit_zero",
        Ended::Code(_) => "exit_nonzero",
        Ended::Signal(_) => "signal",
        Ended::Unknown => "vanished",
        Ended::Other(_) => "other",
    }
}

/// How a child ended, as the machine takes it.
fn ended_of(status: std::process::ExitStatus) -> Ended {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => Ended::Code(c),
        (None, Some(s)) => Ended::Signal(s),
        _ => Ended::Other("ended".into()),
    }
}

/// Runs an agent until `shutdown` fires, then stops every copy and reports them exited.
pub async fn run_agent(
    store: Arc<dyn Store>,
    cfg: AgentConfig,
    mut shutdown: Shutdown,
) -> Result<(), AgentError> {
    let state_err = |source| AgentError::StateDir {
        path: cfg.state_dir.clone(),
        source,
    };
    crate::store::identity::create_private_dir(&cfg.state_dir.join("logs")).map_err(state_err)?;
    let canonical = cfg.state_dir.canonicalize().map_err(state_err)?;
    let mark = canonical.join(&cfg.node).display().to_string();
    // One agent per node: first on this data directory (a lock the kernel drops if we die),
    // then in the store (a lease, on any machine: the machine's claim).
    let _lock = DirLock::acquire(&cfg.state_dir, &cfg.node)?;
    let ms = |d: Duration| d.as_millis() as u64;
    let core_cfg = AgentCoreConfig {
        host: node::host_id(),
        place: canonical.display().to_string(),
        agent_pid: std::process::id(),
        report_every_ms: ms(cfg.report_every),
        report_delay_ms: ms(cfg.report_delay),
        report_resync_ms: ms(cfg.report_resync),
        report_delays: cfg.report_delays.clone(),
        sync_every_ms: ms(cfg.sync_every),
        lease_ttl_ms: ms(cfg.lease_ttl),
        simulate_copies: cfg.simulate_copies,
        request_timeout_ms: REQUEST_TIMEOUT_MS,
        nonces: Nonces::Random,
        started_ms: cfg.started_ms,
        ..AgentCoreConfig::new(cfg.node.clone())
    };
    // On a store that pushes changes, the machine keeps a watch cache of the node's
    // assignments and kill requests, fed by the watch this driver follows for it.
    let core_cfg = AgentCoreConfig {
        watch_cache: store.watches(),
        ..core_cfg
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tick = tokio::time::interval(cfg.tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut driver = Driver {
        who: format!("agent {}", cfg.node),
        cfg,
        mark,
        store: Arc::clone(&store),
        watches: BTreeMap::new(),
        procs: BTreeMap::new(),
        checks: BTreeMap::new(),
        replies: tx,
        unsaved_starts: 0,
        lease_file_failing: false,
        tending: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        lags: Default::default(),
    };
    if let Some(m) = driver.cfg.metrics.get() {
        m.agent.announce(&driver.cfg.node);
    }
    let mut fencings = 0;
    // The machine's clock is the store's (its times go into reports and events), kept from
    // going backwards as the machine's contract asks.
    let mut clock = store.now_ms();
    let mut core = AgentCore::new(core_cfg, clock);
    // What an earlier agent here wrote down of its lease: the first claim's fence counts from
    // it too. A file that cannot be read costs only that.
    let stamp = lease_file(&driver.cfg.state_dir, &driver.cfg.node);
    match read_lease_file(&stamp) {
        Ok(Some(sent_ms)) => core.inherit_renewal(sent_ms),
        Ok(None) => {}
        Err(e) => log(
            &driver.who,
            format!(
                "ignoring {}: {e}; the first claim's fence counts from this agent's start",
                stamp.display()
            ),
        ),
    }
    let mut inputs = VecDeque::from([AgentInput::Tick]);
    let mut asked_to_stop = false;
    loop {
        while let Some(input) = inputs.pop_front() {
            clock = clock.max(store.now_ms());
            for out in core.step(clock, input) {
                if let Some(end) = driver.carry(out, &mut inputs).await? {
                    return end;
                }
            }
            if let Some(m) = driver.cfg.metrics.get() {
                m.agent.fenced(&driver.cfg.node, core.fencings() - fencings);
                fencings = core.fencings();
            }
        }
        tokio::select! {
            _ = shutdown.wait(), if !asked_to_stop => {
                asked_to_stop = true;
                inputs.push_back(AgentInput::Shutdown);
            }
            Some(i) = rx.recv() => {
                inputs.push_back(i);
                while let Ok(i) = rx.try_recv() {
                    inputs.push_back(i);
                }
            }
            _ = tick.tick() => {
                driver.poll(&mut inputs);
                inputs.push_back(AgentInput::Tick);
            }
        }
    }
}
