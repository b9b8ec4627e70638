//! A workload's pass: the controller's decision on its view, rollouts, and the create and
//! delete commands it sends.

use super::*;

impl Engine<'_> {
    /// Workload `w`'s pass at `t`, and its actions.
    pub(super) fn pass(&mut self, w: usize, t: Time) -> Result<(), ScenarioError> {
        let reported_before = self.reported_before(t);
        // A rolling update drives the copies of a workload that is not `named` until it is
        // done, as in the runtime (`reconcile::plan_pass`); `named` adds its name-by-name
        // deletions to the controller's action.
        let named = self.spec.controller.kind == ControllerKind::Named;
        let copies = {
            let work = &self.works[w];
            if work.update_pending || work.rollout.is_some() {
                let view = View {
                    work,
                    now: t,
                    reported_before,
                };
                rollout_copies(&view, named)
            } else {
                Vec::new()
            }
        };
        let rolling = rollout_gate(&mut self.works[w], &copies, t, named);
        let stalled = self.works[w].rollout.is_some_and(|r| r.stalled);
        if !named && (rolling || stalled) {
            return self.rollout_pass(w, t, &copies, rolling);
        }
        let work = &self.works[w];
        let view = View {
            work,
            now: t,
            reported_before,
        };
        let desired = Desired {
            copies: work.desired,
        };
        // Only a pass that a backoff may hold back needs the controller as it was before.
        let before = work.backoff.is_some().then(|| self.controllers[w].clone());
        let mut action = self.controllers[w].pass(desired, &view);
        // Backoff after failed starts: a held creation is not written, and the controller forgets
        // it tried, as in the runtime (`reconcile::plan_pass`).
        let held = |key: Option<Name>| {
            work.backoffs
                .get(&key)
                .is_some_and(|b| work.backoff.is_some() && b.blocks(t))
        };
        let mut wake = None;
        match &mut action {
            Some(Action::Create { .. }) if held(None) => {
                if let Some(before) = before {
                    self.controllers[w] = before;
                }
                wake = work.backoffs.get(&None).map(|b| b.next_try);
                action = None;
            }
            Some(Action::Named { create, .. }) => {
                create.retain(|&n| {
                    let h = held(Some(n));
                    if h {
                        let at = work.backoffs[&Some(n)].next_try;
                        wake = Some(wake.map_or(at, |w: Time| w.min(at)));
                    }
                    !h
                });
            }
            _ => {}
        }
        let mut needed = 0;
        if rolling {
            let extra = rollout::named_step(work.desired, budget(work), &copies);
            needed = replaced(&copies, &extra);
            action = rollout::with_deletions(action, &extra, work.desired, &copies);
        }
        // Delete commands go where `Controller::delete_targets` sends them: for `intent` in its
        // order, for the others to the oldest copies of the ledger this pass read (CA25), which
        // is taken here without the allocation of `oldest_on_ledger`.
        // (Into a buffer kept across passes: the view's own `oldest_on_ledger` allocates.)
        let mut targets = std::mem::take(&mut self.targets);
        targets.clear();
        let mut oldest = false;
        if let Some(a @ Action::Delete { .. }) = &action {
            let controller = &self.controllers[w];
            if controller.kind() == ControllerKind::Intent {
                let ids = controller.delete_targets(&view, a.size());
                targets.extend(ids.into_iter().map(|c| c.0));
            } else {
                oldest = true;
            }
        }
        let work = &mut self.works[w];
        work.tally.required += needed;
        work.dirty = false;
        work.acted = action.is_some() || rolling;
        work.backoff_wake = wake;
        match action {
            None => {}
            Some(Action::Create { batch, .. }) => {
                debug_assert_eq!(batch.first.0, work.copies.len() as u64);
                self.create_unnamed(w, batch.count, t)?;
            }
            Some(a @ Action::Delete { .. }) if oldest => self.delete_oldest(w, a.size(), t),
            Some(a @ Action::Delete { .. }) => self.delete(w, a.size(), &targets, t),
            Some(Action::Named { create, delete, .. }) => {
                for name in create {
                    let exists = self.works[w].existing_names.contains_key(&name);
                    if exists && self.spec.unique_names {
                        self.works[w].tally.absorbed += 1;
                    } else {
                        self.create(w, Some(name), t)?;
                    }
                }
                for name in delete {
                    self.command(w, |engine| {
                        let ids: Vec<u64> = engine.works[w]
                            .existing_names
                            .get(&name)
                            .map(|ids| ids.iter().copied().collect())
                            .unwrap_or_default();
                        ids.into_iter()
                            .map(|id| u64::from(engine.stop(w, id, t)))
                            .sum()
                    });
                }
            }
        }
        self.targets = targets;
        Ok(())
    }

    /// A rollout's pass of workload `w` (not `named`) at `t`: [`rollout::step`] on `copies`,
    /// unless the rollout stalled (`rolling` false), when nothing is done, as in the runtime.
    pub(super) fn rollout_pass(
        &mut self,
        w: usize,
        t: Time,
        copies: &[rollout::Copy],
        rolling: bool,
    ) -> Result<(), ScenarioError> {
        let work = &mut self.works[w];
        work.dirty = false;
        work.acted = rolling;
        work.backoff_wake = None;
        if !rolling {
            return Ok(());
        }
        let s = rollout::step(work.desired, budget(work), copies);
        work.tally.required += replaced(copies, &s.delete);
        let hold = work
            .backoffs
            .get(&None)
            .filter(|b| work.backoff.is_some() && b.blocks(t))
            .map(|b| b.next_try);
        match hold {
            Some(at) if s.create > 0 => work.backoff_wake = Some(at),
            _ => self.create_unnamed(w, s.create, t)?,
        }
        for id in s.delete {
            self.command(w, |engine| u64::from(engine.stop(w, id, t)));
        }
        Ok(())
    }

    /// `size` delete commands of workload `w` at `t`, the first ones to `targets` in their
    /// order (one without a target deletes nothing): [`Engine::command`] `size` times, in one
    /// step. Deliveries change no loss armed, so the first `lost_armed` commands are the lost
    /// ones; and most commands of a ledger-driven loop reach copies already dead, for which a
    /// delivery only marks the copy commanded (issue 24, part 6: one call per command was a
    /// fifth of a lesson run).
    pub(super) fn delete(&mut self, w: usize, size: u64, targets: &[u64], t: Time) {
        let work = &mut self.works[w];
        let lost = work.lost_armed.min(size);
        work.tally.commands += size;
        work.lost_armed -= lost;
        work.tally.lost += lost;
        let from = usize::try_from(lost)
            .unwrap_or(usize::MAX)
            .min(targets.len());
        let to = usize::try_from(size)
            .unwrap_or(usize::MAX)
            .min(targets.len());
        let mut deleted = 0;
        // Under a delay that draws nothing and with no log, the ends of consecutive copies
        // killed here go in one report each run ([`Engine::report_fixed`]): the queue ends as
        // after one report each, in the order of the kills.
        let batch = self.fixed_report.is_some() && self.log.is_none();
        let mut run: (u64, u64) = (0, 0);
        for &id in &targets[from..to.max(from)] {
            let work = &mut self.works[w];
            work.commanded.insert(id);
            if work.copies[id as usize].dead {
                continue;
            }
            deleted += u64::from(self.kill_in_run(w, id, batch, &mut run, t));
        }
        self.report_fixed(w, run.0, run.1, true, t);
        self.works[w].tally.deleted += deleted;
    }

    /// [`Engine::delete`] with the oldest copies of the ledger the pass read as the targets
    /// (as many as `size`, all of them if fewer), taken 64 at a time from its bitset: each
    /// word of targets is marked commanded at once, and only the living among them (the
    /// targets the live set holds) are killed, in ascending order as before. Most targets of
    /// a ledger-driven loop are copies already dead whose end the ledger has not heard of
    /// (94 of 128 in the lesson's G = 60 run); each cost a push into the targets' buffer, a
    /// read of its record and a write before (issue 24, part 7).
    pub(super) fn delete_oldest(&mut self, w: usize, size: u64, t: Time) {
        let work = &mut self.works[w];
        let lost = work.lost_armed.min(size);
        work.tally.commands += size;
        work.lost_armed -= lost;
        work.tally.lost += lost;
        let n = usize::try_from(size)
            .unwrap_or(usize::MAX)
            .min(work.ledger().len());
        // The first `lost` targets are lost: neither marked nor killed.
        let mut skip = usize::try_from(lost).unwrap_or(usize::MAX).min(n);
        let mut take = n - skip;
        let batch = self.fixed_report.is_some() && self.log.is_none();
        // Without names a kill of a copy on the ledger (alive, so started) only marks it dead
        // and takes it out of the live set: a word of kills in one step.
        let words = batch && self.spec.controller.kind != ControllerKind::Named;
        let mut run: (u64, u64) = (0, 0);
        let mut deleted = 0;
        let mut from = 0;
        while take > 0 {
            let Some((i, mut bits)) = self.works[w].ledger().next_word(from) else {
                break;
            };
            from = i + 1;
            let count = bits.count_ones() as usize;
            if skip >= count {
                skip -= count;
                continue;
            }
            while skip > 0 {
                bits &= bits - 1;
                skip -= 1;
            }
            let chosen = lowest_ones(bits, take);
            take -= chosen.count_ones() as usize;
            let work = &mut self.works[w];
            work.commanded.insert_word(i, chosen);
            // A copy on the ledger has started (its start was reported), so it is dead exactly
            // when it is not live.
            debug_assert!(store::ones(chosen).all(|b| {
                let id = (i * 64 + b) as u64;
                work.copies[id as usize].dead != work.live.contains(id)
            }));
            let mut alive = chosen & work.live.word(i);
            if words && alive != 0 {
                work.live.remove_word(i, alive);
                work.dirty = true;
                deleted += u64::from(alive.count_ones());
                while alive != 0 {
                    let id = (i * 64) as u64 + u64::from(alive.trailing_zeros());
                    alive &= alive - 1;
                    let rec = &mut self.works[w].copies[id as usize];
                    debug_assert!(rec.started && rec.name.is_none());
                    rec.dead = true;
                    self.extend_run(w, &mut run, id, t);
                }
                continue;
            }
            while alive != 0 {
                let id = (i * 64) as u64 + u64::from(alive.trailing_zeros());
                alive &= alive - 1;
                deleted += u64::from(self.kill_in_run(w, id, batch, &mut run, t));
            }
        }
        self.report_fixed(w, run.0, run.1, true, t);
        self.works[w].tally.deleted += deleted;
    }

    /// Kills copy `id` of workload `w` for a delete, and says whether it was alive. With
    /// `batch` (a delay that draws nothing, no log) its end is not reported at once but joins
    /// `run`, the stretch of consecutive copies killed so far whose ends go in one report
    /// ([`Engine::report_fixed`]); the caller reports the last stretch when it is done.
    fn kill_in_run(
        &mut self,
        w: usize,
        id: u64,
        batch: bool,
        run: &mut (u64, u64),
        t: Time,
    ) -> bool {
        if !batch {
            return self.kill(w, id, t);
        }
        let (alive, started) = self.kill_unreported(w, id);
        if started {
            self.extend_run(w, run, id, t);
        }
        alive
    }

    /// Adds the end of copy `id` to `run` (first copy, length): extends it when `id` follows
    /// it, otherwise reports the run so far and starts a new one at `id`.
    fn extend_run(&mut self, w: usize, run: &mut (u64, u64), id: u64, t: Time) {
        if run.1 > 0 && run.0 + run.1 == id {
            run.1 += 1;
        } else {
            self.report_fixed(w, run.0, run.1, true, t);
            *run = (id, 1);
        }
    }

    /// One delete command of workload `w`: lost if a loss is armed, otherwise carried out by
    /// `deliver`, which returns how many copies it deleted.
    pub(super) fn command(&mut self, w: usize, deliver: impl FnOnce(&mut Self) -> u64) {
        self.works[w].tally.commands += 1;
        if self.works[w].lost_armed > 0 {
            self.works[w].lost_armed -= 1;
            self.works[w].tally.lost += 1;
            return;
        }
        let deleted = deliver(self);
        self.works[w].tally.deleted += deleted;
    }

    /// Creates `count` copies without names in workload `w` at `t`: [`Engine::create`] `count`
    /// times, in one step where nothing singles a copy out (no startup draw, no crash loop,
    /// no node or lane to place it on, within the budget).
    pub(super) fn create_unnamed(
        &mut self,
        w: usize,
        count: u64,
        t: Time,
    ) -> Result<(), ScenarioError> {
        let n = u32::try_from(count).unwrap_or(u32::MAX);
        let alike = self.startup_model.is_none()
            && self.nodes.is_empty()
            && self.works[w].crash.is_none()
            && u64::from(n) == count
            && self.total_created.saturating_add(count) <= self.budget;
        if !alike {
            for _ in 0..count {
                self.create(w, None, t)?;
            }
            return Ok(());
        }
        if count == 0 {
            return Ok(());
        }
        self.total_created += count;
        let work = &mut self.works[w];
        let id = work.copies.len() as u64;
        let rec = CopyRec::fresh(None, t, work.generation, 0);
        work.copies.resize(work.copies.len() + n as usize, rec);
        work.tally.created += count;
        work.dirty = true;
        let ready = t.saturating_add(work.startup);
        self.queue
            .push_merged(ready, READY, Ev::Ready { w, id, n }, Ev::absorb);
        Ok(())
    }

    pub(super) fn create(
        &mut self,
        w: usize,
        name: Option<Name>,
        t: Time,
    ) -> Result<(), ScenarioError> {
        self.total_created += 1;
        if self.total_created > self.budget {
            return Err(ScenarioError::TooManyCopies(self.budget));
        }
        let startup = match self.startup_model {
            Some(model) => whole_seconds(model.sample(&mut self.rng)),
            None => self.works[w].startup,
        };
        let work = &mut self.works[w];
        let id = work.copies.len() as u64;
        let node = if self.nodes.is_empty() {
            0
        } else {
            self.spec.pipeline.node_of(self.total_created - 1)
        };
        work.copies
            .push(CopyRec::fresh(name, t, work.generation, node));
        if self.spec.pipeline.mode == crate::pipeline::Pipeline::PerCopy {
            work.lanes.push(Default::default());
        }
        if let Some((after, left)) = work.crash {
            work.crash = (left > 1).then_some((after, left - 1));
            self.push(t.saturating_add(after), READY, Ev::Fail { w, id });
        }
        let work = &mut self.works[w];
        if let Some(name) = name {
            work.existing_names.entry(name).or_default().insert(id);
        }
        work.tally.created += 1;
        work.dirty = true;
        let ready = t.saturating_add(startup);
        self.queue
            .push_merged(ready, READY, Ev::Ready { w, id, n: 1 }, Ev::absorb);
        Ok(())
    }
}

/// How many of the copies a rollout deletes (`deleted`, numbers into `copies`) are of an
/// older generation: each needs a replacement, so its creation is needed, not unneeded.
fn replaced(copies: &[rollout::Copy], deleted: &[u64]) -> u64 {
    copies
        .iter()
        .filter(|c| !c.current && deleted.contains(&c.n))
        .count() as u64
}

/// The rollout budgets of `work` for its desired count now.
fn budget(work: &Work) -> Budget {
    let s = work
        .rollout_settings
        .expect("a rollout runs only after an update event");
    Budget::new(s.max_surge, s.max_unavailable, work.desired)
}

/// The copies of a workload as the rollout counts them, as the runtime's
/// `loops::rollout_copies` does: every copy still assigned (no delete command reached it, and
/// the pass has not seen it end) and every copy the ledger `view` shows. A copy that is no
/// longer assigned counts as current, as the runtime cannot tell its generation any more. For
/// `named` a copy is its name: its latest assigned incarnation. An update with
/// `counts_pending` off keeps only what the ledger shows: the rollout that forgets its own
/// pending work, to show what that costs.
fn rollout_copies(view: &View<'_>, named: bool) -> Vec<rollout::Copy> {
    let work = view.work;
    let shown = view.shown();
    let assigned = |id: u64, rec: &CopyRec| {
        let seen_ending = !rec.started || (work.ended.contains(id) && !shown.contains(id));
        !(work.commanded.contains(id) || (rec.dead && seen_ending))
    };
    let mut out: BTreeMap<u64, rollout::Copy> = BTreeMap::new();
    for (id, rec) in work.copies.iter().enumerate() {
        let id = id as u64;
        let (n, on_ledger) = match (named, rec.name) {
            (true, Some(name)) => (name.0, view.names_on_ledger_contains(name)),
            (true, None) => continue,
            (false, _) => (id, shown.contains(id)),
        };
        if assigned(id, rec) {
            out.insert(
                n,
                rollout::Copy {
                    n,
                    current: rec.generation == work.generation,
                    assigned: true,
                    on_ledger,
                },
            );
        } else if on_ledger {
            out.entry(n).or_insert(rollout::Copy {
                n,
                current: true,
                assigned: false,
                on_ledger: true,
            });
        }
    }
    let counts_pending = work.rollout_settings.is_none_or(|s| s.counts_pending);
    out.into_values()
        .filter(|c| counts_pending || c.on_ledger)
        .collect()
}

/// Brings `work`'s rollout up to date with `copies` at `t`, as the runtime's
/// `loops::Gate::rollout` does. Returns whether the rollout is to act this pass: old copies are
/// left, or its new copies are not all on the ledger yet, and it has not stalled. For `named`
/// the surge budget is 0.
fn rollout_gate(work: &mut Work, copies: &[rollout::Copy], t: Time, named: bool) -> bool {
    let Some(settings) = work.rollout_settings else {
        return false;
    };
    if !work.update_pending && work.rollout.is_none() {
        return false;
    }
    let old = copies.iter().filter(|c| !c.current).count() as u64;
    let updated = copies.iter().filter(|c| c.current && c.available()).count() as u64;
    let finish = |work: &mut Work| {
        work.rollout = None;
        work.update_pending = false;
        work.allowed = 0;
        work.tally.rollout_done = Some(t);
    };
    let mut rec = match work.rollout {
        Some(r) if r.generation == work.generation => r,
        _ if old == 0 => {
            finish(work);
            return false;
        }
        _ => RolloutRec {
            generation: work.generation,
            progress: t,
            updated,
            old,
            stalled: false,
        },
    };
    if rollout::done(copies, work.desired) {
        finish(work);
        return false;
    }
    work.update_pending = false;
    if !rec.stalled && (updated > rec.updated || old < rec.old) {
        rec.progress = t;
    }
    rec.updated = rec.updated.max(updated);
    rec.old = rec.old.min(old);
    if !rec.stalled && t.saturating_sub(rec.progress) > settings.progress_deadline {
        rec.stalled = true;
        work.tally.rollout_stalled = Some(t);
    }
    work.rollout = Some(rec);
    // `named` never surges (two copies of one name would be a duplicate).
    work.allowed = if named { 0 } else { budget(work).surge };
    work.tally.surge_budget = work.tally.surge_budget.max(work.allowed);
    !rec.stalled
}
