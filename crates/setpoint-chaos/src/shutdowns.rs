//! Graceful stops: the `shutdown` fault, what the world saw of each, and its two checks.
//!
//! An operator stops a host's service as `systemctl stop` does: SIGTERM to the agent (or the
//! controller), which the world hands its machine as [`Input::Shutdown`](crate::Input). The
//! agent stops its copies (SIGTERM, SIGKILL after each one's grace), writes its last report
//! and gives its node lease up (`AgentCore`'s drain, in `setpoint_runtime::agent::core`); a
//! controller gives `/leader` up. Its machine then says [`Output::Stopped`](crate::Output), and
//! the world steps it no more. When the fault's time is over the operator starts the service
//! again: a fresh machine, which recovers from the node's state file and process table as after
//! a restart. A machine that has not stopped by then is waited for, as `systemctl stop`
//! waits, up to [`STOP_TIMEOUT_MS`] from the request; then it is killed and started again, as
//! systemd kills a service that outlives its stop timeout.
//!
//! What must hold (`docs/runtime.md`, "Ctrl-C / SIGTERM": after a clean stop, nothing runs):
//! - **`left-running`**: when an agent says it has stopped after a shutdown, no process of its
//!   node runs: not its copies, not one it adopted, not one an earlier life of it left that it
//!   had not recovered yet (the impostors of [`crate::impostors`] are judged there, not here);
//! - **`stop-timeout`**: a machine asked to shut down stops within [`STOP_TIMEOUT_MS`].
//!
//! The rest is the other checks' business: no copy runs twice while the controller replaces
//! the stopped node's copies elsewhere (`double-run`), none that was needed is deleted
//! (`needed-delete`), and everything converges after the restart (`not-converged`).
//!
//! A crash of the machine (a `restart`, `lose-state`, `pid-reuse` or `impostor` fault) while it
//! drains interrupts the shutdown: the new life runs, and the shutdown's end starts it again.
//! Such a fault on a host a shutdown has stopped strikes nothing: no agent process runs there.

use std::collections::BTreeMap;

use crate::check::{Check, Violation};

/// How long the world waits for a machine asked to shut down before it kills it, milliseconds
/// (systemd's default `TimeoutStopSec`, 90 s).
pub const STOP_TIMEOUT_MS: u64 = 90_000;

/// One shutdown, as the world saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stop {
    /// The host asked to stop.
    pub host: usize,
    /// When it was asked, milliseconds of virtual time.
    pub asked_ms: u64,
    /// How it ended; `None` if the run ended first.
    pub ending: Option<Ending>,
}

/// How a shutdown ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The machine said it had stopped, at `at_ms`, with these processes of its node still
    /// running (pid, copy).
    Stopped {
        /// When.
        at_ms: u64,
        /// What still ran.
        left: Vec<(u32, String)>,
    },
    /// It had not stopped [`STOP_TIMEOUT_MS`] after it was asked: killed at `at_ms`.
    Killed {
        /// When.
        at_ms: u64,
    },
    /// A crash and restart of the machine (another fault) cut it short at `at_ms`.
    Interrupted {
        /// When.
        at_ms: u64,
    },
}

/// Every shutdown of a run, in the order asked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The shutdowns.
    pub stops: Vec<Stop>,
}

/// What the world should do when a shutdown's time is over or its machine stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Nothing: not this shutdown's (it was cut short, or is over), or not yet.
    Nothing,
    /// Start the machine again.
    Restart,
    /// Kill the machine, then start it again.
    KillAndRestart,
    /// Wait until the machine stops, or until this time (virtual), whichever is first.
    WaitUntil(u64),
}

/// A shutdown under way on one host.
#[derive(Clone, Copy, Debug)]
struct Open {
    /// Its index in [`Record::stops`].
    stop: usize,
    /// The fault that asked for it, by index in the schedule.
    fault: usize,
    /// Its time is over: start the machine again as soon as it stops.
    over: bool,
}

/// The world's book of shutdowns: those under way, by host, and the record.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    record: Record,
    open: BTreeMap<usize, Open>,
}

impl Tracker {
    /// Fault `fault` asks `host` to stop at `now`; false if a shutdown is already under way
    /// there (the service is stopping or stopped: a second `systemctl stop` does nothing).
    pub(crate) fn ask(&mut self, host: usize, fault: usize, now: u64) -> bool {
        if self.open.contains_key(&host) {
            return false;
        }
        self.open.insert(
            host,
            Open {
                stop: self.record.stops.len(),
                fault,
                over: false,
            },
        );
        self.record.stops.push(Stop {
            host,
            asked_ms: now,
            ending: None,
        });
        true
    }

    /// `host`'s machine said it has stopped at `now`, leaving `left` running: the fault to end
    /// at once, if its time is over.
    pub(crate) fn stopped(
        &mut self,
        host: usize,
        now: u64,
        left: Vec<(u32, String)>,
    ) -> Option<usize> {
        let open = self.open.get(&host)?;
        let stop = &mut self.record.stops[open.stop];
        if stop.ending.is_none() {
            stop.ending = Some(Ending::Stopped { at_ms: now, left });
        }
        open.over.then_some(open.fault)
    }

    /// Fault `fault`'s time is over at `now` (or its stop timeout, or its machine stopped after
    /// it): what to do with `host`, whose machine has `stopped` or not.
    pub(crate) fn over(&mut self, host: usize, fault: usize, now: u64, stopped: bool) -> Next {
        let Some(open) = self.open.get_mut(&host).filter(|o| o.fault == fault) else {
            return Next::Nothing;
        };
        open.over = true;
        let stop = &mut self.record.stops[open.stop];
        let deadline = stop.asked_ms + STOP_TIMEOUT_MS;
        if stopped {
            self.open.remove(&host);
            Next::Restart
        } else if now >= deadline {
            stop.ending = Some(Ending::Killed { at_ms: now });
            self.open.remove(&host);
            Next::KillAndRestart
        } else {
            Next::WaitUntil(deadline)
        }
    }

    /// A fault restarts `host`'s machine at `now`: false if a shutdown has stopped it (no
    /// process to crash: the fault strikes nothing); a shutdown still draining is cut short.
    pub(crate) fn crash(&mut self, host: usize, now: u64, stopped: bool) -> bool {
        let Some(open) = self.open.get(&host).copied() else {
            return true;
        };
        if stopped {
            return false;
        }
        self.record.stops[open.stop].ending = Some(Ending::Interrupted { at_ms: now });
        self.open.remove(&host);
        true
    }

    /// The record, at the run's end.
    pub(crate) fn into_record(self) -> Record {
        self.record
    }
}

/// The checks `left-running` and `stop-timeout` of a run's shutdowns; `node` names a host's
/// node (an agent's), or `None` for a controller.
pub fn check(record: &Record, node: &dyn Fn(usize) -> Option<String>) -> Vec<Violation> {
    let mut v = Vec::new();
    for s in &record.stops {
        let who = match node(s.host) {
            Some(n) => format!("agent host {} ({n})", s.host),
            None => format!("controller host {}", s.host),
        };
        match &s.ending {
            Some(Ending::Stopped { at_ms, left }) if !left.is_empty() => {
                let list: Vec<String> = left
                    .iter()
                    .map(|(pid, copy)| format!("pid {pid} ({copy})"))
                    .collect();
                v.push(Violation {
                    check: Check::LeftRunning,
                    at_ms: *at_ms,
                    detail: format!(
                        "{who} stopped at {at_ms} ms, {} ms after a shutdown asked it to, with {} \
                         still running",
                        at_ms - s.asked_ms,
                        list.join(", ")
                    ),
                });
            }
            Some(Ending::Killed { at_ms }) => v.push(Violation {
                check: Check::StopTimeout,
                at_ms: *at_ms,
                detail: format!(
                    "{who}, asked to shut down at {} ms, had not stopped {} ms later: killed",
                    s.asked_ms, STOP_TIMEOUT_MS
                ),
            }),
            _ => {}
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapt::{make, Bugs};
    use crate::faults::{parse, Model};
    use crate::machine::{Input, Machine, Output, Role};
    use crate::restarts::run_with;
    use crate::runner::{run_checked, SeedReport};

    /// One controller (host 0), two agents (hosts 1 and 2), four `named` copies whose processes
    /// take 1.5 s to exit after SIGTERM, a grace of 3 s; 120 s with a settle of 40 s, and the
    /// explicit schedule `events`.
    fn model(events: &str) -> Model {
        let text = format!(
            "seconds = 120\nsettle = 40\nseed = 5\n[cluster]\ncontrollers = 1\nagents = 2\n\
             [process]\nterm_exit_ms = 1500\n\
             [[workload]]\nname = \"web\"\ncontroller = \"named\"\ncopies = 4\n{events}"
        );
        parse("shutdowns.toml", &text).unwrap()
    }

    fn shutdown(at_ms: u64, host: usize, duration_ms: u64) -> String {
        format!(
            "[[event]]\nat_ms = {at_ms}\nkind = \"shutdown\"\nhost = {host}\nduration_ms = {duration_ms}\n"
        )
    }

    fn checks(r: &SeedReport) -> Vec<Check> {
        r.violations.iter().map(|v| v.check).collect()
    }

    #[test]
    fn a_stopped_agent_ends_its_copies_first_and_is_started_again_when_the_fault_ends() {
        let m = model(&shutdown(30_000, 1, 20_000));
        let (report, out) = run_with(&m, |a| a);
        assert!(report.passed(), "{:?}", report.violations);
        let before: Vec<_> = out
            .procs
            .iter()
            .filter(|p| p.node == "node-1" && p.up_ms.is_some_and(|u| u < 30_000))
            .collect();
        assert!(!before.is_empty(), "node-1 ran copies before the stop");
        let [stop] = &out.shutdowns.stops[..] else {
            panic!("{:?}", out.shutdowns)
        };
        let Some(Ending::Stopped { at_ms, left }) = &stop.ending else {
            panic!("{stop:?}")
        };
        assert!(left.is_empty(), "{left:?}");
        for p in &before {
            let end = p.end_ms.expect("stopped");
            // SIGTERM at the request, exited 1.5 s later, within the 3 s grace.
            assert_eq!(end, 31_500, "{} (pid {})", p.copy, p.pid);
            assert!(end <= *at_ms);
        }
        // Then the last report, and the lease given up: within a few round trips.
        assert!((31_500..31_600).contains(at_ms), "{at_ms}");
        let said = |what: &str| {
            out.trace
                .iter()
                .any(|l| l.contains("host 1") && l.contains(what))
        };
        assert!(said("shutting down: stopping copies"));
        assert!(said("is started again"));
        // Its copies were placed elsewhere at once (the node was given up, not lost), and the
        // agent started again claimed its node: it runs what it is given later.
        let node_2: Vec<_> = out
            .procs
            .iter()
            .filter(|p| p.node == "node-2" && p.end_ms.is_none())
            .collect();
        assert_eq!(node_2.len(), 4, "{node_2:?}");
        assert!(out
            .trace
            .iter()
            .any(|l| l.starts_with("    50000 ") && l.contains("fault end Shutdown host 1")));
    }

    /// An agent cut off from its start, still trying its first claim, is stopped: nothing of an
    /// earlier life runs on its node, the world answers the stray round with none, and the agent
    /// stops at once rather than after the 10 s grace (finding 18's cost).
    #[test]
    fn an_agent_stopped_before_its_first_claim_with_nothing_left_running_stops_at_once() {
        let events = format!(
            "[[event]]\nat_ms = 0\nkind = \"partition\"\nhost = 1\nduration_ms = 60000\n{}",
            shutdown(5_000, 1, 20_000)
        );
        let m = model(&events);
        let (report, out) = run_with(&m, |a| a);
        assert!(report.passed(), "{:?}", report.violations);
        let [stop] = &out.shutdowns.stops[..] else {
            panic!("{:?}", out.shutdowns)
        };
        let Some(Ending::Stopped { at_ms, left }) = &stop.ending else {
            panic!("{stop:?}")
        };
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(*at_ms, 5_000, "{stop:?}");
        assert!(
            out.trace
                .iter()
                .any(|l| l.contains("host 1")
                    && l.contains("shutting down before its state was read"))
        );
    }

    /// An agent that says it has stopped as soon as it is asked to, its copies left running.
    struct Abandons(Box<dyn Machine>);

    impl Machine for Abandons {
        fn step(&mut self, now_ms: u64, input: Input) -> Vec<Output> {
            match input {
                Input::Shutdown => vec![Output::Stopped],
                other => self.0.step(now_ms, other),
            }
        }
    }

    /// An agent deaf to the operator's stop.
    struct Deaf(Box<dyn Machine>);

    impl Machine for Deaf {
        fn step(&mut self, now_ms: u64, input: Input) -> Vec<Output> {
            match input {
                Input::Shutdown => self.0.step(now_ms, Input::Tick),
                other => self.0.step(now_ms, other),
            }
        }
    }

    #[test]
    fn the_checker_sees_an_agent_that_stops_before_its_copies_and_one_that_never_stops() {
        let m = model(&shutdown(30_000, 1, 20_000));
        let (report, out) = run_with(&m, |a| Box::new(Abandons(a)));
        assert!(checks(&report).contains(&Check::LeftRunning), "{report:?}");
        let v = report
            .violations
            .iter()
            .find(|v| v.check == Check::LeftRunning)
            .unwrap();
        assert_eq!(v.at_ms, 30_000);
        assert!(
            v.detail
                .starts_with("agent host 1 (node-1) stopped at 30000 ms, 0 ms after a shutdown asked it to, with pid "),
            "{}",
            v.detail
        );
        assert!(out
            .trace
            .iter()
            .any(|l| l.contains("host 1 is started again")));
        // A 60 s stop of a deaf agent: waited for past the fault's end, killed 90 s after the
        // request.
        let m = model(&shutdown(10_000, 1, 60_000));
        let (report, _) = run_with(&m, |a| Box::new(Deaf(a)));
        let v: Vec<_> = report
            .violations
            .iter()
            .filter(|v| v.check == Check::StopTimeout)
            .collect();
        assert_eq!(v.len(), 1, "{report:?}");
        assert_eq!(v[0].at_ms, 100_000);
        assert_eq!(
            v[0].detail,
            "agent host 1 (node-1), asked to shut down at 10000 ms, had not stopped 90000 ms later: killed"
        );
    }

    #[test]
    fn a_crash_while_stopping_cuts_the_stop_short_and_one_while_stopped_strikes_nothing() {
        let restart =
            |at_ms: u64| format!("[[event]]\nat_ms = {at_ms}\nkind = \"restart\"\nhost = 1\n");
        // Crashed 1 s into its stop (its copies still exiting), and started again by the
        // crash's restart: the new life adopts what runs, or finds it ended.
        let m = model(&(shutdown(30_000, 1, 20_000) + &restart(31_000)));
        let (report, out) = run_with(&m, |a| a);
        assert!(report.passed(), "{:?}", report.violations);
        assert_eq!(
            out.shutdowns.stops[0].ending,
            Some(Ending::Interrupted { at_ms: 31_000 })
        );
        // Crashed while stopped: nothing happens; started at the stop's end.
        let m = model(&(shutdown(30_000, 1, 20_000) + &restart(40_000)));
        let (report, out) = run_with(&m, |a| a);
        assert!(report.passed(), "{:?}", report.violations);
        assert!(matches!(
            out.shutdowns.stops[0].ending,
            Some(Ending::Stopped { .. })
        ));
        assert!(out
            .trace
            .iter()
            .any(|l| l.contains("host 1 is shut down: nothing to restart")));
    }

    #[test]
    fn a_second_stop_of_a_stopping_host_does_nothing_and_a_late_stop_restarts_at_once() {
        let mut t = Tracker::default();
        assert!(t.ask(1, 0, 100));
        assert!(!t.ask(1, 1, 200), "already stopping");
        assert_eq!(t.over(1, 1, 300, false), Next::Nothing, "not fault 1's");
        assert_eq!(t.over(1, 0, 300, false), Next::WaitUntil(90_100));
        // It stops after its time is over: the world ends fault 0 again, at once.
        assert_eq!(t.stopped(1, 400, vec![]), Some(0));
        assert_eq!(t.over(1, 0, 400, true), Next::Restart);
        // The timeout's own end comes later and finds nothing to do.
        assert_eq!(t.over(1, 0, 90_100, true), Next::Nothing);
        assert!(t.ask(1, 2, 500), "a new stop once started again");
        assert_eq!(t.over(1, 2, 90_500, false), Next::KillAndRestart);
        let r = t.into_record();
        assert_eq!(
            r.stops.iter().map(|s| s.ending.clone()).collect::<Vec<_>>(),
            [
                Some(Ending::Stopped {
                    at_ms: 400,
                    left: vec![]
                }),
                Some(Ending::Killed { at_ms: 90_500 })
            ]
        );
    }

    #[test]
    fn the_shipped_model_gives_the_same_run_byte_for_byte() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../scenarios/chaos/agent-shutdowns.toml");
        let m = crate::faults::load(&path).unwrap();
        for seed in [1, 2] {
            let f = |i: usize, r: &Role, now: u64| make(&m, Bugs::default(), seed, i, r, now);
            let a = run_checked(&m, seed, m.schedule(seed), &f, true);
            let b = run_checked(&m, seed, m.schedule(seed), &f, true);
            let (ta, tb) = (&a.1.as_ref().unwrap().trace, &b.1.as_ref().unwrap().trace);
            assert!(
                ta.iter().filter(|l| l.contains("is started again")).count() >= 5,
                "seed {seed}: the stops happen and end"
            );
            assert_eq!(ta, tb, "seed {seed}");
            assert_eq!(a.0, b.0);
            assert!(a.0.passed(), "seed {seed}: {:?}", a.0.violations);
        }
    }
}
