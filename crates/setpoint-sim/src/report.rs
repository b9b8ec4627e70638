//! The one-line description of a scenario, and the text forms of runs and Monte Carlo summaries.
//! Their JSON and CSV forms are the records of [`crate::output`].

use setpoint_core::ControllerKind;

use crate::montecarlo::{Spread, Summary};
use crate::output::{columns, print, run_records, Format};
use crate::scenario::{Outcome, Scenario};

/// One line that says what ran: controller and its settings, loop period, delay model (and the
/// report pipeline when it is not the default per-report one), length.
pub fn describe(scenario: &Scenario) -> String {
    let s = scenario.spec();
    let mut controller = format!("controller {}", s.controller.kind);
    if s.controller.kind == ControllerKind::Expectations {
        let c = s.controller.expectations;
        controller.push_str(&format!(" (ttl {} s, burst {})", c.ttl, c.burst));
    }
    if s.controller.kind == ControllerKind::Named && !s.unique_names {
        controller.push_str(" (names not unique where copies run)");
    }
    let startup = scenario
        .startup_model()
        .map(|m| format!(", startup {}", m.describe()))
        .unwrap_or_default();
    let pipeline = if s.pipeline == crate::pipeline::PipelineSpec::default() {
        String::new()
    } else {
        format!(", pipeline {}", s.pipeline.describe())
    };
    format!(
        "{controller}, U={} sec loop, report delay {}{pipeline}{startup}, {} sec run",
        s.period,
        s.delay.describe(),
        s.duration
    )
}

/// A run as text: what ran (the scenario, its setup, seed and engine) above one row per
/// workload with the columns of the run record ([`crate::output::run_records`]), so the table has
/// the same columns for every controller, engine and seed.
pub fn outcome_table(label: &str, scenario: &Scenario, outcome: &Outcome) -> String {
    let mut out = format!(
        "scenario {label}: {}; seed {}; engine {}\n",
        describe(scenario),
        scenario.spec().seed,
        outcome.engine
    );
    let records = run_records(label, scenario, outcome);
    out.push_str(&print(
        &records,
        Format::Table,
        &["schema", "scenario", "setup", "seed", "engine"],
    ));
    out
}

fn number(metric: &str, x: f64, mean: bool) -> String {
    if mean || metric == "work_per_round" {
        format!("{x:.2}")
    } else {
        format!("{x}")
    }
}

/// A Monte Carlo summary as text: per workload, the mean, p50, p95 and max of every metric.
pub fn summary_table(label: &str, scenario: &Scenario, summary: &Summary) -> String {
    let last = summary.first_seed.wrapping_add(summary.runs - 1);
    let mut out = format!(
        "scenario {label}: {}; {} runs, seeds {} to {last}{}\n",
        describe(scenario),
        summary.runs,
        summary.first_seed,
        if summary.random {
            ""
        } else {
            " (no randomness: every run is the same)"
        }
    );
    for w in &summary.workloads {
        out.push_str(&format!(
            "\nworkload {} (never stable in {} of {} runs; overshoot in {} of {} runs)\n",
            w.workload,
            w.never_stable,
            summary.runs,
            (w.p_overshoot * summary.runs as f64).round(),
            summary.runs
        ));
        let rows: Vec<Vec<String>> = w
            .metrics
            .iter()
            .map(|m| {
                match m.spread.filter(|_| {
                    crate::output::names_apply(scenario.spec().controller.kind)
                        || !matches!(m.metric, "duplicate_names" | "absorbed_creates")
                }) {
                    Some(Spread {
                        mean,
                        p50,
                        p95,
                        max,
                    }) => vec![
                        m.metric.to_owned(),
                        number(m.metric, mean, true),
                        number(m.metric, p50, false),
                        number(m.metric, p95, false),
                        number(m.metric, max, false),
                    ],
                    None => vec![
                        m.metric.to_owned(),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                    ],
                }
            })
            .collect();
        out.push_str(&columns(
            &["metric", "mean", "p50", "p95", "max"].map(String::from),
            &rows,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{run, ScenarioSpec};

    #[test]
    fn a_lesson_run_prints_its_row_under_the_lab_header() {
        let s = Scenario::new(ScenarioSpec::default()).unwrap();
        let text = outcome_table("lesson.toml", &s, &run(&s, 1).unwrap());
        assert_eq!(
            text,
            "scenario lesson.toml: controller ledger, U=15 sec loop, report delay fixed 0 s, 900 sec run; seed 1; engine fast\n\
             workload  rounds work_per_round created unneeded delete_commands deleted overshoot stable died peak_live copy_seconds_above duplicate_names absorbed_creates lost_deletes\n\
             collector     61           0.13       8        0               0       0         0    305    2         6                  0               -                -            0\n"
        );
    }
}
