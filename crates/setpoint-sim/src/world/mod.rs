//! The general engine: every controller, several workloads, random per-report delays and the
//! whole event timeline.
//!
//! The lesson's engine ([`crate::engine`]) gets away with a few counters because, with one fixed
//! delay, copies reach the ledger in creation order. Random delays break that order, so this
//! engine keeps one record per copy and a time-ordered queue of what happens next: copies that
//! finish starting, scripted events, and reports that reach the ledger. Its cost is
//! O((copies + events + acting rounds) · log n); like the lesson's engine it skips every round in
//! which no pass could decide differently, and without an observer it takes the reports of a
//! second with nothing else to do before the next round without visiting that second. One queue entry stands for the consecutive copies a
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

use store::{lowest_ones, range_words, CopySet, EventQueue, Key, Transit};

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
    /// When it was created.
    created: Time,
    /// The generation of the template it was created from.
    generation: u64,
    /// The node it runs on ([`crate::pipeline`]'s placement); 0 under per-report, which has
    /// no use for it.
    node: u32,
}

impl CopyRec {
    /// A copy just created at `created` from template `generation`, on `node`: not started,
    /// alive.
    fn fresh(name: Option<Name>, created: Time, generation: u64, node: u32) -> Self {
        Self {
            name,
            started: false,
            dead: false,
            created,
            generation,
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
    /// Copies a delete command reached (their assignment is gone, in the runtime's terms), by
    /// identity. A set rather than a flag of each record: a pass's delete commands go to the
    /// oldest copies the ledger shows, and are marked 64 at a time ([`Engine::delete_oldest`]).
    commanded: CopySet,
    /// Copies whose end report has reached the ledger, by identity. A start report that
    /// arrives after it is dropped: the ledger knows the copy is gone. A set rather than a flag
    /// of each record: a queue entry's reports reach the ledger a word at a time
    /// ([`Engine::arrive`]).
    ended: CopySet,
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
    /// The copies the ledger a pass reads shows: frozen in a stale-view window.
    #[inline]
    fn ledger(&self) -> &CopySet {
        self.frozen.as_ref().map_or(&self.shown, |f| &f.shown)
    }

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
        self.work.commanded.contains(copy.0)
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
    /// Containers of earlier runs on this thread not taken by this run's workloads, handed on
    /// with this run's ([`Engine::recycle`]).
    spare_works: Vec<WorkSpare>,
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
    // Without an observer (whose trace has a row a visit) and under per-report delivery (no
    // snapshot in flight, whose landing reads the second), reports may arrive between visits.
    let fold = observer.is_none() && engine.nodes.is_empty();
    let mut t: Time = 0;
    loop {
        let before: Vec<[u64; 4]> = match observer {
            Some(_) => engine.works.iter().map(counts).collect(),
            None => Vec::new(),
        };
        engine.second(t)?;
        let mut next = engine.next_visit(t);
        // Seconds before the next multiple of the period whose only entries are reports
        // reaching the ledger need no visit of their own: the reports change what the next
        // pass reads (the ledger, the reports in transit, `dirty`) and nothing the live count,
        // the record or a pass between reads, so they are taken here, in their second's order,
        // and the live count is recorded once over the seconds they cover (`Work::record` adds
        // up exactly over a split span). Issue 24, part 11.
        if fold {
            let round = (t / period + 1).saturating_mul(period);
            while next < round && next <= duration && engine.queue.only_last_class_at(next) {
                engine.drain_queue(next)?;
                // Each report made its workload `dirty`, so the next round is `round`: no
                // multiple of the period lies between `t` and here, and every round the
                // visit at `t` found was one, no earlier than `round`.
                debug_assert_eq!(engine.next_round(next), Some(round));
                next = engine
                    .queue
                    .next_time()
                    .map_or(round, |at| at.min(round))
                    .min(duration + 1);
            }
        }
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
    /// Each workload's copy records and sets.
    works: Vec<WorkSpare>,
    /// The buffer of a pass's delete targets.
    targets: Vec<u64>,
    /// The run's vectors of workloads and controllers, emptied.
    work_list: Vec<Work>,
    controllers: Vec<Controller>,
}

/// A workload's containers kept for the next run on the thread ([`Spare`]).
#[derive(Default)]
struct WorkSpare {
    copies: Vec<CopyRec>,
    live: CopySet,
    shown: CopySet,
    commanded: CopySet,
    ended: CopySet,
}

/// Containers that grew past this many entries are freed instead of kept.
const KEPT_ENTRIES: usize = 1 << 14;

thread_local! {
    // A `RefCell` whose fields are taken and put back one by one: a `Cell` is taken and set
    // whole, and each of those moved the whole `Spare` (and the `Default` put in its place)
    // with `memcpy`, four calls a run (callgrind, issue 24 part 11).
    static SPARE: std::cell::RefCell<Spare> = std::cell::RefCell::default();
}

#[cfg(test)]
thread_local! {
    /// The queue entries the last run on this thread pushed: the tests' measure of its work.
    static LAST_PUSHES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Takes one off `name`'s count in `map`, and the name out of it at zero.
fn decrement(map: &mut BTreeMap<Name, u64>, name: Name) {
    if let Some(n) = map.get_mut(&name) {
        *n -= 1;
        if *n == 0 {
            map.remove(&name);
        }
    }
}

mod engine;
mod faults;
mod pass;
mod reports;
mod store;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod pipeline_tests;
