//! The lesson's tables, byte for byte, and the scan of loop period against report delay.

use serde::Serialize;
use setpoint_core::ControllerKind;

use crate::engine::simulate;
use crate::format::{js_to_fixed2, pad};
use crate::lesson_world::{LessonSpec, LessonWorld};
use crate::metrics::Metrics;

/// The report delays of the lesson's first table.
pub const LESSON_DELAYS: [u64; 6] = [0, 5, 10, 20, 30, 60];
/// The loop periods of the lesson's period scan (at G = 30).
pub const SCAN_PERIODS: [u64; 7] = [5, 10, 15, 20, 30, 35, 60];
/// The report delays (rows) of the lesson's overshoot table.
pub const RELATION_DELAYS: [u64; 7] = [0, 10, 20, 30, 45, 60, 90];
/// The loop periods (columns) of the lesson's overshoot table.
pub const RELATION_PERIODS: [u64; 8] = [5, 10, 15, 20, 30, 45, 60, 90];

/// The column header of the lesson's metric table, as `setpoint run --format table` prints it.
pub const LOOP_HEADER: &str =
    "G(sec) work/round created unneeded delete commands deleted overshoot stable(sec)";

/// One row of the lesson's metric table, `delay` in the first column, without a newline.
pub fn loop_row(delay: u64, m: &Metrics) -> String {
    let stable = m
        .stable
        .map_or_else(|| "none".to_owned(), |s| s.to_string());
    format!(
        "{}{}{}{}{}{}{}{}",
        pad(delay, 6),
        pad(js_to_fixed2(m.work_per_round), 12),
        pad(m.created, 11),
        pad(m.unneeded, 10),
        pad(m.delete_commands, 17),
        pad(m.deleted, 9),
        pad(m.overshoot, 11),
        pad(stable, 13),
    )
}

/// The lesson's relation, `desired × (⌈(G + B) / U⌉ − 1)`. It is negative when `G + B = 0`,
/// which is one of the places where it fails (see `docs/relation.md`).
pub fn lesson_prediction(desired: u64, delay: u64, startup: u64, period: u64) -> i128 {
    let blind = (delay + startup).div_ceil(period);
    i128::from(desired) * (i128::from(blind) - 1)
}

/// The lesson's first block: both controllers over the lesson's delays.
pub fn lesson_loop() -> String {
    let mut out = String::from(
        "U=15 sec loop, B=5 sec startup, desired 6 copies, 2 deaths at sec 300, 900 sec run\n",
    );
    for controller in ControllerKind::LESSON {
        out.push_str(&format!("\ncontroller: {}\n", controller.lesson_title()));
        out.push_str(LOOP_HEADER);
        out.push('\n');
        for delay in LESSON_DELAYS {
            let m = simulate(&LessonWorld::lesson(delay, controller));
            out.push_str(&loop_row(delay, &m));
            out.push('\n');
        }
    }
    out
}

/// The lesson's second block: the period scan at G = 30 and the 56-cell overshoot table.
pub fn lesson_relation() -> String {
    let (startup, desired, delay) = (5, 6, 30);
    let mut out = String::from("G=30 sec fixed, B=5 sec; scanning the loop period\n");
    out.push_str(
        "U(sec) ceil((G+B)/U) predicted overshoot measured overshoot unneeded deleted work/round\n",
    );
    for period in SCAN_PERIODS {
        let m = simulate(&lesson_cell(delay, period));
        out.push_str(&format!(
            "{}{}{}{}{}{}{}\n",
            pad(period, 6),
            pad((delay + startup).div_ceil(period), 15),
            pad(lesson_prediction(desired, delay, startup, period), 21),
            pad(m.overshoot, 20),
            pad(m.unneeded, 10),
            pad(m.deleted, 9),
            pad(js_to_fixed2(m.work_per_round), 12),
        ));
    }
    let scan = RelationScan::run(&RelationGrid::lesson());
    out.push_str("\novershoot table (row: report delay G, column: loop period U)\n");
    out.push_str(&scan.overshoot_table(5));
    out.push_str(&format!(
        "\nrelation: overshoot = desired x (ceil((G+B)/U) - 1); {} cells, {} mismatched\n",
        scan.cells.len(),
        scan.mismatched()
    ));
    out
}

/// Both blocks, as `setpoint lesson` prints them: separated by one empty line.
pub fn lesson_all() -> String {
    format!("{}\n{}", lesson_loop(), lesson_relation())
}

fn lesson_cell(delay: u64, period: u64) -> LessonWorld {
    LessonWorld::new(LessonSpec {
        delay,
        period,
        ..LessonSpec::default()
    })
    .expect("lesson cells are inside every limit")
}

/// A grid of report delays (rows) and loop periods (columns) on one base scenario.
#[derive(Debug, Clone)]
pub struct RelationGrid {
    /// Every setting but delay and period. Its own delay and period are ignored.
    pub base: LessonSpec,
    /// The report delays, in seconds, one row each.
    pub delays: Vec<u64>,
    /// The loop periods, in seconds, one column each.
    pub periods: Vec<u64>,
}

impl RelationGrid {
    /// The lesson's 56-cell grid.
    pub fn lesson() -> Self {
        RelationGrid {
            base: LessonSpec::default(),
            delays: RELATION_DELAYS.to_vec(),
            periods: RELATION_PERIODS.to_vec(),
        }
    }
}

/// One cell of a relation scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RelationCell {
    /// Report delay G, in seconds.
    pub delay: u64,
    /// Loop period U, in seconds.
    pub period: u64,
    /// Measured overshoot, in copies.
    pub overshoot: u64,
    /// The lesson's prediction `desired × (⌈(G + B) / U⌉ − 1)`, in copies.
    pub lesson_prediction: i128,
    /// Whether the measurement equals the prediction.
    pub lesson_match: bool,
}

/// The measured overshoot of every cell of a [`RelationGrid`], against the lesson's relation.
#[derive(Debug, Clone)]
pub struct RelationScan {
    /// The grid's delays (rows).
    pub delays: Vec<u64>,
    /// The grid's periods (columns).
    pub periods: Vec<u64>,
    /// The cells, row by row.
    pub cells: Vec<RelationCell>,
}

impl RelationScan {
    /// Simulates every cell. The base scenario must already be valid apart from delay and
    /// period; an invalid cell is reported as an error.
    pub fn try_run(grid: &RelationGrid) -> Result<Self, crate::SettingError> {
        let mut cells = Vec::with_capacity(grid.delays.len() * grid.periods.len());
        for &delay in &grid.delays {
            for &period in &grid.periods {
                let scenario = LessonWorld::new(LessonSpec {
                    delay,
                    period,
                    ..grid.base.clone()
                })?;
                let m = simulate(&scenario);
                let base = scenario.spec();
                let lesson_prediction =
                    lesson_prediction(base.desired, delay, base.startup, period);
                cells.push(RelationCell {
                    delay,
                    period,
                    overshoot: m.overshoot,
                    lesson_prediction,
                    lesson_match: i128::from(m.overshoot) == lesson_prediction,
                });
            }
        }
        Ok(RelationScan {
            delays: grid.delays.clone(),
            periods: grid.periods.clone(),
            cells,
        })
    }

    fn run(grid: &RelationGrid) -> Self {
        Self::try_run(grid).expect("the lesson's grid is valid")
    }

    /// How many cells the lesson's relation mispredicts.
    pub fn mismatched(&self) -> usize {
        self.cells.iter().filter(|c| !c.lesson_match).count()
    }

    /// The measured overshoot as the lesson prints it: `G\U` header, one row per delay.
    /// Columns are at least `min_width` wide, and wider when a number needs it.
    pub fn overshoot_table(&self, min_width: usize) -> String {
        self.table(min_width, |c| c.overshoot.to_string())
    }

    /// The lesson's prediction for every cell, in the layout of [`Self::overshoot_table`].
    pub fn prediction_table(&self, min_width: usize) -> String {
        self.table(min_width, |c| c.lesson_prediction.to_string())
    }

    fn table(&self, min_width: usize, value: impl Fn(&RelationCell) -> String) -> String {
        let texts: Vec<String> = self.cells.iter().map(&value).collect();
        let widest = texts
            .iter()
            .map(String::len)
            .chain(self.periods.iter().map(|p| p.to_string().len()))
            .max()
            .unwrap_or(0);
        let w = min_width.max(widest + 1);
        let lead = self
            .delays
            .iter()
            .map(|d| d.to_string().len())
            .max()
            .unwrap_or(0)
            .max(3);
        let mut out = format!("{:<lead$} ", "G\\U");
        for p in &self.periods {
            out.push_str(&pad(p, w));
        }
        out.push('\n');
        for (row, delay) in self.delays.iter().enumerate() {
            out.push_str(&pad(delay, lead));
            out.push(' ');
            for col in 0..self.periods.len() {
                out.push_str(&pad(&texts[row * self.periods.len() + col], w));
            }
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lesson_relation_predicts_negative_overshoot_when_nothing_delays() {
        assert_eq!(lesson_prediction(6, 0, 0, 15), -6);
        assert_eq!(lesson_prediction(6, 30, 5, 5), 36);
        assert_eq!(lesson_prediction(6, 30, 5, 35), 0);
    }

    #[test]
    fn lesson_grid_has_fifty_six_cells_and_no_mismatch() {
        let scan = RelationScan::run(&RelationGrid::lesson());
        assert_eq!(scan.cells.len(), 56);
        assert_eq!(scan.mismatched(), 0);
    }

    #[test]
    fn tables_widen_for_long_numbers() {
        let scan = RelationScan {
            delays: vec![1000],
            periods: vec![1],
            cells: vec![RelationCell {
                delay: 1000,
                period: 1,
                overshoot: 123456,
                lesson_prediction: 0,
                lesson_match: false,
            }],
        };
        assert_eq!(scan.overshoot_table(5), "G\\U        1\n1000  123456\n");
    }
}
