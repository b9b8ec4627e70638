//! The fast engine against the literal metric definitions of
//! [`setpoint_core::metrics::metrics_from_series`]: the engine keeps a running tally and never
//! visits most seconds, so these tests check that its metrics equal those of its own per-second
//! trace, on every lesson row and on generated scenarios.

use crate::lesson::LESSON_DELAYS;
use crate::lesson_world::{Death, LessonSpec, LessonWorld};
use crate::{simulate, simulate_traced};
use proptest::prelude::*;
use setpoint_core::metrics::{metrics_from_series, Metrics};
use setpoint_core::ControllerKind;

fn from_trace(s: &LessonWorld) -> Metrics {
    let mut rows = Vec::new();
    let m = simulate_traced(s, &mut |r| rows.push(*r));
    assert_eq!(m, simulate(s));
    metrics_from_series(&rows, m.rounds)
}

#[test]
fn the_series_gives_the_engines_metrics_on_every_lesson_row() {
    for controller in ControllerKind::LESSON {
        for g in LESSON_DELAYS {
            let s = LessonWorld::lesson(g, controller);
            assert_eq!(from_trace(&s), simulate(&s), "G = {g}, {controller:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn the_series_gives_the_engines_metrics_on_generated_scenarios(
        desired in 0u64..8,
        period in 1u64..40,
        delay in 0u64..60,
        startup in 0u64..20,
        duration in 0u64..400,
        at in 0u64..400,
        count in 0u64..5,
        intent in any::<bool>(),
    ) {
        let s = LessonWorld::new(LessonSpec {
            desired,
            period,
            delay,
            startup,
            duration,
            deaths: vec![Death { at, count }],
            controller: if intent { ControllerKind::Intent } else { ControllerKind::Ledger },
        })
        .unwrap();
        prop_assert_eq!(from_trace(&s), simulate(&s));
    }
}
