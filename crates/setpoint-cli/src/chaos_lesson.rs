//! `setpoint chaos --lesson`: the lesson's cells run by the runtime's own host and agent in the
//! chaos world, scaled as `experiment lesson --real` runs them on real processes
//! ([`setpoint_chaos::agree::lesson_scaled`]), beside the lab's prediction. Two rows per cell:
//! `lab` and `chaos`, with the columns where the chaos world differs named in `differs`.

use setpoint_chaos::agree::{lab, lesson_scaled, Cell};
use setpoint_core::ControllerKind;
use setpoint_sim::output::{print, Record, Value};
use setpoint_sim::{LessonSpec, Metrics};

use crate::chaos::ChaosArgs;
use crate::BadInput;

/// The metrics both rows show, by their names in outputs.
fn columns(m: &Metrics) -> [(&'static str, Value); 8] {
    [
        ("work_per_round", Value::from(m.work_per_round)),
        ("created", m.created.into()),
        ("unneeded", m.unneeded.into()),
        ("delete_commands", m.delete_commands.into()),
        ("deleted", m.deleted.into()),
        ("overshoot", m.overshoot.into()),
        ("stable", m.stable.map_or(Value::Null, Value::from)),
        ("died", m.died.into()),
    ]
}

/// Runs `setpoint chaos --lesson`; returns what to print.
pub fn run(a: &ChaosArgs) -> anyhow::Result<String> {
    let second = a.time_scale * 1000.0;
    if !(2.0..=10_000.0).contains(&second) || (second - second.round()).abs() > 1e-9 {
        anyhow::bail!(BadInput(format!(
            "--time-scale {}: out of range: accepted 0.002 to 10, in steps of 0.001 (a virtual second of whole milliseconds)",
            a.time_scale
        )));
    }
    let second_ms = second.round() as u64;
    let controllers = a
        .controller
        .iter()
        .map(|c| match c.parse::<ControllerKind>() {
            Ok(k) => Ok(k),
            Err(_) => Err(BadInput(format!(
                "--controller '{c}': accepted ledger, intent, expectations, named or gated"
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(&g) = a.delay.iter().find(|&&g| g > 3600) {
        anyhow::bail!(BadInput(format!(
            "--delay {g}: out of range: accepted 0 to 3600 seconds"
        )));
    }
    let world = LessonSpec::default();
    let mut rows = Vec::new();
    for &controller in &controllers {
        for &g in &a.delay {
            let cell = Cell {
                controller,
                desired: world.desired,
                period: world.period,
                startup: world.startup,
                delay: g,
                duration: world.duration,
                deaths: world.deaths.iter().map(|d| (d.at, d.count)).collect(),
            };
            let predicted = lab(&cell).map_err(|e| BadInput(e.to_string()))?;
            let simulated = lesson_scaled(controller, g, second_ms)?;
            let lab_cols = columns(&predicted);
            let chaos_cols = columns(&simulated);
            let differs: Vec<&str> = lab_cols
                .iter()
                .zip(&chaos_cols)
                .filter(|(l, c)| l.1 != c.1)
                .map(|(l, _)| l.0)
                .collect();
            for (name, cols) in [("lab", lab_cols), ("chaos", chaos_cols)] {
                let mut r = Record::new();
                r.push("controller", controller.name());
                r.push("delay", g);
                r.push("world", name);
                for (k, v) in cols {
                    r.push(k, v);
                }
                r.push(
                    "differs",
                    if name == "chaos" {
                        Value::from(differs.join(" "))
                    } else {
                        Value::Null
                    },
                );
                rows.push(r);
            }
        }
    }
    let mut out = String::new();
    if a.format == crate::output::Format::Table {
        out.push_str(&format!(
            "U=15 sec loop, B=5 sec startup, desired 6 copies, 2 deaths at sec 300, 900 sec run\nchaos: the runtime's host and agent in the simulated world, 1 sec = {second_ms} ms (time scale {}), sync and reports every half second, no network delay\n",
            a.time_scale
        ));
    }
    out.push_str(&print(&rows, a.format.into(), &[]));
    Ok(out)
}
