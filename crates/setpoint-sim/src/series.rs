//! The metrics of a per-second series: one definition that the engine's trace, the runtime's
//! measurement of real runs (`setpoint measure`) and the tests share.
//!
//! The engine keeps its own running tally, because it never visits most seconds; this module
//! is the slow, literal form of the same definitions (`docs/model.md`, "The metrics"), and a test
//! checks that both agree on every lesson row and on generated scenarios.

use crate::engine::TraceRow;
use crate::metrics::Metrics;

/// The metrics of `rows`, one per second in order, with `rounds` rounds in that span.
///
/// - `created`, `delete_commands`, `deleted`, `died`: the sums of the rows' counts;
/// - `work_per_round`: `(created + delete_commands) / rounds` (0 when there was no round);
/// - `unneeded`: `created − (first desired + every increase of desired + died)`;
/// - `overshoot`: the largest `live − desired`, never below 0; `peak_live`: the largest `live`;
/// - `copy_seconds_above`: the sum of `max(0, live − desired)`;
/// - `stable`: the `t` of the first row from which `live = desired` through the last row;
///   `None` when the last row differs (or there is no row).
pub fn metrics_from_series(rows: &[TraceRow], rounds: u64) -> Metrics {
    let mut m = Metrics {
        rounds,
        work_per_round: 0.0,
        created: 0,
        unneeded: 0,
        delete_commands: 0,
        deleted: 0,
        overshoot: 0,
        stable: None,
        died: 0,
        peak_live: 0,
        copy_seconds_above: 0,
    };
    let mut needed: u64 = rows.first().map_or(0, |r| r.desired);
    let mut last_desired = needed;
    let mut stable_from: Option<u64> = None;
    for r in rows {
        m.created = m.created.saturating_add(r.created);
        m.delete_commands = m.delete_commands.saturating_add(r.delete_commands);
        m.deleted = m.deleted.saturating_add(r.deleted);
        m.died = m.died.saturating_add(r.died);
        needed = needed.saturating_add(r.desired.saturating_sub(last_desired));
        last_desired = r.desired;
        m.peak_live = m.peak_live.max(r.live);
        let above = r.live.saturating_sub(r.desired);
        m.overshoot = m.overshoot.max(above);
        m.copy_seconds_above = m.copy_seconds_above.saturating_add(above);
        if r.live == r.desired {
            stable_from.get_or_insert(r.t);
        } else {
            stable_from = None;
        }
    }
    m.stable = stable_from;
    m.unneeded = i64::try_from(m.created).unwrap_or(i64::MAX)
        - i64::try_from(needed.saturating_add(m.died)).unwrap_or(i64::MAX);
    if rounds > 0 {
        m.work_per_round = (m.created + m.delete_commands) as f64 / rounds as f64;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lesson::LESSON_DELAYS;
    use crate::scenario::{Death, Scenario, ScenarioSpec};
    use crate::{simulate, simulate_traced};
    use proptest::prelude::*;
    use setpoint_core::ControllerKind;

    fn from_trace(s: &Scenario) -> Metrics {
        let mut rows = Vec::new();
        let m = simulate_traced(s, &mut |r| rows.push(*r));
        assert_eq!(m, simulate(s));
        metrics_from_series(&rows, m.rounds)
    }

    #[test]
    fn the_series_gives_the_engines_metrics_on_every_lesson_row() {
        for controller in ControllerKind::LESSON {
            for g in LESSON_DELAYS {
                let s = Scenario::lesson(g, controller);
                assert_eq!(from_trace(&s), simulate(&s), "G = {g}, {controller:?}");
            }
        }
    }

    #[test]
    fn an_empty_series_is_never_stable_and_did_no_work() {
        let m = metrics_from_series(&[], 0);
        assert_eq!((m.stable, m.work_per_round, m.unneeded), (None, 0.0, 0));
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
            let s = Scenario::new(ScenarioSpec {
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
}
