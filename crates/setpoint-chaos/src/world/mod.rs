//! The world on virtual time: hosts running a machine each, the store, the network, processes,
//! and the fault schedule, all driven by one event queue.
//!
//! # Rules
//! - Time is an integer of milliseconds from 0. Events run in (time, sequence) order: two events
//!   at one millisecond run in the order they were scheduled. One seeded generator
//!   ([`WorldRng`]) draws every jitter, loss and crash victim, in event order, so a seed and a
//!   schedule give one run, byte for byte.
//! - Every clock reads [`EPOCH_MS`] plus virtual time; a host's clock adds its skew (drawn per
//!   host in `0 ..= 2 × skew_max`, so host clocks differ by at most that much) and, with drift,
//!   `drift_ppm` millionths of virtual time (a clock that runs fast or slow; never backwards).
//!   The store's clock has neither: lease expiry is decided on it.
//! - A hung store member ([`FaultKind::Hang`]) swallows the host's requests and holds its
//!   watch events until it recovers; a quorum loss ([`FaultKind::QuorumLoss`]) serves no
//!   request of any host, expires no lease, and resets every lease when it ends; a store that
//!   refuses connections ([`FaultKind::Refuse`]) does the same, but answers every request at
//!   once with `unavailable` and breaks every open watch stream when it goes down.
//! - A paused host is not stepped: its inputs queue and are handed over, in order, when the
//!   pause ends, followed by a tick. Its processes keep running.
//! - A process starts `start_ms` after its agent asks, ends `term_exit_ms` after SIGTERM or at
//!   once after SIGKILL, and crashes when the schedule says. Its agent hears of both.
//! - A watch event lost on the network breaks the watch: the host learns it after
//!   [`WATCH_BREAK_MS`] (as a client library notices its stream died) by a
//!   [`WatchEvent::Lost`], and must read again.
//! - A run that handles more than its event budget stops with [`RunError::Budget`]: a machine
//!   that asks to be woken in a loop cannot hang the lab.
//!
//! # Parts
//! One [`World`] holds the run; each file adds one part of it, in an `impl World` of its own:
//! - `events.rs`: the event queue, in (time, sequence) order, and what each event does;
//! - `queue.rs`: that order kept cheaply: a list per millisecond of the next second, a heap for
//!   the rest;
//! - `clock.rs`: the hosts' clocks, with their skew and drift;
//! - `hosts.rs`: the hosts, a machine each: stepping it, carrying out its outputs, restarting
//!   it;
//! - `procs.rs`: the simulated processes: ending them, finding them, planting impostors;
//! - `delivery.rs`: the network between the hosts and the store: requests up, replies and
//!   watch events down, broken watches;
//! - `serve.rs`: the store's side: serving a request, fanning out the changes to the watches;
//! - `inject.rs`: the faults of the schedule, started and ended;
//! - `shutdown.rs`: the world's side of the `shutdown` fault;
//! - `outcome.rs`: what a run leaves for the checks, and its recording as the run goes;
//! - `removals.rs`: the facts of each assignment a controller removes, for the checks.
//!
//! [`FaultKind::Hang`]: crate::faults::FaultKind::Hang
//! [`FaultKind::QuorumLoss`]: crate::faults::FaultKind::QuorumLoss
//! [`FaultKind::Refuse`]: crate::faults::FaultKind::Refuse
//! [`WatchEvent::Lost`]: setpoint_runtime::store::WatchEvent::Lost

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use setpoint_runtime::machine::ReqId;
use setpoint_runtime::store::Txn;
use setpoint_sim::delay::WorldRng;

use crate::faults::Fault;
use crate::machine::{Input, Machine, Output, Role};
use crate::net::{Net, NetConfig};
use crate::store::SimStore;

mod clock;
mod delivery;
mod events;
mod hosts;
mod inject;
mod outcome;
mod procs;
mod queue;
mod removals;
mod serve;
mod shutdown;

pub use clock::{host_clock, virtual_at};
pub use outcome::{
    CutLease, DeleteRecord, DuplicateWatch, Outcome, ProcRecord, Protocol, UnfencedWrite,
    UnleasedStart,
};

use events::{Due, Ev, Pending};
use hosts::{SentIds, Slot};
use queue::Queue;

/// What every clock adds to virtual time: a plausible "milliseconds since the Unix epoch", so
/// that nothing in the machines subtracts below zero.
pub const EPOCH_MS: u64 = 1_800_000_000_000;

/// How long a host takes to notice that a watch stream broke, milliseconds.
pub const WATCH_BREAK_MS: u64 = 1_000;

/// The window in which the check `request-storm` counts a host's store requests,
/// milliseconds ([`Protocol::busiest`]).
pub const BURST_WINDOW_MS: u64 = 1_000;

/// Everything a run needs besides the machines.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The hosts, in index order.
    pub roles: Vec<Role>,
    /// Each host's clock skew, milliseconds added to virtual time.
    pub skews_ms: Vec<u64>,
    /// Each host's clock drift, parts per million of virtual time added (negative: a slow
    /// clock); missing hosts do not drift.
    pub drifts_ppm: Vec<i64>,
    /// The network.
    pub net: NetConfig,
    /// How long a process takes to start, milliseconds.
    pub start_ms: u64,
    /// How long a process takes to exit after SIGTERM, milliseconds.
    pub term_exit_ms: u64,
    /// When the run ends, milliseconds.
    pub duration_ms: u64,
    /// The most events a run may handle.
    pub event_budget: u64,
    /// Keys and values the operator writes at time 0 (the declarations).
    pub declarations: Vec<(String, String)>,
    /// The faults, by start time.
    pub schedule: Vec<Fault>,
    /// Whether to keep a trace of the run.
    pub trace: bool,
}

/// Why a run did not finish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The run handled more events than its budget allows; raise `event_budget` in the fault
    /// model if the workload really needs them, or look for a machine that wakes in a loop.
    #[error("the run exceeded its event budget of {budget} events at {at_ms} ms; host {busiest} was stepped most in the last 100,000 events: raise event_budget or look for a machine that wakes itself in a loop")]
    Budget {
        /// The budget.
        budget: u64,
        /// Virtual time when it was exceeded.
        at_ms: u64,
        /// The host stepped most often in the last 100,000 events.
        busiest: usize,
        /// The last 300 lines of the trace, if one was kept.
        tail: Vec<String>,
    },
}

/// Makes the machine of host `index` with `role`, at its clock's `now_ms`.
pub type Factory<'a> = dyn Fn(usize, &Role, u64) -> Box<dyn Machine> + 'a;

/// A world in the middle of a run.
pub struct World<'a> {
    now: u64,
    events: u64,
    queue: Queue<Due>,
    pending: Pending,
    /// The buffer a machine's step writes its outputs to, empty between steps.
    outputs: Vec<Output>,
    rng: WorldRng,
    setup: &'a Setup,
    factory: &'a Factory<'a>,
    slots: Vec<Slot>,
    store: SimStore,
    net: Net,
    watches: BTreeMap<(usize, ReqId), Vec<String>>,
    procs: Vec<ProcRecord>,
    live: BTreeMap<(usize, String), usize>,
    /// Live processes no agent watches: started by an agent's earlier life, not (yet) adopted.
    strays: BTreeSet<usize>,
    unfenced: Vec<UnfencedWrite>,
    deletes: Vec<DeleteRecord>,
    cut_leases: Vec<CutLease>,
    /// The latest life of its host that proved each lease: was granted it, or renewed it (a
    /// restarted agent takes its node's lease over so), by a request of that life.
    lease_lives: BTreeMap<setpoint_runtime::store::LeaseId, u64>,
    /// How many `quorum-loss` faults hold the store now.
    quorum_lost: u32,
    /// How many `refuse` faults hold the store down now.
    refusing: u32,
    trace: Vec<String>,
    leaders: Vec<(u64, Option<crate::store::Client>)>,
    protocol: Protocol,
    recent_steps: Vec<u64>,
    impostors: crate::impostors::Record,
    /// The processes that are impostors (by index), each with its index in `impostors.planted`.
    impostor_procs: BTreeMap<usize, usize>,
    /// The shutdowns under way and done.
    shutdowns: crate::shutdowns::Tracker,
    /// Store values decoded for the records of removed assignments.
    decoded: removals::Decoded,
}

/// Runs `setup` with machines from `factory`, seeded with `seed`.
pub fn run(setup: &Setup, factory: &Factory<'_>, seed: u64) -> Result<Outcome, RunError> {
    let mut w = World {
        now: 0,
        events: 0,
        queue: Queue::default(),
        pending: Pending::default(),
        outputs: Vec::new(),
        rng: WorldRng::new(seed),
        setup,
        factory,
        slots: Vec::with_capacity(setup.roles.len()),
        store: SimStore::new(),
        net: Net::new(setup.net, setup.roles.len()),
        watches: BTreeMap::new(),
        procs: Vec::new(),
        live: BTreeMap::new(),
        strays: BTreeSet::new(),
        unfenced: Vec::new(),
        deletes: Vec::new(),
        cut_leases: Vec::new(),
        lease_lives: BTreeMap::new(),
        quorum_lost: 0,
        refusing: 0,
        trace: Vec::new(),
        leaders: Vec::new(),
        protocol: Protocol::default(),
        recent_steps: vec![0; setup.roles.len()],
        impostors: Default::default(),
        impostor_procs: BTreeMap::new(),
        shutdowns: Default::default(),
        decoded: Default::default(),
    };
    for (key, value) in &setup.declarations {
        w.store
            .commit(&Txn::new().put(key.clone(), value.clone()))
            .expect("an unconditional put of the operator commits");
    }
    for (i, role) in setup.roles.iter().enumerate() {
        let offset = setup.skews_ms.get(i).copied().unwrap_or(0);
        let drift_ppm = setup.drifts_ppm.get(i).copied().unwrap_or(0);
        let machine = factory(i, role, EPOCH_MS + offset);
        w.slots.push(Slot {
            role: role.clone(),
            machine,
            offset,
            drift_ppm,
            hung: 0,
            hung_out: VecDeque::new(),
            gen: 0,
            life: 0,
            paused: 0,
            inbox: VecDeque::new(),
            stalled: 0,
            held: VecDeque::new(),
            stopped: false,
            disk: None,
            lease_file: None,
            hold: None,
            held_out: VecDeque::new(),
            answers: VecDeque::new(),
            ids: SentIds::default(),
            recent_sends: VecDeque::new(),
            cancelled: BTreeSet::new(),
        });
    }
    for (i, f) in setup.schedule.iter().enumerate() {
        w.push(f.at_ms, Ev::FaultStart(i));
    }
    w.push(w.store.next_check_ms(), Ev::Lessor);
    for i in 0..w.slots.len() {
        w.step(i, Input::Tick);
    }
    while let Some((at, due)) = w.queue.pop() {
        if at > setup.duration_ms {
            break;
        }
        w.events += 1;
        if w.events % 100_000 == 0 {
            w.recent_steps.iter_mut().for_each(|c| *c = 0);
        }
        if w.events > setup.event_budget {
            let busiest = (0..w.recent_steps.len())
                .max_by_key(|&i| (w.recent_steps[i], std::cmp::Reverse(i)))
                .unwrap_or(0);
            let from = w.trace.len().saturating_sub(300);
            return Err(RunError::Budget {
                budget: setup.event_budget,
                at_ms: at,
                busiest,
                tail: w.trace.split_off(from),
            });
        }
        w.now = at;
        let ev = w.take(due);
        w.handle(ev);
        if setup.trace {
            w.note_leader();
        }
    }
    w.now = setup.duration_ms;
    for (&p, &i) in &w.impostor_procs {
        w.impostors.planted[i].end_ms = w.procs[p].end_ms;
    }
    let procs = if w.impostor_procs.is_empty() {
        w.procs
    } else {
        let impostors = &w.impostor_procs;
        w.procs
            .into_iter()
            .enumerate()
            .filter(|(p, _)| !impostors.contains_key(p))
            .map(|(_, r)| r)
            .collect()
    };
    Ok(Outcome {
        events: w.events,
        end_ms: setup.duration_ms,
        procs,
        unfenced: w.unfenced,
        deletes: w.deletes,
        cut_leases: w.cut_leases,
        store: w.store,
        trace: w.trace,
        leaders: w.leaders,
        protocol: w.protocol,
        impostors: w.impostors,
        shutdowns: w.shutdowns.into_record(),
    })
}

#[cfg(test)]
mod tests;
