//! The runtime commands' arguments: the clap types of `controller`, `agent`, `up`, `apply`,
//! `get`, `delete`, `kill`, `status`, `logs` and `node forget`, their parsers, and what turns
//! them into the runtime's validated settings.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};

use setpoint_runtime::ops::OpError;
use setpoint_runtime::{
    format_duration, parse_duration, AgentConfig, ControllerConfig, OpenMode, SpecError, Store,
    StoreUrl,
};

/// The runtime's subcommands.
#[derive(Debug, Subcommand)]
pub enum RuntimeCommand {
    /// Run the controller: leader election, then one reconcile loop per workload.
    Controller(ControllerArgs),
    /// Run a node agent: start the node's assigned copies as real processes and report them.
    Agent(AgentArgs),
    /// Run a controller and N agents in one process: the one-command cluster.
    Up(UpArgs),
    /// Declare the workloads of a TOML file: all of them, or on any error none.
    Apply(ApplyArgs),
    /// Show workloads: desired, live, on the ledger, pending; `get copies [WORKLOAD]` shows one
    /// row per copy: node, pid, state, age, restarts, last exit.
    Get(GetArgs),
    /// Show one workload: its declaration, rollout, backoff, idle reason, copies and recent
    /// events.
    Describe(crate::inspect::DescribeArgs),
    /// Show the event log's copy events (created, started, ready, exited, …), oldest first.
    Events(crate::inspect::EventsArgs),
    /// Remove a workload's declaration; its copies are stopped.
    Delete(DeleteArgs),
    /// Kill COUNT running copies of a workload with SIGKILL, oldest first (fault injection):
    /// the request goes through the store to the agent that runs each copy, on any machine.
    Kill(KillArgs),
    /// Show the leader, the nodes and the time since each node last reported.
    Status(StatusArgs),
    /// Print a copy's output (standard output and error), from `{data-dir}/nodes/logs/`.
    Logs(LogsArgs),
    /// Nodes: `node forget NODE` confirms that a lost node's copies ended, so that its `named`
    /// copies start again elsewhere.
    #[command(subcommand)]
    Node(NodeCommand),
}

/// `setpoint node`.
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Confirm that a lost node is gone (its machine is down, or its agent and copies were
    /// killed): its `named` copies, held while their agent might be paused with them still
    /// running, are released and start again on live nodes. Refused while the node is live.
    Forget(ForgetArgs),
}

/// `setpoint node forget`.
#[derive(Debug, Args)]
pub struct ForgetArgs {
    #[command(flatten)]
    pub(super) store: StoreArgs,
    /// The lost node, as `setpoint status` names it.
    #[arg(value_name = "NODE", value_parser = node_name)]
    pub(super) node: String,
}

/// `setpoint logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    #[command(flatten)]
    pub(super) store: StoreArgs,
    /// The copy, as `setpoint get copies` names it (`web-3`).
    #[arg(value_name = "COPY")]
    pub(super) copy: String,
    /// Only the last N lines.
    #[arg(long, value_name = "N")]
    pub(super) tail: Option<usize>,
    /// Keep printing what the copy writes, until it ends (or Ctrl-C).
    #[arg(short = 'f', long)]
    pub(super) follow: bool,
    /// Read the log through the store from the agent of the copy's node, even if the data
    /// directory holds it (the default when it does not: `logs` from another host).
    #[arg(long)]
    pub(super) through_store: bool,
    /// How long to wait for the agent's answer to each request.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = positive_duration)]
    pub(super) answer_timeout: Duration,
}

/// Where the store lives.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The data directory: the agents' state files and the copies' logs, and the SQLite store
    /// unless --store names another.
    #[arg(long, default_value = ".setpoint", value_name = "DIR")]
    pub data_dir: PathBuf,
    /// The store: sqlite:DIR, etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX],
    /// etcd+https://… (TLS, with --etcd-ca) or memory: [default: sqlite:DATA_DIR].
    #[arg(long, value_name = "URL", value_parser = crate::etcd_args::StoreUrlParser)]
    pub store: Option<StoreUrl>,
    /// How to reach an etcd as deployed: TLS files and the user's password.
    #[command(flatten)]
    pub etcd: crate::etcd_args::EtcdArgs,
}

impl StoreArgs {
    /// The store's URL: `--store` with the `--etcd-*` files, else the SQLite store in
    /// `--data-dir`.
    pub fn url(&self) -> anyhow::Result<StoreUrl> {
        self.etcd.apply(
            self.store
                .clone()
                .unwrap_or_else(|| StoreUrl::sqlite(&self.data_dir)),
        )
    }

    pub(super) fn open(&self) -> anyhow::Result<Arc<dyn Store>> {
        Ok(self.url()?.open(OpenMode::Create)?)
    }

    /// Opens the store for a command that only reads or changes what is there (`get`,
    /// `status`, `delete`): a store never used is a mistake in `--data-dir` or `--store`, not
    /// a reason to create an empty one.
    pub(super) fn open_existing(&self) -> anyhow::Result<Arc<dyn Store>> {
        Ok(self.url()?.open(OpenMode::Existing)?)
    }

    /// Opens the existing store for a command that only reads (`get`, `status`): it writes
    /// nothing, so a user who may read the store but not write it can run it.
    pub(crate) fn open_read_only(&self) -> anyhow::Result<Arc<dyn Store>> {
        Ok(self.url()?.open(OpenMode::ReadOnly)?)
    }

    pub(super) fn state_dir(&self) -> PathBuf {
        self.data_dir.join("nodes")
    }
}

/// Settings of the controller.
#[derive(Debug, Args)]
pub struct ControllerFlags {
    /// The leader lease's time to live: a dead leader is replaced within it.
    #[arg(long, default_value = "5s", value_name = "DURATION", value_parser = duration)]
    pub lease_ttl: Duration,
    /// Also run a workload's pass as soon as its declaration changes, not only every period.
    #[arg(long)]
    pub wake_on_change: bool,
    /// Events older than this are removed from the event log (`measure` cannot look further
    /// back).
    #[arg(long, default_value = "1h", value_name = "DURATION", value_parser = positive_duration)]
    pub event_retention: Duration,
    /// An idle round that shows what its loop's last round showed writes nothing (`measure`
    /// counts it on the loop's grid); one is written at least this often. 0 writes every round.
    #[arg(long, default_value = "5m", value_name = "DURATION", value_parser = duration)]
    pub round_resync: Duration,
    /// On etcd: compact the store's history this often, keeping one interval of it (a stock
    /// etcd never compacts, and refuses every write once its database reaches its quota). 0
    /// leaves compaction to etcd's own `--auto-compaction-retention` or to the operator.
    #[arg(long, default_value = "1m", value_name = "DURATION", value_parser = duration)]
    pub compact_history: Duration,
}

impl ControllerFlags {
    pub(super) fn config(&self) -> anyhow::Result<ControllerConfig> {
        if self.lease_ttl < Duration::from_millis(100) {
            anyhow::bail!(BadInput(format!(
                "--lease-ttl {} is too short: accepted at least 100ms",
                format_duration(self.lease_ttl)
            )));
        }
        if !self.compact_history.is_zero() && self.compact_history < Duration::from_secs(1) {
            anyhow::bail!(BadInput(format!(
                "--compact-history {} is too short: accepted 0 (off) or at least 1s",
                format_duration(self.compact_history)
            )));
        }
        let mut c = ControllerConfig::new(setpoint_runtime::default_holder());
        c.lease_ttl = self.lease_ttl;
        c.wake_on_change = self.wake_on_change;
        c.event_retention = self.event_retention;
        c.round_resync = self.round_resync;
        c.history_compaction = self.compact_history;
        c.poll = (self.lease_ttl / 10).min(Duration::from_millis(100));
        Ok(c)
    }
}

/// Settings of an agent.
#[derive(Debug, Args)]
pub struct AgentFlags {
    /// The reporting period R.
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = positive_duration)]
    pub report_every: Duration,
    /// Added delay between observing the copies and writing the report (emulates a longer
    /// reporting chain).
    #[arg(long, default_value = "0", value_name = "DURATION", value_parser = duration)]
    pub report_delay: Duration,
    /// An agent with no news (no copy started, ready, stopped or ended, no new placement read)
    /// writes its report only this often; liveness is the node lease alone. At least
    /// --report-every.
    #[arg(long, default_value = "5m", value_name = "DURATION", value_parser = positive_duration)]
    pub report_resync: Duration,
    /// Jittered added delays instead of --report-delay: one per report in turn, repeating after
    /// the last (`50ms,250ms,120ms`), as a reporting chain whose delay varies.
    #[arg(long, value_name = "DURATION,...", value_parser = delay_list, conflicts_with = "report_delay")]
    pub report_delays: Option<DelayList>,
    /// How often the agent reads its assignments.
    #[arg(long, default_value = "100ms", value_name = "DURATION", value_parser = positive_duration)]
    pub sync_every: Duration,
    /// A copy's log file (`{data-dir}/nodes/logs/COPY.log`) is renamed to `COPY.log.1` before
    /// it passes this size: bytes, or with a unit KiB, MiB, GiB.
    #[arg(long, default_value = "10MiB", value_name = "SIZE", value_parser = size)]
    pub log_max_size: u64,
    /// How many files a copy's log keeps, the current one included (1 to 100): its disk use
    /// is at most --log-max-size times this.
    #[arg(long, default_value = "5", value_name = "N", value_parser = log_files)]
    pub log_max_files: u32,
    /// The log of a copy that ended is removed this long after its last line.
    #[arg(long, default_value = "1h", value_name = "DURATION", value_parser = positive_duration)]
    pub log_retention: Duration,
    /// The node lease's time to live: an agent that cannot renew its lease for this long is
    /// lost, its copies are replaced elsewhere, and it stops them itself before then.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = duration)]
    pub node_timeout: Duration,
    /// Benchmarks only: report copies without starting processes (a simulated copy is ready
    /// after its startup time and ends only when stopped). Real processes are the default.
    #[arg(long)]
    pub simulate_copies: bool,
}

impl AgentFlags {
    pub(super) fn config(&self, node: &str, state_dir: &Path) -> AgentConfig {
        let mut c = AgentConfig::new(node, state_dir);
        c.report_every = self.report_every;
        c.report_delay = self.report_delay;
        c.report_resync = self.report_resync;
        if let Some(DelayList(ms)) = &self.report_delays {
            c.report_delays = setpoint_runtime::report_delay::ReportDelays::new(ms.clone());
        }
        c.sync_every = self.sync_every;
        c.log_max_bytes = self.log_max_size;
        c.log_max_files = self.log_max_files;
        c.log_retention = self.log_retention;
        c.lease_ttl = self.node_timeout;
        c.simulate_copies = self.simulate_copies;
        c
    }

    pub(super) fn check(&self) -> anyhow::Result<()> {
        if self.report_resync < self.report_every {
            anyhow::bail!(BadInput(format!(
                "--report-resync {} is shorter than --report-every {}: accepted at least \
                 --report-every",
                format_duration(self.report_resync),
                format_duration(self.report_every)
            )));
        }
        if self.node_timeout < Duration::from_millis(200) {
            anyhow::bail!(BadInput(format!(
                "--node-timeout {} is too short: accepted at least 200ms",
                format_duration(self.node_timeout)
            )));
        }
        Ok(())
    }
}

/// How a daemon is observed: its log lines and its metrics endpoint.
#[derive(Debug, Args)]
pub struct ObserveArgs {
    /// Which log lines to write: a level (error, warn, info, debug, trace) or RUST_LOG-style
    /// directives ('info,setpoint=debug') [default: the RUST_LOG environment variable, else
    /// info].
    #[arg(long, value_name = "FILTER")]
    pub(super) log_level: Option<String>,
    /// How to write log lines: text (`HH:MM:SS.mmm who: what`) or json (one object a line).
    #[arg(long, value_enum, default_value = "text", value_name = "FORMAT")]
    pub(super) log_format: LogFormatArg,
    /// Serve Prometheus metrics at http://ADDR/metrics: PORT (on 127.0.0.1), IP:PORT or
    /// [IPv6]:PORT. Off unless given.
    #[arg(long, value_name = "ADDR", value_parser = metrics_addr)]
    pub(super) metrics_addr: Option<std::net::SocketAddr>,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(super) enum LogFormatArg {
    /// `HH:MM:SS.mmm [LEVEL] who: what [key=value…]`.
    Text,
    /// One JSON object per line.
    Json,
}

fn metrics_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    setpoint_runtime::metrics::parse_addr(s).map_err(|e| e.to_string())
}

/// A daemon's observing, set up: logging installed, the metrics endpoint bound.
pub(super) struct Observing {
    pub(super) endpoint: Option<(
        std::net::TcpListener,
        Arc<setpoint_runtime::metrics::Metrics>,
    )>,
}

impl ObserveArgs {
    /// Installs the log subscriber and binds the metrics endpoint: a bad filter or an address
    /// that cannot be bound is refused here, before the daemon starts.
    pub(super) fn start(&self) -> anyhow::Result<Observing> {
        use setpoint_runtime::logging::{init, LogFormat};
        let format = match self.log_format {
            LogFormatArg::Text => LogFormat::Text,
            LogFormatArg::Json => LogFormat::Json,
        };
        init(self.log_level.as_deref(), format).map_err(|e| BadInput(e.to_string()))?;
        let endpoint = match self.metrics_addr {
            None => None,
            Some(addr) => {
                let l =
                    setpoint_runtime::metrics::bind(addr).map_err(|e| BadInput(e.to_string()))?;
                Some((l, setpoint_runtime::metrics::Metrics::new()))
            }
        };
        Ok(Observing { endpoint })
    }
}

impl Observing {
    /// Where the parts count: the endpoint's metrics, or nowhere.
    pub(super) fn sink(&self) -> setpoint_runtime::metrics::MetricsSink {
        self.endpoint
            .as_ref()
            .map(|(_, m)| setpoint_runtime::metrics::MetricsSink::to(m))
            .unwrap_or_default()
    }

    /// Serves the endpoint until `shutdown` (on the runtime the daemon runs on).
    pub(super) fn spawn(self, who: &str, shutdown: setpoint_runtime::Shutdown) {
        let Some((listener, metrics)) = self.endpoint else {
            return;
        };
        if let Ok(addr) = listener.local_addr() {
            setpoint_runtime::rt::log(who, format!("metrics on http://{addr}/metrics"));
        }
        let who = who.to_owned();
        tokio::spawn(async move {
            if let Err(e) = setpoint_runtime::metrics::serve(listener, metrics, shutdown).await {
                setpoint_runtime::rt::warn(&who, format!("the metrics endpoint stopped: {e}"));
            }
        });
    }
}

/// `setpoint controller`.
#[derive(Debug, Args)]
pub struct ControllerArgs {
    #[command(flatten)]
    pub(super) store: StoreArgs,
    #[command(flatten)]
    pub(super) flags: ControllerFlags,
    #[command(flatten)]
    pub(super) observe: ObserveArgs,
}

/// `setpoint agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub(super) store: StoreArgs,
    /// The node's name.
    #[arg(long, value_name = "NAME", value_parser = node_name, required_unless_present = "simulate_nodes")]
    pub(super) node: Option<String>,
    /// Benchmarks and scale tests only: run N simulated nodes in this process, sim-0001 …,
    /// each a whole agent with its own node lease, claim, report and placements, whose copies
    /// are simulated (needs --simulate-copies).
    #[arg(long, value_name = "N", conflicts_with = "node", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(super) simulate_nodes: Option<u32>,
    /// With --simulate-nodes: the number of the first simulated node (sim-0901 … with 901), so
    /// that several processes can share out one cluster's nodes.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(super) simulate_first: Option<u32>,
    #[command(flatten)]
    pub(super) flags: AgentFlags,
    #[command(flatten)]
    pub(super) observe: ObserveArgs,
}

/// `setpoint up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub(super) store: StoreArgs,
    /// How many agents to run, as nodes node-1 … node-N.
    #[arg(long, default_value = "3", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(super) nodes: u32,
    #[command(flatten)]
    pub(super) controller: ControllerFlags,
    #[command(flatten)]
    pub(super) agent: AgentFlags,
    #[command(flatten)]
    pub(super) observe: ObserveArgs,
}

/// `setpoint apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub(super) store: StoreArgs,
    /// The workloads file (TOML, `[[workload]]` tables); `-` reads standard input.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub(super) file: PathBuf,
    /// Say what would change (copies, a rolling update, settings) and write nothing.
    #[arg(long)]
    pub(super) dry_run: bool,
}

/// Output formats of `get` and `status`: the one `--format` of every data command. JSON is one
/// object; CSV one row per workload (`get`) or node (`status`), `docs/output.md`.
pub use crate::output::Format;

/// `setpoint get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub(super) store: StoreArgs,
    /// Only this workload; or `copies`, for one row per copy (of every workload, or of the
    /// workload named next).
    #[arg(value_name = "WORKLOAD|copies")]
    pub(super) workload: Option<String>,
    /// After `copies`: only this workload's copies.
    #[arg(value_name = "WORKLOAD")]
    pub(super) copies_of: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub(super) format: Format,
    #[command(flatten)]
    pub(super) watch: crate::inspect::WatchArgs,
}

/// `setpoint delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub(super) store: StoreArgs,
    /// The workload to remove.
    #[arg(value_name = "WORKLOAD")]
    pub(super) workload: String,
}

/// `setpoint kill`.
#[derive(Debug, Args)]
pub struct KillArgs {
    #[command(flatten)]
    pub(super) store: StoreArgs,
    /// The workload whose copies die.
    #[arg(value_name = "WORKLOAD")]
    pub(super) workload: String,
    /// How many copies to kill.
    #[arg(value_name = "COUNT", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(super) count: u64,
}

/// `setpoint status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub(super) store: StoreArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub(super) format: Format,
    #[command(flatten)]
    pub(super) watch: crate::inspect::WatchArgs,
}

/// An input the user can fix: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// Whether `e` is the user's to fix (exit code 2) rather than a failure (exit code 1).
pub fn is_bad_input(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.is::<BadInput>()
            || c.is::<SpecError>()
            || c.downcast_ref::<setpoint_runtime::store::OpenError>()
                .is_some_and(|o| o.is_bad_input())
            || c.downcast_ref::<setpoint_runtime::StoreError>()
                .is_some_and(|s| matches!(s, setpoint_runtime::StoreError::Refused(_)))
            || c.downcast_ref::<OpError>().is_some_and(|o| {
                matches!(o, OpError::Store(setpoint_runtime::StoreError::Refused(_)))
            })
            || c.downcast_ref::<OpError>()
                .is_some_and(|o| matches!(o, OpError::NotFound(_)))
            || c.downcast_ref::<setpoint_runtime::AgentError>()
                .is_some_and(setpoint_runtime::AgentError::is_refusal)
            || c.downcast_ref::<setpoint_runtime::model::node::ForgetError>()
                .is_some_and(setpoint_runtime::model::node::ForgetError::is_refusal)
    })
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    match duration(s)? {
        d if d.is_zero() => Err("0 is out of range: accepted at least 1ms".into()),
        d => Ok(d),
    }
}

/// `--report-delays`: milliseconds, one per report in turn. A newtype, so that clap takes the
/// whole list as one value.
#[derive(Clone, Debug)]
pub struct DelayList(Vec<u64>);

fn delay_list(s: &str) -> Result<DelayList, String> {
    let ms: Vec<u64> = s
        .split(',')
        .map(|d| duration(d.trim()).map(|d| d.as_millis() as u64))
        .collect::<Result<_, _>>()?;
    if ms.len() > 10_000 {
        return Err(format!(
            "{} delays: accepted at most 10000 (the schedule repeats)",
            ms.len()
        ));
    }
    Ok(DelayList(ms))
}

fn size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = t.split_at(digits);
    let scale: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return Err(format!("'{s}' is not a size: accepted a whole number of bytes, or with KiB, MiB or GiB (1024 bytes and up)")),
    };
    match n.parse::<u64>().ok().and_then(|n| n.checked_mul(scale)) {
        Some(b) if (1024..=1 << 40).contains(&b) => Ok(b),
        _ => Err(format!("'{s}' is out of range: accepted 1KiB to 1024GiB")),
    }
}

fn log_files(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=100).contains(&n) => Ok(n),
        _ => Err(format!(
            "'{s}' is not a number of log files: accepted a whole number from 1 to 100"
        )),
    }
}

fn node_name(s: &str) -> Result<String, String> {
    setpoint_runtime::spec::check_name(s).map(|()| s.to_owned())
}
