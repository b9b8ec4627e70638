//! The faults of the schedule: what the world does when each starts and ends.

use setpoint_runtime::store::Txn;

use super::{Ev, World, EPOCH_MS};
use crate::faults::FaultKind;
use crate::machine::{Exit, Input};
use crate::net::Dir;

impl World<'_> {
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

    pub(super) fn fault(&mut self, i: usize, start: bool) {
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
            FaultKind::Refuse => {
                if start {
                    self.refusing += 1;
                    if self.refusing == 1 {
                        self.break_every_watch();
                    }
                } else {
                    self.refusing = self.refusing.saturating_sub(1);
                    if self.refusing == 0 {
                        // Restarted: every lease gets its full time to live, as after a
                        // leader change.
                        self.store.leader_change(self.now);
                    }
                }
            }
            // The operator's writes fail while the store has no quorum or is down.
            FaultKind::Kill | FaultKind::Redeclare if self.quorum_lost > 0 || self.refusing > 0 => {
            }
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
}
