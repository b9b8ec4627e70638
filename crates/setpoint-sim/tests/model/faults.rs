//! Faults meet controllers: every controller against every fault event of the timeline, with
//! the properties that must hold.

use setpoint_core::ControllerKind;
use setpoint_core::ExpectationsConfig;
use setpoint_sim::delay::DelayModel;
use setpoint_sim::scenario::{
    run, ControllerSpec, Event, Scenario, ScenarioSpec, TimedEvent, Toll, WorkloadMetrics,
};

const DURATION: u64 = 3000;

fn at(at: u64, event: Event) -> TimedEvent {
    TimedEvent {
        at,
        workload: None,
        event,
    }
}

/// Each fault event, in a timeline where it bites: desired 6, U = 15 s, B = 5 s.
fn faults() -> Vec<(&'static str, Vec<TimedEvent>)> {
    vec![
        (
            "deaths by count",
            vec![at(600, Event::Deaths(Toll::Count(2)))],
        ),
        (
            "deaths by fraction",
            vec![at(600, Event::Deaths(Toll::PartsPerMillion(500_000)))],
        ),
        (
            "desired changes",
            vec![
                at(600, Event::Scale { desired: 10 }),
                at(1200, Event::Scale { desired: 4 }),
            ],
        ),
        (
            "report outage",
            vec![
                at(600, Event::Outage { seconds: 120 }),
                at(610, Event::Deaths(Toll::Count(2))),
            ],
        ),
        (
            "controller restart",
            vec![
                at(600, Event::Deaths(Toll::Count(2))),
                at(640, Event::Restart),
            ],
        ),
        (
            "stale view",
            vec![
                at(600, Event::Deaths(Toll::Count(2))),
                at(640, Event::Stale { seconds: 120 }),
            ],
        ),
        (
            "lost delete command",
            vec![
                at(600, Event::LoseDeletes { count: 1 }),
                at(600, Event::Scale { desired: 4 }),
            ],
        ),
    ]
}

fn delays() -> Vec<DelayModel> {
    vec![DelayModel::fixed_seconds(20), DelayModel::lesson_chain()]
}

fn one(spec: ScenarioSpec, seed: u64) -> WorkloadMetrics {
    let scenario = Scenario::new(spec).unwrap();
    run(&scenario, seed).unwrap().workloads.remove(0)
}

fn spec(kind: ControllerKind, delay: DelayModel, events: Vec<TimedEvent>) -> ScenarioSpec {
    ScenarioSpec {
        delay,
        duration: DURATION,
        controller: ControllerSpec::new(kind),
        events,
        ..ScenarioSpec::default()
    }
}

#[test]
fn every_controller_converges_to_desired_once_the_faults_stop() {
    for delay in delays() {
        // The matrix `docs/controllers.md` quotes: overshoot / unneeded / stable, seed 1.
        println!("faults x controllers, report delay {}", delay.describe());
        print!("{:20}", "fault");
        for kind in ControllerKind::ALL {
            print!("{:>15}", kind.name());
        }
        println!();
        for (fault, events) in faults() {
            print!("{fault:20}");
            for kind in ControllerKind::ALL {
                let m = one(spec(kind, delay.clone(), events.clone()), 1).metrics;
                let stable = m.stable.map_or("none".into(), |s| s.to_string());
                print!(
                    "{:>15}",
                    format!("{}/{} @{stable}", m.overshoot, m.unneeded)
                );
            }
            println!();
        }
        for kind in ControllerKind::ALL {
            for (fault, events) in faults() {
                for seed in [1, 2, 3] {
                    let m = one(spec(kind, delay.clone(), events.clone()), seed).metrics;
                    let stable = m.stable.unwrap_or(u64::MAX);
                    // The last fault is at 1200; the slowest recovery waits one TTL (300 s).
                    assert!(
                        stable <= 1600,
                        "{kind} under {fault} with {} (seed {seed}) is stable only from {:?}",
                        delay.describe(),
                        m.stable
                    );
                }
            }
        }
    }
}

#[test]
fn named_never_runs_two_copies_under_one_name() {
    for delay in delays() {
        for (fault, events) in faults() {
            for seed in [1, 2, 3] {
                let m = one(
                    spec(ControllerKind::Named, delay.clone(), events.clone()),
                    seed,
                );
                assert_eq!(
                    m.duplicate_names,
                    0,
                    "named under {fault} with {}",
                    delay.describe()
                );
            }
        }
    }
}

#[test]
fn named_survives_a_restart_because_the_world_absorbs_the_repeat() {
    let events = faults().remove(4).1;
    let with_rule = one(
        spec(
            ControllerKind::Named,
            DelayModel::fixed_seconds(20),
            events.clone(),
        ),
        1,
    );
    assert_eq!(with_rule.duplicate_names, 0);
    assert_eq!(with_rule.metrics.overshoot, 0);
    assert!(
        with_rule.absorbed_creates > 0,
        "the restart repeated creations"
    );

    // Without the world's rule the same restart runs two copies under one name.
    let without = one(
        ScenarioSpec {
            unique_names: false,
            ..spec(ControllerKind::Named, DelayModel::fixed_seconds(20), events)
        },
        1,
    );
    assert!(without.duplicate_names > 0);
    assert!(without.metrics.overshoot > 0);
}

#[test]
fn intent_overshoots_after_a_restart_inside_the_blind_window() {
    // Two copies die at 600; the ledger hears at 620, intent creates two at 630, and they are on
    // the ledger only at 655. A restart at 640 forgets them: the pass at 645 creates them again.
    let (_, restart) = faults().remove(4);
    let m = one(
        spec(
            ControllerKind::Intent,
            DelayModel::fixed_seconds(20),
            restart,
        ),
        1,
    );
    assert_eq!(m.metrics.overshoot, 2);
    assert_eq!(m.metrics.unneeded, 2);

    // Outside the blind window the restart costs nothing.
    let late = vec![
        at(600, Event::Deaths(Toll::Count(2))),
        at(700, Event::Restart),
    ];
    let m = one(
        spec(ControllerKind::Intent, DelayModel::fixed_seconds(20), late),
        1,
    );
    assert_eq!(m.metrics.overshoot, 0);
}

#[test]
fn expectations_overshoot_once_the_delay_exceeds_the_ttl() {
    let run_with = |delay: u64, ttl: u64| {
        one(
            ScenarioSpec {
                controller: ControllerSpec {
                    kind: ControllerKind::Expectations,
                    expectations: ExpectationsConfig { ttl, burst: 500 },
                },
                ..spec(
                    ControllerKind::Expectations,
                    DelayModel::fixed_seconds(delay),
                    faults().remove(0).1,
                )
            },
            1,
        )
        .metrics
    };
    // G + B = 25 s: a TTL of 30 s waits long enough, a TTL of 15 s does not.
    assert_eq!(run_with(20, 30).overshoot, 0);
    assert!(run_with(20, 15).overshoot > 0);
    // The default TTL of 300 s is outlived by a 400 s delay.
    assert_eq!(run_with(200, 300).overshoot, 0);
    assert!(run_with(400, 300).overshoot > 0);
}

#[test]
fn the_ledger_controller_overshoots_on_a_stale_view_and_the_others_do_not() {
    let (_, stale) = faults().remove(5);
    for kind in ControllerKind::ALL {
        let m = one(spec(kind, DelayModel::fixed_seconds(20), stale.clone()), 1).metrics;
        if kind == ControllerKind::Ledger {
            assert!(m.overshoot > 6, "ledger: {m:?}");
        } else {
            assert_eq!(m.overshoot, 0, "{kind}: {m:?}");
        }
    }
}

#[test]
fn a_lost_delete_command_counts_as_work_and_deletes_nothing() {
    let (_, lose) = faults().remove(6);
    for kind in ControllerKind::ALL {
        let m = one(spec(kind, DelayModel::fixed_seconds(20), lose.clone()), 1);
        assert_eq!(m.lost_deletes, 1, "{kind}");
        assert!(m.metrics.delete_commands > m.metrics.deleted, "{kind}");
    }
}
