//! The runtime's measurement against the lab: a log of events at whole seconds, written out
//! from a literal model of the lesson's world, measures exactly what the lab's engine computes.
//! It lives here because it needs both halves; the runtime itself does not know the lab.

use setpoint_core::ControllerKind;
use setpoint_runtime::events::{CopyEvent, CopyEventKind, Logged, RoundEvent};
use setpoint_runtime::measure::{from_log, Window};
use setpoint_sim::lesson::LESSON_DELAYS;
use setpoint_sim::{simulate, LessonSpec, LessonWorld};

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

/// The lesson's world written out literally, one copy record at a time, emitting the events
/// the runtime would log at whole seconds (time scale 1, origin 0).
fn lesson_log(spec: &LessonSpec) -> Vec<Logged> {
    use CopyEventKind::*;
    struct Copy {
        ready: u64,
        death: Option<u64>,
        commanded: bool,
    }
    let (u, g, b) = (spec.period, spec.delay, spec.startup);
    let intent = spec.controller == ControllerKind::Intent;
    let mut copies: Vec<Copy> = Vec::new();
    let mut log = Vec::new();
    let ms = |t: u64| t * 1000;
    for t in 0..=spec.duration {
        for d in spec.deaths.iter().filter(|d| d.at == t) {
            let mut left = d.count;
            for c in copies.iter_mut() {
                if left > 0 && c.ready <= t && c.death.is_none() {
                    c.death = Some(t);
                    left -= 1;
                }
            }
        }
        if t % u == 0 {
            let seen: Vec<usize> = (0..copies.len())
                .filter(|&i| {
                    let c = &copies[i];
                    c.ready + g <= t && c.death.is_none_or(|d| d + g > t)
                })
                .collect();
            let pending = if intent {
                copies
                    .iter()
                    .filter(|c| c.death.is_none() && c.ready + g > t)
                    .count()
            } else {
                0
            };
            let diff = spec.desired as i64 - seen.len() as i64 - pending as i64;
            let mut commands = 0;
            if diff > 0 {
                for _ in 0..diff {
                    let n = copies.len() as u64;
                    log.push(copy(Create, n, ms(t), false));
                    log.push(copy(Ready, n, ms(t + b), false));
                    copies.push(Copy {
                        ready: t + b,
                        death: None,
                        commanded: false,
                    });
                }
            } else if diff < 0 {
                commands = (-diff) as u64;
                for &i in seen.iter().take(commands as usize) {
                    let c = &mut copies[i];
                    if c.death.is_none() {
                        c.death = Some(t);
                        c.commanded = true;
                        log.push(copy(Delete, i as u64, ms(t), true));
                    }
                }
            }
            log.push(round(ms(t), spec.desired, diff.max(0) as u64, commands));
        }
    }
    for (n, c) in copies.iter().enumerate() {
        if let Some(d) = c.death {
            log.push(copy(Exit, n as u64, ms(d), c.commanded));
        }
    }
    log
}

#[test]
fn a_log_of_events_at_whole_seconds_measures_exactly_what_the_lab_computes() {
    for controller in ControllerKind::LESSON {
        for delay in LESSON_DELAYS {
            for (period, startup) in [(15, 5), (5, 5), (20, 0), (35, 5)] {
                let spec = LessonSpec {
                    delay,
                    period,
                    startup,
                    controller,
                    ..LessonSpec::default()
                };
                let w = Window {
                    origin_ms: 0,
                    time_scale: 1.0,
                    last: spec.duration,
                };
                let measured = from_log("w", &lesson_log(&spec), w, Some(period * 1000));
                let lab = simulate(&LessonWorld::new(spec.clone()).unwrap());
                assert_eq!(measured.metrics, lab, "{spec:?}");
            }
        }
    }
}
