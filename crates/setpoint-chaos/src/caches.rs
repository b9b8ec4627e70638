//! The watch caches of the runtime's machines, as the chaos world runs them (the store pushes
//! changes, as etcd does): an agent syncs from its cache when it changes instead of reading the
//! store every `sync_every`, and a standby controller watches `/leader` instead of polling it.
//! Both are what make a simulated run cheap, and both must keep the runtime as prompt as it was.

use crate::adapt::{make, Bugs};
use crate::faults::{parse, Model};
use crate::machine::Role;
use crate::runner::{run_checked, SeedReport};
use crate::world::Outcome;

fn model(cluster: &str, events: &str) -> Model {
    let text = format!(
        r#"seconds = 60
settle = 30
seed = 5
{events}
[cluster]
{cluster}
[[workload]]
name = "web"
controller = "named"
copies = 2
"#
    );
    parse("caches.toml", &text).unwrap()
}

fn run(model: &Model) -> (SeedReport, Outcome) {
    let seed = model.seed.unwrap();
    let f = |i: usize, r: &Role, now: u64| make(model, Bugs::default(), seed, i, r, now);
    let (report, out) = run_checked(model, seed, model.schedule.clone().unwrap(), &f, true);
    (report, out.expect("the run stays within its budget"))
}

/// The virtual time of a trace line.
fn at(line: &str) -> u64 {
    line.split_whitespace().next().unwrap().parse().unwrap()
}

fn reads_of(out: &Outcome, host: usize, prefix: &str) -> Vec<u64> {
    let what = format!(": read {prefix}");
    let who = format!("store serves host {host} request");
    out.trace
        .iter()
        .filter(|l| l.contains(&who) && l.contains(&what))
        .map(|l| at(l))
        .collect()
}

#[test]
fn an_agent_reads_its_placements_from_the_store_only_to_start_its_cache_and_starts_at_once() {
    // A sync period of 5 s: an agent that read the store every sync would start its copies up
    // to 5 s after they were assigned and read its placements 12 times in the minute.
    let m = model("controllers = 1\nagents = 1\nsync_ms = 5000", "event = []");
    let (report, out) = run(&m);
    assert!(report.passed(), "{:?}", report.violations);
    let reads = reads_of(&out, 1, "/placements/node-1/");
    assert!(
        (1..=2).contains(&reads.len()),
        "the state read and the cache's read, nothing more: {reads:?}"
    );
    let created = out
        .trace
        .iter()
        .find(|l| l.contains("host 0: loop web:") && l.contains("created [web-0"))
        .map(|l| at(l))
        .expect("the loop creates the copies");
    let started = out
        .procs
        .iter()
        .map(|p| p.start_at)
        .min()
        .expect("a copy starts");
    // The commit's reply and the watch event travel about as far; then start_ms (20 ms).
    assert!(
        started <= created + 60,
        "assigned by {created} ms, started at {started} ms"
    );
}

#[test]
fn a_standby_reads_the_leader_once_per_ttl_and_takes_over_as_soon_as_the_lease_ends() {
    let cluster = "controllers = 2\nagents = 1\nleader_ttl_ms = 3000";
    let (_, calm) = run(&model(cluster, "event = []"));
    let leader_of = |out: &Outcome| {
        out.trace
            .iter()
            .find(|l| l.contains("became the leader"))
            .map(|l| (at(l), l.contains("host 1:")))
            .unwrap()
    };
    let (_, host1_leads) = leader_of(&calm);
    let (lead, standby) = if host1_leads { (1, 0) } else { (0, 1) };
    let polls = reads_of(&calm, standby, "/leader");
    // One read per TTL over the minute (3 s), not one per poll (100 ms): about 20, not 600.
    assert!(
        polls.len() <= 60_000 / 3_000 + 2,
        "the standby read /leader {} times",
        polls.len()
    );
    // The leader stops for 20 s at 10 s: its lease ends at the store at most a TTL later, the
    // lessor revokes it at its next 500 ms check, and the standby's watch sees /leader go.
    let paused = model(
        cluster,
        &format!(
            "[[event]]\nat_ms = 10000\nkind = \"pause\"\nhost = {lead}\nduration_ms = 20000\n"
        ),
    );
    let (report, out) = run(&paused);
    assert!(report.passed(), "{:?}", report.violations);
    let took_over = out
        .trace
        .iter()
        .find(|l| {
            at(l) > 10_000
                && l.contains(&format!("host {standby}:"))
                && l.contains("became the leader")
        })
        .map(|l| at(l))
        .expect("the standby takes over");
    assert!(
        took_over <= 10_000 + 3_000 + 500 + 100,
        "took over at {took_over} ms"
    );
}
