//! The lab's one output schema (`docs/output.md`): every data-printing command prints flat
//! records, one per workload (or per sweep cell), whose keys and column order depend only on the
//! kind of record, never on the controller, the engine or the seed.
//!
//! A [`Record`] is an ordered list of keys and [`Value`]s. Its JSON form is one object on one
//! line; its CSV form is a header of the keys and one row of the values; its table form lines the
//! values up under the keys. A metric that does not apply to a run (the name counts of a
//! controller that names no copy, the lesson's relation on a cell outside the lesson's world) is
//! [`Value::Null`]: `null` in JSON, an empty cell in CSV, `-` in a table.
//!
//! Kinds of record, each starting with `schema` ([`SCHEMA`]):
//! - [`run_records`]: one run, one record per workload;
//! - [`monte_carlo_records`]: many seeds of one scenario, one record per workload, every metric
//!   as `_mean`, `_p50`, `_p95` and `_max`, plus `p_overshoot`, `never_stable`, `runs` and
//!   `first_seed`;
//! - sweep rows ([`crate::sweep`]): the same metric columns after the cell's coordinates.

use std::borrow::Cow;
use std::fmt::Write as _;

use setpoint_core::ControllerKind;

use crate::montecarlo::{Summary, METRICS};
use crate::report::describe;
use crate::scenario::{Outcome, Scenario, WorkloadMetrics};

/// The version of the schema, the first key of every record. It changes when a key is renamed,
/// removed or moved; adding a kind of record does not change it.
pub const SCHEMA: u64 = 2;

/// The largest integer every double-precision JSON reader keeps exactly, 2^53 − 1. JSON writes a
/// larger one as a string of its digits (docs/output.md, "Numbers").
pub const MAX_EXACT: u64 = (1 << 53) - 1;

/// Serializes an integer as JSON the way every record does: a number up to [`MAX_EXACT`], a
/// string of its digits above it. For `#[serde(serialize_with)]` on fields that can be that
/// large (a store's lease ids).
pub fn serialize_exact<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    if *v > MAX_EXACT {
        s.serialize_str(&v.to_string())
    } else {
        s.serialize_u64(*v)
    }
}

/// One value of a record.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// No value: the metric does not apply, or there is none (a run never stable).
    Null,
    /// A count or a second.
    U64(u64),
    /// A signed count (`unneeded`, the lesson's prediction).
    I64(i64),
    /// A ratio or a mean.
    F64(f64),
    /// A yes/no column.
    Bool(bool),
    /// A name or a description.
    Str(String),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::U64(v)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::I64(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::F64(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.to_owned())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

impl Value {
    /// Appends the value as JSON.
    pub fn write_json(&self, out: &mut String) {
        match self {
            Value::Null => out.push_str("null"),
            // Past 2^53 a double-precision reader (JavaScript, pandas) would change the
            // digits of a sweep cell's seed or an etcd lease id: such a number is a string.
            Value::U64(v) if *v > MAX_EXACT => {
                let _ = write!(out, "\"{v}\"");
            }
            Value::U64(v) => {
                let _ = write!(out, "{v}");
            }
            Value::I64(v) if v.unsigned_abs() > MAX_EXACT => {
                let _ = write!(out, "\"{v}\"");
            }
            Value::I64(v) => {
                let _ = write!(out, "{v}");
            }
            Value::F64(v) => out.push_str(&serde_json::to_string(v).expect("a float serializes")),
            Value::Bool(v) => {
                let _ = write!(out, "{v}");
            }
            Value::Str(s) => out.push_str(&serde_json::to_string(s).expect("a string serializes")),
        }
    }

    /// Appends the value as one CSV cell: empty for `Null`, the shortest text that reads back
    /// as the same double for a float, and a quoted string when it holds a comma, a quote or a
    /// line break (RFC 4180).
    pub fn write_csv(&self, out: &mut String) {
        match self {
            Value::Null => {}
            Value::Str(s) if s.contains([',', '"', '\n', '\r']) => {
                out.push('"');
                out.push_str(&s.replace('"', "\"\""));
                out.push('"');
            }
            Value::Str(s) => out.push_str(s),
            other => out.push_str(&other.text()),
        }
    }

    /// The value as a table cell: `-` for `Null`, two decimals for a float.
    pub fn table(&self) -> String {
        match self {
            Value::Null => "-".into(),
            Value::F64(v) => crate::format::js_to_fixed2(*v),
            other => other.text(),
        }
    }

    fn text(&self) -> String {
        match self {
            Value::Null => String::new(),
            Value::U64(v) => v.to_string(),
            Value::I64(v) => v.to_string(),
            Value::F64(v) => v.to_string(),
            Value::Bool(v) => v.to_string(),
            Value::Str(s) => s.clone(),
        }
    }
}

/// One flat record: keys and values, in output order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Record {
    /// The keys and their values, in order.
    pub fields: Vec<(Cow<'static, str>, Value)>,
}

impl Record {
    /// A record that starts with `schema`.
    pub fn new() -> Self {
        let mut r = Record { fields: Vec::new() };
        r.push("schema", SCHEMA);
        r
    }

    /// Appends a key and its value.
    pub fn push(&mut self, key: impl Into<Cow<'static, str>>, value: impl Into<Value>) {
        self.fields.push((key.into(), value.into()));
    }

    /// The value of `key`, if the record has it.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The record as one JSON object on one line, without a newline.
    pub fn json(&self) -> String {
        let mut out = String::from("{");
        for (i, (k, v)) in self.fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&serde_json::to_string(k.as_ref()).expect("a key serializes"));
            out.push(':');
            v.write_json(&mut out);
        }
        out.push('}');
        out
    }

    /// The CSV header: the keys, without a newline.
    pub fn csv_header(&self) -> String {
        self.fields
            .iter()
            .map(|(k, _)| k.as_ref())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The CSV row: the values, without a newline.
    pub fn csv_row(&self) -> String {
        let mut out = String::new();
        for (i, (_, v)) in self.fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            v.write_csv(&mut out);
        }
        out
    }
}

/// How records are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Columns lined up under their keys, for people.
    Table,
    /// One JSON object per line.
    Json,
    /// A header line, then one line per record.
    Csv,
}

/// Prints `records` (all of one kind) in `format`, each line ending in a newline. A table leaves
/// out `schema` and the keys in `table_skip`, which the caller prints above it.
pub fn print(records: &[Record], format: Format, table_skip: &[&str]) -> String {
    let mut out = String::new();
    match format {
        Format::Json => {
            for r in records {
                out.push_str(&r.json());
                out.push('\n');
            }
        }
        Format::Csv => {
            if let Some(first) = records.first() {
                out.push_str(&first.csv_header());
                out.push('\n');
            }
            for r in records {
                out.push_str(&r.csv_row());
                out.push('\n');
            }
        }
        Format::Table => {
            let Some(first) = records.first() else {
                return out;
            };
            // The rolling update's keys are left out of a table whose every record has them
            // null: a run with no `update` event reads as it did before they existed.
            let all_null = |i: usize| records.iter().all(|r| r.fields[i].1 == Value::Null);
            let keep: Vec<usize> = (0..first.fields.len())
                // The schema version is for programs: a table for people leaves it out.
                .filter(|&i| first.fields[i].0 != "schema")
                .filter(|&i| !table_skip.contains(&first.fields[i].0.as_ref()))
                .filter(|&i| !(ROLLOUT_KEYS.contains(&first.fields[i].0.as_ref()) && all_null(i)))
                .collect();
            let header: Vec<String> = keep
                .iter()
                .map(|&i| first.fields[i].0.to_string())
                .collect();
            let rows: Vec<Vec<String>> = records
                .iter()
                .map(|r| keep.iter().map(|&i| r.fields[i].1.table()).collect())
                .collect();
            out.push_str(&columns(&header, &rows));
        }
    }
    out
}

/// Right-aligned columns under their headers, the first column left-aligned, one space apart.
pub fn columns(header: &[String], rows: &[Vec<String>]) -> String {
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
                let _ = write!(out, "{cell:<w$}");
            } else {
                let _ = write!(out, " {cell:>w$}");
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(header);
    for r in rows {
        out.push_str(&line(r));
    }
    out
}

/// A CSV text whose cells hold no comma (a sweep's rows) as a table: columns lined up under the
/// header, empty cells shown as `-`.
pub fn table_from_csv(csv: &str) -> String {
    let mut lines = csv.lines();
    let Some(header) = lines.next() else {
        return String::new();
    };
    // The schema version is for programs; a table leaves it out.
    let skip = usize::from(header.starts_with("schema,"));
    let header: Vec<String> = header.split(',').skip(skip).map(str::to_owned).collect();
    let rows: Vec<Vec<String>> = lines
        .map(|l| {
            l.split(',')
                .skip(skip)
                .map(|c| {
                    if c.is_empty() {
                        "-".into()
                    } else if c.contains('.') && c.parse::<f64>().is_ok() {
                        // Two decimals, as every table has them; CSV keeps every digit.
                        crate::format::js_to_fixed2(c.parse().expect("checked"))
                    } else {
                        c.to_owned()
                    }
                })
                .collect()
        })
        .collect();
    columns(&header, &rows)
}

/// Whether the name counts (`duplicate_names`, `absorbed_creates`) apply: only a controller that
/// names its copies can run two under one name or have a creation absorbed.
pub fn names_apply(kind: ControllerKind) -> bool {
    kind == ControllerKind::Named
}

/// The metric keys of a run record, in order: the lesson's eight, then the lab's, then the
/// rolling update's (`null` in a run with no `update` event).
pub const METRIC_KEYS: [&str; 20] = [
    "rounds",
    "work_per_round",
    "created",
    "unneeded",
    "delete_commands",
    "deleted",
    "overshoot",
    "stable",
    "died",
    "peak_live",
    "copy_seconds_above",
    "duplicate_names",
    "absorbed_creates",
    "lost_deletes",
    "surge_budget",
    "surge",
    "surge_copy_seconds",
    "rollout_overshoot",
    "rollout_done",
    "rollout_stalled",
];

/// The rolling update's keys of [`METRIC_KEYS`]: `null` in a run with no `update` event, and
/// then left out of a table ([`print()`]), never out of JSON or CSV.
pub const ROLLOUT_KEYS: [&str; 6] = [
    "surge_budget",
    "surge",
    "surge_copy_seconds",
    "rollout_overshoot",
    "rollout_done",
    "rollout_stalled",
];

/// Appends the metrics of one workload, in the order of [`METRIC_KEYS`].
pub fn push_metrics(r: &mut Record, w: &WorkloadMetrics, kind: ControllerKind) {
    let names = names_apply(kind);
    push_lesson_metrics(r, &w.metrics);
    r.push("duplicate_names", names.then_some(w.duplicate_names));
    r.push("absorbed_creates", names.then_some(w.absorbed_creates));
    r.push("lost_deletes", w.lost_deletes);
    let u = &w.rollout;
    r.push("surge_budget", u.surge_budget);
    r.push("surge", u.surge);
    r.push("surge_copy_seconds", u.surge_copy_seconds);
    r.push("rollout_overshoot", u.rollout_overshoot);
    r.push("rollout_done", u.rollout_done);
    r.push("rollout_stalled", u.rollout_stalled);
}

/// Appends the lesson's eight metrics and the lab's three (`rounds` … `copy_seconds_above`).
pub fn push_lesson_metrics(r: &mut Record, m: &crate::Metrics) {
    r.push("rounds", m.rounds);
    r.push("work_per_round", m.work_per_round);
    r.push("created", m.created);
    r.push("unneeded", m.unneeded);
    r.push("delete_commands", m.delete_commands);
    r.push("deleted", m.deleted);
    r.push("overshoot", m.overshoot);
    r.push("stable", m.stable);
    r.push("died", m.died);
    r.push("peak_live", m.peak_live);
    r.push("copy_seconds_above", m.copy_seconds_above);
}

/// The records of one run: one per workload, with `scenario` (the label: a file name or
/// `(command line)`), `setup` ([`describe`]), `seed` (the scenario's seed, whether or not the run
/// drew a random number), `engine` and `workload` before the metrics.
pub fn run_records(label: &str, scenario: &Scenario, outcome: &Outcome) -> Vec<Record> {
    let setup = describe(scenario);
    let kind = scenario.spec().controller.kind;
    outcome
        .workloads
        .iter()
        .map(|w| {
            let mut r = Record::new();
            r.push("scenario", label);
            r.push("setup", setup.clone());
            r.push("seed", scenario.spec().seed);
            r.push("engine", outcome.engine);
            r.push("workload", w.workload.as_str());
            push_metrics(&mut r, w, kind);
            r
        })
        .collect()
}

/// Appends the distribution of every metric of [`METRICS`] (`_mean`, `_p50`, `_p95`, `_max`),
/// then `p_overshoot` and `never_stable`, for workload `w` of `summary`.
pub fn push_spreads(r: &mut Record, summary: &Summary, w: usize, kind: ControllerKind) {
    let spread = &summary.workloads[w];
    for (m, (name, _)) in spread.metrics.iter().zip(METRICS) {
        let applies = names_apply(kind) || !matches!(name, "duplicate_names" | "absorbed_creates");
        let s = m.spread.filter(|_| applies);
        r.push(format!("{name}_mean"), s.map(|s| s.mean));
        r.push(format!("{name}_p50"), s.map(|s| s.p50));
        r.push(format!("{name}_p95"), s.map(|s| s.p95));
        r.push(format!("{name}_max"), s.map(|s| s.max));
    }
    r.push("p_overshoot", spread.p_overshoot);
    r.push("never_stable", spread.never_stable);
}

/// The records of a Monte Carlo summary: one per workload, with the run's metadata, `runs` and
/// `first_seed` (run `i` used `first_seed + i`), then every metric's distribution.
pub fn monte_carlo_records(label: &str, scenario: &Scenario, summary: &Summary) -> Vec<Record> {
    let setup = describe(scenario);
    let kind = scenario.spec().controller.kind;
    (0..summary.workloads.len())
        .map(|w| {
            let mut r = Record::new();
            r.push("scenario", label);
            r.push("setup", setup.clone());
            r.push("runs", summary.runs);
            r.push("first_seed", summary.first_seed);
            r.push("engine", summary.engine);
            r.push("workload", summary.workloads[w].workload.as_str());
            push_spreads(&mut r, summary, w, kind);
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delay::DelayModel;
    use crate::montecarlo::monte_carlo;
    use crate::scenario::{run, ControllerSpec, ScenarioSpec};

    fn scenario(kind: ControllerKind, delay: DelayModel) -> Scenario {
        Scenario::new(ScenarioSpec {
            controller: ControllerSpec::new(kind),
            delay,
            ..ScenarioSpec::default()
        })
        .unwrap()
    }

    fn keys(r: &Record) -> Vec<String> {
        r.fields.iter().map(|(k, _)| k.to_string()).collect()
    }

    #[test]
    fn every_controller_and_engine_prints_the_same_keys_in_the_same_order() {
        let mut seen = Vec::new();
        for kind in ControllerKind::ALL {
            for delay in [DelayModel::fixed_seconds(20), DelayModel::lesson_chain()] {
                let s = scenario(kind, delay);
                let records = run_records("x", &s, &run(&s, 3).unwrap());
                seen.push((keys(&records[0]), records[0].get("engine").cloned()));
            }
        }
        assert!(seen.iter().any(|(_, e)| e == &Some(Value::from("fast"))));
        assert!(seen.iter().any(|(_, e)| e == &Some(Value::from("general"))));
        assert!(seen.iter().all(|(k, _)| k == &seen[0].0), "{seen:?}");
    }

    #[test]
    fn the_rollout_keys_end_the_metric_keys_and_a_run_without_update_leaves_them_null() {
        assert!(METRIC_KEYS.ends_with(&ROLLOUT_KEYS));
        let s = scenario(ControllerKind::Intent, DelayModel::Fixed(0));
        let records = run_records("x", &s, &run(&s, 1).unwrap());
        for k in ROLLOUT_KEYS {
            assert_eq!(records[0].get(k), Some(&Value::Null), "{k}");
        }
        let table = print(&records, Format::Table, &[]);
        assert!(!table.contains("surge"), "{table}");
        let csv = print(&records, Format::Csv, &[]);
        assert!(csv.contains("surge_budget,surge,"), "{csv}");
    }

    #[test]
    fn name_counts_are_null_unless_the_controller_names_its_copies() {
        let s = scenario(ControllerKind::Ledger, DelayModel::fixed_seconds(20));
        let r = &run_records("x", &s, &run(&s, 1).unwrap())[0];
        assert_eq!(r.get("duplicate_names"), Some(&Value::Null));
        assert!(r.json().contains("\"duplicate_names\":null"));
        let s = scenario(ControllerKind::Named, DelayModel::fixed_seconds(20));
        let r = &run_records("x", &s, &run(&s, 1).unwrap())[0];
        assert_eq!(r.get("duplicate_names"), Some(&Value::U64(0)));
    }

    #[test]
    fn csv_quotes_cells_with_commas_and_leaves_nulls_empty() {
        let mut r = Record::new();
        r.push("setup", "a, \"b\"");
        r.push("stable", None::<u64>);
        r.push("n", 3u64);
        assert_eq!(r.csv_header(), "schema,setup,stable,n");
        assert_eq!(r.csv_row(), format!("{SCHEMA},\"a, \"\"b\"\"\",,3"));
        assert_eq!(
            r.json(),
            format!("{{\"schema\":{SCHEMA},\"setup\":\"a, \\\"b\\\"\",\"stable\":null,\"n\":3}}")
        );
    }

    #[test]
    fn monte_carlo_records_are_flat_with_p_overshoot() {
        let s = scenario(ControllerKind::Ledger, DelayModel::lesson_chain());
        let summary = monte_carlo(&s, 7, 20).unwrap();
        let r = &monte_carlo_records("x", &s, &summary)[0];
        assert_eq!(r.get("runs"), Some(&Value::U64(20)));
        assert_eq!(r.get("first_seed"), Some(&Value::U64(7)));
        let Some(Value::F64(p)) = r.get("p_overshoot") else {
            panic!("p_overshoot is a float: {r:?}");
        };
        assert!((0.0..=1.0).contains(p));
        assert!(r.get("overshoot_p95").is_some() && r.get("overshoot").is_none());
    }
}
