//! The event-driven engine of the lesson's world.
//!
//! # Why a few counters are enough
//! In the lesson's world the delay is the same for every report, so copies reach the ledger in
//! the order they were created. Scripted deaths kill the oldest live copies and delete commands
//! go to the oldest copies on the ledger, so the copies that have died always form a *prefix* of
//! creation order, and their death times never decrease along it. Every set the rules talk about
//! is then an interval of creation order, bounded by counters that only move forward:
//!
//! | counter | copies `[0, counter)` are those that … |
//! | --- | --- |
//! | `created` | were ever created |
//! | `ready` | are running in the world (`ready ≤ t`) |
//! | `visible` | have reached the ledger (`ready + G ≤ t`) |
//! | `dead` | have died or been deleted |
//! | `gone` | have died, and the ledger has heard of it (`death + G ≤ t`) |
//!
//! Live copies are `[dead, ready)`, the ledger shows `[gone, visible)`, and work in flight is
//! `[max(dead, visible), created)`. The engine keeps the creation batches that have not reached
//! the ledger (their ready times move the `ready` and `visible` counters) and the runs of deaths
//! the ledger has not heard of (they move `gone`). Neither grows with the copy count.
//!
//! # Why it can jump
//! A pass reads only the ledger and the work in flight. A round whose inputs did not change since
//! the last pass, after a pass that changed nothing (no creation, no copy actually deleted), does
//! exactly what that pass did again. So the engine visits only the seconds at which something
//! changes, and accounts for the identical rounds between them in one step. Its cost is
//! O(acting rounds + batches + deaths), independent of the duration and of the copy count.

use std::cell::Cell;

use setpoint_core::{Action, Batch, Controller, ControllerKind, CopyId, Desired, LedgerView, Time};

use crate::lesson_world::{LessonParams, LessonWorld};
use setpoint_core::metrics::{Metrics, TraceRow};

/// Copies created in one round: `[previous batch's end, end)`, all running at `ready`.
#[derive(Debug, Clone, Copy)]
struct Cohort {
    ready: Time,
    end: u64,
}

/// Copies that died at the same second: `[previous run's end, end)`, dead at `at`.
#[derive(Debug, Clone, Copy)]
struct DeadRun {
    at: Time,
    end: u64,
}

/// A time no event has: what the engine's "next …" questions answer when nothing is pending.
const NEVER: Time = Time::MAX;

/// The state of the world, as forward-only counters over creation order.
///
/// The batches and the runs of deaths are `Vec`s read from a moving head, not `VecDeque`s: the
/// ring's index arithmetic on every read was a fifth of a sweep's instructions (callgrind,
/// issue 24). A `Vec` is emptied whenever its head reaches its end, and its read part is cut
/// off once it is most of the `Vec`, so it holds about what is in flight, as the ring did.
#[derive(Debug, Default)]
struct World {
    /// Batches, oldest first; those from `seen_head` on have not reached the ledger yet.
    cohorts: Vec<Cohort>,
    /// Batches before this index have reached the ledger (`ready + G ≤ t`).
    seen_head: usize,
    /// Batches before this index are running (`ready ≤ t`); never below `seen_head`.
    ready_head: usize,
    /// Runs of deaths, oldest first; those from `heard_head` on the ledger has not heard of.
    unheard: Vec<DeadRun>,
    /// Runs before this index the ledger has heard of (`at + G ≤ t`).
    heard_head: usize,
    created: u64,
    ready: u64,
    visible: u64,
    dead: u64,
    gone: u64,
}

/// Read entries a `Vec` keeps before [`World`] cuts them off.
const KEPT_READ: usize = 64;

impl World {
    /// Moves the counters that depend only on time up to `t`. Returns whether anything a pass
    /// can see changed: every batch and every run of deaths moves its counter forward, as none
    /// is empty.
    fn advance(&mut self, t: Time, delay: Time) -> bool {
        while let Some(c) = self.cohorts.get(self.ready_head) {
            if c.ready > t {
                break;
            }
            self.ready = c.end;
            self.ready_head += 1;
        }
        let mut moved = false;
        while let Some(c) = self.cohorts.get(self.seen_head) {
            if c.ready + delay > t {
                break;
            }
            self.visible = c.end;
            self.seen_head += 1;
            moved = true;
        }
        while let Some(r) = self.unheard.get(self.heard_head) {
            if r.at + delay > t {
                break;
            }
            self.gone = r.end;
            self.heard_head += 1;
            moved = true;
        }
        moved
    }

    /// Moves only the running count up to `t`: the batches that start by `t` (see
    /// [`Self::advance`], which also moves the ledger's counters).
    fn start_until(&mut self, t: Time) {
        while let Some(c) = self.cohorts.get(self.ready_head) {
            if c.ready > t {
                break;
            }
            self.ready = c.end;
            self.ready_head += 1;
        }
    }

    /// Creates `count` copies that start running at `ready`.
    fn create(&mut self, count: u64, ready: Time) {
        debug_assert!(count > 0, "an empty batch would move no counter");
        if self.seen_head == self.cohorts.len() {
            // Every batch has reached the ledger, so every one is running too.
            self.cohorts.clear();
            (self.seen_head, self.ready_head) = (0, 0);
        } else if self.seen_head > KEPT_READ && 2 * self.seen_head > self.cohorts.len() {
            self.cohorts.drain(..self.seen_head);
            self.ready_head -= self.seen_head;
            self.seen_head = 0;
        }
        self.created += count;
        self.cohorts.push(Cohort {
            ready,
            end: self.created,
        });
    }

    /// Kills every copy in `[dead, end)` at `t`. Returns how many died. Inlined: it runs once
    /// a delete round, and its call was a third of its cost (callgrind, issue 24).
    #[inline]
    fn kill_until(&mut self, end: u64, t: Time) -> u64 {
        if end <= self.dead {
            return 0;
        }
        let killed = end - self.dead;
        self.dead = end;
        // Only a run the ledger has not heard of yet takes more victims of the same second.
        if self.heard_head < self.unheard.len() {
            if let Some(last) = self.unheard.last_mut().filter(|last| last.at == t) {
                last.end = end;
                return killed;
            }
        }
        if self.heard_head == self.unheard.len() {
            self.unheard.clear();
            self.heard_head = 0;
        } else if self.heard_head > KEPT_READ && 2 * self.heard_head > self.unheard.len() {
            self.unheard.drain(..self.heard_head);
            self.heard_head = 0;
        }
        self.unheard.push(DeadRun { at: t, end });
        killed
    }

    fn live(&self) -> u64 {
        self.ready - self.dead
    }

    /// The next second after `t` at which a batch starts running (the live count moves), or
    /// [`NEVER`].
    fn next_start(&self) -> Time {
        self.cohorts.get(self.ready_head).map_or(NEVER, |c| c.ready)
    }

    /// The next second after `t` at which a report reaches the ledger (the view moves), or
    /// [`NEVER`].
    fn next_report(&self, delay: Time) -> Time {
        let visible = self
            .cohorts
            .get(self.seen_head)
            .map_or(NEVER, |c| c.ready + delay);
        let gone = self
            .unheard
            .get(self.heard_head)
            .map_or(NEVER, |r| r.at + delay);
        visible.min(gone)
    }
}

/// What a pass sees of the [`World`] at one round.
struct View<'w> {
    world: &'w World,
    now: Time,
    delay: Time,
}

impl View<'_> {
    /// The copies of `batch` in flight are `lo..hi` (empty when `lo >= hi`): neither dead nor
    /// visible yet, since both happen in creation order here.
    fn in_flight_bounds(&self, batch: Batch) -> (u64, u64) {
        let lo = batch.first.0.max(self.world.dead).max(self.world.visible);
        (lo, batch.end().min(self.world.created))
    }
}

impl LedgerView for View<'_> {
    fn now(&self) -> Time {
        self.now
    }

    fn on_ledger(&self) -> u64 {
        self.world.visible - self.world.gone
    }

    fn in_flight(&self, batch: Batch) -> u64 {
        let (lo, hi) = self.in_flight_bounds(batch);
        hi.saturating_sub(lo)
    }

    fn next_copy(&self) -> CopyId {
        CopyId(self.world.created)
    }

    fn shows(&self, copy: CopyId) -> bool {
        (self.world.gone..self.world.visible).contains(&copy.0)
    }

    fn oldest_on_ledger(&self, n: u64) -> Vec<CopyId> {
        let end = self.world.visible.min(self.world.gone.saturating_add(n));
        (self.world.gone..end).map(CopyId).collect()
    }

    fn in_flight_copies(&self, batch: Batch) -> Vec<CopyId> {
        let (lo, hi) = self.in_flight_bounds(batch);
        (lo..hi).rev().map(CopyId).collect()
    }

    fn reported_before(&self) -> Time {
        // A change at s reaches the ledger at s + G, so every change before now + 1 − G is on it.
        (self.now + 1).saturating_sub(self.delay)
    }
}

/// Running totals, in the units of [`Metrics`].
#[derive(Debug, Default)]
struct Tally {
    rounds: u64,
    created: u64,
    commands: u64,
    deleted: u64,
    died: u64,
    overshoot: u64,
    peak_live: u64,
    copy_seconds_above: u64,
    last_drift: Option<Time>,
}

impl Tally {
    /// Records that `live` copies ran at the end of every second in `[from, to]`.
    fn hold(&mut self, live: u64, desired: u64, from: Time, to: Time) {
        self.peak_live = self.peak_live.max(live);
        if live > desired {
            let above = live - desired;
            self.overshoot = self.overshoot.max(above);
            let seconds = to - from + 1;
            self.copy_seconds_above = self
                .copy_seconds_above
                .saturating_add(above.saturating_mul(seconds));
        }
        if live != desired {
            self.last_drift = Some(to);
        }
    }
}

/// Runs `scenario` and returns its metrics. Deterministic: the same scenario always gives the
/// same metrics.
pub fn simulate(scenario: &LessonWorld) -> Metrics {
    run::<false>(&LessonParams::of(scenario.spec()), None)
}

/// [`simulate`] on borrowed settings, for a sweep's cells. The caller promises what
/// [`LessonWorld::new`] checks: every setting inside its limit, a lesson controller, and deaths
/// sorted by time.
pub(crate) fn simulate_params(spec: &LessonParams<'_>) -> Metrics {
    debug_assert!(spec.controller.is_lesson() && spec.deaths.is_sorted_by_key(|d| d.at));
    run::<false>(spec, None)
}

/// Runs `scenario` like [`simulate`] and hands `observer` one [`TraceRow`] per second, in order,
/// from 0 to the duration. The metrics are the same as [`simulate`]'s.
pub fn simulate_traced(scenario: &LessonWorld, observer: &mut dyn FnMut(&TraceRow)) -> Metrics {
    simulate_spans(scenario, &mut |span| {
        for row in span.rows() {
            observer(&row);
        }
    })
}

/// [`simulate_traced`] one [`TraceSpan`] at a time: the trace of a run that holds still for a
/// long time costs what changes, not its seconds (`plot timeline` of a 100,000,000-second run,
/// issue 24). The spans cover every second from 0 to the duration, in order.
pub fn simulate_spans(scenario: &LessonWorld, observer: &mut dyn FnMut(&TraceSpan)) -> Metrics {
    run::<true>(&LessonParams::of(scenario.spec()), Some(observer))
}

/// Seconds of a trace in which nothing changes: `row` at second `row.t`, then the same state at
/// every second after it up to `until`, with nothing created, deleted or died, and
/// `round_commands` delete commands at each round (each multiple of `period`): the commands of
/// a ledger-only loop repeating its last pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceSpan {
    /// The row of the span's first second.
    pub row: TraceRow,
    /// The span's last second.
    pub until: Time,
    /// The loop period.
    pub period: Time,
    /// Delete commands at each round after the first second.
    pub round_commands: u64,
}

impl TraceSpan {
    /// The row of second `s`, from `row.t` to `until`.
    pub fn row_at(&self, s: Time) -> TraceRow {
        debug_assert!((self.row.t..=self.until).contains(&s));
        if s == self.row.t {
            return self.row;
        }
        TraceRow {
            t: s,
            created: 0,
            deleted: 0,
            died: 0,
            delete_commands: if s % self.period == 0 {
                self.round_commands
            } else {
                0
            },
            ..self.row
        }
    }

    /// Its rows, one per second.
    pub fn rows(&self) -> impl Iterator<Item = TraceRow> + '_ {
        (self.row.t..=self.until).map(|s| self.row_at(s))
    }
}

/// `TRACED` is whether `observer` is given. As a constant it compiles the untraced run without
/// any of the tracing (perf, issue 3: the untraced loop had become a quarter slower).
fn run<const TRACED: bool>(
    spec: &LessonParams<'_>,
    mut observer: Option<&mut dyn FnMut(&TraceSpan)>,
) -> Metrics {
    let (period, delay, startup, duration) = (spec.period, spec.delay, spec.startup, spec.duration);
    let desired = Desired {
        copies: spec.desired,
    };
    let mut controller = Controller::new(spec.controller);
    // A `ledger` pass reads nothing but the ledger, so it repeats while the ledger holds still.
    let reads_only_ledger = spec.controller == ControllerKind::Ledger;
    // The shortcuts below skip seconds and rounds whose effects a trace shows second by second:
    // only an untraced run takes them.
    let fast = !TRACED;
    // A ledger-only loop holds about one batch per round of its blind window in flight: size the
    // queue for that once instead of growing it (perf, issue 3: allocation was a tenth of a sweep).
    // Deletes it sends while their reports travel are bounded the same way.
    let blind_rounds = (delay.saturating_add(startup) / period).min(KEPT_QUEUE) as usize;
    let (mut cohorts, mut unheard) = QUEUES.take();
    cohorts.reserve(blind_rounds + 2);
    unheard.reserve(blind_rounds + 2);
    let mut world = World {
        cohorts,
        unheard,
        ..World::default()
    };
    let mut tally = Tally::default();
    // The scripted deaths from `deaths[next_death]` on have not struck yet.
    let deaths = spec.deaths;
    let mut next_death = 0usize;
    // Its second, or [`NEVER`]: kept beside the index, as every visit reads it.
    let mut next_death_at = deaths.first().map_or(NEVER, |d| d.at);

    // Whether a pass could decide differently from the last one. While it is false, every round
    // repeats the last pass, which sent `repeat_commands` delete commands and changed nothing.
    let mut dirty = true;
    let mut repeat_commands = 0u64;

    let mut t: Time = 0;
    // The first round at or after t. Kept by addition: divisions by the period were a fifth of a
    // sweep's time (perf, issue 3).
    let mut round_at: Time = 0;
    loop {
        let before = (tally.created, tally.commands, tally.deleted, tally.died);
        dirty |= world.advance(t, delay);

        // CA23: scripted deaths come first in a second, and strike the oldest live copies.
        let mut toll = 0u64;
        while next_death_at == t {
            toll = toll.saturating_add(deaths[next_death].count);
            next_death += 1;
            next_death_at = deaths.get(next_death).map_or(NEVER, |d| d.at);
        }
        if toll > 0 {
            let killed = world.kill_until(world.dead + toll.min(world.live()), t);
            tally.died += killed;
            dirty |= killed > 0;
        }

        // CA22: a round at every multiple of the period.
        if t == round_at {
            round_at += period;
            tally.rounds += 1;
            if dirty {
                // A death at t with no delay is on the ledger at t already. With a delay, the
                // first advance of the second left nothing to move (callgrind, issue 24: the
                // advances were a sixth of the engine).
                if delay == 0 {
                    world.advance(t, delay);
                }
                let action = controller.pass(
                    desired,
                    &View {
                        world: &world,
                        now: t,
                        delay,
                    },
                );
                // The action is read in place, not moved into a helper: moving and dropping the
                // five-variant enum was a tenth of a pass (callgrind, issue 24).
                let (changed, commands) = match &action {
                    None => (false, 0),
                    Some(Action::Create { batch, .. }) => {
                        debug_assert_eq!(batch.first.0, world.created);
                        world.create(batch.count, t + startup);
                        tally.created += batch.count;
                        // Until a report reaches the ledger or a death strikes, every later round
                        // of a ledger-only loop creates this batch again: create those batches
                        // now, without their passes (perf, issue 3: a third of a sweep's passes
                        // were such repeats).
                        if fast && reads_only_ledger {
                            let horizon = world
                                .next_report(delay)
                                .min(next_death_at)
                                .min(duration + 1);
                            while round_at < horizon {
                                world.create(batch.count, round_at + startup);
                                tally.created += batch.count;
                                tally.rounds += 1;
                                round_at += period;
                            }
                        }
                        (true, 0)
                    }
                    Some(Action::Named { .. }) => {
                        unreachable!("LessonWorld::new accepts only the lesson's controllers")
                    }
                    Some(Action::Delete { target, counted }) => {
                        // CA25: commands go to the oldest copies the ledger shows; those already
                        // dead absorb a command and delete nothing. More commands than copies
                        // shown reach no one. (`intent` orders its commands,
                        // `Controller::delete_targets`, but in the lesson's world the order is
                        // CA25: it never restarts, so every copy is its own, and the ledger is one
                        // age, so a surplus meets the copies whose word predates its batches
                        // first. `world::tests::equivalence` holds the two engines to it.)
                        let commands = counted - target;
                        tally.commands += commands;
                        let shown = world.visible - world.gone;
                        let reached = world.gone + commands.min(shown);
                        let deleted = world.kill_until(reached, t);
                        tally.deleted += deleted;
                        // A `ledger` pass reads only the ledger, and a deletion reaches it G
                        // seconds later: until a report moves it, every later round sends the
                        // same commands to the same copies, all dead now, and deletes nothing.
                        // So an untraced run treats this round as one that changed nothing
                        // and jumps to the round of the next report (callgrind, issue 24).
                        (deleted > 0 && !(fast && reads_only_ledger), commands)
                    }
                };
                dirty = changed;
                repeat_commands = if changed { 0 } else { commands };
            } else {
                tally.commands += repeat_commands;
            }
        }

        // Copies created with no startup time are running now, and with no delay a death or a
        // creation of this second is on the ledger now. After this, every pending change of the
        // world lies strictly after t. With both a startup time and a delay, this second's
        // creations and deaths are all due later, so there is nothing to move.
        if startup == 0 || delay == 0 {
            dirty |= world.advance(t, delay);
        }

        // The next second at which anything can change; the live count holds until then. A
        // report changes nothing but what the next pass sees, so the engine does not stop at
        // it: it goes to the first round at or after it (perf, issue 3: stopping at reports was
        // a quarter of a sweep's visits). Times are plain integers with [`NEVER`] for "none":
        // comparing `Option`s was a tenth of the loop (callgrind, issue 24).
        let next_round = if dirty {
            round_at
        } else if fast {
            match world.next_report(delay) {
                NEVER => NEVER,
                r => round_at + r.saturating_sub(round_at).div_ceil(period) * period,
            }
        } else {
            NEVER
        };
        // A traced run stops at every report, so that each second's row shows the ledger.
        let next_report = if fast {
            NEVER
        } else {
            world.next_report(delay)
        };
        // The next second at which something other than a batch's start can change.
        let bound = next_death_at
            .min(next_round)
            .min(next_report)
            .min(duration + 1);
        let mut next = world.next_start().min(bound);
        tally.hold(world.live(), desired.copies, t, next - 1);
        // Seconds before `bound` at which a batch only starts running move the live count and
        // nothing else a pass or the next stop reads (a report due meanwhile is read by the
        // next round's advance, and the rounds before `bound` repeat the last pass, counted
        // below as they are now). An untraced run takes them here, without a visit each
        // (callgrind, issue 24: they were a third of the visits).
        if fast {
            while next < bound {
                let s = next;
                world.start_until(s);
                next = world.next_start().min(bound);
                tally.hold(world.live(), desired.copies, s, next - 1);
            }
        }
        if let Some(observe) = observer.as_mut().filter(|_| TRACED) {
            let row = TraceRow {
                t,
                desired: desired.copies,
                live: world.live(),
                seen: world.visible - world.gone,
                pending: world.created - world.dead.max(world.visible),
                created: tally.created - before.0,
                delete_commands: tally.commands - before.1,
                deleted: tally.deleted - before.2,
                died: tally.died - before.3,
            };
            // Until `next` nothing changes but the identical rounds' wasted commands.
            observe(&TraceSpan {
                row,
                until: next - 1,
                period,
                round_commands: repeat_commands,
            });
        }

        // Rounds strictly between t and next repeat the last pass. `round_at` is past t now.
        if next > round_at {
            let skipped = (next - 1 - round_at) / period + 1;
            tally.rounds += skipped;
            tally.commands = tally
                .commands
                .saturating_add(skipped.saturating_mul(repeat_commands));
            round_at += skipped * period;
        }

        if next > duration {
            break;
        }
        t = next;
    }

    let metrics = finish(spec, &tally);
    let World {
        mut cohorts,
        mut unheard,
        ..
    } = world;
    if cohorts.capacity().max(unheard.capacity()) as u64 <= KEPT_QUEUE + 2 {
        cohorts.clear();
        unheard.clear();
        QUEUES.set((cohorts, unheard));
    }
    metrics
}

/// The longest queues a thread keeps between runs, in entries; longer ones are freed.
const KEPT_QUEUE: u64 = 1 << 12;

thread_local! {
    /// The last run's emptied queues, reused by the next run on the same thread: a sweep runs
    /// millions of short cells, and two allocations and frees a cell were a twentieth of the
    /// engine's time (perf, issue 12).
    static QUEUES: Cell<(Vec<Cohort>, Vec<DeadRun>)> = Cell::default();
}

fn finish(spec: &LessonParams<'_>, tally: &Tally) -> Metrics {
    let required = i128::from(spec.desired) + i128::from(tally.died);
    Metrics {
        rounds: tally.rounds,
        work_per_round: (tally.created + tally.commands) as f64 / tally.rounds as f64,
        created: tally.created,
        unneeded: (i128::from(tally.created) - required) as i64,
        delete_commands: tally.commands,
        deleted: tally.deleted,
        overshoot: tally.overshoot,
        stable: match tally.last_drift {
            None => Some(0),
            Some(t) if t == spec.duration => None,
            Some(t) => Some(t + 1),
        },
        died: tally.died,
        peak_live: tally.peak_live,
        copy_seconds_above: tally.copy_seconds_above,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lesson_world::{Death, LessonSpec};
    use setpoint_core::ControllerKind::{Intent, Ledger};

    fn run(spec: LessonSpec) -> Metrics {
        simulate(&LessonWorld::new(spec).unwrap())
    }

    #[test]
    fn lesson_row_g60_ledger_matches_the_lesson() {
        let m = simulate(&LessonWorld::lesson(60, Ledger));
        assert_eq!(m.rounds, 61);
        assert_eq!(
            (
                m.created,
                m.unneeded,
                m.delete_commands,
                m.deleted,
                m.overshoot
            ),
            (40, 32, 128, 32, 24)
        );
        assert_eq!(m.stable, Some(495));
        assert_eq!(m.peak_live, 30);
    }

    #[test]
    fn intent_controller_never_overshoots_in_the_lesson() {
        for g in [0, 5, 10, 20, 30, 60] {
            let m = simulate(&LessonWorld::lesson(g, Intent));
            assert_eq!(
                (m.created, m.overshoot, m.delete_commands),
                (8, 0, 0),
                "G={g}"
            );
        }
    }

    #[test]
    fn delete_command_to_dead_copy_counts_but_deletes_nothing() {
        // G = 60: the two copies that die at 300 stay on the ledger until 360, and the ledger
        // loop's surplus commands reach them first.
        let m = simulate(&LessonWorld::lesson(60, Ledger));
        assert!(m.delete_commands > m.deleted);
        assert_eq!(m.delete_commands - m.deleted, 96);
    }

    #[test]
    fn deaths_strike_only_live_copies_not_starting_ones() {
        // At t = 2 the six copies are still starting (B = 5), so nothing dies.
        let m = run(LessonSpec {
            deaths: vec![Death { at: 2, count: 3 }],
            ..LessonSpec::default()
        });
        assert_eq!(m.died, 0);
        assert_eq!(m.created, 6);
    }

    #[test]
    fn deaths_after_the_run_ends_never_happen_and_owe_nothing() {
        let m = run(LessonSpec {
            deaths: vec![Death { at: 5000, count: 2 }],
            ..LessonSpec::default()
        });
        assert_eq!((m.died, m.created, m.unneeded), (0, 6, 0));
    }

    #[test]
    fn deaths_beyond_the_live_count_kill_everyone_and_count_only_victims() {
        let m = run(LessonSpec {
            deaths: vec![Death { at: 300, count: 50 }],
            ..LessonSpec::default()
        });
        assert_eq!(m.died, 6);
        assert_eq!(m.created, 12);
        assert_eq!(m.unneeded, 0);
    }

    #[test]
    fn desired_zero_never_drifts_and_is_stable_from_second_zero() {
        let m = run(LessonSpec {
            desired: 0,
            ..LessonSpec::default()
        });
        assert_eq!((m.created, m.unneeded, m.stable), (0, 0, Some(0)));
    }

    #[test]
    fn run_ending_before_replacement_owes_copies_as_negative_unneeded() {
        let m = run(LessonSpec {
            delay: 5,
            deaths: vec![Death { at: 896, count: 2 }],
            ..LessonSpec::default()
        });
        assert_eq!(m.unneeded, -2);
        assert_eq!(m.stable, None);
    }

    #[test]
    fn repeated_wasted_commands_between_changes_are_all_counted() {
        // With G = 60 and U = 1, the ledger shows dead copies for 60 seconds; every round in
        // between sends commands that reach only those.
        let m = run(LessonSpec {
            period: 1,
            delay: 60,
            ..LessonSpec::default()
        });
        assert_eq!(m.rounds, 901);
        assert!(m.delete_commands > m.deleted);
    }

    #[test]
    fn repeated_blind_creations_stop_at_a_death_and_at_the_end_of_the_run() {
        // Figures from the reference model (run-case.mjs) for the same scenarios.
        let m = run(LessonSpec {
            period: 5,
            delay: 30,
            duration: 300,
            deaths: vec![Death { at: 12, count: 2 }],
            ..LessonSpec::default()
        });
        assert_eq!((m.rounds, m.created, m.delete_commands), (61, 42, 206));
        assert_eq!((m.deleted, m.overshoot, m.stable), (34, 34, Some(65)));
        let m = run(LessonSpec {
            period: 5,
            delay: 30,
            duration: 22,
            deaths: vec![],
            ..LessonSpec::default()
        });
        assert_eq!(
            (m.rounds, m.created, m.overshoot, m.stable),
            (5, 30, 18, None)
        );
    }

    #[test]
    fn trace_has_one_row_per_second_and_adds_up_to_the_metrics() {
        for (g, controller) in [(60, Ledger), (20, Intent), (0, Ledger)] {
            let s = LessonWorld::lesson(g, controller);
            let mut rows = Vec::new();
            let m = simulate_traced(&s, &mut |r| rows.push(*r));
            assert_eq!(m, simulate(&s));
            assert_eq!(rows.len(), 901);
            assert!(rows.iter().enumerate().all(|(i, r)| r.t == i as u64));
            assert_eq!(rows.iter().map(|r| r.created).sum::<u64>(), m.created);
            assert_eq!(
                rows.iter().map(|r| r.delete_commands).sum::<u64>(),
                m.delete_commands
            );
            assert_eq!(rows.iter().map(|r| r.deleted).sum::<u64>(), m.deleted);
            assert_eq!(rows.iter().map(|r| r.died).sum::<u64>(), m.died);
            assert_eq!(rows.iter().map(|r| r.live).max(), Some(m.peak_live));
        }
    }

    #[test]
    fn trace_shows_the_stale_ledger_at_g60() {
        // At second 64 four batches of six run, but the first reaches the ledger only at 65.
        let mut rows = Vec::new();
        simulate_traced(&LessonWorld::lesson(60, Ledger), &mut |r| rows.push(*r));
        assert_eq!((rows[64].live, rows[64].seen), (6 * 4, 0));
        assert_eq!(rows[65].seen, 6);
        assert_eq!(rows[0].pending, 6);
    }

    #[test]
    fn cost_does_not_grow_with_duration_when_nothing_happens() {
        // Ten million seconds, a million copies: the engine visits a handful of seconds.
        let m = run(LessonSpec {
            desired: 1_000_000,
            duration: 10_000_000,
            delay: 60,
            ..LessonSpec::default()
        });
        assert_eq!(m.rounds, 10_000_000 / 15 + 1);
        assert!(m.stable.is_some());
    }
}
