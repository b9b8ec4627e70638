//! One single-run row of a sweep ([`SweepRow`]), and how it is written: CSV or JSON lines through
//! the crate's row writer, or as a [`Record`].

#[cfg(test)]
use std::fmt::Write as _;

use serde::{Serialize, Serializer};
use setpoint_core::ControllerKind;

use super::{ModelName, StartupName};
use crate::metrics::Metrics;
use crate::output::{push_lesson_metrics, Record, SCHEMA};
use crate::row_writer::{Csv, Header, Json, RowSink};
use crate::scenario::RolloutMetrics;

/// One single-run row of a sweep (`docs/output.md`): the schema version, the cell's number and
/// coordinates, the seed and engine, the metrics of `setpoint run`, and the lesson's relation and
/// the exact predictor where the lesson's world holds (null elsewhere). Settings that do not
/// apply to the cell's controller (`ttl`, `burst` outside `expectations`) are null.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepRow<'a> {
    /// The schema version ([`SCHEMA`]).
    pub schema: u64,
    /// The cell's number in the whole grid (desired slowest, controller fastest).
    pub cell: u64,
    /// Declared copies.
    pub desired: u64,
    /// Loop period U, in seconds.
    pub period: u64,
    /// Report delay G, in seconds, when fixed whole seconds; null for a random model.
    pub delay: Option<u64>,
    /// The delay model's canonical text ([`model_text`](super::model_text)).
    pub delay_model: ModelName<'a>,
    /// Startup time B, in seconds; or, for a cell with a startup model, the model's canonical
    /// text (a string in JSON).
    pub startup: StartupName<'a>,
    /// The last second of the run.
    pub duration: u64,
    /// The controller, by its command-line name.
    #[serde(serialize_with = "controller_name")]
    pub controller: ControllerKind,
    /// TTL of `expectations`, in seconds.
    pub ttl: Option<u64>,
    /// Burst limit of `expectations`.
    pub burst: Option<u64>,
    /// The run's seed ([`cell_seed`](super::cell_seed)); JSON writes one above 2^53 − 1 as a
    /// string.
    #[serde(serialize_with = "crate::output::serialize_exact")]
    pub seed: u64,
    /// The engine that ran the cell: `fast` or `general`.
    pub engine: &'static str,
    /// What the run measured.
    #[serde(flatten)]
    pub metrics: Metrics,
    /// Duplicate identities; `named` only.
    pub duplicate_names: Option<u64>,
    /// Creations absorbed as no-ops; `named` only.
    pub absorbed_creates: Option<u64>,
    /// Delete commands lost in transit.
    pub lost_deletes: u64,
    /// The rolling update's metrics (`docs/model.md`, "Rolling updates"): null in every row of
    /// a grid, whose cells hold no `update` event, and on the fast engine.
    #[serde(flatten)]
    pub rollout: RolloutMetrics,
    /// The lesson's relation `desired × (⌈(G + B) / U⌉ − 1)`, in copies; negative when
    /// `G + B = 0`. Null outside the lesson's world.
    pub lesson_prediction: Option<i128>,
    /// Whether the measured overshoot equals `lesson_prediction`.
    pub lesson_match: Option<bool>,
    /// The exact predictor's overshoot ([`crate::predict::predict`], `docs/relation.md`), in
    /// copies: 0 for `intent`, which counts its own work in flight and never overshoots.
    pub prediction: Option<u64>,
    /// Whether the measured overshoot equals `prediction`.
    pub prediction_match: Option<bool>,
}

fn controller_name<S: Serializer>(c: &ControllerKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
}

/// An optional value as a CSV cell: empty when absent.
#[cfg(test)]
struct Opt<T>(Option<T>);

#[cfg(test)]
impl<T: std::fmt::Display> std::fmt::Display for Opt<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => Ok(()),
        }
    }
}

impl SweepRow<'_> {
    /// The row as a [`Record`]: the same keys and values as [`Self::write_to`] prints.
    pub fn record(&self) -> Record {
        let mut r = Record::new();
        r.push("cell", self.cell);
        r.push("desired", self.desired);
        r.push("period", self.period);
        r.push("delay", self.delay);
        r.push("delay_model", self.delay_model.to_string());
        r.push("startup", self.startup);
        r.push("duration", self.duration);
        r.push("controller", self.controller.name());
        r.push("ttl", self.ttl);
        r.push("burst", self.burst);
        r.push("seed", self.seed);
        r.push("engine", self.engine);
        push_lesson_metrics(&mut r, &self.metrics);
        r.push("duplicate_names", self.duplicate_names);
        r.push("absorbed_creates", self.absorbed_creates);
        r.push("lost_deletes", self.lost_deletes);
        let u = &self.rollout;
        r.push("surge_budget", u.surge_budget);
        r.push("surge", u.surge);
        r.push("surge_copy_seconds", u.surge_copy_seconds);
        r.push("rollout_overshoot", u.rollout_overshoot);
        r.push("rollout_done", u.rollout_done);
        r.push("rollout_stalled", u.rollout_stalled);
        r.push(
            "lesson_prediction",
            self.lesson_prediction.map(|p| p as i64),
        );
        r.push("lesson_match", self.lesson_match);
        r.push("prediction", self.prediction);
        r.push("prediction_match", self.prediction_match);
        r
    }

    /// Hands every field to `sink`, in output order: the one list of the row's keys, from which
    /// the header and both formats of [`Self::write_to`] follow.
    fn visit(&self, s: &mut impl RowSink) {
        s.u64("schema", self.schema);
        s.u64("cell", self.cell);
        s.u64("desired", self.desired);
        s.u64("period", self.period);
        s.opt_u64("delay", self.delay);
        match self.delay_model {
            ModelName::Fixed(g) => {
                let mut text = *b"fixed:\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
                let mut digits = itoa::Buffer::new();
                let digits = digits.format(g).as_bytes();
                text[6..6 + digits.len()].copy_from_slice(digits);
                let text = std::str::from_utf8(&text[..6 + digits.len()]).expect("ascii");
                s.str("delay_model", text);
            }
            ModelName::Text(t) => s.str("delay_model", t),
        }
        match self.startup {
            StartupName::Seconds(b) => s.u64("startup", b),
            StartupName::Model(t) => s.str("startup", t),
        }
        s.u64("duration", self.duration);
        s.str("controller", self.controller.name());
        s.opt_u64("ttl", self.ttl);
        s.opt_u64("burst", self.burst);
        s.u64("seed", self.seed);
        s.str("engine", self.engine);
        let m = &self.metrics;
        s.u64("rounds", m.rounds);
        s.f64("work_per_round", m.work_per_round);
        s.u64("created", m.created);
        s.i128("unneeded", i128::from(m.unneeded));
        s.u64("delete_commands", m.delete_commands);
        s.u64("deleted", m.deleted);
        s.u64("overshoot", m.overshoot);
        s.opt_u64("stable", m.stable);
        s.u64("died", m.died);
        s.u64("peak_live", m.peak_live);
        s.u64("copy_seconds_above", m.copy_seconds_above);
        s.opt_u64("duplicate_names", self.duplicate_names);
        s.opt_u64("absorbed_creates", self.absorbed_creates);
        s.u64("lost_deletes", self.lost_deletes);
        let u = &self.rollout;
        s.opt_u64("surge_budget", u.surge_budget);
        s.opt_u64("surge", u.surge);
        s.opt_u64("surge_copy_seconds", u.surge_copy_seconds);
        s.opt_u64("rollout_overshoot", u.rollout_overshoot);
        s.opt_u64("rollout_done", u.rollout_done);
        s.opt_u64("rollout_stalled", u.rollout_stalled);
        s.opt_i128("lesson_prediction", self.lesson_prediction);
        s.opt_bool("lesson_match", self.lesson_match);
        s.opt_u64("prediction", self.prediction);
        s.opt_bool("prediction_match", self.prediction_match);
    }

    /// The CSV header, without a newline.
    pub fn csv_header() -> String {
        let mut h = Header::default();
        SweepRow::blank().visit(&mut h);
        h.text
    }

    /// A row of zeros and nulls: what [`Self::csv_header`] visits for the keys, and the fields
    /// [`Grid::row`] fills in from there.
    pub(super) fn blank() -> SweepRow<'static> {
        SweepRow {
            schema: SCHEMA,
            cell: 0,
            desired: 0,
            period: 0,
            delay: None,
            delay_model: ModelName::Fixed(0),
            startup: StartupName::Seconds(0),
            duration: 0,
            controller: ControllerKind::Ledger,
            ttl: None,
            burst: None,
            seed: 0,
            engine: "",
            metrics: Metrics::default(),
            duplicate_names: None,
            absorbed_creates: None,
            lost_deletes: 0,
            rollout: RolloutMetrics::default(),
            lesson_prediction: None,
            lesson_match: None,
            prediction: None,
            prediction_match: None,
        }
    }

    /// Appends the row in `format`, with a newline, through the crate's row writer: the same bytes
    /// as the plain `Display`/`serde` path, written without per-row allocation.
    pub fn write_to(&self, format: RowFormat, out: &mut String) {
        match format {
            RowFormat::Csv => {
                let mut sink = Csv::new(out);
                self.visit(&mut sink);
                sink.end();
            }
            RowFormat::Jsonl => {
                let mut sink = Json::new(out);
                self.visit(&mut sink);
                sink.end();
            }
        }
    }

    /// The plain path the row writer replaced: `format!` for CSV, the derived `Serialize` for
    /// JSON. Kept as the oracle of the writer's tests.
    #[cfg(test)]
    fn write_plain(&self, format: RowFormat, out: &mut String) {
        match format {
            RowFormat::Csv => {
                // Writing into a String cannot fail.
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    self.schema,
                    self.cell,
                    self.desired,
                    self.period,
                    Opt(self.delay),
                    self.delay_model,
                    self.startup,
                    self.duration,
                    self.controller.name(),
                    Opt(self.ttl),
                    Opt(self.burst),
                    self.seed,
                    self.engine,
                    self.metrics.csv_row(),
                    Opt(self.duplicate_names),
                    Opt(self.absorbed_creates),
                    self.lost_deletes,
                    Opt(self.rollout.surge_budget),
                    Opt(self.rollout.surge),
                    Opt(self.rollout.surge_copy_seconds),
                    Opt(self.rollout.rollout_overshoot),
                    Opt(self.rollout.rollout_done),
                    Opt(self.rollout.rollout_stalled),
                    Opt(self.lesson_prediction),
                    Opt(self.lesson_match),
                    Opt(self.prediction),
                    Opt(self.prediction_match)
                );
            }
            RowFormat::Jsonl => {
                out.push_str(
                    &serde_json::to_string(self).expect("a row always serializes to JSON"),
                );
                out.push('\n');
            }
        }
    }
}

/// How [`write_rows`](super::write_rows) prints rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowFormat {
    /// A header line, then one comma-separated line per cell. An absent `stable` is empty.
    Csv,
    /// One JSON object per line, no header. An absent `stable` is `null`.
    Jsonl,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lesson_world::{Death, Limit};
    use crate::sweep::testing::{axis, grid};
    use crate::sweep::{parse_delay_models, parse_startup_models, Axis, Grid, GridSpec};

    #[test]
    fn the_lesson_row_at_g20_reads_as_the_lesson_prints_it() {
        let g = Grid::new(GridSpec {
            delay: Axis::single(20),
            ..GridSpec::default()
        })
        .unwrap();
        let row = g.row(0).unwrap();
        let mut csv = String::new();
        row.write_to(RowFormat::Csv, &mut csv);
        let seed = row.seed;
        assert_eq!(
            csv,
            format!("{SCHEMA},0,6,15,20,fixed:20,5,900,ledger,,,{seed},fast,61,0.5245901639344263,16,8,16,8,6,375,2,12,200,,,0,,,,,,,6,true,6,true\n")
        );
        let mut json = String::new();
        row.write_to(RowFormat::Jsonl, &mut json);
        assert_eq!(
            json,
            format!("{{\"schema\":{SCHEMA},\"cell\":0,\"desired\":6,\"period\":15,\"delay\":20,\"delay_model\":\"fixed:20\",\"startup\":5,\"duration\":900,\"controller\":\"ledger\",\"ttl\":null,\"burst\":null,\"seed\":\"{seed}\",\"engine\":\"fast\",\
             \"rounds\":61,\"work_per_round\":0.5245901639344263,\"created\":16,\"unneeded\":8,\
             \"delete_commands\":16,\"deleted\":8,\"overshoot\":6,\"stable\":375,\"died\":2,\
             \"peak_live\":12,\"copy_seconds_above\":200,\"duplicate_names\":null,\"absorbed_creates\":null,\"lost_deletes\":0,\"surge_budget\":null,\"surge\":null,\"surge_copy_seconds\":null,\"rollout_overshoot\":null,\"rollout_done\":null,\"rollout_stalled\":null,\"lesson_prediction\":6,\"lesson_match\":true,\"prediction\":6,\"prediction_match\":true}}\n")
        );
    }

    #[test]
    fn the_fast_row_writer_prints_exactly_the_rows_record() {
        let g = Grid::new(GridSpec {
            delay_models: parse_delay_models("fixed:0,fixed:45,lesson-chain").unwrap(),
            period: axis(Limit::PERIOD, "5,30"),
            controller: ControllerKind::ALL.to_vec(),
            ..GridSpec::default()
        })
        .unwrap();
        for i in 0..g.cells() {
            let row = g.row(i).unwrap();
            let (mut csv, mut json) = (String::new(), String::new());
            row.write_to(RowFormat::Csv, &mut csv);
            row.write_to(RowFormat::Jsonl, &mut json);
            let r = row.record();
            assert_eq!(csv, format!("{}\n", r.csv_row()), "cell {i}");
            assert_eq!(json, format!("{}\n", r.json()), "cell {i}");
            assert_eq!(SweepRow::csv_header(), r.csv_header());
        }
    }

    /// A grid of one cell with random coordinates, of any controller and delay model.
    fn one_cell_grid() -> impl proptest::strategy::Strategy<Value = Grid> {
        use proptest::prelude::*;
        let model = prop_oneof![
            (0u64..=400).prop_map(|g| format!("fixed:{g}")),
            (0u64..=30, 0u64..=60).prop_map(|(a, b)| format!("uniform:{a}:{}", a + b)),
            Just("lesson-chain".to_owned()),
        ];
        (
            0u64..=40,
            1u64..=120,
            prop_oneof![Just(None), Just(Some(0u64)), (0u64..=300).prop_map(Some)],
            model,
            0u64..=80,
            0usize..ControllerKind::ALL.len(),
            0u64..=1200,
            any::<u64>(),
            proptest::option::of((0u64..=1200, 0u64..=10)),
            proptest::option::of(
                (0u64..=20, 0u64..=20).prop_map(|(a, b)| format!("uniform:{a}:{}", a + b)),
            ),
        )
            .prop_map(
                |(desired, period, axis_delay, model, startup, c, duration, seed, death, b)| {
                    Grid::new(GridSpec {
                        desired: Axis::single(desired),
                        period: Axis::single(period),
                        delay: Axis::single(axis_delay.unwrap_or(0)),
                        delay_models: match axis_delay {
                            Some(_) => Vec::new(),
                            None => parse_delay_models(&model).unwrap(),
                        },
                        startup: Axis::single(startup),
                        startup_models: b
                            .map(|b| parse_startup_models(&b).unwrap())
                            .unwrap_or_default(),
                        controller: vec![ControllerKind::ALL[c]],
                        duration,
                        deaths: death
                            .map(|(at, count)| vec![Death { at, count }])
                            .unwrap_or_default(),
                        seed,
                        ..GridSpec::default()
                    })
                    .unwrap()
                },
            )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 300, ..Default::default() })]

        /// The row writer prints exactly what the plain path prints (`format!` for CSV, the
        /// derived `Serialize` for JSON) and what the row's [`Record`] prints, on random cells of
        /// every controller and delay model.
        #[test]
        fn the_row_writer_equals_the_plain_serde_and_csv_path(g in one_cell_grid()) {
            let row = g.row(0).unwrap();
            let r = row.record();
            for format in [RowFormat::Csv, RowFormat::Jsonl] {
                let (mut fast, mut plain) = (String::from("x"), String::from("x"));
                row.write_to(format, &mut fast);
                row.write_plain(format, &mut plain);
                proptest::prop_assert_eq!(&fast, &plain);
                let record = match format {
                    RowFormat::Csv => r.csv_row(),
                    RowFormat::Jsonl => r.json(),
                };
                proptest::prop_assert_eq!(&fast, &format!("x{record}\n"));
            }
            proptest::prop_assert_eq!(SweepRow::csv_header(), r.csv_header());
        }
    }

    #[test]
    fn the_csv_header_has_one_column_per_row_field() {
        let header = SweepRow::csv_header();
        let g = grid("0", "15", "5");
        let mut row = String::new();
        g.row(0).unwrap().write_to(RowFormat::Csv, &mut row);
        assert_eq!(header.split(',').count(), row.trim_end().split(',').count());
    }
}
