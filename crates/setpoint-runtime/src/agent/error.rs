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
