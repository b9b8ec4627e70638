//! What an agent records on disk: its state file (`{state_dir}/{node}.json`), one
//! [`CopyRecord`] per copy it knows.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::{Assignment, Phase};
use crate::store::Revision;

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
    /// Whether setpoint ended it on purpose: a kill request (`setpoint kill`), the agent's fence
    /// after its node lease was lost, or its shutdown. A commanded death, which the controller
    /// replaces at once instead of backing off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub killed: bool,
    /// The copy's secret nonce, also in its environment ([`crate::sandbox`]): recorded before
    /// the process starts, it proves after a crash which processes this agent started.
    #[serde(default)]
    pub nonce: String,
}

impl CopyRecord {
    /// A copy about to start at `now` (no pid yet), with its secret `nonce`.
    pub fn starting(
        assignment: Assignment,
        incarnation: Revision,
        now: u64,
        nonce: String,
    ) -> Self {
        Self {
            assignment,
            incarnation,
            pid: 0,
            start_ticks: 0,
            started_ms: now,
            phase: Phase::Starting,
            ready_ms: None,
            exited_ms: None,
            exit: None,
            stopping: false,
            killed: false,
            nonce,
        }
    }
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

/// The file beside the state file where an agent writes down when it last sent a renewal of
/// its node lease that succeeded ([`AgentOutput::LeaseKept`](super::AgentOutput::LeaseKept)):
/// `{state_dir}/{node}.lease`, one decimal number of milliseconds and a newline.
pub fn lease_file(state_dir: &Path, node: &str) -> PathBuf {
    state_dir.join(format!("{node}.lease"))
}

/// Reads a lease file ([`lease_file`]); `None` if there is none, an error of kind
/// `InvalidData` if it does not hold one number.
pub fn read_lease_file(path: &Path) -> std::io::Result<Option<u64>> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "it should hold one number of milliseconds",
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_file_holds_one_number_and_garbage_is_an_error_not_a_guess() {
        let dir = tempfile::tempdir().unwrap();
        let path = lease_file(dir.path(), "n1");
        assert_eq!(read_lease_file(&path).unwrap(), None, "absent");
        std::fs::write(&path, "1800000020006\n").unwrap();
        assert_eq!(read_lease_file(&path).unwrap(), Some(1_800_000_020_006));
        for garbage in ["", "soon\n", "-5", "12 34", "\u{0}\u{ff}"] {
            std::fs::write(&path, garbage).unwrap();
            let e = read_lease_file(&path).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{garbage:?}");
            assert_eq!(e.to_string(), "it should hold one number of milliseconds");
        }
    }

    #[test]
    fn a_state_file_that_cannot_be_read_is_an_error_and_only_a_missing_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n1.json");
        assert!(read_node_state(&path).unwrap().is_none(), "absent");
        // A directory where the file should be cannot be read: not "no state", which would
        // start the agent without its records (the driver refuses to start instead).
        std::fs::create_dir(&path).unwrap();
        assert!(read_node_state(&path).is_err());
        std::fs::remove_dir(&path).unwrap();
        std::fs::write(&path, "{").unwrap();
        let e = read_node_state(&path).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
    }

    /// Every node's state file is read, in node order; the lease files beside them, files of
    /// other kinds and a state file that does not parse are passed over. Mutant 855 of the
    /// mutation sample (`x == "json"` → `x != "json"`) read only the others: the local
    /// `kill`'s fault injection, the agents' log sweep, `logs --follow` and the real lesson's
    /// readiness would find no copy at all.
    #[test]
    fn every_nodes_state_file_is_read_in_node_order_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        for node in ["n2", "n1"] {
            let state = NodeState {
                node: node.into(),
                agent_pid: 7,
                copies: Vec::new(),
            };
            let text = serde_json::to_string(&state).unwrap();
            std::fs::write(state_file(dir.path(), node), text).unwrap();
            std::fs::write(lease_file(dir.path(), node), "1800000020006\n").unwrap();
        }
        std::fs::write(dir.path().join("notes.txt"), "{}").unwrap();
        std::fs::write(dir.path().join("n3.json"), "{").unwrap();
        let nodes: Vec<String> = read_all_node_states(dir.path())
            .into_iter()
            .map(|s| s.node)
            .collect();
        assert_eq!(nodes, ["n1", "n2"]);
        assert!(read_all_node_states(&dir.path().join("absent")).is_empty());
    }
}
