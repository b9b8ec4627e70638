//! Recovery after a restart: the read of the node's state, what the driver finds ([`Recovery`],
//! by the pure rule [`recovery_from`]), and the copies rebuilt from it ([`rebuild`]).
//!
//! Once the name is held, the agent reads its node's assignments and last report
//! ([`StateRead`]), then asks the driver to look at its state file and for processes carrying its
//! mark. Processes proven its own (by pid, start time and nonce) are adopted; records whose
//! process is gone become exited ones, never restarted while assigned; every other marked
//! process is foreign: never adopted, and stopped if it runs as the agent's user. Copies the
//! store last heard of as exited are kept exited even if the state file was lost.
//!
//! It is separate because it runs once, at the start, and decides what the agent owns; the
//! rules of proof are the one place a mistake would adopt a stranger or start a second copy.

use super::event_log::EventLog;
use super::messages::AgentOutput;
use super::outbox::{Outbox, Purpose};
use super::supervisor::{Local, Supervisor};
use super::sync::{parse_assignments, Assigned};
use super::{AgentCoreConfig, AgentError, CopyRecord, NodeState};
use crate::events::CopyEventKind;
use crate::machine::{StoreReply, StoreRequest, StoreResult};
use crate::model::{placements_of, report_key, NodeReport, Phase};
use crate::process::{self, Marked};
use crate::store::{Entry, LeaseId, StoreError};

/// The grace period given to a foreign process found carrying the agent's mark, in milliseconds.
pub const UNKNOWN_GRACE_MS: u64 = 1_000;

/// What came of the read of the node's state.
#[derive(Debug)]
pub(super) enum StateReadOutcome {
    /// Read: the entries refused among the placements (key, why), to be logged; the driver is to
    /// be asked to recover.
    Read(Vec<(String, String)>),
    /// The agent cannot go on.
    Fatal(AgentError),
    /// It failed for now and is sent again later.
    Retry,
}

/// The read of the node's assignments and last report, before recovery.
#[derive(Debug, Default)]
pub(super) struct StateRead {
    /// What the read gave: assignments and the last report.
    read: Option<(Assigned, Option<Entry>)>,
    /// The read failed: it is sent again at this time.
    retry: Option<u64>,
}

impl StateRead {
    /// Sends the read, under `lease` (the node lease held now).
    pub(super) fn send(
        &mut self,
        now: u64,
        lease: LeaseId,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) {
        self.retry = None;
        let node = &cfg.node;
        let prefixes = vec![placements_of(node), report_key(node)];
        out.send(
            now,
            StoreRequest::Read { prefixes },
            Purpose::ReadState { lease },
            cfg.request_timeout_ms,
        );
    }

    /// When a failed read is to be sent again.
    pub(super) fn retry_at(&self) -> Option<u64> {
        self.retry
    }

    /// The read's answer came after the lease it was sent under was lost: it is not acted on,
    /// and the read is sent again, at once, once a lease is held (a fenced agent starts nothing:
    /// the node may have been lost meanwhile and its copies placed elsewhere).
    pub(super) fn void(&mut self, now: u64) {
        self.retry = Some(now);
    }

    /// After the read's reply.
    pub(super) fn on_read(
        &mut self,
        now: u64,
        result: StoreResult,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) -> StateReadOutcome {
        match result {
            Ok(StoreReply::Read { read, .. }) => {
                let node = &cfg.node;
                let key = report_key(node);
                let placements = placements_of(node);
                let (placed, rest): (Vec<Entry>, Vec<Entry>) = read
                    .entries
                    .into_iter()
                    .partition(|e| e.key.starts_with(&placements));
                let (assigned, refused) = parse_assignments(&placed, node);
                let last = rest.into_iter().find(|e| e.key == key);
                self.read = Some((assigned, last));
                StateReadOutcome::Read(refused)
            }
            Ok(other) => StateReadOutcome::Fatal(AgentError::Store(StoreError::Unavailable(
                format!("unexpected reply {other:?}"),
            ))),
            Err(e) if e.is_lost() => StateReadOutcome::Fatal(AgentError::Store(e)),
            Err(e) => {
                // A lost packet or a slow store must not end the agent before it started
                // (found by `setpoint chaos`: the node's names stayed held for good).
                out.log(format!(
                    "cannot read the node's state: {e} (retrying every {} ms)",
                    cfg.sync_every_ms
                ));
                self.retry = Some(now + cfg.sync_every_ms);
                StateReadOutcome::Retry
            }
        }
    }

    /// What the read gave (empty if it never did), taken once.
    pub(super) fn take(&mut self) -> (Assigned, Option<Entry>) {
        self.read.take().unwrap_or_default()
    }
}

/// Rebuilds the copies from what the driver found: processes proven its own are adopted (and
/// stopped later if unassigned), dead ones become exited records, and every other process
/// carrying its mark is foreign: never adopted, logged, and stopped if it runs as the agent's
/// user (it claims a copy's identity, so leaving it would be a second copy). Copies the store
/// last heard of as exited (`before`, the last report) are kept exited.
#[allow(clippy::too_many_arguments)]
pub(super) fn rebuild(
    now: u64,
    found: Recovery,
    assigned: &Assigned,
    before: Option<NodeReport>,
    cfg: &AgentCoreConfig,
    copies: &mut Supervisor,
    out: &mut Outbox,
    events: &mut EventLog,
    strays_fenced: bool,
) {
    let node = &cfg.node;
    let mut unclaimed = found.unclaimed;
    for FoundRecord {
        mut record,
        process,
    } in found.records
    {
        let copy = record.assignment.copy.clone();
        if let Err(why) = crate::rules::check_assignment(&record.assignment, node) {
            out.log(format!(
                "refused the state file's record of {}: {why}",
                copy.escape_debug()
            ));
            if let Some((pid, start_ticks)) = process {
                // It is not a copy of this agent's: as foreign as any.
                unclaimed.push(Marked {
                    pid,
                    start_ticks,
                    copy: copy.clone(),
                    nonce: None,
                    uid: found.own_uid,
                });
            }
            continue;
        }
        match process.filter(|_| record.phase != Phase::Exited) {
            Some((pid, start_ticks)) => {
                if record.pid == 0 {
                    // Started, or about to be, when the agent died: its pid was never
                    // recorded, but its nonce was.
                    out.log(format!("adopted unrecorded {copy} (pid {pid})"));
                    record.started_ms = now;
                } else {
                    out.log(format!("adopted {copy} (pid {pid})"));
                }
                record.pid = pid;
                record.start_ticks = start_ticks;
                record.stopping = false;
                out.push(AgentOutput::Adopt {
                    copy: copy.clone(),
                    pid,
                    start_ticks,
                });
                copies.insert(copy, Local::new(record));
            }
            None => {
                let mut l = Local::new(record);
                if !l.exited() {
                    // Not proven its own: the pid may be anyone's by now, so it is not
                    // signalled.
                    l.record.pid = 0;
                    if strays_fenced {
                        // This agent stopped it itself before its claim held: a commanded
                        // death, replaced without backoff, as a fence's are.
                        l.record.killed = true;
                        l.mark_exited(now, "stopped by this agent's fence before its claim".into());
                    } else {
                        l.mark_exited(now, "ended while the agent was down".into());
                    }
                    events.copy_event(CopyEventKind::Exit, &l.record, now, node);
                }
                copies.insert(copy, l);
            }
        }
    }
    for m in unclaimed {
        let known = copies
            .get(&m.copy)
            .is_some_and(|l| l.record.pid == m.pid && l.record.start_ticks == m.start_ticks);
        if known {
            continue;
        }
        if m.uid != found.own_uid {
            out.log(format!(
                "foreign process {} of user {} carries the mark of {}: not adopted, left alone",
                m.pid,
                m.uid,
                m.copy.escape_debug()
            ));
            continue;
        }
        let assigned_here = assigned.get(&m.copy).filter(|_| !copies.contains(&m.copy));
        // Whether the node's last report showed this incarnation live: then the process is
        // most likely the copy itself, its record lost with the state file. Otherwise (an
        // assignment made while no agent ran) it is an impostor, and the real copy starts.
        let was_running = assigned_here.filter(|(_, incarnation)| {
            before.as_ref().is_some_and(|r| {
                r.copies.iter().any(|c| {
                    c.copy == m.copy && c.incarnation == *incarnation && c.phase != Phase::Exited
                })
            })
        });
        out.log(format!(
            "foreign process {} carries the mark of {} without its nonce: not adopted{}; stopping it",
            m.pid,
            m.copy.escape_debug(),
            match (assigned_here, was_running) {
                (_, Some(_)) => ", and the copy it ran as counts as ended",
                (Some(_), None) => ", the real copy starts",
                (None, None) => "",
            }
        ));
        out.push(AgentOutput::StopForeign {
            pid: m.pid,
            start_ticks: m.start_ticks,
            grace_ms: UNKNOWN_GRACE_MS,
        });
        // The copy ran (the last report shows it live) and a process with its mark runs:
        // most likely the copy itself, whose record went with the state file. It is stopped,
        // so the copy is ended, by this agent's hand. It is not started again in place under
        // the same assignment: the controller replaces it at once (a commanded death), and
        // counts it as it does every death. Started in place, it was neither ready nor the
        // controller's own pending work, so `intent` created one more and later deleted a
        // ready copy (chaos finding 12).
        if let Some((a, incarnation)) = was_running {
            let mut l = Local::new(CopyRecord {
                killed: true,
                ..CopyRecord::starting(a.clone(), *incarnation, now, String::new())
            });
            l.mark_exited(
                now,
                "stopped: not provably this agent's (its state was lost)".into(),
            );
            events.copy_event(CopyEventKind::Exit, &l.record, now, node);
            copies.insert(m.copy.clone(), l);
        }
    }
    // Copies the store last heard of as exited must not start again, even if the state
    // file was lost.
    if let Some(report) = before {
        for c in report
            .copies
            .into_iter()
            .filter(|c| c.phase == Phase::Exited)
        {
            let Some((a, incarnation)) = assigned.get(&c.copy) else {
                continue;
            };
            if *incarnation == c.incarnation && !copies.contains(&c.copy) {
                let record = CopyRecord {
                    assignment: a.clone(),
                    incarnation: *incarnation,
                    pid: 0,
                    start_ticks: 0,
                    started_ms: c.started_ms,
                    phase: Phase::Exited,
                    ready_ms: c.ready_ms,
                    exited_ms: c.exited_ms,
                    exit: c.exit.clone(),
                    stopping: false,
                    killed: c.killed,
                    nonce: String::new(),
                };
                copies.insert(c.copy, Local::new(record));
            }
        }
    }
}

/// One state-file record as the driver found it after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundRecord {
    /// The record as the state file holds it.
    pub record: CopyRecord,
    /// The live process proven to be this copy (pid, start ticks): the recorded pid with its
    /// start time and nonce, or, for a record without a pid, a marked process holding its
    /// nonce. `None`: no such process lives.
    pub process: Option<(u32, u64)>,
}

/// What the driver found when asked to [`AgentOutput::Recover`](super::AgentOutput::Recover).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The state file's records, each with its live process if one is proven its own.
    pub records: Vec<FoundRecord>,
    /// The live processes carrying the agent's mark that no record claimed.
    pub unclaimed: Vec<Marked>,
    /// The agent's own user id (a marked process of another user is left alone).
    pub own_uid: u32,
}

/// Whether the first claim's fence spares `m`, a process found by this node's mark: the last
/// agent here recorded it (the same pid, start time, identity and the nonce it gave it) as a
/// copy whose workload keeps running while cut off ([`CutOff::Keep`](crate::model::CutOff)).
/// Only `named` copies are fenced by a lost lease by default, restarted agent or not; a copy
/// with `stop_when_cut_off` and anything unproven are stopped by the fence's deadlines as
/// before. Pure, for the tokio driver and the chaos world alike.
pub fn kept_while_cut_off(saved: Option<&NodeState>, m: &Marked) -> bool {
    saved.is_some_and(|s| {
        s.copies.iter().any(|r| {
            r.pid == m.pid
                && r.start_ticks == m.start_ticks
                && r.assignment.copy == m.copy
                && !r.nonce.is_empty()
                && m.nonce.as_deref() == Some(r.nonce.as_str())
                && r.assignment.cut_off == crate::model::CutOff::Keep
        })
    })
}

/// What an agent finds after a restart, from its state file (`saved`, `None` if there is
/// none), the live processes carrying its mark (`marked`) and its user id (`me`): each record
/// with its live process if that is proven its own (a record without a pid by a marked process
/// holding its nonce, a record with one by `proves_own(pid, start_ticks, nonce)`), and the
/// marked processes no record claims. Pure, so that the tokio driver (on the state file and
/// `/proc`) and the chaos world (on the simulated node's) answer [`AgentOutput::Recover`](super::AgentOutput::Recover)
/// by one rule.
pub fn recovery_from(
    saved: Option<NodeState>,
    mut marked: Vec<process::Marked>,
    me: u32,
    proves_own: impl Fn(u32, u64, &str) -> bool,
) -> Recovery {
    let mut records = Vec::new();
    for record in saved.map(|s| s.copies).unwrap_or_default() {
        let mut process = None;
        if record.phase != Phase::Exited && record.pid == 0 && !record.nonce.is_empty() {
            let own = marked.iter().position(|m| {
                m.copy == record.assignment.copy
                    && m.uid == me
                    && m.nonce.as_deref() == Some(record.nonce.as_str())
            });
            if let Some(i) = own {
                let m = marked.remove(i);
                process = Some((m.pid, m.start_ticks));
            }
        }
        if process.is_none()
            && record.phase != Phase::Exited
            && record.pid != 0
            && proves_own(record.pid, record.start_ticks, &record.nonce)
        {
            marked.retain(|m| m.pid != record.pid);
            process = Some((record.pid, record.start_ticks));
        }
        records.push(FoundRecord { record, process });
    }
    Recovery {
        records,
        unclaimed: marked,
        own_uid: me,
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{assigned, record};
    use super::*;

    fn marked(pid: u32, copy: &str, nonce: Option<&str>, uid: u32) -> Marked {
        Marked {
            pid,
            start_ticks: u64::from(pid) * 10,
            copy: copy.into(),
            nonce: nonce.map(Into::into),
            uid,
        }
    }

    /// The first claim's fence spares only a process the state file proves is a copy kept
    /// while cut off: the recorded pid, start time, identity and nonce, and `CutOff::Keep`.
    #[test]
    fn the_first_claims_fence_spares_only_a_proven_copy_kept_while_cut_off() {
        use crate::model::CutOff;
        let mut kept = record(0, Phase::Running, 100);
        kept.assignment.cut_off = CutOff::Keep;
        let mut fenced = record(1, Phase::Running, 101);
        fenced.assignment.cut_off = CutOff::Fence;
        let mut timed = record(2, Phase::Running, 102);
        timed.assignment.cut_off = CutOff::After(30_000);
        let saved = NodeState {
            node: "a".into(),
            agent_pid: 1,
            copies: vec![kept, fenced, timed],
        };
        let s = Some(&saved);
        assert!(kept_while_cut_off(
            s,
            &marked(100, "w-0", Some("nonce-0"), 7)
        ));
        assert!(
            !kept_while_cut_off(s, &marked(101, "w-1", Some("nonce-1"), 7)),
            "named"
        );
        assert!(
            !kept_while_cut_off(s, &marked(102, "w-2", Some("nonce-2"), 7)),
            "timed"
        );
        // Not proven: another nonce, none, another identity, a reused pid (start time), no file.
        assert!(!kept_while_cut_off(
            s,
            &marked(100, "w-0", Some("forged"), 7)
        ));
        assert!(!kept_while_cut_off(s, &marked(100, "w-0", None, 7)));
        assert!(!kept_while_cut_off(
            s,
            &marked(100, "w-9", Some("nonce-0"), 7)
        ));
        let mut reused = marked(100, "w-0", Some("nonce-0"), 7);
        reused.start_ticks += 1;
        assert!(!kept_while_cut_off(s, &reused));
        assert!(!kept_while_cut_off(
            None,
            &marked(100, "w-0", Some("nonce-0"), 7)
        ));
    }

    #[test]
    fn a_process_is_the_agents_own_only_by_its_nonce_or_its_recorded_pid_and_start_time() {
        let saved = NodeState {
            node: "a".into(),
            agent_pid: 1,
            copies: vec![
                record(0, Phase::Running, 100),
                record(1, Phase::Starting, 0),
                record(2, Phase::Running, 102),
            ],
        };
        let found = recovery_from(
            Some(saved),
            vec![
                marked(101, "w-1", Some("nonce-1"), 7),
                marked(103, "w-3", Some("nonce-3"), 7),
                marked(100, "w-0", Some("nonce-0"), 7),
            ],
            7,
            // w-0's pid proves its own; w-2's pid is someone else's by now.
            |pid, _, nonce| pid == 100 && nonce == "nonce-0",
        );
        let processes: Vec<Option<(u32, u64)>> = found.records.iter().map(|r| r.process).collect();
        assert_eq!(processes, [Some((100, 1_000)), Some((101, 1_010)), None]);
        let unclaimed: Vec<u32> = found.unclaimed.iter().map(|m| m.pid).collect();
        assert_eq!(unclaimed, [103], "only the process no record claims");
        assert_eq!(found.own_uid, 7);
    }

    /// A copy whose start was under way (no pid recorded) is found by a marked process only if
    /// that process has its identity, the agent's user id and its nonce, all three: a process
    /// of that name with another nonce (an earlier incarnation's, or an impostor's) or under
    /// another user is not it, and is left to the rebuild to stop. Mutant 886 of the mutation
    /// sample (`&&` → `||` after the identity) took any process of that name for the copy.
    #[test]
    fn a_start_under_way_is_found_only_by_its_identity_user_and_nonce_together() {
        let saved = NodeState {
            node: "a".into(),
            agent_pid: 1,
            copies: vec![record(1, Phase::Starting, 0)],
        };
        let strangers = [
            marked(140, "w-1", Some("nonce-0"), 7),
            marked(141, "w-1", None, 7),
            marked(142, "w-1", Some("nonce-1"), 8),
            marked(143, "w-9", Some("nonce-1"), 7),
        ];
        for stranger in &strangers {
            let found = recovery_from(Some(saved.clone()), vec![stranger.clone()], 7, |_, _, _| {
                false
            });
            assert_eq!(found.records[0].process, None, "{stranger:?}");
            assert_eq!(found.unclaimed.len(), 1, "{stranger:?}");
        }
        let mut all = strangers.to_vec();
        all.push(marked(101, "w-1", Some("nonce-1"), 7));
        let found = recovery_from(Some(saved), all, 7, |_, _, _| false);
        assert_eq!(found.records[0].process, Some((101, 1_010)));
        let unclaimed: Vec<u32> = found.unclaimed.iter().map(|m| m.pid).collect();
        assert_eq!(unclaimed, [140, 141, 142, 143]);
    }

    /// A real node: a copy's children inherit its environment (its mark and nonce), and a
    /// child that left the copy's process group can outlive it. Neither is ever the copy.
    #[test]
    fn a_copys_child_carrying_its_nonce_is_never_taken_for_the_copy_alive_or_dead() {
        let mut dead = record(1, Phase::Exited, 101);
        dead.exited_ms = Some(30);
        let saved = NodeState {
            node: "a".into(),
            agent_pid: 1,
            copies: vec![record(0, Phase::Running, 100), dead],
        };
        let found = recovery_from(
            Some(saved),
            vec![
                // w-0's child, listed before w-0 itself; w-1's child, which outlived it.
                marked(150, "w-0", Some("nonce-0"), 7),
                marked(151, "w-1", Some("nonce-1"), 7),
                marked(100, "w-0", Some("nonce-0"), 7),
            ],
            7,
            |pid, ticks, nonce| pid == 100 && ticks == 1_000 && nonce == "nonce-0",
        );
        let processes: Vec<Option<(u32, u64)>> = found.records.iter().map(|r| r.process).collect();
        assert_eq!(
            processes,
            [Some((100, 1_000)), None],
            "the recorded pid, not a child"
        );
        let unclaimed: Vec<u32> = found.unclaimed.iter().map(|m| m.pid).collect();
        assert_eq!(
            unclaimed,
            [150, 151],
            "both children are left to the rebuild to stop"
        );
    }

    /// A pid is reused on a real node: the process now at a dead copy's recorded pid, with
    /// another start time, carries that copy's mark (a copy's child, or anyone who copied its
    /// environment). It is not the copy and is stopped as foreign; only the very process adopted
    /// (the same pid and start time) is left alone if a driver lists it again.
    #[test]
    fn a_process_at_a_dead_copys_recorded_pid_with_another_start_time_is_stopped_as_foreign() {
        let mut dead = record(1, Phase::Exited, 101);
        dead.exited_ms = Some(30);
        let mut reused = marked(101, "w-1", None, 7);
        reused.start_ticks = 5_000;
        let found = Recovery {
            records: vec![
                FoundRecord {
                    record: record(0, Phase::Running, 100),
                    process: Some((100, 1_000)),
                },
                FoundRecord {
                    record: dead,
                    process: None,
                },
            ],
            unclaimed: vec![reused, marked(100, "w-0", Some("nonce-0"), 7)],
            own_uid: 7,
        };
        let cfg = AgentCoreConfig::new("a");
        let mut copies = Supervisor::new();
        let mut out = Outbox::new();
        rebuild(
            50,
            found,
            &assigned(&[0]),
            None,
            &cfg,
            &mut copies,
            &mut out,
            &mut EventLog::default(),
            false,
        );
        let acts: Vec<String> = out
            .drain()
            .into_iter()
            .filter_map(|o| match o {
                AgentOutput::Adopt { copy, pid, .. } => Some(format!("adopt {copy} {pid}")),
                AgentOutput::StopForeign {
                    pid, start_ticks, ..
                } => Some(format!("stop {pid} {start_ticks}")),
                _ => None,
            })
            .collect();
        assert_eq!(acts, ["adopt w-0 100", "stop 101 5000"]);
        let w1 = &copies.get("w-1").unwrap().record;
        assert_eq!(
            (w1.phase, w1.pid),
            (Phase::Exited, 101),
            "still the dead copy's record"
        );
    }

    #[test]
    fn the_rebuild_adopts_what_is_proven_records_the_dead_as_exited_and_stops_only_own_user_strangers(
    ) {
        let found = Recovery {
            records: vec![
                FoundRecord {
                    record: record(0, Phase::Running, 100),
                    process: Some((100, 1_000)),
                },
                FoundRecord {
                    record: record(1, Phase::Running, 101),
                    process: None,
                },
            ],
            unclaimed: vec![marked(200, "w-0", None, 7), marked(300, "w-5", None, 8)],
            own_uid: 7,
        };
        let cfg = AgentCoreConfig::new("a");
        let mut copies = Supervisor::new();
        let (mut out, mut events) = (Outbox::new(), EventLog::default());
        rebuild(
            50,
            found,
            &assigned(&[0, 1]),
            None,
            &cfg,
            &mut copies,
            &mut out,
            &mut events,
            false,
        );
        let acts: Vec<String> = out
            .drain()
            .into_iter()
            .filter_map(|o| match o {
                AgentOutput::Adopt { copy, pid, .. } => Some(format!("adopt {copy} {pid}")),
                AgentOutput::StopForeign { pid, .. } => Some(format!("stop {pid}")),
                _ => None,
            })
            .collect();
        assert_eq!(
            acts,
            ["adopt w-0 100", "stop 200"],
            "the other user's 300 is left alone"
        );
        assert_eq!(copies.get("w-0").unwrap().record.phase, Phase::Running);
        let dead = &copies.get("w-1").unwrap().record;
        assert_eq!(
            (dead.phase, dead.pid),
            (Phase::Exited, 0),
            "never signalled"
        );
        assert!(
            !dead.killed,
            "ended on its own while no agent ran: a failure"
        );
    }

    #[test]
    fn an_assigned_copy_whose_process_cannot_be_proven_is_stopped_and_ended_not_started_again() {
        // Chaos finding 12: the state file is lost; a process carries w-2's mark without a
        // nonce the agent can check, and the last report showed w-2 running. It is stopped,
        // and w-2 is recorded as ended by the agent's hand, so that nothing starts it again in
        // place; w-3, assigned with no process, is left to start as usual.
        let found = Recovery {
            records: Vec::new(),
            unclaimed: vec![marked(200, "w-2", None, 7)],
            own_uid: 7,
        };
        let cfg = AgentCoreConfig::new("a");
        let mut copies = Supervisor::new();
        let (mut out, mut events) = (Outbox::new(), EventLog::default());
        let assigned = assigned(&[2, 3]);
        // The last report showed w-2 running (its process is most likely the copy itself).
        let report = |inc: u64| -> NodeReport {
            serde_json::from_value(serde_json::json!({
                "node": "a", "observed_ms": 40, "reported_ms": 40, "agent_pid": 1,
                "copies": [{
                    "copy": "w-2", "workload": "w", "owner_uid": 1, "n": 2,
                    "incarnation": inc, "phase": "running", "pid": 200, "start_ticks": 9,
                    "started_ms": 1, "ready_ms": 2, "exited_ms": null, "exit": null,
                    "stopping": false
                }]
            }))
            .unwrap()
        };
        let inc = assigned["w-2"].1;
        // Never reported (assigned while no agent ran): an impostor; the real copy starts.
        let mut fresh = Supervisor::new();
        rebuild(
            50,
            found.clone(),
            &assigned,
            Some(report(inc + 1)),
            &cfg,
            &mut fresh,
            &mut Outbox::new(),
            &mut EventLog::default(),
            false,
        );
        assert!(fresh.get("w-2").is_none(), "left to start");
        rebuild(
            50,
            found,
            &assigned,
            Some(report(inc)),
            &cfg,
            &mut copies,
            &mut out,
            &mut events,
            false,
        );
        assert!(out
            .drain()
            .iter()
            .any(|o| matches!(o, AgentOutput::StopForeign { pid: 200, .. })));
        let ended = &copies.get("w-2").expect("recorded").record;
        assert_eq!(
            (ended.phase, ended.pid, ended.killed),
            (Phase::Exited, 0, true)
        );
        assert!(copies.get("w-3").is_none(), "not this step's business");
    }

    #[test]
    fn a_stranger_with_the_mark_of_a_recorded_copy_is_stopped_and_the_copys_own_end_stays_a_crash()
    {
        // The state file knows w-0 (pid 100), which died while no agent ran; a process carries
        // its mark without its nonce. The record is what ended w-0: the stranger is stopped,
        // but is not taken for the copy, whose death stays a failure (backoff), not this
        // agent's doing.
        let found = Recovery {
            records: vec![FoundRecord {
                record: record(0, Phase::Running, 100),
                process: None,
            }],
            unclaimed: vec![marked(300, "w-0", None, 7)],
            own_uid: 7,
        };
        let before: NodeReport = serde_json::from_value(serde_json::json!({
            "node": "a", "observed_ms": 40, "reported_ms": 40, "agent_pid": 1,
            "copies": [{
                "copy": "w-0", "workload": "w", "owner_uid": 1, "n": 0,
                "incarnation": 10, "phase": "running", "pid": 100, "start_ticks": 1000,
                "started_ms": 1, "ready_ms": 2, "exited_ms": null, "exit": null,
                "stopping": false
            }]
        }))
        .unwrap();
        let cfg = AgentCoreConfig::new("a");
        let mut copies = Supervisor::new();
        let mut out = Outbox::new();
        rebuild(
            50,
            found,
            &assigned(&[0]),
            Some(before),
            &cfg,
            &mut copies,
            &mut out,
            &mut EventLog::default(),
            false,
        );
        let outputs = out.drain();
        assert!(outputs
            .iter()
            .any(|o| matches!(o, AgentOutput::StopForeign { pid: 300, .. })));
        assert!(
            outputs.iter().any(|o| matches!(o, AgentOutput::Log(l)
            if l.ends_with("carries the mark of w-0 without its nonce: not adopted; stopping it")))
        );
        let w0 = &copies.get("w-0").unwrap().record;
        assert_eq!(
            (w0.phase, w0.killed, w0.exit.as_deref()),
            (Phase::Exited, false, Some("ended while the agent was down"))
        );
    }

    #[test]
    fn a_copy_the_first_claims_fence_stopped_is_a_commanded_death() {
        let found = Recovery {
            records: vec![FoundRecord {
                record: record(1, Phase::Running, 101),
                process: None,
            }],
            unclaimed: Vec::new(),
            own_uid: 7,
        };
        let mut copies = Supervisor::new();
        let (mut out, mut events) = (Outbox::new(), EventLog::default());
        let cfg = AgentCoreConfig::new("a");
        let assigned = assigned(&[1]);
        rebuild(
            50,
            found,
            &assigned,
            None,
            &cfg,
            &mut copies,
            &mut out,
            &mut events,
            true,
        );
        let dead = &copies.get("w-1").unwrap().record;
        assert_eq!(dead.phase, Phase::Exited);
        assert!(
            dead.killed,
            "stopped by this agent: replaced without backoff"
        );
    }
}
