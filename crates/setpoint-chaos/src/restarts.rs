//! Agent restarts with adoption: a restarted agent recovers from its node's state file and
//! live processes ([`crate::node`]) and adopts its copies, or stops what it cannot prove its own.

use crate::adapt::{make, Bugs};
use crate::faults::{parse, Model};
use crate::machine::{Input, Machine, Output, Role};
use crate::runner::{run_checked, SeedReport};
use crate::world::{Outcome, ProcRecord};

/// One controller (host 0), two agents (hosts 1 and 2: node-1, node-2), four `named` copies,
/// 120 s with a settle of 60 s, and the explicit schedule `events`.
fn model(events: &str) -> Model {
    let text = format!(
        r#"seconds = 120
settle = 60
seed = 3
[cluster]
controllers = 1
agents = 2
[[workload]]
name = "web"
controller = "named"
copies = 4
{events}"#
    );
    parse("restarts.toml", &text).unwrap()
}

fn event(at_ms: u64, kind: &str, host: usize, duration_ms: u64) -> String {
    format!(
        "[[event]]\nat_ms = {at_ms}\nkind = \"{kind}\"\nhost = {host}\nduration_ms = {duration_ms}\n"
    )
}

/// Runs the model's own schedule with the runtime's machines, each agent's passed through
/// `wrap`, and a trace (also for [`crate::shutdowns`]' tests).
pub(crate) fn run_with(
    model: &Model,
    wrap: fn(Box<dyn Machine>) -> Box<dyn Machine>,
) -> (SeedReport, Outcome) {
    let seed = model.seed.unwrap();
    let f = |i: usize, r: &Role, now: u64| {
        let m = make(model, Bugs::default(), seed, i, r, now);
        match r {
            Role::Agent(_) => wrap(m),
            Role::Controller => m,
        }
    };
    let (report, out) = run_checked(model, seed, model.schedule.clone().unwrap(), &f, true);
    (report, out.expect("the run stays within its budget"))
}

fn node_procs<'a>(out: &'a Outcome, node: &str) -> Vec<&'a ProcRecord> {
    out.procs.iter().filter(|p| p.node == node).collect()
}

/// The processes of `node` that were up at `at_ms`.
fn up_at<'a>(out: &'a Outcome, node: &str, at_ms: u64) -> Vec<&'a ProcRecord> {
    node_procs(out, node)
        .into_iter()
        .filter(|p| p.up_ms.is_some_and(|u| u <= at_ms) && p.end_ms.is_none_or(|e| e > at_ms))
        .collect()
}

fn assert_double_run(report: &SeedReport) {
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.check == crate::check::Check::DoubleRun),
        "{:?}",
        report.violations
    );
}

/// Every copy of node-1 up just before `restart_ms` kept running, adopted, and nothing started
/// again there.
fn assert_adopted_in_place(out: &Outcome, restart_ms: u64) {
    let before = up_at(out, "node-1", restart_ms - 1);
    assert!(!before.is_empty(), "node-1 ran copies before the restart");
    for p in &before {
        assert_eq!(p.end_ms, None, "{} (pid {}) kept running", p.copy, p.pid);
        assert!(p.adopted, "{} (pid {}) was adopted", p.copy, p.pid);
    }
    let all = node_procs(out, "node-1");
    assert_eq!(all.len(), before.len(), "nothing started again: {all:?}");
}

#[test]
fn an_agent_restarted_while_its_copies_run_adopts_them_and_they_keep_their_pids() {
    let m = model(&event(30_000, "restart", 1, 0));
    let (report, out) = run_with(&m, |a| a);
    assert!(report.passed(), "{:?}", report.violations);
    assert_adopted_in_place(&out, 30_000);
    let before = up_at(&out, "node-1", 29_999);
    let adopted = out
        .trace
        .iter()
        .filter(|l| l.contains("adopts proc"))
        .count();
    assert_eq!(adopted, before.len(), "one adoption per copy");
}

#[test]
fn an_agent_restarted_while_its_link_stalls_adopts_its_copies_once_the_stall_ends() {
    // The link stalls from 20 s for 3 s (held, not lost: within the 5 s request deadline) and
    // the agent restarts at 21 s: its claim goes out when the stall ends.
    let m = model(&(event(20_000, "stall", 1, 3_000) + &event(21_000, "restart", 1, 0)));
    let (report, out) = run_with(&m, |a| a);
    assert!(report.passed(), "{:?}", report.violations);
    assert_adopted_in_place(&out, 20_000);
}

#[test]
fn an_agent_restarted_while_cut_off_retries_its_first_claim_and_adopts_its_copies() {
    // Finding 4 (fixed): the first claim of a restarted agent fails on the lost request (its
    // deadline passes). It used to stop there, as `setpoint agent` exited when the store could
    // not be reached, leaving the copies of its earlier life unwatched; now it retries, and
    // adopts them once the cut heals.
    let m = model(&(event(20_000, "partition", 1, 4_000) + &event(21_000, "restart", 1, 0)));
    let (report, out) = run_with(&m, |a| a);
    assert!(
        out.trace
            .iter()
            .any(|l| l.contains("host 1:") && l.contains("cannot claim the node yet")),
        "the restarted agent says it retries its first claim"
    );
    assert!(
        !out.trace.iter().any(|l| l.contains("host 1: stopped:")),
        "the restarted agent does not stop"
    );
    assert!(report.passed(), "{:?}", report.violations);
}

/// An agent that never stops what an earlier agent of its node left running: the first-claim
/// fence removed.
struct NoStrayFence(Box<dyn Machine>);

impl Machine for NoStrayFence {
    fn step(&mut self, now_ms: u64, input: Input) -> Vec<Output> {
        let mut out = self.0.step(now_ms, input);
        out.retain(|o| !matches!(o, Output::StopStrays { .. }));
        out
    }
}

/// An agent whose lease file is never written: a restarted one knows nothing of its earlier
/// life's lease.
struct NoLeaseFile(Box<dyn Machine>);

impl Machine for NoLeaseFile {
    fn step(&mut self, now_ms: u64, input: Input) -> Vec<Output> {
        let mut out = self.0.step(now_ms, input);
        out.retain(|o| !matches!(o, Output::LeaseKept { .. }));
        out
    }
}

#[test]
fn an_agent_restarted_inside_a_partition_longer_than_its_lease_stops_its_earlier_copies_in_time() {
    // Issue 22, item 1: cut off from 20 s for 15 s, restarted at 21 s. Its earlier life's lease
    // was last renewed before the cut, so the store ends it 10 s (the node lease) after that
    // renewal, before 30 s, and the names may then be given elsewhere. The restarted agent
    // cannot claim, so it stops them by the fence's deadlines from that renewal, which its
    // earlier life wrote down in its lease file: SIGTERM at 3/4 TTL, SIGKILL at 9/10, both
    // before the store's expiry.
    let m = model(&(event(20_000, "partition", 1, 15_000) + &event(21_000, "restart", 1, 0)));
    let (report, out) = run_with(&m, |a| a);
    assert!(report.passed(), "{:?}", report.violations);
    let expiry = out
        .cut_leases
        .iter()
        .find(|c| c.fault == 0 && c.host == 1)
        .expect("the cut's lease")
        .expires_ms;
    assert!((20_000..=30_000).contains(&expiry), "{expiry}");
    let before = up_at(&out, "node-1", 20_999);
    assert!(!before.is_empty(), "node-1 ran copies before the cut");
    for p in &before {
        let end = p.end_ms.unwrap_or(u64::MAX);
        assert!(
            (expiry - 2_500..expiry).contains(&end),
            "{} (pid {}) ended at {end}, the lease at {expiry}",
            p.copy,
            p.pid
        );
    }
    assert!(out
        .trace
        .iter()
        .any(|l| l.contains("host 1:") && l.contains("an earlier agent's may end soon")));
    // Without its lease file the restarted agent assumes the worst a living earlier agent
    // left, a lease renewed 3/4 TTL before the restart: the copies stop a tenth and 3/20 of
    // the TTL after it (22 s and 22.5 s), in time too, but 3 s sooner, leaving the claim one
    // second where the file leaves it four.
    let (report, out) = run_with(&m, |a| Box::new(NoLeaseFile(a)));
    assert!(report.passed(), "{:?}", report.violations);
    for p in &before {
        let end = out
            .procs
            .iter()
            .find(|q| q.pid == p.pid)
            .and_then(|q| q.end_ms);
        assert!(
            end.is_some_and(|e| (22_000..=22_500).contains(&e)),
            "{end:?}"
        );
    }
    // Without the first claim's fence they run on, unwatched, past the lease's end.
    let (_, out) = run_with(&m, |a| Box::new(NoStrayFence(a)));
    let past_lease = up_at(&out, "node-1", 31_000);
    assert!(
        before
            .iter()
            .all(|b| past_lease.iter().any(|p| p.pid == b.pid)),
        "{past_lease:?}"
    );
}

/// An agent whose state file and lease file are never written: as if its state directory
/// were lost before a restart.
struct NoDisk(Box<dyn Machine>);

impl Machine for NoDisk {
    fn step(&mut self, now_ms: u64, input: Input) -> Vec<Output> {
        let mut out = self.0.step(now_ms, input);
        out.retain(|o| !matches!(o, Output::SaveState(_) | Output::LeaseKept { .. }));
        out
    }
}

#[test]
fn an_agent_restarted_without_its_state_file_stops_the_copies_it_cannot_prove_and_starts_them_anew()
{
    let m = model(&event(30_000, "restart", 1, 0));
    let (report, out) = run_with(&m, |a| Box::new(NoDisk(a)));
    assert!(report.passed(), "{:?}", report.violations);
    let before = up_at(&out, "node-1", 29_999);
    assert!(!before.is_empty());
    for p in &before {
        assert!(
            !p.adopted,
            "{} (pid {}) is not proven its own",
            p.copy, p.pid
        );
        let end = p
            .end_ms
            .expect("a process it cannot prove its own is stopped");
        assert!(end > 30_000, "{} ended at {end}", p.copy);
    }
    let after = up_at(&out, "node-1", 119_000);
    let mut a: Vec<&str> = after.iter().map(|p| p.copy.as_str()).collect();
    let mut b: Vec<&str> = before.iter().map(|p| p.copy.as_str()).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b, "the same copies run again, as new processes");
    assert!(after.iter().all(|p| p.up_ms.unwrap() > 30_000));
    assert!(out.trace.iter().any(|l| l.contains("stops foreign proc")));
}

#[test]
fn without_adoption_a_restarted_agent_leaves_its_copies_running_unwatched_and_the_checks_see_it() {
    // The checker is checked: an agent that recovers nothing (as the adapter answered before
    // the world kept a disk and a process table) starts a second process of each copy.
    struct Amnesia(Box<dyn Machine>);
    impl Machine for Amnesia {
        fn step(&mut self, now_ms: u64, input: Input) -> Vec<Output> {
            let input = match input {
                Input::Recovered(_) => Input::Recovered(Default::default()),
                other => other,
            };
            self.0.step(now_ms, input)
        }
    }
    let m = model(&event(30_000, "restart", 1, 0));
    let (report, _) = run_with(&m, |a| Box::new(Amnesia(a)));
    assert_double_run(&report);
}
