//! The copy processes that agents started, found by their mark: see [`Marks`].

use std::collections::BTreeMap;
use std::path::Path;

use crate::process::{find_marked, signal_group, Marked};

/// The mark an agent gives the copies it starts: its state directory, made canonical, joined
/// with the node's name. Computed without creating anything (the agent makes the directory
/// itself, owner-only): the longest part of `state_dir` that exists is made canonical and the
/// rest is appended as it is.
pub fn node_mark(state_dir: &Path, node: &str) -> String {
    let mut base = state_dir.to_path_buf();
    let mut rest = Vec::new();
    let canonical = loop {
        if let Ok(c) = base.canonicalize() {
            break c;
        }
        match (base.file_name(), base.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_owned());
                base = parent.to_path_buf();
            }
            _ => break base,
        }
    };
    let mut mark = canonical;
    for part in rest.iter().rev() {
        mark.push(part);
    }
    mark.join(node).display().to_string()
}

/// The copy processes of a test's nodes, found by the mark their agent gave them. Dropping it
/// kills every one still running (SIGKILL to its process group, by pid): no orphan outlives a
/// test, whatever happened in it. Drop it after the agents are gone, or they start new ones.
#[derive(Debug, Default)]
pub struct Marks {
    /// Node name → the mark of its copies.
    marks: BTreeMap<String, String>,
}

impl Marks {
    /// No node yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Watches `node`'s copies, marked `mark` (see [`node_mark`]); a node added again keeps
    /// its first mark.
    pub fn add(&mut self, node: &str, mark: String) {
        self.marks.entry(node.to_owned()).or_insert(mark);
    }

    /// The mark of `node`'s copies, if it is watched.
    pub fn mark(&self, node: &str) -> Option<&str> {
        self.marks.get(node).map(String::as_str)
    }

    /// The watched nodes, in order.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.marks.keys().map(String::as_str)
    }

    /// Every running copy process of every watched node.
    pub fn marked(&self) -> Vec<Marked> {
        self.marks.values().flat_map(|m| find_marked(m)).collect()
    }

    /// The running copies of `nodes` (any node not watched has none), by copy identity, with
    /// the node and pid of each process: two entries for one identity are a duplicate.
    pub fn by_node(&self, nodes: &[&str]) -> BTreeMap<String, Vec<(String, u32)>> {
        let mut out: BTreeMap<String, Vec<(String, u32)>> = BTreeMap::new();
        for node in nodes {
            if let Some(mark) = self.marks.get(*node) {
                for m in find_marked(mark) {
                    out.entry(m.copy)
                        .or_default()
                        .push(((*node).to_owned(), m.pid));
                }
            }
        }
        out
    }

    /// The running copies of every watched node, by copy identity, with their pids.
    pub fn processes(&self) -> BTreeMap<String, Vec<u32>> {
        let nodes: Vec<&str> = self.nodes().collect();
        self.by_node(&nodes)
            .into_iter()
            .map(|(copy, on)| (copy, on.into_iter().map(|(_, pid)| pid).collect()))
            .collect()
    }

    /// Kills every running copy of every watched node (SIGKILL to its process group).
    pub fn kill_all(&self) {
        for m in self.marked() {
            let _ = signal_group(m.pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for Marks {
    fn drop(&mut self) {
        self.kill_all();
    }
}
