//! What a model and a seed draw: the hosts, the fault schedule, which rules the swarm switches
//! on, and each host's clock skew and drift.

use setpoint_sim::delay::WorldRng;

use super::{Fault, Model, Target};
use crate::machine::Role;

/// The salt that keeps the schedule's draws apart from the world's: the world is seeded with
/// the seed itself, so a replay with an explicit schedule draws the same jitters.
const SCHEDULE_SALT: u64 = 0x5c4e_d01e_fa17_0001;
/// Keeps the swarm's switches apart from the schedule's draws.
const SWARM_SALT: u64 = 0x5a4a_0000_0000_0002;
/// Keeps the clocks' drifts apart from their skews.
const DRIFT_SALT: u64 = 0xd41f_0000_0000_0003;

impl Model {
    /// The hosts: controllers `0 … C−1`, then agents on `node-1 … node-A`.
    pub fn roles(&self) -> Vec<Role> {
        let mut r = vec![Role::Controller; self.controllers];
        r.extend((1..=self.agents).map(|i| Role::Agent(format!("node-{i}"))));
        r
    }

    /// The fault schedule of `seed`: the file's own, or drawn from its rules.
    pub fn schedule(&self, seed: u64) -> Vec<Fault> {
        if let Some(s) = &self.schedule {
            return s.clone();
        }
        let mut rng = WorldRng::new(seed ^ SCHEDULE_SALT);
        let last = self.duration_ms - self.settle_ms;
        let on = self.rules_on(seed);
        let mut out: Vec<Fault> = Vec::new();
        for (rule, on) in self.faults.iter().zip(on) {
            if !on {
                continue;
            }
            let hosts: Vec<usize> = match rule.target {
                Target::Controller => (0..self.controllers).collect(),
                Target::Agent => (self.controllers..self.controllers + self.agents).collect(),
                Target::Any => (0..self.controllers + self.agents).collect(),
            };
            // The windows a `during` rule may strike in: the faults of that kind drawn so
            // far, on a host this rule may strike (any, for a fault that strikes the store).
            // An `after` rule's windows are the first `within_ms` after each fault of that
            // instant kind, cut to end by the settle window.
            let windows: Vec<Fault> = match rule.during.or(rule.after) {
                None => Vec::new(),
                Some(k) => out
                    .iter()
                    .filter(|w| {
                        w.kind == k
                            && (!rule.kind.on_host() || !k.on_host() || hosts.contains(&w.host))
                    })
                    .map(|w| Fault {
                        duration_ms: if rule.after.is_some() {
                            rule.within_ms.min(last - w.at_ms.min(last))
                        } else {
                            w.duration_ms
                        },
                        ..w.clone()
                    })
                    .collect(),
            };
            if (rule.during.is_some() || rule.after.is_some()) && windows.is_empty() {
                continue;
            }
            for _ in 0..rule.count {
                let window = (!windows.is_empty())
                    .then(|| windows[rng.uniform(0, windows.len() as u64 - 1) as usize].clone());
                let at_ms = match &window {
                    Some(w) => rng.uniform(w.at_ms, w.at_ms + w.duration_ms),
                    None => rng.uniform(0, last),
                };
                let host = match &window {
                    Some(w) if rule.kind.on_host() && w.kind.on_host() => w.host,
                    _ if rule.kind.on_host() => {
                        hosts[rng.uniform(0, hosts.len() as u64 - 1) as usize]
                    }
                    _ => 0,
                };
                let duration_ms = if rule.kind.lasts() {
                    // A lasting fault ends by the start of the settle window.
                    rng.uniform(rule.min_ms, rule.max_ms)
                        .min(last - at_ms)
                        .max(1)
                } else {
                    0
                };
                out.push(Fault {
                    at_ms,
                    kind: rule.kind,
                    host,
                    duration_ms,
                });
            }
        }
        out.sort();
        out
    }

    /// Which fault rules draw faults for `seed`, in rule order: all of them, or with `swarm`
    /// each on or off with even odds, from a generator of its own (so the schedule's draws
    /// of the rules that stay on depend only on the seed and the switches). Swarm testing
    /// (Groce et al., ISSTA 2012): a run with fewer kinds of fault reaches deeper into each,
    /// since one kind no longer masks another (a crash that ends the copy a restart would
    /// have had to adopt).
    pub fn rules_on(&self, seed: u64) -> Vec<bool> {
        if !self.swarm {
            return vec![true; self.faults.len()];
        }
        let mut rng = WorldRng::new(seed ^ SCHEDULE_SALT ^ SWARM_SALT);
        self.faults.iter().map(|_| rng.uniform(0, 1) == 1).collect()
    }

    /// Each host's clock drift for `seed`, parts per million (negative: slow), uniform in
    /// `−drift_max_ppm ..= drift_max_ppm`; all zero without drift.
    pub fn drifts(&self, seed: u64) -> Vec<i64> {
        let hosts = self.controllers + self.agents;
        if self.drift_max_ppm == 0 {
            return vec![0; hosts];
        }
        let mut rng = WorldRng::new(seed ^ SCHEDULE_SALT ^ DRIFT_SALT);
        (0..hosts)
            .map(|_| rng.uniform(0, 2 * self.drift_max_ppm) as i64 - self.drift_max_ppm as i64)
            .collect()
    }

    /// Each host's clock skew for `seed`, milliseconds.
    pub fn skews(&self, seed: u64) -> Vec<u64> {
        let mut rng = WorldRng::new(seed ^ SCHEDULE_SALT ^ 0xc10c);
        (0..self.controllers + self.agents)
            .map(|_| rng.uniform(0, 2 * self.skew_max_ms))
            .collect()
    }
}
