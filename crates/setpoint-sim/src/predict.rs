//! Predictors: what a run will measure, computed without running it.
//!
//! The lesson's relation `desired × (⌈(G + B) / U⌉ − 1)` holds on its 56 cells and fails outside
//! them: it goes negative when `G + B = 0`, and it over-predicts when the loop period is short
//! against the startup time, because the loop starts deleting before the last blind batch is live.
//! `docs/relation.md` derives the exact replacement implemented here. In brief, with
//!
//! - `K = max(1, ⌈(G + B) / U⌉)`: the rounds that create before the first batch reaches the
//!   ledger (the blind rounds; at least round 0 always creates),
//! - `q = ⌊B / U⌋`: the rounds a batch spends starting,
//! - `P = K − max(0, q − 1)`: the most blind batches ever live at once,
//!
//! the `ledger` controller's overshoot is `desired × (P − 1)` (cut short when the run ends
//! first), and each scripted death that strikes a settled world adds a wave of the same shape,
//! scaled to its victims. The `intent` controller never overshoots: it counts every copy that
//! exists as either on the ledger or in flight, so it never creates while `desired` copies exist.
//!
//! A death that strikes while an earlier wave is still settling interacts with it. There the
//! predictor walks the recurrence of the model's cumulative counts through the unsettled rounds
//! only, and jumps from one settled point to the next, so its cost grows with the number of deaths
//! and the blind window, never with the duration or the copy count.

use serde::Serialize;
use setpoint_core::ControllerKind;

use std::cell::RefCell;

use crate::lesson_world::{Death, LessonParams, LessonSpec};

/// How a prediction was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Regime {
    /// Nothing is desired: nothing is created, nothing overshoots.
    NothingDesired,
    /// The `intent` controller: overshoot is 0 by construction.
    Intent,
    /// Closed forms: the initial ramp and one clean wave per death that strikes a settled world.
    Closed,
    /// A death strikes while a wave is settling: the recurrence is walked through those rounds.
    Walked,
}

/// A prediction for one scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Prediction {
    /// Predicted overshoot, in copies. Exact in every regime.
    pub overshoot: u64,
    /// How it was obtained.
    pub regime: Regime,
    /// The blind-round count `K = max(1, ⌈(G + B) / U⌉)`.
    pub blind_rounds: u64,
    /// Closed forms of the other metrics, where they have one: regime `Closed`, in a run that
    /// outlasts its last transient (see [`ClosedMetrics`]).
    pub closed: Option<ClosedMetrics>,
}

/// The metrics that have a closed form in a settled world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClosedMetrics {
    /// Copies created.
    pub created: u64,
    /// `created − (desired + died)`.
    pub unneeded: i64,
    /// Delete commands sent.
    pub delete_commands: u64,
    /// Copies deleted for nothing (every deletion in this world removes a copy that a later
    /// round does not need to replace, so all of them are "for nothing").
    pub deleted: u64,
    /// The second from which the count stays at desired. Closed forms are given only for runs
    /// that outlast every transient, so it is always `Some`.
    pub stable: Option<u64>,
}

/// The shape of one wave of blind creations, in rounds and seconds.
#[derive(Debug, Clone, Copy)]
struct Shape {
    period: u64,
    delay: u64,
    startup: u64,
    /// Blind rounds K.
    k: u64,
    /// Most blind batches live at once, P.
    peak: u64,
    /// `max(1, ⌈G / U⌉)`: rounds before a deletion leaves the ledger, as a pass sees it.
    lag: u64,
}

impl Shape {
    fn new(spec: &LessonParams<'_>) -> Self {
        let (u, g, b) = (spec.period, spec.delay, spec.startup);
        let k = (g + b).div_ceil(u).max(1);
        Shape {
            period: u,
            delay: g,
            startup: b,
            k,
            peak: k - (b / u).saturating_sub(1),
            lag: g.div_ceil(u).max(1),
        }
    }

    /// Batches of a wave that starts at round `start` and are live by second `end`, capped at K.
    fn ready_by(&self, start: u64, end: u64) -> u64 {
        let first_ready = start * self.period + self.startup;
        if end < first_ready {
            0
        } else {
            ((end - first_ready) / self.period + 1).min(self.k)
        }
    }

    /// Rounds of `[start, start + n)` that happen by second `end`.
    fn rounds_by(&self, start: u64, n: u64, end: u64) -> u64 {
        if start * self.period > end {
            0
        } else {
            (end / self.period - start + 1).min(n)
        }
    }

    /// The overshoot of a wave of `size` copies per blind batch, starting at round `start`, seen
    /// up to second `end`.
    fn overshoot(&self, size: u64, start: u64, end: u64) -> u64 {
        size * self.peak.min(self.ready_by(start, end)).saturating_sub(1)
    }

    /// The first second at which a wave starting at round `start` has settled: every batch live,
    /// every surplus batch deleted, and the ledger caught up with both.
    fn settled(&self, start: u64) -> u64 {
        let s = start * self.period;
        if self.k == 1 {
            // With B = G = 0 the replacement is created in the round of second s, after that
            // second's deaths: a death at s still finds the world unsettled.
            s + (self.startup + self.delay).max(1)
        } else {
            // The last deletion happens at round start + 2K − 1; a death in that same second
            // comes before it (deaths precede the round) and would take its place.
            s + (2 * self.k - 1) * self.period + self.delay.max(1)
        }
    }

    /// The second from which a wave starting at round `start` leaves the count at desired. With
    /// one live blind batch at most (`P = 1`), deletions keep pace with startups and the count is
    /// right as soon as the first batch is live; otherwise it is right after the last deletion,
    /// at round `start + 2K − 1`.
    fn drift_ends(&self, start: u64) -> u64 {
        if self.peak == 1 {
            start * self.period + self.startup
        } else {
            (start + 2 * self.k - 1) * self.period
        }
    }

    /// The first round whose pass sees a death at second `at`.
    fn first_round_seeing(&self, at: u64) -> u64 {
        (at + self.delay).div_ceil(self.period)
    }

    /// Delete commands a wave sends by second `end`: at round `start + K + i` a wave of `size`
    /// sends `size × (min(i + 1, K) − 1 − max(0, min(i − lag + 1, K) − 1))`. The sum over all
    /// rounds telescopes to `size × lag × (K − 1)`.
    fn commands(&self, size: u64, start: u64, end: u64) -> u64 {
        let first = start + self.k;
        if first * self.period > end {
            return 0;
        }
        let last_round = end / self.period;
        let full = size * self.lag * (self.k - 1);
        let tail_from = first + self.k - 1 + self.lag;
        if last_round >= tail_from {
            return full;
        }
        let mut sum = 0;
        for i in 0..=(last_round - first) {
            let shown = (i + 1).min(self.k) - 1;
            let gone = if i + 1 > self.lag {
                (i + 1 - self.lag).min(self.k) - 1
            } else {
                0
            };
            sum += shown - gone;
        }
        size * sum
    }

    /// Copies a wave deletes by second `end`: one batch per round from round `start + K + 1`.
    fn deleted(&self, size: u64, start: u64, end: u64) -> u64 {
        size * self.rounds_by(start + self.k + 1, self.k - 1, end)
    }
}

/// Predicts the overshoot (exactly) and, where they have a closed form, the other metrics.
pub fn predict(spec: &LessonSpec) -> Prediction {
    predict_params(&LessonParams::of(spec))
}

/// [`predict`] on borrowed settings: what a sweep calls for each cell, without building a
/// [`LessonSpec`]. The deaths may be in any order.
pub(crate) fn predict_params(spec: &LessonParams<'_>) -> Prediction {
    let shape = Shape::new(spec);
    let k = shape.k;
    if spec.desired == 0 {
        return Prediction {
            overshoot: 0,
            regime: Regime::NothingDesired,
            blind_rounds: k,
            closed: None,
        };
    }
    if spec.controller == ControllerKind::Intent {
        return Prediction {
            overshoot: 0,
            regime: Regime::Intent,
            blind_rounds: k,
            closed: None,
        };
    }
    // The walk's lists live on in this thread between calls: a sweep predicts millions of cells,
    // and three allocations a cell were a tenth of the predictor's time (perf, issue 12).
    SCRATCH.with_borrow_mut(|scratch| {
        deaths_in_run(spec, &mut scratch.deaths);
        match closed(spec, &shape, &scratch.deaths) {
            Some((overshoot, metrics)) => Prediction {
                overshoot,
                regime: Regime::Closed,
                blind_rounds: k,
                closed: metrics,
            },
            None => Prediction {
                overshoot: walk(spec, &shape, scratch),
                regime: Regime::Walked,
                blind_rounds: k,
                closed: None,
            },
        }
    })
}

/// The lists [`predict_params`] fills, kept per thread and cleared before each use.
#[derive(Debug, Default)]
struct Scratch {
    /// Deaths merged by second ([`deaths_in_run`]).
    deaths: Vec<(u64, u64)>,
    /// The walk's creations: (round, cumulative count after it).
    created: Vec<(u64, u64)>,
    /// The walk's dead prefix: (second, D after every event of that second).
    dead: Vec<(u64, u64)>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Deaths merged by second, within the run, with their summed counts, into `merged`.
fn deaths_in_run(spec: &LessonParams<'_>, merged: &mut Vec<(u64, u64)>) {
    merged.clear();
    let push = |d: &Death| {
        if d.at > spec.duration || d.count == 0 {
            return;
        }
        match merged.last_mut() {
            Some(last) if last.0 == d.at => last.1 += d.count,
            _ => merged.push((d.at, d.count)),
        }
    };
    // A validated scenario's deaths are sorted already; only a raw spec needs the sort.
    if spec.deaths.is_sorted_by_key(|d| d.at) {
        spec.deaths.iter().for_each(push);
    } else {
        let mut sorted = spec.deaths.to_vec();
        sorted.sort_by_key(|d| d.at);
        sorted.iter().for_each(push);
    }
}

/// The closed forms: valid when every death either finds no live copy (it strikes before the
/// first copy is ready) or strikes a settled world. Returns `None` otherwise.
fn closed(
    spec: &LessonParams<'_>,
    shape: &Shape,
    deaths: &[(u64, u64)],
) -> Option<(u64, Option<ClosedMetrics>)> {
    let d = spec.desired;
    let end = spec.duration;
    let mut overshoot = shape.overshoot(d, 0, end);
    let mut created = d * shape.rounds_by(0, shape.k, end);
    let mut commands = shape.commands(d, 0, end);
    let mut deleted = shape.deleted(d, 0, end);
    let mut died = 0;
    // When the last wave settles; the count is at desired from then on until the next death.
    let mut settled_at = shape.settled(0);
    let mut drift_ends = shape.drift_ends(0);
    for &(at, count) in deaths {
        if at < shape.startup || at == 0 {
            // Nothing is live yet (round 0 creates after the deaths of second 0): no victim.
            continue;
        }
        if at < settled_at {
            return None;
        }
        let victims = count.min(d);
        died += victims;
        let start = shape.first_round_seeing(at);
        overshoot = overshoot.max(shape.overshoot(victims, start, end));
        created += victims * shape.rounds_by(start, shape.k, end);
        commands += shape.commands(victims, start, end);
        deleted += shape.deleted(victims, start, end);
        settled_at = shape.settled(start);
        // With no delay and no startup, a death on a round second is replaced within that same
        // second: the count never leaves desired.
        if start * shape.period + shape.startup > at {
            drift_ends = shape.drift_ends(start);
        }
    }
    // A run that ends inside a wave's transient may end at a second where the count happens to
    // be right; its time to stable needs the transient's trajectory, which the closed forms do not
    // give. The overshoot's closed form still holds there.
    let metrics = (drift_ends <= end).then(|| ClosedMetrics {
        created,
        unneeded: created as i64 - (d + died) as i64,
        delete_commands: commands,
        deleted,
        stable: Some(drift_ends),
    });
    Some((overshoot, metrics))
}

/// A forward reader of a step function held as `(key, value)` entries sorted by key. Every walk
/// reads each list at keys that never decrease, and appends only keys at least as large as those
/// read, so the reader only moves forward: a walk costs no binary search (perf, issue 12: the
/// searches were two thirds of the predictor's time).
#[derive(Debug, Clone, Copy, Default)]
struct Cursor {
    /// The number of entries at or below the last key read.
    next: usize,
    /// The value of the last of them, 0 when there is none.
    value: u64,
}

impl Cursor {
    /// The value of the last entry whose key is at most `key`, 0 before the first. The value
    /// is kept, not read back from the list at each call (callgrind, issue 24: the read and
    /// its bounds check were a tenth of the walk).
    fn step_at(&mut self, entries: &[(u64, u64)], key: u64) -> u64 {
        while let Some(&(k, v)) = entries.get(self.next) {
            if k > key {
                break;
            }
            self.value = v;
            self.next += 1;
        }
        self.value
    }
}

/// The model as a recurrence on cumulative counts over creation order (the `ledger` controller):
///
/// - `N_m`: copies created by rounds `0..=m`; `V_m = N_(m−K)`: copies on the ledger's start
///   reports at round `m`; `R(t) = N_⌊(t−B)/U⌋`: copies running by second `t`;
/// - `D(t)`: the dead prefix. A death of `c` at `t` sets `D = min(D + c, R(t))`. A round that sees
///   more than desired sets `D = max(D, V_m − desired)` (its commands go to the oldest copies
///   shown, which start at the gone prefix); a round that sees fewer creates the difference.
/// - What a pass sees at round `m` is `V_m − D(mU − G)`: deaths reach the ledger G seconds late.
///
/// It visits only rounds inside an unsettled stretch and jumps from a settled point to the
/// next death, so its cost is O((deaths + 1) · K), independent of duration and copy count.
fn walk(spec: &LessonParams<'_>, shape: &Shape, scratch: &mut Scratch) -> u64 {
    let (u, b, g) = (shape.period, shape.startup, shape.delay);
    let (d, end, k) = (spec.desired, spec.duration, shape.k);
    let Scratch {
        deaths,
        created,
        dead,
    } = scratch;
    let deaths = &deaths[..];
    // Creations as (round, cumulative count after it); starts with "nothing before round 0".
    created.clear();
    // The dead prefix over time: (second, D after every event of that second).
    dead.clear();
    dead.push((0, 0));
    // Cursors of the three monotone reads: N at the ledger's round m − K, N at the running
    // round ⌊(t − B)/U⌋, and D at the ledger's second t − G.
    let (mut at_visible, mut at_running, mut at_gone) =
        (Cursor::default(), Cursor::default(), Cursor::default());
    let running = |created: &Vec<(u64, u64)>, at_running: &mut Cursor, t: u64| -> u64 {
        if t < b {
            0
        } else {
            at_running.step_at(created, (t - b) / u)
        }
    };
    // The last values of the two lists, kept beside them: N after the last creation and D
    // after the last event (callgrind, issue 24: reading them back with `last()` was about
    // 6 % of the predictor).
    let mut created_total = 0u64;
    let mut dead_now = 0u64;
    // Rounds before the first whose second is at least B: mU ≥ B exactly when m ≥ ⌈B/U⌉.
    let startup_rounds = b.div_ceil(u);
    let mut best = 0u64;
    let mut next_death = 0usize;
    // Its second, `u64::MAX` when none is left: every event reads it, and reading it from the
    // list was about 3 % of the predictor (callgrind, issue 24).
    let mut next_death_at = deaths.first().map_or(u64::MAX, |e| e.0);
    // The next created batch whose second of becoming live has not been visited yet.
    let mut next_live = 0usize;
    let mut m: u64 = 0;
    let mut quiet_rounds = 0u64;
    loop {
        let t = m * u;
        // Seconds strictly before this round, in time order: deaths, and batches becoming live
        // (live copies rise only then). Deaths of second t itself come just before the round.
        loop {
            let death = (next_death_at <= t).then_some(next_death_at);
            let live_round = created.get(next_live).map(|&(r, _)| r);
            let live = live_round.map(|r| r * u + b).filter(|&s| s < t);
            let s = match (death, live) {
                (None, None) => break,
                (Some(a), None) => a,
                (None, Some(l)) => l,
                (Some(a), Some(l)) => a.min(l),
            };
            if live == Some(s) {
                next_live += 1;
            }
            if s > end {
                // Nothing later is inside the run; the round check below ends the walk.
                if death == Some(s) {
                    next_death += 1;
                    next_death_at = deaths.get(next_death).map_or(u64::MAX, |e| e.0);
                }
                continue;
            }
            let before = dead_now;
            let mut dn = before;
            // R(s) is N at round ⌊(s − B)/U⌋: a batch's own round when it becomes live at s,
            // without a division.
            let running_s = match live_round {
                Some(r) if live == Some(s) => at_running.step_at(created, r),
                _ => running(created, &mut at_running, s),
            };
            if death == Some(s) {
                dn = (dn + deaths[next_death].1).min(running_s).max(dn);
                next_death += 1;
                next_death_at = deaths.get(next_death).map_or(u64::MAX, |e| e.0);
            }
            if dn != before || s == t {
                dead.push((s, dn));
                dead_now = dn;
            }
            if s < t {
                best = best.max(running_s.saturating_sub(dn));
            }
        }
        if t > end {
            break;
        }
        // The round at t.
        let visible = match m.checked_sub(k) {
            Some(round) => at_visible.step_at(created, round),
            None => 0,
        };
        let gone = if g == 0 {
            dead_now
        } else {
            match t.checked_sub(g) {
                Some(second) => at_gone.step_at(dead, second),
                None => 0,
            }
        };
        let seen = visible - gone.min(visible);
        let mut changed = false;
        // Copies this round creates, 0 if none.
        let shortfall = d.saturating_sub(seen);
        if seen < d {
            // Every creation so far came from a round before m.
            created_total += d - seen;
            created.push((m, created_total));
            changed = true;
        } else if seen > d {
            let target = visible - d;
            if target > dead_now {
                dead.push((t, target));
                dead_now = target;
                changed = true;
            }
        }
        // A batch created now with B = 0 is live at t itself.
        while created.get(next_live).is_some_and(|&(r, _)| r * u + b <= t) {
            next_live += 1;
        }
        // R at the round itself: ⌊(mU − B)/U⌋ = m − ⌈B/U⌉ once mU ≥ B, without a division a
        // round (callgrind, issue 24).
        let running_t = match m.checked_sub(startup_rounds) {
            Some(round) => at_running.step_at(created, round),
            None => 0,
        };
        best = best.max(running_t.saturating_sub(dead_now));
        quiet_rounds = if changed { 0 } else { quiet_rounds + 1 };
        // Settled: nothing changed for K + lag rounds, every creation is on the ledger and every
        // death has left it, and every batch is live.
        let settled = quiet_rounds > k + shape.lag
            && visible == created_total
            && gone == dead_now
            && next_live == created.len();
        if settled {
            quiet_rounds = 0;
            match deaths.get(next_death) {
                // Jump to the last round before the next death.
                Some(&(at, _)) => m = (at / u).max(m + 1),
                None => break,
            }
        } else if changed && shortfall == 0 {
            m += 1;
        } else {
            // A round that deleted nothing reads V, the gone prefix and D, and so does every
            // later round, the same, until one of them moves: V at the next creation's round +
            // K, the gone prefix at the next step of D seen G seconds late, or D itself at the
            // next death. Batches becoming live in between move only `best`, at their own
            // seconds, which the event loop above visits. So the walk goes to the first such
            // round at once (callgrind, issue 24: the quiet rounds before a stretch settled
            // were a third of the predictor's work), and a round that created makes the same
            // batch at every round it jumps over (the blind rounds: 28 % of the rounds walked,
            // but only 3 % of the walk's instructions).
            let next_visible = created
                .get(at_visible.next)
                .map_or(u64::MAX, |&(r, _)| r + k);
            let next_gone = match dead.get(at_gone.next) {
                Some(&(s, _)) if g > 0 => (s + g).div_ceil(u),
                _ => u64::MAX,
            };
            let next_death_round = deaths
                .get(next_death)
                .map_or(u64::MAX, |&(at, _)| at.div_ceil(u));
            let next = next_visible
                .min(next_gone)
                .min(next_death_round)
                .min(end / u + 1)
                .max(m + 1);
            if shortfall > 0 {
                for round in m + 1..next {
                    created_total += shortfall;
                    created.push((round, created_total));
                }
            } else {
                quiet_rounds += next - m - 1;
            }
            m = next;
        }
    }
    best.saturating_sub(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lesson_world::Death;
    use crate::{simulate, LessonWorld};

    fn spec(desired: u64, period: u64, delay: u64, startup: u64) -> LessonSpec {
        LessonSpec {
            desired,
            period,
            delay,
            startup,
            ..LessonSpec::default()
        }
    }

    #[test]
    fn closed_form_reproduces_the_lessons_rows() {
        for (g, created, unneeded, commands, deleted, overshoot, stable) in [
            (0, 8, 0, 0, 0, 0, 305),
            (20, 16, 8, 16, 8, 6, 375),
            (30, 24, 16, 32, 16, 12, 405),
            (60, 40, 32, 128, 32, 24, 495),
        ] {
            let p = predict(&spec(6, 15, g, 5));
            assert_eq!(p.regime, Regime::Closed);
            assert_eq!(p.overshoot, overshoot, "G={g}");
            let c = p.closed.unwrap();
            assert_eq!(
                (
                    c.created,
                    c.unneeded,
                    c.delete_commands,
                    c.deleted,
                    c.stable
                ),
                (created, unneeded, commands, deleted, Some(stable)),
                "G={g}"
            );
        }
    }

    #[test]
    fn no_delay_and_no_startup_predicts_zero_not_negative() {
        assert_eq!(predict(&spec(6, 15, 0, 0)).overshoot, 0);
    }

    #[test]
    fn short_period_against_startup_overshoots_less_than_the_lesson_says() {
        // U = 1, B = 5, G = 0: five blind rounds, but the loop deletes one batch per round while
        // later batches are still starting, so no more than one batch is ever live.
        let p = predict(&spec(6, 1, 0, 5));
        assert_eq!(p.overshoot, 0);
        assert_eq!(crate::lesson::lesson_prediction(6, 0, 5, 1), 24);
        assert_eq!(
            simulate(&LessonWorld::new(spec(6, 1, 0, 5)).unwrap()).overshoot,
            0
        );
    }

    #[test]
    fn intent_never_overshoots() {
        let mut s = spec(6, 1, 90, 40);
        s.controller = ControllerKind::Intent;
        assert_eq!(predict(&s).overshoot, 0);
        assert_eq!(predict(&s).regime, Regime::Intent);
    }

    #[test]
    fn death_inside_the_ramp_is_walked_and_exact() {
        let mut s = spec(1, 2, 0, 5);
        s.deaths = vec![Death { at: 7, count: 1 }];
        let p = predict(&s);
        assert_eq!(p.regime, Regime::Walked);
        assert_eq!(
            p.overshoot,
            simulate(&LessonWorld::new(s).unwrap()).overshoot
        );
    }
}
