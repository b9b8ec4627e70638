//! The invariants checked after every run.
//!
//! - **one copy per name**: at no instant do two processes of one copy identity run (checked
//!   for every workload; for `named` it is the identity the controller reuses, for the others
//!   identities are never reused, so any overlap is two agents running one copy);
//! - **fencing**: no write committed by a controller that did not hold `/leader` at commit time
//!   (the store knows whose lease holds it);
//! - **no declaration lost**: every declaration the operator wrote is there at the end,
//!   unchanged;
//! - **self-fencing**: an agent cut off from the store (partition, one-way cut, stall, a hung
//!   store member, a quorum loss) past the end of its node lease, and not paused meanwhile,
//!   has stopped every copy by the time its lease ends **at the store** (its expiry as the
//!   store held it when the cut began; a node lease counted from the cut when the agent held
//!   none), however its clock runs. A paused agent is exempt: it cannot act, and `named`
//!   holds its names instead (`docs/runtime.md`, "Lost nodes");
//! - **no needed copy deleted**: no controller commit removes the assignment of a copy that was
//!   needed when it committed: its process running, its assignment owned by the workload's
//!   current declaration, its node's lease alive, and no more such copies of the workload
//!   running than desired (so none was surplus);
//! - **no orphan**: at the end, every running process has its placement in the store;
//! - **convergence**: at the end, which is at least `settle` after the last fault ended, each
//!   workload runs exactly its desired copies;
//! - **overshoot within the lab's prediction**: in a run with no fault, no `ledger` or `intent`
//!   workload runs more copies above desired than the lab's general engine predicts for its
//!   settings ([`crate::predict`]);
//! - **request ids never repeat**: no life of a host sends two store requests with one id
//!   (a reply or a watch event of the earlier one would be taken for the later's);
//! - **no request storm**: no life of a host sends more than [`STORM_LIMIT`] store requests
//!   within one second ([`crate::world::BURST_WINDOW_MS`]): a host retries on its timers (a
//!   poll, a renewal, a sync, a loop's period), never as fast as the store answers;
//! - **no leaked watch**: the store never opens a watch for a host while the same life of that
//!   host has another open watch of exactly the same prefixes (a watch whose role ended, a
//!   standby's of `/leader` that became the leader's, must be cancelled or lost);
//! - **no needless step-down**: the lease that holds `/leader` expires at the store only if its
//!   controller was paused, cut off (partition, one-way cut, stall, hung member, quorum loss),
//!   slowed or restarted within a leader lease (plus the lessor's 500 ms check and a round trip
//!   of the network) before it expired: a leader that is not hindered renews every third of
//!   its lease, so only a controller that gave it up lets it lapse. Not checked where three
//!   round trips and two polls last a lease (a leader may not prove its lease in time, and
//!   steps down as it must), nor on a lossy network;
//! - **no needless node loss**: the same for a node's lease and its agent, with the node TTL:
//!   an agent renews every quarter of its lease, so a lease that lapses with its agent
//!   unhindered means a renewal timer late by three quarters of a TTL, or none;
//! - **no impostor kept**: a process planted by a `pid-reuse` or `impostor` fault, carrying a
//!   copy's mark and nonce but not the copy, is never adopted, and is stopped by its agent's
//!   next recovery within its grace ([`crate::impostors::check`]); the checks above leave such
//!   processes out;
//! - **nothing left running by a clean stop**: an agent that stops after a `shutdown` leaves no
//!   process of its node running, and every host asked to shut down stops within systemd's
//!   stop timeout ([`crate::shutdowns::check`]);
//! - **event budget**: a run that exceeds it is a failure of its own ([`crate::RunError`]).

use std::collections::{BTreeMap, BTreeSet};

use setpoint_runtime::model::placement_key;

use crate::faults::{Fault, Model};
use crate::world::{DeleteRecord, Outcome, ProcRecord};

/// Which invariant a run broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Check {
    /// Two processes of one copy identity ran at once.
    DoubleRun,
    /// A controller without the leader lease committed a write.
    Unfenced,
    /// A declaration is gone or changed.
    LostDeclaration,
    /// A cut-off agent's copy outlived its node lease at the store.
    LateFence,
    /// A controller removed the assignment of a running, owned copy on a live node that was
    /// not surplus.
    NeededDelete,
    /// A process runs with no placement.
    Orphan,
    /// A workload does not run its desired copies at the end.
    NotConverged,
    /// A fault-free run overshot more than the lab predicts for its settings.
    Overshoot,
    /// A host sent two store requests with one id in one life.
    RepeatedRequest,
    /// A host opened a watch beside an open one of the same prefixes.
    LeakedWatch,
    /// A host sent more than [`STORM_LIMIT`] store requests within one second.
    RequestStorm,
    /// The leader's lease expired though nothing kept its controller from renewing it.
    NeedlessStepDown,
    /// A node's lease expired though nothing kept its agent from renewing it.
    NeedlessNodeLoss,
    /// The run exceeded its event budget.
    Budget,
    /// A process carrying a copy's mark that is not the copy (a reused pid, an outliving child)
    /// was adopted, or outlived its grace after its agent's recovery.
    ImpostorKept,
    /// An agent stopped after a shutdown with a process of its node still running
    /// ([`crate::shutdowns`]).
    LeftRunning,
    /// A host asked to shut down had not stopped within the stop timeout
    /// ([`crate::shutdowns::STOP_TIMEOUT_MS`]).
    StopTimeout,
    /// An agent started a `named` copy while the store did not hold its node's key under an
    /// unexpired lease granted to that agent's life.
    UnleasedStart,
}

impl Check {
    /// Every check, in the order of the enum.
    pub const ALL: [Check; 18] = [
        Check::DoubleRun,
        Check::Unfenced,
        Check::LostDeclaration,
        Check::LateFence,
        Check::NeededDelete,
        Check::Orphan,
        Check::NotConverged,
        Check::Overshoot,
        Check::RepeatedRequest,
        Check::LeakedWatch,
        Check::RequestStorm,
        Check::NeedlessStepDown,
        Check::NeedlessNodeLoss,
        Check::Budget,
        Check::ImpostorKept,
        Check::LeftRunning,
        Check::StopTimeout,
        Check::UnleasedStart,
    ];

    /// Its name in outputs.
    pub fn name(self) -> &'static str {
        match self {
            Check::DoubleRun => "double-run",
            Check::Unfenced => "unfenced",
            Check::LostDeclaration => "lost-declaration",
            Check::LateFence => "late-fence",
            Check::NeededDelete => "needed-delete",
            Check::Orphan => "orphan",
            Check::NotConverged => "not-converged",
            Check::Overshoot => "overshoot",
            Check::RepeatedRequest => "repeated-request",
            Check::LeakedWatch => "leaked-watch",
            Check::RequestStorm => "request-storm",
            Check::NeedlessStepDown => "needless-step-down",
            Check::NeedlessNodeLoss => "needless-node-loss",
            Check::Budget => "budget",
            Check::ImpostorKept => "impostor-kept",
            Check::LeftRunning => "left-running",
            Check::StopTimeout => "stop-timeout",
            Check::UnleasedStart => "unleased-start",
        }
    }
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    /// Which.
    pub check: Check,
    /// When it was seen, milliseconds of virtual time.
    pub at_ms: u64,
    /// What exactly.
    pub detail: String,
}

/// When the last fault of `schedule` ends.
pub fn last_fault_end(schedule: &[Fault]) -> u64 {
    schedule
        .iter()
        .map(|f| f.at_ms + f.duration_ms)
        .max()
        .unwrap_or(0)
}

/// Every invariant `out` breaks; `declared` are the keys and values the operator wrote and
/// `schedule` the faults of the run.
pub fn check(
    model: &Model,
    schedule: &[Fault],
    declared: &[(String, String)],
    out: &Outcome,
) -> Vec<Violation> {
    let mut v = Vec::new();
    let end = out.end_ms;
    // One copy per name: sort each identity's lifetimes and look for an overlap.
    let mut lives: BTreeMap<&str, Vec<(u64, u64, u32, &str)>> = BTreeMap::new();
    for p in &out.procs {
        if let Some(up) = p.up_ms {
            let down = p.end_ms.unwrap_or(u64::MAX);
            lives
                .entry(p.copy.as_str())
                .or_default()
                .push((up, down, p.pid, p.node.as_str()));
        }
    }
    for (copy, mut l) in lives {
        l.sort();
        for w in l.windows(2) {
            if w[1].0 < w[0].1 {
                v.push(Violation {
                    check: Check::DoubleRun,
                    at_ms: w[1].0,
                    detail: format!(
                        "copy {copy} ran twice: pid {} on {} and pid {} on {}",
                        w[0].2, w[0].3, w[1].2, w[1].3
                    ),
                });
                break;
            }
        }
    }
    late_fences(model, schedule, out, &mut v);
    v.extend(needed_deletes(&out.deletes, &out.procs));
    for u in &out.unfenced {
        let holder = match u.holder {
            Some(Some(h)) => format!("host {h}"),
            Some(None) => "the operator".into(),
            None => "no one".into(),
        };
        v.push(Violation {
            check: Check::Unfenced,
            at_ms: u.at_ms,
            detail: format!(
                "controller host {} wrote {} while /leader was held by {holder}",
                u.host, u.key
            ),
        });
    }
    for (key, value) in declared {
        match out.store.entry(key) {
            Some(e) if &e.value == value => {}
            Some(_) => v.push(Violation {
                check: Check::LostDeclaration,
                at_ms: end,
                detail: format!("declaration {key} was changed"),
            }),
            None => v.push(Violation {
                check: Check::LostDeclaration,
                at_ms: end,
                detail: format!("declaration {key} is gone"),
            }),
        }
    }
    let mut running: BTreeMap<&str, u64> = BTreeMap::new();
    for p in out
        .procs
        .iter()
        .filter(|p| p.up_ms.is_some() && p.end_ms.is_none())
    {
        *running.entry(p.workload.as_str()).or_default() += 1;
        let n = p
            .copy
            .rsplit_once('-')
            .and_then(|(_, n)| n.parse::<u64>().ok());
        let placed = n.is_some_and(|n| {
            out.store
                .entry(&placement_key(&p.node, &p.workload, n))
                .is_some()
        });
        if !placed {
            v.push(Violation {
                check: Check::Orphan,
                at_ms: end,
                detail: format!(
                    "pid {} ({}) runs on {} with no placement",
                    p.pid, p.copy, p.node
                ),
            });
        }
    }
    for w in &model.workloads {
        let n = running.get(w.name.as_str()).copied().unwrap_or(0);
        if n != w.copies {
            v.push(Violation {
                check: Check::NotConverged,
                at_ms: end,
                detail: format!(
                    "workload {} runs {n} copies, desired {}, {} ms after the last fault",
                    w.name,
                    w.copies,
                    end.saturating_sub(last_fault_end(schedule))
                ),
            });
        }
    }
    if schedule.is_empty() {
        v.extend(overshoot(model, out, |w| w.controller));
    }
    protocol(model, schedule, &out.protocol, &mut v);
    v.extend(crate::impostors::check(&out.impostors, schedule, end));
    if !out.shutdowns.stops.is_empty() {
        let roles = model.roles();
        let node = |h: usize| match roles.get(h) {
            Some(crate::machine::Role::Agent(n)) => Some(n.clone()),
            _ => None,
        };
        v.extend(crate::shutdowns::check(&out.shutdowns, &node));
    }
    v.sort_by_key(|a| (a.at_ms, a.check));
    v
}

/// The self-fencing check: for each fault that cuts an agent host off from the store past the
/// end of its node lease (its expiry at the store when the cut began, from
/// [`Outcome::cut_leases`]; one node lease from the cut's start when the store held no lease
/// of the agent's, as in a planted history), with no pause of that host within a lease of the
/// cut's start, every `named` copy that host ran must be down by that expiry. The agent
/// SIGKILLs at 9/10 of the lease counted from its last renewal, which it sent before the store
/// renewed it: the tenth is its margin for a slow clock and the network. A counted
/// controller's copies are not fenced (issue 22, item 6): kept running, or, with
/// `stop_when_cut_off_ms`, down by the cut's start plus that wait, a quarter lease (the
/// renewal that did not succeed), its grace and a tenth of the lease for the clocks, if the
/// cut lasts past both.
fn late_fences(model: &Model, schedule: &[Fault], out: &Outcome, v: &mut Vec<Violation>) {
    use crate::faults::FaultKind;
    let ttl = model.timing.node_ttl_ms;
    let agents = model.controllers..model.controllers + model.agents;
    for (i, cut) in schedule.iter().enumerate() {
        if !cut.kind.cuts_off() {
            continue;
        }
        let hosts: Vec<usize> = if cut.kind.on_store() {
            agents.clone().collect()
        } else if agents.contains(&cut.host) {
            vec![cut.host]
        } else {
            continue;
        };
        for host in hosts {
            // Never before the cut began: a cut that starts after the lease's recorded end (a
            // lease a quorum loss froze past its expiry, which the store does not revoke) is
            // not what kept a copy up before it (swarm seeds 8,766 and 79,603: a copy killed
            // 10 s before a 1 ms partition was blamed on it). An earlier cut judges that time.
            let deadline = out
                .cut_leases
                .iter()
                .find(|c| c.fault == i && c.host == host)
                .map_or(cut.at_ms + ttl, |c| c.expires_ms)
                .max(cut.at_ms);
            if cut.at_ms + cut.duration_ms <= deadline {
                continue;
            }
            // A pause of the agent within a lease of the cut and before a copy's deadline (the
            // node lease's, or its `stop_when_cut_off_ms` one) excuses it: the agent could not
            // act. (Before issue 22 part 3 a `stop_when_cut_off_ms` copy was excused only by a
            // pause before the node lease's end, and stop-when-cut-off.toml's seed 2,857, a
            // pause from 9.8 s into a 25 s partition, failed with the agent paused through its
            // copy's stop.)
            let paused_before = |due: u64| {
                schedule.iter().any(|p| {
                    p.kind == FaultKind::Pause
                        && p.host == host
                        && p.at_ms < due
                        && p.at_ms + p.duration_ms + ttl > cut.at_ms
                })
            };
            // Only `named` copies are fenced; a counted controller's are kept running while
            // cut off, or stopped after their `stop_when_cut_off_ms` (checked below).
            let policy = |p: &crate::world::ProcRecord| {
                model
                    .workloads
                    .iter()
                    .find(|w| w.name == p.workload)
                    .map(|w| {
                        (
                            w.controller == setpoint_core::ControllerKind::Named,
                            w.stop_when_cut_off_ms.map(|ms| {
                                // Cut off since the first renewal after the last that succeeded
                                // was due (before the cut began), then its own wait and grace; a
                                // tenth of the lease for the clocks.
                                cut.at_ms + ms + ttl / 4 + w.grace_ms + ttl / 10
                            }),
                        )
                    })
            };
            let late = out.procs.iter().find(|p| {
                let Some((fenced, stop_by)) = policy(p) else {
                    return false;
                };
                let due = match (fenced, stop_by) {
                    (true, _) => deadline,
                    (false, Some(by)) if cut.at_ms + cut.duration_ms > by => by,
                    _ => return false,
                };
                p.host == host
                    && p.up_ms.is_some_and(|up| up < due)
                    && p.end_ms.is_none_or(|end| end > due)
                    && !paused_before(due)
            });
            if let Some(p) = late {
                v.push(Violation {
                    check: Check::LateFence,
                    at_ms: deadline,
                    detail: format!(
                        "copy {} (pid {}) on {} still ran at {deadline} ms, when its node lease \
                         ended at the store, {} ms after a {} cut its agent off: it did not \
                         fence it",
                        p.copy,
                        p.pid,
                        p.node,
                        deadline.saturating_sub(cut.at_ms),
                        cut.kind.name()
                    ),
                });
            }
        }
    }
}

/// The most store requests one life of a host may send within one second
/// ([`crate::world::BURST_WINDOW_MS`]) before `request-storm` fails the run.
///
/// Why 100: every request a host sends answers a timer of its own (the controller's poll
/// and each loop's period, a lease renewal, an agent's sync and report periods), a reply (a
/// pass's commit after its read, a page after a page) or a watch event, and each of those is
/// paced by a period of at least 100 ms or by the store. The busiest second of any host over
/// seeds 1–200 of every shipped model was 29 requests, and 34 with two `refuse` faults added
/// for the hosts that did not retry at once (docs/chaos.md, the check's row). A host
/// that retries a refused or failed request at once, instead of on its next timer, sends one
/// a round trip: at least 100 a second on the shipped models' networks (a round trip of at
/// most 2 × (1 + 4) ms). On a network whose round trip exceeds 10 ms such a loop can stay
/// under the limit, and the check does not see it.
pub const STORM_LIMIT: u64 = 100;

/// The checks `repeated-request`, `leaked-watch`, `request-storm`, `unleased-start`,
/// `needless-step-down` and `needless-node-loss` of what the world saw of the hosts' requests, watches and leases
/// ([`crate::world::Protocol`]).
///
/// `needless-step-down`'s window: a lease the lessor revokes at `t` was last renewed at the
/// store no earlier than `t` − TTL − 500 ms (the lessor checks every 500 ms); a controller that
/// leads sends a renewal every third of the TTL of its own clock, and each reaches the store
/// within the network's delay and jitter. So a renewal the store did not get in that window
/// was either not sent (the controller stopped leading) or kept from it by a fault of that
/// host or of the store within `t` − TTL − 500 ms − a round trip .. `t`; a drift of the
/// controller's clock by less than half (the models allow 20 %) still fits two renewals in a
/// TTL. No bound holds on a lossy network, which is left out.
pub fn protocol(
    model: &Model,
    schedule: &[Fault],
    seen: &crate::world::Protocol,
    v: &mut Vec<Violation>,
) {
    let mut repeated = BTreeMap::new();
    for &(at, host, id) in &seen.repeated_ids {
        repeated.entry(host).or_insert((at, id));
    }
    for (host, (at, id)) in repeated {
        v.push(Violation {
            check: Check::RepeatedRequest,
            at_ms: at,
            detail: format!("host {host} sent a second store request with id {id}"),
        });
    }
    for (host, &(count, at)) in seen.busiest.iter().enumerate() {
        if count > STORM_LIMIT {
            v.push(Violation {
                check: Check::RequestStorm,
                at_ms: at,
                detail: format!(
                    "host {host} sent {count} store requests in the second before {at} ms (at \
                     most {STORM_LIMIT} expected: a retry waits for a timer, not the store's \
                     answer)"
                ),
            });
        }
    }
    if let Some(d) = seen.duplicate_watches.first() {
        v.push(Violation {
            check: Check::LeakedWatch,
            at_ms: d.at_ms,
            detail: format!(
                "host {} opened watch {} of {} while its watch {} of the same prefixes was open",
                d.host,
                d.new,
                d.prefixes.join(" "),
                d.open
            ),
        });
    }
    // An agent starts a `named` copy only while it can prove it holds its node's lease (issue
    // 22: "an agent that cannot prove it holds its node lease fences its `named` copies"), and
    // it proves it from renewals the store answered, so the store still holds that lease, for
    // that life of the agent, when the copy starts. A counted controller's copy may be
    // restarted by an agent cut off from the store (it keeps its work running, as a kubelet
    // does), so only `named` starts are judged.
    let named: BTreeSet<&str> = model
        .workloads
        .iter()
        .filter(|w| w.controller == setpoint_core::ControllerKind::Named)
        .map(|w| w.name.as_str())
        .collect();
    let mut unleased_hosts = BTreeSet::new();
    for u in &seen.unleased_starts {
        if named.contains(u.workload.as_str()) && unleased_hosts.insert(u.host) {
            v.push(Violation {
                check: Check::UnleasedStart,
                at_ms: u.at_ms,
                detail: format!("agent host {} started {} while {}", u.host, u.copy, u.why),
            });
        }
    }
    let ttl = model.timing.leader_ttl_ms;
    let trip = 2 * (model.net.delay_ms + model.net.jitter_ms);
    // A leader that cannot prove its lease for a whole TTL of its own clock steps down, as it
    // must; from the grant's request to the first renewal's reply it waits three round trips
    // (grant, the write of `/leader`, the renewal), and a tick of its poll on each side. On a
    // network slow enough to stretch that past the TTL (a fast clock shortening it), an
    // unhindered leader may step down safely: nothing is promised (lease-pressure.toml, 2 s
    // round trips for a 5 s lease). Nor on a lossy one.
    let drift = 1_000_000 + model.drift_max_ppm;
    let proof = (3 * trip + 2 * model.timing.poll_ms) * drift / 1_000_000;
    if model.net.loss_ppm > 0 || proof >= ttl {
        return;
    }
    for &(t, host) in &seen.leader_expiries {
        if let Some(from) = unhindered_since(schedule, t, host, ttl + 500 + trip) {
            v.push(Violation {
                check: Check::NeedlessStepDown,
                at_ms: t,
                detail: format!(
                    "the leader lease of controller host {host} expired at {t} ms with no fault \
                     of that host or the store since {from} ms: it stopped renewing it"
                ),
            });
            break;
        }
    }
    // The same for a node lease: an agent renews every quarter of it, so one that lapses with
    // its agent unhindered was not renewed on time (a timer late by three quarters of a TTL).
    let node_ttl = model.timing.node_ttl_ms;
    if proof >= node_ttl {
        return;
    }
    for &(t, host) in &seen.node_expiries {
        if let Some(from) = unhindered_since(schedule, t, host, node_ttl + 500 + trip) {
            v.push(Violation {
                check: Check::NeedlessNodeLoss,
                at_ms: t,
                detail: format!(
                    "the node lease of agent host {host} expired at {t} ms with no fault of that \
                     host or the store since {from} ms: it stopped renewing it"
                ),
            });
            break;
        }
    }
}

/// The start of the window before a lease's expiry at `t` in which a fault of `host` or of the
/// store could explain it (`window` back, and further back from each store leader change
/// inside it), if no fault falls in it; `None` if one does.
fn unhindered_since(schedule: &[Fault], t: u64, host: usize, window: u64) -> Option<u64> {
    use crate::faults::FaultKind;
    // A store leader change gives every lease its full TTL again (etcd #9395): a lease alive
    // at the change was renewed a TTL (and a lessor check) before it, so the window reaches
    // back from each change inside it.
    let mut from = t.saturating_sub(window);
    while let Some(reset) = schedule
        .iter()
        .filter(|f| f.kind == FaultKind::LeaderChange && f.at_ms >= from && f.at_ms <= t)
        .map(|f| f.at_ms)
        .min()
    {
        let earlier = reset.saturating_sub(window);
        if earlier >= from {
            break;
        }
        from = earlier;
    }
    // A fault of the store strikes every host; a host fault (a cut, a pause, a slow link, a
    // restart of any kind, a shutdown) this one.
    let hindered = schedule.iter().any(|f| {
        let on_it = f.kind.on_store() || (f.kind.on_host() && f.host == host);
        on_it && f.at_ms <= t && f.at_ms + f.duration_ms >= from
    });
    (!hindered).then_some(from)
}

/// The check `needed-delete`: each removal in `deletes` of a copy that was needed when it
/// committed, as far as anything could know. A copy is needed if its process ran then (up, not
/// yet ended, on the node of the assignment), its assignment was owned by the current
/// declaration and its node alive, and the owned copies on live nodes that ran then were no more
/// than desired: none was surplus. A process that had ended while its node's report in the store
/// still showed it running counts as running: its death was unseen, and a surplus correction
/// that meets it removes one copy too many whatever it chooses (chaos finding 16: docs/chaos.md
/// says why no controller acting on reports can do better). Garbage collection of an exited
/// copy, an orphan or a lost node's copy, and a delete command that takes surplus back, are not.
pub fn needed_deletes(deletes: &[DeleteRecord], procs: &[ProcRecord]) -> Vec<Violation> {
    let runs = |copy: &str, node: &str, t: u64| {
        procs.iter().any(|p| {
            p.copy == copy
                && p.node == node
                && p.up_ms.is_some_and(|up| up <= t)
                && p.end_ms.is_none_or(|end| end > t)
        })
    };
    let mut v = Vec::new();
    for d in deletes {
        if !(d.owned && d.node_live && runs(&d.copy, &d.node, d.at_ms)) {
            continue;
        }
        let (mut running, mut unseen) = (0u64, 0u64);
        for (c, n) in &d.owned_copies {
            if runs(c, n, d.at_ms) {
                running += 1;
            } else if procs.iter().any(|p| {
                p.copy == *c
                    && p.node == *n
                    && p.up_ms.is_some_and(|up| up <= d.at_ms)
                    && d.shown_running.contains(&(n.clone(), p.pid))
            }) {
                unseen += 1;
            }
        }
        if running + unseen <= d.desired {
            v.push(Violation {
                check: Check::NeededDelete,
                at_ms: d.at_ms,
                detail: format!(
                    "controller host {} removed the assignment of {} on {}, running and owned, \
                     while {running} owned copies of {} ran on live nodes{}, desired {}",
                    d.host,
                    d.copy,
                    d.node,
                    d.workload,
                    if unseen > 0 {
                        format!(" and the reports showed {unseen} more that had ended")
                    } else {
                        String::new()
                    },
                    d.desired
                ),
            });
        }
    }
    v
}

/// The check `overshoot` of `out`, each workload predicted as if `predict_as` ran it (the
/// check proper predicts the workload's own controller; a test predicts another to show the
/// check fails).
pub fn overshoot(
    model: &Model,
    out: &Outcome,
    predict_as: impl Fn(&crate::faults::WorkloadModel) -> setpoint_core::ControllerKind,
) -> Vec<Violation> {
    let mut v = Vec::new();
    for w in &model.workloads {
        let Some(limit) = crate::predict::predicted(model, w, predict_as(w)) else {
            continue;
        };
        let (got, at) = crate::predict::measured(out, w);
        if got > limit {
            v.push(Violation {
                check: Check::Overshoot,
                at_ms: at * 1000,
                detail: format!(
                    "workload {} ran {got} copies above desired in second {at}; the lab predicts at most {limit} for its settings",
                    w.name
                ),
            });
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::parse;
    use crate::store::SimStore;
    use setpoint_runtime::store::Txn;
    use std::collections::BTreeSet;

    fn proc(pid: u32, node: &str, copy: &str, up: u64, end: Option<u64>) -> ProcRecord {
        ProcRecord {
            pid,
            host: 0,
            node: node.into(),
            copy: copy.into(),
            workload: "web".into(),
            up_ms: Some(up),
            end_ms: end,
            down_ms: end,
            start_at: up,
            nonce: String::new(),
            adopted: false,
        }
    }

    fn outcome(procs: Vec<ProcRecord>, store: SimStore) -> Outcome {
        Outcome {
            events: 0,
            end_ms: 60_000,
            procs,
            unfenced: vec![],
            deletes: vec![],
            cut_leases: vec![],
            store,
            trace: vec![],
            leaders: vec![],
            protocol: Default::default(),
            impostors: Default::default(),
            shutdowns: Default::default(),
        }
    }

    fn checks(v: &[Violation]) -> Vec<Check> {
        v.iter().map(|v| v.check).collect()
    }

    #[test]
    fn each_end_state_invariant_is_reported_on_its_own() {
        let m = parse("m", "[[workload]]\nname = \"web\"\ncopies = 2\n").unwrap();
        let declared = vec![("/workloads/web".to_string(), "{}".to_string())];
        let mut s = SimStore::new();
        s.commit(
            &Txn::new()
                .put("/workloads/web", "{}")
                .put(placement_key("node-1", "web", 0), "{}")
                .put(placement_key("node-2", "web", 1), "{}"),
        )
        .unwrap();
        let good = vec![
            proc(1, "node-1", "web-0", 10, None),
            proc(2, "node-2", "web-1", 10, None),
        ];
        assert!(check(&m, &[], &declared, &outcome(good.clone(), s.clone())).is_empty());
        // A copy ended and back-to-back with its successor is no double run.
        let mut handover = good.clone();
        handover[0].end_ms = Some(500);
        handover.push(proc(3, "node-1", "web-0", 500, None));
        assert!(check(&m, &[], &declared, &outcome(handover, s.clone())).is_empty());
        let mut twice = good.clone();
        twice.push(proc(3, "node-3", "web-1", 499, Some(501)));
        assert_eq!(
            checks(&check(&m, &[], &declared, &outcome(twice, s.clone()))),
            [Check::DoubleRun]
        );
        let mut orphan = good.clone();
        orphan[1].node = "node-3".into();
        assert_eq!(
            checks(&check(&m, &[], &declared, &outcome(orphan, s.clone()))),
            [Check::Orphan]
        );
        let short = vec![good[0].clone()];
        assert_eq!(
            checks(&check(&m, &[], &declared, &outcome(short, s.clone()))),
            [Check::NotConverged]
        );
        let mut lost = s.clone();
        lost.commit(&Txn::new().delete("/workloads/web")).unwrap();
        assert_eq!(
            checks(&check(&m, &[], &declared, &outcome(good, lost))),
            [Check::LostDeclaration]
        );
    }

    #[test]
    fn a_cut_off_agents_copy_outliving_a_node_lease_is_a_late_fence_unless_it_was_paused() {
        use crate::faults::FaultKind;
        let text = "[cluster]\ncontrollers = 2\nnode_ttl_ms = 4000\n\
                    [[workload]]\nname = \"web\"\ncopies = 1\n";
        let m = parse("m", text).unwrap();
        let declared = vec![("/workloads/web".to_string(), "{}".to_string())];
        let mut s = SimStore::new();
        s.commit(
            &Txn::new()
                .put("/workloads/web", "{}")
                .put(placement_key("node-1", "web", 0), "{}"),
        )
        .unwrap();
        let on_agent = |end| ProcRecord {
            host: 2,
            ..proc(1, "node-1", "web-0", 10, end)
        };
        let cut = [fault(FaultKind::Partition, 2, 1_000, 6_000)];
        // Killed within the lease of the cut (at 9/10 of it): the promise is kept.
        let fenced = vec![
            on_agent(Some(4_600)),
            proc(2, "node-1", "web-0", 4_700, None),
        ];
        let v = check(&m, &cut, &declared, &outcome(fenced, s.clone()));
        assert!(!checks(&v).contains(&Check::LateFence), "{v:?}");
        // Still running when a lease from the cut is over.
        let late = vec![
            on_agent(Some(5_200)),
            proc(2, "node-1", "web-0", 5_200, None),
        ];
        let v = check(&m, &cut, &declared, &outcome(late.clone(), s.clone()));
        assert_eq!(checks(&v), [Check::LateFence], "{v:?}");
        // A cut no longer than the lease, a controller's cut, or a pause of the agent within
        // the lease: nothing is promised.
        for faults in [
            vec![fault(FaultKind::Partition, 2, 1_000, 4_000)],
            vec![fault(FaultKind::Partition, 1, 1_000, 6_000)],
            vec![cut[0].clone(), fault(FaultKind::Pause, 2, 3_000, 2_000)],
        ] {
            let v = check(&m, &faults, &declared, &outcome(late.clone(), s.clone()));
            assert!(!checks(&v).contains(&Check::LateFence), "{faults:?}: {v:?}");
        }
    }

    /// A cut that begins after the node lease's recorded end (frozen by a quorum loss, which
    /// revokes nothing) judges only copies still up when it begins: swarm seeds 8,766 and
    /// 79,603 blamed a 1 ms partition for a copy killed 10 s before it.
    #[test]
    fn a_cut_after_the_leases_recorded_end_judges_only_copies_up_when_it_began() {
        use crate::faults::FaultKind;
        let text = "[cluster]\ncontrollers = 2\nnode_ttl_ms = 4000\n\
                    [[workload]]\nname = \"web\"\ncopies = 1\n";
        let m = parse("m", text).unwrap();
        // The lease the store held when the partition began had ended at 5 s.
        let cut = [fault(FaultKind::Partition, 2, 20_000, 1)];
        let judge = |end| {
            let mut out = outcome(
                vec![ProcRecord {
                    host: 2,
                    ..proc(1, "node-1", "web-0", 10, Some(end))
                }],
                SimStore::new(),
            );
            out.cut_leases.push(crate::world::CutLease {
                fault: 0,
                host: 2,
                expires_ms: 5_000,
                lease: 1,
                until_ms: 20_001,
            });
            let mut v = Vec::new();
            late_fences(&m, &cut, &out, &mut v);
            checks(&v)
        };
        assert_eq!(judge(10_000), [], "ended 10 s before the cut");
        assert_eq!(judge(20_500), [Check::LateFence], "up when the cut began");
    }

    #[test]
    fn a_copy_stopped_when_cut_off_is_late_unless_its_agent_was_paused_before_its_deadline() {
        use crate::faults::FaultKind;
        // An intent copy stopped 4 s after a cut, grace 3 s, node lease 4 s: due by 1,000 +
        // 4,000 + 1,000 + 3,000 + 400 = 9,400 ms for a cut at 1,000 that lasts 20 s.
        let text = "[cluster]\ncontrollers = 2\nnode_ttl_ms = 4000\n\
                    [[workload]]\nname = \"web\"\ncontroller = \"intent\"\ncopies = 1\n\
                    grace_ms = 3000\nstop_when_cut_off_ms = 4000\n";
        let m = parse("m", text).unwrap();
        let fault = |kind, at_ms, duration_ms| Fault {
            at_ms,
            kind,
            host: 2,
            duration_ms,
        };
        let late = |end| ProcRecord {
            host: 2,
            ..proc(1, "node-1", "web-0", 10, Some(end))
        };
        let judge = |faults: &[Fault], end| {
            let mut v = Vec::new();
            late_fences(
                &m,
                faults,
                &outcome(vec![late(end)], SimStore::new()),
                &mut v,
            );
            checks(&v)
        };
        let cut = fault(FaultKind::Partition, 1_000, 20_000);
        assert_eq!(judge(std::slice::from_ref(&cut), 9_000), []);
        assert_eq!(
            judge(std::slice::from_ref(&cut), 12_000),
            [Check::LateFence]
        );
        // Paused from 8 s, after the node lease's end (5 s) but before the copy's deadline:
        // the agent could not stop it (stop-when-cut-off.toml, seed 2,857).
        let paused = [cut.clone(), fault(FaultKind::Pause, 8_000, 5_000)];
        assert_eq!(judge(&paused, 12_000), []);
        // Paused only after the deadline: no excuse.
        let after = [cut, fault(FaultKind::Pause, 9_500, 5_000)];
        assert_eq!(judge(&after, 12_000), [Check::LateFence]);
    }

    #[test]
    fn deleting_a_running_owned_copy_that_was_not_surplus_is_a_needed_delete() {
        // Three copies desired; web-0 … web-2 run on live nodes, web-3 on node-3 too.
        let procs = vec![
            proc(1, "node-1", "web-0", 10, None),
            proc(2, "node-2", "web-1", 10, None),
            proc(3, "node-3", "web-2", 10, Some(2_000)),
            proc(4, "node-3", "web-3", 10, None),
        ];
        let owned = |copies: &[(&str, &str)]| -> Vec<(String, String)> {
            copies
                .iter()
                .map(|(c, n)| (c.to_string(), n.to_string()))
                .collect()
        };
        let all = owned(&[
            ("web-0", "node-1"),
            ("web-1", "node-2"),
            ("web-2", "node-3"),
            ("web-3", "node-3"),
        ]);
        let delete = |at_ms: u64, copy: &str, node: &str| DeleteRecord {
            at_ms,
            host: 0,
            workload: "web".into(),
            copy: copy.into(),
            node: node.into(),
            owned: true,
            node_live: true,
            desired: 3,
            owned_copies: all.clone(),
            shown_running: BTreeSet::new(),
        };
        // At 1,000 four copies run for three desired: taking one back is legal.
        assert!(needed_deletes(&[delete(1_000, "web-0", "node-1")], &procs).is_empty());
        // At 3,000 web-2 has ended: the three left are all needed, and deleting one is caught.
        let v = needed_deletes(&[delete(3_000, "web-0", "node-1")], &procs);
        assert_eq!(checks(&v), [Check::NeededDelete], "{v:?}");
        assert!(
            v[0].detail.contains("while 3 owned copies of web ran"),
            "{v:?}"
        );
        // Unless the store's report of node-3 still showed web-2 running: its death was unseen
        // and four copies ran as far as anything could know (finding 16). Another pid of the
        // same name shown running is not it.
        let shown = |pid: u32| DeleteRecord {
            shown_running: [("node-3".to_owned(), pid)].into(),
            ..delete(3_000, "web-0", "node-1")
        };
        let web2 = procs.iter().find(|p| p.copy == "web-2").unwrap().pid;
        assert!(needed_deletes(&[shown(web2)], &procs).is_empty());
        let v = needed_deletes(&[shown(web2 + 1000)], &procs);
        assert_eq!(checks(&v), [Check::NeededDelete], "{v:?}");
        // Two deletes in one commit both counting the unseen death: the second is caught, with
        // what the reports showed.
        let second = DeleteRecord {
            owned_copies: owned(&[
                ("web-1", "node-2"),
                ("web-2", "node-3"),
                ("web-3", "node-3"),
            ]),
            ..shown(web2)
        };
        let v = needed_deletes(&[shown(web2), second], &procs);
        assert_eq!(checks(&v), [Check::NeededDelete], "{v:?}");
        assert!(
            v[0].detail
                .contains("and the reports showed 1 more that had ended"),
            "{v:?}"
        );
        // Collecting the ended copy, an orphan, or a lost node's copy is not.
        let legal = [
            delete(3_000, "web-2", "node-3"),
            DeleteRecord {
                owned: false,
                ..delete(3_000, "web-0", "node-1")
            },
            DeleteRecord {
                node_live: false,
                ..delete(3_000, "web-0", "node-1")
            },
        ];
        assert!(needed_deletes(&legal, &procs).is_empty());
        // The second removal of one commit sees the first one gone (its record leaves it out).
        let second = DeleteRecord {
            owned_copies: owned(&[
                ("web-1", "node-2"),
                ("web-2", "node-3"),
                ("web-3", "node-3"),
            ]),
            ..delete(1_000, "web-1", "node-2")
        };
        let v = needed_deletes(&[delete(1_000, "web-0", "node-1"), second], &procs);
        assert_eq!(checks(&v), [Check::NeededDelete], "{v:?}");
        // And `check` reports it.
        let m = parse("m", "[[workload]]\nname = \"web\"\ncopies = 3\n").unwrap();
        let mut out = outcome(procs, SimStore::new());
        out.deletes = vec![delete(3_000, "web-0", "node-1")];
        assert!(checks(&check(&m, &[], &[], &out)).contains(&Check::NeededDelete));
    }

    #[test]
    fn a_repeated_request_id_and_a_second_watch_of_the_same_prefixes_are_each_caught() {
        use crate::world::{DuplicateWatch, Protocol};
        let m = parse("m", "[[workload]]\nname = \"web\"\ncopies = 0\n").unwrap();
        let mut v = Vec::new();
        protocol(&m, &[], &Protocol::default(), &mut v);
        assert!(v.is_empty(), "{v:?}");
        let seen = Protocol {
            repeated_ids: vec![(1_000, 2, 17), (1_500, 2, 18)],
            ..Protocol::default()
        };
        protocol(&m, &[], &seen, &mut v);
        assert_eq!(checks(&v), [Check::RepeatedRequest], "one per host: {v:?}");
        assert!(v[0].detail.contains("id 17"), "{v:?}");
        let seen = Protocol {
            duplicate_watches: vec![DuplicateWatch {
                at_ms: 2_000,
                host: 0,
                open: 4,
                new: 9,
                prefixes: vec!["/leader".into()],
            }],
            ..Protocol::default()
        };
        let mut v = Vec::new();
        protocol(&m, &[], &seen, &mut v);
        assert_eq!(checks(&v), [Check::LeakedWatch], "{v:?}");
        // At the limit passes; one more in one second fails, and names the host and when.
        let busy = |count| Protocol {
            busiest: vec![(3, 100), (count, 61_000)],
            ..Protocol::default()
        };
        let mut v = Vec::new();
        protocol(&m, &[], &busy(STORM_LIMIT), &mut v);
        assert!(v.is_empty(), "{v:?}");
        protocol(&m, &[], &busy(STORM_LIMIT + 1), &mut v);
        assert_eq!(checks(&v), [Check::RequestStorm], "{v:?}");
        assert_eq!(v[0].at_ms, 61_000);
        assert!(v[0].detail.starts_with("host 1 sent 101 "), "{v:?}");
    }

    #[test]
    fn a_named_copy_started_without_its_nodes_lease_is_an_unleased_start() {
        use crate::world::{Protocol, UnleasedStart};
        let text = "[[workload]]\nname = \"web\"\ncontroller = \"named\"\ncopies = 2\n\
                    [[workload]]\nname = \"api\"\ncontroller = \"intent\"\ncopies = 2\n";
        let m = parse("m", text).unwrap();
        let start = |at_ms, host, workload: &str| UnleasedStart {
            at_ms,
            host,
            copy: format!("{workload}-0"),
            workload: workload.into(),
            why: "/nodes/node-1's lease 7 expired at 900 ms".into(),
        };
        // A counted controller's copy restarted by an agent cut off from the store is legal.
        let seen = Protocol {
            unleased_starts: vec![start(1_000, 3, "api")],
            ..Protocol::default()
        };
        let mut v = Vec::new();
        protocol(&m, &[], &seen, &mut v);
        assert!(v.is_empty(), "{v:?}");
        // A `named` one is not; one violation a host, the first.
        let seen = Protocol {
            unleased_starts: vec![
                start(1_000, 3, "api"),
                start(2_000, 3, "web"),
                start(2_500, 3, "web"),
                start(3_000, 4, "web"),
            ],
            ..Protocol::default()
        };
        protocol(&m, &[], &seen, &mut v);
        assert_eq!(
            checks(&v),
            [Check::UnleasedStart, Check::UnleasedStart],
            "{v:?}"
        );
        assert_eq!((v[0].at_ms, v[1].at_ms), (2_000, 3_000));
        assert_eq!(
            v[0].detail,
            "agent host 3 started web-0 while /nodes/node-1's lease 7 expired at 900 ms"
        );
    }

    /// A fault of the schedule.
    fn fault(kind: crate::faults::FaultKind, host: usize, at_ms: u64, duration_ms: u64) -> Fault {
        Fault {
            at_ms,
            kind,
            host,
            duration_ms,
        }
    }

    #[test]
    fn a_leader_lease_that_expires_with_its_controller_unhindered_is_a_needless_step_down() {
        use crate::faults::FaultKind;
        use crate::world::Protocol;
        // Leader TTL 5,000 ms, a round trip of at most 2 × (1 + 4) ms: the window before an
        // expiry at 20,000 is 14,490 .. 20,000.
        let text = "[network]\ndelay_ms = 1\njitter_ms = 4\n\
                    [[workload]]\nname = \"web\"\ncopies = 1\n";
        let m = parse("m", text).unwrap();
        let seen = Protocol {
            leader_expiries: vec![(20_000, 0)],
            ..Protocol::default()
        };
        let judge = |m: &Model, schedule: &[Fault]| {
            let mut v = Vec::new();
            protocol(m, schedule, &seen, &mut v);
            checks(&v)
        };
        assert_eq!(judge(&m, &[]), [Check::NeedlessStepDown]);
        // Faults elsewhere, of another kind, or ended before the window do not excuse it.
        for f in [
            fault(FaultKind::Pause, 1, 15_000, 3_000),
            fault(FaultKind::LeaderChange, 0, 16_000, 0),
            fault(FaultKind::Partition, 0, 10_000, 4_000),
        ] {
            assert_eq!(
                judge(&m, std::slice::from_ref(&f)),
                [Check::NeedlessStepDown],
                "{f:?}"
            );
        }
        // A store leader change inside the window renewed every lease: the window reaches a
        // TTL back from it, to the restart of the leader that had left the lease behind
        // (agent-restarts.toml, seed 885: a restart at 298,155 ms, a leader change at 301,487
        // ms, the restarted controller's old lease revoked at 306,500 ms).
        let restart = fault(FaultKind::Restart, 0, 12_000, 0);
        assert_eq!(
            judge(&m, std::slice::from_ref(&restart)),
            [Check::NeedlessStepDown]
        );
        let change = fault(FaultKind::LeaderChange, 0, 15_000, 0);
        assert_eq!(judge(&m, &[restart, change]), []);
        // A pause, a cut, a slow link or a restart of the leader, or a quorum loss, within it do.
        for f in [
            fault(FaultKind::Pause, 0, 10_000, 4_500),
            fault(FaultKind::CutDown, 0, 19_000, 3_000),
            fault(FaultKind::Slow, 0, 15_000, 1_000),
            fault(FaultKind::Restart, 0, 15_000, 0),
            fault(FaultKind::QuorumLoss, 2, 12_000, 3_000),
        ] {
            assert_eq!(judge(&m, std::slice::from_ref(&f)), [], "{f:?}");
        }
        // Nor where three round trips and two polls, on a clock 5 % fast, last a lease
        // (lease-pressure.toml's network: 300 ms + up to 700 ms each way).
        let slow = parse(
            "m",
            "[cluster]\ndrift_max_ppm = 50000\n[network]\ndelay_ms = 300\njitter_ms = 700\n\
             [[workload]]\nname = \"web\"\ncopies = 1\n",
        );
        assert_eq!(judge(&slow.unwrap(), &[]), []);
        // On a lossy network nothing is promised.
        let lossy = parse("m", &format!("{text}\n")).map(|mut m| {
            m.net.loss_ppm = 1_000;
            m
        });
        assert_eq!(judge(&lossy.unwrap(), &[]), []);
    }

    #[test]
    fn a_node_lease_that_expires_with_its_agent_unhindered_is_a_needless_node_loss() {
        use crate::faults::FaultKind;
        use crate::world::Protocol;
        // Node TTL 10,000 ms (the default), a round trip of at most 10 ms: the window before an
        // expiry of agent host 2's lease at 40,000 is 29,490 .. 40,000.
        let text = "[network]\ndelay_ms = 1\njitter_ms = 4\n\
                    [[workload]]\nname = \"web\"\ncopies = 1\n";
        let m = parse("m", text).unwrap();
        let seen = Protocol {
            node_expiries: vec![(40_000, 2)],
            ..Protocol::default()
        };
        let judge = |schedule: &[Fault]| {
            let mut v = Vec::new();
            protocol(&m, schedule, &seen, &mut v);
            v
        };
        let v = judge(&[]);
        assert_eq!(checks(&v), [Check::NeedlessNodeLoss], "{v:?}");
        assert!(v[0].detail.contains("agent host 2"), "{v:?}");
        assert_eq!(v[0].at_ms, 40_000);
        // Another host's fault, a crash, or a cut of host 2 that ended before the window do
        // not excuse it.
        for f in [
            fault(FaultKind::Partition, 3, 35_000, 3_000),
            fault(FaultKind::Crash, 2, 35_000, 0),
            fault(FaultKind::Partition, 2, 20_000, 9_000),
        ] {
            assert_eq!(
                checks(&judge(std::slice::from_ref(&f))),
                [Check::NeedlessNodeLoss],
                "{f:?}"
            );
        }
        // A cut, a pause or a restart of host 2, or a store that refuses, within it do.
        for f in [
            fault(FaultKind::Partition, 2, 20_000, 10_000),
            fault(FaultKind::Pause, 2, 39_000, 500),
            fault(FaultKind::Restart, 2, 31_000, 0),
            fault(FaultKind::Refuse, 0, 30_000, 100),
        ] {
            assert_eq!(checks(&judge(std::slice::from_ref(&f))), [], "{f:?}");
        }
        // The leader's expiry is judged apart: only the node check fires here.
        let both = Protocol {
            leader_expiries: vec![(40_000, 0)],
            ..seen.clone()
        };
        let mut v = Vec::new();
        protocol(
            &m,
            &[fault(FaultKind::Pause, 2, 39_000, 500)],
            &both,
            &mut v,
        );
        assert_eq!(checks(&v), [Check::NeedlessStepDown]);
    }
}
