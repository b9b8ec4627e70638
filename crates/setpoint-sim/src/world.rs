//! The general engine: every controller, several workloads, random per-report delays and the
//! whole event timeline.
//!
//! The lesson's engine ([`crate::engine`]) gets away with a few counters because, with one fixed
//! delay, copies reach the ledger in creation order. Random delays break that order, so this
//! engine keeps one record per copy and a time-ordered queue of what happens next: copies that
//! finish starting, scripted events, and reports that reach the ledger. Its cost is
//! O((copies + events + acting rounds) · log n); like the lesson's engine it skips every round in
//! which no pass could decide differently. One queue entry stands for the consecutive copies a
//! happening reaches at one second (a batch that starts; reports made and due at the same
//! seconds), dispatched copy by copy in the order their own entries had (`Ev::absorb`).
//!
//! # Order within a second
//! At second `t`, in this order (`docs/model.md` gives the reasons):
//! 1. copies whose startup ends at `t` start running;
//! 2. the scripted events of `t`, in the scenario's order (deaths strike copies running now);
//! 3. reports due at `t` reach the ledger (including those of step 2 with no delay);
//! 4. if `t` is a multiple of the period, each workload's pass, in the scenario's order, and
//!    its actions;
//! 5. what step 4 set off for `t` itself: copies with no startup start, reports with no delay
//!    arrive;
//! 6. the live count of each workload is measured.

use std::collections::{BTreeMap, BTreeSet};

use crate::world_store::{CopySet, EventQueue, Key, Transit};

use setpoint_core::{
    Action, Batch, Controller, ControllerKind, CopyId, Desired, LedgerView, Name, Time,
};

use crate::delay::{whole_seconds, WorldRng};
use crate::engine::TraceSpan;
use crate::metrics::Metrics;
use crate::metrics::TraceRow;
use crate::scenario::{
    Event, Outcome, RolloutMetrics, Scenario, ScenarioError, ScenarioSpec, Toll, WorkloadMetrics,
    MAX_LAB_COPIES,
};
use setpoint_core::rollout::{self, Amount, Budget};

/// The record of one copy.
#[derive(Debug, Clone)]
struct CopyRec {
    /// Its name, for named workloads.
    name: Option<Name>,
    /// Whether it has started running.
    started: bool,
    /// Whether it has died or been deleted.
    dead: bool,
    /// Whether the report of its end has reached the ledger. A start report that arrives after
    /// it is dropped: the ledger knows the copy is gone.
    end_arrived: bool,
    /// When it was created.
    created: Time,
    /// The generation of the template it was created from.
    generation: u64,
    /// Whether a delete command reached it (its assignment is gone, in the runtime's terms).
    commanded: bool,
    /// The node it runs on ([`crate::pipeline`]'s placement); 0 under per-report, which has
    /// no use for it.
    node: u32,
}

impl CopyRec {
    /// A copy just created at `created` from template `generation`, on `node`: not started,
    /// alive, never commanded.
    fn fresh(name: Option<Name>, created: Time, generation: u64, node: u32) -> Self {
        Self {
            name,
            started: false,
            dead: false,
            end_arrived: false,
            created,
            generation,
            commanded: false,
            node,
        }
    }
}

/// What happens at a point of the queue.
///
/// `Ready` and `Arrive` stand for `n` copies, `id` and those after it: a batch's copies start
/// at one second and their reports, made at one second, arrive at one second under a fixed
/// delay; one entry then carries them all, dispatched copy by copy in the order their own
/// entries would have been popped ([`EventQueue::push_merged`], [`Ev::absorb`]).
#[derive(Debug, Clone, Copy)]
enum Ev {
    /// Copies finish starting.
    Ready { w: usize, id: u64, n: u32 },
    /// A scripted event, by index into the sorted timeline.
    Scripted(usize),
    /// A stale-view window of one workload closes.
    StaleEnd { w: usize },
    /// A crash-looping copy ends by itself.
    Fail { w: usize, id: u64 },
    /// Reports reach the ledger, each of its copy's start or (`end`) its end. `made` is when
    /// they were made.
    Arrive {
        w: usize,
        id: u64,
        n: u32,
        end: bool,
        made: Time,
    },
    /// Under `snapshot`: the reports of snapshot `f` (an index into [`Engine::flights`]) that
    /// reach the ledger at this second, in their order.
    Flight { f: usize },
}

impl Ev {
    /// Takes `next` into `self` when it is the same happening to the copies right after
    /// `self`'s: then dispatching `self` does what dispatching both, one after the other, did.
    #[inline]
    fn absorb(&mut self, next: &Ev) -> bool {
        match (self, *next) {
            (
                Ev::Ready { w, id, n },
                Ev::Ready {
                    w: w2,
                    id: id2,
                    n: n2,
                },
            ) if *w == w2 && *id + u64::from(*n) == id2 => {
                n.checked_add(n2).map(|sum| *n = sum).is_some()
            }
            (
                Ev::Arrive {
                    w,
                    id,
                    n,
                    end,
                    made,
                },
                Ev::Arrive {
                    w: w2,
                    id: id2,
                    n: n2,
                    end: end2,
                    made: made2,
                },
            ) if *w == w2 && *id + u64::from(*n) == id2 && *end == end2 && *made == made2 => {
                n.checked_add(n2).map(|sum| *n = sum).is_some()
            }
            _ => false,
        }
    }
}

/// Queue classes: the order of kinds within one second.
const READY: u8 = 0;
const SCRIPTED: u8 = 1;
const ARRIVE: u8 = 2;

/// A ledger frozen at the opening of a stale-view window.
#[derive(Debug, Clone)]
struct Frozen {
    shown: CopySet,
    names: BTreeMap<Name, u64>,
    reported_before: Time,
}

/// Running totals of one workload, in the units of [`Metrics`].
#[derive(Debug, Default, Clone)]
struct Tally {
    created: u64,
    absorbed: u64,
    commands: u64,
    lost: u64,
    deleted: u64,
    died: u64,
    required: u64,
    overshoot: u64,
    peak_live: u64,
    copy_seconds_above: u64,
    last_drift: Option<Time>,
    duplicates: u64,
    /// `update` events that struck the workload.
    updates: u64,
    surge_budget: u64,
    surge: u64,
    surge_copy_seconds: u64,
    rollout_overshoot: u64,
    rollout_done: Option<Time>,
    rollout_stalled: Option<Time>,
}

/// A rollout under way, as the runtime's loop record keeps it (`loops::RolloutRecord`).
#[derive(Debug, Clone, Copy)]
struct RolloutRec {
    /// The generation it rolls out.
    generation: u64,
    /// When it last made progress.
    progress: Time,
    /// Copies of the new generation available at the last progress.
    updated: u64,
    /// Copies of older generations left at the last progress.
    old: u64,
    /// No progress within the deadline: it stopped.
    stalled: bool,
}

/// The settings of a workload's last `update` event.
#[derive(Debug, Clone, Copy)]
struct RolloutSettings {
    max_surge: Amount,
    max_unavailable: Amount,
    progress_deadline: Time,
    counts_pending: bool,
}

/// One workload's part of the world.
#[derive(Debug)]
struct Work {
    desired: u64,
    startup: Time,
    copies: Vec<CopyRec>,
    /// Running copies (started, not dead), by identity: the oldest first.
    live: CopySet,
    /// Copies the ledger shows, by identity: the oldest first.
    shown: CopySet,
    /// How many shown copies carry each name.
    shown_names: BTreeMap<Name, u64>,
    /// Existing copies (starting or running) of each name.
    existing_names: BTreeMap<Name, BTreeSet<u64>>,
    /// Running copies of each name.
    live_names: BTreeMap<Name, u64>,
    frozen: Option<Frozen>,
    stale_depth: u32,
    /// Outage windows `[start, end)`, merged and sorted.
    outages: Vec<(Time, Time)>,
    /// Delete commands still to be lost.
    lost_armed: u64,
    /// Whether the view may have changed since the last pass.
    dirty: bool,
    /// Whether the last pass returned an action.
    acted: bool,
    tally: Tally,
    /// A crash loop: copies end this many seconds after creation, for this many more starts.
    crash: Option<(Time, u64)>,
    /// The backoff settings of the last crash loop, and each key's backoff (the workload's,
    /// `None`, or a name's for `named`), as the runtime keeps them (`setpoint_core::backoff`).
    backoff: Option<setpoint_core::backoff::BackoffPolicy>,
    backoffs: BTreeMap<Option<Name>, setpoint_core::backoff::Backoff>,
    /// A pass held back by a backoff is due again at this time.
    backoff_wake: Option<Time>,
    /// The template's generation: 1, and one more at each `update` event.
    generation: u64,
    /// The last `update` event's settings.
    rollout_settings: Option<RolloutSettings>,
    /// An `update` event whose rollout no pass has finished yet.
    update_pending: bool,
    /// The rollout under way.
    rollout: Option<RolloutRec>,
    /// Copies above desired the rollout under way allows (0 with none): the surge budget.
    allowed: u64,
    /// Under `per-copy`, each copy's lane, by identity: when its last report is delivered.
    lanes: Vec<crate::pipeline::Lane>,
}

impl Work {
    /// When a report due at `arrival` reaches the ledger: at the end of an outage that holds it.
    fn hold(&self, arrival: Time) -> Time {
        let i = self.outages.partition_point(|&(start, _)| start <= arrival);
        match i.checked_sub(1).map(|j| self.outages[j]) {
            Some((_, end)) if arrival < end => end,
            _ => arrival,
        }
    }

    fn record(&mut self, live: u64, from: Time, to: Time) {
        let t = &mut self.tally;
        t.peak_live = t.peak_live.max(live);
        if live > self.desired {
            // A rollout's surge within its budget is deliberate; only what is beyond it is
            // overshoot (docs/model.md, "Rolling updates").
            let surge = (live - self.desired).min(self.allowed);
            let above = live - self.desired - surge;
            let seconds = to - from + 1;
            t.surge = t.surge.max(surge);
            t.surge_copy_seconds = t
                .surge_copy_seconds
                .saturating_add(surge.saturating_mul(seconds));
            t.overshoot = t.overshoot.max(above);
            if self.update_pending || self.rollout.is_some() {
                t.rollout_overshoot = t.rollout_overshoot.max(above);
            }
            t.copy_seconds_above = t
                .copy_seconds_above
                .saturating_add(above.saturating_mul(seconds));
        }
        if live != self.desired {
            t.last_drift = Some(to);
        }
    }
}

/// What a pass of one workload sees.
struct View<'a> {
    work: &'a Work,
    now: Time,
    reported_before: Time,
}

impl View<'_> {
    fn shown(&self) -> &CopySet {
        self.work
            .frozen
            .as_ref()
            .map_or(&self.work.shown, |f| &f.shown)
    }

    /// The copies of `batch` in flight: alive and not on the ledger this pass reads, oldest
    /// first.
    fn in_flight_ids(&self, batch: Batch) -> impl DoubleEndedIterator<Item = u64> + '_ {
        let end = batch.end().min(self.work.copies.len() as u64);
        let shown = self.shown();
        (batch.first.0..end)
            .filter(move |&id| !self.work.copies[id as usize].dead && !shown.contains(id))
    }

    /// Whether the ledger this pass reads shows a copy named `name`.
    fn names_on_ledger_contains(&self, name: Name) -> bool {
        match &self.work.frozen {
            Some(f) => f.names.contains_key(&name),
            None => self.work.shown_names.contains_key(&name),
        }
    }
}

impl LedgerView for View<'_> {
    fn now(&self) -> Time {
        self.now
    }

    fn on_ledger(&self) -> u64 {
        self.shown().len() as u64
    }

    fn in_flight(&self, batch: Batch) -> u64 {
        self.in_flight_ids(batch).count() as u64
    }

    fn next_copy(&self) -> CopyId {
        CopyId(self.work.copies.len() as u64)
    }

    fn shows(&self, copy: CopyId) -> bool {
        self.shown().contains(copy.0)
    }

    fn oldest_on_ledger(&self, n: u64) -> Vec<CopyId> {
        let shown = self.shown();
        let n = usize::try_from(n).unwrap_or(usize::MAX).min(shown.len());
        let mut ids = Vec::new();
        shown.first_into(n, &mut ids);
        ids.into_iter().map(CopyId).collect()
    }

    fn commanded(&self, copy: CopyId) -> bool {
        self.work.copies[copy.0 as usize].commanded
    }

    fn in_flight_copies(&self, batch: Batch) -> Vec<CopyId> {
        self.in_flight_ids(batch).rev().map(CopyId).collect()
    }

    fn reported_before(&self) -> Time {
        self.work
            .frozen
            .as_ref()
            .map_or(self.reported_before, |f| f.reported_before)
    }

    fn names_on_ledger(&self) -> Vec<Name> {
        match &self.work.frozen {
            Some(f) => f.names.keys().copied().collect(),
            None => self.work.shown_names.keys().copied().collect(),
        }
    }

    fn name_in_flight(&self, name: Name) -> bool {
        let shown = self.shown();
        self.work
            .existing_names
            .get(&name)
            .is_some_and(|ids| ids.iter().any(|&id| !shown.contains(id)))
    }
}

/// The whole world of one run.
struct Engine<'s> {
    spec: &'s ScenarioSpec,
    works: Vec<Work>,
    controllers: Vec<Controller>,
    queue: EventQueue<Ev>,
    rng: WorldRng,
    /// Reports on their way, by the time they were made.
    in_transit: Transit,
    total_created: u64,
    /// The most copies the run may create.
    budget: u64,
    /// Each copy's startup time drawn from this model instead of its workload's fixed one
    /// (`--startup-model`), in whole seconds rounded up as report delays are.
    startup_model: Option<&'s crate::delay::DelayModel>,
    /// Each node's pipeline, under a mode other than per-report.
    nodes: Vec<NodePipe>,
    /// Under `snapshot`: the snapshots on their way, by index (a free one has no reports).
    flights: Vec<Flight>,
    /// The indices of free entries of `flights`.
    free_flights: Vec<usize>,
    /// Every report sent, for the tests' oracles; `None` outside them.
    log: Option<Vec<ReportLog>>,
    /// The copies a pass's delete commands go to (a buffer kept across passes).
    targets: Vec<u64>,
    /// Under per-report with a delay model that draws nothing (not random, not empirical):
    /// every report's delay, in whole seconds.
    fixed_report: Option<Time>,
}

/// One node's report pipeline (`crate::pipeline`).
#[derive(Debug, Default)]
struct NodePipe {
    /// `in-order` per copy event.
    lane: crate::pipeline::Lane,
    /// `in-order` with a snapshot period.
    periodic: crate::pipeline::PeriodicLane,
    /// `snapshot`: the lane, and the snapshot sent last while it is on its way (its index in
    /// [`Engine::flights`]).
    snapshot: crate::pipeline::SnapshotLane,
    flight: Option<usize>,
}

/// A snapshot on its way (`snapshot` pipeline): the reports it carries, those of the snapshots
/// it replaced first, in the order they were made.
///
/// A snapshot that replaces the one in flight takes over its reports as they are: only the
/// queue's entries of the old one are taken out, one per second its reports reach the ledger
/// at (one, unless an outage holds some workloads' reports), not one per report. Re-queueing
/// every report at each replacement made a long chain of replacements quadratic in its length
/// (issue 24, part 4: a 135 s run took 18.9 s).
#[derive(Debug, Default)]
struct Flight {
    /// Its node.
    node: usize,
    /// The reports, each an [`Ev::Arrive`] with its index in the tests' log.
    reports: Vec<(Ev, usize)>,
    /// Its delivery, before any outage.
    at: Time,
    /// The workloads of its reports, each once.
    works: Vec<usize>,
    /// Its entries in the queue not yet popped: one per second its reports arrive at.
    keys: Vec<Key>,
}

/// Runs `scenario` on the general engine with the world's generator seeded by `seed`.
pub fn run_general(scenario: &Scenario, seed: u64) -> Result<Outcome, ScenarioError> {
    run_with_budget(scenario, seed, MAX_LAB_COPIES, None)
}

/// [`run_general`], handing `observer` one [`TraceRow`] per workload per second, in order of
/// time, then of workload.
pub fn run_general_traced(
    scenario: &Scenario,
    seed: u64,
    observer: &mut dyn FnMut(usize, &TraceRow),
) -> Result<Outcome, ScenarioError> {
    run_with_budget(
        scenario,
        seed,
        MAX_LAB_COPIES,
        Some(&mut |spans: &[TraceSpan]| {
            let Some(first) = spans.first() else { return };
            for s in first.row.t..=first.until {
                for (i, span) in spans.iter().enumerate() {
                    observer(i, &span.row_at(s));
                }
            }
        }),
    )
}

/// [`run_general_traced`] one [`TraceSpan`] per workload (by index) at a time: a run that holds
/// still costs what changes, not its seconds. Each workload's spans cover every second from 0 to
/// the duration, in order.
pub fn run_general_spans(
    scenario: &Scenario,
    seed: u64,
    observer: &mut dyn FnMut(usize, &TraceSpan),
) -> Result<Outcome, ScenarioError> {
    run_with_budget(
        scenario,
        seed,
        MAX_LAB_COPIES,
        Some(&mut |spans: &[TraceSpan]| {
            for (i, span) in spans.iter().enumerate() {
                observer(i, span);
            }
        }),
    )
}

/// Receives the [`TraceSpan`]s of one stretch of a run in which nothing changes, one per
/// workload in the scenario's order, all with the same first and last second.
pub type LabObserver<'a> = dyn FnMut(&[TraceSpan]) + 'a;

/// What a workload had done before a second: created, commands, deleted, died.
fn counts(w: &Work) -> [u64; 4] {
    let t = &w.tally;
    [t.created, t.commands, t.deleted, t.died]
}

/// The state of a workload at the end of second `t`, with what happened since `before`.
fn trace_row(w: &Work, t: Time, before: [u64; 4]) -> TraceRow {
    let now = counts(w);
    TraceRow {
        t,
        desired: w.desired,
        live: w.live.len() as u64,
        seen: w.shown.len() as u64,
        pending: w
            .copies
            .iter()
            .enumerate()
            .filter(|(id, c)| !c.dead && !w.shown.contains(*id as u64))
            .count() as u64,
        created: now[0] - before[0],
        delete_commands: now[1] - before[1],
        deleted: now[2] - before[2],
        died: now[3] - before[3],
    }
}

/// [`run_general`], stopping with an error once more than `budget` copies were created.
fn run_with_budget(
    scenario: &Scenario,
    seed: u64,
    budget: u64,
    observer: Option<&mut LabObserver>,
) -> Result<Outcome, ScenarioError> {
    run_engine(scenario, seed, budget, observer, None)
}

/// One report as it was sent, for the tests' oracles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReportLog {
    /// The copy's workload and identity, and whether it reports the end.
    w: usize,
    id: u64,
    end: bool,
    /// The node it was sent from.
    node: u32,
    /// When it was made, and when its own draw makes it due (`made + ⌈d / 1000⌉`; the
    /// snapshot's own delivery under a snapshot period, which has no draw of its own).
    made: Time,
    due: Time,
    /// When the pipeline delivers it, before any outage (under `snapshot`, of the snapshot
    /// it was sent in: a later one that replaced it changes it).
    at: Time,
    /// Under `snapshot`: whether a later snapshot replaced the one it was sent in.
    replaced: bool,
}

/// [`run_general`] with every workload's name left empty (no allocation): for Monte Carlo,
/// whose summary names the workloads once, not once per run.
pub(crate) fn run_general_unnamed(
    scenario: &Scenario,
    seed: u64,
) -> Result<Outcome, ScenarioError> {
    run_engine_with(scenario, seed, MAX_LAB_COPIES, None, None, false)
}

/// [`run_with_budget`], keeping a [`ReportLog`] of every report in `log` when given.
fn run_engine(
    scenario: &Scenario,
    seed: u64,
    budget: u64,
    observer: Option<&mut LabObserver>,
    log: Option<&mut Vec<ReportLog>>,
) -> Result<Outcome, ScenarioError> {
    run_engine_with(scenario, seed, budget, observer, log, true)
}

/// [`run_engine`]; the outcome names the workloads when `names` is set.
fn run_engine_with(
    scenario: &Scenario,
    seed: u64,
    budget: u64,
    mut observer: Option<&mut LabObserver>,
    log: Option<&mut Vec<ReportLog>>,
    names: bool,
) -> Result<Outcome, ScenarioError> {
    let spec = scenario.spec();
    crate::limits::check_general_copies(spec, budget)?;
    let mut engine = Engine::new(spec, seed);
    engine.budget = budget;
    engine.startup_model = scenario.startup_model();
    engine.log = log.is_some().then(Vec::new);
    let duration = spec.duration;
    let period = spec.period;
    let mut t: Time = 0;
    loop {
        let before: Vec<[u64; 4]> = match observer {
            Some(_) => engine.works.iter().map(counts).collect(),
            None => Vec::new(),
        };
        engine.second(t)?;
        let next_round = engine.next_round(t);
        let next_event = engine.queue.next_time();
        let next = match (next_round, next_event) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => duration + 1,
        }
        .min(duration + 1);
        debug_assert!(next > t);
        for w in &mut engine.works {
            let live = w.live.len() as u64;
            w.record(live, t, next - 1);
        }
        if let Some(observe) = observer.as_mut() {
            // Until `next` nothing happens: no round acts and no event is due.
            let spans: Vec<TraceSpan> = engine
                .works
                .iter()
                .zip(&before)
                .map(|(w, &since)| TraceSpan {
                    row: trace_row(w, t, since),
                    until: next - 1,
                    period,
                    round_commands: 0,
                })
                .collect();
            observe(&spans);
        }
        if next > duration {
            break;
        }
        t = next;
    }
    let rounds = duration / period + 1;
    if engine.log.is_some() {
        // Snapshots still on their way at the end: the log learns where their reports go.
        for f in 0..engine.flights.len() {
            if !engine.flights[f].reports.is_empty() {
                engine.free_flight(f);
            }
        }
    }
    #[cfg(test)]
    LAST_PUSHES.set(engine.queue.pushes());
    if let (Some(out), Some(kept)) = (log, engine.log.take()) {
        *out = kept;
    }
    let workloads = engine
        .works
        .iter()
        .zip(&spec.workloads)
        .map(|(w, decl)| {
            let name = if names {
                decl.name.clone()
            } else {
                String::new()
            };
            finish(name, &w.tally, rounds, duration)
        })
        .collect();
    engine.recycle();
    Ok(Outcome {
        seed: (spec.delay.is_random() || scenario.startup_model().is_some_and(|m| m.is_random()))
            .then_some(seed),
        engine: "general",
        workloads,
    })
}

fn finish(workload: String, t: &Tally, rounds: u64, duration: Time) -> WorkloadMetrics {
    let required = i128::from(t.required) + i128::from(t.died);
    WorkloadMetrics {
        workload,
        metrics: Metrics {
            rounds,
            work_per_round: (t.created + t.absorbed + t.commands) as f64 / rounds as f64,
            created: t.created,
            unneeded: (i128::from(t.created) - required) as i64,
            delete_commands: t.commands,
            deleted: t.deleted,
            overshoot: t.overshoot,
            stable: match t.last_drift {
                None => Some(0),
                Some(d) if d == duration => None,
                Some(d) => Some(d + 1),
            },
            died: t.died,
            peak_live: t.peak_live,
            copy_seconds_above: t.copy_seconds_above,
        },
        duplicate_names: t.duplicates,
        absorbed_creates: t.absorbed,
        lost_deletes: t.lost,
        rollout: if t.updates == 0 {
            RolloutMetrics::default()
        } else {
            RolloutMetrics {
                surge_budget: Some(t.surge_budget),
                surge: Some(t.surge),
                surge_copy_seconds: Some(t.surge_copy_seconds),
                rollout_overshoot: Some(t.rollout_overshoot),
                rollout_done: t.rollout_done,
                rollout_stalled: t.rollout_stalled,
            }
        },
    }
}

/// The containers of a finished run, emptied, for the next run on the same thread: a Monte
/// Carlo sweep runs a million short runs, and allocating and freeing them every run was a tenth
/// of the engine's instructions (callgrind, issue 24).
#[derive(Default)]
struct Spare {
    queue: EventQueue<Ev>,
    transit: Transit,
    /// Each workload's copy records and its live and shown sets.
    works: Vec<(Vec<CopyRec>, CopySet, CopySet)>,
    /// The buffer of a pass's delete targets.
    targets: Vec<u64>,
}

/// Containers that grew past this many entries are freed instead of kept.
const KEPT_ENTRIES: usize = 1 << 14;

thread_local! {
    static SPARE: std::cell::Cell<Spare> = std::cell::Cell::default();
}

#[cfg(test)]
thread_local! {
    /// The queue entries the last run on this thread pushed: the tests' measure of its work.
    static LAST_PUSHES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl Engine<'_> {
    /// Hands the run's containers to the next run on this thread.
    fn recycle(&mut self) {
        let mut spare = Spare {
            queue: std::mem::take(&mut self.queue),
            transit: std::mem::take(&mut self.in_transit),
            works: Vec::new(),
            targets: std::mem::take(&mut self.targets),
        };
        if spare.targets.capacity() > KEPT_ENTRIES {
            spare.targets = Vec::new();
        }
        spare.queue.clear();
        spare.transit.clear();
        for w in self.works.drain(..) {
            if w.copies.capacity() <= KEPT_ENTRIES {
                spare.works.push((w.copies, w.live, w.shown));
            }
        }
        SPARE.set(spare);
    }
}

impl<'s> Engine<'s> {
    // Inline into its one caller in a run: the engine (its generator's block buffer alone is
    // 320 bytes) is then built where it lives instead of being copied out (memcpy was 2.8 % of
    // a Monte Carlo run, callgrind, issue 24 part 4).
    #[inline(always)]
    fn new(spec: &'s ScenarioSpec, seed: u64) -> Self {
        let mut spare = SPARE.take();
        let works = spec
            .workloads
            .iter()
            .map(|decl| {
                let (mut copies, mut live, mut shown) = spare.works.pop().unwrap_or_default();
                copies.clear();
                live.clear();
                shown.clear();
                (decl, copies, live, shown)
            })
            .map(|(decl, copies, live, shown)| Work {
                desired: decl.desired,
                startup: decl.startup,
                copies,
                live,
                shown,
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
            })
            .collect();
        let mut engine = Engine {
            spec,
            works,
            controllers: spec
                .workloads
                .iter()
                .map(|_| spec.controller.build())
                .collect(),
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
        let mut windows: Vec<Vec<(Time, Time)>> = vec![Vec::new(); spec.workloads.len()];
        for (i, e) in spec.events.iter().enumerate() {
            engine.push(e.at, SCRIPTED, Ev::Scripted(i));
            if let Event::Outage { seconds } = e.event {
                if seconds > 0 {
                    for w in engine.targets(e.workload.as_deref()) {
                        windows[w].push((e.at, e.at.saturating_add(seconds)));
                    }
                }
            }
        }
        for (work, mut ws) in engine.works.iter_mut().zip(windows) {
            ws.sort_unstable();
            for (start, end) in ws {
                match work.outages.last_mut() {
                    Some(last) if start <= last.1 => last.1 = last.1.max(end),
                    _ => work.outages.push((start, end)),
                }
            }
        }
        engine
    }

    #[inline]
    fn push(&mut self, at: Time, class: u8, ev: Ev) -> Key {
        self.queue.push(at, class, ev)
    }

    /// The workloads an event strikes.
    fn targets(&self, workload: Option<&str>) -> std::ops::Range<usize> {
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
    fn reported_before(&self, now: Time) -> Time {
        self.in_transit
            .earliest()
            .map_or(now + 1, |made| made.min(now + 1))
    }

    /// The next second after `t` at which some workload needs a pass.
    fn next_round(&self, t: Time) -> Option<Time> {
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

    /// Everything that happens at second `t`, in the documented order.
    fn second(&mut self, t: Time) -> Result<(), ScenarioError> {
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
    fn drain(&mut self, t: Time) -> Result<(), ScenarioError> {
        // Most calls find nothing (the drain after the passes of a quiet second): a bit of the
        // calendar tells, without the call and its frame (3 % of a Monte Carlo run).
        if self.queue.surely_none_at(t) {
            return Ok(());
        }
        self.drain_queue(t)
    }

    fn drain_queue(&mut self, t: Time) -> Result<(), ScenarioError> {
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

    /// The reports of snapshot `f` that reach the ledger at `t`, in their order: those whose
    /// workload's outages hold the snapshot's delivery to `t`.
    fn land(&mut self, f: usize, t: Time) {
        let reports = std::mem::take(&mut self.flights[f].reports);
        let at = self.flights[f].at;
        for &(ev, _) in &reports {
            if let Ev::Arrive {
                w,
                id,
                n,
                end,
                made,
            } = ev
            {
                if self.works[w].hold(at) == t {
                    self.arrive(w, id, n, end, made);
                }
            }
        }
        let flight = &mut self.flights[f];
        flight.reports = reports;
        flight.keys.retain(|key| key.0 != t);
        if flight.keys.is_empty() {
            self.free_flight(f);
        }
    }

    /// Frees snapshot `f`, every report of it delivered (or the run over): it is no longer in
    /// flight, and the tests' log learns where its reports went.
    fn free_flight(&mut self, f: usize) {
        let flight = &mut self.flights[f];
        if let Some(log) = self.log.as_mut() {
            let last = flight.reports.len().saturating_sub(1);
            for (k, &(_, i)) in flight.reports.iter().enumerate() {
                log[i].at = flight.at;
                // Every report but the last was made before a later snapshot replaced its own.
                log[i].replaced = k < last;
            }
        }
        flight.reports.clear();
        flight.works.clear();
        flight.keys.clear();
        let node = flight.node;
        if self.nodes[node].flight == Some(f) {
            self.nodes[node].flight = None;
        }
        self.free_flights.push(f);
    }

    /// Copies `first` to `first + n − 1` of workload `w` finish starting at `t`, in that order.
    fn ready(&mut self, w: usize, first: u64, n: u32, t: Time) {
        let end = first + u64::from(n);
        if self.fixed_report.is_none() || self.log.is_some() {
            for id in first..end {
                if self.start(w, id) {
                    self.report(w, id, false, t);
                }
            }
            return;
        }
        // Under a delay that draws nothing, the reports of consecutive copies travel in one
        // entry: the queue ends as it would after one report each (`Ev::absorb`).
        let mut run = first;
        for id in first..end {
            if !self.start(w, id) {
                self.report_fixed(w, run, id - run, false, t);
                run = id + 1;
            }
        }
        self.report_fixed(w, run, end - run, false, t);
    }

    /// Copy `id` of workload `w` starts running, unless it is dead; returns whether it started.
    #[inline]
    fn start(&mut self, w: usize, id: u64) -> bool {
        let work = &mut self.works[w];
        let rec = &mut work.copies[id as usize];
        if rec.dead {
            return false;
        }
        rec.started = true;
        work.live.insert(id);
        if let Some(name) = rec.name {
            let n = work.live_names.entry(name).or_insert(0);
            if *n > 0 {
                work.tally.duplicates += 1;
            }
            *n += 1;
        }
        true
    }

    /// [`Engine::report`] of the starts (or ends) of copies `first` to `first + n − 1` made at
    /// `t`, under a delay that draws nothing and with no log: one queue entry for all of them.
    fn report_fixed(&mut self, w: usize, first: u64, n: u64, end: bool, t: Time) {
        let (Some(seconds), Ok(count)) = (self.fixed_report, u32::try_from(n)) else {
            for id in first..first + n {
                self.report(w, id, end, t);
            }
            return;
        };
        if count == 0 {
            return;
        }
        self.in_transit.send_many(t, n);
        let due = t.saturating_add(seconds);
        let arrival = self.works[w].hold(due);
        let ev = Ev::Arrive {
            w,
            id: first,
            n: count,
            end,
            made: t,
        };
        self.queue.push_merged(arrival, ARRIVE, ev, Ev::absorb);
    }

    /// Sends the report of copy `id` starting (or ending) at `t` on its way to the ledger.
    fn report(&mut self, w: usize, id: u64, end: bool, t: Time) {
        self.in_transit.send(t);
        let ev = Ev::Arrive {
            w,
            id,
            n: 1,
            end,
            made: t,
        };
        if let Some(seconds) = self.fixed_report {
            // The same as below without the draw's dispatch, and no outage to search most often.
            let due = t.saturating_add(seconds);
            let work = &self.works[w];
            let arrival = if work.outages.is_empty() {
                due
            } else {
                work.hold(due)
            };
            self.queue.push_merged(arrival, ARRIVE, ev, Ev::absorb);
            self.note(ev, 0, due, due);
        } else if self.spec.pipeline.is_per_report() {
            let delay = self.spec.delay.sample(&mut self.rng);
            let due = t.saturating_add(whole_seconds(delay));
            let arrival = self.works[w].hold(due);
            self.queue.push_merged(arrival, ARRIVE, ev, Ev::absorb);
            self.note(ev, 0, due, due);
        } else {
            self.report_piped(w, id, t, ev);
        }
    }

    /// Keeps report `ev` in the tests' log, when kept; returns its index there.
    #[inline]
    fn note(&mut self, ev: Ev, node: u32, due: Time, at: Time) -> usize {
        let (
            Some(log),
            Ev::Arrive {
                w, id, end, made, ..
            },
        ) = (self.log.as_mut(), ev)
        else {
            return 0;
        };
        log.push(ReportLog {
            w,
            id,
            end,
            node,
            made,
            due,
            at,
            replaced: false,
        });
        log.len() - 1
    }

    /// [`Engine::report`] under a pipeline other than per-report: the delivery of the report
    /// `ev` of copy `id` made at `t` follows the mode's rule (`crate::pipeline`); an outage then
    /// holds it at the ledger.
    fn report_piped(&mut self, w: usize, id: u64, t: Time, ev: Ev) {
        use crate::pipeline::Pipeline;
        let pipe = self.spec.pipeline;
        let node = self.works[w].copies[id as usize].node;
        let n = node as usize;
        if pipe.report_every_ms > 0 {
            let (delay, rng) = (&self.spec.delay, &mut self.rng);
            let at = self.nodes[n]
                .periodic
                .send(t, pipe.report_every_ms, delay.max_ms(), |_| {
                    delay.sample(rng)
                });
            let arrival = self.works[w].hold(at);
            self.queue.push_merged(arrival, ARRIVE, ev, Ev::absorb);
            self.note(ev, node, at, at);
            return;
        }
        let due = t.saturating_add(whole_seconds(self.spec.delay.sample(&mut self.rng)));
        let at = match pipe.mode {
            Pipeline::PerReport | Pipeline::InOrder => self.nodes[n].lane.send(due),
            Pipeline::PerCopy => self.works[w].lanes[id as usize].send(due),
            Pipeline::Snapshot => {
                let sent = self.nodes[n].snapshot.send(t, due);
                let i = self.note(ev, node, due, sent.at);
                let f = match self.nodes[n].flight {
                    Some(f) if sent.replaced => {
                        // The reports of the snapshot in flight travel with this one, in their
                        // order, before it: its queue entries go.
                        for key in std::mem::take(&mut self.flights[f].keys) {
                            self.queue.remove(key);
                        }
                        f
                    }
                    _ => {
                        let f = self.free_flights.pop().unwrap_or_else(|| {
                            self.flights.push(Flight::default());
                            self.flights.len() - 1
                        });
                        self.flights[f].node = n;
                        self.nodes[n].flight = Some(f);
                        f
                    }
                };
                let flight = &mut self.flights[f];
                flight.reports.push((ev, i));
                flight.at = sent.at;
                if !flight.works.contains(&w) {
                    flight.works.push(w);
                }
                // One queue entry for each second its reports reach the ledger at.
                let mut keys = std::mem::take(&mut self.flights[f].keys);
                for k in 0..self.flights[f].works.len() {
                    let arrival = self.works[self.flights[f].works[k]].hold(sent.at);
                    if !keys.iter().any(|key| key.0 == arrival) {
                        keys.push(self.push(arrival, ARRIVE, Ev::Flight { f }));
                    }
                }
                self.flights[f].keys = keys;
                return;
            }
        };
        let arrival = self.works[w].hold(at);
        self.queue.push_merged(arrival, ARRIVE, ev, Ev::absorb);
        self.note(ev, node, due, at);
    }

    /// The reports of copies `first` to `first + n − 1` of workload `w`, made at `made`, reach
    /// the ledger, in that order.
    #[inline]
    fn arrive(&mut self, w: usize, first: u64, n: u32, end: bool, made: Time) {
        self.in_transit.arrive(made, u64::from(n));
        let work = &mut self.works[w];
        for id in first..first + u64::from(n) {
            let rec = &mut work.copies[id as usize];
            let name = rec.name;
            if end {
                rec.end_arrived = true;
                if work.shown.remove(id) {
                    if let Some(name) = name {
                        decrement(&mut work.shown_names, name);
                    }
                }
            } else if !rec.end_arrived {
                work.shown.insert(id);
                if let Some(name) = name {
                    *work.shown_names.entry(name).or_insert(0) += 1;
                }
            }
        }
        work.dirty = true;
        // A gated pass reads how far the whole ledger has caught up, which any report moves.
        if self.spec.controller.kind == ControllerKind::Gated {
            for other in &mut self.works {
                other.dirty = true;
            }
        }
    }

    /// A delete command reaches copy `id` of workload `w` at `t`: it stops, and its
    /// assignment is gone. Returns whether it was alive.
    #[inline]
    fn stop(&mut self, w: usize, id: u64, t: Time) -> bool {
        let rec = &mut self.works[w].copies[id as usize];
        rec.commanded = true;
        // Most commands of a ledger-driven loop reach copies already dead, whose end the
        // ledger has not heard of yet: nothing more to do for them.
        !rec.dead && self.kill(w, id, t)
    }

    /// Kills copy `id` of workload `w` at `t`. Returns whether it was alive.
    fn kill(&mut self, w: usize, id: u64, t: Time) -> bool {
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
    fn kill_unreported(&mut self, w: usize, id: u64) -> (bool, bool) {
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

    fn scripted(&mut self, i: usize, t: Time) {
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

    /// Workload `w`'s pass at `t`, and its actions.
    fn pass(&mut self, w: usize, t: Time) -> Result<(), ScenarioError> {
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
        if let Some(a @ Action::Delete { .. }) = &action {
            let controller = &self.controllers[w];
            if controller.kind() == ControllerKind::Intent {
                let ids = controller.delete_targets(&view, a.size());
                targets.extend(ids.into_iter().map(|c| c.0));
            } else {
                let n = usize::try_from(a.size()).unwrap_or(usize::MAX);
                view.shown().first_into(n, &mut targets);
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
    fn rollout_pass(
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
    fn delete(&mut self, w: usize, size: u64, targets: &[u64], t: Time) {
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
            let rec = &mut self.works[w].copies[id as usize];
            rec.commanded = true;
            if rec.dead {
                continue;
            }
            if !batch {
                deleted += u64::from(self.kill(w, id, t));
                continue;
            }
            let (alive, started) = self.kill_unreported(w, id);
            deleted += u64::from(alive);
            if started {
                if run.1 > 0 && run.0 + run.1 == id {
                    run.1 += 1;
                } else {
                    self.report_fixed(w, run.0, run.1, true, t);
                    run = (id, 1);
                }
            }
        }
        self.report_fixed(w, run.0, run.1, true, t);
        self.works[w].tally.deleted += deleted;
    }

    /// One delete command of workload `w`: lost if a loss is armed, otherwise carried out by
    /// `deliver`, which returns how many copies it deleted.
    fn command(&mut self, w: usize, deliver: impl FnOnce(&mut Self) -> u64) {
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
    fn create_unnamed(&mut self, w: usize, count: u64, t: Time) -> Result<(), ScenarioError> {
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

    fn create(&mut self, w: usize, name: Option<Name>, t: Time) -> Result<(), ScenarioError> {
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

impl Engine<'_> {
    /// A crash-looping copy ends at `t` by itself: a failed start if it never became ready,
    /// otherwise a death. Either way its key backs off, as the runtime counts every uncommanded
    /// exit (the lesson's deaths are commanded, and replaced at once).
    fn fail(&mut self, w: usize, id: u64, t: Time) {
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
        let seen_ending = !rec.started || (rec.end_arrived && !shown.contains(id));
        !(rec.commanded || (rec.dead && seen_ending))
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

fn decrement(map: &mut BTreeMap<Name, u64>, name: Name) {
    if let Some(n) = map.get_mut(&name) {
        *n -= 1;
        if *n == 0 {
            map.remove(&name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::simulate;
    use crate::lesson::LESSON_DELAYS;
    use crate::lesson_world::LessonWorld;

    fn general(scenario: &LessonWorld) -> Metrics {
        run_general(&Scenario::from_lesson(scenario), 1)
            .unwrap()
            .workloads[0]
            .metrics
    }

    #[test]
    fn the_lessons_rows_match_the_fast_engine() {
        for controller in ControllerKind::LESSON {
            for delay in LESSON_DELAYS {
                let s = LessonWorld::lesson(delay, controller);
                assert_eq!(general(&s), simulate(&s), "G={delay} {controller}");
            }
        }
    }

    use crate::delay::DelayModel;
    use crate::scenario::{ControllerSpec, RolloutMetrics, ScenarioSpec, TimedEvent, Workload};

    fn lab(spec: ScenarioSpec, seed: u64) -> Outcome {
        run_general(&Scenario::new(spec).unwrap(), seed).unwrap()
    }

    fn event(at: Time, workload: Option<&str>, event: Event) -> TimedEvent {
        TimedEvent {
            at,
            workload: workload.map(str::to_owned),
            event,
        }
    }

    fn crash_spec(kind: ControllerKind, desired: u64) -> ScenarioSpec {
        ScenarioSpec {
            period: 2,
            duration: 120,
            delay: crate::delay::DelayModel::Fixed(0),
            controller: crate::scenario::ControllerSpec::new(kind),
            workloads: vec![crate::scenario::Workload {
                name: "ghost".into(),
                desired,
                startup: 3,
            }],
            events: vec![event(
                0,
                None,
                Event::CrashLoop {
                    after: 1,
                    starts: 1_000,
                    backoff: setpoint_core::backoff::BackoffPolicy {
                        initial: 4,
                        max: 16,
                        reset: 10_000,
                    },
                },
            )],
            unique_names: true,
            seed: 1,
            pipeline: Default::default(),
            startup_model: None,
        }
    }

    #[test]
    fn a_crash_loop_backs_off_on_the_runtimes_schedule() {
        // Each attempt ends 1 s after its creation; the next waits 4, 8, 16, 16 s from that end,
        // rounded up to the period of 2: gaps of 6, 10, 18, 18.
        for kind in [
            ControllerKind::Intent,
            ControllerKind::Ledger,
            ControllerKind::Named,
        ] {
            let s = Scenario::new(crash_spec(kind, 2)).unwrap();
            let at = crate::scenario::creation_times(&s, 1, 0).unwrap();
            assert_eq!(&at[..6], [0, 6, 16, 34, 52, 70], "{kind:?}");
            let out = lab(crash_spec(kind, 2), 1);
            let m = out.workloads[0].metrics;
            assert_eq!(
                (m.peak_live, m.died),
                (0, 0),
                "{kind:?}: failed starts are no deaths"
            );
            assert_eq!(m.created, 2 * at.len() as u64, "{kind:?}: two per attempt");
        }
        // Without the event nothing crashes, and without the backoff (initial 0) it is retried
        // every period.
        let mut spec = crash_spec(ControllerKind::Intent, 2);
        if let Event::CrashLoop { backoff, .. } = &mut spec.events[0].event {
            backoff.initial = 0;
            backoff.max = 0;
        }
        let at = crate::scenario::creation_times(&Scenario::new(spec).unwrap(), 1, 0).unwrap();
        assert_eq!(&at[..4], [0, 2, 4, 6]);
    }

    #[test]
    fn a_crash_loop_copy_that_ends_after_its_startup_is_a_death_and_backs_off_too() {
        // Each attempt ends 5 s after its creation, past its startup time of 3: a death, and,
        // as the runtime counts every uncommanded exit, a backoff of 4, 8, 16, 16 s from the end,
        // rounded up to the period of 2: gaps of 10, 14, 22, 22.
        let mut spec = crash_spec(ControllerKind::Intent, 1);
        if let Event::CrashLoop { after, .. } = &mut spec.events[0].event {
            *after = 5;
        }
        let at =
            crate::scenario::creation_times(&Scenario::new(spec.clone()).unwrap(), 1, 0).unwrap();
        assert_eq!(&at[..5], [0, 10, 24, 46, 68]);
        let m = lab(spec, 1).workloads[0].metrics;
        assert!(
            m.died >= 4,
            "ended after their startup: deaths ({})",
            m.died
        );
    }

    /// `desired` copies of `web` (startup `startup`), an update at 100 with these budgets, a
    /// fixed report delay of `g` seconds, the loop every `period`.
    fn update_spec(
        kind: ControllerKind,
        desired: u64,
        surge: Amount,
        unavailable: Amount,
        g: u64,
        period: Time,
        startup: Time,
    ) -> ScenarioSpec {
        ScenarioSpec {
            period,
            duration: 2000,
            delay: DelayModel::fixed_seconds(g),
            controller: ControllerSpec::new(kind),
            workloads: vec![Workload {
                name: "web".into(),
                desired,
                startup,
            }],
            events: vec![event(
                100,
                None,
                Event::Update {
                    max_surge: surge,
                    max_unavailable: unavailable,
                    progress_deadline: 600,
                    counts_pending: true,
                },
            )],
            unique_names: true,
            seed: 1,
            pipeline: Default::default(),
            startup_model: None,
        }
    }

    /// The per-second trace of workload 0.
    fn trace(spec: ScenarioSpec) -> (Outcome, Vec<TraceRow>) {
        let mut rows = Vec::new();
        let out = run_general_traced(&Scenario::new(spec).unwrap(), 1, &mut |_, r| rows.push(*r))
            .unwrap();
        (out, rows)
    }

    #[test]
    fn an_update_replaces_every_copy_within_its_surge_and_counts_surge_apart_from_overshoot() {
        // 8 copies, surge 25 % = 2, none unavailable. Delay 3, startup 5, U = 10: each new
        // copy runs 3 s (and up to the next round) before an old one may stop.
        let spec = update_spec(
            ControllerKind::Intent,
            8,
            Amount::Percent(25),
            Amount::Percent(0),
            3,
            10,
            5,
        );
        let (out, rows) = trace(spec);
        let w = &out.workloads[0];
        assert_eq!(w.metrics.created, 16, "8 first, 8 replacements");
        assert_eq!(w.metrics.deleted, 8, "every old copy deleted");
        assert_eq!(w.rollout.surge_budget, Some(2));
        assert_eq!(w.rollout.surge, Some(2), "the surge is used");
        assert_eq!(
            w.metrics.overshoot, 0,
            "surge within budget is no overshoot"
        );
        assert_eq!(w.metrics.copy_seconds_above, 0);
        assert!(w.rollout.surge_copy_seconds.unwrap() > 0);
        assert!(w.rollout.rollout_done.is_some_and(|t| t > 100));
        assert_eq!(w.rollout.rollout_stalled, None);
        for r in &rows {
            assert!(r.live <= 10, "second {}: {} live", r.t, r.live);
            assert!(r.t < 100 || r.live >= 8, "second {}: {} live", r.t, r.live);
        }
        // Nothing happens before the update, and the run ends with 8 live.
        assert!(rows[1..100].iter().all(|r| r.created == 0));
        assert_eq!(rows.last().unwrap().live, 8);
        // Without an update the rollout keys are empty.
        let plain = lab(
            ScenarioSpec {
                events: vec![event(10, None, Event::Restart)],
                ..ScenarioSpec::default()
            },
            1,
        );
        assert_eq!(plain.workloads[0].rollout, RolloutMetrics::default());
    }

    #[test]
    fn a_new_copy_is_on_the_ledger_before_an_old_one_stops_whatever_the_delay() {
        // Surge 1, unavailable 0: the first deletion waits until the first new copy has been
        // reported running: startup 5 + delay G, at the next round.
        for g in [0, 7, 30] {
            let (out, rows) = trace(update_spec(
                ControllerKind::Intent,
                4,
                Amount::Copies(1),
                Amount::Copies(0),
                g,
                5,
                5,
            ));
            let first_delete = rows
                .iter()
                .find(|r| r.t >= 100 && r.delete_commands > 0)
                .unwrap()
                .t;
            let on_ledger = 100 + 5 + g;
            assert_eq!(first_delete, on_ledger.div_ceil(5) * 5, "G={g}");
            assert!(rows.iter().all(|r| r.live <= 5), "G={g}");
            assert!(rows.iter().all(|r| r.t < 100 || r.live >= 4), "G={g}");
            // With no delay a new copy is reported in the second it starts, and an old one
            // stops in that second too: at whole seconds the surge never shows.
            let seen = u64::from(g > 0);
            assert_eq!(out.workloads[0].rollout.surge, Some(seen), "G={g}");
            assert_eq!(out.workloads[0].metrics.overshoot, 0, "G={g}");
        }
    }

    #[test]
    fn named_replaces_name_by_name_and_never_runs_two_copies_of_one_name() {
        let (out, rows) = trace(update_spec(
            ControllerKind::Named,
            6,
            Amount::Percent(25),
            Amount::Copies(2),
            3,
            5,
            5,
        ));
        let w = &out.workloads[0];
        assert_eq!(w.duplicate_names, 0);
        assert_eq!(w.metrics.created, 12);
        assert_eq!(w.rollout.surge, Some(0), "named cannot surge");
        assert!(w.rollout.rollout_done.is_some());
        // At most 2 names down at once.
        let low: Vec<_> = rows
            .iter()
            .filter(|r| r.t >= 100 && r.live < 4)
            .take(5)
            .collect();
        assert!(low.is_empty(), "{low:?}");
        assert_eq!(rows.last().unwrap().live, 6);
    }

    #[test]
    fn a_rollout_whose_new_copies_never_start_stalls_and_keeps_the_old_ones() {
        let mut spec = update_spec(
            ControllerKind::Intent,
            4,
            Amount::Copies(1),
            Amount::Copies(0),
            0,
            5,
            5,
        );
        spec.events[0].event = Event::Update {
            max_surge: Amount::Copies(1),
            max_unavailable: Amount::Copies(0),
            progress_deadline: 60,
            counts_pending: true,
        };
        spec.events.push(event(
            100,
            None,
            Event::CrashLoop {
                after: 1,
                starts: 1_000,
                backoff: setpoint_core::backoff::BackoffPolicy {
                    initial: 10,
                    max: 20,
                    reset: 1_000,
                },
            },
        ));
        let (out, rows) = trace(spec);
        let w = &out.workloads[0];
        assert_eq!(w.rollout.rollout_done, None);
        let stalled = w.rollout.rollout_stalled.unwrap();
        assert!((160..=170).contains(&stalled), "stalled at {stalled}");
        assert_eq!(w.metrics.deleted, 0, "no old copy stopped");
        assert!(rows.iter().all(|r| r.live == 4 || r.t < 5));
        assert!(
            rows.iter().all(|r| r.t <= stalled || r.created == 0),
            "nothing after the stall"
        );
    }

    #[test]
    fn a_rollout_that_counted_only_the_ledger_would_surge_once_more_per_blind_round() {
        // 8 copies, surge 2, none unavailable, B = 5, U = 15. Counting its own pending work
        // the rollout stays at 8 + 2 whatever G; counting only the ledger it creates 2 more at
        // each pass that runs before its new copies show (a report due at a round's second
        // arrives before its pass): floor((B + G − 1) / U) of them, capped at the 8 it
        // replaces.
        for g in [0, 10, 15, 30, 60] {
            let mut spec = update_spec(
                ControllerKind::Intent,
                8,
                Amount::Percent(25),
                Amount::Copies(0),
                g,
                15,
                5,
            );
            let right = lab(spec.clone(), 1).workloads[0].rollout;
            assert_eq!(
                (right.surge, right.rollout_overshoot),
                (Some(2), Some(0)),
                "G={g}"
            );
            if let Event::Update { counts_pending, .. } = &mut spec.events[0].event {
                *counts_pending = false;
            }
            let forgetful = lab(spec, 1).workloads[0].rollout;
            let blind = (5 + g - 1) / 15;
            assert_eq!(
                forgetful.rollout_overshoot,
                Some((2 * blind).min(8)),
                "G={g}"
            );
        }
    }

    mod rollouts {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

            /// Whatever the controller, delay, period, startup and budgets, a rollout started
            /// on a settled workload never runs more than desired + surge, never fewer than
            /// desired − unavailable, finishes, and leaves exactly desired copies.
            #[test]
            fn a_rollout_keeps_both_budgets_and_finishes(
                desired in 1u64..12,
                surge in 0u64..=100,
                unavailable in 0u64..=100,
                g in 0u64..60,
                period in 1u64..30,
                startup in 0u64..20,
                kind in prop_oneof![
                    Just(ControllerKind::Intent),
                    Just(ControllerKind::Ledger),
                    Just(ControllerKind::Expectations),
                    Just(ControllerKind::Gated),
                    Just(ControllerKind::Named),
                ],
            ) {
                let (surge, unavailable) = (Amount::Percent(surge), Amount::Percent(unavailable));
                prop_assume!(!(surge.is_zero() && unavailable.is_zero()));
                let mut spec = update_spec(kind, desired, surge, unavailable, g, period, startup);
                let cycle = 2 * (g + period) + startup + 2;
                spec.events[0].at = 20 * cycle;
                spec.duration = spec.events[0].at + 4 * (desired + 1) * cycle;
                let at = spec.events[0].at;
                let (out, rows) = trace(spec);
                let w = &out.workloads[0];
                let b = Budget::new(surge, unavailable, desired);
                let (most, fewest) = if kind == ControllerKind::Named {
                    (desired, desired - b.unavailable.max(1).min(desired))
                } else {
                    (desired + b.surge, desired - b.unavailable)
                };
                let done = w.rollout.rollout_done;
                prop_assert!(done.is_some(), "{w:?}");
                prop_assert_eq!(w.rollout.rollout_overshoot, Some(0));
                prop_assert_eq!(w.duplicate_names, 0);
                for r in &rows[at as usize..=done.unwrap() as usize] {
                    prop_assert!(r.live <= most, "second {}: {} live", r.t, r.live);
                    prop_assert!(r.live >= fewest, "second {}: {} live", r.t, r.live);
                }
                prop_assert_eq!(rows.last().unwrap().live, desired);
            }
        }
    }

    #[test]
    fn per_report_delays_bring_copies_to_the_ledger_out_of_order() {
        let spec = ScenarioSpec {
            controller: ControllerSpec::new(ControllerKind::Intent),
            delay: DelayModel::Uniform {
                min: 0,
                max: 60_000,
            },
            workloads: vec![Workload {
                name: "w".into(),
                desired: 20,
                startup: 0,
            }],
            ..ScenarioSpec::default()
        };
        let mut engine = Engine::new(&spec, 5);
        engine.second(0).unwrap();
        let mut out_of_order = false;
        for t in 1..=60 {
            engine.second(t).unwrap();
            let shown = &engine.works[0].shown;
            let prefix = shown.iter().enumerate().all(|(i, id)| i as u64 == id);
            out_of_order |= !prefix;
        }
        assert!(out_of_order);
        assert_eq!(engine.works[0].shown.len(), 20, "all arrived by 60 s");
    }

    #[test]
    fn an_outage_holds_every_report_until_it_ends() {
        // No delay, but no report reaches the ledger before 100: a ledger-only loop creates six
        // copies at each of the rounds 0, 15, …, 90.
        let m = lab(
            ScenarioSpec {
                events: vec![event(0, None, Event::Outage { seconds: 100 })],
                ..ScenarioSpec::default()
            },
            1,
        );
        assert_eq!(m.workloads[0].metrics.created, 42);
        assert_eq!(m.workloads[0].metrics.overshoot, 36);
        assert_eq!(m.seed, None, "a fixed delay draws no random number");
    }

    #[test]
    fn a_death_fraction_rounds_down() {
        let m = lab(
            ScenarioSpec {
                workloads: vec![Workload {
                    name: "w".into(),
                    desired: 5,
                    startup: 5,
                }],
                events: vec![event(
                    300,
                    None,
                    Event::Deaths(Toll::PartsPerMillion(500_000)),
                )],
                ..ScenarioSpec::default()
            },
            1,
        );
        assert_eq!(m.workloads[0].metrics.died, 2);
    }

    #[test]
    fn events_for_one_workload_leave_the_others_alone() {
        let m = lab(
            ScenarioSpec {
                workloads: vec![
                    Workload {
                        name: "api".into(),
                        desired: 6,
                        startup: 5,
                    },
                    Workload {
                        name: "db".into(),
                        desired: 3,
                        startup: 10,
                    },
                ],
                events: vec![
                    event(300, Some("db"), Event::Deaths(Toll::Count(2))),
                    event(400, Some("api"), Event::Scale { desired: 8 }),
                ],
                ..ScenarioSpec::default()
            },
            1,
        );
        let (api, db) = (&m.workloads[0], &m.workloads[1]);
        assert_eq!((api.workload.as_str(), db.workload.as_str()), ("api", "db"));
        assert_eq!((api.metrics.died, api.metrics.created), (0, 8));
        assert_eq!((db.metrics.died, db.metrics.created), (2, 5));
        assert_eq!(
            api.metrics.unneeded, 0,
            "a scale-up is needed, not unneeded"
        );
    }

    #[test]
    fn a_scale_down_is_measured_against_the_new_desired_count() {
        let m = lab(
            ScenarioSpec {
                controller: ControllerSpec::new(ControllerKind::Intent),
                events: vec![event(301, None, Event::Scale { desired: 2 })],
                ..ScenarioSpec::default()
            },
            1,
        );
        let m = m.workloads[0].metrics;
        assert_eq!((m.deleted, m.delete_commands), (4, 4));
        assert_eq!(m.stable, Some(315), "deleted at the round of 315");
        assert_eq!(
            m.copy_seconds_above,
            4 * 14,
            "four too many from 301 to 314"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_run_and_another_seed_another() {
        let spec = || ScenarioSpec {
            delay: DelayModel::lesson_chain(),
            period: 5,
            duration: 2000,
            ..ScenarioSpec::default()
        };
        let a = lab(spec(), 9);
        assert_eq!(a, lab(spec(), 9));
        assert_eq!(a.seed, Some(9));
        let differs = (10..20).any(|seed| lab(spec(), seed).workloads != a.workloads);
        assert!(differs);
    }

    #[test]
    fn general_trace_equals_the_fast_engines_trace_on_the_lessons_world() {
        for (g, controller) in [(60, ControllerKind::Ledger), (20, ControllerKind::Intent)] {
            let lesson = LessonWorld::lesson(g, controller);
            let mut fast = Vec::new();
            crate::simulate_traced(&lesson, &mut |r| fast.push(*r));
            let mut general = Vec::new();
            run_general_traced(&Scenario::from_lesson(&lesson), 1, &mut |w, r| {
                assert_eq!(w, 0);
                general.push(*r);
            })
            .unwrap();
            assert_eq!(general, fast, "G={g} {controller}");
        }
    }

    #[test]
    fn a_runaway_run_stops_with_an_error_instead_of_exhausting_memory() {
        let err = run_with_budget(
            &Scenario::new(ScenarioSpec {
                period: 1,
                duration: 100_000,
                delay: DelayModel::fixed_seconds(100_000),
                workloads: vec![Workload {
                    name: "w".into(),
                    desired: 1000,
                    startup: 0,
                }],
                controller: ControllerSpec::new(ControllerKind::Ledger),
                events: vec![event(0, None, Event::Restart)],
                ..ScenarioSpec::default()
            })
            .unwrap(),
            1,
            10_000,
            None,
        )
        .unwrap_err();
        assert_eq!(err, ScenarioError::TooManyCopies(10_000));
    }

    mod equivalence {
        use super::*;
        use crate::lesson_world::{Death, LessonSpec};
        use proptest::prelude::*;

        /// Lesson-world scenarios with the edges weighted in: no delay, no startup, nothing
        /// desired, runs of length 0 or near one period, several deaths in one second, deaths on
        /// round seconds.
        fn lesson_world() -> impl Strategy<Value = LessonSpec> {
            let desired = prop_oneof![1 => Just(0u64), 6 => 1..=10u64, 2 => 11..=40u64];
            let period = prop_oneof![1 => Just(1u64), 5 => 2..=30u64, 2 => 31..=120u64];
            let delay = prop_oneof![2 => Just(0u64), 5 => 1..=40u64, 2 => 41..=120u64];
            let startup = prop_oneof![2 => Just(0u64), 5 => 1..=20u64, 1 => 21..=80u64];
            let controller =
                prop_oneof![Just(ControllerKind::Ledger), Just(ControllerKind::Intent)];
            (desired, period, delay, startup, controller).prop_flat_map(
                |(desired, period, delay, startup, controller)| {
                    let duration = prop_oneof![
                        1 => Just(0u64),
                        1 => (period.saturating_sub(1))..=(period + 1),
                        6 => 1..=2500u64,
                    ];
                    duration.prop_flat_map(move |duration| {
                        let at = prop_oneof![
                            2 => (0..=duration / period + 1).prop_map(move |k| k * period),
                            3 => 0..=duration + 10,
                            1 => Just(duration),
                        ];
                        let count = prop_oneof![1 => Just(0u64), 6 => 1..=4u64, 1 => 5..=50u64];
                        let death = (at, count).prop_map(|(at, count)| Death { at, count });
                        let deaths = prop::collection::vec(death, 0..6).prop_flat_map(|ds| {
                            // Half the time, repeat a death's second: several in one second.
                            let n = ds.len();
                            (Just(ds), prop::collection::vec(any::<bool>(), n))
                        });
                        deaths.prop_map(move |(mut deaths, same)| {
                            for i in 1..deaths.len() {
                                if same[i] {
                                    deaths[i].at = deaths[i - 1].at;
                                }
                            }
                            LessonSpec {
                                desired,
                                period,
                                delay,
                                startup,
                                duration,
                                deaths,
                                controller,
                            }
                        })
                    })
                },
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

            #[test]
            fn general_engine_equals_fast_engine_on_the_lessons_world(spec in lesson_world()) {
                let s = LessonWorld::new(spec).unwrap();
                prop_assert_eq!(general(&s), simulate(&s));
                let mut fast = Vec::new();
                crate::simulate_traced(&s, &mut |r| fast.push(*r));
                let mut slow = Vec::new();
                run_general_traced(&Scenario::from_lesson(&s), 1, &mut |_, r| slow.push(*r))
                    .unwrap();
                prop_assert_eq!(slow, fast, "per-second traces differ");
            }
        }
    }
}

#[cfg(test)]
#[path = "world_pipeline_tests.rs"]
mod pipeline_tests;
