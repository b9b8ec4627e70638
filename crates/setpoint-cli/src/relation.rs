//! `setpoint relation`: the lesson's overshoot table for any grid, and with `--boundary` the scan
//! of where the lesson's relation holds, where it fails, and how the exact predictor does.

use clap::{Args, ValueEnum};
use serde::Serialize;
use setpoint_sim::boundary::{scan_grid, BoundaryReport};
use setpoint_sim::lesson::{RelationGrid, RelationScan};
use setpoint_sim::{parse_deaths, Axis, Death, Grid, GridSpec, LessonSpec, Limit};

use setpoint_sim::output::{self, Record};

use crate::sweep::{
    axis, controllers, delay_axis, desired_axis, period_axis, progress_bar, startup_axis,
    ControllerList,
};
use crate::BadInput;

/// `setpoint relation`.
#[derive(Debug, Args)]
#[command(
    after_help = "Each number flag takes a list like 0,5,10, an inclusive range like \
0..=120, or a stepped range like 0..=120:5 (the grid flags of 'setpoint sweep'). Without \
--boundary, --desired, --startup, --controller, --duration and --deaths take one value each."
)]
pub struct RelationArgs {
    /// Report delays G to scan (rows), in seconds.
    #[arg(short = 'G', long = "delay", alias = "delays", default_value = "0,10,20,30,45,60,90",
          value_name = "GRID", value_parser = delay_axis, allow_hyphen_values = true)]
    pub delays: Axis,
    /// Loop periods U to scan (columns), in seconds.
    #[arg(short = 'U', long = "period", alias = "periods", default_value = "5,10,15,20,30,45,60,90",
          value_name = "GRID", value_parser = period_axis, allow_hyphen_values = true)]
    pub periods: Axis,
    /// Declared copies.
    #[arg(long, default_value = "6", value_name = "GRID", value_parser = desired_axis, allow_hyphen_values = true)]
    pub desired: Axis,
    /// Startup time B, in seconds.
    #[arg(short = 'B', long, default_value = "5", value_name = "GRID", value_parser = startup_axis, allow_hyphen_values = true)]
    pub startup: Axis,
    /// Controllers: a list of ledger, intent.
    #[arg(long, default_value = "ledger", value_name = "LIST", value_parser = controllers)]
    pub controller: ControllerList,
    /// The last second of each run.
    #[arg(long, default_value = "900", value_name = "GRID", value_parser = duration_axis, allow_hyphen_values = true)]
    pub duration: Axis,
    /// Scripted deaths, AT:COUNT[,AT:COUNT...] or none; with --boundary, several sets separated by ';'.
    #[arg(long, default_value = "300:2", value_name = "SETS", value_parser = death_sets, allow_hyphen_values = true)]
    pub deaths: DeathSets,
    /// Scan the whole grid and report where the lesson's relation holds and fails, region by
    /// region, and the exact predictor's mismatches.
    #[arg(long)]
    pub boundary: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: RelationFormat,
}

/// Output formats of `relation`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum RelationFormat {
    /// Text tables.
    Table,
    /// One JSON object.
    Json,
    /// One record per cell (`docs/output.md`): the shared settings, then G, U, the measured
    /// overshoot and the lesson's prediction. Not with --boundary, whose report is not a table
    /// of cells.
    Csv,
}

/// Parsed `--deaths` sets. A newtype, so that clap takes the whole text as one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeathSets(pub Vec<Vec<Death>>);

fn duration_axis(s: &str) -> Result<Axis, String> {
    axis(Limit::DURATION, s)
}
fn death_sets(s: &str) -> Result<DeathSets, String> {
    s.split(';')
        .map(|set| parse_deaths(set).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()
        .map(DeathSets)
}

/// The most values a table-mode axis may expand to; the tables are for reading.
const MAX_TABLE_AXIS: u64 = 10_000;

fn one<T: Clone>(flag: &str, values: &[T]) -> Result<T, BadInput> {
    match values {
        [v] => Ok(v.clone()),
        _ => Err(BadInput(format!(
            "{flag} takes one value without --boundary, got {}; accepted: one value, or add --boundary to scan a grid",
            values.len()
        ))),
    }
}

fn one_value(flag: &str, axis: &Axis) -> Result<u64, BadInput> {
    if axis.len() == 1 {
        Ok(axis.get(0))
    } else {
        Err(BadInput(format!(
            "{flag} takes one value without --boundary, got {}; accepted: one value, or add --boundary to scan a grid",
            axis.len()
        )))
    }
}

fn short_list(flag: &str, axis: &Axis) -> Result<Vec<u64>, BadInput> {
    if axis.len() > MAX_TABLE_AXIS {
        return Err(BadInput(format!(
            "{flag} has {} values, too many for a table: accepted at most {MAX_TABLE_AXIS}; use --boundary for counts",
            axis.len()
        )));
    }
    Ok(axis.values().collect())
}

/// Runs `relation` and returns what it prints.
pub fn run(args: &RelationArgs) -> anyhow::Result<String> {
    if args.boundary {
        return boundary(args);
    }
    let base = LessonSpec {
        desired: one_value("--desired", &args.desired)?,
        startup: one_value("--startup", &args.startup)?,
        duration: one_value("--duration", &args.duration)?,
        deaths: one("--deaths", &args.deaths.0)?,
        controller: one("--controller", &args.controller.0)?,
        ..LessonSpec::default()
    };
    let grid = RelationGrid {
        base: base.clone(),
        delays: short_list("--delay", &args.delays)?,
        periods: short_list("--period", &args.periods)?,
    };
    let scan = RelationScan::try_run(&grid)?;
    let predicted = scan
        .cells
        .iter()
        .filter(|c| {
            let spec = LessonSpec {
                delay: c.delay,
                period: c.period,
                ..base.clone()
            };
            setpoint_sim::predict::predict(&spec).overshoot == c.overshoot
        })
        .count();
    Ok(match args.format {
        RelationFormat::Csv => {
            let records: Vec<Record> = scan
                .cells
                .iter()
                .map(|c| {
                    let mut r = Record::new();
                    r.push("desired", base.desired);
                    r.push("startup", base.startup);
                    r.push("duration", base.duration);
                    r.push("controller", base.controller.name());
                    r.push("delay", c.delay);
                    r.push("period", c.period);
                    r.push("overshoot", c.overshoot);
                    r.push("lesson_prediction", c.lesson_prediction as i64);
                    r.push("lesson_match", c.lesson_match);
                    r
                })
                .collect();
            output::print(&records, output::Format::Csv, &[])
        }
        RelationFormat::Json => crate::output::json_with_schema(&RelationJson {
                desired: base.desired,
                startup: base.startup,
                duration: base.duration,
                controller: base.controller.name(),
                cells: &scan.cells,
                cell_count: scan.cells.len(),
                mismatched: scan.mismatched(),
                prediction_mismatched: scan.cells.len() - predicted,
            })?,
        RelationFormat::Table => format!(
            "measured overshoot (row: report delay G, column: loop period U); desired {}, B={} sec, {} sec run, controller {}\n{}\nlesson's prediction: desired x (ceil((G+B)/U) - 1)\n{}\nrelation: overshoot = desired x (ceil((G+B)/U) - 1); {} cells, {} mismatched\nexact predictor (docs/relation.md): {} cells, {} mismatched\n",
            base.desired,
            base.startup,
            base.duration,
            base.controller,
            scan.overshoot_table(5),
            scan.prediction_table(5),
            scan.cells.len(),
            scan.mismatched(),
            scan.cells.len(),
            scan.cells.len() - predicted,
        ),
    })
}

/// The JSON form of a relation table.
#[derive(Serialize)]
struct RelationJson<'a> {
    desired: u64,
    startup: u64,
    duration: u64,
    controller: &'a str,
    cells: &'a [setpoint_sim::lesson::RelationCell],
    cell_count: usize,
    mismatched: usize,
    prediction_mismatched: usize,
}

/// Every (duration, deaths) combination is one sweep grid; their reports add up.
fn boundary(args: &RelationArgs) -> anyhow::Result<String> {
    if let Some(kind) = args.controller.0.iter().find(|k| !k.is_lesson()) {
        return Err(crate::BadInput(format!(
            "--boundary: controller '{kind}': the lesson's relation is defined for ledger and intent only; `setpoint sweep --controller {kind}` measures the others"
        ))
        .into());
    }
    let mut grids = Vec::new();
    let mut total: u128 = 0;
    for duration in args.duration.values() {
        for deaths in &args.deaths.0 {
            let grid = Grid::new(GridSpec {
                desired: args.desired.clone(),
                period: args.periods.clone(),
                delay: args.delays.clone(),
                startup: args.startup.clone(),
                controller: args.controller.0.clone(),
                duration,
                deaths: deaths.clone(),
                ..GridSpec::default()
            })?;
            total += u128::from(grid.cells());
            if total > u128::from(setpoint_sim::sweep::MAX_CELLS) {
                return Err(setpoint_sim::GridError::TooLarge {
                    cells: total,
                    max: setpoint_sim::sweep::MAX_CELLS,
                }
                .into());
            }
            grids.push(grid);
        }
    }
    let bar = progress_bar("boundary", total as u64);
    let tick = |n: u64| bar.inc(n);
    let report = grids
        .iter()
        .map(|g| scan_grid(g, &tick))
        .fold(BoundaryReport::default(), BoundaryReport::merge);
    bar.finish_and_clear();
    Ok(match args.format {
        RelationFormat::Csv => {
            return Err(crate::BadInput(
                "--format csv: the boundary report is not a table of cells; accepted with --boundary: table, json".into(),
            )
            .into())
        }
        RelationFormat::Table => report.to_text(),
        RelationFormat::Json => crate::output::json_with_schema(&report)?,
    })
}
