//! Why an agent could not run ([`AgentError`]).

use std::path::PathBuf;

use crate::model::node::NodeError;
use crate::store::StoreError;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_node_name_taken_is_a_refusal_not_a_state_directory_the_agent_cannot_use() {
        // The CLI exits 2 (bad input: the user must pick another name) on a refusal, 1 on a
        // failure; an unusable state directory is a failure.
        let dir = AgentError::StateDir {
            path: "/nowhere/node-1.json".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert!(!dir.is_refusal(), "{dir}");
        let replaced = AgentError::Replaced("node-1 was taken by another agent".into());
        assert!(replaced.is_refusal(), "{replaced}");
    }
}
