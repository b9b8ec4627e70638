//! What the parts' unit tests share: assignments and records of node `a`'s workload `w`.

use super::supervisor::{Local, Supervisor};
use super::sync::Assigned;
use super::CopyRecord;
use crate::model::{Assignment, Phase};
use crate::rules::CopyEnv;

/// Copy `w-{n}` of node `a`: `sleep 100`, startup 20ms, grace 100ms. The model's tests use it
/// too, with the fields they vary set.
pub(crate) fn assignment(n: u64) -> Assignment {
    Assignment {
        copy: format!("w-{n}"),
        workload: "w".into(),
        owner_uid: 1,
        n,
        node: "a".into(),
        command: vec!["sleep".into(), "100".into()],
        startup_ms: 20,
        readiness: None,
        grace_ms: 100,
        created_ms: 0,
        env: CopyEnv::default(),
        generation: 0,
        cut_off: Default::default(),
        heartbeat: false,
    }
}

/// Copies `w-{n}` for each `n`, incarnation `10 + n`.
pub(super) fn assigned(ns: &[u64]) -> Assigned {
    ns.iter()
        .map(|&n| (format!("w-{n}"), (assignment(n), 10 + n)))
        .collect()
}

/// The record of copy `w-{n}` (incarnation `10 + n`) in `phase`, as process `pid`.
pub(super) fn record(n: u64, phase: Phase, pid: u32) -> CopyRecord {
    CopyRecord {
        assignment: assignment(n),
        incarnation: 10 + n,
        pid,
        start_ticks: u64::from(pid) * 10,
        started_ms: 0,
        phase,
        ready_ms: None,
        exited_ms: None,
        exit: None,
        stopping: false,
        killed: false,
        nonce: format!("nonce-{n}"),
    }
}

/// A supervisor holding `records`.
pub(super) fn supervisor(records: Vec<CopyRecord>) -> Supervisor {
    let mut s = Supervisor::new();
    for r in records {
        s.insert(r.assignment.copy.clone(), Local::new(r));
    }
    s
}
