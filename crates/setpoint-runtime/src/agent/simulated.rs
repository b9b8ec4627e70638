//! Simulated nodes ([`run_simulated_nodes`]): many agents in one process, kwok-style, for
//! benchmarks and scale tests of the control plane.
//!
//! Each simulated node is a whole agent ([`run_agent`]) with its own name (`sim-0001`, …), node
//! lease, claim, report, placements and lease file; only its copies are simulated
//! ([`AgentConfig::simulate_copies`]: reports without processes). So the controller and the
//! store see exactly what as many real agents would show them.
//!
//! Agents share store connections, [`AGENTS_PER_CONNECTION`] to one on a networked store: one
//! HTTP/2 connection for a thousand agents' small answers trips h2's budget for small DATA frames,
//! and the connection is closed with `ENHANCE_YOUR_CALM` ("too_many_data_frames", found by
//! the first 1,000-node run), while one connection each costs a thousand sockets and client
//! threads. An embedded store (SQLite, memory) is shared by all. They start in a ramp, one
//! group every [`SIMULATED_RAMP`].
//!
//! It is separate from the driver because it only multiplies it: nothing here is in a real
//! agent's path.

use std::sync::Arc;

use super::driver::{run_agent, AgentConfig};
use super::error::AgentError;
use crate::rt::Shutdown;
use crate::store::{OpenError, Store, StoreUrl};

/// How many simulated agents share one connection to a networked store.
pub const AGENTS_PER_CONNECTION: usize = 20;

/// How long apart groups of [`AGENTS_PER_CONNECTION`] simulated agents start: a thousand
/// agents claiming, reading their state and writing their first reports within one second made
/// etcd miss a 3 s deadline on the 2-core development machine; at 20 agents every 100 ms, 1,000
/// start in 5 s.
pub const SIMULATED_RAMP: std::time::Duration = std::time::Duration::from_millis(100);

/// The most simulated nodes one process runs.
pub const MAX_SIMULATED_NODES: u32 = 10_000;

/// The name of simulated node `i` (from 1) of `n`: `sim-0001`, zero-padded to at least four
/// digits and to the width of `n`.
pub fn simulated_node_name(i: u32, n: u32) -> String {
    let width = n.to_string().len().max(4);
    format!("sim-{i:0width$}")
}

/// Why simulated nodes could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimulatedError {
    /// The settings ask for what simulated nodes cannot do.
    #[error("{0}")]
    Settings(String),
    /// The store could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// One of the agents ended with an error (the first one, by node name).
    #[error("{node}: {source}")]
    Agent {
        /// The simulated node.
        node: String,
        /// What ended it.
        source: AgentError,
    },
}

/// Runs `nodes` simulated agents (see the module docs) on `url` until `shutdown`
/// fires, numbered from `first` (so that several processes can share out a cluster's nodes, and
/// a benchmark can lose some of them at once by ending one process): `base` with each node's
/// name; its `simulate_copies` must be set (real processes need one agent per node).
pub async fn run_simulated_nodes(
    url: &StoreUrl,
    base: AgentConfig,
    first: u32,
    nodes: u32,
    shutdown: Shutdown,
) -> Result<(), SimulatedError> {
    if !base.simulate_copies {
        return Err(SimulatedError::Settings(
            "simulated nodes run simulated copies only: real processes need one agent per node"
                .into(),
        ));
    }
    if !(1..=MAX_SIMULATED_NODES).contains(&nodes) {
        return Err(SimulatedError::Settings(format!(
            "{nodes} simulated nodes: accepted 1 to {MAX_SIMULATED_NODES}"
        )));
    }
    let last = u64::from(first) + u64::from(nodes) - 1;
    if first == 0 || last > u64::from(MAX_SIMULATED_NODES) {
        return Err(SimulatedError::Settings(format!(
            "simulated nodes {first} to {last}: accepted numbers 1 to {MAX_SIMULATED_NODES}"
        )));
    }
    let last = last as u32;
    let networked = matches!(url, StoreUrl::Etcd(_));
    let mut shared: Option<Arc<dyn Store>> = None;
    let mut tasks = tokio::task::JoinSet::new();
    for i in first..=last {
        let node = simulated_node_name(i, last);
        let k = (i - first) as usize;
        let reuse = !networked || k % AGENTS_PER_CONNECTION != 0;
        if k % AGENTS_PER_CONNECTION == 0 && k > 0 {
            tokio::time::sleep(SIMULATED_RAMP).await;
        }
        let store = match &shared {
            Some(s) if reuse => Arc::clone(s),
            _ => {
                let s = url.open_or_later(&format!("agent {node}")).await?;
                shared = Some(Arc::clone(&s));
                s
            }
        };
        // Each is born when it starts, in the ramp, not with the process: a first claim's
        // fence counts from the agent's birth, and the process's birth would fence the later
        // groups of the ramp before they could claim (nothing to stop: simulated copies do
        // not outlive their agent).
        let cfg = AgentConfig {
            node: node.clone(),
            started_ms: None,
            ..base.clone()
        };
        let shutdown = shutdown.clone();
        tasks.spawn(async move { (node, run_agent(store, cfg, shutdown).await) });
    }
    let mut first: Option<(String, AgentError)> = None;
    while let Some(joined) = tasks.join_next().await {
        let (node, result) = joined.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        if let Err(e) = result {
            if first.as_ref().is_none_or(|(n, _)| node < *n) {
                first = Some((node, e));
            }
        }
    }
    match first {
        Some((node, source)) => Err(SimulatedError::Agent { node, source }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_padded_to_four_digits_and_to_the_width_of_the_count() {
        assert_eq!(simulated_node_name(1, 1000), "sim-0001");
        assert_eq!(simulated_node_name(1000, 1000), "sim-1000");
        assert_eq!(simulated_node_name(7, 10_000), "sim-00007");
        let names: Vec<String> = (1..=12).map(|i| simulated_node_name(i, 12)).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "names sort in number order");
    }

    #[tokio::test]
    async fn real_processes_and_counts_out_of_range_are_refused() {
        let (_stop, shutdown) = crate::shutdown_pair();
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::Memory;
        let real = AgentConfig::new("x", dir.path());
        let e = run_simulated_nodes(&url, real.clone(), 1, 3, shutdown.clone())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("simulated copies only"), "{e}");
        let sim = AgentConfig {
            simulate_copies: true,
            ..real
        };
        for n in [0, MAX_SIMULATED_NODES + 1] {
            let e = run_simulated_nodes(&url, sim.clone(), 1, n, shutdown.clone())
                .await
                .unwrap_err();
            assert!(e.to_string().contains("accepted 1 to 10000"), "{e}");
        }
        for (first, n) in [(0, 5), (MAX_SIMULATED_NODES - 3, 5)] {
            let e = run_simulated_nodes(&url, sim.clone(), first, n, shutdown.clone())
                .await
                .unwrap_err();
            assert!(e.to_string().contains("accepted numbers 1 to 10000"), "{e}");
        }
    }
}
