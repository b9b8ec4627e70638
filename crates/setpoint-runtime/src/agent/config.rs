//! How an agent machine runs ([`AgentCoreConfig`]) and where its copies' nonces come from.

/// Where the nonces of new copies come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Nonces {
    /// Secret random nonces ([`crate::sandbox::new_nonce`]): what a real agent uses, since a
    /// nonce proves after a crash that a process is the agent's own.
    Random,
    /// `{seed:016x}{counter:016x}`: deterministic, for simulations (guessable, never for real
    /// processes).
    Counter(u64),
}

/// How long an agent with no news goes without writing its report, by default: 5 minutes, as
/// the kubelet's node status when nothing changed (KEP-589).
pub const DEFAULT_REPORT_RESYNC_MS: u64 = 300_000;

/// How an agent machine runs. Every time is in milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentCoreConfig {
    /// The node's name, as assignments and reports name it.
    pub node: String,
    /// The machine the agent runs on, as its node record names it.
    pub host: String,
    /// The agent's state directory, canonical: with `host`, where the agent lives.
    pub place: String,
    /// The agent's process id, as records and reports show it.
    pub agent_pid: u32,
    /// The reporting period R.
    pub report_every_ms: u64,
    /// Added delay between observing the copies and writing the report.
    pub report_delay_ms: u64,
    /// How long an agent with no news goes without writing its report: it writes one at least
    /// this long after the last one's observation (see the agent's reports, docs/runtime.md "Reports on change").
    pub report_resync_ms: u64,
    /// Jittered added delays, one per report in turn, in place of `report_delay_ms` when not
    /// empty ([`crate::report_delay`]).
    pub report_delays: crate::report_delay::ReportDelays,
    /// How often the agent reads its assignments and kill requests (with a watch cache: how
    /// often it falls back to reading the store while the cache cannot serve).
    pub sync_every_ms: u64,
    /// Whether the store pushes changes ([`crate::store::Store::watches`]): then the agent
    /// keeps a watch cache of its placements and kill requests and syncs when it changes
    /// (see the module docs), instead of reading the store every `sync_every_ms`.
    pub watch_cache: bool,
    /// The node lease's time to live.
    pub lease_ttl_ms: u64,
    /// Report copies without processes (benchmarks of the control plane): a simulated copy has
    /// pid 0, becomes ready after its startup time, and ends only when it is stopped.
    pub simulate_copies: bool,
    /// Whether the agent asks its driver to tend the copies' logs
    /// ([`AgentOutput::TendLogs`](super::AgentOutput::TendLogs), with the set of running copies).
    /// A driver that keeps no log files (the chaos world) turns it off, so that the set is not
    /// built every second for nothing; the clocks of log tending run either way.
    pub tend_logs: bool,
    /// How long the machine waits for a store reply before it counts the request as failed.
    pub request_timeout_ms: u64,
    /// Where new copies' nonces come from.
    pub nonces: Nonces,
    /// When the agent's process started, on the machine's clock, if before the machine was
    /// made (a driver that first tried to open its store): the first claim's fence counts from
    /// it. `None`: from the machine's creation.
    pub started_ms: Option<u64>,
    /// Injected bug for the chaos checker's own test: when the lease is lost, the agent does
    /// not stop its copies. Nothing in the CLI or in any file sets it; it is hidden from the
    /// docs and only test code turns it on.
    #[doc(hidden)]
    pub bug_no_self_fence: bool,
}

impl AgentCoreConfig {
    /// A machine for `node`: R = 1s, no added delay, a resync every 5 minutes, assignments read every 100ms (no watch
    /// cache), a node lease
    /// of 10s, store requests given 5s, random nonces, host and place `node` itself, pid 0.
    pub fn new(node: impl Into<String>) -> Self {
        let node = node.into();
        Self {
            host: node.clone(),
            place: node.clone(),
            node,
            agent_pid: 0,
            report_every_ms: 1_000,
            report_delay_ms: 0,
            report_resync_ms: DEFAULT_REPORT_RESYNC_MS,
            report_delays: Default::default(),
            sync_every_ms: 100,
            watch_cache: false,
            lease_ttl_ms: 10_000,
            simulate_copies: false,
            tend_logs: true,
            request_timeout_ms: 5_000,
            nonces: Nonces::Random,
            started_ms: None,
            bug_no_self_fence: false,
        }
    }
}
