//! Small stand-in machines for the world's own tests: a leader-elected controller that places
//! copies on live nodes, and an agent that claims its node, fences itself and runs what is
//! placed on it. Each has the switch that breaks it, so the checks can be shown to catch it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use setpoint_runtime::machine::{ReqId, StoreReply, StoreRequest};
use setpoint_runtime::model::{placement_key, LEADER, PLACEMENTS, WORKLOADS};
use setpoint_runtime::store::{LeaseId, Read, Revision, StoreError, Txn};

use crate::machine::{Input, Machine, Output};

const TTL: u64 = 3000;
const TICK: u64 = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    Grant,
    Renew,
    Acquire,
    Read,
    Write,
    Claim,
    Sync,
}

#[derive(Default)]
struct Requests {
    next: ReqId,
    pending: BTreeMap<ReqId, (Pending, u64)>,
}

impl Requests {
    fn send(&mut self, now: u64, p: Pending, request: StoreRequest, out: &mut Vec<Output>) {
        self.next += 1;
        self.pending.insert(self.next, (p, now));
        out.push(Output::Request {
            id: self.next,
            request,
        });
    }
    fn has(&self, p: Pending) -> bool {
        self.pending.values().any(|(q, _)| *q == p)
    }
    /// Forgets requests older than six seconds: their replies were lost.
    fn expire(&mut self, now: u64) {
        self.pending.retain(|_, (_, at)| now < *at + 6000);
    }
}

/// A controller: elects itself with a lease on `/leader`, then places each workload's copies
/// `0 … copies − 1` on live nodes, moving them off dead ones.
pub struct ToyController {
    me: usize,
    pub fencing: bool,
    req: Requests,
    lease: Option<LeaseId>,
    leader_rev: Option<Revision>,
    last_ok: u64,
    next_renew: u64,
    next_pass: u64,
}

impl ToyController {
    pub fn new(me: usize) -> Self {
        Self {
            me,
            fencing: true,
            req: Requests::default(),
            lease: None,
            leader_rev: None,
            last_ok: 0,
            next_renew: 0,
            next_pass: 0,
        }
    }

    fn plan(&self, read: &Read) -> Txn {
        let mut workloads: Vec<(String, u64)> = Vec::new();
        let mut nodes: Vec<String> = Vec::new();
        let mut placed: BTreeMap<(String, u64), (String, String)> = BTreeMap::new();
        for e in &read.entries {
            if let Some(name) = e.key.strip_prefix(WORKLOADS) {
                let v: serde_json::Value = serde_json::from_str(&e.value).unwrap();
                workloads.push((name.into(), v["copies"].as_u64().unwrap()));
            } else if let Some(node) = e.key.strip_prefix("/nodes/") {
                nodes.push(node.into());
            } else if let Some(rest) = e.key.strip_prefix(PLACEMENTS) {
                let parts: Vec<&str> = rest.split('/').collect();
                let n: u64 = parts[2].parse().unwrap();
                placed.insert((parts[1].into(), n), (parts[0].into(), e.key.clone()));
            }
        }
        // Every pass records itself, as a status write would: there is always a write to fence.
        let mut txn = Txn::new().put("/passes", read.revision.to_string());
        if let (true, Some(rev)) = (self.fencing, self.leader_rev) {
            txn = txn.expect(LEADER, rev);
        }
        for (w, copies) in workloads {
            for n in 0..copies {
                match placed.get(&(w.clone(), n)) {
                    Some((node, _)) if nodes.contains(node) => {}
                    other => {
                        if let Some((_, key)) = other {
                            txn = txn.delete(key.clone());
                        }
                        if !nodes.is_empty() {
                            let node = &nodes[n as usize % nodes.len()];
                            txn = txn.put(placement_key(node, &w, n), "{}");
                        }
                    }
                }
            }
        }
        txn
    }
}

impl Machine for ToyController {
    fn step(&mut self, now: u64, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        if let Input::Replied(r) = input {
            if let Some((p, _)) = self.req.pending.remove(&r.id) {
                match (p, r.result) {
                    (Pending::Grant, Ok(StoreReply::Granted(l))) => {
                        self.lease = Some(l);
                        self.last_ok = now;
                    }
                    (Pending::Renew, Ok(_)) => self.last_ok = now,
                    (Pending::Renew, Err(StoreError::LeaseExpired(_))) => {
                        self.lease = None;
                        self.leader_rev = None;
                    }
                    (Pending::Acquire, Ok(StoreReply::Committed(rev))) => {
                        self.leader_rev = Some(rev)
                    }
                    (Pending::Read, Ok(StoreReply::Read { read, .. }))
                        if self.leader_rev.is_some() =>
                    {
                        // Acts on the read at once, as a pass does: no second look at the lease.
                        let txn = self.plan(&read);
                        if txn.ops.iter().len() > 0 {
                            self.req
                                .send(now, Pending::Write, StoreRequest::Commit(txn), &mut out);
                        }
                    }
                    (Pending::Write, Err(StoreError::Conflict { key, .. })) if key == LEADER => {
                        self.leader_rev = None;
                    }
                    _ => {}
                }
            }
        }
        self.req.expire(now);
        if self.lease.is_some() && now > self.last_ok + TTL {
            self.lease = None;
            self.leader_rev = None;
        }
        match self.lease {
            None if !self.req.has(Pending::Grant) => self.req.send(
                now,
                Pending::Grant,
                StoreRequest::Grant {
                    ttl: Duration::from_millis(TTL),
                },
                &mut out,
            ),
            None => {}
            Some(l) => {
                if now >= self.next_renew {
                    self.next_renew = now + TTL / 3;
                    self.req
                        .send(now, Pending::Renew, StoreRequest::KeepAlive(l), &mut out);
                }
                if self.leader_rev.is_none()
                    && !self.req.has(Pending::Acquire)
                    && now >= self.next_pass
                {
                    self.next_pass = now + 1000;
                    let txn =
                        Txn::new()
                            .expect(LEADER, 0)
                            .put_leased(LEADER, self.me.to_string(), l);
                    self.req
                        .send(now, Pending::Acquire, StoreRequest::Commit(txn), &mut out);
                }
                if self.leader_rev.is_some()
                    && now >= self.next_pass
                    && !self.req.has(Pending::Read)
                {
                    self.next_pass = now + 1000;
                    let prefixes = vec![WORKLOADS.into(), "/nodes/".into(), PLACEMENTS.into()];
                    self.req.send(
                        now,
                        Pending::Read,
                        StoreRequest::Read { prefixes },
                        &mut out,
                    );
                }
            }
        }
        out.push(Output::Wake(now + TICK));
        out
    }
}

/// An agent: claims `/nodes/{node}` under a lease, kills its copies when its lease has gone
/// unrenewed for 3/4 of its time to live (unless `self_fence` is off), and runs what is placed
/// on it.
pub struct ToyAgent {
    node: String,
    pub self_fence: bool,
    req: Requests,
    lease: Option<LeaseId>,
    claimed: bool,
    last_ok: u64,
    next_renew: u64,
    next_sync: u64,
    running: BTreeSet<String>,
    starting: BTreeSet<String>,
}

impl ToyAgent {
    pub fn new(node: &str) -> Self {
        Self {
            node: node.into(),
            self_fence: true,
            req: Requests::default(),
            lease: None,
            claimed: false,
            last_ok: 0,
            next_renew: 0,
            next_sync: 0,
            running: BTreeSet::new(),
            starting: BTreeSet::new(),
        }
    }

    fn fenced(&self, now: u64) -> bool {
        self.self_fence && (!self.claimed || now > self.last_ok + TTL * 3 / 4)
    }
}

impl Machine for ToyAgent {
    fn step(&mut self, now: u64, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        match input {
            Input::Started { copy, .. } => {
                self.starting.remove(&copy);
                self.running.insert(copy);
            }
            Input::Exited { copy, .. } => {
                self.running.remove(&copy);
            }
            Input::Replied(r) => {
                if let Some((p, _)) = self.req.pending.remove(&r.id) {
                    match (p, r.result) {
                        (Pending::Grant, Ok(StoreReply::Granted(l))) => {
                            self.lease = Some(l);
                            self.last_ok = now;
                        }
                        (Pending::Claim, Ok(_)) => {
                            self.claimed = true;
                            self.last_ok = now;
                        }
                        (Pending::Renew, Ok(_)) => self.last_ok = now,
                        (Pending::Renew, Err(_)) => {
                            self.lease = None;
                            self.claimed = false;
                        }
                        (Pending::Sync, Ok(StoreReply::Read { read, .. })) if !self.fenced(now) => {
                            let want: BTreeSet<String> = read
                                .entries
                                .iter()
                                .map(|e| {
                                    let p: Vec<&str> = e.key.rsplit('/').take(2).collect();
                                    format!("{}-{}", p[1], p[0].parse::<u64>().unwrap())
                                })
                                .collect();
                            for c in want.difference(&self.running) {
                                if self.starting.insert(c.clone()) {
                                    let workload = c.rsplit_once('-').unwrap().0.to_owned();
                                    out.push(Output::Start {
                                        copy: c.clone(),
                                        workload,
                                        nonce: String::new(),
                                    });
                                }
                            }
                            for c in self.running.difference(&want) {
                                out.push(Output::Signal {
                                    copy: c.clone(),
                                    kill: false,
                                });
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        self.req.expire(now);
        if self.fenced(now) && self.claimed {
            for c in &self.running {
                out.push(Output::Signal {
                    copy: c.clone(),
                    kill: true,
                });
            }
        }
        if self.claimed && now > self.last_ok + TTL {
            self.claimed = false;
            self.lease = None;
        }
        match self.lease {
            None if !self.req.has(Pending::Grant) => self.req.send(
                now,
                Pending::Grant,
                StoreRequest::Grant {
                    ttl: Duration::from_millis(TTL),
                },
                &mut out,
            ),
            None => {}
            Some(l) => {
                if !self.claimed && !self.req.has(Pending::Claim) && now >= self.next_renew {
                    self.next_renew = now + 500;
                    let key = format!("/nodes/{}", self.node);
                    let txn = Txn::new().expect(key.clone(), 0).put_leased(key, "{}", l);
                    self.req
                        .send(now, Pending::Claim, StoreRequest::Commit(txn), &mut out);
                } else if self.claimed && now >= self.next_renew {
                    self.next_renew = now + TTL / 4;
                    self.req
                        .send(now, Pending::Renew, StoreRequest::KeepAlive(l), &mut out);
                }
            }
        }
        if now >= self.next_sync && !self.req.has(Pending::Sync) {
            self.next_sync = now + 500;
            let prefixes = vec![format!("{PLACEMENTS}{}/", self.node)];
            self.req.send(
                now,
                Pending::Sync,
                StoreRequest::Read { prefixes },
                &mut out,
            );
        }
        out.push(Output::Wake(now + TICK));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Check;
    use crate::faults::{parse, Fault, FaultKind, Model};
    use crate::machine::Role;
    use crate::runner::{run_checked, setup, SeedReport};
    use crate::world::{run, RunError};

    const MODEL: &str = r#"
seconds = 60
settle = 20
[cluster]
controllers = 2
agents = 3
skew_max_ms = 200
[network]
delay_ms = 2
jitter_ms = 3
[[workload]]
name = "web"
copies = 6
"#;

    fn model() -> Model {
        parse("toy.toml", MODEL).unwrap()
    }

    fn toys(fencing: bool, self_fence: bool) -> impl Fn(usize, &Role, u64) -> Box<dyn Machine> {
        move |i, role, _now| match role {
            Role::Controller => {
                let mut c = ToyController::new(i);
                c.fencing = fencing;
                Box::new(c)
            }
            Role::Agent(n) => {
                let mut a = ToyAgent::new(n);
                a.self_fence = self_fence;
                Box::new(a)
            }
        }
    }

    fn go(m: &Model, seed: u64, sched: Vec<Fault>, fencing: bool, self_fence: bool) -> SeedReport {
        run_checked(m, seed, sched, &toys(fencing, self_fence), false).0
    }

    fn partition(host: usize, at_ms: u64, duration_ms: u64) -> Fault {
        Fault {
            at_ms,
            kind: FaultKind::Partition,
            host,
            duration_ms,
        }
    }

    #[test]
    fn without_faults_the_toys_converge_and_every_check_holds() {
        let r = go(&model(), 1, vec![], true, true);
        assert!(r.passed(), "{:?}", r.violations);
        assert!(r.events > 1000);
    }

    #[test]
    fn the_same_seed_gives_the_same_trace_byte_for_byte() {
        let m = model();
        let sched = vec![partition(2, 10_000, 8_000)];
        let trace = |seed| {
            let s = setup(&m, seed, sched.clone(), true);
            run(&s, &toys(true, true), seed).unwrap().trace.join("\n")
        };
        let a = trace(3);
        assert_eq!(a, trace(3));
        assert_ne!(a, trace(4), "jitter and skew depend on the seed");
        assert!(a.contains("fault start Partition host 2"));
    }

    #[test]
    fn an_agent_that_does_not_fence_itself_runs_a_copy_twice_across_a_partition() {
        let m = model();
        let sched = vec![partition(2, 10_000, 10_000)];
        let good = go(&m, 1, sched.clone(), true, true);
        assert!(good.passed(), "{:?}", good.violations);
        let bad = go(&m, 1, sched, true, false);
        assert!(
            bad.violations.iter().any(|v| v.check == Check::DoubleRun),
            "{:?}",
            bad.violations
        );
    }

    /// An agent that takes its node's lease (3 s, never renewed) and starts a `web` copy at
    /// each of the given times after it was made.
    struct Starter {
        node: String,
        made: u64,
        starts: Vec<(u64, &'static str)>,
        req: Requests,
    }

    impl Machine for Starter {
        fn step(&mut self, now: u64, input: Input) -> Vec<Output> {
            let mut out = Vec::new();
            if let Input::Replied(r) = input {
                if let Ok(StoreReply::Granted(l)) = r.result {
                    let key = format!("/nodes/{}", self.node);
                    let txn = Txn::new().put_leased(key, "{}", l);
                    self.req
                        .send(now, Pending::Claim, StoreRequest::Commit(txn), &mut out);
                }
            }
            if self.req.next == 0 {
                let ttl = Duration::from_millis(TTL);
                self.req
                    .send(now, Pending::Grant, StoreRequest::Grant { ttl }, &mut out);
            }
            while let Some(&(at, copy)) = self.starts.first() {
                if now < self.made + at {
                    out.push(Output::Wake(self.made + at));
                    break;
                }
                self.starts.remove(0);
                out.push(Output::Start {
                    copy: copy.into(),
                    workload: "web".into(),
                    nonce: String::new(),
                });
            }
            out
        }
    }

    #[test]
    fn the_world_records_a_start_without_this_lifes_unexpired_node_lease() {
        // Host 2 starts web-90 under its lease and web-91 after the lease (3 s) ended; host 3
        // starts web-92 under its lease, is restarted at 2 s and at once starts web-93 while
        // its node is held under the first life's lease. Only web-91 and web-93 are unleased.
        let m = parse(
            "toy.toml",
            &MODEL.replace("copies = 6", "controller = \"named\"\ncopies = 6"),
        )
        .unwrap();
        let lives = std::cell::Cell::new(0);
        let agents = |i: usize, role: &Role, now: u64| -> Box<dyn Machine> {
            let starts = match i {
                2 => vec![(1_000, "web-90"), (8_000, "web-91")],
                3 => {
                    lives.set(lives.get() + 1);
                    if lives.get() % 2 == 1 {
                        vec![(1_000, "web-92")]
                    } else {
                        vec![(0, "web-93")]
                    }
                }
                _ => return toys(true, true)(i, role, now),
            };
            let Role::Agent(node) = role else {
                unreachable!()
            };
            Box::new(Starter {
                node: node.clone(),
                made: now,
                starts,
                req: Requests::default(),
            })
        };
        let restart = Fault {
            at_ms: 2_000,
            kind: FaultKind::Restart,
            host: 3,
            duration_ms: 0,
        };
        let s = setup(&m, 1, vec![restart.clone()], false);
        let out = run(&s, &agents, 1).unwrap();
        let seen: Vec<(usize, &str, &str)> = out
            .protocol
            .unleased_starts
            .iter()
            .map(|u| (u.host, u.copy.as_str(), u.why.as_str()))
            .collect();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!((seen[0].0, seen[0].1), (3, "web-93"), "{seen:?}");
        assert!(
            seen[0].2.contains("host 3's life 0, not this life (1)"),
            "{seen:?}"
        );
        assert_eq!((seen[1].0, seen[1].1), (2, "web-91"), "{seen:?}");
        assert!(
            seen[1].2.contains("expired at") || seen[1].2.contains("not held"),
            "{seen:?}"
        );
        let r = run_checked(&m, 1, vec![restart], &agents, false).0;
        let unleased: Vec<u64> = r
            .violations
            .iter()
            .filter(|v| v.check == Check::UnleasedStart)
            .map(|v| v.at_ms)
            .collect();
        assert_eq!(unleased.len(), 2, "{:?}", r.violations);
    }

    #[test]
    fn a_controller_without_fencing_writes_after_losing_the_lease_across_a_pause() {
        let m = model();
        // Pause both controllers, the first longer, at times 3 ms apart over more than one
        // pass period: some pause lands while the leader's read is in flight, and the leader
        // acts on its reply after the pause, when the other has taken the lease.
        let found = (0..400).find(|&k| {
            let sched = vec![
                Fault {
                    at_ms: 10_000 + k * 3,
                    kind: FaultKind::Pause,
                    host: 0,
                    duration_ms: 5_000,
                },
                Fault {
                    at_ms: 10_000 + k * 3,
                    kind: FaultKind::Pause,
                    host: 1,
                    duration_ms: 4_000,
                },
            ];
            let seed = 1;
            let bad = go(&m, seed, sched.clone(), false, true);
            let caught = bad.violations.iter().any(|v| v.check == Check::Unfenced);
            if caught {
                let good = go(&m, seed, sched, true, true);
                assert!(
                    !good.violations.iter().any(|v| v.check == Check::Unfenced),
                    "fencing on: {:?}",
                    good.violations
                );
            }
            caught
        });
        assert!(
            found.is_some(),
            "no pause of 400 caught the unfenced controller"
        );
    }

    #[test]
    fn a_machine_that_wakes_itself_in_a_loop_stops_at_the_event_budget() {
        struct Spin;
        impl Machine for Spin {
            fn step(&mut self, now: u64, _: Input) -> Vec<Output> {
                vec![Output::Wake(now)]
            }
        }
        let mut m = model();
        m.event_budget = 10_000;
        let s = setup(&m, 1, vec![], false);
        let err = run(&s, &|_, _: &Role, _| Box::new(Spin) as Box<dyn Machine>, 1).unwrap_err();
        assert!(
            matches!(
                err,
                RunError::Budget {
                    budget: 10_000,
                    at_ms: 0,
                    busiest: 0,
                    ..
                }
            ),
            "{err:?}"
        );
        m.event_budget = 2_000;
        let r = go(&m, 1, vec![], true, true);
        assert_eq!(
            r.violations[0].check,
            Check::Budget,
            "the toys need more than 2,000"
        );
    }

    #[test]
    fn a_store_leader_change_keeps_an_expiring_lease_alive() {
        // The agent on host 2 is cut off; a leader change 2 s later resets its lease, so the
        // controller sees the node live for longer and moves its copies later.
        let m = model();
        let moved_at = |sched: Vec<Fault>| {
            let s = setup(&m, 1, sched, false);
            let out = run(&s, &toys(true, true), 1).unwrap();
            out.procs
                .iter()
                .filter(|p| p.node != "node-1" && p.up_ms.is_some_and(|u| u > 10_000))
                .map(|p| p.up_ms.unwrap())
                .min()
                .unwrap()
        };
        let plain = moved_at(vec![partition(2, 10_000, 15_000)]);
        let reset = moved_at(vec![
            partition(2, 10_000, 15_000),
            Fault {
                at_ms: 12_000,
                kind: FaultKind::LeaderChange,
                host: 0,
                duration_ms: 0,
            },
        ]);
        assert!(
            reset >= plain + 1500,
            "plain {plain}, with a leader change {reset}"
        );
    }
}
