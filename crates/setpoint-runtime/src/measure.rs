//! The lesson's metrics of a real run, computed from the event log ([`crate::events`]).
//!
//! # How real time becomes the lab's seconds
//! The lab counts whole seconds; a real run happens in continuous time. A measurement has an
//! **origin** (store milliseconds; by default the workload's first logged pass) and a **time
//! scale** `s`: one second of the experiment's virtual clock lasts `1000 · s` real milliseconds
//! (`s = 1` measures in real seconds; the compressed lesson runs at `s = 0.01`). An event at real
//! time `x` happens in virtual second `⌊(x − origin) / (1000 · s)⌋`, and the per-second series is
//! the state **at the end of each second**, as the lab counts it after the second's round:
//!
//! - a copy is **live** in second `k` when its `ready` event falls in second `k` or earlier and its
//!   `exit` event (if any) in a later second;
//! - `created` counts the `create` events of the second, `delete commands` the commands of the
//!   rounds of the second, `deleted` the assignments those commands removed from copies that had
//!   not exited yet, and `died` the exits nobody commanded;
//! - `rounds` counts the passes whose start falls in seconds `0 ..= last`;
//! - `desired`, `seen` and `pending` are those of the last pass at or before the second.
//!
//! The series then goes through [`setpoint_core::metrics_from_series`], the same definitions
//! the lab's engine is checked against, so a real run and a simulated one are measured alike.
//!
//! Besides the metrics, a measurement gives the run's real jitter ([`Jitter`]): how long a copy
//! took to reach the ledger after it became ready, how late each round ran, and so on.

use std::collections::BTreeMap;

use serde::Serialize;
use setpoint_core::metrics::{metrics_from_series, Metrics, TraceRow};

use crate::events::{read_log, CopyEvent, CopyEventKind, Logged, RoundEvent};
use crate::store::{Revision, Store, StoreError};

/// The span of a measurement and its clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// Virtual second 0 starts here, in store milliseconds.
    pub origin_ms: u64,
    /// Real milliseconds per virtual second, divided by 1000 (1 = real seconds).
    pub time_scale: f64,
    /// The last virtual second measured; seconds `0 ..= last` are.
    pub last: u64,
}

impl Window {
    /// The real length of one virtual second, in milliseconds.
    pub fn second_ms(&self) -> f64 {
        1000.0 * self.time_scale
    }

    /// The virtual second in which real time `at_ms` falls (negative before the origin).
    pub fn second_of(&self, at_ms: u64) -> i64 {
        ((at_ms as f64 - self.origin_ms as f64) / self.second_ms()).floor() as i64
    }

    /// Real milliseconds as virtual seconds.
    pub fn virtual_seconds(&self, ms: f64) -> f64 {
        ms / self.second_ms()
    }
}

/// The spread of one kind of latency, in real milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    /// How many samples.
    pub count: u64,
    /// The smallest.
    pub min: i64,
    /// The median (nearest rank).
    pub p50: i64,
    /// The 99th percentile (nearest rank).
    pub p99: i64,
    /// The largest.
    pub max: i64,
}

impl Spread {
    /// The spread of `samples` (nearest-rank percentiles: `pXX` is the smallest sample that at
    /// least XX % of the samples do not exceed).
    pub fn of(mut samples: Vec<i64>) -> Self {
        samples.sort_unstable();
        let rank = |p: usize| samples[(p * samples.len()).div_ceil(100).max(1) - 1];
        match (samples.first(), samples.last()) {
            (Some(&min), Some(&max)) => Spread {
                count: samples.len() as u64,
                min,
                p50: rank(50),
                p99: rank(99),
                max,
            },
            _ => Spread::default(),
        }
    }
}

/// The real delays of a run, in real milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Jitter {
    /// From a copy becoming ready to the report that put it on the ledger being written. It
    /// includes the emulated report delay G, the wait for the next report and the tick.
    pub ready_to_ledger: Spread,
    /// From a copy's exit being seen to the report that took it off the ledger.
    pub exit_to_ledger: Spread,
    /// From the pass that created a copy to its process being spawned (the agent's assignment
    /// read).
    pub create_to_start: Spread,
    /// From spawn to ready: the startup time B plus up to one tick.
    pub start_to_ready: Spread,
    /// How far each pass started from its place on the period grid `first pass + k · U`
    /// (negative: early).
    pub round_error: Spread,
}

/// What `measure` found for one workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Measurement {
    /// The workload.
    pub workload: String,
    /// The window measured.
    #[serde(skip)]
    pub window: Window,
    /// Virtual second 0, in store milliseconds.
    pub origin_ms: u64,
    /// The time scale.
    pub time_scale: f64,
    /// The last virtual second measured.
    pub last_second: u64,
    /// The lesson's metrics, defined as the lab defines them.
    pub metrics: Metrics,
    /// Real delays.
    pub jitter: Jitter,
    /// Creations that replaced a failed start (a copy that ended, uncommanded, before it was
    /// ever ready: a crash loop's restarts). Such copies count neither in `metrics.died` nor,
    /// through their replacements, in `metrics.unneeded`.
    pub restarts: u64,
    /// The per-second series the metrics come from.
    #[serde(skip)]
    pub series: Vec<TraceRow>,
}

/// Why a measurement could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeasureError {
    /// The workload has no event log: it never ran a pass, or the name is wrong.
    #[error("no events logged for workload '{0}' (see 'setpoint get')")]
    NoEvents(String),
    /// The window holds no second: `--since` is in the future, or too little time has passed.
    #[error("nothing to measure: the window holds no complete second")]
    EmptyWindow,
    /// The window starts before the oldest event kept: the event log was compacted
    /// ([`crate::retention`]).
    #[error("the window starts at {since_ms} ms, before the event log's retention kept anything (events before {kept_from_ms} ms were removed): accepted a --since at or after {kept_from_ms} ms")]
    Compacted {
        /// Where the window starts, in store milliseconds.
        since_ms: u64,
        /// The oldest time kept.
        kept_from_ms: u64,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Everything the log says about one incarnation of one copy, in store milliseconds.
#[derive(Clone, Debug, Default)]
struct CopyLife {
    create: Option<u64>,
    delete: Option<u64>,
    start: Option<u64>,
    ready: Option<u64>,
    exit: Option<(u64, bool)>,
    seen: Option<u64>,
    unseen: Option<u64>,
}

/// How to choose the window of [`measure`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowSpec {
    /// Virtual second 0; `None`: the workload's first logged pass.
    pub since_ms: Option<u64>,
    /// The last virtual second; `None`: the last complete second before `now_ms`.
    pub last: Option<u64>,
    /// Real milliseconds per virtual second, divided by 1000.
    pub time_scale: f64,
    /// The loop period U in real milliseconds, for the round timing error; `None` leaves it out.
    pub period_ms: Option<u64>,
    /// The store's clock now.
    pub now_ms: u64,
}

/// Measures workload `workload` from its event log.
pub fn measure(
    store: &dyn Store,
    workload: &str,
    spec: &WindowSpec,
) -> Result<Measurement, MeasureError> {
    let log = read_log(store, workload)?;
    let rounds: Vec<&RoundEvent> = log
        .iter()
        .filter_map(|l| match l {
            Logged::Round(r) => Some(r),
            Logged::Copy { .. } => None,
        })
        .collect();
    let first_round = rounds
        .first()
        .ok_or_else(|| MeasureError::NoEvents(workload.to_owned()))?;
    let origin_ms = spec.since_ms.unwrap_or(first_round.at_ms);
    let kept_from_ms = crate::retention::kept_from(store)?;
    if origin_ms < kept_from_ms {
        return Err(MeasureError::Compacted {
            since_ms: origin_ms,
            kept_from_ms,
        });
    }
    let mut window = Window {
        origin_ms,
        time_scale: spec.time_scale,
        last: 0,
    };
    window.last = match spec.last {
        Some(l) => l,
        None => {
            let complete = window.second_of(spec.now_ms);
            if complete < 1 {
                return Err(MeasureError::EmptyWindow);
            }
            complete as u64 - 1
        }
    };
    Ok(from_log(workload, &log, window, spec.period_ms))
}

/// The measurement of `log` over `window`.
pub fn from_log(
    workload: &str,
    log: &[Logged],
    window: Window,
    period_ms: Option<u64>,
) -> Measurement {
    let mut copies: BTreeMap<(u64, Revision), CopyLife> = BTreeMap::new();
    let mut rounds: Vec<&RoundEvent> = Vec::new();
    for l in log {
        match l {
            Logged::Round(r) => rounds.push(r),
            Logged::Copy {
                kind,
                n,
                incarnation,
                event,
            } => record(copies.entry((*n, *incarnation)).or_default(), *kind, event),
        }
    }
    rounds.sort_by_key(|r| r.at_ms);

    let len = window.last as usize + 1;
    let mut rows: Vec<TraceRow> = (0..len)
        .map(|t| TraceRow {
            t: t as u64,
            desired: 0,
            live: 0,
            seen: 0,
            pending: 0,
            created: 0,
            delete_commands: 0,
            deleted: 0,
            died: 0,
        })
        .collect();
    let index = |at_ms: u64| -> Option<usize> {
        let s = window.second_of(at_ms);
        (0..len as i64).contains(&s).then_some(s as usize)
    };
    // Live copies as +1 at the ready second and −1 at the exit second.
    let mut change = vec![0i64; len + 1];
    let clamp = |s: i64| s.clamp(0, len as i64) as usize;
    for life in copies.values() {
        if let Some(at) = life.create.and_then(index) {
            rows[at].created += 1;
        }
        if let Some(del) = life.delete {
            // A command reaches a dead copy when the copy ended by itself before it.
            let already_dead = life
                .exit
                .is_some_and(|(x, commanded)| !commanded && x <= del);
            if let (false, Some(at)) = (already_dead, index(del)) {
                rows[at].deleted += 1;
            }
        }
        if let Some((x, false)) = life.exit {
            if let Some(at) = index(x) {
                rows[at].died += 1;
            }
        }
        let Some(ready) = life.ready else { continue };
        let from = clamp(window.second_of(ready));
        let to = life.exit.map_or(len, |(x, _)| clamp(window.second_of(x)));
        if from < to {
            change[from] += 1;
            change[to] -= 1;
        }
    }
    let mut live = 0i64;
    for (row, c) in rows.iter_mut().zip(&change) {
        live += c;
        row.live = live.max(0) as u64;
    }
    // Desired, seen and pending: those of the last pass at or before each second.
    let mut counted_rounds = 0u64;
    let mut next = rounds.iter().peekable();
    let mut current: Option<&RoundEvent> = rounds.first().copied();
    for (k, row) in rows.iter_mut().enumerate() {
        while let Some(r) = next.next_if(|r| window.second_of(r.at_ms) <= k as i64) {
            if window.second_of(r.at_ms) >= 0 {
                counted_rounds += 1;
                row.delete_commands += r.delete_commands;
            }
            current = Some(r);
        }
        if let Some(r) = current {
            (row.desired, row.seen, row.pending) = (r.desired, r.on_ledger, r.in_flight);
        }
    }
    // The idle rounds not written (`controller/rounds.rs`): each shows what the round entry
    // before it showed and sent no command, so it changes no row; only the count.
    let end_ms = window.origin_ms + ((window.last + 1) as f64 * window.second_ms()).ceil() as u64;
    for (i, r) in rounds.iter().enumerate() {
        counted_rounds += crate::events::elided_rounds(r, rounds.get(i + 1).copied(), end_ms)
            .filter(|&t| (0..len as i64).contains(&window.second_of(t)))
            .count() as u64;
    }
    let mut metrics = metrics_from_series(&rows, counted_rounds);
    // A failed start is no death of a live copy: the lab's `unneeded = created − needed − died`
    // would count its replacement as needed twice over (−2 for two crash-looping copies).
    let failed = copies
        .values()
        .filter(|l| l.ready.is_none())
        .filter(|l| matches!(l.exit, Some((x, false)) if index(x).is_some()))
        .count() as u64;
    metrics.died -= failed;
    let restarts = (metrics.unneeded + failed as i64).clamp(0, failed as i64);
    metrics.unneeded += failed as i64 - restarts;
    let restarts = restarts as u64;
    let jitter = jitter(&copies, &rounds, &window, period_ms);
    Measurement {
        workload: workload.to_owned(),
        window,
        origin_ms: window.origin_ms,
        time_scale: window.time_scale,
        last_second: window.last,
        metrics,
        jitter,
        restarts,
        series: rows,
    }
}

fn record(life: &mut CopyLife, kind: CopyEventKind, e: &CopyEvent) {
    let at = Some(e.at_ms);
    match kind {
        CopyEventKind::Create => life.create = at,
        CopyEventKind::Delete => life.delete = at,
        CopyEventKind::Start => life.start = at,
        CopyEventKind::Ready => life.ready = at,
        CopyEventKind::Exit => life.exit = Some((e.at_ms, e.commanded)),
        CopyEventKind::Seen => life.seen = at,
        CopyEventKind::Unseen => life.unseen = at,
    }
}

/// The real delays of the copies and rounds whose events fall in `window`.
fn jitter(
    copies: &BTreeMap<(u64, Revision), CopyLife>,
    rounds: &[&RoundEvent],
    window: &Window,
    period_ms: Option<u64>,
) -> Jitter {
    let inside = |at: u64| (0..=window.last as i64).contains(&window.second_of(at));
    let gap = |from: Option<u64>, to: Option<u64>| match (from, to) {
        (Some(a), Some(b)) if inside(a) => Some(b as i64 - a as i64),
        _ => None,
    };
    let spread =
        |f: &dyn Fn(&CopyLife) -> Option<i64>| Spread::of(copies.values().filter_map(f).collect());
    let mut j = Jitter {
        ready_to_ledger: spread(&|c| gap(c.ready, c.seen)),
        exit_to_ledger: spread(&|c| {
            // Only copies that were on the ledger can leave it.
            c.seen?;
            gap(c.exit.map(|e| e.0), c.unseen)
        }),
        create_to_start: spread(&|c| gap(c.create, c.start)),
        start_to_ready: spread(&|c| gap(c.start, c.ready)),
        round_error: Spread::default(),
    };
    if let Some(u) = period_ms.filter(|&u| u > 0) {
        let inside_rounds: Vec<u64> = rounds
            .iter()
            .map(|r| r.at_ms)
            .filter(|&a| inside(a))
            .collect();
        if let Some(&first) = inside_rounds.first() {
            let u = u as f64;
            j.round_error = Spread::of(
                inside_rounds
                    .iter()
                    .map(|&a| {
                        let d = (a - first) as f64;
                        (d - (d / u).round() * u).round() as i64
                    })
                    .collect(),
            );
        }
    }
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(kind: CopyEventKind, n: u64, at_ms: u64, commanded: bool) -> Logged {
        Logged::Copy {
            kind,
            n,
            incarnation: 1,
            event: CopyEvent {
                at_ms,
                node: "a".into(),
                pid: None,
                commanded,
                how: None,
            },
        }
    }

    fn round(at_ms: u64, desired: u64, created: u64, delete_commands: u64) -> Logged {
        Logged::Round(RoundEvent {
            at_ms,
            desired,
            on_ledger: 0,
            in_flight: 0,
            created,
            delete_commands,
            commanded: Vec::new(),
            fence: None,
            period_ms: 0,
            missed: 0,
        })
    }

    #[test]
    fn events_fall_in_the_virtual_second_of_their_real_time_and_are_counted_at_its_end() {
        // Time scale 0.01: a virtual second is 10 ms. Origin 1000.
        use CopyEventKind::*;
        let log = vec![
            round(1000, 1, 1, 0),
            copy(Create, 0, 1000, false),
            copy(Start, 0, 1003, false),
            // Ready at 1054.9 ms → virtual second 5.
            copy(Ready, 0, 1054, false),
            round(1150, 1, 0, 0),
            // Died (nobody commanded it) in second 20, replaced at the round of second 30.
            copy(Exit, 0, 1209, false),
            round(1300, 1, 1, 0),
            copy(Create, 1, 1300, false),
            copy(Ready, 1, 1351, false),
            round(1450, 1, 0, 0),
        ];
        let w = Window {
            origin_ms: 1000,
            time_scale: 0.01,
            last: 50,
        };
        let m = from_log("w", &log, w, Some(150));
        let live: Vec<u64> = m.series.iter().map(|r| r.live).collect();
        assert_eq!(&live[..6], [0, 0, 0, 0, 0, 1]);
        assert_eq!((live[19], live[20], live[34], live[35]), (1, 0, 0, 1));
        let x = m.metrics;
        assert_eq!((x.rounds, x.created, x.died, x.unneeded), (4, 2, 1, 0));
        assert_eq!((x.overshoot, x.stable), (0, Some(35)));
        assert_eq!(m.jitter.round_error.max, 0);
    }

    #[test]
    fn a_crash_loops_replacements_are_restarts_not_negative_unneeded() {
        // Two copies wanted; every attempt of two fails before it is ready, four attempts.
        use CopyEventKind::*;
        let mut log = Vec::new();
        for attempt in 0..4u64 {
            let at = 1000 + attempt * 100;
            log.push(round(at, 2, 2, 0));
            for k in 0..2 {
                let n = attempt * 2 + k;
                log.push(copy(Create, n, at, false));
                log.push(copy(Start, n, at + 2, false));
                log.push(copy(Exit, n, at + 5, false));
            }
        }
        let w = Window {
            origin_ms: 1000,
            time_scale: 0.01,
            last: 50,
        };
        let m = from_log("w", &log, w, None);
        let x = m.metrics;
        assert_eq!((x.created, x.died, x.unneeded), (8, 0, 0));
        assert_eq!(
            m.restarts, 6,
            "the first two were needed; six replaced failures"
        );
        // Then a copy that became ready and died is a death again, and its replacement needed.
        log.push(copy(Create, 8, 1500, false));
        log.push(copy(Ready, 8, 1510, false));
        log.push(copy(Exit, 8, 1520, false));
        let w = Window { last: 60, ..w };
        let m = from_log("w", &log, w, None);
        assert_eq!((m.metrics.died, m.metrics.unneeded, m.restarts), (1, 0, 6));
    }

    #[test]
    fn a_delete_command_to_a_copy_already_dead_counts_but_deletes_nothing() {
        use CopyEventKind::*;
        let log = vec![
            round(0, 0, 0, 2),
            copy(Ready, 0, 0, false),
            copy(Ready, 1, 0, false),
            copy(Exit, 0, 0, false),
            copy(Delete, 0, 0, true),
            copy(Delete, 1, 0, true),
            copy(Exit, 1, 5, true),
        ];
        let w = Window {
            origin_ms: 0,
            time_scale: 1.0,
            last: 3,
        };
        let x = from_log("w", &log, w, None).metrics;
        assert_eq!((x.delete_commands, x.deleted, x.died), (2, 1, 1));
    }

    /// Idle rounds left out (`controller/rounds.rs`) measure exactly as if every round were
    /// written. The oracle is the log with every round; the other leaves out, by the rule the
    /// controller follows, each idle round that shows what the round before it showed, and
    /// writes the round after grid points that ran no pass with their count in `missed`.
    /// Rounds run on the grid `k·U` plus a read delay under a quarter second, and virtual
    /// second 0 starts half a second before the first grid point, as a real experiment's
    /// window starts before its loop's first pass; the window ends before the loop stops.
    #[test]
    fn leaving_idle_rounds_out_measures_what_writing_every_round_measures() {
        use proptest::prelude::*;
        let step = (
            any::<bool>(),
            0u64..=2,
            0u64..4,
            0u64..=1,
            0u64..=1,
            0u64..100,
        );
        let strategy = (
            prop_oneof![Just(10u64), Just(100), Just(1000)],
            1u64..=4,
            proptest::collection::vec(step, 4..80),
        );
        proptest!(ProptestConfig::with_cases(300), |((second_ms, p, steps) in strategy)| {
            let u = p * second_ms;
            let mut all = Vec::new();
            let mut written = Vec::new();
            let mut last: Option<RoundEvent> = None;
            let mut missed = 0;
            for (k, &(runs, on_ledger, change, created, deletes, lat)) in steps.iter().enumerate() {
                if k > 0 && !runs && k % 3 == 0 {
                    // This grid point ran no pass (an overrun).
                    missed += 1;
                    last = None;
                    continue;
                }
                let keep_same = change > 0 && last.is_some();
                let mut r = RoundEvent {
                    at_ms: k as u64 * u + lat * second_ms / 400,
                    desired: 3,
                    on_ledger: if keep_same { last.as_ref().unwrap().on_ledger } else { on_ledger },
                    in_flight: 0,
                    created: if keep_same { 0 } else { created },
                    delete_commands: if keep_same { 0 } else { deletes },
                    commanded: Vec::new(),
                    fence: Some(1),
                    period_ms: u,
                    missed: 0,
                };
                // The oracle's rounds carry no period: only those written are counted.
                all.push(Logged::Round(RoundEvent { period_ms: 0, ..r.clone() }));
                let leave_out = missed == 0
                    && r.is_idle()
                    && last.as_ref().is_some_and(|l| r.shows_same(l));
                r.missed = missed;
                if !leave_out {
                    written.push(Logged::Round(r.clone()));
                    missed = 0;
                }
                last = Some(r);
            }
            let end_ms = (steps.len() as u64 - 1) * u;
            let origin_ms = 0;
            // Virtual second 0 starts half a second before the first grid point (shifted
            // so that times stay non-negative).
            let shift = second_ms / 2;
            let shifted = |log: &[Logged]| -> Vec<Logged> {
                log.iter().map(|l| match l {
                    Logged::Round(r) => Logged::Round(RoundEvent { at_ms: r.at_ms + shift, ..r.clone() }),
                    other => other.clone(),
                }).collect()
            };
            let last_second = (end_ms / second_ms).saturating_sub(1);
            let w = Window { origin_ms, time_scale: second_ms as f64 / 1000.0, last: last_second };
            let _ = &w;
            let oracle = from_log("w", &shifted(&all), w, Some(u));
            let measured = from_log("w", &shifted(&written), w, Some(u));
            prop_assert_eq!(&oracle.metrics, &measured.metrics);
            prop_assert_eq!(&oracle.series, &measured.series);
        });
    }

    #[test]
    fn spreads_use_nearest_rank_percentiles() {
        let s = Spread::of((1..=100).collect());
        assert_eq!((s.min, s.p50, s.p99, s.max, s.count), (1, 50, 99, 100, 100));
        assert_eq!(Spread::of(vec![]), Spread::default());
    }
}
