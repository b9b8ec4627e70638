//! The node agent: runs the copies assigned to its node as real processes and reports them.
//!
//! Every tick it
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
//! the store ([`crate::node`]). It keeps that lease alive, and if it cannot, it stops every copy
//! before the lease can end, then claims the name again.
//!
//! Its local state file (`{state_dir}/{node}.json`) records every copy (pid, start time, phase)
//! as soon as it is started. After a crash, the next agent adopts the copies whose assignment
//! still exists and reaps the others. Copies started but not yet recorded are found by the mark
//! in their environment ([`ENV_AGENT`](crate::process::ENV_AGENT)). A copy that exited stays
//! recorded until its assignment is removed, so it is never started a second time.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use rustix::process::Signal;
use serde::{Deserialize, Serialize};

use crate::events::{self, CopyEvent, CopyEventKind};
use crate::model::{
    decode, encode, placements_of, report_key, Assignment, CopyReport, NodeReport, Phase,
};
use crate::node::{self, DirLock, Fence, LeaseState, NodeError, NodeRecord};
use crate::process::{self, Launch};
use crate::remote::{self, LiveCopy, LiveRecord};
use crate::rt::{blocking, log, Reach, Shutdown};
use crate::store::{LeaseId, Revision, Store, StoreError, Txn};

/// How often a failed readiness command is run again.
const READINESS_RETRY_MS: u64 = 100;
/// How often the agent looks at its processes, unless configured otherwise.
const TICK: Duration = Duration::from_millis(25);
/// The grace period given to a copy found running with no record of its assignment.
const UNKNOWN_GRACE_MS: u64 = 1_000;

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
    /// Jittered added delays, one per report in turn, in place of `report_delay` when not empty
    /// ([`crate::report_delay`]).
    pub report_delays: crate::report_delay::ReportDelays,
    /// How often the agent reads its assignments.
    pub sync_every: Duration,
    /// How often the agent looks at its processes: readiness, exits and stops are noticed up to
    /// one tick late, and reports and assignment reads happen on ticks.
    pub tick: Duration,
    /// A copy's log rotates past this size ([`crate::retention`]).
    pub log_max_bytes: u64,
    /// The log of a copy that ended is removed this long after its last write.
    pub log_retention: Duration,
    /// The node lease's time to live: an agent that cannot renew it for this long is lost, and
    /// it stops its own copies before then ([`crate::node`]).
    pub lease_ttl: Duration,
    /// Report copies without starting processes (benchmarks of the control plane): a simulated
    /// copy has pid 0, becomes ready after its startup time, and ends only when it is stopped.
    pub simulate_copies: bool,
}

impl AgentConfig {
    /// An agent for `node` keeping state in `state_dir`: R = 1s, no added delay, assignments
    /// read every 100ms, a tick every 25ms, a node lease of 10s.
    pub fn new(node: impl Into<String>, state_dir: impl Into<PathBuf>) -> Self {
        Self {
            node: node.into(),
            state_dir: state_dir.into(),
            report_every: Duration::from_secs(1),
            report_delay: Duration::ZERO,
            report_delays: Default::default(),
            sync_every: Duration::from_millis(100),
            tick: TICK,
            log_max_bytes: crate::retention::DEFAULT_LOG_MAX_BYTES,
            log_retention: Duration::from_millis(crate::retention::DEFAULT_RETENTION_MS),
            lease_ttl: Duration::from_secs(10),
            simulate_copies: false,
        }
    }
}

/// One copy as the agent records it on disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyRecord {
    /// The assignment it runs: identity, owner and what to run.
    pub assignment: Assignment,
    /// The assignment's `create_revision`: which incarnation of the name this copy is.
    #[serde(default)]
    pub incarnation: Revision,
    /// Its process (and process group) id; 0 if it never started.
    pub pid: u32,
    /// The process's start time in clock ticks since boot.
    pub start_ticks: u64,
    /// When it was started, in store milliseconds.
    pub started_ms: u64,
    /// Its phase.
    pub phase: Phase,
    /// When it became ready.
    pub ready_ms: Option<u64>,
    /// When it was seen to have ended.
    pub exited_ms: Option<u64>,
    /// How it ended.
    pub exit: Option<String>,
    /// Whether it is being stopped.
    pub stopping: bool,
    /// The copy's secret nonce, also in its environment ([`crate::sandbox`]): recorded before
    /// the process starts, it proves after a crash which processes this agent started.
    #[serde(default)]
    pub nonce: String,
}

/// An agent's state file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    /// The node.
    pub node: String,
    /// The agent process that wrote it.
    pub agent_pid: u32,
    /// Every copy the agent knows, including exited ones whose assignment still exists.
    pub copies: Vec<CopyRecord>,
}

/// The state file of `node` under `state_dir`.
pub fn state_file(state_dir: &Path, node: &str) -> PathBuf {
    state_dir.join(format!("{node}.json"))
}

/// Reads a node's state file; `None` if there is none.
pub fn read_node_state(path: &Path) -> std::io::Result<Option<NodeState>> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads every node state file under `state_dir`.
pub fn read_all_node_states(state_dir: &Path) -> Vec<NodeState> {
    let Ok(dir) = std::fs::read_dir(state_dir) else {
        return Vec::new();
    };
    let mut out: Vec<NodeState> = dir
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| read_node_state(&e.path()).ok().flatten())
        .collect();
    out.sort_by(|a, b| a.node.cmp(&b.node));
    out
}

/// Why an agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The state directory cannot be used; check its permissions.
    #[error("state directory {path}: {source}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The store failed while the agent was starting.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The node's name is held by another agent, or could not be claimed.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// Another agent took the node's name while this one was fenced (cut off from the store):
    /// this one stopped its copies and exits.
    #[error("{0}")]
    Replaced(String),
}

impl AgentError {
    /// Whether the user must fix this: the node name is taken.
    pub fn is_refusal(&self) -> bool {
        match self {
            AgentError::Node(e) => e.is_refusal(),
            AgentError::Replaced(_) => true,
            _ => false,
        }
    }
}

/// A copy in the agent's hands.
#[derive(Debug)]
struct Local {
    record: CopyRecord,
    /// The child handle, for copies this agent started; adopted copies have none.
    child: Option<Child>,
    /// A readiness command in progress.
    check: Option<Child>,
    next_check_ms: u64,
    /// When SIGKILL follows the SIGTERM of a stop.
    kill_at_ms: Option<u64>,
    killed: bool,
}

impl Local {
    fn new(record: CopyRecord, child: Option<Child>) -> Self {
        Self {
            record,
            child,
            check: None,
            next_check_ms: 0,
            kill_at_ms: None,
            killed: false,
        }
    }

    fn exited(&self) -> bool {
        self.record.phase == Phase::Exited
    }

    fn mark_exited(&mut self, now: u64, how: String) {
        self.record.phase = Phase::Exited;
        self.record.exited_ms = Some(now);
        self.record.exit = Some(how);
        // Whatever the leader left in its group goes too: a copy is its whole group.
        if self.record.pid != 0 {
            let _ = process::signal_group(self.record.pid, Signal::KILL);
        }
        if let Some(mut c) = self.check.take() {
            let _ = process::signal_group(c.id(), Signal::KILL);
            let _ = c.wait();
        }
    }
}

/// The agent's state between ticks.
struct Agent {
    cfg: AgentConfig,
    mark: String,
    copies: BTreeMap<String, Local>,
    dirty: bool,
    report_rev: Revision,
    queue: VecDeque<(u64, NodeReport)>,
    /// Event-log entries not written yet (key, value).
    events: Vec<(String, String)>,
    /// What the last report written showed running, (workload, n) → incarnation: the ledger's
    /// view of this node.
    shown: BTreeMap<(String, u64), Revision>,
    /// Store entries refused as forged or damaged, by key, so each is logged once.
    refused: std::collections::BTreeSet<String>,
    /// The node lease's fence: it stops the copies by itself when the lease cannot be kept.
    fence: Arc<Fence>,
    /// The live set last written to `/live/{node}`, and under which lease.
    live_written: Option<(LeaseId, Vec<LiveCopy>)>,
}

impl Agent {
    fn file(&self) -> PathBuf {
        state_file(&self.cfg.state_dir, &self.cfg.node)
    }

    fn save(&mut self) {
        if !self.dirty {
            return;
        }
        let state = NodeState {
            node: self.cfg.node.clone(),
            agent_pid: std::process::id(),
            copies: self.copies.values().map(|l| l.record.clone()).collect(),
        };
        let path = self.file();
        match crate::store::identity::write_private(&path, encode(&state).as_bytes()) {
            Ok(()) => self.dirty = false,
            Err(e) => log(&self.who(), format!("cannot write {}: {e}", path.display())),
        }
    }

    fn who(&self) -> String {
        format!("agent {}", self.cfg.node)
    }

    /// Queues an event-log entry for copy `r`.
    fn log_event(&mut self, kind: CopyEventKind, r: &CopyRecord, at_ms: u64) {
        let event = CopyEvent {
            at_ms,
            node: self.cfg.node.clone(),
            pid: (kind == CopyEventKind::Start).then_some(r.pid),
            commanded: kind == CopyEventKind::Exit && r.stopping,
            how: if kind == CopyEventKind::Exit {
                r.exit.clone()
            } else {
                None
            },
        };
        let key =
            events::copy_event_key(&r.assignment.workload, kind, r.assignment.n, r.incarnation);
        self.events.push((key, encode(&event)));
    }

    /// After `report` was written at `now`: logs the copies it brought onto the ledger and those
    /// it took off.
    fn log_ledger_changes(&mut self, report: &NodeReport, now: u64) {
        let shown: BTreeMap<(String, u64), Revision> = report
            .copies
            .iter()
            .filter(|c| c.phase == Phase::Running)
            .map(|c| ((c.workload.clone(), c.n), c.incarnation))
            .collect();
        let event = encode(&CopyEvent {
            at_ms: now,
            node: self.cfg.node.clone(),
            pid: None,
            commanded: false,
            how: None,
        });
        for ((w, n), inc) in &shown {
            if self.shown.get(&(w.clone(), *n)) != Some(inc) {
                let key = events::copy_event_key(w, CopyEventKind::Seen, *n, *inc);
                self.events.push((key, event.clone()));
            }
        }
        for ((w, n), inc) in &self.shown {
            if shown.get(&(w.clone(), *n)) != Some(inc) {
                let key = events::copy_event_key(w, CopyEventKind::Unseen, *n, *inc);
                self.events.push((key, event.clone()));
            }
        }
        self.shown = shown;
    }

    /// Logs the store entries refused since the last call, each once.
    fn log_refused(&mut self, refused: Vec<(String, String)>) {
        for (key, why) in refused {
            if self.refused.insert(key.clone()) {
                log(
                    &self.who(),
                    format!("refused the entry {}: {why}", key.escape_debug()),
                );
            }
        }
    }

    /// Starts copies: first records each with a fresh nonce (one state-file write for all),
    /// then spawns each, then records their pids (one more write). The nonce is on disk before
    /// the process exists, so after a crash at any point a process holding it is this agent's
    /// and one without it is not; the pid need not be on disk for that.
    fn start_all(&mut self, batch: Vec<(Assignment, Revision)>, now: u64) {
        if batch.is_empty() {
            return;
        }
        let simulated = self.cfg.simulate_copies;
        let mut pending = Vec::with_capacity(batch.len());
        for (a, incarnation) in batch {
            let record = CopyRecord {
                assignment: a,
                incarnation,
                pid: 0,
                start_ticks: 0,
                started_ms: now,
                phase: Phase::Starting,
                ready_ms: None,
                exited_ms: None,
                exit: None,
                stopping: false,
                // A simulated copy has no process to prove anything about.
                nonce: if simulated {
                    String::new()
                } else {
                    crate::sandbox::new_nonce()
                },
            };
            if simulated {
                // Benchmarks of the control plane: a record and a start event, no process.
                self.log_event(CopyEventKind::Start, &record, now);
                self.copies
                    .insert(record.assignment.copy.clone(), Local::new(record, None));
                continue;
            }
            let copy = record.assignment.copy.clone();
            self.copies
                .insert(copy.clone(), Local::new(record.clone(), None));
            pending.push(record);
        }
        self.dirty = true;
        if simulated {
            return;
        }
        self.save();
        let mut started = Vec::with_capacity(pending.len());
        for mut record in pending {
            let copy = record.assignment.copy.clone();
            // The name was checked by the rules of `apply` (`assignments_of`), so it is a
            // plain file name.
            let log_path = crate::logs::log_path(&self.cfg.state_dir, &copy);
            let a = &record.assignment;
            let spawned = process::spawn_copy(&Launch {
                command: &a.command,
                copy: &a.copy,
                workload: &a.workload,
                node: &self.cfg.node,
                agent_mark: &self.mark,
                nonce: &record.nonce,
                env: &a.env,
                log: &log_path,
            });
            // A tick that starts many copies takes a while: each records when it really
            // started.
            let now = crate::store::wall_ms().max(now);
            record.started_ms = now;
            let local = match spawned {
                Ok((child, start_ticks)) => {
                    crate::failpoint::hit("agent-after-spawn");
                    record.pid = child.id();
                    record.start_ticks = start_ticks;
                    log(&self.who(), format!("started {copy} (pid {})", record.pid));
                    Local::new(record, Some(child))
                }
                Err(e) => {
                    log(&self.who(), format!("cannot start {copy}: {e}"));
                    let mut l = Local::new(record, None);
                    l.mark_exited(now, format!("failed to start: {e}"));
                    l
                }
            };
            started.push((local.record.clone(), now));
            self.copies.insert(copy, local);
        }
        self.dirty = true;
        self.save();
        for (record, at) in started {
            crate::failpoint::hit("agent-after-record");
            self.log_event(CopyEventKind::Start, &record, at);
            if record.phase == Phase::Exited {
                self.log_event(CopyEventKind::Exit, &record, at);
            }
        }
    }

    fn begin_stop(&mut self, copy: &str, grace_ms: u64, now: u64) {
        let who = self.who();
        let Some(l) = self.copies.get_mut(copy) else {
            return;
        };
        if l.exited() || l.record.stopping {
            return;
        }
        log(&who, format!("stopping {copy} (pid {})", l.record.pid));
        l.record.stopping = true;
        l.kill_at_ms = Some(now + grace_ms);
        let _ = process::signal_group(l.record.pid, Signal::TERM);
        self.dirty = true;
    }

    /// Looks at every process: exits, readiness, overdue kills.
    fn watch(&mut self, now: u64) {
        let who = self.who();
        let mut gone = Vec::new();
        let mut happened = Vec::new();
        let simulated = self.cfg.simulate_copies;
        for (copy, l) in &mut self.copies {
            if l.exited() {
                continue;
            }
            let ended = match &mut l.child {
                // A simulated copy (pid 0) has no process: it ends when it is stopped.
                None if simulated && l.record.pid == 0 => l
                    .kill_at_ms
                    .is_some()
                    .then(|| "stopped (simulated copy)".to_owned()),
                Some(child) => match child.try_wait() {
                    Ok(Some(status)) => Some(process::describe_exit(status)),
                    Ok(None) => None,
                    Err(e) => Some(format!("cannot wait: {e}")),
                },
                None => (!process::is_alive(l.record.pid, l.record.start_ticks))
                    .then(|| "ended (adopted: status unknown)".to_owned()),
            };
            if let Some(how) = ended {
                log(&who, format!("{copy} ended: {how}"));
                l.mark_exited(now, how);
                happened.push((CopyEventKind::Exit, l.record.clone()));
                self.dirty = true;
                if l.record.stopping {
                    gone.push(copy.clone());
                }
                continue;
            }
            if l.record.stopping {
                if !l.killed && l.kill_at_ms.is_some_and(|t| now >= t) {
                    log(&who, format!("{copy} outlived its grace period: SIGKILL"));
                    let _ = process::signal_group(l.record.pid, Signal::KILL);
                    l.killed = true;
                }
                continue;
            }
            if l.record.phase == Phase::Starting && ready(l, now) {
                l.record.phase = Phase::Running;
                l.record.ready_ms = Some(now);
                happened.push((CopyEventKind::Ready, l.record.clone()));
                self.dirty = true;
            }
        }
        for (kind, record) in happened {
            self.log_event(kind, &record, now);
        }
        // A copy stopped because its assignment is gone has nothing left to report.
        for copy in gone {
            self.copies.remove(&copy);
        }
    }

    /// Starts what is assigned and not started; stops what runs and is no longer assigned.
    fn sync(&mut self, assigned: BTreeMap<String, (Assignment, Revision)>, now: u64) {
        let unwanted: Vec<(String, bool, u64)> = self
            .copies
            .iter()
            .filter(|(copy, l)| {
                assigned
                    .get(*copy)
                    .is_none_or(|(_, inc)| *inc != l.record.incarnation)
            })
            .map(|(c, l)| (c.clone(), l.exited(), l.record.assignment.grace_ms))
            .collect();
        for (copy, exited, grace) in unwanted {
            if exited {
                self.copies.remove(&copy);
                self.dirty = true;
            } else {
                self.begin_stop(&copy, grace, now);
            }
        }
        // A name assigned again waits until its earlier copy has stopped and been forgotten.
        let batch = assigned
            .into_iter()
            .filter(|(copy, _)| !self.copies.contains_key(copy))
            .map(|(_, a)| a)
            .collect();
        self.start_all(batch, now);
    }

    /// Rotates the logs of running copies past the size limit and removes the logs of copies
    /// that ended longer ago than the retention ([`crate::retention`]).
    fn tend_logs(&self, now: u64, sweep: bool) {
        let who = self.who();
        let running: std::collections::BTreeSet<String> = self
            .copies
            .iter()
            .filter(|(_, l)| !l.exited())
            .map(|(c, _)| c.clone())
            .collect();
        for copy in &running {
            let path = crate::logs::log_path(&self.cfg.state_dir, copy);
            match crate::retention::rotate_log(&path, self.cfg.log_max_bytes) {
                Ok(true) => log(&who, format!("rotated the log of {copy}")),
                Ok(false) => {}
                Err(e) => log(&who, format!("cannot rotate {}: {e}", path.display())),
            }
        }
        if !sweep {
            return;
        }
        // The agents of one data directory share the folder: a copy running on any node keeps
        // its log, as its node's state file says.
        let mut running = running;
        for st in read_all_node_states(&self.cfg.state_dir) {
            running.extend(
                st.copies
                    .into_iter()
                    .filter(|r| r.phase != Phase::Exited)
                    .map(|r| r.assignment.copy),
            );
        }
        let dir = self.cfg.state_dir.join("logs");
        let retention = self.cfg.log_retention.as_millis() as u64;
        if let Err(e) = crate::retention::sweep_logs(&dir, &running, now, retention) {
            log(&who, format!("cannot sweep {}: {e}", dir.display()));
        }
    }

    /// The copies running and ready now, as `/live/{node}` shows them.
    fn live_set(&self) -> Vec<LiveCopy> {
        self.copies
            .values()
            .filter(|l| l.record.phase == Phase::Running && !l.record.stopping)
            .map(|l| LiveCopy {
                copy: l.record.assignment.copy.clone(),
                workload: l.record.assignment.workload.clone(),
                owner_uid: l.record.assignment.owner_uid,
                n: l.record.assignment.n,
                incarnation: l.record.incarnation,
                pid: l.record.pid,
            })
            .collect()
    }

    /// The process groups of the copies that run now, for the fence.
    fn groups(&self) -> Vec<(u32, u64)> {
        self.copies
            .values()
            .filter(|l| !l.exited() && l.record.pid != 0)
            .map(|l| (l.record.pid, l.record.start_ticks))
            .collect()
    }

    fn observe(&self, now: u64) -> NodeReport {
        let mut copies: Vec<CopyReport> = self
            .copies
            .values()
            .map(|l| {
                let r = &l.record;
                CopyReport {
                    copy: r.assignment.copy.clone(),
                    workload: r.assignment.workload.clone(),
                    owner_uid: r.assignment.owner_uid,
                    n: r.assignment.n,
                    incarnation: r.incarnation,
                    phase: r.phase,
                    pid: r.pid,
                    start_ticks: r.start_ticks,
                    started_ms: r.started_ms,
                    ready_ms: r.ready_ms,
                    exited_ms: r.exited_ms,
                    exit: r.exit.clone(),
                    stopping: r.stopping,
                }
            })
            .collect();
        copies.sort_by(|a, b| (&a.workload, a.n).cmp(&(&b.workload, b.n)));
        NodeReport {
            node: self.cfg.node.clone(),
            observed_ms: now,
            reported_ms: now,
            agent_pid: std::process::id(),
            copies,
        }
    }
}

/// Whether a starting copy is ready now; runs its readiness command if it has one.
fn ready(l: &mut Local, now: u64) -> bool {
    let Some(cmd) = l.record.assignment.readiness.clone() else {
        return now >= l.record.started_ms + l.record.assignment.startup_ms;
    };
    if let Some(check) = &mut l.check {
        match check.try_wait() {
            Ok(None) => return false,
            Ok(Some(status)) => {
                l.check = None;
                if status.success() {
                    return true;
                }
                l.next_check_ms = now + READINESS_RETRY_MS;
            }
            Err(_) => {
                l.check = None;
                l.next_check_ms = now + READINESS_RETRY_MS;
            }
        }
    }
    if l.check.is_none() && now >= l.next_check_ms {
        match process::spawn_check(&cmd, &l.record.assignment.copy, &l.record.assignment.env) {
            Ok(c) => l.check = Some(c),
            Err(_) => l.next_check_ms = now + READINESS_RETRY_MS,
        }
    }
    false
}

/// The assignments of a node by copy identity, each with its incarnation.
type Assigned = BTreeMap<String, (Assignment, Revision)>;

/// Reads the assignments of `node`, by copy identity, each with its incarnation, and the
/// entries refused (key, reason). It reads the node's index only: with A agents and N copies,
/// every agent reading every assignment cost A·N keys per read
/// (`docs/performance-runtime.md`).
///
/// Nothing read from the store is trusted: an entry that does not decode, breaks a rule of
/// `apply` ([`crate::rules::check_assignment`]: a copy name that is not `{workload}-{n}`, a
/// command with a NUL byte, …) or does not sit at its own key is refused, and never reaches a
/// path or a command.
#[allow(clippy::type_complexity)]
fn assignments_of(
    store: &dyn Store,
    node: &str,
) -> Result<(Assigned, Vec<(String, String)>), StoreError> {
    let read = store.read(&[&placements_of(node)])?;
    parse_assignments(&read.entries, node)
}

/// A kill request addressed to this node: key, request, revision, the requester's lease.
type Kill = (
    String,
    remote::KillRequest,
    Revision,
    Option<crate::store::LeaseId>,
);

/// One read of everything the store asks of `node`: its assignments and its kill requests.
#[allow(clippy::type_complexity)]
fn node_work(
    store: &dyn Store,
    node: &str,
) -> Result<(Assigned, Vec<(String, String)>, Vec<Kill>), StoreError> {
    let placements = placements_of(node);
    let read = store.read(&[&placements, &remote::kills_of(node)])?;
    let (placed, asked): (Vec<_>, Vec<_>) = read
        .entries
        .into_iter()
        .partition(|e| e.key.starts_with(&placements));
    let (assigned, forged) = parse_assignments(&placed, node)?;
    Ok((assigned, forged, remote::pending_kills(&asked, node)))
}

/// The assignments among `entries`, and the entries refused with why.
#[allow(clippy::type_complexity)]
fn parse_assignments(
    entries: &[crate::store::Entry],
    node: &str,
) -> Result<(Assigned, Vec<(String, String)>), StoreError> {
    let mut out = BTreeMap::new();
    let mut refused = Vec::new();
    for e in entries {
        let a: Assignment = match decode(e) {
            Ok(a) => a.value,
            Err(err) => {
                refused.push((e.key.clone(), err.to_string()));
                continue;
            }
        };
        let checked = crate::rules::check_assignment(&a, node).and_then(|()| {
            let own = crate::model::placement_key(node, &a.workload, a.n);
            if e.key == own {
                Ok(())
            } else {
                Err(format!("it sits at {}, not at its own key {own}", e.key))
            }
        });
        match checked {
            Ok(()) => {
                out.insert(a.copy.clone(), (a, e.create_revision));
            }
            Err(why) => refused.push((e.key.clone(), why)),
        }
    }
    Ok((out, refused))
}

/// Writes a report, compare-and-set on the last revision this agent wrote. Another writer on
/// the same key (a second agent claiming this node) is logged and overwritten.
fn publish(
    store: &dyn Store,
    node: &str,
    last: Revision,
    report: &NodeReport,
) -> Result<Revision, StoreError> {
    let key = report_key(node);
    match store.commit(&Txn::new().expect(&key, last).put(&key, encode(report))) {
        Err(StoreError::Conflict { found, .. }) => {
            log(
                &format!("agent {node}"),
                "the report changed under this agent: is another agent running as this node?",
            );
            store.commit(&Txn::new().expect(&key, found).put(&key, encode(report)))
        }
        other => other,
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
    // then in the store (a lease, on any machine).
    let _lock = DirLock::acquire(&cfg.state_dir, &cfg.node)?;
    let record = NodeRecord {
        node: cfg.node.clone(),
        host: node::host_id(),
        place: canonical.display().to_string(),
        agent_pid: std::process::id(),
        acquired_ms: store.now_ms(),
        ttl_ms: cfg.lease_ttl.as_millis() as u64,
        report_every_ms: cfg.report_every.as_millis() as u64,
        lease: 0,
    };
    let rec = record.clone();
    let claim = blocking(&store, move |s| node::claim(s, &rec)).await?;
    log(
        &format!("agent {}", cfg.node),
        format!(
            "holds node lease {} (ttl {}ms{})",
            claim.lease,
            claim.ttl_ms,
            if claim.adopted {
                ", taken over from the previous agent here"
            } else {
                ""
            }
        ),
    );
    let fence = Fence::new(claim.lease);
    let (keeper_stop, keeper_shutdown) = crate::rt::shutdown_pair();
    let keeper = tokio::spawn(node::keep(
        Arc::clone(&store),
        record,
        claim,
        Arc::clone(&fence),
        keeper_shutdown,
    ));
    let mut agent = Agent {
        fence,
        live_written: None,
        mark,
        copies: BTreeMap::new(),
        dirty: true,
        report_rev: 0,
        queue: VecDeque::new(),
        events: Vec::new(),
        shown: BTreeMap::new(),
        refused: Default::default(),
        cfg,
    };
    let who = agent.who();

    // Recovery: adopt or reap what a previous agent of this node left behind.
    let node = agent.cfg.node.clone();
    let ((assigned, refused), last_report) = blocking(&store, move |s| {
        let assigned = assignments_of(s, &node)?;
        let report = s.get(&report_key(&node))?;
        Ok::<_, StoreError>((assigned, report))
    })
    .await?;
    agent.log_refused(refused);
    let now = store.now_ms();
    agent.report_rev = last_report.as_ref().map_or(0, |e| e.mod_revision);
    if let Some(e) = &last_report {
        // The ledger still shows what the last agent reported.
        let before = decode::<NodeReport>(e)?.value;
        agent.log_ledger_changes(&before, now);
        agent.events.clear();
    }
    recover(&mut agent, &assigned, last_report.as_ref(), now)?;
    agent.sync(assigned, now);
    agent.save();
    let first = agent.observe(now);
    let node = agent.cfg.node.clone();
    let rev = agent.report_rev;
    let written = first.clone();
    agent.report_rev = blocking(&store, move |s| publish(s, &node, rev, &first)).await?;
    agent.log_ledger_changes(&written, now);
    flush_events(&store, &mut agent).await;
    log(&who, format!("ready with {} copies", agent.copies.len()));

    // On a store that pushes changes, the node's assignments come from a watch cache.
    let placements = placements_of(&agent.cfg.node);
    let kills = remote::kills_of(&agent.cfg.node);
    let (assigned_store, _cache) = crate::cache::cached(&store, &[&placements, &kills]);
    let report_every = agent.cfg.report_every.as_millis() as u64;
    let sync_every = agent.cfg.sync_every.as_millis() as u64;
    let delay = agent.cfg.report_delay.as_millis() as u64;
    let mut next_sync = now + sync_every;
    let mut next_report = now + report_every;
    let mut next_logs = now;
    let mut next_sweep = now;
    let mut tick = tokio::time::interval(agent.cfg.tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut refused = None;
    let mut reach = Reach::default();
    // Once the store is lost, the agent stops acting on it: it stops its copies, which nobody
    // can manage any more, and writes nothing to the store.
    let mut lost: Option<StoreError> = None;
    loop {
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = tick.tick() => {}
        }
        let now = store.now_ms();
        agent.watch(now);
        agent.fence.set_groups(agent.groups());
        match agent.fence.state() {
            LeaseState::Held(_) => {}
            LeaseState::Fenced => {
                // The fence stops the copies; observations taken before it must never reach
                // the ledger, and nothing starts until the name is held again.
                agent.queue.clear();
                agent.save();
                continue;
            }
            LeaseState::Refused => {
                refused = agent.fence.refusal();
                break;
            }
        }
        if now >= next_sync {
            next_sync = now + sync_every;
            let node = agent.cfg.node.clone();
            match blocking(&assigned_store, move |s| node_work(s, &node)).await {
                Ok((assigned, forged, kills)) => {
                    reach.answered(&who);
                    agent.log_refused(forged);
                    agent.sync(assigned, now);
                    carry_out_kills(&store, &mut agent, kills).await;
                }
                Err(e) if e.is_lost() => {
                    lost = Some(e);
                    break;
                }
                Err(e) => reach.failed(&who, format!("cannot read assignments: {e}")),
            }
        }
        agent.save();
        if now >= next_logs {
            next_logs = now + 1_000;
            let sweep = now >= next_sweep;
            if sweep {
                next_sweep = now + 10_000;
            }
            agent.tend_logs(now, sweep);
        }
        if let LeaseState::Held(lease) = agent.fence.state() {
            publish_live_set(&store, &mut agent, lease, now).await;
        }
        if now >= next_report {
            next_report = now + report_every;
            let delay = agent.cfg.report_delays.next_ms(delay);
            agent.queue.push_back((now + delay, agent.observe(now)));
        }
        let mut due = None;
        while agent.queue.front().is_some_and(|(at, _)| *at <= now) {
            due = agent.queue.pop_front().map(|(_, r)| r);
        }
        if let Some(mut report) = due {
            report.reported_ms = now;
            let node = agent.cfg.node.clone();
            let rev = agent.report_rev;
            let written = report.clone();
            match blocking(&store, move |s| publish(s, &node, rev, &report)).await {
                Ok(r) => {
                    crate::failpoint::hit("agent-after-report");
                    agent.report_rev = r;
                    agent.log_ledger_changes(&written, now);
                }
                Err(e) if e.is_lost() => {
                    lost = Some(e);
                    break;
                }
                Err(e) => log(&who, format!("cannot report: {e}")),
            }
        }
        if let Some(e) = flush_events(&store, &mut agent).await {
            lost = Some(e);
            break;
        }
    }
    if let Some(e) = &lost {
        log(&who, format!("{e}: this agent stops its copies and exits"));
    }

    // Shutdown: stop every copy, wait for them, report at once.
    if lost.is_none() {
        log(&who, "shutting down: stopping copies");
    }
    agent.queue.clear();
    let now = store.now_ms();
    let running: Vec<(String, u64)> = agent
        .copies
        .iter()
        .filter(|(_, l)| !l.exited())
        .map(|(c, l)| (c.clone(), l.record.assignment.grace_ms))
        .collect();
    let longest = running.iter().map(|r| r.1).max().unwrap_or(0);
    for (copy, grace) in &running {
        agent.begin_stop(copy, *grace, now);
        // The copy is stopping for shutdown, not because its assignment went: keep its record
        // as exited so that a restarted agent does not start it again.
        if let Some(l) = agent.copies.get_mut(copy) {
            l.record.stopping = false;
        }
    }
    let deadline = now + longest + 2_000;
    loop {
        let now = store.now_ms();
        for l in agent.copies.values_mut() {
            if !l.exited() && !l.killed && l.kill_at_ms.is_some_and(|t| now >= t) {
                let _ = process::signal_group(l.record.pid, Signal::KILL);
                l.killed = true;
            }
        }
        agent.watch(now);
        if agent.copies.values().all(Local::exited) || now >= deadline {
            break;
        }
        tokio::time::sleep(TICK).await;
    }
    agent.dirty = true;
    agent.save();
    if let Some(e) = lost {
        return Err(AgentError::Store(e));
    }
    let now = store.now_ms();
    let last = agent.observe(now);
    let node = agent.cfg.node.clone();
    let rev = agent.report_rev;
    let written = last.clone();
    match blocking(&store, move |s| publish(s, &node, rev, &last)).await {
        Ok(_) => agent.log_ledger_changes(&written, now),
        Err(e) => log(&who, format!("cannot write the last report: {e}")),
    }
    flush_events(&store, &mut agent).await;
    // Give the name up last, with nothing left running: the node is lost at once, and the
    // controller reassigns its names without waiting for the lease to run out.
    keeper_stop.fire();
    if let Ok(Some(lease)) = keeper.await {
        if let Err(e) = blocking(&store, move |s| s.revoke(lease)).await {
            log(&who, format!("cannot give up the node lease: {e}"));
        }
    }
    log(&who, "stopped");
    match refused {
        Some(why) => Err(AgentError::Replaced(why)),
        None => Ok(()),
    }
}

/// Writes `/live/{node}` if the set of ready copies changed (or the lease did), at once: `get`
/// reads it, so it carries no emulated report delay.
async fn publish_live_set(store: &Arc<dyn Store>, agent: &mut Agent, lease: LeaseId, now: u64) {
    let copies = agent.live_set();
    if agent
        .live_written
        .as_ref()
        .is_some_and(|(l, c)| *l == lease && *c == copies)
    {
        return;
    }
    let record = LiveRecord {
        node: agent.cfg.node.clone(),
        observed_ms: now,
        copies: copies.clone(),
    };
    match blocking(store, move |s| remote::publish_live(s, &record, lease)).await {
        Ok(_) => agent.live_written = Some((lease, copies)),
        Err(e) => log(&agent.who(), format!("cannot write the live record: {e}")),
    }
}

/// Carries out the kill requests addressed to this node: SIGKILL to the copy's group, checked
/// by pid and start time, and the outcome written back for the `kill` command.
async fn carry_out_kills(store: &Arc<dyn Store>, agent: &mut Agent, kills: Vec<Kill>) {
    for (key, req, rev, lease) in kills {
        let outcome = match agent.copies.get(&req.copy) {
            Some(l) if l.record.incarnation == req.incarnation && !l.exited() => {
                match process::kill_verified(l.record.pid, l.record.start_ticks) {
                    Ok(true) => format!("killed pid {} on {}", l.record.pid, agent.cfg.node),
                    Ok(false) => format!("{} had already ended", req.copy),
                    Err(e) => format!("cannot kill {}: {e}", req.copy),
                }
            }
            _ => format!("{} does not run on {}", req.copy, agent.cfg.node),
        };
        log(
            &agent.who(),
            format!("kill request for {}: {outcome}", req.copy),
        );
        if let Err(e) = blocking(store, move |s| {
            remote::answer_kill(s, &key, req, rev, lease, outcome)
        })
        .await
        {
            log(&agent.who(), format!("cannot answer a kill request: {e}"));
        }
    }
}

/// Writes the agent's queued event-log entries in one transaction; on failure keeps them for the
/// next tick. Returns the error if the store is lost.
async fn flush_events(store: &Arc<dyn Store>, agent: &mut Agent) -> Option<StoreError> {
    if agent.events.is_empty() {
        return None;
    }
    let batch = std::mem::take(&mut agent.events);
    let kept = batch.clone();
    match blocking(store, move |s| events::append_all(s, batch)).await {
        Ok(_) => None,
        Err(e) if e.is_lost() => Some(e),
        Err(e) => {
            log(&agent.who(), format!("cannot write the event log: {e}"));
            agent.events = kept;
            None
        }
    }
}

/// Rebuilds the agent's copies from its state file, the processes carrying its mark and its
/// last report: live processes proven its own are adopted (and stopped later if unassigned),
/// dead ones become exited records, and every other process carrying its mark is foreign:
/// never adopted, logged, and stopped if it runs as the agent's user (it claims a copy's
/// identity, so leaving it would be a second copy by its own account).
///
/// A process is proven the agent's own by its nonce ([`crate::sandbox::proves_own`]): recorded
/// before the process started, so even a copy whose pid was never recorded is recognised.
fn recover(
    agent: &mut Agent,
    assigned: &BTreeMap<String, (Assignment, Revision)>,
    last_report: Option<&crate::store::Entry>,
    now: u64,
) -> Result<(), AgentError> {
    let who = agent.who();
    let saved = read_node_state(&agent.file()).map_err(|source| AgentError::StateDir {
        path: agent.file(),
        source,
    })?;
    let mut marked = process::find_marked(&agent.mark);
    let me = crate::sandbox::own_uid();
    for mut record in saved.map(|s| s.copies).unwrap_or_default() {
        let copy = record.assignment.copy.clone();
        if let Err(why) = crate::rules::check_assignment(&record.assignment, &agent.cfg.node) {
            log(
                &who,
                format!(
                    "refused the state file's record of {}: {why}",
                    copy.escape_debug()
                ),
            );
            continue;
        }
        if record.phase != Phase::Exited && record.pid == 0 {
            // Started, or about to be, when the agent died: its pid was never recorded, but its
            // nonce was.
            let own = marked.iter().position(|m| {
                m.copy == copy
                    && m.uid == me
                    && m.nonce.as_deref() == Some(record.nonce.as_str())
                    && !record.nonce.is_empty()
            });
            if let Some(i) = own {
                let m = marked.remove(i);
                log(&who, format!("adopted unrecorded {copy} (pid {})", m.pid));
                record.pid = m.pid;
                record.start_ticks = m.start_ticks;
                record.started_ms = now;
                agent.copies.insert(copy, Local::new(record, None));
                continue;
            }
        }
        if record.phase != Phase::Exited
            && record.pid != 0
            && crate::sandbox::proves_own(record.pid, record.start_ticks, &record.nonce)
        {
            log(&who, format!("adopted {copy} (pid {})", record.pid));
            marked.retain(|m| m.pid != record.pid);
            record.stopping = false;
            agent.copies.insert(copy, Local::new(record, None));
        } else {
            let mut l = Local::new(record, None);
            if !l.exited() {
                // Not proven its own: the pid may be anyone's by now, so it is not signalled.
                l.record.pid = 0;
                l.mark_exited(now, "ended while the agent was down".into());
                let r = l.record.clone();
                agent.log_event(CopyEventKind::Exit, &r, now);
            }
            agent.copies.insert(copy, l);
        }
    }
    for m in marked {
        let known = agent
            .copies
            .get(&m.copy)
            .is_some_and(|l| l.record.pid == m.pid && l.record.start_ticks == m.start_ticks);
        if known {
            continue;
        }
        if m.uid != me {
            log(
                &who,
                format!(
                    "foreign process {} of user {} carries the mark of {}: not adopted, left alone",
                    m.pid,
                    m.uid,
                    m.copy.escape_debug()
                ),
            );
            continue;
        }
        let assigned_here = assigned.contains_key(&m.copy);
        log(
            &who,
            format!(
                "foreign process {} carries the mark of {} without its nonce: not adopted{}; stopping it",
                m.pid,
                m.copy.escape_debug(),
                if assigned_here { ", the real copy starts" } else { "" }
            ),
        );
        let _ = process::signal_group(m.pid, Signal::TERM);
        let deadline = std::time::Instant::now() + Duration::from_millis(UNKNOWN_GRACE_MS);
        while process::is_alive(m.pid, m.start_ticks) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = process::kill_verified(m.pid, m.start_ticks);
    }
    // Copies the store last heard of as exited must not start again, even if the state file
    // was lost.
    if let Some(entry) = last_report {
        let report: NodeReport = decode(entry)?.value;
        for c in report
            .copies
            .into_iter()
            .filter(|c| c.phase == Phase::Exited)
        {
            let Some((a, incarnation)) = assigned.get(&c.copy) else {
                continue;
            };
            if *incarnation == c.incarnation && !agent.copies.contains_key(&c.copy) {
                let mut l = Local::new(
                    CopyRecord {
                        assignment: a.clone(),
                        incarnation: *incarnation,
                        pid: 0,
                        start_ticks: 0,
                        started_ms: c.started_ms,
                        phase: Phase::Exited,
                        ready_ms: c.ready_ms,
                        exited_ms: c.exited_ms,
                        exit: c.exit.clone(),
                        stopping: false,
                        nonce: String::new(),
                    },
                    None,
                );
                l.record.phase = Phase::Exited;
                agent.copies.insert(c.copy, l);
            }
        }
    }
    agent.dirty = true;
    Ok(())
}
