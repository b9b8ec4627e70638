//! The engine's run: its making and recycling, and the walk of a second: its queue drained in
//! the order the module's documentation gives (`super`).

use super::*;

impl Engine<'_> {
    /// Hands the run's containers to the next run on this thread.
    pub(super) fn recycle(&mut self) {
        self.controllers.clear();
        SPARE.with_borrow_mut(|spare| {
            // Each container is swapped with the empty one the run left there ([`Engine::new`]).
            std::mem::swap(&mut spare.queue, &mut self.queue);
            spare.queue.clear();
            std::mem::swap(&mut spare.transit, &mut self.in_transit);
            spare.transit.clear();
            std::mem::swap(&mut spare.works, &mut self.spare_works);
            if self.targets.capacity() <= KEPT_ENTRIES {
                std::mem::swap(&mut spare.targets, &mut self.targets);
            }
            for w in self.works.drain(..) {
                if w.copies.capacity() <= KEPT_ENTRIES {
                    spare.works.push(WorkSpare {
                        copies: w.copies,
                        live: w.live,
                        shown: w.shown,
                        commanded: w.commanded,
                        ended: w.ended,
                    });
                }
            }
            std::mem::swap(&mut spare.work_list, &mut self.works);
            std::mem::swap(&mut spare.controllers, &mut self.controllers);
        });
    }
}

impl<'s> Engine<'s> {
    // Inline into its one caller in a run: the engine (its generator's block buffer alone is
    // 320 bytes) is then built where it lives instead of being copied out (memcpy was 2.8 % of
    // a Monte Carlo run, callgrind, issue 24 part 4).
    #[inline(always)]
    pub(super) fn new(spec: &'s ScenarioSpec, seed: u64) -> Self {
        // The containers of the last run on this thread, emptied: one allocation fewer each.
        // Swapped into locals one by one: a `Spare` returned whole was moved with `memcpy`.
        let mut spare = Spare::default();
        SPARE.with_borrow_mut(|kept| {
            std::mem::swap(&mut spare.queue, &mut kept.queue);
            std::mem::swap(&mut spare.transit, &mut kept.transit);
            std::mem::swap(&mut spare.works, &mut kept.works);
            std::mem::swap(&mut spare.targets, &mut kept.targets);
            std::mem::swap(&mut spare.work_list, &mut kept.work_list);
            std::mem::swap(&mut spare.controllers, &mut kept.controllers);
        });
        let mut works = std::mem::take(&mut spare.work_list);
        let mut controllers = std::mem::take(&mut spare.controllers);
        controllers.extend(spec.workloads.iter().map(|_| spec.controller.build()));
        works.extend(
            spec.workloads
                .iter()
                .map(|decl| {
                    let mut kept = spare.works.pop().unwrap_or_default();
                    kept.copies.clear();
                    kept.live.clear();
                    kept.shown.clear();
                    kept.commanded.clear();
                    kept.ended.clear();
                    (decl, kept)
                })
                .map(|(decl, kept)| Work {
                    desired: decl.desired,
                    startup: decl.startup,
                    copies: kept.copies,
                    live: kept.live,
                    shown: kept.shown,
                    commanded: kept.commanded,
                    ended: kept.ended,
                    shown_names: BTreeMap::new(),
                    existing_names: BTreeMap::new(),
                    live_names: BTreeMap::new(),
                    frozen: None,
                    stale_depth: 0,
                    outages: Vec::new(),
                    lost_armed: 0,
                    dirty: true,
                    acted: false,
                    tally: Tally {
                        required: decl.desired,
                        ..Tally::default()
                    },
                    crash: None,
                    backoff: None,
                    backoffs: BTreeMap::new(),
                    backoff_wake: None,
                    generation: 1,
                    rollout_settings: None,
                    update_pending: false,
                    rollout: None,
                    allowed: 0,
                    lanes: Vec::new(),
                }),
        );
        let mut engine = Engine {
            spec,
            works,
            controllers,
            queue: spare.queue,
            rng: WorldRng::new(seed),
            in_transit: spare.transit,
            total_created: 0,
            budget: MAX_LAB_COPIES,
            startup_model: None,
            log: None,
            flights: Vec::new(),
            free_flights: Vec::new(),
            targets: spare.targets,
            spare_works: spare.works,
            fixed_report: match &spec.delay {
                crate::delay::DelayModel::Empirical(_) => None,
                // Not random: `sample` returns the least delay without a draw.
                model if !model.is_random() && spec.pipeline.is_per_report() => {
                    Some(whole_seconds(model.min_ms()))
                }
                _ => None,
            },
            nodes: if spec.pipeline.is_per_report() {
                Vec::new()
            } else {
                (0..spec.pipeline.nodes)
                    .map(|_| NodePipe::default())
                    .collect()
            },
        };
        for (i, e) in spec.events.iter().enumerate() {
            engine.push(e.at, SCRIPTED, Ev::Scripted(i));
        }
        let outages = |e: &Event| matches!(e, Event::Outage { seconds } if *seconds > 0);
        if spec.events.iter().any(|e| outages(&e.event)) {
            engine.merge_outages();
        }
        // One exit, the engine built in place: an early `return engine` moved the 750-byte
        // engine with `memcpy` every run (callgrind, issue 24 part 11).
        engine
    }

    /// Each workload's outage windows, sorted and merged where they overlap.
    fn merge_outages(&mut self) {
        let spec = self.spec;
        let mut windows: Vec<Vec<(Time, Time)>> = vec![Vec::new(); spec.workloads.len()];
        for e in &spec.events {
            if let Event::Outage { seconds } = e.event {
                if seconds > 0 {
                    for w in self.targets(e.workload.as_deref()) {
                        windows[w].push((e.at, e.at.saturating_add(seconds)));
                    }
                }
            }
        }
        for (work, mut ws) in self.works.iter_mut().zip(windows) {
            ws.sort_unstable();
            for (start, end) in ws {
                match work.outages.last_mut() {
                    Some(last) if start <= last.1 => last.1 = last.1.max(end),
                    _ => work.outages.push((start, end)),
                }
            }
        }
    }

    #[inline]
    pub(super) fn push(&mut self, at: Time, class: u8, ev: Ev) -> Key {
        self.queue.push(at, class, ev)
    }

    /// The workloads an event strikes.
    pub(super) fn targets(&self, workload: Option<&str>) -> std::ops::Range<usize> {
        match workload {
            None => 0..self.spec.workloads.len(),
            Some(name) => self
                .spec
                .workloads
                .iter()
                .position(|w| w.name == name)
                .map_or(0..0, |i| i..i + 1),
        }
    }

    /// Every change before the returned time is on the ledger, at a pass at `now`.
    pub(super) fn reported_before(&self, now: Time) -> Time {
        self.in_transit
            .earliest()
            .map_or(now + 1, |made| made.min(now + 1))
    }

    /// The next second after `t` at which some workload needs a pass.
    pub(super) fn next_round(&self, t: Time) -> Option<Time> {
        let period = self.spec.period;
        let after = |at: Time| at.div_ceil(period).saturating_mul(period);
        // Plain loops: the iterator chain was 1.3 % of a Monte Carlo run (callgrind, issue 24).
        let mut next: Option<Time> = None;
        for (w, c) in self.works.iter().zip(&self.controllers) {
            let from = if w.dirty || w.acted {
                t + 1
            } else {
                match (c.wake_at(), w.backoff_wake) {
                    (Some(a), Some(b)) => a.min(b).max(t + 1),
                    (Some(a), None) | (None, Some(a)) => a.max(t + 1),
                    (None, None) => continue,
                }
            };
            let at = after(from);
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        next
    }

    /// The second of the next visit after one at `t`: the next round at which a workload
    /// needs a pass or the next queued entry, whichever is first; past the duration, the
    /// second after it.
    #[inline(always)]
    pub(super) fn next_visit(&mut self, t: Time) -> Time {
        let end = self.spec.duration + 1;
        let next = match (self.next_round(t), self.queue.next_time()) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => end,
        };
        next.min(end)
    }

    /// Everything that happens at second `t`, in the documented order.
    pub(super) fn second(&mut self, t: Time) -> Result<(), ScenarioError> {
        self.drain(t)?;
        if t % self.spec.period == 0 {
            for w in 0..self.works.len() {
                let due = self.works[w].dirty
                    || self.works[w].acted
                    || self.controllers[w].wake_at().is_some_and(|at| at <= t)
                    || self.works[w].backoff_wake.is_some_and(|at| at <= t);
                if due {
                    self.pass(w, t)?;
                }
            }
        }
        self.drain(t)
    }

    /// Handles every queued happening of second `t`.
    #[inline(always)]
    pub(super) fn drain(&mut self, t: Time) -> Result<(), ScenarioError> {
        // Most calls find nothing (the drain after the passes of a quiet second): a bit of the
        // calendar tells, without the call and its frame (3 % of a Monte Carlo run).
        if self.queue.surely_none_at(t) {
            return Ok(());
        }
        self.drain_queue(t)
    }

    pub(super) fn drain_queue(&mut self, t: Time) -> Result<(), ScenarioError> {
        while let Some(ev) = self.queue.pop_at(t) {
            match ev {
                Ev::Ready { w, id, n } => self.ready(w, id, n, t),
                Ev::Fail { w, id } => self.fail(w, id, t),
                Ev::Scripted(i) => self.scripted(i, t),
                Ev::StaleEnd { w } => {
                    let work = &mut self.works[w];
                    work.stale_depth -= 1;
                    if work.stale_depth == 0 {
                        work.frozen = None;
                    }
                    work.dirty = true;
                }
                Ev::Arrive {
                    w,
                    id,
                    n,
                    end,
                    made,
                } => self.arrive(w, id, n, end, made),
                Ev::Flight { f } => self.land(f, t),
            }
        }
        Ok(())
    }
}
