//! Text and CSV forms of lab runs and Monte Carlo summaries. Their JSON form is the serde
//! serialisation of [`Outcome`] and [`Summary`].

use setpoint_core::ControllerKind;

use crate::format::js_to_fixed2;
use crate::metrics::Metrics;
use crate::montecarlo::{Spread, Summary};
use crate::scenario::{Outcome, Scenario};

/// One line that says what ran: controller and its settings, loop period, delay model, length.
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
    format!(
        "{controller}, U={} sec loop, report delay {}, {} sec run",
        s.period,
        s.delay.describe(),
        s.duration
    )
}

/// Right-aligned columns under their headers, the first column left-aligned, one space apart.
fn columns(header: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].len())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| {
        let mut out = String::new();
        for (c, cell) in cells.iter().enumerate() {
            let w = widths[c];
            if c == 0 {
                out.push_str(&format!("{cell:<w$}"));
            } else {
                out.push_str(&format!(" {cell:>w$}"));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(&header.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    for r in rows {
        out.push_str(&line(r));
    }
    out
}

fn stable(m: &Metrics) -> String {
    m.stable
        .map_or_else(|| "none".to_owned(), |s| s.to_string())
}

/// A run as text: what ran (with the seed, when the run drew random numbers) and one row per
/// workload with the lesson's columns and the lab's.
pub fn outcome_table(label: &str, scenario: &Scenario, outcome: &Outcome) -> String {
    let mut out = format!("scenario {label}: {}", describe(scenario));
    if let Some(seed) = outcome.seed {
        out.push_str(&format!("; seed {seed}"));
    }
    out.push('\n');
    let header = [
        "workload",
        "desired",
        "work/round",
        "created",
        "unneeded",
        "delete commands",
        "deleted",
        "overshoot",
        "stable(sec)",
        "peak live",
        "copy-sec above",
        "dup names",
        "absorbed",
        "lost deletes",
    ];
    let rows: Vec<Vec<String>> = outcome
        .workloads
        .iter()
        .zip(&scenario.spec().workloads)
        .map(|(w, decl)| {
            let m = &w.metrics;
            vec![
                w.workload.clone(),
                decl.desired.to_string(),
                js_to_fixed2(m.work_per_round),
                m.created.to_string(),
                m.unneeded.to_string(),
                m.delete_commands.to_string(),
                m.deleted.to_string(),
                m.overshoot.to_string(),
                stable(m),
                m.peak_live.to_string(),
                m.copy_seconds_above.to_string(),
                w.duplicate_names.to_string(),
                w.absorbed_creates.to_string(),
                w.lost_deletes.to_string(),
            ]
        })
        .collect();
    out.push_str(&columns(&header, &rows));
    out
}

/// The CSV header of [`outcome_csv`].
pub const OUTCOME_CSV_HEADER: &str = "workload,seed,rounds,work_per_round,created,unneeded,delete_commands,deleted,overshoot,stable,died,peak_live,copy_seconds_above,duplicate_names,absorbed_creates,lost_deletes";

/// A run as CSV: a header and one row per workload. `seed` is empty when the run drew no
/// random number.
pub fn outcome_csv(outcome: &Outcome) -> String {
    let mut out = format!("{OUTCOME_CSV_HEADER}\n");
    let seed = outcome.seed.map_or_else(String::new, |s| s.to_string());
    for w in &outcome.workloads {
        out.push_str(&format!(
            "{},{seed},{},{},{},{}\n",
            w.workload,
            w.metrics.csv_row(),
            w.duplicate_names,
            w.absorbed_creates,
            w.lost_deletes
        ));
    }
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
            "\nworkload {} (never stable in {} of {} runs)\n",
            w.workload, w.never_stable, summary.runs
        ));
        let rows: Vec<Vec<String>> = w
            .metrics
            .iter()
            .map(|m| match m.spread {
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
            })
            .collect();
        out.push_str(&columns(&["metric", "mean", "p50", "p95", "max"], &rows));
    }
    out
}

/// A Monte Carlo summary as CSV: one row per workload and metric. Empty cells mean no run had
/// a value.
pub fn summary_csv(summary: &Summary) -> String {
    let mut out = String::from("workload,metric,runs,first_seed,never_stable,mean,p50,p95,max\n");
    for w in &summary.workloads {
        for m in &w.metrics {
            let cells = m.spread.map_or_else(
                || ",,,".to_owned(),
                |s| format!("{},{},{},{}", s.mean, s.p50, s.p95, s.max),
            );
            out.push_str(&format!(
                "{},{},{},{},{},{cells}\n",
                w.workload, m.metric, summary.runs, summary.first_seed, w.never_stable
            ));
        }
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
            "scenario lesson.toml: controller ledger, U=15 sec loop, report delay fixed 0 s, 900 sec run\n\
             workload  desired work/round created unneeded delete commands deleted overshoot stable(sec) peak live copy-sec above dup names absorbed lost deletes\n\
             collector       6       0.13       8        0               0       0         0         305         6              0         0        0            0\n"
        );
    }
}
