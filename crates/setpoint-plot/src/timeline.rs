//! Live, seen and desired copies over time.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use setpoint_sim::{TraceRow, TraceSpan};

use crate::legend::{self, Entry, Swatch};
use crate::png::text_width;
use crate::{draw_err, whole, PlotError};

/// A labelled moment on a timeline, such as a scripted death.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The second.
    pub t: u64,
    /// A short label, such as "2 die".
    pub label: String,
}

/// What a shaded span of time stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// No report reaches the ledger.
    Outage,
    /// Every pass reads the ledger as it stood when the window opened.
    Stale,
    /// A rolling update is under way: copies above desired within its surge budget are
    /// deliberate.
    Rollout,
}

/// A stretch of time drawn as a shaded band behind the lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The first second of the stretch.
    pub from: u64,
    /// The second the stretch ends (exclusive).
    pub to: u64,
    /// What it stands for.
    pub kind: SpanKind,
}

/// What a timeline shows.
#[derive(Debug, Clone)]
pub struct Timeline<'a> {
    /// The title over the chart.
    pub title: String,
    /// Rows of a trace in time order: one per second, or fewer from a [`Downsample`].
    pub rows: &'a [TraceRow],
    /// The loop period U: a tick marks every round; rounds that created or deleted get a marker.
    pub period: u64,
    /// Events, drawn as vertical lines with their labels in a band above the data.
    pub events: &'a [Marker],
    /// Outages, stale views and rolling updates, drawn as shaded spans.
    pub spans: &'a [Span],
}

const LIVE: RGBColor = RGBColor(31, 94, 196);
const SEEN: RGBColor = RGBColor(230, 126, 34);
const DESIRED: RGBColor = RGBColor(39, 150, 70);
const EVENT: RGBColor = RGBColor(200, 30, 45);
const ROUND: RGBColor = RGBColor(150, 150, 150);
const OUTAGE: RGBColor = RGBColor(90, 90, 90);
const STALE: RGBColor = RGBColor(140, 80, 200);
const ROLLOUT: RGBColor = RGBColor(0, 150, 160);
/// Opacity of a shaded span.
const SHADE: f64 = 0.16;
/// Opacity of the desired band under the live line.
const DESIRED_BAND: f64 = 0.4;

/// The picture's width in pixels.
pub const WIDTH: u32 = 1100;
const MARGIN: i32 = 14;
const Y_LABELS: i32 = 56;
const X_LABELS: i32 = 42;
const TITLE: i32 = 36;
/// The chart's height in pixels, without the label band and the legend.
const CHART: i32 = 470;
/// Font size of event labels, in pixels.
const LABEL_SIZE: f64 = 13.0;
const LABEL_ROW: i32 = 17;
/// At most this many rows of event labels; labels that find no room are left out and counted.
pub const MAX_LABEL_ROWS: usize = 6;
/// At most this many buckets of time a [`Downsample`] keeps: about two per pixel column.
pub const MAX_BUCKETS: u64 = 2048;

/// The points of a step line through the rows' values: a change at second t is drawn as a
/// vertical jump at t, and the last value runs to the end of its second.
fn steps(rows: &[TraceRow], value: impl Fn(&TraceRow) -> u64) -> Vec<(f64, f64)> {
    let mut points = Vec::new();
    let mut last: Option<u64> = None;
    for r in rows {
        let v = value(r);
        if last != Some(v) {
            if let Some(prev) = last {
                points.push((r.t as f64, prev as f64));
            }
            points.push((r.t as f64, v as f64));
            last = Some(v);
        }
    }
    if let (Some(r), Some(v)) = (rows.last(), last) {
        points.push(((r.t + 1) as f64, v as f64));
    }
    points
}

/// Keeps a timeline's memory bounded whatever the run's duration: the seconds are cut into at
/// most [`MAX_BUCKETS`] buckets of equal width, and each bucket keeps only the rows a picture can
/// show (its first and last row, the rows where live, seen and desired reach their least and
/// most, and its first round that created and that deleted). Each kept row is a real row of the
/// run, so the lines still pass through true values; with buckets one second wide every row is
/// kept.
#[derive(Debug, Clone)]
pub struct Downsample {
    first: u64,
    width: u64,
    period: u64,
    kept: Vec<TraceRow>,
    bucket: Option<(u64, Bucket)>,
}

/// The rows one bucket keeps.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    first: TraceRow,
    last: TraceRow,
    /// Least and most of live, seen and desired, in that order.
    least: [TraceRow; 3],
    most: [TraceRow; 3],
    created: Option<TraceRow>,
    deleted: Option<TraceRow>,
}

const SERIES: [fn(&TraceRow) -> u64; 3] = [|r| r.live, |r| r.seen, |r| r.desired];

impl Downsample {
    /// For rows from second `first` to second `last` of a run whose loop period is `period`.
    pub fn new(first: u64, last: u64, period: u64) -> Self {
        let seconds = last.saturating_sub(first).saturating_add(1);
        Downsample {
            first,
            width: seconds.div_ceil(MAX_BUCKETS).max(1),
            period: period.max(1),
            kept: Vec::new(),
            bucket: None,
        }
    }

    /// The width of a bucket, in seconds.
    pub fn bucket_seconds(&self) -> u64 {
        self.width
    }

    /// Takes the next row, in time order.
    pub fn push(&mut self, row: &TraceRow) {
        if self.width == 1 {
            self.kept.push(*row);
            return;
        }
        let index = row.t.saturating_sub(self.first) / self.width;
        let round = row.t % self.period == 0;
        let created = (round && row.created > 0).then_some(*row);
        let deleted = (round && row.delete_commands > 0).then_some(*row);
        match &mut self.bucket {
            Some((i, b)) if *i == index => {
                b.last = *row;
                for (k, value) in SERIES.iter().enumerate() {
                    if value(row) < value(&b.least[k]) {
                        b.least[k] = *row;
                    }
                    if value(row) > value(&b.most[k]) {
                        b.most[k] = *row;
                    }
                }
                b.created = b.created.or(created);
                b.deleted = b.deleted.or(deleted);
            }
            _ => {
                self.flush();
                self.bucket = Some((
                    index,
                    Bucket {
                        first: *row,
                        last: *row,
                        least: [*row; 3],
                        most: [*row; 3],
                        created,
                        deleted,
                    },
                ));
            }
        }
    }

    /// Takes the rows of `span`, as [`Downsample::push`] of each of its rows would, in time
    /// that grows with the buckets it covers, not with its seconds: in each bucket only its
    /// first row, its first round with delete commands and its last row can be kept (the rows
    /// between hold the same values, and a bucket keeps a value's first least and most).
    pub fn push_span(&mut self, span: &TraceSpan) {
        if self.width == 1 {
            self.kept.extend(span.rows());
            return;
        }
        self.push(&span.row);
        let mut s = span.row.t + 1;
        while s <= span.until {
            let index = s.saturating_sub(self.first) / self.width;
            let end = self
                .first
                .saturating_add((index + 1).saturating_mul(self.width))
                .saturating_sub(1)
                .min(span.until);
            self.push(&span.row_at(s));
            if span.round_commands > 0 {
                let round = (s + 1).div_ceil(span.period).saturating_mul(span.period);
                if round < end {
                    self.push(&span.row_at(round));
                }
            }
            if end > s {
                self.push(&span.row_at(end));
            }
            s = end + 1;
        }
    }

    fn flush(&mut self) {
        if let Some((_, b)) = self.bucket.take() {
            let mut rows: Vec<TraceRow> = [b.first, b.last]
                .into_iter()
                .chain(b.least)
                .chain(b.most)
                .chain(b.created)
                .chain(b.deleted)
                .collect();
            rows.sort_by_key(|r| r.t);
            rows.dedup_by_key(|r| r.t);
            self.kept.extend(rows);
        }
    }

    /// The rows kept, in time order.
    pub fn finish(mut self) -> Vec<TraceRow> {
        self.flush();
        self.kept
    }
}

/// Where each event label goes: (label, left pixel, row), in time order, and how many found no
/// row. Labels start just right of their line, or end just left of it where they would run off
/// the picture, and take the first row where they touch no other label.
fn place_labels(events: &[Marker], px: impl Fn(u64) -> f64) -> (Vec<(&Marker, f64, usize)>, usize) {
    let mut sorted: Vec<&Marker> = events.iter().collect();
    sorted.sort_by_key(|e| e.t);
    let mut rows: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut placed = Vec::new();
    let mut left_out = 0;
    for e in sorted {
        let x = px(e.t);
        let w = text_width(&e.label, LABEL_SIZE) + 2.0;
        let start = if x + 4.0 + w > f64::from(WIDTH) - 4.0 {
            x - 4.0 - w
        } else {
            x + 4.0
        };
        let (a, b) = (start - 5.0, start + w + 5.0);
        let free = |row: &Vec<(f64, f64)>| row.iter().all(|&(l, r)| b < l || a > r);
        let row = match rows.iter().position(free) {
            Some(r) => r,
            None if rows.len() < MAX_LABEL_ROWS => {
                rows.push(Vec::new());
                rows.len() - 1
            }
            None => {
                left_out += 1;
                continue;
            }
        };
        rows[row].push((a, b));
        placed.push((e, start, row));
    }
    (placed, left_out)
}

/// Draws `timeline` as an SVG document.
pub fn timeline_svg(timeline: &Timeline) -> Result<String, PlotError> {
    let rows = timeline.rows;
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return Err(PlotError::Empty("the run has no seconds"));
    };
    let x0 = first.t as f64;
    let x_end = (last.t + 1) as f64;
    let peak = rows
        .iter()
        .map(|r| r.live.max(r.seen).max(r.desired))
        .max()
        .unwrap_or(1);
    let y_end = (peak as f64 * 1.12).max(peak as f64 + 1.0);

    // The plot's horizontal pixels, as plotters lays them out with these margins.
    let (left, right) = (
        f64::from(MARGIN + Y_LABELS),
        f64::from(WIDTH as i32 - MARGIN),
    );
    let px = |t: u64| left + (t as f64 - x0) / (x_end - x0) * (right - left);
    let events: Vec<Marker> = timeline
        .events
        .iter()
        .filter(|e| (e.t as f64) >= x0 && (e.t as f64) < x_end)
        .cloned()
        .collect();
    let (labels, left_out) = place_labels(&events, px);
    let label_rows = labels.iter().map(|l| l.2 + 1).max().unwrap_or(0) as i32;
    let band = if label_rows > 0 {
        label_rows * LABEL_ROW + 6
    } else {
        0
    };

    let period = timeline.period.max(1);
    let round_count = (last.t / period).saturating_sub(first.t.saturating_sub(1) / period);
    let draw_ticks = round_count <= ((right - left) / 3.0) as u64;
    let spans: Vec<Span> = timeline
        .spans
        .iter()
        .filter(|s| s.to > s.from && (s.from as f64) < x_end && (s.to as f64) > x0)
        .copied()
        .collect();
    let mut entries = vec![
        Entry {
            swatch: Swatch::Line(LIVE, 3, false),
            label: "live".into(),
        },
        Entry {
            swatch: Swatch::Line(SEEN, 2, true),
            label: "seen on the ledger".into(),
        },
        Entry {
            swatch: Swatch::Band(DESIRED, DESIRED_BAND),
            label: "desired".into(),
        },
    ];
    if draw_ticks {
        entries.push(Entry {
            swatch: Swatch::Tick(ROUND),
            label: "round (tick)".into(),
        });
    }
    entries.push(Entry {
        swatch: Swatch::Triangle(DESIRED),
        label: "round that created copies".into(),
    });
    entries.push(Entry {
        swatch: Swatch::Cross(EVENT),
        label: "round that sent delete commands".into(),
    });
    if !events.is_empty() {
        entries.push(Entry {
            swatch: Swatch::Line(EVENT, 2, false),
            label: "event".into(),
        });
    }
    for (kind, colour, label) in [
        (
            SpanKind::Outage,
            OUTAGE,
            "outage: no report reaches the ledger",
        ),
        (
            SpanKind::Stale,
            STALE,
            "stale view: passes read an old ledger",
        ),
        (
            SpanKind::Rollout,
            ROLLOUT,
            "rolling update: copies above desired within the surge are deliberate",
        ),
    ] {
        if spans.iter().any(|s| s.kind == kind) {
            entries.push(Entry {
                swatch: Swatch::Shade(colour, SHADE * 2.0),
                label: label.into(),
            });
        }
    }
    if left_out > 0 {
        entries.push(Entry {
            swatch: Swatch::Nothing,
            label: format!("({left_out} event labels left out: no room)"),
        });
    }
    let legend_h = legend::height(&entries, WIDTH as i32, MARGIN + Y_LABELS);
    let height = TITLE + band + CHART + legend_h;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        root.draw(&Text::new(
            timeline.title.clone(),
            (WIDTH as i32 / 2, TITLE / 2 + 2),
            ("sans-serif", 20)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Center)),
        ))
        .map_err(draw_err)?;
        let (upper, strip) = root.split_vertically(TITLE + band + CHART);
        let mut chart = ChartBuilder::on(&upper)
            .margin(MARGIN)
            .margin_top(TITLE + band)
            .margin_bottom(4)
            .x_label_area_size(X_LABELS)
            .y_label_area_size(Y_LABELS)
            .build_cartesian_2d(x0..x_end, 0f64..y_end)
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .x_label_formatter(&whole)
            .y_label_formatter(&whole)
            .x_desc("second")
            .y_desc("copies")
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(draw_err)?;

        // Shaded spans first, so every line stays on top of them.
        chart
            .draw_series(spans.iter().map(|s| {
                let colour = match s.kind {
                    SpanKind::Outage => OUTAGE,
                    SpanKind::Stale => STALE,
                    SpanKind::Rollout => ROLLOUT,
                };
                Rectangle::new(
                    [
                        ((s.from as f64).max(x0), 0.0),
                        ((s.to as f64).min(x_end), y_end),
                    ],
                    colour.mix(SHADE).filled(),
                )
            }))
            .map_err(draw_err)?;

        // Rounds: a small tick on the time axis each, where they are far enough apart to see;
        // a marker where a round created or deleted.
        let tick = y_end * 0.025;
        let rounds = rows.iter().filter(|r| r.t % period == 0);
        if draw_ticks {
            chart
                .draw_series(rounds.clone().map(|r| {
                    PathElement::new(
                        vec![(r.t as f64, 0.0), (r.t as f64, tick)],
                        ROUND.stroke_width(1),
                    )
                }))
                .map_err(draw_err)?;
        }
        let top = y_end * 0.96;
        chart
            .draw_series(
                rounds
                    .clone()
                    .filter(|r| r.created > 0)
                    .map(|r| TriangleMarker::new((r.t as f64, top), 6, DESIRED.filled())),
            )
            .map_err(draw_err)?;
        chart
            .draw_series(
                rounds
                    .filter(|r| r.delete_commands > 0)
                    .map(|r| Cross::new((r.t as f64, top), 5, EVENT.stroke_width(2))),
            )
            .map_err(draw_err)?;

        // Events: a vertical line through the data, continued up into the label band to its
        // label.
        let (_, plot_y) = chart.plotting_area().get_pixel_range();
        for &(e, start, row) in &labels {
            let x = e.t as f64;
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, 0.0), (x, y_end)],
                    EVENT.mix(0.7).stroke_width(2),
                )))
                .map_err(draw_err)?;
            let label_y = TITLE + row as i32 * LABEL_ROW + LABEL_ROW / 2 + 2;
            let xp = chart.backend_coord(&(x, 0.0)).0;
            root.draw(&PathElement::new(
                vec![(xp, plot_y.start), (xp, label_y)],
                EVENT.mix(0.35).stroke_width(1),
            ))
            .map_err(draw_err)?;
            root.draw(&Text::new(
                e.label.clone(),
                (start.round() as i32, label_y),
                ("sans-serif", LABEL_SIZE)
                    .into_font()
                    .color(&EVENT)
                    .pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(draw_err)?;
        }

        // Desired first as a wide pale band, so it shows on both sides of the live line where
        // the two agree; then the ledger's view, then live on top.
        chart
            .draw_series(LineSeries::new(
                steps(rows, |r| r.desired),
                DESIRED.mix(DESIRED_BAND).stroke_width(9),
            ))
            .map_err(draw_err)?;
        chart
            .draw_series(DashedLineSeries::new(
                steps(rows, |r| r.seen),
                7,
                4,
                SEEN.stroke_width(2),
            ))
            .map_err(draw_err)?;
        chart
            .draw_series(LineSeries::new(
                steps(rows, |r| r.live),
                LIVE.stroke_width(3),
            ))
            .map_err(draw_err)?;
        legend::draw(&strip, &entries, MARGIN + Y_LABELS)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(t: u64, live: u64) -> TraceRow {
        TraceRow {
            t,
            desired: 6,
            live,
            seen: 0,
            pending: 0,
            created: 0,
            delete_commands: 0,
            deleted: 0,
            died: 0,
        }
    }

    #[test]
    fn steps_jump_where_the_value_changes_and_run_to_the_end() {
        let rows = [row(0, 0), row(1, 0), row(2, 6), row(3, 6)];
        assert_eq!(
            steps(&rows, |r| r.live),
            vec![(0.0, 0.0), (2.0, 0.0), (2.0, 6.0), (4.0, 6.0)]
        );
    }

    fn run(values: &[(u64, u64, u64)], period: u64) -> Vec<TraceRow> {
        values
            .iter()
            .enumerate()
            .map(|(t, &(live, seen, created))| TraceRow {
                t: t as u64,
                live,
                seen,
                created: if t as u64 % period == 0 { created } else { 0 },
                ..row(t as u64, live)
            })
            .collect()
    }

    #[test]
    fn a_short_run_is_kept_whole() {
        let rows = run(&[(1, 0, 1), (2, 1, 0), (2, 2, 0), (0, 2, 3)], 2);
        let mut d = Downsample::new(0, 3, 2);
        rows.iter().for_each(|r| d.push(r));
        assert_eq!(d.bucket_seconds(), 1);
        assert_eq!(d.finish(), rows);
    }

    #[test]
    fn a_billion_seconds_keep_a_few_rows_per_bucket() {
        let d = Downsample::new(0, 1_000_000_000, 15);
        assert_eq!(d.bucket_seconds(), 1_000_000_001u64.div_ceil(MAX_BUCKETS));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(40))]
        /// Against an oracle that cuts the run into buckets and reads each one's extremes:
        /// every kept row is a real row in order, and each bucket keeps its first and last row,
        /// the least and most of live and seen, and its first round that created.
        #[test]
        fn downsampling_keeps_every_buckets_first_last_and_extremes(
            values in proptest::collection::vec((0u64..50, 0u64..50, 0u64..3), 1..8000),
            period in 1u64..40,
        ) {
            let rows = run(&values, period);
            let last = rows.len() as u64 - 1;
            let mut d = Downsample::new(0, last, period);
            let width = d.bucket_seconds();
            rows.iter().for_each(|r| d.push(r));
            let kept = d.finish();
            proptest::prop_assert!(kept.windows(2).all(|w| w[0].t < w[1].t));
            proptest::prop_assert!(kept.iter().all(|k| rows[k.t as usize] == *k));
            let buckets = (last + 1).div_ceil(width);
            proptest::prop_assert!(kept.len() as u64 <= 10 * buckets);
            proptest::prop_assert!(buckets <= MAX_BUCKETS);
            let mut rest = kept.as_slice();
            for chunk in rows.chunks(width as usize) {
                let end = chunk[chunk.len() - 1].t;
                let n = rest.iter().take_while(|k| k.t <= end).count();
                let inside: Vec<&TraceRow> = rest[..n].iter().collect();
                rest = &rest[n..];
                proptest::prop_assert_eq!(inside[0], &chunk[0]);
                proptest::prop_assert_eq!(inside[inside.len() - 1], &chunk[chunk.len() - 1]);
                for value in SERIES {
                    let lo = chunk.iter().map(value).min();
                    let hi = chunk.iter().map(value).max();
                    proptest::prop_assert_eq!(inside.iter().map(|r| value(r)).min(), lo);
                    proptest::prop_assert_eq!(inside.iter().map(|r| value(r)).max(), hi);
                }
                let creating = |r: &&TraceRow| r.t % period == 0 && r.created > 0;
                proptest::prop_assert_eq!(
                    chunk.iter().find(|r| creating(r)).map(|r| r.t),
                    inside.iter().copied().find(|r| creating(r)).map(|r| r.t)
                );
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// A span pushed at once keeps the rows that pushing its seconds one by one keeps, for
        /// spans inside one bucket, across many, and with a round's repeated delete commands.
        #[test]
        fn a_span_keeps_what_its_rows_keep(
            spans in proptest::collection::vec((0u64..30, 0u64..3000, 0u64..3, 0u64..2), 1..20),
            period in 1u64..40,
            extra in 0u64..5000,
        ) {
            let mut t = 0;
            let mut all = Vec::new();
            for (live, len, commands, created) in spans {
                let row = TraceRow { t, live, seen: live / 2, created, delete_commands: commands, ..row(t, live) };
                all.push(TraceSpan { row, until: t + len, period, round_commands: commands });
                t += len + 1;
            }
            let last = t - 1 + extra;
            let (mut one, mut each) = (Downsample::new(0, last, period), Downsample::new(0, last, period));
            for span in &all {
                one.push_span(span);
                span.rows().for_each(|r| each.push(&r));
            }
            proptest::prop_assert_eq!(one.finish(), each.finish());
        }
    }

    #[test]
    fn an_empty_run_is_refused() {
        let t = Timeline {
            title: "x".into(),
            rows: &[],
            period: 15,
            events: &[],
            spans: &[],
        };
        assert!(matches!(timeline_svg(&t), Err(PlotError::Empty(_))));
    }
}
