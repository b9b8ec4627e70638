//! The store's own faults in the world: a hung member (`hang`: one host's requests are never
//! answered and its watch streams go silent, unbroken) and a quorum loss (`quorum-loss`: no
//! request of any host is served, no lease expires, and every lease is reset when it ends).

use crate::adapt::{make, Bugs};
use crate::faults::{parse, Model};
use crate::machine::Role;
use crate::runner::{run_checked, SeedReport};
use crate::world::Outcome;

/// One controller (host 0), two agents (hosts 1 and 2), four `named` copies, 120 s, and the
/// explicit schedule `events`.
fn model(events: &str) -> Model {
    let text = format!(
        "seconds = 120\nsettle = 60\nseed = 5\n[cluster]\ncontrollers = 1\nagents = 2\n\
         [[workload]]\nname = \"web\"\ncontroller = \"named\"\ncopies = 4\n{events}"
    );
    parse("store-faults.toml", &text).unwrap()
}

fn event(at_ms: u64, kind: &str, host: usize, duration_ms: u64) -> String {
    format!(
        "[[event]]\nat_ms = {at_ms}\nkind = \"{kind}\"\nhost = {host}\nduration_ms = {duration_ms}\n"
    )
}

fn run_traced(model: &Model) -> (SeedReport, Outcome) {
    let seed = model.seed.unwrap();
    let f = |i: usize, r: &Role, now: u64| make(model, Bugs::default(), seed, i, r, now);
    let (report, out) = run_checked(model, seed, model.schedule.clone().unwrap(), &f, true);
    (report, out.expect("the run stays within its budget"))
}

/// The trace lines from `from` to before `to` (milliseconds) that contain `text`.
fn lines<'a>(out: &'a Outcome, from: u64, to: u64, text: &str) -> Vec<&'a str> {
    out.trace
        .iter()
        .filter(|l| {
            let at: u64 = l.split_whitespace().next().unwrap().parse().unwrap();
            (from..to).contains(&at) && l.contains(text)
        })
        .map(String::as_str)
        .collect()
}

/// Both agents (hosts 1 and 2) were cut off at `cut_ms` with their leases, and every copy of
/// theirs up before then ended before its node's lease ended at the store.
fn both_agents_fenced_within_their_leases(out: &Outcome, cut_ms: u64) {
    assert_eq!(
        out.cut_leases.iter().map(|c| c.host).collect::<Vec<_>>(),
        [1, 2]
    );
    for c in &out.cut_leases {
        let late = out.procs.iter().find(|p| {
            p.host == c.host
                && p.up_ms.is_some_and(|u| u < cut_ms)
                && p.end_ms.is_none_or(|e| e > c.expires_ms)
        });
        assert!(late.is_none(), "{late:?}");
    }
}

#[test]
fn a_hung_member_answers_nothing_and_breaks_no_watch_and_its_agent_still_fences_in_time() {
    // Host 1's member hangs for 3 s (within the lease), then for 15 s (past it).
    let m = model(&(event(20_000, "hang", 1, 3_000) + &event(40_000, "hang", 1, 15_000)));
    let (report, out) = run_traced(&m);
    for (from, to) in [(20_000, 23_000), (40_000, 55_000)] {
        assert!(lines(&out, from, to, "serves host 1 ").is_empty());
        assert!(!lines(&out, from, to, "serves host 2 ").is_empty());
        assert!(!lines(&out, from, to, "leaves host 1 request").is_empty());
    }
    assert!(
        lines(&out, 0, 120_000, "watch stream broke").is_empty(),
        "a hung member never tells the client"
    );
    // Past its lease the agent cannot renew: it fences its copies before the lease ends at the
    // store, and the run converges after.
    let fenced = out
        .procs
        .iter()
        .filter(|p| p.host == 1 && p.end_ms.is_some_and(|e| (40_000..55_000).contains(&e)))
        .count();
    assert!(fenced > 0, "{:?}", out.procs);
    assert_eq!(out.cut_leases.len(), 2, "{:?}", out.cut_leases);
    assert!(report.passed(), "{:?}", report.violations);
}

#[test]
fn a_quorum_loss_serves_no_one_expires_no_lease_and_resets_every_lease_after() {
    let m = model(&event(30_000, "quorum-loss", 0, 15_000));
    let (report, out) = run_traced(&m);
    assert!(lines(&out, 30_000, 45_000, "store serves").is_empty());
    assert!(!lines(&out, 30_000, 45_000, "unanswered").is_empty());
    assert!(!lines(&out, 45_000, 60_000, "store serves").is_empty());
    // Both agents were cut off with their leases, and both fenced within them: every copy up
    // before the loss ended before its node's lease ended at the store.
    both_agents_fenced_within_their_leases(&out, 30_000);
    for c in &out.cut_leases {
        assert!(c.expires_ms <= 40_000, "{c:?}");
    }
    // No lease expired meanwhile: the controller's leader key was never revoked, so no
    // election followed the loss (the same host leads before and after).
    assert!(lines(&out, 30_000, 45_000, "commit /leader").is_empty());
    assert!(report.passed(), "{:?}", report.violations);
}

#[test]
fn a_store_that_refuses_answers_every_request_at_once_breaks_every_watch_and_resets_leases() {
    let m = model(&event(30_000, "refuse", 0, 15_000));
    let (report, out) = run_traced(&m);
    assert!(lines(&out, 30_000, 45_000, "store serves").is_empty());
    assert!(lines(&out, 30_000, 45_000, "unanswered").is_empty());
    // Every host hears at once: a refusal for each host, the first within a network round
    // trip of its first request after the store went down.
    for host in 0..3 {
        let refused = lines(&out, 30_000, 45_000, &format!("store refuses host {host} "));
        assert!(!refused.is_empty(), "host {host}");
    }
    // Every watch open when it went down broke (the controller's and both agents').
    let broke = lines(&out, 30_000, 30_001, "watch");
    for host in 0..3 {
        let of_host = format!("host {host}'s watch");
        assert!(broke.iter().any(|l| l.contains(&of_host)), "{broke:?}");
    }
    assert!(!lines(&out, 45_000, 60_000, "store serves").is_empty());
    // Cut off with their leases, the agents fenced within them; no lease expired while the
    // store was down (so no election after it: no write of /leader).
    both_agents_fenced_within_their_leases(&out, 30_000);
    assert!(lines(&out, 30_000, 45_000, "commit /leader").is_empty());
    assert!(report.passed(), "{:?}", report.violations);
}

#[test]
fn the_same_seed_gives_the_same_run_byte_for_byte_with_every_new_fault_and_option() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../scenarios/chaos/restarts-during-partitions.toml"),
    )
    .unwrap();
    // Shortened, with every new kind and option in play.
    let text = text.replace("seconds = 600\nsettle = 120", "seconds = 120\nsettle = 40")
        + "\n[[fault]]\nkind = \"hang\"\ncount = 2\nmin_ms = 500\nmax_ms = 12000\n"
        + "\n[[fault]]\nkind = \"refuse\"\ncount = 1\nmin_ms = 500\nmax_ms = 12000\n";
    let text = format!("swarm = true\n{text}").replace(
        "skew_max_ms = 250",
        "skew_max_ms = 250\ndrift_max_ppm = 50000",
    );
    let m = parse("d.toml", &text).unwrap();
    for seed in [3, 8] {
        let f = |i: usize, r: &Role, now: u64| make(&m, Bugs::default(), seed, i, r, now);
        let a = run_checked(&m, seed, m.schedule(seed), &f, true);
        let b = run_checked(&m, seed, m.schedule(seed), &f, true);
        let (ta, tb) = (&a.1.as_ref().unwrap().trace, &b.1.as_ref().unwrap().trace);
        // A run that did things (idle rounds write nothing, so the trace is shorter than when
        // every round was written: 485 lines for seed 3).
        assert!(ta.len() > 300, "{}", ta.len());
        assert_eq!(ta, tb, "seed {seed}");
        assert_eq!(a.0, b.0);
    }
}
