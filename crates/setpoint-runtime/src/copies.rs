//! The copy view behind `setpoint get copies`: one row per copy, from what the store holds and
//! nothing else.
//!
//! | column | from |
//! | --- | --- |
//! | node | the assignment, else the node report that lists the copy |
//! | pid | the agent's live record (`/live/{node}`, written at once), else the node's last report |
//! | state | the assignment, the report's phase and `stopping`, the live record, the loop's backoff |
//! | age | since the assignment was created (the report's start time once it is gone) |
//! | restarts | earlier incarnations of the same copy name in the event log (`create` entries); the key's restarts while it backs off |
//! | last exit | the report's exit, else the last `exit` entry of the name in the event log |
//!
//! Only `named` reuses a copy name: a dead copy of the other controllers is replaced by a new
//! copy with a new number, so their running copies show 0 restarts. While a key backs off
//! (every uncommanded exit counts), its last failed copy is listed as `crash-looping` with the
//! key's restarts (the loop record's) and its exit, even once its assignment is collected.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::events::{CopyEvent, CopyEventKind, EVENTS};
use crate::model::{decode, Phase, Snapshot};
use crate::ops::OpError;
use crate::store::{Revision, Store};

/// What a copy is doing, as `get copies` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CopyState {
    /// Assigned; its node has not reported it yet.
    Pending,
    /// Its process runs and is not ready yet.
    Starting,
    /// Ready: on the ledger once its node's report is written.
    Running,
    /// Its assignment is gone, or its agent stops it; the process has not ended yet.
    Stopping,
    /// Its process ended and its workload's loop holds creation back (crash-loop backoff).
    CrashLooping,
    /// Its process ended.
    Exited,
}

impl CopyState {
    /// The state as a word (`crash-looping`).
    pub fn word(self) -> &'static str {
        match self {
            CopyState::Pending => "pending",
            CopyState::Starting => "starting",
            CopyState::Running => "running",
            CopyState::Stopping => "stopping",
            CopyState::CrashLooping => "crash-looping",
            CopyState::Exited => "exited",
        }
    }
}

/// One copy as `get copies` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CopyRow {
    /// The owning workload.
    pub workload: String,
    /// The copy's identity, `{workload}-{n}`.
    pub copy: String,
    /// The copy's number.
    pub n: u64,
    /// Its node, from its assignment or the report that lists it.
    pub node: Option<String>,
    /// Its process (group) id on its node, once started.
    pub pid: Option<u32>,
    /// What it is doing.
    pub state: CopyState,
    /// Milliseconds since it was created (assigned).
    pub age_ms: Option<u64>,
    /// Earlier incarnations of the same copy name in the event log (only `named` reuses names).
    pub restarts: u64,
    /// How this copy, or the last earlier incarnation of its name, ended: `exit status 1`,
    /// `signal 9`, `failed to start: …`.
    pub last_exit: Option<String>,
    /// Whether its assignment exists (it is commanded to run).
    pub assigned: bool,
}

/// The incarnations and last exit of each copy number of one workload, from its event log.
#[derive(Default)]
struct History {
    /// `create` entries by copy number: the incarnations ever created.
    created: BTreeMap<u64, u64>,
    /// The last `exit` entry by copy number: (incarnation, how).
    exit: BTreeMap<u64, (Revision, String)>,
}

fn history(store: &dyn Store, workload: &str, uid: Revision) -> Result<History, OpError> {
    let create = format!("{EVENTS}{workload}/{}/", CopyEventKind::Create.name());
    let exit = format!("{EVENTS}{workload}/{}/", CopyEventKind::Exit.name());
    let read = store.read(&[&create, &exit])?;
    let mut h = History::default();
    for e in &read.entries {
        let (rest, is_create) = match e.key.strip_prefix(&create) {
            Some(r) => (r, true),
            None => (e.key.strip_prefix(&exit).unwrap_or_default(), false),
        };
        let mut parts = rest.split('/');
        let (Some(Ok(n)), Some(Ok(tag))) = (
            parts.next().map(str::parse::<u64>),
            parts.next().map(str::parse::<Revision>),
        ) else {
            continue;
        };
        // An entry of an earlier workload of the same name (deleted and applied again) is not
        // this one's history.
        if is_create {
            if e.create_revision > uid {
                *h.created.entry(n).or_default() += 1;
            }
        } else if tag > uid {
            let ev = decode::<CopyEvent>(e)?.value;
            if let Some(how) = ev.how {
                if h.exit.get(&n).is_none_or(|(inc, _)| *inc < tag) {
                    h.exit.insert(n, (tag, how));
                }
            }
        }
    }
    Ok(h)
}

/// Every copy of every workload, or of one, in workload and then copy-number order.
pub fn copies(store: &dyn Store, name: Option<&str>) -> Result<Vec<CopyRow>, OpError> {
    let s = Snapshot::load(store)?;
    let live = crate::remote::live_copies(store)?;
    if let Some(n) = name {
        if !s.workloads.contains_key(n) {
            return Err(OpError::NotFound(n.to_owned()));
        }
    }
    let mut out = Vec::new();
    for (wname, w) in &s.workloads {
        if name.is_some_and(|n| n != wname) {
            continue;
        }
        let uid = w.create_revision;
        let mut rows: BTreeMap<u64, CopyRow> = BTreeMap::new();
        let blank = |copy: &str, n: u64| CopyRow {
            workload: wname.clone(),
            copy: copy.to_owned(),
            n,
            node: None,
            pid: None,
            state: CopyState::Pending,
            age_ms: None,
            restarts: 0,
            last_exit: None,
            assigned: false,
        };
        for (_, a) in s
            .assignments_of(wname)
            .filter(|(_, a)| a.value.owner_uid == uid)
        {
            let r = rows
                .entry(a.value.n)
                .or_insert_with(|| blank(&a.value.copy, a.value.n));
            r.node = Some(a.value.node.clone());
            r.assigned = true;
            r.age_ms = Some(s.now_ms.saturating_sub(a.value.created_ms));
        }
        let backoff = s
            .loops
            .get(wname.as_str())
            .filter(|l| l.value.uid == uid)
            .map(|l| &l.value.backoff);
        for rep in s.reports.values() {
            for c in rep
                .value
                .copies
                .iter()
                .filter(|c| c.workload == *wname && c.owner_uid == uid)
            {
                let r = rows.entry(c.n).or_insert_with(|| blank(&c.copy, c.n));
                r.node.get_or_insert_with(|| rep.value.node.clone());
                r.pid = Some(c.pid);
                r.age_ms
                    .get_or_insert(s.now_ms.saturating_sub(c.started_ms));
                r.last_exit.clone_from(&c.exit);
                let key = if w.value.controller == setpoint_core::ControllerKind::Named {
                    c.copy.as_str()
                } else {
                    wname.as_str()
                };
                let backing_off = backoff
                    .and_then(|b| b.get(key))
                    .is_some_and(|b| b.blocks(s.now_ms));
                r.state = match c.phase {
                    Phase::Exited if backing_off => CopyState::CrashLooping,
                    Phase::Exited => CopyState::Exited,
                    _ if c.stopping || !r.assigned => CopyState::Stopping,
                    Phase::Starting => CopyState::Starting,
                    Phase::Running => CopyState::Running,
                };
            }
        }
        // The live record is written at once, the report only every period (and later by the
        // emulated delay): a copy ready in the live record is running now.
        for c in live.values().flat_map(|r| &r.copies) {
            if c.workload != *wname || c.owner_uid != uid {
                continue;
            }
            if let Some(r) = rows.get_mut(&c.n) {
                r.pid = Some(c.pid);
                if matches!(r.state, CopyState::Pending | CopyState::Starting) {
                    r.state = CopyState::Running;
                }
            }
        }
        let h = history(store, wname, uid)?;
        for r in rows.values_mut() {
            r.restarts = h.created.get(&r.n).map_or(0, |c| c.saturating_sub(1));
            if r.last_exit.is_none() {
                r.last_exit = h.exit.get(&r.n).map(|(_, how)| how.clone());
            }
        }
        // A key that backs off shows its last failed copy as crash-looping, with the key's
        // restarts, even once that copy is collected: between tries a crash-looping workload
        // has no other row, and the restarts of a workload whose replacements get new numbers
        // are counted by key, not by name.
        for b in backoff
            .into_iter()
            .flat_map(|b| b.values())
            .filter(|b| b.blocks(s.now_ms))
        {
            let Some(n) = b
                .last_copy
                .strip_prefix(wname.as_str())
                .and_then(|t| t.strip_prefix('-'))
                .and_then(|t| t.parse::<u64>().ok())
            else {
                continue;
            };
            let r = rows.entry(n).or_insert_with(|| blank(&b.last_copy, n));
            if r.assigned && r.state != CopyState::Exited && r.state != CopyState::CrashLooping {
                // The name runs again: its next try has begun.
                continue;
            }
            r.state = CopyState::CrashLooping;
            r.restarts = r.restarts.max(b.restarts);
            if r.last_exit.is_none() && !b.last_exit.is_empty() {
                r.last_exit = Some(b.last_exit.clone());
            }
        }
        out.extend(rows.into_values());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{append_all, copy_event_key};
    use crate::model::{
        assignment_key, encode, put_assignment, report_key, workload_key, Assignment, CopyEnv,
        CopyReport, NodeReport,
    };
    use crate::store::{MemoryStore, Txn};

    const SPEC: &str = "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"9\"]\ncopies = 3\n";

    fn declare(store: &MemoryStore) -> Revision {
        let specs = crate::parse_workloads(SPEC).unwrap();
        crate::ops::apply(store, &specs).unwrap();
        store
            .get(&workload_key("w"))
            .unwrap()
            .unwrap()
            .create_revision
    }

    fn assign(store: &MemoryStore, uid: Revision, n: u64) -> Revision {
        let a = Assignment {
            copy: format!("w-{n}"),
            workload: "w".into(),
            owner_uid: uid,
            n,
            node: "a".into(),
            command: vec!["sleep".into(), "9".into()],
            startup_ms: 0,
            readiness: None,
            grace_ms: 100,
            created_ms: store.now_ms(),
            env: CopyEnv::default(),
            generation: 1,
            cut_off: Default::default(),
            heartbeat: false,
        };
        store
            .commit(&put_assignment(Txn::new(), &assignment_key("w", n), &a))
            .unwrap()
    }

    fn reported(uid: Revision, n: u64, phase: Phase, stopping: bool) -> CopyReport {
        CopyReport {
            copy: format!("w-{n}"),
            workload: "w".into(),
            owner_uid: uid,
            n,
            incarnation: 0,
            phase,
            pid: 100 + n as u32,
            start_ticks: 1,
            started_ms: 0,
            ready_ms: None,
            exited_ms: None,
            exit: (phase == Phase::Exited).then(|| "exit status 1".to_owned()),
            stopping,
            killed: false,
        }
    }

    fn exit_event(n: u64, inc: Revision, how: &str) -> (String, String) {
        let ev = CopyEvent {
            at_ms: 0,
            node: "a".into(),
            pid: None,
            commanded: false,
            how: Some(how.into()),
        };
        (
            copy_event_key("w", CopyEventKind::Exit, n, inc),
            encode(&ev),
        )
    }

    #[test]
    fn each_state_restarts_and_last_exit_come_from_the_records_that_hold_them() {
        let store = MemoryStore::new();
        // An earlier workload of the same name left a create and an exit of copy 0: they are
        // not this one's history.
        append_all(
            &store,
            vec![
                (
                    copy_event_key("w", CopyEventKind::Create, 0, 1),
                    "{\"at_ms\":0,\"node\":\"a\"}".into(),
                ),
                exit_event(0, 1, "signal 15"),
            ],
        )
        .unwrap();
        let uid = declare(&store);
        // Copy 0: created twice (an earlier incarnation exited), now assigned, not reported.
        for _ in 0..2 {
            let key = copy_event_key("w", CopyEventKind::Create, 0, store.revision().unwrap());
            append_all(&store, vec![(key, "{\"at_ms\":0,\"node\":\"a\"}".into())]).unwrap();
        }
        let first = store.revision().unwrap();
        append_all(&store, vec![exit_event(0, first, "exit status 2")]).unwrap();
        assign(&store, uid, 0);
        // Copy 1: assigned and reported starting; copy 2: reported running, its assignment gone.
        assign(&store, uid, 1);
        let report = NodeReport {
            node: "a".into(),
            observed_ms: 0,
            reported_ms: 0,
            agent_pid: 1,
            synced_revision: u64::MAX,
            copies: vec![
                reported(uid, 1, Phase::Starting, false),
                reported(uid, 2, Phase::Running, false),
            ],
        };
        store
            .commit(&Txn::new().put(report_key("a"), encode(&report)))
            .unwrap();

        let rows = copies(&store, Some("w")).unwrap();
        let got: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.copy.as_str(),
                    r.state,
                    r.pid,
                    r.restarts,
                    r.last_exit.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("w-0", CopyState::Pending, None, 1, Some("exit status 2")),
                ("w-1", CopyState::Starting, Some(101), 0, None),
                ("w-2", CopyState::Stopping, Some(102), 0, None),
            ]
        );
        assert!(matches!(
            copies(&store, Some("x")),
            Err(OpError::NotFound(_))
        ));

        // Copy 1 ends: exited, and crash-looping while the workload's backoff holds creation.
        let mut report = report;
        report.copies[0] = reported(uid, 1, Phase::Exited, false);
        store
            .commit(&Txn::new().put(report_key("a"), encode(&report)))
            .unwrap();
        assert_eq!(copies(&store, None).unwrap()[1].state, CopyState::Exited);
        let mut rec = crate::model::loops::LoopRecord {
            uid,
            ..Default::default()
        };
        let b = crate::model::backoff::BackoffState {
            next_try_ms: store.now_ms() + 60_000,
            failures: 1,
            ..Default::default()
        };
        rec.backoff.insert("w".into(), b);
        store
            .commit(&Txn::new().put(crate::model::loops::loop_key("w"), encode(&rec)))
            .unwrap();
        let r = &copies(&store, None).unwrap()[1];
        assert_eq!(
            (r.state, r.last_exit.as_deref()),
            (CopyState::CrashLooping, Some("exit status 1"))
        );

        // The key's last failed copy is collected: it is still listed, crash-looping, with the
        // key's restarts and its exit, while the backoff holds.
        let b = crate::model::backoff::BackoffState {
            next_try_ms: store.now_ms() + 60_000,
            failures: 2,
            restarts: 4,
            last_exit: "exit status 3".into(),
            last_copy: "w-7".into(),
            ..Default::default()
        };
        rec.backoff.insert("w".into(), b.clone());
        let loop_rev = store
            .get(&crate::model::loops::loop_key("w"))
            .unwrap()
            .unwrap()
            .mod_revision;
        store
            .commit(
                &Txn::new()
                    .expect(crate::model::loops::loop_key("w"), loop_rev)
                    .put(crate::model::loops::loop_key("w"), encode(&rec)),
            )
            .unwrap();
        let rows = copies(&store, None).unwrap();
        let r = rows.iter().find(|r| r.copy == "w-7").expect("listed");
        assert_eq!(
            (r.state, r.restarts, r.last_exit.as_deref(), r.assigned),
            (CopyState::CrashLooping, 4, Some("exit status 3"), false)
        );
        // Its next try has come: no longer listed.
        rec.backoff.insert(
            "w".into(),
            crate::model::backoff::BackoffState {
                next_try_ms: 0,
                ..b
            },
        );
        store
            .commit(&Txn::new().put(crate::model::loops::loop_key("w"), encode(&rec)))
            .unwrap();
        assert!(copies(&store, None)
            .unwrap()
            .iter()
            .all(|r| r.copy != "w-7"));
    }
}
