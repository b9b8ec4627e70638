//! The operations behind `setpoint apply`, `get`, `delete`, `kill` and `status`: short,
//! synchronous calls on a store.

use std::path::Path;

use serde::Serialize;

use crate::agent::read_all_node_states;
use crate::model::loops::IdleReason;
use crate::model::view::WorkloadView;
use crate::model::{encode, workload_key, CutOff, Phase, Snapshot, WorkloadSpec, WORKLOADS};
use crate::process;
use crate::store::{Revision, Store, StoreError, Txn};
use setpoint_core::LedgerView;

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    /// No workload has that name; `setpoint get` lists them.
    #[error("no workload named '{0}' (see 'setpoint get')")]
    NotFound(String),
    /// Others kept changing the declarations; try again.
    #[error("the declarations kept changing during the write; try again")]
    Contended,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What `apply` changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ApplyOutcome {
    /// Workloads declared for the first time.
    pub created: Vec<String>,
    /// Workloads whose declaration changed.
    pub updated: Vec<String>,
    /// Workloads declared exactly as before.
    pub unchanged: Vec<String>,
}

/// Declares `specs` in one transaction: all of them or, on any failure, none.
pub fn apply(store: &dyn Store, specs: &[WorkloadSpec]) -> Result<ApplyOutcome, OpError> {
    for _ in 0..5 {
        let read = store.read(&[WORKLOADS])?;
        let mut txn = Txn::new();
        let mut out = ApplyOutcome::default();
        for w in specs {
            let key = workload_key(&w.name);
            let w = &crate::model::rollout::with_generation(&read, w);
            let value = encode(w);
            match read.entries.iter().find(|e| e.key == key) {
                Some(e) if e.value == value => out.unchanged.push(w.name.clone()),
                Some(e) => {
                    txn = txn.expect(&key, e.mod_revision).put(&key, value);
                    out.updated.push(w.name.clone());
                }
                None => {
                    txn = txn.expect(&key, 0).put(&key, value);
                    out.created.push(w.name.clone());
                }
            }
        }
        match store.commit(&txn) {
            Ok(_) => return Ok(out),
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(OpError::Contended)
}

/// What applying one workload would do: `None` if it is new, else its changes in words (empty:
/// unchanged).
pub type Preview = Option<Vec<String>>;

/// What `apply` would change, without writing: per workload of `specs`, in file order, `None` if
/// it is new, or the changes in words (empty: unchanged).
pub fn apply_preview(
    store: &dyn Store,
    specs: &[WorkloadSpec],
) -> Result<Vec<(String, Preview)>, OpError> {
    let read = store.read(&[WORKLOADS])?;
    Ok(specs
        .iter()
        .map(|w| {
            let new = crate::model::rollout::with_generation(&read, w);
            let old = crate::model::rollout::stored_spec(&read, &w.name);
            (
                w.name.clone(),
                old.map(|o| crate::model::rollout::describe_changes(&o, &new)),
            )
        })
        .collect())
}

/// Removes a workload's declaration. The controller then collects its assignments and the
/// agents stop its copies.
pub fn delete(store: &dyn Store, name: &str) -> Result<(), OpError> {
    let key = workload_key(name);
    let entry = store
        .get(&key)?
        .ok_or_else(|| OpError::NotFound(name.to_owned()))?;
    match store.commit(&Txn::new().expect(&key, entry.mod_revision).delete(&key)) {
        Ok(_) => Ok(()),
        Err(e) if e.is_conflict() => delete(store, name),
        Err(e) => Err(e.into()),
    }
}

/// Fails with [`OpError::NotFound`] unless workload `name` is declared: `kill` checks it first,
/// so that a mistyped name is the user's to fix (exit 2) as in `get` and `delete`.
pub fn require_declared(store: &dyn Store, name: &str) -> Result<(), OpError> {
    match store.get(&workload_key(name))? {
        Some(_) => Ok(()),
        None => Err(OpError::NotFound(name.to_owned())),
    }
}

/// One copy as `get` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CopyStatus {
    /// Its identity.
    pub copy: String,
    /// Its node, if an assignment or a report names one.
    pub node: Option<String>,
    /// Whether its assignment exists (it is commanded to run).
    pub assigned: bool,
    /// Its phase in its node's last report, if reported.
    pub reported: Option<Phase>,
    /// Whether its agent runs it and it is ready, as the agent's live record says right now
    /// (on any machine); `None` when no live node has written one.
    pub live: Option<bool>,
    /// How it ended, as its node reported: `exit status 1`, `signal 9`, or
    /// `failed to start: program 'x' not found on the agent's PATH (…)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit: Option<String>,
}

/// One workload as `get` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WorkloadStatus {
    /// The name.
    pub name: String,
    /// The controller's name.
    pub controller: String,
    /// The loop period U, in milliseconds.
    pub period_ms: u64,
    /// Declared copies.
    pub desired: u64,
    /// Copies running and ready right now, from the live nodes' live records
    /// ([`crate::remote`]): what the agents see, on every machine, without the report delay.
    /// `None` if no live node has written one.
    pub live: Option<u64>,
    /// Copies on the ledger: reported running.
    pub on_ledger: u64,
    /// Copies created and not on the ledger yet.
    pub pending_create: u64,
    /// Copies commanded to stop and still on the ledger.
    pub pending_delete: u64,
    /// Every copy with an assignment or in a report, by identity order.
    pub copies: Vec<CopyStatus>,
    /// Why the loop is idle while not converged, if it is.
    pub idle: Option<IdleStatus>,
    /// Crash-loop backoff by key (the workload, or each name for `named`), keys that ever
    /// failed to start.
    pub backoff: Vec<BackoffStatus>,
    /// The declaration's generation (bumped by `apply` when the command or readiness changes).
    pub generation: u64,
    /// Copies of the current generation on the ledger and assigned.
    pub updated: u64,
    /// The rolling update under way, if any.
    pub rollout: Option<RolloutStatus>,
    /// What an agent cut off from the store does with its copies: `fence` (stops them by the
    /// node lease's deadlines: `named`), `keep` (keeps them running), or `stop` (stops them
    /// `stop_when_cut_off_ms` after its last renewal). See docs/runtime.md.
    pub cut_off: &'static str,
    /// With `cut_off` = `stop`: after how long.
    pub stop_when_cut_off_ms: Option<u64>,
}

/// A rolling update as `get` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RolloutStatus {
    /// The generation being rolled out.
    pub generation: u64,
    /// Copies of it available.
    pub updated: u64,
    /// Of how many.
    pub desired: u64,
    /// Copies of older generations left.
    pub old: u64,
    /// It made no progress within its deadline and stopped.
    pub stalled: bool,
    /// Milliseconds since it began.
    pub for_ms: u64,
}

/// A loop's idle stretch as `get` and `status` show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IdleStatus {
    /// The reason, as a word (`no_live_node`, `backing_off`, …).
    pub reason: IdleReason,
    /// The reason in words.
    pub text: String,
    /// For how long, in milliseconds.
    pub for_ms: u64,
}

/// One backoff key as `get` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BackoffStatus {
    /// The workload's name, or a copy name for `named`.
    pub key: String,
    /// Whether creation is held back now.
    pub backing_off: bool,
    /// Consecutive failed attempts.
    pub failures: u32,
    /// Failed starts in all.
    pub restarts: u64,
    /// How the last failed copy ended (`exit status 1`, `signal 9`, `failed to start: …`).
    pub last_exit: String,
    /// Which copy that was.
    pub last_copy: String,
    /// Milliseconds until the next try (0 if it is due).
    pub next_try_in_ms: u64,
}

fn loop_status(
    s: &Snapshot,
    name: &str,
    uid: Revision,
) -> (Option<IdleStatus>, Vec<BackoffStatus>) {
    let Some(rec) = s.loops.get(name).filter(|r| r.value.uid == uid) else {
        return (None, Vec::new());
    };
    let idle = rec.value.idle.map(|i| IdleStatus {
        reason: i.reason,
        text: match (i.reason, &rec.value.refused) {
            (IdleReason::WriteRefused, Some(why)) => format!("{}: {why}", i.reason.describe()),
            (r, _) => r.describe_with(&rec.value.waiting_for),
        },
        for_ms: s.now_ms.saturating_sub(i.since_ms),
    });
    let backoff = rec
        .value
        .backoff
        .iter()
        .map(|(key, b)| BackoffStatus {
            key: key.clone(),
            backing_off: b.blocks(s.now_ms),
            failures: b.failures,
            restarts: b.restarts,
            last_exit: b.last_exit.clone(),
            last_copy: b.last_copy.clone(),
            next_try_in_ms: b.next_try_ms.saturating_sub(s.now_ms),
        })
        .collect();
    (idle, backoff)
}

/// The stored records that did not decode or broke a rule ([`crate::model::trust`]), by key, with
/// the reason: what `get` and `status` show beside the workloads, which they leave out.
pub fn problems(store: &dyn Store) -> Result<std::collections::BTreeMap<String, String>, OpError> {
    Ok(with_alarm(store, Snapshot::load(store)?.problems))
}

/// `problems` with the store's alarm, if one is raised, under the key [`STORE_PROBLEM`]. An
/// alarm the store cannot be asked about (an etcd user without the right to list alarms, an
/// unanswered call) is left out: `get` and `status` still answer.
fn with_alarm(
    store: &dyn Store,
    mut problems: std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    if let Ok(Some(line)) = store.alarm() {
        problems.insert(
            STORE_PROBLEM.to_owned(),
            format!("{line}; while it holds, agents may not be able to report, so what is shown may be stale"),
        );
    }
    problems
}

/// The key under which `problems` holds a condition of the whole store ([`Store::alarm`]).
pub const STORE_PROBLEM: &str = "store";

/// What `get` shows: every workload, or one.
pub fn get(store: &dyn Store, name: Option<&str>) -> Result<Vec<WorkloadStatus>, OpError> {
    let snapshot = Snapshot::load(store)?;
    let live_records = crate::remote::live_copies(store)?;
    if let Some(n) = name {
        if !snapshot.workloads.contains_key(n) {
            return Err(OpError::NotFound(n.to_owned()));
        }
    }
    let mut out = Vec::new();
    for (wname, w) in &snapshot.workloads {
        if name.is_some_and(|n| n != wname) {
            continue;
        }
        let v = WorkloadView::new(&snapshot, wname).expect("declared");
        let uid = w.create_revision;
        let mut copies: std::collections::BTreeMap<u64, CopyStatus> = Default::default();
        for (_, a) in snapshot
            .assignments_of(wname)
            .filter(|(_, a)| a.value.owner_uid == uid)
        {
            copies.insert(
                a.value.n,
                CopyStatus {
                    copy: a.value.copy.clone(),
                    node: Some(a.value.node.clone()),
                    assigned: true,
                    reported: None,
                    live: None,
                    exit: None,
                },
            );
        }
        for r in snapshot.reports.values() {
            for c in r
                .value
                .copies
                .iter()
                .filter(|c| c.workload == *wname && c.owner_uid == uid)
            {
                let s = copies.entry(c.n).or_insert_with(|| CopyStatus {
                    copy: c.copy.clone(),
                    node: Some(r.value.node.clone()),
                    assigned: false,
                    reported: None,
                    live: None,
                    exit: None,
                });
                s.reported = Some(c.phase);
                s.exit.clone_from(&c.exit);
            }
        }
        let (idle, backoff) = loop_status(&snapshot, wname, uid);
        let rc = crate::model::loops::rollout_copies(&v);
        let updated = rc.iter().filter(|c| c.current && c.available()).count() as u64;
        let old = rc.iter().filter(|c| !c.current).count() as u64;
        let rec = snapshot
            .loops
            .get(wname.as_str())
            .filter(|r| r.value.uid == uid)
            .and_then(|r| r.value.rollout)
            .filter(|r| r.generation == w.value.generation);
        let rollout = (old > 0 || rec.is_some()).then(|| RolloutStatus {
            generation: w.value.generation,
            updated,
            desired: w.value.copies,
            old,
            stalled: rec.is_some_and(|r| r.stalled),
            for_ms: rec.map_or(0, |r| snapshot.now_ms.saturating_sub(r.started_ms)),
        });
        let mut live = None;
        if !live_records.is_empty() {
            for s in copies.values_mut() {
                s.live = Some(false);
            }
            let mut count = 0;
            for c in live_records.values().flat_map(|r| &r.copies) {
                if c.workload != *wname || c.owner_uid != uid {
                    continue;
                }
                count += 1;
                if let Some(s) = copies.get_mut(&c.n) {
                    s.live = Some(true);
                }
            }
            live = Some(count);
        }
        out.push(WorkloadStatus {
            name: wname.clone(),
            controller: w.value.controller.name().to_owned(),
            period_ms: w.value.period_ms,
            desired: w.value.copies,
            live,
            on_ledger: v.on_ledger(),
            pending_create: v.pending_creates(),
            pending_delete: v.pending_deletes(),
            copies: copies.into_values().collect(),
            idle,
            backoff,
            generation: w.value.generation,
            updated,
            rollout,
            cut_off: match w.value.cut_off() {
                CutOff::Fence => "fence",
                CutOff::Keep => "keep",
                CutOff::After(_) => "stop",
            },
            stop_when_cut_off_ms: match w.value.cut_off() {
                CutOff::After(ms) => Some(ms),
                _ => None,
            },
        });
    }
    Ok(out)
}

/// Kills `count` running copies of workload `name` with SIGKILL to their process groups,
/// oldest first, for fault injection. Copies are found through the agents' state files under
/// `state_dir`, and each pid is checked against its recorded start time first. Returns the
/// identities killed.
pub fn kill(state_dir: &Path, name: &str, count: u64) -> std::io::Result<Vec<String>> {
    let mut candidates: Vec<(u64, String, u32, u64)> = read_all_node_states(state_dir)
        .into_iter()
        .flat_map(|s| s.copies)
        .filter(|r| r.assignment.workload == name && r.phase != Phase::Exited && !r.stopping)
        .filter(|r| process::is_alive(r.pid, r.start_ticks))
        .map(|r| (r.assignment.n, r.assignment.copy, r.pid, r.start_ticks))
        .collect();
    candidates.sort();
    let mut killed = Vec::new();
    for (_, copy, pid, start) in candidates.into_iter().take(count as usize) {
        if process::kill_verified(pid, start)? {
            killed.push(copy);
        }
    }
    Ok(killed)
}

/// An integer as a JSON number up to 2^53 − 1, where every double-precision reader keeps it
/// exactly, and as a string of its digits above.
fn exact_json<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    if *v > (1 << 53) - 1 {
        s.serialize_str(&v.to_string())
    } else {
        s.serialize_u64(*v)
    }
}

/// The leader as `status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LeaderStatus {
    /// Who holds the lease.
    pub holder: String,
    /// For how long, in milliseconds.
    pub held_ms: u64,
    /// The lease's time to live, in milliseconds.
    pub ttl_ms: u64,
}

/// A node's lease as `status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeLeaseStatus {
    /// The store lease holding `/nodes/{node}`. etcd's ids have 19 digits, past what a
    /// double-precision JSON reader keeps, so JSON writes one above 2^53 − 1 as a string of its
    /// digits, as every record does (docs/output.md, "Numbers").
    #[serde(serialize_with = "exact_json")]
    pub lease: u64,
    /// The agent's process id.
    pub agent_pid: u32,
    /// The agent's machine.
    pub host: String,
    /// The agent's state directory.
    pub place: String,
    /// The lease's time to live, in milliseconds.
    pub ttl_ms: u64,
    /// How long the agent has held the name, in milliseconds.
    pub held_ms: u64,
}

/// One node as `status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeStatus {
    /// The node's name.
    pub node: String,
    /// Milliseconds since its last report was written; `None` if it never reported.
    pub since_report_ms: Option<u64>,
    /// Milliseconds between observing and writing that report (the emulated chain).
    pub report_lag_ms: u64,
    /// Whether its agent holds the node lease.
    pub live: bool,
    /// The node lease, while its agent holds it.
    pub lease: Option<NodeLeaseStatus>,
    /// Copies in its last report, by phase.
    pub starting: u64,
    /// Copies reported running.
    pub running: u64,
    /// Copies reported exited.
    pub exited: u64,
    /// Copies assigned to it.
    pub assigned: u64,
}

/// What `status` shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Status {
    /// The store revision read.
    pub revision: Revision,
    /// The leader, if a controller holds the lease.
    pub leader: Option<LeaderStatus>,
    /// Every node that holds a lease or has a report, except a lost node that `node forget`
    /// confirmed gone after its last report: it is listed again once it holds a lease.
    pub nodes: Vec<NodeStatus>,
    /// Lost nodes confirmed gone (`setpoint node forget`) and so not in `nodes`.
    pub forgotten: u64,
    /// Declared workloads.
    pub workloads: u64,
    /// Workloads whose loop is idle while not converged, with the reason.
    pub idle: std::collections::BTreeMap<String, IdleStatus>,
    /// Stored records left out as problems, by key, with the reason ([`crate::model::trust`]).
    pub problems: std::collections::BTreeMap<String, String>,
}

/// Reads the leader, the nodes and how long ago each reported.
pub fn status(store: &dyn Store) -> Result<Status, OpError> {
    let s = Snapshot::load(store)?;
    let count = |node: &str, phase: Phase| {
        s.reports.get(node).map_or(0, |r| {
            r.value.copies.iter().filter(|c| c.phase == phase).count() as u64
        })
    };
    let names: std::collections::BTreeSet<&String> =
        s.reports.keys().chain(s.nodes.keys()).collect();
    // A lost node confirmed gone after its last report is history, not a node: listing it
    // would keep every machine ever retired in the table.
    let gone = |node: &str| {
        !s.nodes.contains_key(node)
            && s.forgotten.get(node).is_some_and(|f| {
                s.reports
                    .get(node)
                    .is_none_or(|r| r.mod_revision <= f.value.revision)
            })
    };
    let forgotten = names.iter().filter(|n| gone(n)).count() as u64;
    let names = names.into_iter().filter(|n| !gone(n));
    let nodes = names
        .into_iter()
        .map(|node| NodeStatus {
            node: node.clone(),
            since_report_ms: s
                .reports
                .get(node)
                .map(|r| s.now_ms.saturating_sub(r.value.reported_ms)),
            report_lag_ms: s.reports.get(node).map_or(0, |r| {
                r.value.reported_ms.saturating_sub(r.value.observed_ms)
            }),
            live: s.node_live(node),
            lease: s.nodes.get(node).map(|n| NodeLeaseStatus {
                lease: n.value.lease,
                agent_pid: n.value.agent_pid,
                host: n.value.host.clone(),
                place: n.value.place.clone(),
                ttl_ms: n.value.ttl_ms,
                held_ms: s.now_ms.saturating_sub(n.value.acquired_ms),
            }),
            starting: count(node, Phase::Starting),
            running: count(node, Phase::Running),
            exited: count(node, Phase::Exited),
            assigned: s
                .assignments
                .values()
                .filter(|a| a.value.node == *node)
                .count() as u64,
        })
        .collect();
    Ok(Status {
        revision: s.revision,
        leader: s.leader.as_ref().map(|l| LeaderStatus {
            holder: l.value.holder.clone(),
            held_ms: s.now_ms.saturating_sub(l.value.acquired_ms),
            ttl_ms: l.value.ttl_ms,
        }),
        nodes,
        forgotten,
        workloads: s.workloads.len() as u64,
        idle: s
            .workloads
            .iter()
            .filter_map(|(n, w)| Some((n.clone(), loop_status(&s, n, w.create_revision).0?)))
            .collect(),
        problems: with_alarm(store, s.problems.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{report_key, NodeReport};
    use crate::store::MemoryStore;

    /// An empty report of `node`, written now.
    fn report(store: &dyn Store, node: &str) {
        let r = NodeReport {
            node: node.into(),
            observed_ms: store.now_ms(),
            reported_ms: store.now_ms(),
            agent_pid: 1,
            synced_revision: u64::MAX,
            copies: Vec::new(),
        };
        store
            .commit(&Txn::new().put(report_key(node), encode(&r)))
            .unwrap();
    }

    fn listed(store: &dyn Store) -> Vec<String> {
        status(store)
            .unwrap()
            .nodes
            .into_iter()
            .map(|n| n.node)
            .collect()
    }

    #[test]
    fn a_lease_id_past_two_to_the_53_is_a_json_string_and_a_small_one_a_number() {
        let lease = |lease| NodeLeaseStatus {
            lease,
            agent_pid: 1,
            host: "h".into(),
            place: "p".into(),
            ttl_ms: 1,
            held_ms: 1,
        };
        let big = serde_json::to_value(lease(7_587_888_374_555_392_529)).unwrap();
        assert_eq!(big["lease"], "7587888374555392529");
        let at = serde_json::to_value(lease((1 << 53) - 1)).unwrap();
        assert_eq!(at["lease"], 9_007_199_254_740_991_u64);
    }

    #[test]
    fn a_forgotten_lost_node_leaves_status_until_it_holds_a_lease_again() {
        let store = MemoryStore::new();
        report(&store, "a");
        report(&store, "b");
        assert_eq!(listed(&store), ["a", "b"]);
        crate::model::node::forget(&store, "a").unwrap();
        assert_eq!(listed(&store), ["b"]);
        assert_eq!(status(&store).unwrap().forgotten, 1);
        // The node comes back: its agent holds the name again and reports.
        crate::model::node::fake_node(&store, "a").unwrap();
        report(&store, "a");
        assert_eq!(listed(&store), ["a", "b"]);
        assert_eq!(status(&store).unwrap().forgotten, 0);
    }
}
