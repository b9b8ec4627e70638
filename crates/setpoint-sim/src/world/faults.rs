//! What ends copies: delete commands that reach them, kills, scripted events (deaths, node
//! losses, redeclarations, pauses) and crash loops.

use super::*;

impl Engine<'_> {
    /// A delete command reaches copy `id` of workload `w` at `t`: it stops, and its
    /// assignment is gone. Returns whether it was alive.
    #[inline]
    pub(super) fn stop(&mut self, w: usize, id: u64, t: Time) -> bool {
        let work = &mut self.works[w];
        work.commanded.insert(id);
        // Most commands of a ledger-driven loop reach copies already dead, whose end the
        // ledger has not heard of yet: nothing more to do for them.
        !work.copies[id as usize].dead && self.kill(w, id, t)
    }

    /// Kills copy `id` of workload `w` at `t`. Returns whether it was alive.
    pub(super) fn kill(&mut self, w: usize, id: u64, t: Time) -> bool {
        let (alive, started) = self.kill_unreported(w, id);
        if started {
            // The ledger heard of its start, or will: it must hear of its end too. A copy that
            // never started was never reported, and nothing needs taking back.
            self.report(w, id, true, t);
        }
        alive
    }

    /// [`Engine::kill`] but for the report of its end: returns whether copy `id` was alive,
    /// and whether its end must be reported (it had started).
    #[inline]
    pub(super) fn kill_unreported(&mut self, w: usize, id: u64) -> (bool, bool) {
        let work = &mut self.works[w];
        let rec = &mut work.copies[id as usize];
        if rec.dead {
            return (false, false);
        }
        rec.dead = true;
        let started = rec.started;
        let name = rec.name;
        work.dirty = true;
        if let Some(name) = name {
            if let Some(ids) = work.existing_names.get_mut(&name) {
                ids.remove(&id);
                if ids.is_empty() {
                    work.existing_names.remove(&name);
                }
            }
        }
        if started {
            work.live.remove(id);
            if let Some(name) = name {
                decrement(&mut work.live_names, name);
            }
        }
        (true, started)
    }

    // Not inlined into `Engine::drain_queue`, as `fail` and `land` are not: with these rare
    // paths inside, the drain set up a 440-byte frame on every call; without, 168 bytes (a
    // lesson G = 60 run 70 instructions fewer, callgrind, issue 24 part 11).
    #[inline(never)]
    pub(super) fn scripted(&mut self, i: usize, t: Time) {
        let e = &self.spec.events[i];
        let targets = self.targets(e.workload.as_deref());
        for w in targets {
            match e.event {
                Event::Deaths(toll) => {
                    let live = self.works[w].live.len() as u64;
                    let k = match toll {
                        Toll::Count(n) => n.min(live),
                        Toll::PartsPerMillion(ppm) => {
                            (u128::from(live) * u128::from(ppm) / 1_000_000) as u64
                        }
                    };
                    let victims: Vec<u64> = self.works[w].live.iter().take(k as usize).collect();
                    for id in victims {
                        self.kill(w, id, t);
                    }
                    self.works[w].tally.died += k;
                }
                Event::Scale { desired } => {
                    let work = &mut self.works[w];
                    if desired > work.desired {
                        work.tally.required += desired - work.desired;
                    }
                    work.desired = desired;
                    work.dirty = true;
                }
                Event::Outage { .. } => {}
                Event::Restart => {
                    self.controllers[w].restart();
                    self.works[w].dirty = true;
                }
                Event::Stale { seconds } => {
                    if seconds == 0 {
                        continue;
                    }
                    let reported_before = self.reported_before(t).min(t);
                    let work = &mut self.works[w];
                    work.stale_depth += 1;
                    if work.stale_depth == 1 {
                        work.frozen = Some(Frozen {
                            shown: work.shown.clone(),
                            names: work.shown_names.clone(),
                            reported_before,
                        });
                    }
                    work.dirty = true;
                    self.push(t.saturating_add(seconds), SCRIPTED, Ev::StaleEnd { w });
                }
                Event::LoseDeletes { count } => {
                    let work = &mut self.works[w];
                    work.lost_armed = work.lost_armed.saturating_add(count);
                }
                Event::CrashLoop {
                    after,
                    starts,
                    backoff,
                } => {
                    let work = &mut self.works[w];
                    work.crash = Some((after, starts));
                    work.backoff = Some(backoff);
                }
                Event::Update {
                    max_surge,
                    max_unavailable,
                    progress_deadline,
                    counts_pending,
                } => {
                    let work = &mut self.works[w];
                    work.generation += 1;
                    work.rollout_settings = Some(RolloutSettings {
                        max_surge,
                        max_unavailable,
                        progress_deadline,
                        counts_pending,
                    });
                    work.update_pending = true;
                    work.tally.updates += 1;
                    work.dirty = true;
                }
            }
        }
    }

    /// A crash-looping copy ends at `t` by itself: a failed start if it never became ready,
    /// otherwise a death. Either way its key backs off, as the runtime counts every uncommanded
    /// exit (the lesson's deaths are commanded, and replaced at once).
    // Not inlined into the drain: see `Engine::scripted`.
    #[inline(never)]
    pub(super) fn fail(&mut self, w: usize, id: u64, t: Time) {
        let rec = &self.works[w].copies[id as usize];
        let (started, created, name) = (rec.started, rec.created, rec.name);
        if !self.kill(w, id, t) {
            return;
        }
        let work = &mut self.works[w];
        if started {
            work.tally.died += 1;
        }
        let key = if self.spec.controller.kind == ControllerKind::Named {
            name
        } else {
            None
        };
        if let Some(policy) = work.backoff {
            work.backoffs
                .entry(key)
                .or_default()
                .record(&policy, created, t);
        }
    }
}
