//! The general engine's tests.

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

/// Any of the five controllers, for the proptests.
fn any_kind() -> impl proptest::strategy::Strategy<Value = ControllerKind> {
    use proptest::strategy::Just;
    proptest::prop_oneof![
        Just(ControllerKind::Intent),
        Just(ControllerKind::Ledger),
        Just(ControllerKind::Expectations),
        Just(ControllerKind::Gated),
        Just(ControllerKind::Named),
    ]
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
    let at = crate::scenario::creation_times(&Scenario::new(spec.clone()).unwrap(), 1, 0).unwrap();
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
    let out =
        run_general_traced(&Scenario::new(spec).unwrap(), 1, &mut |_, r| rows.push(*r)).unwrap();
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
            kind in any_kind(),
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
        let controller = prop_oneof![Just(ControllerKind::Ledger), Just(ControllerKind::Intent)];
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

mod folded_arrivals {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        /// A run without an observer takes the reports of a second with nothing else to do
        /// before the next round without visiting it (issue 24, part 11); a run with one
        /// visits every such second. Both end with the same outcome, whatever the controller,
        /// delay (whole seconds, including none, or not), period, startup (fixed or drawn),
        /// workloads and deaths.
        #[test]
        fn reports_taken_between_visits_change_no_outcome(
            kind in any_kind(),
            delay in prop_oneof![
                (0u64..40).prop_map(|s| DelayModel::Fixed(s * 1000)),
                (0u64..40_000).prop_map(DelayModel::Fixed),
                (0u64..20_000, 0u64..40_000)
                    .prop_map(|(min, d)| DelayModel::Uniform { min, max: min + d }),
                Just(DelayModel::lesson_chain()),
            ],
            period in 1u64..40,
            startup in 0u64..15,
            desired in (1u64..12, 1u64..5),
            deaths in prop::collection::vec((0u64..400, 1u64..4), 0..4),
            startup_model in prop::option::of(
                (0u64..20_000).prop_map(|max| DelayModel::Uniform { min: 0, max })
            ),
            seed in 0u64..1000,
        ) {
            let spec = ScenarioSpec {
                period,
                duration: 400,
                delay,
                controller: ControllerSpec::new(kind),
                workloads: vec![
                    Workload { name: "a".into(), desired: desired.0, startup },
                    Workload { name: "b".into(), desired: desired.1, startup: startup / 2 },
                ],
                events: deaths
                    .iter()
                    .map(|&(at, n)| event(at, None, Event::Deaths(Toll::Count(n))))
                    .collect(),
                startup_model,
                ..ScenarioSpec::default()
            };
            let scenario = Scenario::new(spec).unwrap();
            let folded = run_general(&scenario, seed).unwrap();
            let visited = run_general_traced(&scenario, seed, &mut |_, _| {}).unwrap();
            prop_assert_eq!(folded, visited);
        }
    }
}
