//! The runtime's commands: `controller`, `agent`, `up`, `apply`, `get` (and `get copies`),
//! `describe`, `events`, `delete`, `kill`, `status`, `logs` and `node forget`. The clap types
//! live here (`describe`'s, `events`' and `--watch`'s in [`crate::inspect`]); the work is done
//! by setpoint-runtime.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::runtime_table::{get_table, plural, status_table};
use setpoint_runtime::ops::{self, OpError};
use setpoint_runtime::remote;
use setpoint_runtime::{
    format_duration, parse_duration, run_agent, run_controller, shutdown_pair, AgentConfig,
    ControllerConfig, OpenMode, SpecError, Store, StoreUrl,
};

/// How long `kill` waits for the agents to carry its requests out.
const KILL_WAIT: Duration = Duration::from_secs(10);

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
    store: StoreArgs,
    /// The lost node, as `setpoint status` names it.
    #[arg(value_name = "NODE", value_parser = node_name)]
    node: String,
}

/// `setpoint logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The copy, as `setpoint get copies` names it (`web-3`).
    #[arg(value_name = "COPY")]
    copy: String,
    /// Only the last N lines.
    #[arg(long, value_name = "N")]
    tail: Option<usize>,
    /// Keep printing what the copy writes, until it ends (or Ctrl-C).
    #[arg(short = 'f', long)]
    follow: bool,
    /// Read the log through the store from the agent of the copy's node, even if the data
    /// directory holds it (the default when it does not: `logs` from another host).
    #[arg(long)]
    through_store: bool,
    /// How long to wait for the agent's answer to each request.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = positive_duration)]
    answer_timeout: Duration,
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

    fn open(&self) -> anyhow::Result<Arc<dyn Store>> {
        Ok(self.url()?.open(OpenMode::Create)?)
    }

    /// Opens the store for a command that only reads or changes what is there (`get`,
    /// `status`, `delete`): a store never used is a mistake in `--data-dir` or `--store`, not
    /// a reason to create an empty one.
    fn open_existing(&self) -> anyhow::Result<Arc<dyn Store>> {
        Ok(self.url()?.open(OpenMode::Existing)?)
    }

    /// Opens the existing store for a command that only reads (`get`, `status`): it writes
    /// nothing, so a user who may read the store but not write it can run it.
    pub(crate) fn open_read_only(&self) -> anyhow::Result<Arc<dyn Store>> {
        Ok(self.url()?.open(OpenMode::ReadOnly)?)
    }

    fn state_dir(&self) -> PathBuf {
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
    fn config(&self) -> anyhow::Result<ControllerConfig> {
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
    fn config(&self, node: &str, state_dir: &Path) -> AgentConfig {
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

    fn check(&self) -> anyhow::Result<()> {
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
    log_level: Option<String>,
    /// How to write log lines: text (`HH:MM:SS.mmm who: what`) or json (one object a line).
    #[arg(long, value_enum, default_value = "text", value_name = "FORMAT")]
    log_format: LogFormatArg,
    /// Serve Prometheus metrics at http://ADDR/metrics: PORT (on 127.0.0.1), IP:PORT or
    /// [IPv6]:PORT. Off unless given.
    #[arg(long, value_name = "ADDR", value_parser = metrics_addr)]
    metrics_addr: Option<std::net::SocketAddr>,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LogFormatArg {
    /// `HH:MM:SS.mmm [LEVEL] who: what [key=value…]`.
    Text,
    /// One JSON object per line.
    Json,
}

fn metrics_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    setpoint_runtime::metrics::parse_addr(s).map_err(|e| e.to_string())
}

/// A daemon's observing, set up: logging installed, the metrics endpoint bound.
struct Observing {
    endpoint: Option<(
        std::net::TcpListener,
        Arc<setpoint_runtime::metrics::Metrics>,
    )>,
}

impl ObserveArgs {
    /// Installs the log subscriber and binds the metrics endpoint: a bad filter or an address
    /// that cannot be bound is refused here, before the daemon starts.
    fn start(&self) -> anyhow::Result<Observing> {
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
    fn sink(&self) -> setpoint_runtime::metrics::MetricsSink {
        self.endpoint
            .as_ref()
            .map(|(_, m)| setpoint_runtime::metrics::MetricsSink::to(m))
            .unwrap_or_default()
    }

    /// Serves the endpoint until `shutdown` (on the runtime the daemon runs on).
    fn spawn(self, who: &str, shutdown: setpoint_runtime::Shutdown) {
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
    store: StoreArgs,
    #[command(flatten)]
    flags: ControllerFlags,
    #[command(flatten)]
    observe: ObserveArgs,
}

/// `setpoint agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The node's name.
    #[arg(long, value_name = "NAME", value_parser = node_name, required_unless_present = "simulate_nodes")]
    node: Option<String>,
    /// Benchmarks and scale tests only: run N simulated nodes in this process, sim-0001 …,
    /// each a whole agent with its own node lease, claim, report and placements, whose copies
    /// are simulated (needs --simulate-copies).
    #[arg(long, value_name = "N", conflicts_with = "node", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    simulate_nodes: Option<u32>,
    /// With --simulate-nodes: the number of the first simulated node (sim-0901 … with 901), so
    /// that several processes can share out one cluster's nodes.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    simulate_first: Option<u32>,
    #[command(flatten)]
    flags: AgentFlags,
    #[command(flatten)]
    observe: ObserveArgs,
}

/// `setpoint up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// How many agents to run, as nodes node-1 … node-N.
    #[arg(long, default_value = "3", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    nodes: u32,
    #[command(flatten)]
    controller: ControllerFlags,
    #[command(flatten)]
    agent: AgentFlags,
    #[command(flatten)]
    observe: ObserveArgs,
}

/// `setpoint apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The workloads file (TOML, `[[workload]]` tables); `-` reads standard input.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    file: PathBuf,
    /// Say what would change (copies, a rolling update, settings) and write nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Output formats of `get` and `status`: the one `--format` of every data command. JSON is one
/// object; CSV one row per workload (`get`) or node (`status`), `docs/output.md`.
pub use crate::output::Format;

/// `setpoint get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Only this workload; or `copies`, for one row per copy (of every workload, or of the
    /// workload named next).
    #[arg(value_name = "WORKLOAD|copies")]
    workload: Option<String>,
    /// After `copies`: only this workload's copies.
    #[arg(value_name = "WORKLOAD")]
    copies_of: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    #[command(flatten)]
    watch: crate::inspect::WatchArgs,
}

/// `setpoint delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The workload to remove.
    #[arg(value_name = "WORKLOAD")]
    workload: String,
}

/// `setpoint kill`.
#[derive(Debug, Args)]
pub struct KillArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The workload whose copies die.
    #[arg(value_name = "WORKLOAD")]
    workload: String,
    /// How many copies to kill.
    #[arg(value_name = "COUNT", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    count: u64,
}

/// `setpoint status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    #[command(flatten)]
    watch: crate::inspect::WatchArgs,
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

/// Runs one runtime command; returns what to print on stdout.
pub fn execute(cmd: RuntimeCommand) -> anyhow::Result<String> {
    match cmd {
        RuntimeCommand::Controller(a) => {
            let mut cfg = a.flags.config()?;
            let url = a.store.url()?;
            let observing = a.observe.start()?;
            cfg.metrics = observing.sink();
            serve(|shutdown| async move {
                let who = format!("controller {}", cfg.holder);
                observing.spawn(&who, shutdown.clone());
                let opened = url.open_retrying(OpenMode::Create, &who, shutdown.clone());
                if let Some(store) = opened.await? {
                    run_controller(store, cfg, shutdown).await?;
                }
                Ok(())
            })?;
            Ok(String::new())
        }
        RuntimeCommand::Agent(a) => {
            a.flags.check()?;
            if let Some(nodes) = a.simulate_nodes {
                return simulated_nodes(&a, nodes);
            }
            if let Some(first) = a.simulate_first {
                anyhow::bail!(BadInput(format!(
                    "--simulate-first {first} numbers simulated nodes: accepted only with \
                     --simulate-nodes N"
                )));
            }
            let node = a.node.as_deref().unwrap_or_default();
            let mut cfg = a.flags.config(node, &a.store.state_dir());
            cfg.started_ms = Some(setpoint_runtime::store::wall_ms());
            let url = a.store.url()?;
            let observing = a.observe.start()?;
            cfg.metrics = observing.sink();
            serve(|shutdown| async move {
                let who = format!("agent {}", cfg.node);
                observing.spawn(&who, shutdown.clone());
                // The agent runs, and fences, even while its store cannot be reached: copies
                // an earlier agent here started may be running (store/reopening.rs).
                let store = url.open_or_later(&who).await?;
                run_agent(store, cfg, shutdown).await?;
                Ok(())
            })?;
            Ok(String::new())
        }
        RuntimeCommand::Up(a) => up(&a),
        RuntimeCommand::Apply(a) => {
            if matches!(a.store.url()?, StoreUrl::Memory) && !a.dry_run {
                anyhow::bail!(BadInput(
                    "--store memory: keeps nothing past this command, so nothing would run what \
                     apply declares: accepted sqlite:DIR or etcd://HOST:PORT (or --dry-run)"
                        .into()
                ));
            }
            let text = if a.file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin().lock())
                    .context("reading the workloads from standard input")
            } else {
                std::fs::read_to_string(&a.file)
                    .with_context(|| format!("reading {}", a.file.display()))
            }
            .map_err(|e| BadInput(format!("{e:#}")))?;
            let specs = setpoint_runtime::parse_workloads(&text)
                .with_context(|| format!("{} was not applied", a.file.display()))?;
            if a.dry_run {
                let mut text = String::new();
                for (name, change) in ops::apply_preview(&*a.store.open_read_only()?, &specs)? {
                    match change {
                        None => writeln!(text, "workload {name}: would be created")?,
                        Some(c) if c.is_empty() => writeln!(text, "workload {name}: unchanged")?,
                        Some(c) => writeln!(text, "workload {name}: {}", c.join("; "))?,
                    }
                }
                return Ok(text);
            }
            let out = ops::apply(&*a.store.open()?, &specs)?;
            let mut text = String::new();
            for (verb, names) in [
                ("created", &out.created),
                ("updated", &out.updated),
                ("unchanged", &out.unchanged),
            ] {
                for n in names {
                    writeln!(text, "workload {n} {verb}")?;
                }
            }
            Ok(text)
        }
        RuntimeCommand::Get(a) => {
            let store = a.store.open_read_only()?;
            if a.workload.as_deref() == Some("copies") {
                let of = a.copies_of.as_deref();
                return crate::inspect::watch(&a.watch, || {
                    crate::inspect::copies_view(&*store, of, a.format)
                });
            }
            if let Some(extra) = &a.copies_of {
                anyhow::bail!(BadInput(format!(
                    "unexpected '{extra}' after the workload: accepted 'get [WORKLOAD]' or \
                     'get copies [WORKLOAD]'"
                )));
            }
            crate::inspect::watch(&a.watch, || {
                let all = ops::get(&*store, a.workload.as_deref())?;
                let problems = ops::problems(&*store)?;
                let text = match a.format {
                    Format::Json => crate::output::json_with_schema(
                        &serde_json::json!({ "workloads": all, "problems": problems }),
                    )?,
                    Format::Table => get_table(&all) + &problem_lines(&problems),
                    Format::Csv => crate::records::csv(
                        &crate::records::get_records(&all),
                        crate::records::GET_KEYS,
                    ),
                };
                Ok((serde_json::to_value(&all)?, text))
            })
        }
        RuntimeCommand::Describe(a) => crate::inspect::describe(&a, &*a.store.open_read_only()?),
        RuntimeCommand::Events(a) => crate::inspect::events(&a, &*a.store.open_read_only()?),
        RuntimeCommand::Delete(a) => {
            ops::delete(&*a.store.open_existing()?, &a.workload)?;
            Ok(format!("workload {} deleted\n", a.workload))
        }
        RuntimeCommand::Kill(a) => {
            let store = a.store.open_existing()?;
            ops::require_declared(&*store, &a.workload)?;
            let (workload, count) = (a.workload.clone(), a.count);
            let outcomes = (|| {
                let batch = remote::request_kills(&*store, &workload, count, KILL_WAIT * 2)?;
                remote::await_kills(&*store, &batch, KILL_WAIT)
            })()
            .context("killing copies")?;
            if outcomes.is_empty() {
                anyhow::bail!("no live node reports a running copy of '{}'", a.workload);
            }
            if (outcomes.len() as u64) < a.count {
                // Asked for more than run: say so, as the killed lines alone would not.
                eprintln!(
                    "note: only {} of '{}' {} running: asked to kill {}, killing {}",
                    plural(outcomes.len() as u64, "copy", "copies"),
                    a.workload,
                    if outcomes.len() == 1 { "was" } else { "were" },
                    a.count,
                    outcomes.len()
                );
            }
            let mut out = String::new();
            let mut unanswered = Vec::new();
            for (copy, outcome) in &outcomes {
                match outcome {
                    // One word per line to script against, as before the kill went remote.
                    Some(o) if o.starts_with("killed ") => writeln!(out, "killed {copy}")?,
                    Some(o) => writeln!(out, "not killed {copy}: {o}")?,
                    None => unanswered.push(copy.as_str()),
                }
            }
            if !unanswered.is_empty() {
                print!("{out}");
                anyhow::bail!(
                    "no agent carried out the kill of {} within {}: is its node cut off?",
                    unanswered.join(", "),
                    format_duration(KILL_WAIT)
                );
            }
            Ok(out)
        }
        RuntimeCommand::Logs(a) => logs(&a),
        RuntimeCommand::Node(NodeCommand::Forget(a)) => {
            let store = a.store.open_existing()?;
            let (rec, released) = setpoint_runtime::model::node::forget(&*store, &a.node)?;
            Ok(format!(
                "node {} forgotten at revision {}: {} released; their named \
                 copies start again on live nodes\n",
                rec.node,
                rec.revision,
                plural(released as u64, "assignment", "assignments")
            ))
        }
        RuntimeCommand::Status(a) => {
            let store = a.store.open_read_only()?;
            crate::inspect::watch(&a.watch, || {
                let s = ops::status(&*store)?;
                let text = match a.format {
                    Format::Json => crate::output::json_with_schema(&s)?,
                    Format::Table => status_table(&s) + &problem_lines(&s.problems),
                    Format::Csv => crate::records::csv(
                        &crate::records::status_records(&s),
                        crate::records::STATUS_KEYS,
                    ),
                };
                Ok((serde_json::to_value(&s)?, text))
            })
        }
    }
}

/// One line per stored record left out as a problem: `problem {key}: {reason}`.
fn problem_lines(problems: &std::collections::BTreeMap<String, String>) -> String {
    problems
        .iter()
        .map(|(k, r)| format!("problem {k}: {r}\n"))
        .collect()
}

fn logs(a: &LogsArgs) -> anyhow::Result<String> {
    use setpoint_runtime::logs as copy_logs;
    use std::io::Write as _;
    let state = a.store.state_dir();
    if !copy_logs::valid_copy_name(&a.copy) {
        anyhow::bail!(BadInput(format!(
            "'{}' is not a copy name: accepted a copy as 'setpoint get copies' lists it, e.g. web-3",
            a.copy
        )));
    }
    let local = copy_logs::log_path(&state, &a.copy);
    let held = local.exists() || setpoint_runtime::retention::rotated(&local).exists();
    if a.through_store || !held {
        return logs_through_store(a);
    }
    let Some(text) = copy_logs::read(&state, &a.copy, a.tail)? else {
        anyhow::bail!(BadInput(format!(
            "no log of copy '{}' in {}: accepted a copy of this data directory, as 'setpoint get copies' lists it (a log is removed a retention period after its copy ended)",
            a.copy,
            state.join("logs").display()
        )));
    };
    if !a.follow {
        return Ok(String::from_utf8_lossy(&text).into_owned());
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&text).and_then(|()| out.flush())?;
    let mut f = copy_logs::Follower::new(&state, &a.copy);
    // Until the copy has ended, as its agent's state file says, and everything is printed.
    loop {
        let running = setpoint_runtime::agent::read_all_node_states(&state)
            .iter()
            .flat_map(|s| &s.copies)
            .any(|r| {
                r.assignment.copy == a.copy && r.phase != setpoint_runtime::model::Phase::Exited
            });
        let more = f.poll()?;
        out.write_all(&more).and_then(|()| out.flush())?;
        if !running && more.is_empty() {
            return Ok(String::new());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `logs` through the store: the agent of the copy's node reads its log for us
/// (setpoint_runtime::log_requests), a chunk at a time.
fn logs_through_store(a: &LogsArgs) -> anyhow::Result<String> {
    use setpoint_runtime::log_requests::{LogReadError, LogReader, FOLLOW_POLL};
    use std::io::Write as _;
    let store = a.store.open_existing()?;
    let bad = |e: LogReadError| -> anyhow::Error {
        match e {
            LogReadError::NoCopy(_)
            | LogReadError::NoAgent { .. }
            | LogReadError::Refused { .. } => BadInput(e.to_string()).into(),
            e => e.into(),
        }
    };
    let mut reader = LogReader::open(store.as_ref(), &a.copy, a.answer_timeout).map_err(bad)?;
    let mut out = std::io::stdout().lock();
    let mut from = 0;
    let mut tail = a.tail.map(|t| t as u64);
    let mut first = true;
    loop {
        let answer = reader.fetch(from, tail.take()).map_err(bad)?;
        if answer.missing && first {
            anyhow::bail!(BadInput(format!(
                "no log of copy '{}' on node {}: accepted a copy as 'setpoint get copies' lists it (a log is removed a retention period after its copy ended)",
                a.copy,
                reader.node()
            )));
        }
        first = false;
        let bytes = answer.bytes().ok_or_else(|| {
            anyhow::anyhow!("the agent of node {} sent damaged hex", reader.node())
        })?;
        out.write_all(&bytes).and_then(|()| out.flush())?;
        from = answer.next();
        let caught_up = from >= answer.len;
        if caught_up && (!a.follow || !answer.running) {
            return Ok(String::new());
        }
        if caught_up {
            std::thread::sleep(FOLLOW_POLL);
        }
    }
}

/// `setpoint agent --simulate-nodes N`: N simulated agents in this process.
fn simulated_nodes(a: &AgentArgs, nodes: u32) -> anyhow::Result<String> {
    if !a.flags.simulate_copies {
        anyhow::bail!(BadInput(
            "--simulate-nodes runs simulated copies only: add --simulate-copies (real processes \
             need one agent per node)"
                .into()
        ));
    }
    let first = a.simulate_first.unwrap_or(1);
    let last = first.saturating_add(nodes - 1);
    if last > setpoint_runtime::agent::MAX_SIMULATED_NODES {
        anyhow::bail!(BadInput(format!(
            "--simulate-first {first} --simulate-nodes {nodes}: the last node would be number \
             {last}; accepted numbers 1 to {}",
            setpoint_runtime::agent::MAX_SIMULATED_NODES
        )));
    }
    let mut cfg = a.flags.config("sim", &a.store.state_dir());
    cfg.started_ms = Some(setpoint_runtime::store::wall_ms());
    let url = a.store.url()?;
    let observing = a.observe.start()?;
    cfg.metrics = observing.sink();
    serve(|shutdown| async move {
        let who = format!(
            "agents {}…{}",
            setpoint_runtime::agent::simulated_node_name(first, last),
            setpoint_runtime::agent::simulated_node_name(last, last)
        );
        observing.spawn(&who, shutdown.clone());
        setpoint_runtime::agent::run_simulated_nodes(&url, cfg, first, nodes, shutdown).await?;
        Ok(())
    })?;
    Ok(String::new())
}

fn up(a: &UpArgs) -> anyhow::Result<String> {
    let mut ccfg = a.controller.config()?;
    a.agent.check()?;
    let url = a.store.url()?;
    let state_dir = a.store.state_dir();
    let mut agents: Vec<AgentConfig> = (1..=a.nodes)
        .map(|i| a.agent.config(&format!("node-{i}"), &state_dir))
        .collect();
    // A second `up` on a data directory whose nodes run is refused by its agents' locks; ask
    // the locks first, so that the refused one writes nothing into the running one's up.log.
    if state_dir.is_dir() {
        for cfg in &agents {
            setpoint_runtime::model::node::DirLock::acquire(&state_dir, &cfg.node)
                .map_err(|e| BadInput(e.to_string()))?;
        }
    }
    let observing = a.observe.start()?;
    // One endpoint for the whole cluster: the agents' series are labelled by node.
    ccfg.metrics = observing.sink();
    for cfg in &mut agents {
        cfg.metrics = observing.sink();
    }
    let up_log = a.store.data_dir.join("up.log");
    setpoint_runtime::rt::log_to_file(&up_log)
        .with_context(|| format!("opening {}", up_log.display()))?;
    setpoint_runtime::rt::say(&format!(
        "setpoint up: a controller and {} on {url}; Ctrl-C stops everything; log in {}",
        plural(a.nodes.into(), "agent", "agents"),
        up_log.display()
    ));
    serve(|shutdown| async move {
        observing.spawn("setpoint up", shutdown.clone());
        let Some(store) = url
            .open_retrying(OpenMode::Create, "setpoint up", shutdown.clone())
            .await?
        else {
            return Ok(());
        };
        // The parts stop on the user's signal, and also when one of them fails (a refused node
        // name, a lost store), so that `up` never runs on with a part missing.
        let (stop_all, parts) = setpoint_runtime::shutdown_pair();
        let stop_all = Arc::new(stop_all);
        {
            let (stop_all, mut outer) = (Arc::clone(&stop_all), shutdown.clone());
            tokio::spawn(async move {
                outer.wait().await;
                stop_all.fire();
            });
        }
        let shutdown = parts;
        let mut tasks = tokio::task::JoinSet::new();
        for cfg in agents {
            let (store, shutdown) = (Arc::clone(&store), shutdown.clone());
            tasks.spawn(async move {
                run_agent(store, cfg, shutdown)
                    .await
                    .map_err(anyhow::Error::from)
            });
        }
        tasks.spawn(async move {
            run_controller(store, ccfg, shutdown)
                .await
                .map_err(anyhow::Error::from)
        });
        // Every part ends by itself (a lost store stops each of them): wait for all, so that no
        // agent is cut off before it has stopped its copies, then report the first failure.
        let mut first = None;
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done.map_err(anyhow::Error::from).and_then(|r| r) {
                // A lost store stops every part by itself, each saying so; any other failure
                // (a refused node name) stops the others here.
                let lost = e.chain().any(|c| {
                    c.downcast_ref::<setpoint_runtime::StoreError>()
                        .is_some_and(|s| s.is_lost())
                        || c.downcast_ref::<setpoint_runtime::AgentError>().is_some_and(|a| {
                            matches!(a, setpoint_runtime::AgentError::Store(s) if s.is_lost())
                        })
                });
                if !lost {
                    stop_all.fire();
                }
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    })?;
    Ok(String::new())
}

/// Runs `body` on a tokio runtime until it ends; SIGINT (Ctrl-C), SIGTERM or SIGHUP fires its
/// shutdown signal and waits for it to finish cleanly. Nothing on this path writes with
/// `eprintln!`, so a closed stderr cannot cut the cleanup short.
fn serve<F, Fut>(body: F) -> anyhow::Result<()>
where
    F: FnOnce(setpoint_runtime::Shutdown) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let (trigger, shutdown) = shutdown_pair();
        let mut work = tokio::spawn(body(shutdown));
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
        let why = tokio::select! {
            done = &mut work => return done.context("the runtime task failed")?,
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
            _ = hup.recv() => "SIGHUP",
        };
        setpoint_runtime::rt::say(&format!("setpoint: {why}: shutting down"));
        trigger.fire();
        work.await.context("the runtime task failed")?
    })
}
