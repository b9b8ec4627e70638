//! Random scenarios, weighted toward the edges where bugs hide: no delay, no startup, nothing
//! desired, runs of length 0 or near one period, several deaths in one second, deaths on round
//! seconds and after the end. Uniform ranges alone have missed real bugs at exactly these edges.

use proptest::prelude::*;
use setpoint_core::ControllerKind;
use setpoint_sim::{Death, LessonSpec};

/// `max_scale` bounds the sizes (copies, seconds) so that a slow oracle stays quick.
pub fn scenario(max_scale: u64) -> impl Strategy<Value = LessonSpec> {
    let desired = prop_oneof![
        2 => Just(0u64),
        2 => Just(1u64),
        6 => 2u64..=8,
        2 => 9u64..=max_scale.max(9),
    ];
    let period = prop_oneof![2 => Just(1u64), 6 => 2u64..=20, 2 => 21u64..=100];
    let delay = prop_oneof![3 => Just(0u64), 4 => 1u64..=30, 3 => 31u64..=120];
    let startup = prop_oneof![3 => Just(0u64), 5 => 1u64..=20, 2 => 21u64..=80];
    let controller = prop_oneof![Just(ControllerKind::Ledger), Just(ControllerKind::Intent)];
    (desired, period, delay, startup, controller)
        .prop_flat_map(move |(desired, period, delay, startup, controller)| {
            let duration = prop_oneof![
                1 => Just(0u64),
                1 => Just(period.saturating_sub(1)),
                1 => Just(period),
                1 => Just(period + 1),
                6 => 0u64..=4 * max_scale.max(10),
            ];
            (
                duration,
                Just((desired, period, delay, startup, controller)),
            )
        })
        .prop_flat_map(
            |(duration, (desired, period, delay, startup, controller))| {
                let at = prop_oneof![
                    3 => (0..=duration / period).prop_map(move |k| k * period),
                    3 => 0..=duration,
                    1 => (duration + 1)..=(duration + 50),
                ];
                let one = (at, 0u64..=10).prop_map(|(at, count)| Death { at, count });
                let deaths = prop::collection::vec(one, 0..=4).prop_flat_map(|v| {
                    // Sometimes repeat an entry's second, so that several deaths share it.
                    let n = v.len();
                    (Just(v), any::<bool>(), 0..n.max(1)).prop_map(|(mut v, twin, i)| {
                        if twin && !v.is_empty() {
                            let at = v[i].at;
                            v.push(Death {
                                at,
                                count: 1 + v[i].count % 3,
                            });
                        }
                        v
                    })
                });
                (
                    deaths,
                    Just((duration, desired, period, delay, startup, controller)),
                )
            },
        )
        .prop_map(
            |(deaths, (duration, desired, period, delay, startup, controller))| LessonSpec {
                desired,
                period,
                delay,
                startup,
                duration,
                deaths,
                controller,
            },
        )
}
