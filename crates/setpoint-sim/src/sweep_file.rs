//! A sweep's settings from a scenario file (`setpoint sweep FILE.toml --grid …`).
//!
//! A sweep's cell is the lesson's world with every parameter on an axis ([`GridSpec`]): one
//! workload, a loop period, a delay model, a startup time, the controller and its settings, the
//! duration, deaths by count and the base seed. A scenario file gives the value of each axis
//! that the command line does not sweep: [`grid_spec`] turns the file into a one-cell
//! [`GridSpec`], and the grid flags typed on the command line replace its axes, as flags
//! override files in `run`.
//!
//! What a cell cannot hold is refused, never dropped: more than one workload, any event other
//! than deaths by count (scale, outage, restart, stale, lose-delete, crash-loop, deaths by
//! fraction), and `unique_names = false`.

use thiserror::Error;

use crate::lesson_world::Death;
use crate::scenario::{Event, ScenarioSpec, Toll};
use crate::sweep::{Axis, GridSpec};

/// Why a scenario file cannot give a sweep's settings.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SweepFileError {
    /// The file holds something a sweep's cell cannot; the message says what.
    #[error("{file}: {what} cannot be swept; accepted: a scenario file with one workload, deaths by count as its only events, and unique_names left on")]
    NotSweepable {
        /// The file, as named.
        file: String,
        /// What it holds.
        what: String,
    },
}

/// The one-cell grid that the scenario `spec` (read from `file`) describes, with the base seed
/// `spec.seed`. A fixed delay of whole seconds becomes the `delay` axis; any other delay model
/// becomes a one-model `delay_models` axis. A startup model (`[startup]`) becomes a one-model
/// `startup_models` axis.
pub fn grid_spec(file: &str, spec: &ScenarioSpec) -> Result<GridSpec, SweepFileError> {
    let refuse = |what: String| SweepFileError::NotSweepable {
        file: file.to_owned(),
        what,
    };
    let [workload] = spec.workloads.as_slice() else {
        return Err(refuse(format!("{} workloads", spec.workloads.len())));
    };
    if !spec.unique_names {
        return Err(refuse("unique_names = false".into()));
    }
    let mut deaths = Vec::new();
    for e in &spec.events {
        match e.event {
            Event::Deaths(Toll::Count(count)) => deaths.push(Death { at: e.at, count }),
            Event::Deaths(Toll::PartsPerMillion(_)) => {
                return Err(refuse(format!("the deaths by fraction at second {}", e.at)))
            }
            other => {
                return Err(refuse(format!(
                    "the event '{}' at second {}",
                    other.name(),
                    e.at
                )))
            }
        }
    }
    let (delay, delay_models) = match spec.delay.fixed_whole_seconds() {
        Some(g) => (Axis::single(g), Vec::new()),
        None => (Axis::single(0), vec![spec.delay.clone()]),
    };
    let c = &spec.controller;
    Ok(GridSpec {
        desired: Axis::single(workload.desired),
        period: Axis::single(spec.period),
        delay,
        delay_models,
        startup: Axis::single(workload.startup),
        startup_models: spec.startup_model.iter().cloned().collect(),
        ttl: Axis::single(c.expectations.ttl),
        burst: Axis::single(c.expectations.burst),
        controller: vec![c.kind],
        duration: spec.duration,
        deaths,
        seed: spec.seed,
        pipeline: spec.pipeline,
        ..GridSpec::default()
    })
}

/// The delay model that a one-cell grid of [`grid_spec`] sweeps.
#[cfg(test)]
fn swept_model(g: &GridSpec) -> crate::delay::DelayModel {
    match g.delay_models.as_slice() {
        [m] => m.clone(),
        _ => crate::delay::DelayModel::fixed_seconds(g.delay.get(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario_file::parse;
    use crate::sweep::Grid;
    use crate::{run, Scenario};

    const JITTER: &str = r#"
period = 20
duration = 600
seed = 7
[controller]
kind = "intent"
[delay]
model = "uniform"
min = 5
max = 30
[[workload]]
name = "w"
desired = 4
startup = 3
[[event]]
at = 200
kind = "deaths"
count = 1
"#;

    #[test]
    fn a_file_becomes_the_one_cell_grid_of_its_settings() {
        let spec = parse("j.toml", JITTER).unwrap();
        let g = grid_spec("j.toml", &spec).unwrap();
        assert_eq!(
            (g.desired.get(0), g.period.get(0), g.startup.get(0)),
            (4, 20, 3)
        );
        assert_eq!(swept_model(&g), spec.delay);
        assert_eq!(g.deaths, vec![Death { at: 200, count: 1 }]);
        assert_eq!(
            (g.duration, g.seed, g.controller.clone()),
            (600, 7, vec![spec.controller.kind])
        );
        // The cell's scenario is the file's, but for the seed, which the grid derives from it.
        let grid = Grid::new(g).unwrap();
        let cell = grid.lab_scenario(&grid.cell(0));
        let mut file = spec.clone();
        file.workloads[0].name = "collector".into();
        file.seed = cell.spec().seed;
        let a = run(&cell, cell.spec().seed).unwrap();
        let b = run(&Scenario::new(file).unwrap(), cell.spec().seed).unwrap();
        assert_eq!(a.workloads[0].metrics, b.workloads[0].metrics);
    }

    #[test]
    fn a_whole_second_fixed_delay_is_the_delay_axis() {
        let text = JITTER.replace(
            "model = \"uniform\"\nmin = 5\nmax = 30",
            "model = \"fixed\"\nseconds = 20",
        );
        let g = grid_spec("f.toml", &parse("f.toml", &text).unwrap()).unwrap();
        assert!(g.delay_models.is_empty());
        assert_eq!(g.delay.get(0), 20);
    }

    #[test]
    fn what_a_cell_cannot_hold_is_refused_by_name() {
        for (extra, says) in [
            ("[[workload]]\nname = \"v\"\ndesired = 1\n", "2 workloads"),
            (
                "[[event]]\nat = 50\nkind = \"outage\"\nseconds = 10\n",
                "the event 'outage' at second 50",
            ),
            (
                "[[event]]\nat = 60\nkind = \"deaths\"\nfraction = 0.5\n",
                "the deaths by fraction at second 60",
            ),
        ] {
            let text = format!("{JITTER}{extra}");
            let err = grid_spec("x.toml", &parse("x.toml", &text).unwrap()).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with(&format!("x.toml: {says} cannot be swept")),
                "{err}"
            );
        }
        let text = format!("unique_names = false\n{JITTER}");
        let err = grid_spec("x.toml", &parse("x.toml", &text).unwrap()).unwrap_err();
        assert!(err.to_string().contains("unique_names = false"), "{err}");
    }
}
