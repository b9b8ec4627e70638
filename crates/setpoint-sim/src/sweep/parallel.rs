//! Every cell of a shard, in parallel on the current rayon pool: the summary counts, the rows in
//! cell order, and one numeric column. Cells are computed in chunks and written in blocks, so the
//! bytes written do not depend on the number of threads.

use std::io::{self, Write};
use std::ops::Range;

use rayon::prelude::*;
use serde::Serialize;
use thiserror::Error;

use super::{Grid, RowFormat};
use crate::output::{Record, Value};
use crate::scenario::ScenarioError;

/// How the cells are split into parallel tasks.
#[derive(Debug, Clone, Copy)]
struct Split {
    /// Cells computed by one task.
    chunk_cells: u64,
    /// Chunks formatted before they are written: bounds the rows held in memory at once.
    chunks_per_block: u64,
}

/// Chunks small enough to balance the load, large enough that scheduling is noise next to the
/// simulations; blocks of a few megabytes of text.
const SPLIT: Split = Split {
    chunk_cells: 2048,
    chunks_per_block: 32,
};

/// The counts `setpoint sweep --summary` prints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Cells simulated.
    pub cells: u64,
    /// Cells of the lesson's world whose measured overshoot differs from the lesson's relation
    /// (cells outside the lesson's world are not counted: the relation is not defined there).
    pub mismatched: u64,
    /// Cells whose overshoot is above zero (in any run, with `--runs`).
    pub overshooting: u64,
    /// Cells of the lesson's world whose measured overshoot differs from the exact predictor (0
    /// is the claim).
    pub prediction_mismatched: u64,
}

impl Summary {
    fn add(self, other: Summary) -> Summary {
        Summary {
            cells: self.cells + other.cells,
            mismatched: self.mismatched + other.mismatched,
            overshooting: self.overshooting + other.overshooting,
            prediction_mismatched: self.prediction_mismatched + other.prediction_mismatched,
        }
    }
}

/// A failure inside a sweep: writing, or a cell the general engine could not hold.
#[derive(Debug, Error)]
pub enum SweepError {
    /// Writing the rows failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// A column that the grid's rows do not have, or that is not a number.
    #[error("no numeric column '{key}' in these rows; accepted: {accepted}")]
    NoColumn {
        /// The key as given.
        key: String,
        /// The numeric keys the rows have.
        accepted: String,
    },
    /// A cell's run failed; the message says which cell and why.
    #[error("cell {cell}: {source}")]
    Cell {
        /// The cell's number.
        cell: u64,
        /// Why it failed.
        source: ScenarioError,
    },
}

/// Simulates every cell of `grid`'s shard on the current rayon pool and counts. `progress` is
/// told how many cells each finished chunk held, from any thread, in no particular order.
pub fn summarize(grid: &Grid, progress: &(dyn Fn(u64) + Sync)) -> Result<Summary, SweepError> {
    summarize_split(grid, progress, &|| false, SPLIT)
}

/// [`summarize`], skipping every cell not started when `stop` says so (a signal asked the
/// command to stop): the counts of the cells simulated so far (`Summary::cells` of them, not
/// in cell order), so that an interrupted sweep prints what it has.
pub fn summarize_until(
    grid: &Grid,
    progress: &(dyn Fn(u64) + Sync),
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Summary, SweepError> {
    summarize_split(grid, progress, stop, SPLIT)
}

fn summarize_split(
    grid: &Grid,
    progress: &(dyn Fn(u64) + Sync),
    stop: &(dyn Fn() -> bool + Sync),
    split: Split,
) -> Result<Summary, SweepError> {
    (0..grid.chunks(split))
        .into_par_iter()
        .map(|k| {
            let cells = grid.chunk(k, split);
            let mut s = Summary::default();
            for (i, cell) in grid.walk(cells.clone()) {
                // Between two cells: a cell of a long duration runs for seconds in a debug build.
                if stop() {
                    break;
                }
                let cell_err = |source| SweepError::Cell { cell: i, source };
                s.cells += 1;
                if grid.spec.runs > 1 {
                    let r = grid.monte_carlo_row(i).map_err(cell_err)?;
                    let over = matches!(r.get("p_overshoot"), Some(Value::F64(p)) if *p > 0.0);
                    s.overshooting += u64::from(over);
                    s.mismatched += u64::from(r.get("lesson_match") == Some(&Value::Bool(false)));
                    s.prediction_mismatched +=
                        u64::from(r.get("prediction_match") == Some(&Value::Bool(false)));
                } else if let Some(o) = grid.lesson_cell_outcome(&cell) {
                    // The counts need neither the seed nor the row's other columns.
                    s.mismatched += u64::from(!o.lesson_match());
                    s.overshooting += u64::from(o.metrics.overshoot > 0);
                    s.prediction_mismatched += u64::from(!o.prediction_match());
                } else {
                    let row = grid.cell_row(i, cell).map_err(cell_err)?;
                    s.mismatched += u64::from(row.lesson_match == Some(false));
                    s.overshooting += u64::from(row.metrics.overshoot > 0);
                    s.prediction_mismatched += u64::from(row.prediction_match == Some(false));
                }
            }
            progress(s.cells);
            Ok(s)
        })
        .try_reduce(Summary::default, |a, b| Ok(a.add(b)))
}

/// Simulates every cell of `grid`'s shard on the current rayon pool and writes one row per cell
/// to `out`, in cell order, preceded by the header for CSV. The bytes written do not depend on
/// the number of threads. At most a few tens of thousands of rows are held in memory at once:
/// the next block of chunks is computed while the previous one is written. `progress` is told
/// how many cells each finished chunk held.
pub fn write_rows<W: Write + Send>(
    grid: &Grid,
    format: RowFormat,
    out: &mut W,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), SweepError> {
    write_rows_split(grid, format, out, progress, SPLIT)
}

fn write_rows_split<W: Write + Send>(
    grid: &Grid,
    format: RowFormat,
    out: &mut W,
    progress: &(dyn Fn(u64) + Sync),
    split: Split,
) -> Result<(), SweepError> {
    if format == RowFormat::Csv {
        writeln!(out, "{}", grid.csv_header())?;
    }
    let format_block = |block: u64| -> Result<Vec<String>, SweepError> {
        let first = block * split.chunks_per_block;
        let last = (first + split.chunks_per_block).min(grid.chunks(split));
        (first..last)
            .into_par_iter()
            .map(|k| {
                let cells = grid.chunk(k, split);
                let mut text = String::with_capacity(200 * (cells.end - cells.start) as usize);
                for (i, cell) in grid.walk(cells.clone()) {
                    grid.write_cell_row(i, cell, format, &mut text)
                        .map_err(|source| SweepError::Cell { cell: i, source })?;
                }
                progress(cells.end - cells.start);
                Ok(text)
            })
            .collect()
    };
    let blocks = grid.chunks(split).div_ceil(split.chunks_per_block);
    let mut done: Vec<String> = Vec::new();
    for block in 0..blocks {
        let (written, next) = rayon::join(|| write_all(out, &done), || format_block(block));
        written?;
        done = next?;
    }
    write_all(out, &done)?;
    out.flush()?;
    Ok(())
}

/// One numeric column of every row of `grid`'s shard, in cell order: what colours a heatmap
/// (`setpoint plot heatmap --colour`). `key` is any numeric key of the grid's rows
/// (`docs/output.md`): `overshoot` of a single-run grid, or `p_overshoot`, `overshoot_p95`,
/// `created_mean`, … of a Monte Carlo grid. A `null` cell is `None`.
pub fn column(grid: &Grid, key: &str) -> Result<Vec<Option<f64>>, SweepError> {
    let record = |i: u64| -> Result<Record, SweepError> {
        let cell_err = |source| SweepError::Cell { cell: i, source };
        if grid.spec.runs > 1 {
            grid.monte_carlo_row(i).map_err(cell_err)
        } else {
            Ok(grid.row(i).map_err(cell_err)?.record())
        }
    };
    let range = grid.range();
    if range.is_empty() {
        return Ok(Vec::new());
    }
    let first = record(range.start)?;
    if !matches!(
        first.get(key),
        Some(Value::U64(_) | Value::I64(_) | Value::F64(_) | Value::Null)
    ) {
        let numeric: Vec<&str> = first
            .fields
            .iter()
            .filter(|(_, v)| matches!(v, Value::U64(_) | Value::I64(_) | Value::F64(_)))
            .map(|(k, _)| k.as_ref())
            .filter(|k| !matches!(*k, "schema" | "cell" | "seed" | "first_seed"))
            .collect();
        return Err(SweepError::NoColumn {
            key: key.to_owned(),
            accepted: numeric.join(", "),
        });
    }
    range
        .into_par_iter()
        .map(|i| {
            Ok(match record(i)?.get(key) {
                Some(Value::U64(v)) => Some(*v as f64),
                Some(Value::I64(v)) => Some(*v as f64),
                Some(Value::F64(v)) => Some(*v),
                _ => None,
            })
        })
        .collect()
}

fn write_all<W: Write>(out: &mut W, texts: &[String]) -> io::Result<()> {
    texts
        .iter()
        .try_for_each(|text| out.write_all(text.as_bytes()))
}

impl Grid {
    /// The cell numbers of chunk `k` of this shard.
    fn chunk(&self, k: u64, split: Split) -> Range<u64> {
        let start = self.range.start + k * split.chunk_cells;
        start..(start + split.chunk_cells).min(self.range.end)
    }

    fn chunks(&self, split: Split) -> u64 {
        (self.range.end - self.range.start).div_ceil(split.chunk_cells)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lesson_world::Limit;
    use crate::sweep::testing::{axis, grid};
    use crate::sweep::{parse_delay_models, Axis, CellDelay, GridSpec, Shard, SweepRow};
    use setpoint_core::ControllerKind::{self, Intent, Ledger};

    #[test]
    fn monte_carlo_rows_are_the_same_alone_in_a_grid_and_on_any_thread_count() {
        let spec = GridSpec {
            delay_models: parse_delay_models("lesson-chain,uniform:0:40").unwrap(),
            period: axis(Limit::PERIOD, "15,30"),
            controller: vec![Ledger, ControllerKind::Named],
            runs: 8,
            seed: 3,
            ..GridSpec::default()
        };
        let g = Grid::new(spec.clone()).unwrap();
        let one = rows_on(1, &g, RowFormat::Jsonl, SMALL);
        assert_eq!(one, rows_on(2, &g, RowFormat::Jsonl, SMALL));
        let lines: Vec<&str> = std::str::from_utf8(&one).unwrap().lines().collect();
        let cell = g.cell(5);
        let CellDelay::Model(k) = cell.delay_of else {
            unreachable!()
        };
        let alone = Grid::new(GridSpec {
            delay_models: vec![spec.delay_models[k].clone()],
            period: Axis::single(cell.period),
            controller: vec![cell.controller],
            ..spec
        })
        .unwrap();
        let alone_row = alone.monte_carlo_row(0).unwrap().json();
        // The same numbers; only the cell's number differs.
        assert_eq!(
            alone_row.replacen("\"cell\":0,", "\"cell\":5,", 1),
            lines[5]
        );
        let spread = |line: &str, key: &str| -> f64 {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            v[key].as_f64().unwrap()
        };
        assert!(
            lines
                .iter()
                .any(|l| spread(l, "created_max") > spread(l, "created_p50")),
            "random delays spread the runs"
        );
    }

    #[test]
    fn sharded_rows_concatenated_are_the_whole_sweep() {
        let spec = GridSpec {
            delay: axis(Limit::DELAY, "0..=40:10"),
            period: axis(Limit::PERIOD, "5..=35:10"),
            controller: vec![Ledger, Intent, ControllerKind::Gated],
            ..GridSpec::default()
        };
        let whole = rows_on(
            2,
            &Grid::new(spec.clone()).unwrap(),
            RowFormat::Jsonl,
            SMALL,
        );
        let mut joined = Vec::new();
        for index in 0..4 {
            let g = Grid::new(GridSpec {
                shard: Shard { index, count: 4 },
                ..spec.clone()
            })
            .unwrap();
            joined.extend(rows_on(1, &g, RowFormat::Jsonl, SMALL));
        }
        assert_eq!(joined, whole);
    }

    #[test]
    fn a_column_reads_one_key_of_every_row_and_refuses_unknown_keys() {
        let g = grid("0..=60:30", "10,30", "5");
        let over = column(&g, "overshoot").unwrap();
        let rows: Vec<Option<f64>> = (0..g.cells())
            .map(|i| Some(g.row(i).unwrap().metrics.overshoot as f64))
            .collect();
        assert_eq!(over, rows);
        let err = column(&g, "p_overshoot").unwrap_err().to_string();
        assert!(err.contains("accepted: desired, period,"), "{err}");
        let mc = Grid::new(GridSpec {
            runs: 5,
            ..g.spec().clone()
        })
        .unwrap();
        let p = column(&mc, "p_overshoot").unwrap();
        for (p, o) in p.iter().zip(&over) {
            assert_eq!(*p, Some(if o.unwrap() > 0.0 { 1.0 } else { 0.0 }));
        }
    }

    fn rows_on(threads: usize, g: &Grid, format: RowFormat, split: Split) -> Vec<u8> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut out = Vec::new();
        pool.install(|| write_rows_split(g, format, &mut out, &|_| {}, split))
            .unwrap();
        out
    }

    /// Odd sizes, so that chunks and blocks end in the middle of every axis.
    const SMALL: Split = Split {
        chunk_cells: 7,
        chunks_per_block: 3,
    };

    #[test]
    fn rows_are_identical_on_one_thread_and_on_three_and_in_cell_order() {
        let g = grid("0..=199:13", "1..=100:17", "0..=49:9");
        assert!(g.cells() > 10 * SMALL.chunk_cells * SMALL.chunks_per_block);
        for format in [RowFormat::Csv, RowFormat::Jsonl] {
            let one = rows_on(1, &g, format, SMALL);
            assert_eq!(one, rows_on(3, &g, format, SMALL), "{format:?}");
            assert_eq!(one, rows_on(2, &g, format, SPLIT), "{format:?}");
            let mut expected = String::new();
            if format == RowFormat::Csv {
                expected.push_str(&SweepRow::csv_header());
                expected.push('\n');
            }
            for i in 0..g.cells() {
                g.row(i).unwrap().write_to(format, &mut expected);
            }
            assert_eq!(String::from_utf8(one).unwrap(), expected, "{format:?}");
        }
    }

    #[test]
    fn summary_counts_agree_with_the_rows_on_any_thread_count() {
        let g = grid("0..=90:10", "1..=60:4", "0..=10:5");
        let rows: Vec<SweepRow> = (0..g.cells()).map(|i| g.row(i).unwrap()).collect();
        let expected = Summary {
            cells: g.cells(),
            mismatched: rows
                .iter()
                .filter(|r| r.lesson_match == Some(false))
                .count() as u64,
            overshooting: rows.iter().filter(|r| r.metrics.overshoot > 0).count() as u64,
            prediction_mismatched: rows
                .iter()
                .filter(|r| r.prediction_match == Some(false))
                .count() as u64,
        };
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let seen = std::sync::atomic::AtomicU64::new(0);
            let got = pool.install(|| {
                summarize_split(
                    &g,
                    &|n| {
                        seen.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                    },
                    &|| false,
                    SMALL,
                )
            });
            assert_eq!(got.unwrap(), expected, "{threads} threads");
            assert_eq!(seen.into_inner(), g.cells(), "progress covers every cell");
        }
    }

    #[test]
    fn the_lesson_grid_swept_mismatches_nowhere() {
        let g = Grid::new(GridSpec {
            delay: axis(Limit::DELAY, "0,10,20,30,45,60,90"),
            period: axis(Limit::PERIOD, "5,10,15,20,30,45,60,90"),
            ..GridSpec::default()
        })
        .unwrap();
        let s = summarize(&g, &|_| {}).unwrap();
        assert_eq!((s.cells, s.mismatched), (56, 0));
    }

    #[test]
    fn a_summary_stopped_counts_only_the_cells_it_ran() {
        let g = Grid::new(GridSpec {
            delay: axis(Limit::DELAY, "0..=99"),
            period: axis(Limit::PERIOD, "1..=50"),
            ..GridSpec::default()
        })
        .unwrap();
        let asked = std::sync::atomic::AtomicU64::new(0);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let s = pool
            .install(|| {
                summarize_split(
                    &g,
                    &|_| {},
                    &|| asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= 10,
                    SMALL,
                )
            })
            .unwrap();
        assert_eq!(s.cells, 10, "ten cells ran, then it stopped");
        assert_eq!(summarize_until(&g, &|_| {}, &|| true).unwrap().cells, 0);
    }
}
