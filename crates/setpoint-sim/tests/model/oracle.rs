//! A deliberately naive oracle: the lesson's rules applied literally, second by second, to a list
//! of copy records. Slow and obvious on purpose: the engine is checked against it.
//!
//! It uses setpoint's documented semantics (docs/model.md): `unneeded` counts the copies that
//! scripted deaths actually killed, and a run that never drifts is stable from second 0.

use setpoint_core::ControllerKind;
use setpoint_sim::{LessonSpec, Metrics, TraceRow};

#[derive(Clone, Copy)]
struct Copy {
    ready: u64,
    death: Option<u64>,
}

pub fn run(s: &LessonSpec) -> Metrics {
    run_traced(s).0
}

/// The metrics and one row per second.
pub fn run_traced(s: &LessonSpec) -> (Metrics, Vec<TraceRow>) {
    let mut rows = Vec::new();
    let mut copies: Vec<Copy> = Vec::new();
    let (g, b, u) = (s.delay, s.startup, s.period);
    let (mut rounds, mut created, mut commands, mut deleted, mut died) = (0u64, 0, 0, 0, 0);
    let (mut overshoot, mut peak, mut above) = (0u64, 0u64, 0u64);
    let mut last_drift: Option<u64> = None;
    let alive = |c: &Copy, t: u64| c.ready <= t && c.death.is_none_or(|d| d > t);
    let seen = |c: &Copy, t: u64| c.ready + g <= t && c.death.is_none_or(|d| d + g > t);
    for t in 0..=s.duration {
        let before = (created, commands, deleted, died);
        for d in &s.deaths {
            if d.at == t {
                let mut left = d.count;
                for c in copies.iter_mut() {
                    if left == 0 {
                        break;
                    }
                    if alive(c, t) {
                        c.death = Some(t);
                        left -= 1;
                        died += 1;
                    }
                }
            }
        }
        if t % u == 0 {
            rounds += 1;
            let on_ledger: Vec<usize> =
                (0..copies.len()).filter(|&i| seen(&copies[i], t)).collect();
            let pending = match s.controller {
                ControllerKind::Ledger => 0,
                ControllerKind::Intent => copies
                    .iter()
                    .filter(|c| c.death.is_none() && c.ready + g > t)
                    .count() as i64,
                other => unreachable!("the lesson's world has no {other} controller"),
            };
            let diff = s.desired as i64 - on_ledger.len() as i64 - pending;
            if diff > 0 {
                for _ in 0..diff {
                    copies.push(Copy {
                        ready: t + b,
                        death: None,
                    });
                }
                created += diff as u64;
            } else if diff < 0 {
                commands += (-diff) as u64;
                for &i in on_ledger.iter().take((-diff) as usize) {
                    if copies[i].death.is_none() {
                        copies[i].death = Some(t);
                        deleted += 1;
                    }
                }
            }
        }
        let live = copies.iter().filter(|c| alive(c, t)).count() as u64;
        peak = peak.max(live);
        if live > s.desired {
            overshoot = overshoot.max(live - s.desired);
            above += live - s.desired;
        }
        if live != s.desired {
            last_drift = Some(t);
        }
        rows.push(TraceRow {
            t,
            desired: s.desired,
            live,
            seen: copies.iter().filter(|c| seen(c, t)).count() as u64,
            pending: copies
                .iter()
                .filter(|c| c.death.is_none() && c.ready + g > t)
                .count() as u64,
            created: created - before.0,
            delete_commands: commands - before.1,
            deleted: deleted - before.2,
            died: died - before.3,
        });
    }
    let m = Metrics {
        rounds,
        work_per_round: (created + commands) as f64 / rounds as f64,
        created,
        unneeded: created as i64 - (s.desired + died) as i64,
        delete_commands: commands,
        deleted,
        overshoot,
        stable: match last_drift {
            None => Some(0),
            Some(t) if t == s.duration => None,
            Some(t) => Some(t + 1),
        },
        died,
        peak_live: peak,
        copy_seconds_above: above,
    };
    (m, rows)
}
