//! Fault model files: the cluster, the workload, the network, and which faults strike how
//! often; and the fault schedule drawn from a model and a seed.
//!
//! ```toml
//! description = "two controllers, three agents, partitions"   # free text
//! seconds = 600            # simulated run length (default 600)
//! settle = 120             # convergence bound (default 120, at most half the run): no fault in the last `settle` s,
//!                          # and every workload must be converged at the end
//! event_budget = 5000000   # most events one run may handle (default 5,000,000)
//! seed = 7                 # replay files only: the seed of the run they replay
//! swarm = false            # swarm testing: each seed switches each [[fault]] rule on or off
//!                          # at random, from the seed alone (default false: every rule on)
//!
//! [cluster]
//! controllers = 2          # controller hosts, 1 to 8 (default 2)
//! agents = 3               # node agents node-1 … node-N, 1 to 32 (default 3)
//! skew_max_ms = 250        # host clocks differ by up to 2 × this (default 0)
//! leader_ttl_ms = 5000     # the controllers' leader lease (default 5000, the runtime's)
//! node_ttl_ms = 10000      # the agents' node lease (default 10000, the runtime's)
//! poll_ms = 100            # controllers poll the store this often (default 100)
//! sync_ms = 100            # agents read their assignments this often (default 100)
//! report_ms = 1000         # agents report this often, R (default 1000)
//! report_delay_ms = 0      # and write each report this much later, G (default 0)
//! drift_max_ppm = 0        # each host's clock runs fast or slow by up to this many parts per
//!                          # million of virtual time, drawn per host (default 0; at most 200,000)
//!
//! [network]
//! delay_ms = 2             # fixed delay of every message (default 1)
//! jitter_ms = 3            # plus up to this much, uniform (default 0)
//! loss = 0.001             # chance a message is lost, 0 to 1 (default 0)
//! slow_ms = 2000           # what a `slow` fault adds to each message of its host, each way
//!                          # (default 2000)
//!
//! [process]
//! start_ms = 50            # a process runs this long after its agent starts it (default 20)
//! term_exit_ms = 200       # and exits this long after SIGTERM (default 100)
//!
//! [[workload]]             # one or more
//! name = "web"
//! controller = "named"     # ledger | intent | expectations | named | gated
//! copies = 6
//! period_ms = 1000         # the loop period U (default 1000)
//! startup_ms = 2000        # the startup time B (default 2000)
//! grace_ms = 3000          # SIGTERM to SIGKILL (default 3000)
//! stop_when_cut_off_ms = 30000  # not for named: stop after the agent is cut off this long
//!                          #   (1000 to 604800000; default: kept running while cut off)
//!
//! [[fault]]                # any number
//! kind = "partition"       # partition | cut-up | cut-down | stall | pause | hang | slow
//!                          #   | restart (a host)
//!                          #   | lose-state (an agent restarts without its state file)
//!                          #   | crash (a process) | leader-change | compaction
//!                          #   | quorum-loss (the store)
//!                          #   | redeclare (the operator deletes and re-applies every workload)
//!                          #   | pid-reuse (an agent restarts and finds a process at a dead
//!                          #     copy's recorded pid, started later, with its mark and nonce)
//!                          #   | impostor (an agent restarts and finds a process at another pid
//!                          #     with a live or dead copy's mark and nonce: an outliving child)
//!                          #   | shutdown (the operator stops a host gracefully and starts it
//!                          #     again when the fault ends: crate::shutdowns)
//! count = 2                # how many per run
//! target = "agent"         # host faults: agent | controller | any (default any;
//!                          # restart: default controller; an agent restarts and adopts;
//!                          # shutdown: default agent;
//!                          # lose-state, pid-reuse, impostor: agent only)
//! min_ms = 1000            # a lasting fault (partition, cut-*, stall, pause, hang,
//! max_ms = 20000           # quorum-loss, slow, shutdown) lasts uniformly min_ms ..= max_ms
//! during = "partition"     # optional: each fault of this rule starts inside a fault of this
//!                          # lasting kind drawn by an earlier rule (on the same host for a
//!                          # host fault: a restart inside a partition of its host)
//!
//! [[event]]                # an explicit schedule (shrinking writes one); when present the
//! at_ms = 12000            # [[fault]] tables are not drawn from
//! kind = "partition"
//! host = 3                 # host index: controllers 0 … C−1, then agents
//! duration_ms = 15000
//! ```
//!
//! Every error names the file, the line and the key, on one line, with
//! [`setpoint_sim::scenario_file::locate`], as the lab's scenario files do.

use std::fmt::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use setpoint_core::ControllerKind;
use setpoint_sim::delay::WorldRng;
use setpoint_sim::scenario_file::{locate, toml_error};
use toml::{Spanned, Value};

use crate::machine::Role;
use crate::net::NetConfig;

/// A fault model (or a replay file), validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    /// Free text.
    pub description: String,
    /// The run length, milliseconds.
    pub duration_ms: u64,
    /// The convergence bound after the last fault, milliseconds.
    pub settle_ms: u64,
    /// The most events a run may handle.
    pub event_budget: u64,
    /// The seed a replay file replays.
    pub seed: Option<u64>,
    /// Controller hosts.
    pub controllers: usize,
    /// Node agents.
    pub agents: usize,
    /// Host clocks are skewed by `0 ..= 2 × skew_max_ms`.
    pub skew_max_ms: u64,
    /// The machines' timing.
    pub timing: Timing,
    /// The network.
    pub net: NetConfig,
    /// Process start time, milliseconds.
    pub start_ms: u64,
    /// Process exit time after SIGTERM, milliseconds.
    pub term_exit_ms: u64,
    /// The workloads.
    pub workloads: Vec<WorkloadModel>,
    /// The fault rules drawn from.
    pub faults: Vec<FaultRule>,
    /// Swarm testing: each seed switches each fault rule on or off at random
    /// ([`Model::rules_on`]).
    pub swarm: bool,
    /// Each host's clock runs fast or slow by up to this many parts per million.
    pub drift_max_ppm: u64,
    /// An explicit schedule, which replaces drawing.
    pub schedule: Option<Vec<Fault>>,
}

/// The controllers' and agents' timing, milliseconds (the runtime's defaults unless set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// The leader lease's time to live.
    pub leader_ttl_ms: u64,
    /// The node lease's time to live.
    pub node_ttl_ms: u64,
    /// How often a controller polls the store.
    pub poll_ms: u64,
    /// How often an agent reads its assignments.
    pub sync_ms: u64,
    /// How often an agent reports, R.
    pub report_ms: u64,
    /// How long an agent holds each report back before writing it, G
    /// (`AgentCoreConfig::report_delay_ms`, the agent's `--report-delay`).
    pub report_delay_ms: u64,
}

/// One declared workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadModel {
    /// Its name.
    pub name: String,
    /// The controller kind.
    pub controller: ControllerKind,
    /// Desired copies.
    pub copies: u64,
    /// Loop period U, milliseconds.
    pub period_ms: u64,
    /// Startup time B, milliseconds.
    pub startup_ms: u64,
    /// SIGTERM-to-SIGKILL grace, milliseconds.
    pub grace_ms: u64,
    /// For counted controllers: stop a copy after its agent is cut off this long; none keeps
    /// it running (`named` copies are always fenced).
    pub stop_when_cut_off_ms: Option<u64>,
}

/// What a fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// Both directions of a host's link are cut.
    Partition,
    /// Only host → store is cut: requests are lost, replies to earlier ones still come.
    CutUp,
    /// Only store → host is cut: requests apply, replies and watch events are lost.
    CutDown,
    /// Host → store stalls, as a TCP connection does across a short partition: requests sent
    /// meanwhile are held, and delivered in order when the fault ends. A commit can then reach
    /// the store after its writer's lease has ended: the case fencing tokens exist for.
    Stall,
    /// The host is not stepped (a GC pause, SIGSTOP); its inputs queue.
    Pause,
    /// The host's machine restarts with a fresh state (a controller or agent process restart);
    /// a restarted agent recovers from its node's state file and live processes.
    Restart,
    /// A running process, drawn at random, exits with status 1: a crash, which its workload
    /// backs off after (every uncommanded exit counts).
    Crash,
    /// An operator kills a running copy, drawn at random, as `setpoint kill` does: a kill
    /// request its agent carries out (SIGKILL), a commanded death replaced at once. The
    /// lesson's deaths, in the agreement with the lab ([`crate::agree`]).
    Kill,
    /// The store changes leader: every lease gets its full time to live again.
    LeaderChange,
    /// The store compacts its history to the current revision.
    Compaction,
    /// The operator deletes every workload and declares it again at once (`setpoint delete`
    /// then `apply`): same declaration, new uid, so the old copies are orphans to collect.
    Redeclare,
    /// An agent restarts and its state file is gone (a wiped disk, a state directory on
    /// tmpfs): it recovers from the node's live processes alone. On a controller host (an
    /// explicit `[[event]]` only) it is a restart: a controller keeps no state file.
    LoseState,
    /// The store member the host talks to hangs: requests that reach it are never answered
    /// (nor applied), and its watch streams go silent without breaking; the events it owes
    /// them are delivered, in order, when it recovers. Unlike a partition the client is never
    /// told: no watch breaks, no connection fails.
    Hang,
    /// The store loses quorum: no request is served (every one is left unanswered), no lease
    /// expires, and when quorum is back a new leader gives every lease its full time to live
    /// again (etcd #9395). Every host is cut off at once.
    QuorumLoss,
    /// The host's link slows down: every message on it, either way, takes the model's
    /// `network.slow_ms` longer (a congested or lossy path where TCP retransmits), so that its
    /// renewals press on the lease deadlines without failing outright.
    Slow,
    /// An agent restarts, and a process now holds a dead copy's recorded pid with a later start
    /// time, carrying that copy's mark and nonce: the kernel reused the pid
    /// ([`crate::impostors`]). It must be stopped, never adopted. With no such record in the
    /// state file it is a plain restart; on a controller host (an `[[event]]` only) too.
    PidReuse,
    /// An agent restarts, and a process at a pid of its own carries a live or dead copy's mark
    /// and nonce: a child that inherited the copy's environment ([`crate::impostors`]). It must
    /// be stopped, never adopted. With no record to imitate it is a plain restart.
    Impostor,
    /// The operator stops the host's agent (or controller) gracefully, as `systemctl stop`
    /// does: the agent stops its copies with their grace, writes its last report and gives its
    /// node lease up; when the fault ends the operator starts it again, and it recovers as after
    /// a restart. One that has not stopped by then is waited for, and killed at systemd's stop
    /// timeout ([`crate::shutdowns`]).
    Shutdown,
}

impl FaultKind {
    /// Every kind, with its name in files.
    pub const ALL: [(FaultKind, &'static str); 18] = [
        (FaultKind::Partition, "partition"),
        (FaultKind::CutUp, "cut-up"),
        (FaultKind::CutDown, "cut-down"),
        (FaultKind::Stall, "stall"),
        (FaultKind::Pause, "pause"),
        (FaultKind::Restart, "restart"),
        (FaultKind::Crash, "crash"),
        (FaultKind::Kill, "kill"),
        (FaultKind::LeaderChange, "leader-change"),
        (FaultKind::Compaction, "compaction"),
        (FaultKind::Redeclare, "redeclare"),
        (FaultKind::LoseState, "lose-state"),
        (FaultKind::Hang, "hang"),
        (FaultKind::QuorumLoss, "quorum-loss"),
        (FaultKind::Slow, "slow"),
        (FaultKind::PidReuse, "pid-reuse"),
        (FaultKind::Impostor, "impostor"),
        (FaultKind::Shutdown, "shutdown"),
    ];

    /// Its name in files.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(k, _)| *k == self)
            .map_or("?", |(_, n)| n)
    }

    /// Whether it lasts for a duration (else it is an instant).
    pub fn lasts(self) -> bool {
        matches!(
            self,
            FaultKind::Partition
                | FaultKind::CutUp
                | FaultKind::CutDown
                | FaultKind::Stall
                | FaultKind::Pause
                | FaultKind::Hang
                | FaultKind::QuorumLoss
                | FaultKind::Slow
                | FaultKind::Shutdown
        )
    }

    /// Whether it strikes one host.
    pub fn on_host(self) -> bool {
        (self.lasts() && self != FaultKind::QuorumLoss) || self.restarts_host()
    }

    /// Whether it restarts the host's machine: a restart, a loss of the state file, or one of
    /// the impostor kinds.
    pub fn restarts_host(self) -> bool {
        matches!(
            self,
            FaultKind::Restart | FaultKind::LoseState | FaultKind::PidReuse | FaultKind::Impostor
        )
    }

    /// Whether it strikes agents only (the target is `agent`, or none).
    fn agent_only(self) -> bool {
        matches!(
            self,
            FaultKind::LoseState | FaultKind::PidReuse | FaultKind::Impostor
        )
    }

    /// Whether it cuts a host off from the store for its duration, so that an agent must
    /// fence itself if it lasts longer than a node lease: a partition, a one-way cut, a
    /// stall, a hung store member, or (every host at once) a quorum loss.
    pub fn cuts_off(self) -> bool {
        matches!(
            self,
            FaultKind::Partition
                | FaultKind::CutUp
                | FaultKind::CutDown
                | FaultKind::Stall
                | FaultKind::Hang
                | FaultKind::QuorumLoss
        )
    }
}

/// Which hosts a host fault may strike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Node agents only.
    Agent,
    /// Controller hosts only.
    Controller,
    /// Any host.
    Any,
}

/// One `[[fault]]` rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRule {
    /// What it does.
    pub kind: FaultKind,
    /// How many per run.
    pub count: u64,
    /// Which hosts.
    pub target: Target,
    /// Shortest duration, milliseconds.
    pub min_ms: u64,
    /// Longest duration, milliseconds.
    pub max_ms: u64,
    /// Each fault of this rule starts inside a fault of this lasting kind drawn by an earlier
    /// rule (on that fault's host, for a host fault); `None`: anywhere in the run.
    pub during: Option<FaultKind>,
}

/// One fault of a schedule.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fault {
    /// When it starts, milliseconds.
    pub at_ms: u64,
    /// What it does.
    pub kind: FaultKind,
    /// The host it strikes (0 for store and process faults).
    pub host: usize,
    /// How long it lasts, milliseconds (0 for instants).
    pub duration_ms: u64,
}

/// A fault model that could not be read or is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// A value is wrong; `line` and `key` say where, the message what is accepted.
    #[error("{path}:{line}: {key}: {message}")]
    File {
        /// The file as named.
        path: String,
        /// The line, from 1.
        line: usize,
        /// The key at fault, such as `fault[2].count`.
        key: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// The file could not be read.
    #[error("{path}: {message}")]
    Unreadable {
        /// The file as named.
        path: String,
        /// The operating system's reason.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    description: Option<String>,
    seconds: Option<Spanned<i64>>,
    settle: Option<Spanned<i64>>,
    event_budget: Option<Spanned<i64>>,
    seed: Option<Spanned<i64>>,
    swarm: Option<bool>,
    cluster: Option<RawCluster>,
    network: Option<RawNetwork>,
    process: Option<RawProcess>,
    #[serde(default)]
    workload: Vec<RawWorkload>,
    #[serde(default)]
    fault: Vec<RawFault>,
    event: Option<Spanned<Vec<RawEvent>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    controllers: Option<Spanned<i64>>,
    agents: Option<Spanned<i64>>,
    skew_max_ms: Option<Spanned<i64>>,
    leader_ttl_ms: Option<Spanned<i64>>,
    node_ttl_ms: Option<Spanned<i64>>,
    poll_ms: Option<Spanned<i64>>,
    sync_ms: Option<Spanned<i64>>,
    report_ms: Option<Spanned<i64>>,
    report_delay_ms: Option<Spanned<i64>>,
    drift_max_ppm: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNetwork {
    delay_ms: Option<Spanned<i64>>,
    jitter_ms: Option<Spanned<i64>>,
    loss: Option<Spanned<Value>>,
    slow_ms: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProcess {
    start_ms: Option<Spanned<i64>>,
    term_exit_ms: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    name: Spanned<String>,
    controller: Option<Spanned<String>>,
    copies: Spanned<i64>,
    period_ms: Option<Spanned<i64>>,
    startup_ms: Option<Spanned<i64>>,
    grace_ms: Option<Spanned<i64>>,
    stop_when_cut_off_ms: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    kind: Spanned<String>,
    count: Spanned<i64>,
    target: Option<Spanned<String>>,
    min_ms: Option<Spanned<i64>>,
    max_ms: Option<Spanned<i64>>,
    during: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    at_ms: Spanned<i64>,
    kind: Spanned<String>,
    host: Option<Spanned<i64>>,
    duration_ms: Option<Spanned<i64>>,
}

/// Whether `text` is a fault model or a replay file rather than a lab scenario, by its keys:
/// one of the tables `[cluster]`, `[network]`, `[process]`, `[[fault]]`, the keys `settle` or
/// `event_budget`, or events timed in `at_ms` (a lab scenario's are in `at`). Text that is not
/// TOML is not (the lab's reader then names the error).
pub fn looks_like_model(text: &str) -> bool {
    let Ok(table) = text.parse::<toml::Table>() else {
        return false;
    };
    [
        "cluster",
        "network",
        "process",
        "fault",
        "settle",
        "event_budget",
    ]
    .iter()
    .any(|k| table.contains_key(*k))
        || table
            .get("event")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_table)
            .is_some_and(|e| e.contains_key("at_ms"))
}

/// The fault model files this repository ships in `scenarios/chaos/{dir}` (`""` for the
/// models themselves, `regressions`, `open`), sorted: for the tests and the mutation run, which
/// run every one of them.
pub fn shipped(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/chaos")
        .join(dir);
    let mut out: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    out.sort();
    out
}

/// Reads and validates the fault model at `path`.
pub fn load(path: &Path) -> Result<Model, ModelError> {
    let label = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::Unreadable {
        path: label.clone(),
        message: e.to_string(),
    })?;
    parse(&label, &text)
}

struct Located<'a> {
    label: &'a str,
    text: &'a str,
}

impl Located<'_> {
    fn at(&self, span: Range<usize>, key: Option<&str>, message: impl Into<String>) -> ModelError {
        let (line, found) = locate(self.text, span.start);
        ModelError::File {
            path: self.label.to_owned(),
            line,
            key: key.map_or(found, str::to_owned),
            message: message.into(),
        }
    }

    fn int(&self, v: &Spanned<i64>, key: &str, lo: i64, hi: i64) -> Result<u64, ModelError> {
        let x = *v.get_ref();
        if x < lo || x > hi {
            return Err(self.at(
                v.span(),
                Some(key),
                format!("{x} is out of range: accepted {lo} to {hi}"),
            ));
        }
        Ok(x as u64)
    }

    fn opt(
        &self,
        v: &Option<Spanned<i64>>,
        key: &str,
        lo: i64,
        hi: i64,
        default: u64,
    ) -> Result<u64, ModelError> {
        v.as_ref().map_or(Ok(default), |v| self.int(v, key, lo, hi))
    }

    fn kind(&self, v: &Spanned<String>, key: &str) -> Result<FaultKind, ModelError> {
        FaultKind::ALL
            .iter()
            .find(|(_, n)| n == v.get_ref())
            .map(|(k, _)| *k)
            .ok_or_else(|| {
                let names: Vec<&str> = FaultKind::ALL.iter().map(|(_, n)| *n).collect();
                self.at(
                    v.span(),
                    Some(key),
                    format!(
                        "unknown fault kind '{}': accepted {}",
                        v.get_ref(),
                        names.join(", ")
                    ),
                )
            })
    }
}

/// The most of one fault per run.
pub const MAX_COUNT: i64 = 10_000;
/// The longest run, seconds (a day).
pub const MAX_SECONDS: i64 = 86_400;
/// The most a host's clock may drift, parts per million (20 %: far beyond a real quartz or
/// NTP slew, which stays within 500 ppm, so that a model can press on the agent's margin of a
/// tenth of its lease).
pub const MAX_DRIFT_PPM: u64 = 200_000;

/// Parses the text of a fault model; `label` names it in errors.
pub fn parse(label: &str, text: &str) -> Result<Model, ModelError> {
    let f = Located { label, text };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let (line, key, message) = toml_error(text, &e);
        ModelError::File {
            path: label.to_owned(),
            line,
            key,
            message,
        }
    })?;
    let seconds = f.opt(&raw.seconds, "seconds", 1, MAX_SECONDS, 600)?;
    let settle = f.opt(&raw.settle, "settle", 0, MAX_SECONDS, 120.min(seconds / 2))?;
    if settle >= seconds {
        let span = raw.settle.as_ref().map_or(0..0, |s| s.span());
        return Err(f.at(
            span,
            Some("settle"),
            format!("settle {settle} must be shorter than the run's {seconds} seconds"),
        ));
    }
    let cluster = raw.cluster.as_ref();
    let controllers = f.opt(
        &cluster.and_then(|c| c.controllers.clone()),
        "cluster.controllers",
        1,
        8,
        2,
    )? as usize;
    let agents = f.opt(
        &cluster.and_then(|c| c.agents.clone()),
        "cluster.agents",
        1,
        32,
        3,
    )? as usize;
    let skew_max_ms = f.opt(
        &cluster.and_then(|c| c.skew_max_ms.clone()),
        "cluster.skew_max_ms",
        0,
        60_000,
        0,
    )?;
    let drift_max_ppm = f.opt(
        &cluster.and_then(|c| c.drift_max_ppm.clone()),
        "cluster.drift_max_ppm",
        0,
        MAX_DRIFT_PPM as i64,
        0,
    )?;
    let knob = |k: &str, v: Option<Spanned<i64>>, default: u64| {
        f.opt(&v, &format!("cluster.{k}"), 10, 3_600_000, default)
    };
    let timing = Timing {
        leader_ttl_ms: knob(
            "leader_ttl_ms",
            cluster.and_then(|c| c.leader_ttl_ms.clone()),
            5_000,
        )?,
        node_ttl_ms: knob(
            "node_ttl_ms",
            cluster.and_then(|c| c.node_ttl_ms.clone()),
            10_000,
        )?,
        poll_ms: knob("poll_ms", cluster.and_then(|c| c.poll_ms.clone()), 100)?,
        sync_ms: knob("sync_ms", cluster.and_then(|c| c.sync_ms.clone()), 100)?,
        report_ms: knob(
            "report_ms",
            cluster.and_then(|c| c.report_ms.clone()),
            1_000,
        )?,
        report_delay_ms: f.opt(
            &cluster.and_then(|c| c.report_delay_ms.clone()),
            "cluster.report_delay_ms",
            0,
            3_600_000,
            0,
        )?,
    };
    let net_raw = raw.network.as_ref();
    let delay_ms = f.opt(
        &net_raw.and_then(|n| n.delay_ms.clone()),
        "network.delay_ms",
        0,
        60_000,
        1,
    )?;
    let jitter_ms = f.opt(
        &net_raw.and_then(|n| n.jitter_ms.clone()),
        "network.jitter_ms",
        0,
        60_000,
        0,
    )?;
    let loss_ppm = match net_raw.and_then(|n| n.loss.as_ref()) {
        None => 0,
        Some(v) => {
            let x = match v.get_ref() {
                Value::Float(x) => *x,
                Value::Integer(i) => *i as f64,
                _ => f64::NAN,
            };
            if !(0.0..=1.0).contains(&x) {
                return Err(f.at(
                    v.span(),
                    Some("network.loss"),
                    format!("{} is not accepted: a fraction from 0 to 1", v.get_ref()),
                ));
            }
            (x * 1e6).round() as u64
        }
    };
    let slow_ms = f.opt(
        &net_raw.and_then(|n| n.slow_ms.clone()),
        "network.slow_ms",
        0,
        60_000,
        2_000,
    )?;
    let proc_raw = raw.process.as_ref();
    let start_ms = f.opt(
        &proc_raw.and_then(|p| p.start_ms.clone()),
        "process.start_ms",
        0,
        600_000,
        20,
    )?;
    let term_exit_ms = f.opt(
        &proc_raw.and_then(|p| p.term_exit_ms.clone()),
        "process.term_exit_ms",
        0,
        600_000,
        100,
    )?;
    if raw.workload.is_empty() {
        return Err(ModelError::File {
            path: label.to_owned(),
            line: 1,
            key: "workload".into(),
            message: "the model has no workload: declare at least one [[workload]]".into(),
        });
    }
    let mut workloads: Vec<WorkloadModel> = Vec::new();
    for (i, w) in raw.workload.iter().enumerate() {
        let key = |k: &str| format!("workload[{}].{k}", i + 1);
        let name = w.name.get_ref().clone();
        let ok = name.len() <= 48
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            return Err(f.at(
                w.name.span(),
                Some(&key("name")),
                format!("'{name}' is not accepted: 1 to 48 lowercase letters, digits and '-', starting with a letter"),
            ));
        }
        if workloads.iter().any(|o| o.name == name) {
            return Err(f.at(
                w.name.span(),
                Some(&key("name")),
                format!("'{name}' is declared twice"),
            ));
        }
        let controller = match &w.controller {
            None => ControllerKind::Named,
            Some(c) => c.get_ref().parse().map_err(|_| {
                let names: Vec<&str> = ControllerKind::ALL.iter().map(|k| k.name()).collect();
                f.at(
                    c.span(),
                    Some(&key("controller")),
                    format!(
                        "unknown controller '{}': accepted {}",
                        c.get_ref(),
                        names.join(", ")
                    ),
                )
            })?,
        };
        workloads.push(WorkloadModel {
            name,
            controller,
            copies: f.int(&w.copies, &key("copies"), 0, 1000)?,
            period_ms: f.opt(&w.period_ms, &key("period_ms"), 10, 3_600_000, 1000)?,
            startup_ms: f.opt(&w.startup_ms, &key("startup_ms"), 0, 3_600_000, 2000)?,
            grace_ms: f.opt(&w.grace_ms, &key("grace_ms"), 0, 3_600_000, 3000)?,
            stop_when_cut_off_ms: match &w.stop_when_cut_off_ms {
                None => None,
                Some(v) if controller == ControllerKind::Named => {
                    return Err(f.at(
                        v.span(),
                        Some(&key("stop_when_cut_off_ms")),
                        "named copies are always stopped by their agent's fence: accepted only \
                         for ledger, intent, expectations and gated",
                    ))
                }
                Some(v) => Some(f.int(v, &key("stop_when_cut_off_ms"), 1000, 604_800_000)?),
            },
        });
    }
    let mut faults = Vec::new();
    for (i, r) in raw.fault.iter().enumerate() {
        let key = |k: &str| format!("fault[{}].{k}", i + 1);
        let kind = f.kind(&r.kind, &key("kind"))?;
        let target = match &r.target {
            None => Target::Any,
            Some(t) if !kind.on_host() => {
                return Err(f.at(
                    t.span(),
                    Some(&key("target")),
                    format!("a '{}' fault strikes no host: drop 'target'", kind.name()),
                ))
            }
            Some(t) => match t.get_ref().as_str() {
                "agent" => Target::Agent,
                "controller" => Target::Controller,
                "any" => Target::Any,
                other => {
                    return Err(f.at(
                        t.span(),
                        Some(&key("target")),
                        format!("unknown target '{other}': accepted agent, controller, any"),
                    ))
                }
            },
        };
        // A restart with no target strikes a controller, as before agents could restart, so
        // that older models draw the schedules they drew.
        let target = if kind == FaultKind::Restart && r.target.is_none() {
            Target::Controller
        } else if kind == FaultKind::Shutdown && r.target.is_none() {
            // The operator's stop is of an agent unless the rule says otherwise.
            Target::Agent
        } else if kind.agent_only() {
            // Only an agent keeps a state file to lose, and a node's processes to find.
            match (&r.target, target) {
                (None, _) | (_, Target::Agent) => Target::Agent,
                (Some(t), _) => {
                    return Err(f.at(
                        t.span(),
                        Some(&key("target")),
                        format!(
                            "a '{}' fault strikes an agent: target agent, or drop 'target'",
                            kind.name()
                        ),
                    ))
                }
            }
        } else {
            target
        };
        let (min_ms, max_ms) = if kind.lasts() {
            let lo = f.opt(&r.min_ms, &key("min_ms"), 1, MAX_SECONDS * 1000, 1000)?;
            let hi = f.opt(
                &r.max_ms,
                &key("max_ms"),
                1,
                MAX_SECONDS * 1000,
                lo.max(10_000),
            )?;
            if hi < lo {
                let span = r.max_ms.as_ref().map_or(r.kind.span(), |s| s.span());
                return Err(f.at(
                    span,
                    Some(&key("max_ms")),
                    format!("max_ms {hi} is below min_ms {lo}"),
                ));
            }
            (lo, hi)
        } else {
            for (v, k) in [(&r.min_ms, "min_ms"), (&r.max_ms, "max_ms")] {
                if let Some(v) = v {
                    return Err(f.at(
                        v.span(),
                        Some(&key(k)),
                        format!("a '{}' fault is an instant: drop '{k}'", kind.name()),
                    ));
                }
            }
            (0, 0)
        };
        let during = match &r.during {
            None => None,
            Some(d) => {
                let within = f.kind(d, &key("during"))?;
                if !within.lasts() {
                    return Err(f.at(
                        d.span(),
                        Some(&key("during")),
                        format!(
                            "'{}' is an instant: 'during' names a lasting kind (partition, cut-up, \
                             cut-down, stall, pause, hang, quorum-loss, slow, shutdown)",
                            within.name()
                        ),
                    ));
                }
                if !faults.iter().any(|e: &FaultRule| e.kind == within) {
                    return Err(f.at(
                        d.span(),
                        Some(&key("during")),
                        format!(
                            "no earlier [[fault]] rule draws a '{}': declare it above this one",
                            within.name()
                        ),
                    ));
                }
                Some(within)
            }
        };
        faults.push(FaultRule {
            kind,
            count: f.int(&r.count, &key("count"), 0, MAX_COUNT)?,
            target,
            min_ms,
            max_ms,
            during,
        });
    }
    let hosts = controllers + agents;
    let schedule = match &raw.event {
        None => None,
        Some(events) => {
            let mut out = Vec::new();
            for (i, e) in events.get_ref().iter().enumerate() {
                let key = |k: &str| format!("event[{}].{k}", i + 1);
                let kind = f.kind(&e.kind, &key("kind"))?;
                let host = f.opt(&e.host, &key("host"), 0, hosts as i64 - 1, 0)? as usize;
                let duration_ms = f.opt(
                    &e.duration_ms,
                    &key("duration_ms"),
                    0,
                    MAX_SECONDS * 1000,
                    0,
                )?;
                out.push(Fault {
                    at_ms: f.int(&e.at_ms, &key("at_ms"), 0, (seconds * 1000) as i64)?,
                    kind,
                    host,
                    duration_ms,
                });
            }
            out.sort();
            Some(out)
        }
    };
    let seed = match &raw.seed {
        None => None,
        Some(s) => Some(f.int(s, "seed", 0, i64::MAX)?),
    };
    Ok(Model {
        description: raw.description.unwrap_or_default(),
        duration_ms: seconds * 1000,
        settle_ms: settle * 1000,
        event_budget: f.opt(&raw.event_budget, "event_budget", 1, i64::MAX, 5_000_000)?,
        seed,
        controllers,
        agents,
        skew_max_ms,
        timing,
        net: NetConfig {
            delay_ms,
            jitter_ms,
            loss_ppm,
            slow_ms,
        },
        start_ms,
        term_exit_ms,
        workloads,
        faults,
        swarm: raw.swarm.unwrap_or(false),
        drift_max_ppm,
        schedule,
    })
}

/// The salt that keeps the schedule's draws apart from the world's: the world is seeded with
/// the seed itself, so a replay with an explicit schedule draws the same jitters.
const SCHEDULE_SALT: u64 = 0x5c4e_d01e_fa17_0001;
/// Keeps the swarm's switches apart from the schedule's draws.
const SWARM_SALT: u64 = 0x5a4a_0000_0000_0002;
/// Keeps the clocks' drifts apart from their skews.
const DRIFT_SALT: u64 = 0xd41f_0000_0000_0003;

impl Model {
    /// The hosts: controllers `0 … C−1`, then agents on `node-1 … node-A`.
    pub fn roles(&self) -> Vec<Role> {
        let mut r = vec![Role::Controller; self.controllers];
        r.extend((1..=self.agents).map(|i| Role::Agent(format!("node-{i}"))));
        r
    }

    /// The fault schedule of `seed`: the file's own, or drawn from its rules.
    pub fn schedule(&self, seed: u64) -> Vec<Fault> {
        if let Some(s) = &self.schedule {
            return s.clone();
        }
        let mut rng = WorldRng::new(seed ^ SCHEDULE_SALT);
        let last = self.duration_ms - self.settle_ms;
        let on = self.rules_on(seed);
        let mut out: Vec<Fault> = Vec::new();
        for (rule, on) in self.faults.iter().zip(on) {
            if !on {
                continue;
            }
            let hosts: Vec<usize> = match rule.target {
                Target::Controller => (0..self.controllers).collect(),
                Target::Agent => (self.controllers..self.controllers + self.agents).collect(),
                Target::Any => (0..self.controllers + self.agents).collect(),
            };
            // The windows a `during` rule may strike in: the faults of that kind drawn so
            // far, on a host this rule may strike (any, for a fault that strikes the store).
            let windows: Vec<Fault> = match rule.during {
                None => Vec::new(),
                Some(k) => out
                    .iter()
                    .filter(|w| {
                        w.kind == k
                            && (!rule.kind.on_host() || !k.on_host() || hosts.contains(&w.host))
                    })
                    .cloned()
                    .collect(),
            };
            if rule.during.is_some() && windows.is_empty() {
                continue;
            }
            for _ in 0..rule.count {
                let window = (!windows.is_empty())
                    .then(|| windows[rng.uniform(0, windows.len() as u64 - 1) as usize].clone());
                let at_ms = match &window {
                    Some(w) => rng.uniform(w.at_ms, w.at_ms + w.duration_ms),
                    None => rng.uniform(0, last),
                };
                let host = match &window {
                    Some(w) if rule.kind.on_host() && w.kind.on_host() => w.host,
                    _ if rule.kind.on_host() => {
                        hosts[rng.uniform(0, hosts.len() as u64 - 1) as usize]
                    }
                    _ => 0,
                };
                let duration_ms = if rule.kind.lasts() {
                    // A lasting fault ends by the start of the settle window.
                    rng.uniform(rule.min_ms, rule.max_ms)
                        .min(last - at_ms)
                        .max(1)
                } else {
                    0
                };
                out.push(Fault {
                    at_ms,
                    kind: rule.kind,
                    host,
                    duration_ms,
                });
            }
        }
        out.sort();
        out
    }

    /// Which fault rules draw faults for `seed`, in rule order: all of them, or with `swarm`
    /// each on or off with even odds, from a generator of its own (so the schedule's draws
    /// of the rules that stay on depend only on the seed and the switches). Swarm testing
    /// (Groce et al., ISSTA 2012): a run with fewer kinds of fault reaches deeper into each,
    /// since one kind no longer masks another (a crash that ends the copy a restart would
    /// have had to adopt).
    pub fn rules_on(&self, seed: u64) -> Vec<bool> {
        if !self.swarm {
            return vec![true; self.faults.len()];
        }
        let mut rng = WorldRng::new(seed ^ SCHEDULE_SALT ^ SWARM_SALT);
        self.faults.iter().map(|_| rng.uniform(0, 1) == 1).collect()
    }

    /// Each host's clock drift for `seed`, parts per million (negative: slow), uniform in
    /// `−drift_max_ppm ..= drift_max_ppm`; all zero without drift.
    pub fn drifts(&self, seed: u64) -> Vec<i64> {
        let hosts = self.controllers + self.agents;
        if self.drift_max_ppm == 0 {
            return vec![0; hosts];
        }
        let mut rng = WorldRng::new(seed ^ SCHEDULE_SALT ^ DRIFT_SALT);
        (0..hosts)
            .map(|_| rng.uniform(0, 2 * self.drift_max_ppm) as i64 - self.drift_max_ppm as i64)
            .collect()
    }

    /// Each host's clock skew for `seed`, milliseconds.
    pub fn skews(&self, seed: u64) -> Vec<u64> {
        let mut rng = WorldRng::new(seed ^ SCHEDULE_SALT ^ 0xc10c);
        (0..self.controllers + self.agents)
            .map(|_| rng.uniform(0, 2 * self.skew_max_ms))
            .collect()
    }

    /// This model as a replay file of `seed` with `schedule`: the same settings, the seed, and
    /// the schedule as `[[event]]` tables. Parsing it gives back this model with the schedule.
    pub fn replay_file(&self, seed: u64, schedule: &[Fault], comment: &str) -> String {
        let mut s = String::new();
        for line in comment.lines() {
            let _ = writeln!(s, "# {line}");
        }
        let _ = writeln!(s, "description = {}", toml_str(&self.description));
        let _ = writeln!(s, "seconds = {}", self.duration_ms / 1000);
        let _ = writeln!(s, "settle = {}", self.settle_ms / 1000);
        let _ = writeln!(s, "event_budget = {}", self.event_budget);
        let _ = writeln!(s, "seed = {seed}");
        if schedule.is_empty() {
            s.push_str("event = []  # no fault\n");
        }
        s.push('\n');
        let t = &self.timing;
        let _ = writeln!(
            s,
            "[cluster]\ncontrollers = {}\nagents = {}\nskew_max_ms = {}\nleader_ttl_ms = {}\nnode_ttl_ms = {}\npoll_ms = {}\nsync_ms = {}\nreport_ms = {}\nreport_delay_ms = {}",
            self.controllers, self.agents, self.skew_max_ms, t.leader_ttl_ms, t.node_ttl_ms, t.poll_ms, t.sync_ms, t.report_ms, t.report_delay_ms
        );
        if self.drift_max_ppm > 0 {
            let _ = writeln!(s, "drift_max_ppm = {}", self.drift_max_ppm);
        }
        s.push('\n');
        let _ = writeln!(
            s,
            "[network]\ndelay_ms = {}\njitter_ms = {}\nloss = {}\nslow_ms = {}\n",
            self.net.delay_ms,
            self.net.jitter_ms,
            self.net.loss_ppm as f64 / 1e6,
            self.net.slow_ms
        );
        let _ = writeln!(
            s,
            "[process]\nstart_ms = {}\nterm_exit_ms = {}\n",
            self.start_ms, self.term_exit_ms
        );
        for w in &self.workloads {
            let _ = write!(
                s,
                "[[workload]]\nname = \"{}\"\ncontroller = \"{}\"\ncopies = {}\nperiod_ms = {}\nstartup_ms = {}\ngrace_ms = {}\n",
                w.name, w.controller.name(), w.copies, w.period_ms, w.startup_ms, w.grace_ms
            );
            if let Some(ms) = w.stop_when_cut_off_ms {
                let _ = writeln!(s, "stop_when_cut_off_ms = {ms}");
            }
            let _ = writeln!(s);
        }
        for e in schedule {
            let _ = writeln!(
                s,
                "[[event]]\nat_ms = {}\nkind = \"{}\"\nhost = {}\nduration_ms = {}\n",
                e.at_ms,
                e.kind.name(),
                e.host,
                e.duration_ms
            );
        }
        s
    }
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODEL: &str = r#"
description = "t"
seconds = 60
settle = 20
[cluster]
controllers = 2
agents = 3
skew_max_ms = 100
[network]
delay_ms = 2
jitter_ms = 3
loss = 0.01
[[workload]]
name = "web"
copies = 6
[[fault]]
kind = "partition"
count = 3
target = "agent"
min_ms = 500
max_ms = 5000
[[fault]]
kind = "crash"
count = 2
"#;

    fn err(text: &str) -> String {
        parse("m.toml", text).unwrap_err().to_string()
    }

    #[test]
    fn a_model_parses_with_its_defaults() {
        let m = parse("m.toml", MODEL).unwrap();
        assert_eq!((m.duration_ms, m.settle_ms, m.agents), (60_000, 20_000, 3));
        assert_eq!(m.net.loss_ppm, 10_000);
        assert_eq!(m.workloads[0].controller, ControllerKind::Named);
        assert_eq!(m.workloads[0].period_ms, 1000);
        assert_eq!(m.faults[1].target, Target::Any);
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let bad = MODEL.replace("count = 3", "count = -1");
        assert_eq!(
            err(&bad),
            "m.toml:18: fault[1].count: -1 is out of range: accepted 0 to 10000"
        );
        let bad = MODEL.replace("kind = \"crash\"", "kind = \"meteor\"");
        assert!(
            err(&bad).starts_with(
                "m.toml:23: fault[2].kind: unknown fault kind 'meteor': accepted partition,"
            ),
            "{}",
            err(&bad)
        );
        let bad = MODEL.replace("agents = 3", "agnets = 3");
        assert!(
            err(&bad).starts_with("m.toml:7: cluster.agnets: unknown field `agnets`"),
            "{}",
            err(&bad)
        );
        let bad = MODEL.replace("agents = 3", "agents = 3\nreport_delay_ms = -5");
        assert_eq!(
            err(&bad),
            "m.toml:8: cluster.report_delay_ms: -5 is out of range: accepted 0 to 3600000"
        );
        let ok = MODEL.replace("agents = 3", "agents = 3\nreport_delay_ms = 2500");
        assert_eq!(parse("m.toml", &ok).unwrap().timing.report_delay_ms, 2500);
        let bad = MODEL.replace("loss = 0.01", "loss = 2");
        assert_eq!(
            err(&bad),
            "m.toml:12: network.loss: 2 is not accepted: a fraction from 0 to 1"
        );
        let bad = MODEL.replace("count = 2", "count = 2\nmin_ms = 4");
        assert_eq!(
            err(&bad),
            "m.toml:25: fault[2].min_ms: a 'crash' fault is an instant: drop 'min_ms'"
        );
        let bad = MODEL.replace("settle = 20", "settle = 60");
        assert_eq!(
            err(&bad),
            "m.toml:4: settle: settle 60 must be shorter than the run's 60 seconds"
        );
    }

    #[test]
    fn a_schedule_is_a_function_of_the_seed_and_keeps_out_of_the_settle_window() {
        let m = parse("m.toml", MODEL).unwrap();
        let a = m.schedule(5);
        assert_eq!(a, m.schedule(5));
        assert_ne!(a, m.schedule(6));
        assert_eq!(a.len(), 5);
        for f in &a {
            assert!(f.at_ms + f.duration_ms <= 40_000, "{f:?}");
            if f.kind == FaultKind::Partition {
                assert!((2..5).contains(&f.host), "agents are hosts 2 to 4: {f:?}");
            }
        }
    }

    #[test]
    fn fault_models_and_replay_files_are_told_from_lab_scenarios_by_their_keys() {
        assert!(looks_like_model(MODEL));
        assert!(looks_like_model(
            "seed = 1\n[[event]]\nat_ms = 5\nkind = \"crash\"\n"
        ));
        assert!(looks_like_model("seconds = 60\nsettle = 20\n"));
        let lab = "seed = 1\nperiod = 15\n[[workload]]\nname = \"a\"\ndesired = 2\n\
                   [[event]]\nat = 30\nkind = \"deaths\"\ncount = 1\n";
        assert!(!looks_like_model(lab));
        assert!(!looks_like_model("not = [toml"));
    }

    #[test]
    fn a_restart_strikes_controllers_by_default_a_shutdown_agents_and_either_any_host_when_asked() {
        let with = |kind: &str, target: &str| {
            let text = format!(
                "seconds = 60\nsettle = 20\n[cluster]\ncontrollers = 2\nagents = 3\n\
                 [[workload]]\nname = \"web\"\ncopies = 2\n[[fault]]\nkind = \"{kind}\"\ncount = 40\n{target}"
            );
            let m = parse("m.toml", &text).unwrap();
            let hosts: std::collections::BTreeSet<usize> =
                m.schedule(1).iter().map(|f| f.host).collect();
            hosts
        };
        for kind in ["restart", "shutdown"] {
            assert_eq!(with(kind, "target = \"controller\""), [0, 1].into());
            assert_eq!(with(kind, "target = \"agent\""), [2, 3, 4].into());
            assert_eq!(with(kind, "target = \"any\""), (0..5).collect());
        }
        assert_eq!(with("restart", ""), [0, 1].into());
        assert_eq!(with("shutdown", ""), [2, 3, 4].into());
        // A shutdown lasts (the host is down until it ends) and cuts no one off.
        let s = FaultKind::Shutdown;
        assert!(s.lasts() && s.on_host() && !s.cuts_off() && !s.restarts_host());
    }

    #[test]
    fn a_lost_state_file_strikes_agents_only() {
        let text = |target: &str| {
            format!(
                "seconds = 60\nsettle = 20\n[cluster]\ncontrollers = 2\nagents = 3\n\
                 [[workload]]\nname = \"web\"\ncopies = 2\n[[fault]]\nkind = \"lose-state\"\ncount = 40\n{target}"
            )
        };
        for target in ["", "target = \"agent\""] {
            let m = parse("m.toml", &text(target)).unwrap();
            let hosts: std::collections::BTreeSet<usize> =
                m.schedule(1).iter().map(|f| f.host).collect();
            assert_eq!(hosts, [2, 3, 4].into(), "{target:?}");
        }
        for target in ["controller", "any"] {
            let err = parse("m.toml", &text(&format!("target = \"{target}\""))).unwrap_err();
            assert_eq!(
                err.to_string(),
                "m.toml:12: fault[1].target: a 'lose-state' fault strikes an agent: target \
                 agent, or drop 'target'"
            );
        }
    }

    #[test]
    fn a_replay_file_parses_back_to_the_model_with_its_schedule() {
        let m = parse("m.toml", MODEL).unwrap();
        let sched = m.schedule(9);
        let text = m.replay_file(9, &sched, "seed 9 failed");
        let back = parse("r.toml", &text).unwrap();
        assert_eq!(back.seed, Some(9));
        assert_eq!(back.schedule.as_deref(), Some(&sched[..]));
        assert_eq!(
            back.schedule(123),
            sched,
            "an explicit schedule is not drawn"
        );
        assert_eq!(
            (back.net, back.workloads.clone()),
            (m.net, m.workloads.clone())
        );
        let empty = parse("r.toml", &m.replay_file(9, &[], "")).unwrap();
        assert_eq!(empty.schedule, Some(vec![]));
    }

    const DURING: &str = r#"
seconds = 600
settle = 100
[cluster]
controllers = 2
agents = 3
[[workload]]
name = "web"
copies = 2
[[fault]]
kind = "partition"
count = 3
target = "any"
min_ms = 2000
max_ms = 40000
[[fault]]
kind = "quorum-loss"
count = 1
[[fault]]
kind = "restart"
count = 6
target = "agent"
during = "partition"
[[fault]]
kind = "crash"
count = 2
during = "quorum-loss"
"#;

    #[test]
    fn a_during_rule_strikes_inside_a_fault_of_its_kind_on_that_faults_host() {
        let m = parse("m.toml", DURING).unwrap();
        let mut restarts = 0;
        for seed in 1..40 {
            let s = m.schedule(seed);
            let within = |f: &Fault, kind: FaultKind, same_host: bool| {
                s.iter().any(|w| {
                    w.kind == kind
                        && (!same_host || w.host == f.host)
                        && (w.at_ms..=w.at_ms + w.duration_ms).contains(&f.at_ms)
                })
            };
            for f in &s {
                match f.kind {
                    FaultKind::Restart => {
                        restarts += 1;
                        assert!((2..5).contains(&f.host), "agents only: {f:?}");
                        assert!(within(f, FaultKind::Partition, true), "{seed}: {f:?}");
                    }
                    FaultKind::Crash => assert!(within(f, FaultKind::QuorumLoss, false)),
                    FaultKind::QuorumLoss => assert_eq!(f.host, 0, "it strikes no host"),
                    _ => {}
                }
            }
            // No partition of an agent: no window for the restarts, and none is drawn.
            let agents_cut = s
                .iter()
                .any(|f| f.kind == FaultKind::Partition && f.host >= 2);
            let n = s.iter().filter(|f| f.kind == FaultKind::Restart).count();
            assert_eq!(n, if agents_cut { 6 } else { 0 }, "seed {seed}");
        }
        assert!(restarts > 100, "{restarts}");
        let bad = DURING.replace("during = \"partition\"", "during = \"crash\"");
        assert!(
            err(&bad).starts_with("m.toml:23: fault[3].during: 'crash' is an instant"),
            "{}",
            err(&bad)
        );
        let bad = DURING.replace("during = \"partition\"", "during = \"pause\"");
        assert_eq!(
            err(&bad),
            "m.toml:23: fault[3].during: no earlier [[fault]] rule draws a 'pause': declare it \
             above this one"
        );
        let bad = DURING.replace(
            "kind = \"quorum-loss\"\ncount = 1",
            "kind = \"quorum-loss\"\ncount = 1\ntarget = \"agent\"",
        );
        assert!(
            err(&bad).contains("a 'quorum-loss' fault strikes no host"),
            "{}",
            err(&bad)
        );
    }

    #[test]
    fn swarm_switches_each_rule_on_or_off_per_seed_from_the_seed_alone() {
        let plain = parse("m.toml", DURING).unwrap();
        let swarm = parse("m.toml", &format!("swarm = true\n{DURING}")).unwrap();
        assert!(!plain.swarm && swarm.swarm);
        let mut seen = [[false; 2]; 4];
        for seed in 1..60 {
            assert_eq!(plain.rules_on(seed), [true; 4]);
            let on = swarm.rules_on(seed);
            assert_eq!(on, swarm.rules_on(seed), "a function of the seed");
            let s = swarm.schedule(seed);
            assert_eq!(s, swarm.schedule(seed));
            for (i, rule) in swarm.faults.iter().enumerate() {
                seen[i][usize::from(on[i])] = true;
                if !on[i] {
                    assert!(
                        s.iter().all(|f| f.kind != rule.kind),
                        "{seed}: {on:?} {s:?}"
                    );
                }
            }
            if on.iter().all(|&o| o) {
                assert_eq!(s, plain.schedule(seed), "all on: the plain schedule");
            }
        }
        assert_eq!(
            seen, [[true; 2]; 4],
            "each rule is on for some seeds, off for others"
        );
    }

    #[test]
    fn clocks_drift_within_the_models_bound_and_not_at_all_by_default() {
        let m = parse("m.toml", MODEL).unwrap();
        assert_eq!(m.drifts(3), [0; 5]);
        let text = MODEL.replace(
            "skew_max_ms = 100",
            "skew_max_ms = 100\ndrift_max_ppm = 50000",
        );
        let d = parse("m.toml", &text).unwrap();
        assert_eq!(
            d.skews(3),
            m.skews(3),
            "drift leaves the skews as they were"
        );
        let all: Vec<i64> = (1..30).flat_map(|s| d.drifts(s)).collect();
        assert!(all.iter().all(|x| x.abs() <= 50_000));
        assert!(all.iter().any(|&x| x < -10_000) && all.iter().any(|&x| x > 10_000));
        assert_eq!(d.drifts(3), d.drifts(3));
        let back = parse("r.toml", &d.replay_file(3, &[], "")).unwrap();
        assert_eq!(back.drift_max_ppm, 50_000, "a replay file keeps the drift");
        let bad = MODEL.replace("skew_max_ms = 100", "drift_max_ppm = 300000");
        assert_eq!(
            err(&bad),
            "m.toml:8: cluster.drift_max_ppm: 300000 is out of range: accepted 0 to 200000"
        );
    }
}
