//! The event queue: the events a run schedules, kept in (time, sequence) order, and what the
//! world does when each comes due.

use setpoint_runtime::machine::{ReqId, StoreRequest};
use setpoint_runtime::model::LEADER;

use super::procs::r_was_up;
use super::World;
use crate::machine::{Exit, Input};
use crate::net::Dir;

#[derive(Debug)]
pub(super) enum Ev {
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

/// What a queued item stands for. A wake is most of the queue's traffic (every step of a
/// machine asks for one) and small, so it is carried by value; any other event is large (it
/// carries requests and replies by value) and the queue moves items (into its lists' nodes,
/// through its heap as it sifts), so the queue holds only its place.
#[derive(Clone, Copy)]
pub(super) enum Due {
    /// [`Ev::Wake`], without a slot.
    Wake {
        /// The host.
        host: u32,
        /// Its wake generation when asked.
        gen: u64,
    },
    /// The event in this slot of [`Pending`].
    Slot(u32),
}

/// The events in the queue, each in a slot that is reused once its event is handled: one
/// allocation for the run instead of one per event.
#[derive(Default)]
pub(super) struct Pending {
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

    pub(super) fn take(&mut self, slot: u32) -> Ev {
        self.free.push(slot);
        self.evs[slot as usize]
            .take()
            .expect("a queued item's slot holds its event")
    }
}

impl World<'_> {
    pub(super) fn push(&mut self, at: u64, ev: Ev) {
        match ev {
            Ev::Wake { host, gen } => self.push_wake(at, host, gen),
            ev => {
                let slot = self.pending.put(ev);
                self.queue_due(at, Due::Slot(slot));
            }
        }
    }

    /// [`World::push`] of [`Ev::Wake`], without building the event: every step of a machine
    /// asks for one.
    pub(super) fn push_wake(&mut self, at: u64, host: usize, gen: u64) {
        self.queue_due(
            at,
            Due::Wake {
                host: host as u32,
                gen,
            },
        );
    }

    fn queue_due(&mut self, at: u64, due: Due) {
        self.queue.push(at, due);
    }

    /// The event `due` stands for, taken out of [`Pending`] if it waits there.
    pub(super) fn take(&mut self, due: Due) -> Ev {
        match due {
            Due::Wake { host, gen } => Ev::Wake {
                host: host as usize,
                gen,
            },
            Due::Slot(slot) => self.pending.take(slot),
        }
    }

    pub(super) fn handle(&mut self, ev: Ev) {
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
                if self.refusing > 0 {
                    // Down: the connection is refused, and the client says so at once (to
                    // the life that sent it; an earlier life's connection is gone).
                    if self.slots[host].life == life {
                        self.refuse(host, id, &req);
                    }
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
            Ev::Lessor if self.quorum_lost > 0 || self.refusing > 0 => {
                // No leader, no revocation: leases wait for the new leader's reset.
                let next = (self.now / 500 + 1) * 500;
                self.push(next, Ev::Lessor);
            }
            Ev::Lessor if self.store.checks_revoke_nothing(self.now) => {
                // Nothing to revoke (most checks, one every half second): the checks pass with
                // no lease expired, nothing is written, no leader's or node's lease ends.
                self.store.advance(self.now);
                let next = self.store.next_check_ms();
                self.push(next, Ev::Lessor);
            }
            Ev::Lessor => {
                let before = self.store.revision();
                let leader = self
                    .store
                    .entry(LEADER)
                    .and_then(|e| e.lease)
                    .and_then(|l| self.store.lease_owner(l).flatten().map(|host| (l, host)));
                let nodes = self.node_leases_expiring();
                self.store.advance(self.now);
                for (lease, host) in nodes {
                    if self.store.lease_expiry(lease).is_none() {
                        self.protocol.node_expiries.push((self.now, host));
                    }
                }
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
                while let Some(answer) = self.slots[host].answers.pop_front() {
                    self.step(host, answer);
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
}
