//! Checks the event-driven engine against a naive oracle and against the lesson's JavaScript
//! reference model.

mod faults;
mod generators;
mod oracle;
mod parsers;
mod reference;

use proptest::prelude::*;
use setpoint_sim::{simulate, LessonWorld};

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// The engine's metrics equal the oracle's on every scenario, bit for bit.
    #[test]
    fn engine_agrees_with_the_per_second_oracle(spec in generators::scenario(40)) {
        let fast = simulate(&LessonWorld::new(spec.clone()).unwrap());
        let slow = oracle::run(&LessonWorld::new(spec.clone()).unwrap().spec().clone());
        prop_assert_eq!(fast.work_per_round.to_bits(), slow.work_per_round.to_bits());
        prop_assert_eq!(fast, slow, "scenario {:?}", spec);
    }

    /// The predictor's overshoot equals the engine's on every scenario, and its closed forms,
    /// where it gives them, equal the engine's metrics.
    #[test]
    fn predictor_agrees_with_the_engine(spec in generators::scenario(40)) {
        let m = simulate(&LessonWorld::new(spec.clone()).unwrap());
        let p = setpoint_sim::predict::predict(&spec);
        prop_assert_eq!(p.overshoot, m.overshoot, "scenario {:?} regime {:?}", spec, p.regime);
        if let Some(c) = p.closed {
            prop_assert_eq!(
                (c.created, c.unneeded, c.delete_commands, c.deleted, c.stable),
                (m.created, m.unneeded, m.delete_commands, m.deleted, m.stable),
                "scenario {:?}", spec
            );
        }
    }

    /// The engine's per-second trace equals the oracle's, second by second.
    #[test]
    fn engine_trace_agrees_with_the_oracle(spec in generators::scenario(20)) {
        let scenario = LessonWorld::new(spec).unwrap();
        let mut rows = Vec::new();
        setpoint_sim::simulate_traced(&scenario, &mut |r| rows.push(*r));
        let (_, want) = oracle::run_traced(scenario.spec());
        prop_assert_eq!(rows, want);
    }

    /// Running the same scenario twice gives the same metrics.
    #[test]
    fn engine_is_deterministic(spec in generators::scenario(40)) {
        let s = LessonWorld::new(spec).unwrap();
        prop_assert_eq!(simulate(&s), simulate(&s));
    }
}

#[test]
fn oracle_reproduces_the_lessons_g20_row() {
    // The oracle itself is checked once against the lesson's printed numbers.
    let m = oracle::run(
        &LessonWorld::lesson(20, setpoint_core::ControllerKind::Ledger)
            .spec()
            .clone(),
    );
    assert_eq!(
        (
            m.created,
            m.unneeded,
            m.delete_commands,
            m.deleted,
            m.overshoot,
            m.stable
        ),
        (16, 8, 16, 8, 6, Some(375))
    );
}
