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
pub const MAX_REPORTED_COPIES: usize = 10 * MAX_COPIES as usize;

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

#[cfg(test)]
mod tests {
    //! A whole pass over a store holding garbage beside a healthy workload: the garbage is named
    //! in problems and changes nothing the healthy workload's passes do.

    use super::super::keys::{FORGOTTEN, PLACEMENTS};
    use super::super::records::{encode, CopyReport, Phase};
    use super::super::snapshot::Snapshot;
    use super::*;
    use crate::controller::reconcile::tests::{report, test_spec};
    use crate::controller::reconcile::{collect_orphans, run_pass, PassSettings};
    use crate::store::{MemoryStore, Store, Txn};
    use proptest::prelude::*;
    use setpoint_core::{Controller, ControllerKind};

    /// The prefixes garbage is written at, with a name that is not the healthy workload's
    /// (`w`) nor its node's (`a`).
    fn garbage_key(prefix: usize, name: usize) -> String {
        let w = ["evil", "many", "hot", "ghost"][name % 4];
        let node = ["n9", "phantom", "b"][name % 3];
        match prefix % 10 {
            0 => format!("{WORKLOADS}{w}"),
            1 => format!("{COUNTERS}{w}"),
            2 => assignment_key(w, name as u64 % 3),
            3 => format!("{PLACEMENTS}{node}/{w}/{:012}", name % 3),
            4 => format!("{REPORTS}{node}"),
            5 => LEADER.to_owned(),
            6 => format!("{NODES}{node}"),
            7 => format!("{LOOPS}{w}"),
            8 => format!("{FORGOTTEN}{node}"),
            // A second placement of the healthy workload's copy, on another node.
            _ => format!("{PLACEMENTS}{node}/w/{:012}", name % 2),
        }
    }

    /// A valid record of the kind `key` holds, as JSON.
    fn valid_record(key: &str) -> serde_json::Value {
        let a = Assignment {
            copy: "evil-0".into(),
            workload: "evil".into(),
            owner_uid: 1,
            n: 0,
            node: "n9".into(),
            command: vec!["sleep".into(), "60".into()],
            startup_ms: 0,
            readiness: None,
            grace_ms: 0,
            created_ms: 0,
            env: Default::default(),
            generation: 0,
            cut_off: Default::default(),
            heartbeat: false,
        };
        let v = if let Some(w) = key.strip_prefix(WORKLOADS) {
            encode(&test_spec(w, 2, ControllerKind::Ledger, 100))
        } else if key.starts_with(COUNTERS) {
            encode(&Counter { next: 3 })
        } else if key.starts_with(ASSIGNMENTS) || key.starts_with(PLACEMENTS) {
            encode(&a)
        } else if let Some(node) = key.strip_prefix(REPORTS) {
            encode(&NodeReport {
                node: node.into(),
                observed_ms: 0,
                reported_ms: 0,
                agent_pid: 1,
                synced_revision: 1,
                copies: vec![CopyReport {
                    copy: "w-0".into(),
                    workload: "w".into(),
                    owner_uid: 1,
                    n: 0,
                    incarnation: 1,
                    phase: Phase::Running,
                    pid: 1,
                    start_ticks: 0,
                    started_ms: 0,
                    ready_ms: None,
                    exited_ms: None,
                    exit: None,
                    stopping: false,
                    killed: false,
                }],
            })
        } else if key == LEADER {
            encode(&Leader {
                holder: "forged".into(),
                acquired_ms: 0,
                ttl_ms: 1,
            })
        } else if let Some(node) = key.strip_prefix(NODES) {
            encode(&NodeRecord {
                node: node.into(),
                host: "h".into(),
                place: "p".into(),
                agent_pid: 1,
                acquired_ms: 0,
                ttl_ms: 1,
                report_every_ms: 1,
                lease: 7,
            })
        } else if let Some(node) = key.strip_prefix(FORGOTTEN) {
            encode(&Forgotten {
                node: node.into(),
                revision: 1,
                forgotten_ms: 0,
            })
        } else {
            encode(&LoopRecord::default())
        };
        serde_json::from_str(&v).unwrap()
    }

    /// A hostile value: arbitrary bytes, or a valid record of the key's kind with one field (at
    /// any depth of the first level) replaced, or cut short.
    fn hostile_value(key: &str, how: u8, field: usize, bytes: &[u8]) -> String {
        let mut v = valid_record(key);
        let odd = [
            serde_json::json!(u64::MAX),
            serde_json::json!(0),
            serde_json::json!(1),
            serde_json::json!(-1),
            serde_json::json!(10_000_000u64),
            serde_json::json!(""),
            serde_json::Value::Null,
            serde_json::json!("../../etc"),
        ];
        match how % 3 {
            0 => String::from_utf8_lossy(bytes).into_owned(),
            1 => {
                if let Some(o) = v.as_object_mut() {
                    if !o.is_empty() {
                        let k = o.keys().nth(field % o.len()).unwrap().clone();
                        o[&k] = odd[bytes.len() % odd.len()].clone();
                    }
                }
                v.to_string()
            }
            _ => {
                let s = v.to_string();
                s[..field % s.len()].to_owned()
            }
        }
    }

    const SETTINGS: PassSettings = PassSettings {
        fence: None,
        max_attempts: 3,
    };

    /// A healthy workload `w` of three copies on live node `a`, after one pass; its first copy
    /// then exits (so the next pass replaces it).
    fn healthy() -> (MemoryStore, Controller) {
        let store = MemoryStore::new();
        let w = test_spec("w", 3, ControllerKind::Ledger, 200);
        store
            .commit(&Txn::new().put(crate::model::workload_key("w"), encode(&w)))
            .unwrap();
        report(&store, "a", &[]);
        let mut c = Controller::new(ControllerKind::Ledger);
        run_pass(&store, "w", &mut c, &SETTINGS).unwrap();
        report(
            &store,
            "a",
            &[(0, Phase::Exited), (1, Phase::Running), (2, Phase::Running)],
        );
        (store, c)
    }

    /// One whole pass as the controller runs it: a pass of every workload the snapshot
    /// accepts (and an attempt at each garbage name, which must fail cleanly), then garbage
    /// collection. Returns what the healthy workload's keys hold after it, without revisions.
    fn whole_pass(store: &MemoryStore, c: &mut Controller, extra: &[String]) -> Vec<String> {
        let s = Snapshot::load(store).unwrap();
        for name in s.workloads.keys() {
            let mut own = if name == "w" {
                std::mem::replace(c, Controller::new(ControllerKind::Ledger))
            } else {
                Controller::new(ControllerKind::Ledger)
            };
            let _ = run_pass(store, name, &mut own, &SETTINGS);
            if name == "w" {
                *c = own;
            }
        }
        for name in extra {
            if !s.workloads.contains_key(name) {
                let mut own = Controller::new(ControllerKind::Ledger);
                assert!(run_pass(store, name, &mut own, &SETTINGS).is_err() || name.is_empty());
            }
        }
        collect_orphans(store, None).unwrap();
        let after = store.read(&Snapshot::PREFIXES).unwrap();
        after
            .entries
            .iter()
            .filter(|e| {
                e.key == "/workloads/w"
                    || e.key == "/counters/w"
                    || e.key.starts_with("/assignments/w/")
                    || e.key.starts_with("/placements/a/w/")
            })
            .map(|e| {
                let mut v: serde_json::Value =
                    serde_json::from_str(&e.value).unwrap_or(serde_json::Value::Null);
                if let Some(o) = v.as_object_mut() {
                    // Revisions and clocks differ between the two stores; what is placed does not.
                    o.remove("owner_uid");
                    o.remove("created_ms");
                }
                format!("{} = {v}", e.key)
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Garbage at every prefix: the pass never panics, the healthy workload is reconciled
        /// exactly as on the store without the garbage (its exited copy replaced), and every
        /// garbage key is either accepted into the snapshot or named in its problems.
        #[test]
        fn garbage_at_any_key_harms_only_itself(
            garbage in proptest::collection::vec(
                (0usize..10, 0usize..12, any::<u8>(), 0usize..64,
                 proptest::collection::vec(any::<u8>(), 0..40)),
                1..12,
            ),
        ) {
            let (clean, mut c_clean) = healthy();
            let (dirty, mut c_dirty) = healthy();
            let mut txn = Txn::new();
            let mut keys = std::collections::BTreeMap::new();
            for (prefix, name, how, field, bytes) in &garbage {
                let key = garbage_key(*prefix, *name);
                let value = hostile_value(&key, *how, *field, bytes);
                keys.insert(key, value);
            }
            for (k, v) in &keys {
                txn = txn.put(k, v);
            }
            dirty.commit(&txn).unwrap();
            let s = Snapshot::load(&dirty).unwrap();
            for k in keys.keys() {
                let accepted = s.problems.contains_key(k)
                    // A declaration refused for a problem of another of its records.
                    || k.strip_prefix(WORKLOADS).is_some_and(|n| {
                        s.workloads.contains_key(n) || s.refused.contains(n)
                    })
                    || k.strip_prefix(COUNTERS).is_some_and(|n| s.counters.contains_key(n))
                    || s.assignments.contains_key(k)
                    || (s.placements.contains_key(k) && !s.ghosts.contains_key(k))
                    || k.strip_prefix(REPORTS).is_some_and(|n| s.reports.contains_key(n))
                    || (k == LEADER && s.leader.is_some())
                    || k.strip_prefix(LOOPS).is_some_and(|n| s.loops.contains_key(n))
                    || k.strip_prefix(FORGOTTEN).is_some_and(|n| s.forgotten.contains_key(n));
                prop_assert!(accepted, "{k} = {:?} is neither accepted nor a problem: {:?} {:?}", keys[k], s.workloads.keys().collect::<Vec<_>>(), s.problems);
            }
            // A lease-less node or leader is never accepted.
            prop_assert!(s.leader.is_none());
            prop_assert_eq!(s.nodes.keys().collect::<Vec<_>>(), ["a"]);
            prop_assert!(s.workloads.contains_key("w") && !s.refused.contains("w"));
            let extra: Vec<String> = keys
                .keys()
                .filter_map(|k| workload_of(k).or_else(|| k.strip_prefix(WORKLOADS)))
                .map(str::to_owned)
                .collect();
            let want = whole_pass(&clean, &mut c_clean, &[]);
            let got = whole_pass(&dirty, &mut c_dirty, &extra);
            prop_assert!(want.iter().any(|l| l.starts_with("/assignments/w/000000000003")), "{want:?}");
            prop_assert_eq!(want, got);
        }
    }
}
