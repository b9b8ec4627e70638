//! Where the lesson's relation holds, where it fails and why, and how the exact predictor does on
//! the same cells.

use serde::Serialize;
use setpoint_core::ControllerKind;

use crate::lesson::lesson_prediction;
use crate::predict::{predict, Regime};
use rayon::prelude::*;

use crate::lesson_world::LessonSpec;
use crate::sweep::Grid;
use crate::{simulate, LessonWorld, SettingError};

/// Why the lesson's relation mispredicts a cell, the first reason that applies, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// The relation is about the `ledger` controller; `intent` never overshoots.
    IntentController,
    /// Nothing is desired, so nothing can overshoot; the relation gives 0 × (…) = 0 only when
    /// the blind-round factor is not negative.
    NothingDesired,
    /// `G + B = 0`: `⌈0 / U⌉ − 1 = −1`, a negative overshoot.
    NoDelayNoStartup,
    /// `U ≤ B / 2`: the loop starts deleting before the last blind batch is live, so fewer
    /// batches are ever live at once than the relation counts.
    PeriodShortAgainstStartup,
    /// The run ends before the overshoot peaks.
    RunEndsBeforePeak,
    /// A scripted death strikes while the first wave is still unsettled and changes its course.
    DeathInsideTransient,
}

impl Failure {
    /// Every reason, in priority order.
    pub const ALL: [Failure; 6] = [
        Failure::IntentController,
        Failure::NothingDesired,
        Failure::NoDelayNoStartup,
        Failure::PeriodShortAgainstStartup,
        Failure::RunEndsBeforePeak,
        Failure::DeathInsideTransient,
    ];

    /// The region, described in words.
    pub fn describe(self) -> &'static str {
        match self {
            Failure::IntentController => {
                "controller intent: it counts its own work in flight and never overshoots, while the relation predicts desired x (ceil((G+B)/U) - 1)"
            }
            Failure::NothingDesired => "desired = 0: nothing is ever created",
            Failure::NoDelayNoStartup => {
                "G + B = 0: the relation gives desired x (0 - 1), a negative overshoot; the truth is 0"
            }
            Failure::PeriodShortAgainstStartup => {
                "U <= B/2: deletions start before the last blind batch is live, so at most K - (floor(B/U) - 1) batches are live at once; the relation over-predicts by desired x (floor(B/U) - 1)"
            }
            Failure::RunEndsBeforePeak => {
                "the run ends before the blind batches are all live: the overshoot is cut short"
            }
            Failure::DeathInsideTransient => {
                "a scripted death strikes while the first wave of blind creations is still settling"
            }
        }
    }
}

/// Counts over a scanned grid.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BoundaryReport {
    /// Cells scanned.
    pub cells: u64,
    /// Cells where the lesson's relation equals the measured overshoot.
    pub lesson_holds: u64,
    /// Cells where it does not, by the first reason that applies; `other` counts cells that no
    /// listed reason explains (0 on every grid checked so far).
    pub lesson_fails: Vec<(Failure, u64)>,
    /// Mismatched cells no listed reason explains.
    pub other: u64,
    /// Cells where the exact predictor differs from the measured overshoot.
    pub predictor_mismatches: u64,
    /// Cells the predictor answered in closed form (including `intent` and `desired = 0`).
    pub closed_form: u64,
    /// Cells where it walked the recurrence through an unsettled stretch.
    pub walked: u64,
}

impl BoundaryReport {
    /// Adds one measured cell.
    pub fn add(&mut self, spec: &LessonSpec, measured: u64) {
        self.cells += 1;
        let lesson = lesson_prediction(spec.desired, spec.delay, spec.startup, spec.period);
        if lesson == i128::from(measured) {
            self.lesson_holds += 1;
        } else {
            match classify(spec) {
                Some(f) => match self.lesson_fails.iter_mut().find(|(g, _)| *g == f) {
                    Some((_, n)) => *n += 1,
                    None => {
                        self.lesson_fails.push((f, 1));
                        self.lesson_fails.sort();
                    }
                },
                None => self.other += 1,
            }
        }
        let p = predict(spec);
        if p.overshoot != measured {
            self.predictor_mismatches += 1;
        }
        match p.regime {
            Regime::Walked => self.walked += 1,
            _ => self.closed_form += 1,
        }
    }

    /// Merges counts from another part of the same grid.
    pub fn merge(mut self, other: BoundaryReport) -> BoundaryReport {
        self.cells += other.cells;
        self.lesson_holds += other.lesson_holds;
        for (f, n) in other.lesson_fails {
            match self.lesson_fails.iter_mut().find(|(g, _)| *g == f) {
                Some((_, m)) => *m += n,
                None => self.lesson_fails.push((f, n)),
            }
        }
        self.lesson_fails.sort();
        self.other += other.other;
        self.predictor_mismatches += other.predictor_mismatches;
        self.closed_form += other.closed_form;
        self.walked += other.walked;
        self
    }

    /// Measures every spec and counts.
    pub fn scan<'a>(
        specs: impl IntoIterator<Item = &'a LessonSpec>,
    ) -> Result<BoundaryReport, SettingError> {
        let mut report = BoundaryReport::default();
        for spec in specs {
            let m = simulate(&LessonWorld::new(spec.clone())?);
            report.add(spec, m.overshoot);
        }
        Ok(report)
    }

    /// The report as text: counts, then each failing region in words.
    pub fn to_text(&self) -> String {
        let pct = |n: u64| {
            if self.cells == 0 {
                0.0
            } else {
                100.0 * n as f64 / self.cells as f64
            }
        };
        let failed: u64 = self.lesson_fails.iter().map(|(_, n)| n).sum::<u64>() + self.other;
        let mut out = format!(
            "cells: {}\nlesson's relation desired x (ceil((G+B)/U) - 1): holds on {} ({:.2}%), fails on {} ({:.2}%)\n",
            self.cells,
            self.lesson_holds,
            pct(self.lesson_holds),
            failed,
            pct(failed)
        );
        for (f, n) in &self.lesson_fails {
            out.push_str(&format!("  {n:>9}  {}\n", f.describe()));
        }
        if self.other > 0 {
            out.push_str(&format!("  {:>9}  unexplained\n", self.other));
        }
        out.push_str(&format!(
            "exact predictor (docs/relation.md): {} mismatches; {} cells in closed form, {} walked through an unsettled stretch\n",
            self.predictor_mismatches, self.closed_form, self.walked
        ));
        out
    }
}

/// Scans every cell of `grid` on the current rayon pool. The counts do not depend on the number
/// of threads. `progress` is told how many cells each finished chunk held.
pub fn scan_grid(grid: &Grid, progress: &(dyn Fn(u64) + Sync)) -> BoundaryReport {
    const CHUNK: u64 = 4096;
    (0..grid.cells().div_ceil(CHUNK))
        .into_par_iter()
        .map(|k| {
            let cells = (k * CHUNK)..((k + 1) * CHUNK).min(grid.cells());
            let mut report = BoundaryReport::default();
            for i in cells.clone() {
                let scenario = grid.scenario(grid.cell(i));
                let m = simulate(&scenario);
                report.add(scenario.spec(), m.overshoot);
            }
            progress(cells.end - cells.start);
            report
        })
        .reduce(BoundaryReport::default, BoundaryReport::merge)
}

/// The first reason the lesson's relation can fail on `spec`, or `None` if none applies.
pub fn classify(spec: &LessonSpec) -> Option<Failure> {
    let (u, g, b) = (spec.period, spec.delay, spec.startup);
    if spec.controller == ControllerKind::Intent {
        return Some(Failure::IntentController);
    }
    if spec.desired == 0 {
        return Some(Failure::NothingDesired);
    }
    if g + b == 0 {
        return Some(Failure::NoDelayNoStartup);
    }
    if b / u >= 2 {
        return Some(Failure::PeriodShortAgainstStartup);
    }
    let k = (g + b).div_ceil(u);
    // With ⌊B/U⌋ ≤ 1 the peak comes when the last blind batch is live.
    if spec.duration < (k - 1) * u + b {
        return Some(Failure::RunEndsBeforePeak);
    }
    if predict(spec).regime == Regime::Walked {
        return Some(Failure::DeathInsideTransient);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(period: u64, delay: u64, startup: u64) -> LessonSpec {
        LessonSpec {
            period,
            delay,
            startup,
            ..LessonSpec::default()
        }
    }

    #[test]
    fn lessons_grid_holds_everywhere_and_the_predictor_too() {
        let grid = crate::lesson::RelationGrid::lesson();
        let specs: Vec<LessonSpec> = grid
            .delays
            .iter()
            .flat_map(|&g| grid.periods.iter().map(move |&u| cell(u, g, 5)))
            .collect();
        let r = BoundaryReport::scan(&specs).unwrap();
        assert_eq!(
            (r.cells, r.lesson_holds, r.predictor_mismatches),
            (56, 56, 0)
        );
    }

    #[test]
    fn failures_are_explained_by_their_region() {
        let specs = [cell(15, 0, 0), cell(1, 0, 5), cell(2, 30, 9)];
        let r = BoundaryReport::scan(&specs).unwrap();
        assert_eq!(r.other, 0);
        assert_eq!(r.predictor_mismatches, 0);
        assert_eq!(
            r.lesson_fails,
            vec![
                (Failure::NoDelayNoStartup, 1),
                (Failure::PeriodShortAgainstStartup, 2)
            ]
        );
        assert!(r.to_text().contains("fails on 3 (100.00%)"));
    }
}
