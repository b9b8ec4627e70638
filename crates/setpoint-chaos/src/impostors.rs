//! Impostors on a node: processes carrying a copy's mark that are not the copy, planted at an
//! agent's restart by the fault kinds `pid-reuse` and `impostor`, and the check
//! `impostor-kept` that the restarted agent stops every one within its grace and adopts none.
//!
//! A real node reuses pids, and a copy's child inherits its environment (its mark and its
//! nonce) and may outlive it. Recovery tells the copy from such a process by its pid, its start
//! time and its nonce together ([`setpoint_runtime::agent::recovery_from`]); the world plants
//! both kinds where it reaches them, so the checker sees a rule of proof that is too weak:
//! - **pid reuse**: a process at a dead copy's recorded pid, started later (another start
//!   time), carrying that copy's mark and nonce (an inherited environment that landed on the
//!   pid again);
//! - **an impostor** (an outliving child): a process at a pid of its own carrying a live or
//!   dead copy's mark and nonce.
//!
//! Both copy from the node's state file as the restarted agent will read it: only a record with
//! a pid (a copy that ran) has a child or a pid to reuse. A record without one is left out: a
//! copy whose pid was never written down is found by its nonce alone, so a child that outlived
//! it cannot be told from it by any rule. With no such record, the fault is a plain restart.
//!
//! Impostors are kept apart from the copies' processes ([`crate::world::Outcome::procs`]), so the
//! copy checks (`double-run`, `orphan`, `not-converged`, …) leave them out.

use setpoint_runtime::agent::{NodeState, UNKNOWN_GRACE_MS};

use crate::check::{Check, Violation};
use crate::faults::{Fault, FaultKind};
use crate::world::ProcRecord;

/// Which kind of impostor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// At a dead copy's recorded pid, with a later start time.
    PidReuse,
    /// At a pid of its own: a copy's child that outlived it, or runs beside it.
    Child,
}

impl Kind {
    /// The fault kind that plants it.
    pub fn of(kind: FaultKind) -> Option<Kind> {
        match kind {
            FaultKind::PidReuse => Some(Kind::PidReuse),
            FaultKind::Impostor => Some(Kind::Child),
            _ => None,
        }
    }

    /// Its name in details.
    pub fn name(self) -> &'static str {
        match self {
            Kind::PidReuse => "a reused pid",
            Kind::Child => "an impostor",
        }
    }
}

/// The copy an impostor imitates: one record of the node's state file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    /// The copy's identity (its mark).
    pub copy: String,
    /// Its workload.
    pub workload: String,
    /// Its recorded pid.
    pub pid: u32,
    /// Its nonce.
    pub nonce: String,
}

/// The state file's records an impostor of `kind` may imitate, in the file's order: every
/// record with a pid and a nonce; for pid reuse only those whose recorded pid no live process
/// of the node holds (`pid_live`), as a pid is reused only once it is free.
pub fn models(kind: Kind, disk: Option<&NodeState>, pid_live: impl Fn(u32) -> bool) -> Vec<Model> {
    disk.map(|s| s.copies.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|r| r.pid != 0 && !r.nonce.is_empty())
        .filter(|r| kind == Kind::Child || !pid_live(r.pid))
        .map(|r| Model {
            copy: r.assignment.copy.clone(),
            workload: r.assignment.workload.clone(),
            pid: r.pid,
            nonce: r.nonce.clone(),
        })
        .collect()
}

/// An impostor of `kind` on `host`'s node `node`, planted at `now` as the process that will be
/// `procs[procs.len()]`, started at `ticks`: the process and its record, imitating the record
/// of the state file `disk` that `pick(n)` draws (an index below `n`) among [`models`]; `None`
/// if none fits. A pid-reuse impostor holds the record's pid; a child the pid `ticks` (a new
/// process's pid is its start time, [`crate::node`]).
pub fn plant(
    kind: Kind,
    host: usize,
    node: &str,
    disk: Option<&NodeState>,
    procs: &[ProcRecord],
    (now, ticks): (u64, u64),
    pick: impl FnOnce(u64) -> usize,
) -> Option<(ProcRecord, Impostor)> {
    let mut models = models(kind, disk, |pid| {
        procs
            .iter()
            .any(|r| r.host == host && r.pid == pid && r.end_ms.is_none())
    });
    if models.is_empty() {
        return None;
    }
    let m = models.swap_remove(pick(models.len() as u64));
    let pid = match kind {
        Kind::PidReuse => m.pid,
        Kind::Child => u32::try_from(ticks).expect("fewer than 4 billion processes"),
    };
    let impostor = Impostor {
        kind,
        host,
        pid,
        start_ticks: ticks,
        copy: m.copy.clone(),
        of_pid: m.pid,
        at_ms: now,
        end_ms: None,
        adopted_ms: None,
    };
    let proc = ProcRecord {
        pid,
        host,
        node: node.to_owned(),
        copy: m.copy,
        workload: m.workload,
        up_ms: Some(now),
        end_ms: None,
        down_ms: None,
        start_at: now,
        nonce: m.nonce,
        adopted: false,
    };
    Some((proc, impostor))
}

/// One planted impostor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Impostor {
    /// Which kind.
    pub kind: Kind,
    /// The agent host whose node it runs on.
    pub host: usize,
    /// Its pid (the imitated copy's recorded pid, for pid reuse).
    pub pid: u32,
    /// Its start time in clock ticks (later than the imitated copy's).
    pub start_ticks: u64,
    /// The copy whose mark and nonce it carries.
    pub copy: String,
    /// That copy's recorded pid.
    pub of_pid: u32,
    /// When it was planted (and started), milliseconds.
    pub at_ms: u64,
    /// When it ended, if it did, milliseconds.
    pub end_ms: Option<u64>,
    /// When an agent adopted it, if one did, milliseconds.
    pub adopted_ms: Option<u64>,
}

/// One recovery of an agent: when its machine was handed what the driver found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// The agent host.
    pub host: usize,
    /// When, milliseconds of virtual time.
    pub at_ms: u64,
    /// How many live marked processes it was shown (the most it may stop, one after another,
    /// each within its grace).
    pub listed: u64,
}

/// What the world kept of impostors for the check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// Every impostor planted, in the order planted.
    pub planted: Vec<Impostor>,
    /// Every agent recovery, in time order.
    pub recoveries: Vec<Recovered>,
}

/// The check `impostor-kept`: no impostor is ever adopted, and each is stopped by the first
/// recovery of its node's agent after it was planted, within its grace
/// ([`UNKNOWN_GRACE_MS`]) for each process that recovery may stop before it (the driver stops
/// foreign processes one after another). A recovery whose agent restarts before that deadline
/// hands the impostor to the next one; one that ended before (a crash, a fence of strays) is
/// not kept. `schedule` gives the restarts; `end_ms` is the run's end.
pub fn check(record: &Record, schedule: &[Fault], end_ms: u64) -> Vec<Violation> {
    let mut v = Vec::new();
    for i in &record.planted {
        let what = || {
            format!(
                "{} carrying the mark of {} (recorded pid {}): pid {} started {} ms",
                i.kind.name(),
                i.copy,
                i.of_pid,
                i.pid,
                i.at_ms
            )
        };
        if let Some(at) = i.adopted_ms {
            v.push(Violation {
                check: Check::ImpostorKept,
                at_ms: at,
                detail: format!("{} was adopted as the copy", what()),
            });
            continue;
        }
        let ended_by = |t: u64| i.end_ms.is_some_and(|e| e <= t);
        let restarted = |from: u64, to: u64| {
            schedule.iter().any(|f| {
                f.host == i.host && f.kind.restarts_host() && f.at_ms > from && f.at_ms <= to
            })
        };
        // `None`: stopped in time (or the run ended first); else when and why it was kept.
        let mut kept = i.end_ms.is_none().then(|| {
            (
                end_ms,
                "still ran at the end: no recovery stopped it".to_owned(),
            )
        });
        for r in record
            .recoveries
            .iter()
            .filter(|r| r.host == i.host && r.at_ms >= i.at_ms)
        {
            let due = r.at_ms + r.listed.max(1) * UNKNOWN_GRACE_MS;
            if ended_by(due) || due > end_ms {
                kept = None;
                break;
            }
            if !restarted(r.at_ms, due) {
                kept = Some((
                    due,
                    format!(
                        "still ran at {due} ms, {} ms after the recovery at {} ms",
                        due - r.at_ms,
                        r.at_ms
                    ),
                ));
                break;
            }
        }
        if let Some((at_ms, why)) = kept {
            v.push(Violation {
                check: Check::ImpostorKept,
                at_ms,
                detail: format!("{} {why}", what()),
            });
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapt::{make, Bugs};
    use crate::faults::parse;
    use crate::machine::Role;
    use crate::runner::{run_checked, SeedReport};
    use crate::world::Outcome;
    use setpoint_runtime::agent::CopyRecord;
    use setpoint_runtime::model::{Assignment, Phase};

    fn record(copy: &str, pid: u32, nonce: &str, phase: Phase) -> CopyRecord {
        let assignment: Assignment = serde_json::from_value(serde_json::json!({
            "copy": copy, "workload": "web", "owner_uid": 1, "n": 0, "node": "node-1",
            "command": [], "startup_ms": 0, "readiness": null, "grace_ms": 0, "created_ms": 0,
        }))
        .unwrap();
        CopyRecord {
            pid,
            start_ticks: u64::from(pid),
            phase,
            nonce: nonce.into(),
            ..CopyRecord::starting(assignment, 1, 0, nonce.into())
        }
    }

    #[test]
    fn only_records_with_a_pid_and_a_nonce_are_imitated_and_a_pid_is_reused_only_once_free() {
        let disk = NodeState {
            node: "node-1".into(),
            agent_pid: 1,
            copies: vec![
                record("web-0", 1000, "n0", Phase::Running),
                record("web-1", 1001, "n1", Phase::Exited),
                record("web-2", 0, "n2", Phase::Starting),
                record("web-3", 1003, "", Phase::Running),
            ],
        };
        let copies = |ms: Vec<Model>| ms.into_iter().map(|m| m.copy).collect::<Vec<_>>();
        let live = |pid: u32| pid == 1000;
        assert_eq!(
            copies(models(Kind::Child, Some(&disk), live)),
            ["web-0", "web-1"],
            "a child of a live or a dead copy; none of a copy whose pid was never written"
        );
        assert_eq!(
            copies(models(Kind::PidReuse, Some(&disk), live)),
            ["web-1"],
            "web-0's pid is still held"
        );
        assert_eq!(
            models(Kind::Child, None, live),
            [],
            "no state file, nothing"
        );
    }

    fn planted(adopted_ms: Option<u64>, end_ms: Option<u64>) -> Impostor {
        Impostor {
            kind: Kind::PidReuse,
            host: 1,
            pid: 1001,
            start_ticks: 1007,
            copy: "web-1".into(),
            of_pid: 1001,
            at_ms: 10_000,
            end_ms,
            adopted_ms,
        }
    }

    fn recovered(host: usize, at_ms: u64, listed: u64) -> Recovered {
        Recovered {
            host,
            at_ms,
            listed,
        }
    }

    fn restart(at_ms: u64, host: usize) -> Fault {
        Fault {
            at_ms,
            kind: FaultKind::Restart,
            host,
            duration_ms: 0,
        }
    }

    /// No violation.
    const NONE: [u64; 0] = [];

    fn kept(planted: Vec<Impostor>, recoveries: Vec<Recovered>, schedule: &[Fault]) -> Vec<u64> {
        let record = Record {
            planted,
            recoveries,
        };
        check(&record, schedule, 60_000)
            .iter()
            .inspect(|v| assert_eq!(v.check, Check::ImpostorKept))
            .map(|v| v.at_ms)
            .collect()
    }

    #[test]
    fn an_impostor_is_kept_if_adopted_or_not_stopped_within_its_grace_after_the_next_recovery() {
        // Recovered at 12 s, shown two processes: stopped by 14 s is in time.
        let recoveries = vec![recovered(2, 11_000, 1), recovered(1, 12_000, 2)];
        assert_eq!(
            kept(vec![planted(None, Some(14_000))], recoveries.clone(), &[]),
            NONE
        );
        assert_eq!(
            kept(vec![planted(None, Some(14_001))], recoveries.clone(), &[]),
            [14_000],
            "a millisecond late"
        );
        assert_eq!(
            kept(
                vec![planted(Some(12_000), Some(13_000))],
                recoveries.clone(),
                &[]
            ),
            [12_000],
            "adopted, even if it ended later"
        );
        assert_eq!(
            kept(vec![planted(None, None)], recoveries.clone(), &[]),
            [14_000],
            "never stopped"
        );
        // Ended before any recovery (a crash, the fence of strays): nothing to stop.
        assert_eq!(
            kept(vec![planted(None, Some(11_000))], recoveries, &[]),
            NONE
        );
        assert_eq!(
            kept(
                vec![planted(None, None)],
                vec![recovered(2, 11_000, 1)],
                &[]
            ),
            [60_000],
            "its agent never recovered, and it ran to the end"
        );
    }

    #[test]
    fn a_restart_before_the_deadline_hands_the_impostor_to_the_next_recovery() {
        let recoveries = vec![recovered(1, 12_000, 2), recovered(1, 20_000, 1)];
        // The agent restarts at 13 s, before its first recovery's deadline (14 s).
        let schedule = [restart(13_000, 1)];
        assert_eq!(
            kept(
                vec![planted(None, Some(21_000))],
                recoveries.clone(),
                &schedule
            ),
            NONE
        );
        assert_eq!(
            kept(
                vec![planted(None, Some(21_001))],
                recoveries.clone(),
                &schedule
            ),
            [21_000]
        );
        // Another host's restart does not.
        assert_eq!(
            kept(
                vec![planted(None, Some(21_000))],
                recoveries,
                &[restart(13_000, 2)]
            ),
            [14_000]
        );
    }

    /// One controller (host 0), one agent (host 1), two `named` copies, 90 s with a settle of
    /// 45 s, and the explicit schedule `events` (at ms, kind).
    fn run(events: &[(u64, &str)]) -> (SeedReport, Outcome) {
        let mut text = "seconds = 90\nsettle = 45\nseed = 5\n[cluster]\ncontrollers = 1\n\
                        agents = 1\n[[workload]]\nname = \"web\"\ncopies = 2\n"
            .to_owned();
        for (at_ms, kind) in events {
            text += &format!("[[event]]\nat_ms = {at_ms}\nkind = \"{kind}\"\nhost = 1\n");
        }
        let model = parse("impostors.toml", &text).unwrap();
        let seed = model.seed.unwrap();
        let f = |i: usize, r: &Role, now: u64| make(&model, Bugs::default(), seed, i, r, now);
        let (report, out) = run_checked(&model, seed, model.schedule.clone().unwrap(), &f, true);
        (report, out.expect("within the budget"))
    }

    /// The one impostor planted, stopped within a grace of its agent's first recovery after it,
    /// never adopted, and not among the copies' processes.
    fn assert_stopped(out: &Outcome) -> &Impostor {
        let [i] = out.impostors.planted.as_slice() else {
            panic!("one impostor: {:?}", out.impostors.planted);
        };
        let r = out
            .impostors
            .recoveries
            .iter()
            .find(|r| r.host == 1 && r.at_ms >= i.at_ms)
            .expect("the agent recovered");
        assert_eq!(i.adopted_ms, None);
        let end = i.end_ms.expect("stopped");
        assert!(
            end > r.at_ms && end <= r.at_ms + UNKNOWN_GRACE_MS,
            "{i:?} {r:?}"
        );
        assert!(i.start_ticks > u64::from(i.of_pid), "started later: {i:?}");
        assert!(
            !out.procs
                .iter()
                .any(|p| p.pid == i.pid && p.up_ms == Some(i.at_ms)),
            "kept apart from the copies"
        );
        i
    }

    #[test]
    fn a_process_at_a_dead_copys_reused_pid_is_stopped_by_the_restarted_agent_not_adopted() {
        // A crash ends one of node-1's copies; 10 ms later its agent restarts and a process
        // holds the dead copy's recorded pid.
        let (report, out) = run(&[(30_000, "crash"), (30_010, "pid-reuse")]);
        assert!(report.passed(), "{:?}", report.violations);
        let i = assert_stopped(&out);
        assert_eq!(i.kind, Kind::PidReuse);
        assert_eq!(i.pid, i.of_pid, "the recorded pid");
        let dead = out.procs.iter().find(|p| p.pid == i.pid).unwrap();
        assert!(
            dead.end_ms.is_some_and(|e| e <= i.at_ms),
            "the copy was dead"
        );
        assert!(
            out.trace
                .iter()
                .any(|l| l.contains(&format!("stops foreign proc {}", i.pid))),
            "stopped as foreign"
        );
    }

    #[test]
    fn a_reused_pid_of_a_copy_that_died_unseen_is_not_proven_by_its_pid_and_nonce_alone() {
        // The agent restarts at 30 s; a copy crashes before the new life recovers (at 30.008 s),
        // so its record still shows it running at its pid; the agent restarts again and a
        // process holds that pid, with the copy's nonce and a later start time.
        let (report, out) = run(&[
            (30_000, "restart"),
            (30_005, "crash"),
            (30_006, "pid-reuse"),
        ]);
        assert!(report.passed(), "{:?}", report.violations);
        let i = assert_stopped(&out);
        assert_eq!(i.pid, i.of_pid);
        assert!(
            !out.trace.iter().any(
                |l| l.contains("host 1 adopts proc") && l.contains(&format!("proc {} ", i.pid))
            ),
            "only the other copy is adopted"
        );
    }

    #[test]
    fn an_outliving_child_beside_its_live_copy_is_stopped_and_the_copy_adopted() {
        let (report, out) = run(&[(30_000, "impostor")]);
        assert!(report.passed(), "{:?}", report.violations);
        let i = assert_stopped(&out);
        assert_eq!(i.kind, Kind::Child);
        assert_ne!(i.pid, i.of_pid, "a pid of its own");
        let copy = out.procs.iter().find(|p| p.pid == i.of_pid).unwrap();
        assert!(copy.adopted && copy.end_ms.is_none(), "{copy:?}");
    }

    #[test]
    fn a_dead_copys_child_is_stopped_and_the_copy_started_again() {
        let (report, out) = run(&[(30_000, "crash"), (30_010, "impostor")]);
        assert!(report.passed(), "{:?}", report.violations);
        assert_stopped(&out);
    }

    #[test]
    fn the_shipped_model_plants_the_same_impostors_byte_for_byte_from_the_same_seed() {
        let path = crate::faults::shipped("")
            .into_iter()
            .find(|p| p.ends_with("impostors.toml"))
            .unwrap();
        let model = crate::faults::load(&path).unwrap();
        let once = || {
            let f = |i: usize, r: &Role, now: u64| make(&model, Bugs::default(), 21, i, r, now);
            let (report, out) = run_checked(&model, 21, model.schedule(21), &f, true);
            let out = out.unwrap();
            assert!(report.passed(), "{:?}", report.violations);
            (out.trace, out.impostors)
        };
        let (trace, impostors) = once();
        assert!(
            impostors.planted.iter().any(|i| i.kind == Kind::PidReuse)
                && impostors.planted.iter().any(|i| i.kind == Kind::Child),
            "seed 21 plants both kinds: {:?}",
            impostors.planted
        );
        assert_eq!((trace, impostors), once());
    }

    #[test]
    fn with_no_record_to_imitate_the_fault_is_a_plain_restart() {
        // At 0 ms no state file has been written yet.
        let (report, out) = run(&[(0, "pid-reuse"), (0, "impostor")]);
        assert!(report.passed(), "{:?}", report.violations);
        assert_eq!(out.impostors.planted, []);
        assert_eq!(
            out.trace
                .iter()
                .filter(|l| l.contains("no record for"))
                .count(),
            2
        );
    }
}
