//! Agreement of the simulated runtime with the lab: one lab scenario (one workload of `ledger`,
//! `intent` or any other controller, desired copies, U, B, a fixed report delay G, deaths) run
//! two ways, through the lab's general engine ([`setpoint_sim::world::run_general`]) and through
//! the runtime's own host and agent in the chaos world, fault-free and with no network delay;
//! both measured with the lab's metric definitions.
//!
//! # The mapping
//! One lab second is [`SECOND_MS`] milliseconds of the world; second `k` is `k·S ..< (k+1)·S`.
//! The lab resolves everything within one second in a fixed order (`docs/model.md`): copies
//! finish starting, deaths, reports due reach the ledger, the pass, then what the pass set off
//! at once. The world gives each step its own place in the second:
//!
//! | offset (ms) | lab step | how the world is set |
//! | --- | --- | --- |
//! | 0 | a copy created B ≥ 1 s ago is ready | `startup_ms = B·S − SYNC_AFTER_PASS` |
//! | [`DEATH_AT`] | deaths | `kill` faults: kill requests, commanded deaths replaced at once |
//! | 0, 250 | reports due reach the ledger | the agent reports every [`REPORT_MS`] |
//! | [`PASS_AT`] | the pass | the controller starts that late (a pause from time 0) |
//! | [`SYNC_AFTER_PASS`] | the agent starts and stops copies | `sync_ms` = [`SYNC_MS`], processes start and exit at once |
//! | 500, 750 | what the pass set off is observed | the same report grid |
//!
//! The lab's report delay G is "a report made in second `t` reaches the ledger in second
//! `t + G`, before that second's pass, or at once when G = 0". The agent's reports get the
//! runtime's jittered schedule (`AgentCoreConfig::report_delays`, [`report_delays`]) so that
//! every report of second `t` reaches the store at offset 0 or 250 of second `t + G`.
//!
//! Deaths must strike while every live copy is ready: the world's `kill` picks a live process
//! at random, the lab the oldest copies. `docs/chaos.md` ("Agreement") states the rules the
//! tests check, and [`lesson_scaled`] the other agreement, with the real runtime.

use setpoint_core::ControllerKind;
use setpoint_runtime::agent::{AgentCore, AgentCoreConfig, Nonces};
use setpoint_runtime::events::read_log;
use setpoint_runtime::measure::{from_log, Window};
use setpoint_runtime::report_delay::ReportDelays;
use setpoint_sim::delay::DelayModel;
use setpoint_sim::world::run_general;
use setpoint_sim::{Metrics, Scenario, ScenarioSpec};

use crate::adapt::{make, AgentMachine, Bugs};
use crate::faults::{Fault, FaultKind, Model, Timing, WorkloadModel};
use crate::machine::{Machine, Role};
use crate::net::NetConfig;
use crate::runner::setup;
use crate::store::SharedSimStore;
use crate::world::{run, RunError, EPOCH_MS};

/// One lab second, in milliseconds of the world.
pub const SECOND_MS: u64 = 1000;
/// Where in each second the loop's passes run: the controller starts this late (a pause of
/// its host from time 0), so its rounds sit at `PASS_AT + k·U·S`.
pub const PASS_AT: u64 = 350;
/// Where scripted deaths strike within their second.
pub const DEATH_AT: u64 = 100;
/// The agent reads its assignments this often; the first read after a pass is at
/// [`SYNC_AFTER_PASS`].
pub const SYNC_MS: u64 = 100;
/// The agent's first assignment read after a pass, offset in the second.
pub const SYNC_AFTER_PASS: u64 = 400;
/// The agent reports this often: at offsets 0, 250, 500 and 750 of every second.
pub const REPORT_MS: u64 = 250;

/// The workload's name.
pub const WORKLOAD: &str = "collector";

/// One lab scenario both worlds can run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    /// The controller.
    pub controller: ControllerKind,
    /// Desired copies.
    pub desired: u64,
    /// Loop period U, seconds.
    pub period: u64,
    /// Startup time B, seconds.
    pub startup: u64,
    /// Report delay G, seconds.
    pub delay: u64,
    /// The last second.
    pub duration: u64,
    /// Deaths: (second, how many copies).
    pub deaths: Vec<(u64, u64)>,
}

/// The lab scenario of `cell`.
pub fn scenario(cell: &Cell) -> Result<Scenario, setpoint_sim::ScenarioError> {
    use setpoint_sim::scenario::{ControllerSpec, Event, TimedEvent, Toll, Workload};
    Scenario::new(ScenarioSpec {
        period: cell.period,
        duration: cell.duration,
        delay: DelayModel::fixed_seconds(cell.delay),
        controller: ControllerSpec::new(cell.controller),
        workloads: vec![Workload {
            name: WORKLOAD.into(),
            desired: cell.desired,
            startup: cell.startup,
        }],
        events: cell
            .deaths
            .iter()
            .map(|&(at, n)| TimedEvent {
                at,
                workload: None,
                event: Event::Deaths(Toll::Count(n)),
            })
            .collect(),
        unique_names: true,
        seed: 1,
        pipeline: Default::default(),
        startup_model: None,
    })
}

/// What the lab's general engine computes for `cell`.
pub fn lab(cell: &Cell) -> Result<Metrics, setpoint_sim::ScenarioError> {
    Ok(run_general(&scenario(cell)?, 1)?.workloads[0].metrics)
}

/// The fault-free model of `cell` on the layout of the module doc: one controller, one agent,
/// no network delay, processes that start and stop at once.
pub fn model(cell: &Cell) -> Model {
    let s = SECOND_MS;
    Model {
        description: format!(
            "agreement cell: {} U={} B={} G={}",
            cell.controller.name(),
            cell.period,
            cell.startup,
            cell.delay
        ),
        duration_ms: (cell.duration + 2) * s,
        settle_ms: 0,
        event_budget: 5_000_000,
        seed: None,
        controllers: 1,
        agents: 1,
        skew_max_ms: 0,
        timing: Timing {
            leader_ttl_ms: 5_000,
            node_ttl_ms: 10_000,
            poll_ms: 100,
            sync_ms: SYNC_MS,
            report_ms: REPORT_MS,
            report_delay_ms: cell.delay * s,
        },
        net: NetConfig {
            delay_ms: 0,
            jitter_ms: 0,
            loss_ppm: 0,
            slow_ms: 0,
        },
        start_ms: 0,
        term_exit_ms: 0,
        workloads: vec![WorkloadModel {
            name: WORKLOAD.into(),
            controller: cell.controller,
            copies: cell.desired,
            period_ms: cell.period * s,
            // Started at SYNC_AFTER_PASS, ready at offset 0 of second t + B: before the deaths
            // and the reports of that second, as the lab's step 1.
            startup_ms: (cell.startup * s).saturating_sub(SYNC_AFTER_PASS),
            grace_ms: 3000,
            stop_when_cut_off_ms: None,
        }],
        faults: Vec::new(),
        swarm: false,
        drift_max_ppm: 0,
        schedule: Some(schedule(cell)),
    }
}

/// The schedule of `cell`: the controller's late start, and each death as `kill` faults at
/// [`DEATH_AT`] of its second.
pub fn schedule(cell: &Cell) -> Vec<Fault> {
    let mut out = vec![Fault {
        at_ms: 0,
        kind: FaultKind::Pause,
        host: 0,
        duration_ms: PASS_AT,
    }];
    for &(at, n) in &cell.deaths {
        for _ in 0..n {
            out.push(Fault {
                at_ms: at * SECOND_MS + DEATH_AT,
                kind: FaultKind::Kill,
                host: 0,
                duration_ms: 0,
            });
        }
    }
    out.sort();
    out
}

/// The agent's report delays for G seconds, one per report in turn from its first report at
/// offset 250: every report made at offset 0 or 250 of second t and every report made at 500 or
/// 750 reach the store at offset 0 or 250 of second t + G.
pub fn report_delays(delay: u64) -> Vec<u64> {
    if delay == 0 {
        return Vec::new();
    }
    let g = delay * SECOND_MS;
    vec![g, g - 500, g - 500, g]
}

/// What the chaos world gave for a cell.
pub struct ChaosRun {
    /// The lab's metrics, measured from the event log the runtime wrote.
    pub metrics: Metrics,
    /// Events handled.
    pub events: u64,
}

/// Runs `cell` on the runtime's host and agent in the chaos world and measures its event log
/// with the lab's definitions (second k is world time `k·S ..< (k+1)·S`).
pub fn chaos(cell: &Cell) -> Result<ChaosRun, RunError> {
    chaos_with(cell, report_delays(cell.delay))
}

/// [`chaos`] with the agent's report delays `delays` (empty: the fixed `G·S`).
fn chaos_with(cell: &Cell, delays: Vec<u64>) -> Result<ChaosRun, RunError> {
    let m = model(cell);
    let factory = |i: usize, role: &Role, now: u64| -> Box<dyn Machine> {
        match role {
            Role::Agent(node) => {
                let t = &m.timing;
                let mut cfg = AgentCoreConfig::new(node.clone());
                cfg.agent_pid = 100 + i as u32;
                cfg.lease_ttl_ms = t.node_ttl_ms;
                cfg.sync_every_ms = t.sync_ms;
                cfg.report_every_ms = t.report_ms;
                cfg.report_delay_ms = t.report_delay_ms;
                cfg.report_delays = ReportDelays::new(delays.clone());
                cfg.nonces = Nonces::Counter(i as u64);
                Box::new(AgentMachine::new(AgentCore::new(cfg, now)))
            }
            Role::Controller => make(&m, Bugs::default(), 1, i, role, now),
        }
    };
    let st = setup(&m, 1, schedule(cell), false);
    let out = run(&st, &factory, 1)?;
    let store = SharedSimStore::from_state(out.store, out.end_ms);
    let log = read_log(&store, WORKLOAD).unwrap_or_default();
    let window = Window {
        origin_ms: EPOCH_MS,
        time_scale: SECOND_MS as f64 / 1000.0,
        last: cell.duration,
    };
    Ok(ChaosRun {
        metrics: from_log(WORKLOAD, &log, window, None).metrics,
        events: out.events,
    })
}

/// The lesson's cell (6 copies, U = 15 s, B = 5 s, two deaths at second 300, 900 seconds;
/// `controller`, report delay `delay` seconds) in the chaos world **scaled as the real
/// experiment runs it** (`setpoint experiment lesson --real`, crate setpoint-reality): one
/// virtual second is `second_ms` milliseconds; the agent reads its assignments and reports every
/// half second, with the report delay `G·second_ms`; the controller polls every 10 ms; the
/// loop's first pass is second 0, and the two oldest copies die 1 ms after second 300 starts
/// (a real kill always comes after its second's pass). No network delay and no other fault.
/// Measured from the runtime's event log as `setpoint measure` measures a real run.
pub fn lesson_scaled(
    controller: ControllerKind,
    delay: u64,
    second_ms: u64,
) -> Result<Metrics, RunError> {
    let world = setpoint_sim::LessonSpec {
        delay,
        controller,
        ..Default::default()
    };
    let half = (second_ms / 2).max(1);
    let mut m = model(&Cell {
        controller,
        desired: world.desired,
        period: world.period,
        startup: world.startup,
        delay,
        duration: world.duration,
        deaths: Vec::new(),
    });
    m.duration_ms = (world.duration + 2) * second_ms;
    m.timing = Timing {
        poll_ms: 10,
        sync_ms: half,
        report_ms: half,
        report_delay_ms: delay * second_ms,
        ..m.timing
    };
    let w = &mut m.workloads[0];
    w.period_ms = world.period * second_ms;
    w.startup_ms = world.startup * second_ms;
    let mut schedule = Vec::new();
    for d in &world.deaths {
        for _ in 0..d.count {
            schedule.push(Fault {
                at_ms: d.at * second_ms + 1,
                kind: FaultKind::Kill,
                host: 0,
                duration_ms: 0,
            });
        }
    }
    m.schedule = Some(schedule.clone());
    let f = |i: usize, role: &Role, now: u64| make(&m, Bugs::default(), 1, i, role, now);
    let out = run(&setup(&m, 1, schedule, false), &f, 1)?;
    let store = SharedSimStore::from_state(out.store, out.end_ms);
    let log = read_log(&store, WORKLOAD).unwrap_or_default();
    let origin_ms = log
        .iter()
        .find_map(|l| match l {
            setpoint_runtime::events::Logged::Round(r) => Some(r.at_ms),
            _ => None,
        })
        .unwrap_or(EPOCH_MS);
    let window = Window {
        origin_ms,
        time_scale: second_ms as f64 / 1000.0,
        last: world.duration,
    };
    Ok(from_log(WORKLOAD, &log, window, Some(world.period * second_ms)).metrics)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cells over both lesson controllers, several U, B and G (below, at and above U − B,
    /// multiples of U), with deaths in steady state.
    fn cells() -> Vec<Cell> {
        let mut out = Vec::new();
        for controller in ControllerKind::LESSON {
            for (u, b) in [(5, 2), (4, 0), (6, 1)] {
                for g in [0, 2, 4, 5, 9] {
                    out.push(Cell {
                        controller,
                        desired: 3,
                        period: u,
                        startup: b,
                        delay: g,
                        duration: 60,
                        deaths: vec![(40, 2)],
                    });
                }
            }
        }
        out
    }

    #[test]
    fn the_lessons_cells_scaled_as_the_real_run_equal_the_lab_one_second_later() {
        // The half-second pipeline of the real experiment's agent is never zero: the ties
        // the lab resolves towards the round go the other way, as if G were one second longer.
        for (c, g) in [
            (ControllerKind::Ledger, 0),
            (ControllerKind::Ledger, 10),
            (ControllerKind::Ledger, 30),
            (ControllerKind::Intent, 20),
        ] {
            let w = setpoint_sim::LessonSpec::default();
            let cell = |delay| Cell {
                controller: c,
                desired: w.desired,
                period: w.period,
                startup: w.startup,
                delay,
                duration: w.duration,
                deaths: w.deaths.iter().map(|d| (d.at, d.count)).collect(),
            };
            let got = lesson_scaled(c, g, 10).unwrap();
            assert_eq!(got, lab(&cell(g + 1)).unwrap(), "{} G={g}", c.name());
            if g != 20 {
                // At these G a tie of the lab's lands on a round: the lab itself differs.
                assert_ne!(got, lab(&cell(g)).unwrap(), "{} G={g}", c.name());
            }
        }
    }

    #[test]
    fn fault_free_runs_of_the_runtime_equal_the_general_engine_exactly() {
        let (mut overshot, mut deleted, mut died) = (0, 0, 0);
        for cell in cells() {
            let c = chaos(&cell).unwrap().metrics;
            let l = lab(&cell).unwrap();
            assert_eq!(c, l, "{cell:?}");
            overshot += u64::from(l.overshoot > 0);
            deleted += u64::from(l.deleted > 0);
            died += u64::from(l.died == 2);
        }
        // The grid is not trivial: it overshoots, deletes and replaces.
        assert!(overshot >= 5 && deleted >= 5, "{overshot} {deleted}");
        assert_eq!(died, 30);
    }

    #[test]
    fn gated_and_expectations_equal_it_too_and_named_replaces_a_dead_name_one_round_later() {
        for controller in [ControllerKind::Gated, ControllerKind::Expectations] {
            for cell in cells().into_iter().take(15).step_by(2) {
                let cell = Cell { controller, ..cell };
                assert_eq!(
                    chaos(&cell).unwrap().metrics,
                    lab(&cell).unwrap(),
                    "{cell:?}"
                );
            }
        }
        // The runtime's `named` keeps a dead copy's assignment until a pass has seen it gone,
        // so it creates the name again one round after the lab's: every count is equal, and
        // `stable` is one period after the lab's (or after the deaths' second, where the lab
        // replaced them within it), or past the run's end.
        for cell in cells().into_iter().take(15).step_by(2) {
            let cell = Cell {
                controller: ControllerKind::Named,
                ..cell
            };
            let (c, l) = (chaos(&cell).unwrap().metrics, lab(&cell).unwrap());
            let stable = l
                .stable
                .map(|s| s.max(40) + cell.period)
                .filter(|&s| s <= cell.duration);
            assert_eq!(c, Metrics { stable, ..l }, "{cell:?}");
        }
    }

    #[test]
    fn the_report_delay_schedule_is_what_makes_it_exact() {
        // With a fixed G·S, a report made after the pass reaches the store after the pass of
        // second t + G: some cell then differs from the lab.
        let differs = cells()
            .into_iter()
            .filter(|c| c.delay > 0)
            .any(|cell| chaos_with(&cell, Vec::new()).unwrap().metrics != lab(&cell).unwrap());
        assert!(differs);
    }
}
