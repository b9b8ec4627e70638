//! The hosts: each a machine in a slot with its clock, its pauses, stalls and hangs, and its
//! files; stepping it, carrying out what it outputs, and restarting it.

use std::collections::{BTreeSet, VecDeque};

use setpoint_runtime::agent::NodeState;
use setpoint_runtime::machine::{ReqId, StoreRequest};

use super::procs::start_ticks;
use super::{host_clock, virtual_at, Ev, ProcRecord, UnleasedStart, World, BURST_WINDOW_MS};
use crate::faults::FaultKind;
use crate::machine::{Exit, Input, Machine, Output, Role};

pub(super) struct Slot {
    pub(super) role: Role,
    pub(super) machine: Box<dyn Machine>,
    pub(super) offset: u64,
    /// The clock's drift, parts per million of virtual time.
    pub(super) drift_ppm: i64,
    /// How many `hang` faults hold the store member this host talks to.
    pub(super) hung: u32,
    /// What the hung member owes the host (watch events, in order), sent when it recovers.
    pub(super) hung_out: VecDeque<Input>,
    pub(super) gen: u64,
    /// Bumped when the host restarts: what was sent to its earlier life is dropped.
    pub(super) life: u64,
    pub(super) paused: u32,
    pub(super) inbox: VecDeque<Input>,
    /// How many `stall` faults hold this host's requests now.
    pub(super) stalled: u32,
    /// The requests held by a stall, in the order sent.
    pub(super) held: VecDeque<(ReqId, StoreRequest)>,
    pub(super) stopped: bool,
    /// The agent's state file, as last written (agents only).
    pub(super) disk: Option<NodeState>,
    /// The agent's lease file, as last written (agents only).
    pub(super) lease_file: Option<u64>,
    /// The driver waits (for a foreign process to stop) until then: the host is not stepped,
    /// and the rest of its outputs are carried out after.
    pub(super) hold: Option<u64>,
    /// The outputs waiting for the hold to end, in order.
    pub(super) held_out: VecDeque<Output>,
    /// The driver's answers (what a `Recover` found, how many strays a `StopStrays`
    /// signalled), handed over in order once the step's other outputs are carried out.
    pub(super) answers: VecDeque<Input>,
    /// The request ids this life of the host has sent.
    pub(super) ids: SentIds,
    /// When this life of the host sent its requests of the last [`BURST_WINDOW_MS`].
    pub(super) recent_sends: VecDeque<u64>,
    /// The watches this life of the host has cancelled: one whose request is still on the
    /// way (held by a stall, say) is not opened when it arrives, as the cancel behind it on
    /// the same connection would close it at once.
    pub(super) cancelled: BTreeSet<ReqId>,
}

/// A set of request ids, in ascending order: a machine numbers its requests upwards, so an id
/// is nearly always pushed at the end (no tree node to allocate, no search).
#[derive(Default)]
pub(super) struct SentIds(Vec<ReqId>);

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

impl World<'_> {
    /// Counts a request `host` sends now in its current life's window of the last
    /// [`BURST_WINDOW_MS`], and keeps the busiest window of each host ([`Protocol::busiest`]).
    ///
    /// [`Protocol::busiest`]: super::Protocol::busiest
    fn note_send(&mut self, host: usize) {
        let now = self.now;
        let sent = &mut self.slots[host].recent_sends;
        while sent.front().is_some_and(|&t| t + BURST_WINDOW_MS <= now) {
            sent.pop_front();
        }
        sent.push_back(now);
        let count = sent.len() as u64;
        let busiest = &mut self.protocol.busiest;
        if busiest.len() <= host {
            busiest.resize(host + 1, (0, 0));
        }
        if count > busiest[host].0 {
            busiest[host] = (count, now);
        }
    }

    /// Hands `input` to host `host`, or queues it while the host is paused.
    pub(super) fn step(&mut self, host: usize, input: Input) {
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
        if matches!(input, Input::Tick) && slot.hold.is_none() {
            // A leader's poll with nothing due, or an agent's tick that only moves its clocks
            // (most ticks of either): its only output is its wake, carried out as the step's
            // would be (no answer can be queued behind it).
            if let Some(at) = slot.machine.quiet_tick(clock) {
                self.wake(host, at);
                return;
            }
        }
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
        // The driver queues its answers (to `Recover`, to `StopStrays`) behind the outputs of
        // the step that asked.
        while let Some(answer) = self.slots[host].answers.pop_front() {
            self.step(host, answer);
        }
    }

    /// Ends one pause of `host` (a fault's or the driver's wait); after the last, hands over
    /// what queued meanwhile, in order, then a tick.
    pub(super) fn unpause(&mut self, host: usize) {
        let slot = &mut self.slots[host];
        slot.paused = slot.paused.saturating_sub(1);
        if slot.paused == 0 {
            self.flush_inbox(host);
        }
    }

    /// Hands a host that is no longer paused what queued meanwhile, in order, then a tick.
    pub(super) fn flush_inbox(&mut self, host: usize) {
        let queued: Vec<Input> = self.slots[host].inbox.drain(..).collect();
        for input in queued {
            self.step(host, input);
        }
        self.step(host, Input::Tick);
    }

    /// Why agent `host` does not hold `node`'s lease at the store now, if it does not: the
    /// node's key must be held under a lease this life of the host was granted or renewed, not
    /// expired.
    fn unleased(&self, host: usize, node: &str) -> Option<String> {
        let key = setpoint_runtime::model::keys::node_key(node);
        let Some(lease) = self.store.entry(&key).and_then(|e| e.lease) else {
            return Some(format!("{key} is not held under a lease"));
        };
        let life = self.slots[host].life;
        if self.lease_lives.get(&lease) != Some(&life) {
            let whose = match (self.store.lease_owner(lease), self.lease_lives.get(&lease)) {
                (Some(Some(h)), Some(l)) => format!("host {h}'s life {l}"),
                (Some(Some(h)), None) => format!("no live request of host {h}"),
                _ => "no agent's".to_string(),
            };
            return Some(format!(
                "{key} is held under lease {lease}, last proved by {whose}, not this life ({life})"
            ));
        }
        match self.store.lease_expiry(lease) {
            Some(x) if self.now < x => None,
            Some(x) => Some(format!("{key}'s lease {lease} expired at {x} ms")),
            None => Some(format!("{key}'s lease {lease} is gone")),
        }
    }

    /// Carries out `host`'s [`Output::Wake`] at `t` on its clock: the wake it asked for before
    /// is superseded (it still comes due, and is passed over).
    fn wake(&mut self, host: usize, t: u64) {
        let slot = &mut self.slots[host];
        slot.gen += 1;
        let at = slot.virtual_at(t, self.now);
        let gen = slot.gen;
        self.push_wake(at, host, gen);
    }

    pub(super) fn output(&mut self, host: usize, out: Output) {
        if let Output::Request { id, .. } = &out {
            self.note_send(host);
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
            Output::Wake(t) => self.wake(host, t),
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
                if let Some(why) = self.unleased(host, &node) {
                    self.protocol.unleased_starts.push(UnleasedStart {
                        at_ms: self.now,
                        host,
                        copy: copy.clone(),
                        workload: workload.clone(),
                        why,
                    });
                }
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
                self.slots[host].answers.push_back(Input::StraysSignalled {
                    count: strays.len(),
                    spare_kept,
                });
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
                self.slots[host].answers.push_back(Input::Recovered(found));
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

    /// Starts `host`'s machine afresh (a crash and restart by fault `kind`, or the operator's
    /// start after a shutdown, `None`): a new life, which an agent begins by recovering from
    /// its node's state file and process table.
    pub(super) fn restart(&mut self, host: usize, kind: Option<FaultKind>) {
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
        slot.answers.clear();
        // What a hung member owed the old life's watches is gone with them.
        slot.hung_out.clear();
        self.watches.retain(|(h, _), _| *h != host);
        self.slots[host].ids.clear();
        self.slots[host].recent_sends.clear();
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
