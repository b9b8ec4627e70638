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
//!   request of any host, expires no lease, and resets every lease when it ends.
//! - A paused host is not stepped: its inputs queue and are handed over, in order, when the
//!   pause ends, followed by a tick. Its processes keep running.
//! - A process starts `start_ms` after its agent asks, ends `term_exit_ms` after SIGTERM or at
//!   once after SIGKILL, and crashes when the schedule says. Its agent hears of both.
//! - A watch event lost on the network breaks the watch: the host learns it after
//!   [`WATCH_BREAK_MS`] (as a client library notices its stream died) by a
//!   [`WatchEvent::Lost`], and must read again.
//! - A run that handles more than its event budget stops with [`RunError::Budget`]: a machine
//!   that asks to be woken in a loop cannot hang the lab.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

use setpoint_runtime::agent::NodeState;
use setpoint_runtime::machine::{Replied, ReqId, StoreReply, StoreRequest, WatchDelivery};
use setpoint_runtime::model::LEADER;
use setpoint_runtime::store::{Op, Txn, WatchEvent};
use setpoint_sim::delay::WorldRng;

use crate::faults::{Fault, FaultKind};
use crate::machine::{Exit, Input, Machine, Output, Role};
use crate::net::{Dir, Net, NetConfig};

mod shutdown;
use crate::store::SimStore;

/// What every clock adds to virtual time: a plausible "milliseconds since the Unix epoch", so
/// that nothing in the machines subtracts below zero.
pub const EPOCH_MS: u64 = 1_800_000_000_000;

/// How long a host takes to notice that a watch stream broke, milliseconds.
pub const WATCH_BREAK_MS: u64 = 1_000;

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

/// One simulated process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcRecord {
    /// Its pid: no other copy's in the run (a `pid-reuse` impostor, kept apart from the copies
    /// in [`Outcome::impostors`], holds a dead copy's again).
    pub pid: u32,
    /// The host (agent) that started it.
    pub host: usize,
    /// The agent's node.
    pub node: String,
    /// The copy's identity.
    pub copy: String,
    /// The workload.
    pub workload: String,
    /// When it started running, if it did.
    pub up_ms: Option<u64>,
    /// When it ended, if it did.
    pub end_ms: Option<u64>,
    /// When it is scheduled to end.
    pub(crate) down_ms: Option<u64>,
    /// When it is scheduled to start.
    pub(crate) start_at: u64,
    /// The nonce in its environment.
    pub(crate) nonce: String,
    /// A restarted agent adopted it: its end is seen by polling, its status unknown.
    pub(crate) adopted: bool,
}

/// A write committed by a controller that did not hold `/leader` at commit time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnfencedWrite {
    /// When it committed.
    pub at_ms: u64,
    /// The controller host.
    pub host: usize,
    /// The holder of `/leader` then (a host, the operator, or no one).
    pub holder: Option<Option<usize>>,
    /// The first key it wrote.
    pub key: String,
}

/// A controller's commit that removed a copy's assignment (a delete command or garbage
/// collection), with what the store held just before it: the facts the check `needed-delete`
/// judges ([`crate::check`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteRecord {
    /// When it committed, milliseconds.
    pub at_ms: u64,
    /// The controller host.
    pub host: usize,
    /// The workload.
    pub workload: String,
    /// The copy whose assignment was removed.
    pub copy: String,
    /// The node the assignment placed it on.
    pub node: String,
    /// The assignment belonged to the workload's current declaration (its owner uid is the
    /// declaration's create revision): not an orphan of a deleted or redeclared one.
    pub owned: bool,
    /// The node's lease record was in the store: the node was not lost.
    pub node_live: bool,
    /// The workload's desired copies then.
    pub desired: u64,
    /// The workload's owned assignments on live nodes then, as (copy, node), the deleted one
    /// included; the other removals of the same commit, earlier in it, are left out.
    pub owned_copies: Vec<(String, String)>,
    /// The processes the store's reports showed running then, as (node, pid): what any
    /// controller could know of them. A process that ended while its node's report still
    /// shows it running died unseen (chaos finding 16).
    pub shown_running: BTreeSet<(String, u32)>,
}

/// An agent's node lease as the store held it when a fault cut the agent off: the deadline
/// its self-fence must meet, whatever its clock says ([`crate::check`], `late-fence`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CutLease {
    /// The cutting fault, by index in the schedule.
    pub fault: usize,
    /// The agent host cut off.
    pub host: usize,
    /// When its node lease expires at the store, as of the cut's start, milliseconds; later
    /// if a renewal on the wire when the cut began (or held by a stall) reached the store
    /// while the cut lasted.
    pub expires_ms: u64,
    /// The lease.
    pub lease: setpoint_runtime::store::LeaseId,
    /// When the cut ends.
    pub until_ms: u64,
}

/// What the world saw of the hosts' use of the store, as it happened: the facts the checks
/// `repeated-request`, `leaked-watch` and `needless-step-down` judge ([`crate::check`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Protocol {
    /// Each request whose id the same life of a host had sent before: (when it was sent,
    /// milliseconds; the host; the id). A reply or a watch event to the earlier request would
    /// be taken for one to the later.
    pub repeated_ids: Vec<(u64, usize, ReqId)>,
    /// Each watch the store opened while the same life of the host already had an open watch
    /// of exactly the same prefixes, which the host no longer reads.
    pub duplicate_watches: Vec<DuplicateWatch>,
    /// Each time the lessor revoked, on expiry, the lease that held `/leader`: (when,
    /// milliseconds; the controller host whose lease it was).
    pub leader_expiries: Vec<(u64, usize)>,
}

/// A watch opened beside an open one of the same host and prefixes ([`Protocol`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplicateWatch {
    /// When the store opened the new one, milliseconds.
    pub at_ms: u64,
    /// The host.
    pub host: usize,
    /// The watch already open (its request id).
    pub open: ReqId,
    /// The new one.
    pub new: ReqId,
    /// Their prefixes.
    pub prefixes: Vec<String>,
}

/// What a finished run leaves for the checks.
#[derive(Debug)]
pub struct Outcome {
    /// Events handled.
    pub events: u64,
    /// The end time.
    pub end_ms: u64,
    /// Every copy's process (impostors are in `impostors`).
    pub procs: Vec<ProcRecord>,
    /// Commits by controllers that did not hold the leader lease.
    pub unfenced: Vec<UnfencedWrite>,
    /// Every removal of an assignment by a controller's commit, in commit order.
    pub deletes: Vec<DeleteRecord>,
    /// The node leases of agents at the start of each fault that cut them off.
    pub cut_leases: Vec<CutLease>,
    /// The store at the end.
    pub store: SimStore,
    /// The trace, if kept.
    pub trace: Vec<String>,
    /// Who held `/leader` from when, if a trace was kept: each change of holder (a host, the
    /// operator, or no one), in time order, from the first event on.
    pub leaders: Vec<(u64, Option<crate::store::Client>)>,
    /// Request ids, watches and leader lease expiries, as seen by the world.
    pub protocol: Protocol,
    /// The impostors planted (kept apart from `procs`) and the agents' recoveries.
    pub impostors: crate::impostors::Record,
    /// The shutdowns ([`crate::shutdowns`]).
    pub shutdowns: crate::shutdowns::Record,
}

#[derive(Debug)]
enum Ev {
    Wake {
        host: usize,
        gen: u64,
    },
    ToStore {
        host: usize,
        /// The life of the host that sent it.
        life: u64,
        id: ReqId,
        req: StoreRequest,
    },
    ToHost {
        host: usize,
        life: u64,
        input: Input,
        local: bool,
    },
    Lessor,
    FaultStart(usize),
    FaultEnd(usize),
    ProcUp(usize),
    ProcDown {
        proc: usize,
        how: Exit,
    },
    /// The agent's driver has waited out a foreign process's stop until `until`.
    Resume {
        host: usize,
        until: u64,
    },
}

struct Item {
    at: u64,
    seq: u64,
    /// Where the event waits in [`Pending`]: the heap moves items as it sifts, and an event is
    /// large (it carries requests and replies by value), so the heap holds only its place.
    slot: u32,
}

/// The events in the queue, each in a slot that is reused once its event is handled: one
/// allocation for the run instead of one per event.
#[derive(Default)]
struct Pending {
    evs: Vec<Option<Ev>>,
    free: Vec<u32>,
}

impl Pending {
    fn put(&mut self, ev: Ev) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.evs[i as usize] = Some(ev);
                i
            }
            None => {
                self.evs.push(Some(ev));
                (self.evs.len() - 1) as u32
            }
        }
    }

    fn take(&mut self, slot: u32) -> Ev {
        self.free.push(slot);
        self.evs[slot as usize]
            .take()
            .expect("a queued item's slot holds its event")
    }
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    // Reversed: BinaryHeap is a max-heap and the earliest event must come out first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

struct Slot {
    role: Role,
    machine: Box<dyn Machine>,
    offset: u64,
    /// The clock's drift, parts per million of virtual time.
    drift_ppm: i64,
    /// How many `hang` faults hold the store member this host talks to.
    hung: u32,
    /// What the hung member owes the host (watch events, in order), sent when it recovers.
    hung_out: VecDeque<Input>,
    gen: u64,
    /// Bumped when the host restarts: what was sent to its earlier life is dropped.
    life: u64,
    paused: u32,
    inbox: VecDeque<Input>,
    /// How many `stall` faults hold this host's requests now.
    stalled: u32,
    /// The requests held by a stall, in the order sent.
    held: VecDeque<(ReqId, StoreRequest)>,
    stopped: bool,
    /// The agent's state file, as last written (agents only).
    disk: Option<NodeState>,
    /// The agent's lease file, as last written (agents only).
    lease_file: Option<u64>,
    /// The driver waits (for a foreign process to stop) until then: the host is not stepped,
    /// and the rest of its outputs are carried out after.
    hold: Option<u64>,
    /// The outputs waiting for the hold to end, in order.
    held_out: VecDeque<Output>,
    /// What a `Recover` found, handed over once the step's other outputs are carried out.
    recovered: Option<setpoint_runtime::agent::Recovery>,
    /// The request ids this life of the host has sent.
    ids: SentIds,
    /// The watches this life of the host has cancelled: one whose request is still on the
    /// way (held by a stall, say) is not opened when it arrives, as the cancel behind it on
    /// the same connection would close it at once.
    cancelled: BTreeSet<ReqId>,
}

/// A set of request ids, in ascending order: a machine numbers its requests upwards, so an id
/// is nearly always pushed at the end (no tree node to allocate, no search).
#[derive(Default)]
struct SentIds(Vec<ReqId>);

impl SentIds {
    /// Adds `id`; false if it was there already.
    fn insert(&mut self, id: ReqId) -> bool {
        if self.0.last().is_none_or(|&last| last < id) {
            self.0.push(id);
            return true;
        }
        match self.0.binary_search(&id) {
            Ok(_) => false,
            Err(at) => {
                self.0.insert(at, id);
                true
            }
        }
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

impl Slot {
    fn clock(&self, now: u64) -> u64 {
        host_clock(self.offset, self.drift_ppm, now)
    }

    fn virtual_at(&self, t: u64, now: u64) -> u64 {
        virtual_at(self.offset, self.drift_ppm, t, now)
    }
}

/// A host's clock at virtual time `now`: [`EPOCH_MS`] plus `now`, its skew `offset` and its
/// drift of `drift_ppm` millionths of `now` (rounded down). Never goes backwards for a drift
/// above −1,000,000 ppm.
pub fn host_clock(offset: u64, drift_ppm: i64, now: u64) -> u64 {
    if drift_ppm == 0 {
        return EPOCH_MS + offset + now;
    }
    // In 64 bits when the product fits (always, for runs of under 292 years at ±1,000,000
    // ppm): a 128-bit division is a call into the compiler's runtime, on every step.
    let drift = match i64::try_from(now)
        .ok()
        .and_then(|n| n.checked_mul(drift_ppm))
    {
        Some(p) => i128::from(p.div_euclid(1_000_000)),
        None => (i128::from(now) * i128::from(drift_ppm)).div_euclid(1_000_000),
    };
    (i128::from(EPOCH_MS + offset + now) + drift) as u64
}

/// The earliest virtual time, not before `now`, at which that host's clock reads at least `t`
/// (when a wake the host asked for at `t` on its own clock is due).
pub fn virtual_at(offset: u64, drift_ppm: i64, t: u64, now: u64) -> u64 {
    let d = t.saturating_sub(EPOCH_MS + offset);
    if drift_ppm == 0 {
        // The clock reads `EPOCH_MS + offset + v`: `d` is the first time it reads `t`.
        return d.max(now);
    }
    let first = i64::try_from(d)
        .ok()
        .and_then(|d| d.checked_mul(1_000_000))
        .zip(drift_ppm.checked_add(1_000_000));
    let mut v = match first {
        Some((p, q)) => (p / q) as u64,
        None => (i128::from(d) * 1_000_000 / (1_000_000 + i128::from(drift_ppm))) as u64,
    };
    while host_clock(offset, drift_ppm, v) < t {
        v += 1;
    }
    while v > 0 && host_clock(offset, drift_ppm, v - 1) >= t {
        v -= 1;
    }
    v.max(now)
}

/// Makes the machine of host `index` with `role`, at its clock's `now_ms`.
pub type Factory<'a> = dyn Fn(usize, &Role, u64) -> Box<dyn Machine> + 'a;

/// A world in the middle of a run.
pub struct World<'a> {
    now: u64,
    seq: u64,
    events: u64,
    queue: BinaryHeap<Item>,
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
    /// How many `quorum-loss` faults hold the store now.
    quorum_lost: u32,
    trace: Vec<String>,
    leaders: Vec<(u64, Option<crate::store::Client>)>,
    protocol: Protocol,
    recent_steps: Vec<u64>,
    impostors: crate::impostors::Record,
    /// The processes that are impostors (by index), each with its index in `impostors.planted`.
    impostor_procs: BTreeMap<usize, usize>,
    /// The shutdowns under way and done.
    shutdowns: crate::shutdowns::Tracker,
}

/// Runs `setup` with machines from `factory`, seeded with `seed`.
pub fn run(setup: &Setup, factory: &Factory<'_>, seed: u64) -> Result<Outcome, RunError> {
    let mut w = World {
        now: 0,
        seq: 0,
        events: 0,
        queue: BinaryHeap::new(),
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
        quorum_lost: 0,
        trace: Vec::new(),
        leaders: Vec::new(),
        protocol: Protocol::default(),
        recent_steps: vec![0; setup.roles.len()],
        impostors: Default::default(),
        impostor_procs: BTreeMap::new(),
        shutdowns: Default::default(),
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
            recovered: None,
            ids: SentIds::default(),
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
    while let Some(item) = w.queue.pop() {
        if item.at > setup.duration_ms {
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
                at_ms: item.at,
                busiest,
                tail: w.trace.split_off(from),
            });
        }
        w.now = item.at;
        let ev = w.pending.take(item.slot);
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

impl World<'_> {
    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        let slot = self.pending.put(ev);
        self.queue.push(Item {
            at,
            seq: self.seq,
            slot,
        });
    }

    /// Records a change of `/leader`'s holder (traced runs only: it reads the store per event).
    fn note_leader(&mut self) {
        let h = self.store.holder(LEADER);
        if self.leaders.last().map(|l| l.1) != Some(h) {
            self.leaders.push((self.now, h));
        }
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if self.setup.trace {
            let l = format!("{:>9} {}", self.now, line());
            self.trace.push(l);
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Wake { host, gen } => {
                if self.slots[host].gen == gen {
                    self.step(host, Input::Tick);
                }
            }
            Ev::ToStore {
                host,
                life,
                id,
                req,
            } => {
                if !self.net.up(host, Dir::Up) {
                    return;
                }
                if self.quorum_lost > 0 || self.slots[host].hung > 0 {
                    // Never answered: no leader to serve it, or a member that hangs.
                    self.note(|| format!("store leaves host {host} request {id} unanswered"));
                    return;
                }
                // A request of an earlier life of the host still reaches the store, but its
                // connection is gone: nothing answers it, and a watch it asks for is not opened.
                let stale = self.slots[host].life != life;
                self.serve(host, id, req, stale);
            }
            Ev::ToHost {
                host,
                life,
                input,
                local,
            } => {
                if self.slots[host].life == life {
                    self.arrive(host, input, local);
                }
            }
            Ev::Lessor if self.quorum_lost > 0 => {
                // No leader, no revocation: leases wait for the new leader's reset.
                let next = (self.now / 500 + 1) * 500;
                self.push(next, Ev::Lessor);
            }
            Ev::Lessor => {
                let before = self.store.revision();
                let leader = self
                    .store
                    .entry(LEADER)
                    .and_then(|e| e.lease)
                    .and_then(|l| self.store.lease_owner(l).flatten().map(|host| (l, host)));
                self.store.advance(self.now);
                if let Some((lease, host)) = leader {
                    if self.store.lease_expiry(lease).is_none() {
                        self.protocol.leader_expiries.push((self.now, host));
                    }
                }
                self.fan_out(before);
                let next = self.store.next_check_ms();
                self.push(next, Ev::Lessor);
            }
            Ev::Resume { host, until } => {
                if self.slots[host].hold != Some(until) {
                    return;
                }
                let slot = &mut self.slots[host];
                slot.hold = None;
                slot.paused = slot.paused.saturating_sub(1);
                while let Some(out) = self.slots[host].held_out.pop_front() {
                    self.output(host, out);
                    if self.slots[host].hold.is_some() {
                        return; // waiting again
                    }
                }
                if let Some(found) = self.slots[host].recovered.take() {
                    self.step(host, Input::Recovered(found));
                }
                if self.slots[host].paused == 0 {
                    self.flush_inbox(host);
                }
            }
            Ev::FaultStart(i) => self.fault(i, true),
            Ev::FaultEnd(i) => self.fault(i, false),
            Ev::ProcUp(p) => {
                let r = &mut self.procs[p];
                if r.end_ms.is_none() && r.up_ms.is_none() {
                    r.up_ms = Some(self.now);
                    let (host, copy, pid, adopted) = (r.host, r.copy.clone(), r.pid, r.adopted);
                    // Only the life that asked for it hears that it started.
                    if !adopted && self.live.get(&(host, copy.clone())) == Some(&p) {
                        self.step(host, Input::Started { copy, pid });
                    }
                }
            }
            Ev::ProcDown { proc, how } => {
                let r = &mut self.procs[proc];
                if r.end_ms.is_some() || r.down_ms != Some(self.now) {
                    return;
                }
                r.end_ms = Some(self.now);
                let (host, copy, pid, adopted) = (r.host, r.copy.clone(), r.pid, r.adopted);
                let watched = self.live.get(&(host, copy.clone())) == Some(&proc);
                if watched {
                    self.live.remove(&(host, copy.clone()));
                }
                self.strays.remove(&proc);
                self.note(|| format!("proc {pid} {copy} on host {host} ended: {how}"));
                if watched && (adopted || r_was_up(&self.procs[proc])) {
                    let how = if adopted { Exit::Unknown } else { how };
                    self.step(host, Input::Exited { copy, pid, how });
                }
            }
        }
    }

    /// Hands `input` to host `host`, or queues it while the host is paused.
    fn step(&mut self, host: usize, input: Input) {
        let slot = &mut self.slots[host];
        if slot.stopped {
            return;
        }
        if slot.paused > 0 {
            slot.inbox.push_back(input);
            return;
        }
        if let Input::Recovered(found) = &input {
            let shown = found.records.iter().filter(|r| r.process.is_some()).count()
                + found.unclaimed.len();
            self.impostors.recoveries.push(crate::impostors::Recovered {
                host,
                at_ms: self.now,
                listed: shown as u64,
            });
        }
        self.recent_steps[host] += 1;
        let slot = &mut self.slots[host];
        let clock = slot.clock(self.now);
        let mut outputs = std::mem::take(&mut self.outputs);
        slot.machine.step_into(clock, input, &mut outputs);
        for out in outputs.drain(..) {
            if self.slots[host].hold.is_some() {
                self.slots[host].held_out.push_back(out);
            } else {
                self.output(host, out);
            }
        }
        self.outputs = outputs;
        // The driver queues the answer to `Recover` behind the outputs of the step that asked.
        if let Some(found) = self.slots[host].recovered.take() {
            self.step(host, Input::Recovered(found));
        }
    }

    /// Ends one pause of `host` (a fault's or the driver's wait); after the last, hands over
    /// what queued meanwhile, in order, then a tick.
    fn unpause(&mut self, host: usize) {
        let slot = &mut self.slots[host];
        slot.paused = slot.paused.saturating_sub(1);
        if slot.paused == 0 {
            self.flush_inbox(host);
        }
    }

    /// Hands a host that is no longer paused what queued meanwhile, in order, then a tick.
    fn flush_inbox(&mut self, host: usize) {
        let queued: Vec<Input> = self.slots[host].inbox.drain(..).collect();
        for input in queued {
            self.step(host, input);
        }
        self.step(host, Input::Tick);
    }

    fn output(&mut self, host: usize, out: Output) {
        if let Output::Request { id, .. } = &out {
            if !self.slots[host].ids.insert(*id) {
                let id = *id;
                self.note(|| format!("host {host} sends request id {id} again"));
                self.protocol.repeated_ids.push((self.now, host, id));
            }
        }
        match out {
            Output::Request {
                id,
                request: StoreRequest::CancelWatch(w),
            } => {
                let _ = id;
                self.watches.remove(&(host, w));
                self.slots[host].cancelled.insert(w);
            }
            Output::Request { id, request } if self.slots[host].stalled > 0 => {
                self.slots[host].held.push_back((id, request));
            }
            Output::Request { id, request } => {
                self.send_up(host, id, request);
            }
            Output::Wake(t) => {
                let slot = &mut self.slots[host];
                slot.gen += 1;
                let at = slot.virtual_at(t, self.now);
                let gen = slot.gen;
                self.push(at, Ev::Wake { host, gen });
            }
            Output::Start {
                copy,
                workload,
                nonce,
            } => {
                if self.live.contains_key(&(host, copy.clone())) {
                    return;
                }
                let node = match &self.slots[host].role {
                    Role::Agent(n) => n.clone(),
                    Role::Controller => String::new(),
                };
                let p = self.procs.len();
                let start_at = self.now + self.setup.start_ms;
                self.procs.push(ProcRecord {
                    pid: 1000 + p as u32,
                    host,
                    node,
                    copy: copy.clone(),
                    workload,
                    up_ms: None,
                    end_ms: None,
                    down_ms: None,
                    start_at,
                    nonce,
                    adopted: false,
                });
                self.live.insert((host, copy), p);
                self.push(start_at, Ev::ProcUp(p));
            }
            Output::Signal { copy, kill } => {
                if let Some(&p) = self.live.get(&(host, copy)) {
                    let after = if kill { 0 } else { self.setup.term_exit_ms };
                    let how = Exit::Signal(if kill { 9 } else { 15 });
                    self.end_proc(p, self.now + after, how);
                }
            }
            Output::StopStrays { kill, spare_kept } => {
                // A copy the last agent here recorded as kept while cut off is spared by the
                // fence, by the runtime's own rule (not by a shutdown).
                let disk = self.slots[host].disk.as_ref();
                let strays: Vec<usize> = self
                    .strays
                    .iter()
                    .copied()
                    .filter(|&p| self.procs[p].host == host && self.procs[p].end_ms.is_none())
                    .filter(|&p| {
                        let r = &self.procs[p];
                        !spare_kept
                            || !setpoint_runtime::agent::kept_while_cut_off(
                                disk,
                                &crate::node::marked(r.pid, start_ticks(p), &r.copy, &r.nonce),
                            )
                    })
                    .collect();
                let after = if kill { 0 } else { self.setup.term_exit_ms };
                let how = Exit::Signal(if kill { 9 } else { 15 });
                for p in strays {
                    let pid = self.procs[p].pid;
                    self.note(|| format!("host {host} signals stray proc {pid}"));
                    self.end_proc(p, self.now + after, how);
                }
            }
            Output::Log { who, line } => self.note(|| match who {
                Some(who) => format!("host {host}: {who}: {line}"),
                None => format!("host {host}: {line}"),
            }),
            Output::Stopped => self.note_stopped(host),
            Output::SaveState(state) => self.slots[host].disk = Some(state),
            Output::LeaseKept { sent_ms } => self.slots[host].lease_file = Some(sent_ms),
            Output::Recover => {
                let mut live: Vec<crate::node::Seen> = self
                    .strays
                    .iter()
                    .map(|&p| (p, &self.procs[p]))
                    .filter(|(_, r)| r.host == host)
                    .map(|(p, r)| crate::node::Seen {
                        pid: r.pid,
                        start_ticks: start_ticks(p),
                        copy: r.copy.clone(),
                        nonce: r.nonce.clone(),
                    })
                    .collect();
                // In `/proc`'s order: by pid (a reused pid comes before later processes).
                live.sort_by_key(|s| s.pid);
                let found = crate::node::recovery(self.slots[host].disk.as_ref(), &live);
                self.slots[host].recovered = Some(found);
            }
            Output::Adopt {
                copy,
                pid,
                start_ticks,
            } => match self.node_proc(host, pid, start_ticks) {
                Some(p) => {
                    self.strays.remove(&p);
                    self.procs[p].adopted = true;
                    if let Some(&i) = self.impostor_procs.get(&p) {
                        self.impostors.planted[i].adopted_ms.get_or_insert(self.now);
                    }
                    self.note(|| format!("host {host} adopts proc {pid} as {copy}"));
                    self.live.insert((host, copy), p);
                }
                None => self.note(|| format!("host {host} adopts proc {pid}: no such process")),
            },
            Output::StopForeign {
                pid,
                start_ticks,
                grace_ms,
            } => {
                let Some(p) = self.node_proc(host, pid, start_ticks) else {
                    return;
                };
                let (after, how) = if self.setup.term_exit_ms <= grace_ms {
                    (self.setup.term_exit_ms, Exit::Signal(15))
                } else {
                    (grace_ms, Exit::Signal(9))
                };
                self.note(|| format!("host {host} stops foreign proc {pid}"));
                self.end_proc(p, self.now + after, how);
                let until = self.procs[p].down_ms.unwrap_or(self.now);
                if until > self.now {
                    let slot = &mut self.slots[host];
                    if slot.hold.is_none() {
                        slot.paused += 1;
                    }
                    slot.hold = Some(until);
                    self.push(until, Ev::Resume { host, until });
                }
            }
        }
    }

    /// The live process `pid` started at `ticks` on `host`'s node, by index.
    fn node_proc(&self, host: usize, pid: u32, ticks: u64) -> Option<usize> {
        let p = usize::try_from(ticks.checked_sub(1000)?).ok()?;
        let r = self.procs.get(p)?;
        (r.pid == pid && r.host == host && r.end_ms.is_none()).then_some(p)
    }

    /// Plants an impostor of `kind` on `host`'s node, imitating a record of its state file
    /// drawn at random ([`crate::impostors::plant`]); nothing if no record fits.
    fn plant(&mut self, host: usize, kind: crate::impostors::Kind) {
        let Role::Agent(node) = &self.slots[host].role else {
            return;
        };
        let p = self.procs.len();
        let planted = crate::impostors::plant(
            kind,
            host,
            node,
            self.slots[host].disk.as_ref(),
            &self.procs,
            (self.now, start_ticks(p)),
            |n| self.rng.uniform(0, n - 1) as usize,
        );
        let Some((proc, impostor)) = planted else {
            self.note(|| format!("host {host}: no record for {} to imitate", kind.name()));
            return;
        };
        self.note(|| {
            format!(
                "host {host}: {} proc {} carries the mark of {} (recorded pid {})",
                kind.name(),
                impostor.pid,
                impostor.copy,
                impostor.of_pid
            )
        });
        self.procs.push(proc);
        // No agent watches it: a stray to the restarted agent, as an earlier life's copies.
        self.strays.insert(p);
        self.impostor_procs.insert(p, self.impostors.planted.len());
        self.impostors.planted.push(impostor);
    }

    /// Schedules process `p` to end at `at` (not before it starts), unless it ends sooner.
    fn end_proc(&mut self, p: usize, at: u64, how: Exit) {
        let r = &mut self.procs[p];
        let at = at.max(r.start_at);
        if r.end_ms.is_some() || r.down_ms.is_some_and(|d| d <= at) {
            return;
        }
        r.down_ms = Some(at);
        self.push(at, Ev::ProcDown { proc: p, how });
    }

    fn reply(&mut self, host: usize, input: Input) {
        if self.slots[host].hung > 0 {
            // The hung member owes it; the stream stays open and silent.
            self.slots[host].hung_out.push_back(input);
            return;
        }
        if let Some(at) = self.net.send(&mut self.rng, host, Dir::Down, self.now) {
            let life = self.slots[host].life;
            self.push(
                at,
                Ev::ToHost {
                    host,
                    life,
                    input,
                    local: false,
                },
            );
        } else if let Input::Watch(d) = &input {
            self.break_watch(host, d.watch);
        }
    }

    /// The watch's stream broke: the store forgets it and the host hears `Lost` later.
    fn break_watch(&mut self, host: usize, watch: ReqId) {
        if self.watches.remove(&(host, watch)).is_some() {
            let at = self.now + WATCH_BREAK_MS;
            let life = self.slots[host].life;
            self.push(
                at,
                Ev::ToHost {
                    host,
                    life,
                    input: Input::Watch(WatchDelivery {
                        watch,
                        event: WatchEvent::Lost("the watch stream broke".into()),
                    }),
                    local: true,
                },
            );
        }
    }

    fn arrive(&mut self, host: usize, input: Input, local: bool) {
        if !local && !self.net.up(host, Dir::Down) {
            if let Input::Watch(d) = &input {
                self.break_watch(host, d.watch);
            }
            return;
        }
        if let Input::Watch(d) = &input {
            let lost = matches!(d.event, WatchEvent::Lost(_));
            if !lost && !self.watches.contains_key(&(host, d.watch)) {
                return; // cancelled or broken since: the client drops it
            }
        }
        self.step(host, input);
    }

    fn serve(&mut self, host: usize, id: ReqId, req: StoreRequest, stale: bool) {
        self.note(|| format!("store serves host {host} request {id}: {}", brief(&req)));
        let before = self.store.revision();
        let now = self.now;
        let result = match req {
            StoreRequest::Read { prefixes } => Ok(StoreReply::Read {
                read: self.store.read(&prefixes),
                now_ms: EPOCH_MS + now,
            }),
            StoreRequest::Commit(txn) => {
                let holder = self.store.holder(LEADER);
                let controller = self.slots[host].role == Role::Controller;
                let removals = if controller {
                    self.removals(host, &txn)
                } else {
                    Vec::new()
                };
                let r = self.store.commit(&txn);
                if r.is_ok() && controller {
                    self.check_fence(host, holder, &txn);
                    self.deletes.extend(removals);
                }
                r.map(StoreReply::Committed)
            }
            StoreRequest::Revision => Ok(StoreReply::Revision(self.store.revision())),
            StoreRequest::Grant { ttl } => Ok(StoreReply::Granted(self.store.grant(
                now,
                ttl.as_millis() as u64,
                Some(host),
            ))),
            StoreRequest::KeepAlive(l) => {
                let kept = self.store.keep_alive(now, l);
                if kept.is_ok() {
                    self.note_late_renewal(host, l);
                }
                kept.map(|()| StoreReply::KeptAlive)
            }
            StoreRequest::Revoke(l) => {
                self.store.revoke(l);
                Ok(StoreReply::Revoked)
            }
            StoreRequest::Watch { .. } if stale => return,
            StoreRequest::Watch { .. } if self.slots[host].cancelled.contains(&id) => {
                self.reply(
                    host,
                    Input::Replied(Replied {
                        id,
                        result: Ok(StoreReply::Watching),
                    }),
                );
                return;
            }
            StoreRequest::Watch { prefixes, after } => {
                self.reply(
                    host,
                    Input::Replied(Replied {
                        id,
                        result: Ok(StoreReply::Watching),
                    }),
                );
                match self.store.since(after, &prefixes) {
                    Ok(past) => {
                        let open = self
                            .watches
                            .iter()
                            .find(|((h, _), p)| *h == host && **p == prefixes)
                            .map(|((_, w), _)| *w);
                        if let Some(open) = open {
                            self.protocol.duplicate_watches.push(DuplicateWatch {
                                at_ms: now,
                                host,
                                open,
                                new: id,
                                prefixes: prefixes.clone(),
                            });
                        }
                        self.watches.insert((host, id), prefixes);
                        for r in past {
                            self.deliver(host, id, r.revision, r.changes);
                        }
                    }
                    Err(c) => self.reply(
                        host,
                        Input::Watch(WatchDelivery {
                            watch: id,
                            event: WatchEvent::Lost(format!(
                                "required revision {} has been compacted (compacted to {})",
                                after + 1,
                                c.compacted
                            )),
                        }),
                    ),
                }
                self.fan_out(before);
                return;
            }
            StoreRequest::CancelWatch(_) => return,
        };
        if !stale {
            self.reply(host, Input::Replied(Replied { id, result }));
        }
        self.fan_out(before);
    }

    /// Records the node lease of each agent fault `f` (number `i`) cuts off, as the store
    /// holds it now.
    fn note_cut_leases(&mut self, i: usize, f: &Fault) {
        let hosts: Vec<usize> = if f.kind == FaultKind::QuorumLoss {
            (0..self.slots.len()).collect()
        } else {
            vec![f.host]
        };
        for host in hosts {
            let Role::Agent(node) = &self.slots[host].role else {
                continue;
            };
            let key = setpoint_runtime::model::keys::node_key(node);
            let lease = self.store.entry(&key).and_then(|e| e.lease);
            let expiry = lease.and_then(|l| self.store.lease_expiry(l).map(|x| (l, x)));
            if let Some((lease, expires_ms)) = expiry {
                self.cut_leases.push(CutLease {
                    fault: i,
                    host,
                    expires_ms,
                    lease,
                    until_ms: f.at_ms + f.duration_ms,
                });
            }
        }
    }

    /// A renewal of `lease` by `host` that reaches the store while a cut of that host lasts
    /// (it was on the wire when the cut began, or a stall released it): the lease the cut
    /// holds the agent to now ends later, as the store says.
    fn note_late_renewal(&mut self, host: usize, lease: setpoint_runtime::store::LeaseId) {
        let now = self.now;
        let Some(expiry) = self.store.lease_expiry(lease) else {
            return;
        };
        for c in &mut self.cut_leases {
            if c.host == host && c.lease == lease && now < c.until_ms {
                c.expires_ms = c.expires_ms.max(expiry);
            }
        }
    }

    /// The assignments `txn` removes, each with what the store holds before the commit (and
    /// without the removals earlier in the same commit): see [`DeleteRecord`].
    fn removals(&self, host: usize, txn: &Txn) -> Vec<DeleteRecord> {
        use setpoint_runtime::model::{
            decode, keys::node_key, report_key, Assignment, NodeReport, Phase, WorkloadSpec,
            ASSIGNMENTS,
        };
        let mut out = Vec::new();
        let mut gone: BTreeSet<String> = BTreeSet::new();
        for op in &txn.ops {
            let Op::Delete { key } = op else { continue };
            if !key.starts_with(ASSIGNMENTS) {
                continue;
            }
            let Some(a) = self
                .store
                .entry(key)
                .and_then(|e| decode::<Assignment>(e).ok())
            else {
                continue;
            };
            let a = a.value;
            let wkey = setpoint_runtime::model::workload_key(&a.workload);
            let decl = self.store.entry(&wkey);
            let uid = decl.map(|e| e.create_revision);
            let desired = decl
                .and_then(|e| decode::<WorkloadSpec>(e).ok())
                .map_or(0, |w| w.value.copies);
            let prefix = format!("{ASSIGNMENTS}{}/", a.workload);
            let owned_copies: Vec<(String, String)> = self
                .store
                .entries()
                .filter(|e| e.key.starts_with(&prefix) && !gone.contains(&e.key))
                .filter_map(|e| decode::<Assignment>(e).ok())
                .filter(|o| Some(o.value.owner_uid) == uid)
                .filter(|o| self.store.entry(&node_key(&o.value.node)).is_some())
                .map(|o| (o.value.copy, o.value.node))
                .collect();
            gone.insert(key.clone());
            let shown_running = owned_copies
                .iter()
                .map(|(_, node)| node)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .filter_map(|node| self.store.entry(&report_key(node)))
                .filter_map(|e| decode::<NodeReport>(e).ok())
                .flat_map(|r| {
                    let node = r.value.node;
                    r.value
                        .copies
                        .into_iter()
                        .filter(|c| c.phase == Phase::Running)
                        .map(move |c| (node.clone(), c.pid))
                })
                .collect();
            out.push(DeleteRecord {
                at_ms: self.now,
                host,
                owned: Some(a.owner_uid) == uid,
                node_live: self.store.entry(&node_key(&a.node)).is_some(),
                desired,
                owned_copies,
                shown_running,
                workload: a.workload,
                copy: a.copy,
                node: a.node,
            });
        }
        out
    }

    fn check_fence(&mut self, host: usize, holder: Option<Option<usize>>, txn: &Txn) {
        // A fenced commit (the usual one) needs no key.
        if holder == Some(Some(host)) {
            return;
        }
        let key = txn.ops.iter().find_map(|op| {
            let k = match op {
                Op::Put { key, .. } | Op::Delete { key } => key,
            };
            (k != LEADER).then(|| k.clone())
        });
        if let Some(key) = key {
            self.note(|| format!("UNFENCED write of {key} by host {host}"));
            self.unfenced.push(UnfencedWrite {
                at_ms: self.now,
                host,
                holder,
                key,
            });
        }
    }

    /// Sends one request up `host`'s link, now.
    fn send_up(&mut self, host: usize, id: ReqId, request: StoreRequest) {
        if let Some(at) = self.net.send(&mut self.rng, host, Dir::Up, self.now) {
            self.push(
                at,
                Ev::ToStore {
                    host,
                    life: self.slots[host].life,
                    id,
                    req: request,
                },
            );
        }
    }

    fn deliver(
        &mut self,
        host: usize,
        watch: ReqId,
        revision: u64,
        changes: Vec<setpoint_runtime::store::Change>,
    ) {
        self.reply(
            host,
            Input::Watch(WatchDelivery {
                watch,
                event: WatchEvent::Changes { revision, changes },
            }),
        );
    }

    /// Sends every watch the changes after revision `before`.
    /// Writes a kill request for process `p`'s copy, as `setpoint kill` does: its agent
    /// carries it out when the watch brings it. Nothing if the copy has no assignment.
    fn request_kill(&mut self, p: usize) {
        let r = &self.procs[p];
        let Some(n) = r
            .copy
            .strip_prefix(r.workload.as_str())
            .and_then(|t| t.strip_prefix('-'))
            .and_then(|t| t.parse::<u64>().ok())
        else {
            return;
        };
        let Some(incarnation) = self
            .store
            .entry(&setpoint_runtime::model::assignment_key(&r.workload, n))
            .map(|e| e.create_revision)
        else {
            return;
        };
        let key = format!("{}{}", setpoint_runtime::remote::kills_of(&r.node), r.copy);
        let req = setpoint_runtime::remote::KillRequest {
            copy: r.copy.clone(),
            incarnation,
            requested_ms: EPOCH_MS + self.now,
            outcome: None,
        };
        let before = self.store.revision();
        let txn = Txn::new()
            .expect(&key, 0)
            .put(&key, setpoint_runtime::model::encode(&req));
        if self.store.commit(&txn).is_ok() {
            self.fan_out(before);
        }
    }

    fn fan_out(&mut self, before: u64) {
        if self.store.revision() == before || self.watches.is_empty() {
            return;
        }
        let mut sends = Vec::new();
        for ((host, id), prefixes) in &self.watches {
            if let Ok(revs) = self.store.since(before, prefixes) {
                for r in revs {
                    sends.push((*host, *id, r));
                }
            }
        }
        for (host, id, r) in sends {
            self.deliver(host, id, r.revision, r.changes);
        }
    }

    fn fault(&mut self, i: usize, start: bool) {
        let f = self.setup.schedule[i].clone();
        let host = f.host.min(self.slots.len().saturating_sub(1));
        self.note(|| {
            format!(
                "fault {} {:?} host {host}",
                if start { "start" } else { "end" },
                f.kind
            )
        });
        if start && f.kind.cuts_off() {
            self.note_cut_leases(i, &f);
        }
        let cut = |w: &mut Self, dirs: &[Dir]| {
            for &d in dirs {
                w.net.set_cut(host, d, start);
            }
        };
        match f.kind {
            FaultKind::Partition => cut(self, &[Dir::Up, Dir::Down]),
            FaultKind::CutUp => cut(self, &[Dir::Up]),
            FaultKind::CutDown => cut(self, &[Dir::Down]),
            FaultKind::Stall => {
                let slot = &mut self.slots[host];
                if start {
                    slot.stalled += 1;
                } else {
                    slot.stalled = slot.stalled.saturating_sub(1);
                    if slot.stalled == 0 {
                        let held: Vec<_> = slot.held.drain(..).collect();
                        for (id, request) in held {
                            self.send_up(host, id, request);
                        }
                    }
                }
            }
            FaultKind::Pause => {
                if start {
                    self.slots[host].paused += 1;
                } else {
                    self.unpause(host);
                }
            }
            FaultKind::Slow => self.net.set_slow(host, start),
            FaultKind::Hang => {
                let slot = &mut self.slots[host];
                if start {
                    slot.hung += 1;
                } else {
                    slot.hung = slot.hung.saturating_sub(1);
                    if slot.hung == 0 {
                        let owed: Vec<Input> = slot.hung_out.drain(..).collect();
                        for input in owed {
                            self.reply(host, input);
                        }
                    }
                }
            }
            FaultKind::QuorumLoss => {
                if start {
                    self.quorum_lost += 1;
                } else {
                    self.quorum_lost = self.quorum_lost.saturating_sub(1);
                    if self.quorum_lost == 0 {
                        // A new leader: every lease gets its full time to live (etcd #9395).
                        self.store.leader_change(self.now);
                    }
                }
            }
            // The operator's writes fail while the store has no quorum.
            FaultKind::Kill | FaultKind::Redeclare if self.quorum_lost > 0 => {}
            FaultKind::Crash if start => {
                let live: Vec<usize> = self
                    .live
                    .values()
                    .chain(self.strays.iter())
                    .copied()
                    .collect();
                if !live.is_empty() {
                    let k = self.rng.uniform(0, live.len() as u64 - 1) as usize;
                    self.end_proc(live[k], self.now, Exit::Code(1));
                }
            }
            FaultKind::Kill if start => {
                let live: Vec<usize> = self.live.values().copied().collect();
                if !live.is_empty() {
                    let k = self.rng.uniform(0, live.len() as u64 - 1) as usize;
                    self.request_kill(live[k]);
                }
            }
            FaultKind::LeaderChange if start => self.store.leader_change(self.now),
            FaultKind::Compaction if start => {
                let r = self.store.revision();
                self.store.compact(r);
            }
            FaultKind::Redeclare if start => {
                let before = self.store.revision();
                for (key, value) in &self.setup.declarations {
                    let _ = self.store.commit(&Txn::new().delete(key.clone()));
                    let _ = self
                        .store
                        .commit(&Txn::new().put(key.clone(), value.clone()));
                }
                self.fan_out(before);
            }
            FaultKind::Restart
            | FaultKind::LoseState
            | FaultKind::PidReuse
            | FaultKind::Impostor
                if start =>
            {
                if self
                    .shutdowns
                    .crash(host, self.now, self.slots[host].stopped)
                {
                    self.restart(host, Some(f.kind));
                } else {
                    self.note(|| format!("host {host} is shut down: nothing to restart"));
                }
            }
            FaultKind::Shutdown if start => self.shut_down(i, host),
            FaultKind::Shutdown => self.shutdown_over(i, host),
            _ => {}
        }
        if start && f.duration_ms > 0 && f.kind.lasts() {
            self.push(self.now + f.duration_ms, Ev::FaultEnd(i));
        }
    }

    /// Starts `host`'s machine afresh (a crash and restart by fault `kind`, or the operator's
    /// start after a shutdown, `None`): a new life, which an agent begins by recovering from
    /// its node's state file and process table.
    fn restart(&mut self, host: usize, kind: Option<FaultKind>) {
        let slot = &mut self.slots[host];
        slot.stopped = false;
        if kind == Some(FaultKind::LoseState) {
            // The state directory is gone; the process table is not.
            slot.disk = None;
            slot.lease_file = None;
        }
        let clock = slot.clock(self.now);
        slot.machine = (self.factory)(host, &slot.role, clock);
        if let Some(sent) = slot.lease_file {
            slot.machine.inherit_lease(sent);
        }
        slot.gen += 1;
        slot.life += 1;
        slot.inbox.clear();
        // Its old connection is gone, and so is whatever it held.
        slot.held.clear();
        // A driver waiting on a foreign process is gone too; its outputs with it.
        if slot.hold.take().is_some() {
            slot.paused = slot.paused.saturating_sub(1);
        }
        slot.held_out.clear();
        slot.recovered = None;
        // What a hung member owed the old life's watches is gone with them.
        slot.hung_out.clear();
        self.watches.retain(|(h, _), _| *h != host);
        self.slots[host].ids.clear();
        self.slots[host].cancelled.clear();
        // An agent's processes keep running, watched by no one until the new agent
        // adopts them (its disk and the process table stay).
        let mine: Vec<(usize, String)> = self
            .live
            .keys()
            .filter(|(h, _)| *h == host)
            .cloned()
            .collect();
        for k in mine {
            if let Some(p) = self.live.remove(&k) {
                self.strays.insert(p);
            }
        }
        if let Some(kind) = kind.and_then(crate::impostors::Kind::of) {
            self.plant(host, kind);
        }
        self.step(host, Input::Tick);
    }
}

/// The start time in clock ticks of process `p` (by index): later for every later process,
/// and the pid of every copy ([`crate::node`]).
fn start_ticks(p: usize) -> u64 {
    1000 + p as u64
}

fn r_was_up(r: &ProcRecord) -> bool {
    r.up_ms.is_some()
}

/// A request in a few words, for traces.
fn brief(req: &StoreRequest) -> String {
    match req {
        StoreRequest::Read { prefixes } => format!("read {}", prefixes.join(" ")),
        StoreRequest::Commit(t) => {
            let keys: Vec<&str> = t
                .ops
                .iter()
                .map(|op| match op {
                    Op::Put { key, .. } | Op::Delete { key } => key.as_str(),
                })
                .collect();
            format!("commit {}", keys.join(" "))
        }
        StoreRequest::Revision => "revision".into(),
        StoreRequest::Grant { ttl } => format!("grant {} ms", ttl.as_millis()),
        StoreRequest::KeepAlive(l) => format!("keep-alive {l}"),
        StoreRequest::Revoke(l) => format!("revoke {l}"),
        StoreRequest::Watch { prefixes, after } => {
            format!("watch {} after {after}", prefixes.join(" "))
        }
        StoreRequest::CancelWatch(w) => format!("cancel watch {w}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drifting_clock_never_goes_back_and_a_wake_is_due_when_it_reads_the_time_asked() {
        for drift in [-200_000, -137, 0, 1, 999, 200_000] {
            let mut last = 0;
            for now in (0..5_000).chain(599_990..600_010) {
                let c = host_clock(250, drift, now);
                assert!(c >= last, "drift {drift} at {now}");
                last = c;
                let at = virtual_at(250, drift, c, 0);
                assert!(
                    host_clock(250, drift, at) >= c && at <= now,
                    "{drift} {now}"
                );
                assert!(
                    at == 0 || host_clock(250, drift, at - 1) < c,
                    "{drift} {now}"
                );
            }
        }
        // 20 % slow: ten minutes of virtual time read as eight on the host.
        assert_eq!(host_clock(0, -200_000, 600_000), EPOCH_MS + 480_000);
        assert_eq!(virtual_at(0, -200_000, EPOCH_MS + 480_000, 0), 600_000);
        assert_eq!(virtual_at(0, 0, EPOCH_MS + 5, 9), 9, "never in the past");
    }
}
