//! Nothing read back from the store is trusted: any client with write access to the store can
//! put any bytes at any key. Each record is checked at its decode ([`Trusted::check`]) by the
//! rules `apply` checks on the way in ([`crate::spec::check_stored`], [`crate::rules`]), plus
//! what only a stored record can break: that it names the key it sits at, that a counter leaves
//! room for its arithmetic, that a record which must live under a lease (a node, the leader)
//! does.
//!
//! A record that fails is a *problem* ([`Problem`]): the snapshot leaves it out and names its
//! key and the reason, and what it would have told is refused for its own workload or node only
//! (see [`crate::model::snapshot`]).

use super::keys::{
    assignment_key, ASSIGNMENTS, COUNTERS, LEADER, LOOPS, NODES, REPORTS, WORKLOADS,
};
use super::loop_record::LoopRecord;
use super::node::{Forgotten, NodeRecord};
use super::records::{Assignment, Counter, Leader, NodeReport, WorkloadSpec};
use crate::rules::check_name;
use crate::spec::MAX_COPIES;
use crate::store::Entry;

/// The highest copy counter accepted: an assignment's number is written with 12 digits
/// ([`assignment_key`]), so key order is creation order only below 10^12; and a counter this
/// far from `u64::MAX` leaves room for any number of creations one declaration may ask for.
pub const MAX_COUNTER: u64 = 999_999_999_999;

/// The most copies one node report may list: every copy of the most copies one workload may
/// declare, many times over, but bounded, so a forged report cannot make a pass's work grow
/// without bound.
pub const MAX_REPORTED_COPIES: usize = 100 * MAX_COPIES as usize;

/// A stored record that broke a rule: its key and why, in one line.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    /// The key of the record.
    pub key: String,
    /// What is wrong with it and what is accepted.
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

/// `value` (a record's `what`) as a copy counter or number may be: at most [`MAX_COUNTER`].
fn in_counter_range(what: &str, value: u64) -> Result<(), String> {
    if value > MAX_COUNTER {
        return Err(format!(
            "{what} {value} is out of range: accepted 0 to {MAX_COUNTER}"
        ));
    }
    Ok(())
}

/// A record that is checked after it decodes, against the entry it was read from.
pub trait Trusted {
    /// Whether the record, read from `e`, keeps the rules; the reason if not.
    fn check(&self, e: &Entry) -> Result<(), String>;
}

/// The name part of `e`'s key after `prefix`, which must be the record's `name`.
fn names_its_key(e: &Entry, prefix: &str, what: &str, name: &str) -> Result<(), String> {
    let suffix = e.key.strip_prefix(prefix).unwrap_or(&e.key);
    if suffix == name {
        Ok(())
    } else {
        Err(format!(
            "its {what} '{}' is not the key's '{}'",
            name.escape_debug(),
            suffix.escape_debug()
        ))
    }
}

impl Trusted for WorkloadSpec {
    fn check(&self, e: &Entry) -> Result<(), String> {
        names_its_key(e, WORKLOADS, "name", &self.name)?;
        crate::spec::check_stored(self)
    }
}

impl Trusted for Counter {
    fn check(&self, _: &Entry) -> Result<(), String> {
        in_counter_range("next", self.next)
    }
}

impl Trusted for Assignment {
    fn check(&self, e: &Entry) -> Result<(), String> {
        in_counter_range("n", self.n)?;
        crate::rules::check_assignment(self, &self.node)?;
        check_name(&self.node).map_err(|r| format!("node: {r}"))?;
        let key = assignment_key(&self.workload, self.n);
        if e.key != key {
            return Err(format!(
                "it is copy {} of '{}', whose key is {key}",
                self.n, self.workload
            ));
        }
        Ok(())
    }
}

impl Trusted for NodeReport {
    fn check(&self, e: &Entry) -> Result<(), String> {
        names_its_key(e, REPORTS, "node", &self.node)?;
        if self.copies.len() > MAX_REPORTED_COPIES {
            return Err(format!(
                "{} copies are out of range: accepted at most {MAX_REPORTED_COPIES}",
                self.copies.len()
            ));
        }
        for c in &self.copies {
            in_counter_range("n", c.n)
                .map_err(|r| format!("copy '{}': {r}", c.copy.escape_debug()))?;
        }
        Ok(())
    }
}

impl Trusted for NodeRecord {
    fn check(&self, e: &Entry) -> Result<(), String> {
        names_its_key(e, NODES, "node", &self.node)?;
        if e.lease.is_none() {
            return Err("it lives under no lease, so no agent holds the name: not a node".into());
        }
        Ok(())
    }
}

impl Trusted for Leader {
    fn check(&self, e: &Entry) -> Result<(), String> {
        debug_assert_eq!(e.key, LEADER);
        if e.lease.is_none() {
            return Err("it lives under no lease, so no controller holds it: not a leader".into());
        }
        Ok(())
    }
}

impl Trusted for LoopRecord {
    fn check(&self, _: &Entry) -> Result<(), String> {
        Ok(())
    }
}

impl Trusted for Forgotten {
    fn check(&self, e: &Entry) -> Result<(), String> {
        names_its_key(e, super::keys::FORGOTTEN, "node", &self.node)
    }
}

/// The workload a key under `/counters/`, `/loops/` or `/assignments/` belongs to, if it is one
/// of those: a problem there is refused for that workload only.
pub fn workload_of(key: &str) -> Option<&str> {
    if let Some(n) = key.strip_prefix(COUNTERS) {
        return Some(n);
    }
    if let Some(n) = key.strip_prefix(LOOPS) {
        return Some(n);
    }
    key.strip_prefix(ASSIGNMENTS)
        .map(|rest| rest.split('/').next().unwrap_or(rest))
}
