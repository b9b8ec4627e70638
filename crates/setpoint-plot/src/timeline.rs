//! Live, seen and desired copies over time.

use plotters::prelude::*;
use setpoint_sim::TraceRow;

use crate::{draw_err, whole, PlotError};

/// A labelled moment on a timeline, such as a scripted death.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The second.
    pub t: u64,
    /// A short label, such as "2 die".
    pub label: String,
}

/// What a timeline shows.
#[derive(Debug, Clone)]
pub struct Timeline<'a> {
    /// The title over the chart.
    pub title: String,
    /// One row per second, from a trace.
    pub rows: &'a [TraceRow],
    /// The loop period U: a tick marks every round; rounds that created or deleted get a marker.
    pub period: u64,
    /// Events, drawn as labelled vertical lines.
    pub events: &'a [Marker],
}

const LIVE: RGBColor = RGBColor(31, 94, 196);
const SEEN: RGBColor = RGBColor(230, 126, 34);
const DESIRED: RGBColor = RGBColor(39, 150, 70);
const EVENT: RGBColor = RGBColor(200, 30, 45);
const ROUND: RGBColor = RGBColor(150, 150, 150);

/// The points of a step line through one value per second: a change at second t is drawn as a
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

/// Draws `timeline` as an SVG document.
pub fn timeline_svg(timeline: &Timeline) -> Result<String, PlotError> {
    let rows = timeline.rows;
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return Err(PlotError::Empty("the run has no seconds"));
    };
    let x_end = (last.t + 1) as f64;
    let peak = rows
        .iter()
        .map(|r| r.live.max(r.seen).max(r.desired))
        .max()
        .unwrap_or(1);
    let y_end = (peak as f64 * 1.12).max(peak as f64 + 1.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1100, 540)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&timeline.title, ("sans-serif", 20))
            .margin(14)
            .x_label_area_size(42)
            .y_label_area_size(56)
            .build_cartesian_2d(first.t as f64..x_end, 0f64..y_end)
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

        // Rounds: a small tick on the time axis each; a marker where a round created or deleted.
        let tick = y_end * 0.025;
        let rounds = rows.iter().filter(|r| r.t % timeline.period == 0);
        chart
            .draw_series(rounds.clone().map(|r| {
                PathElement::new(
                    vec![(r.t as f64, 0.0), (r.t as f64, tick)],
                    ROUND.stroke_width(1),
                )
            }))
            .map_err(draw_err)?
            .label("round (tick)")
            .legend(|(x, y)| PathElement::new(vec![(x + 8, y - 6), (x + 8, y + 6)], ROUND));
        let top = y_end * 0.96;
        chart
            .draw_series(
                rounds
                    .clone()
                    .filter(|r| r.created > 0)
                    .map(|r| TriangleMarker::new((r.t as f64, top), 6, DESIRED.filled())),
            )
            .map_err(draw_err)?
            .label("round that created copies")
            .legend(|(x, y)| TriangleMarker::new((x + 8, y), 6, DESIRED.filled()));
        chart
            .draw_series(
                rounds
                    .filter(|r| r.delete_commands > 0)
                    .map(|r| Cross::new((r.t as f64, top), 5, EVENT.stroke_width(2))),
            )
            .map_err(draw_err)?
            .label("round that sent delete commands")
            .legend(|(x, y)| Cross::new((x + 8, y), 5, EVENT.stroke_width(2)));

        // Events: labelled vertical lines. Labels of events close in time go on lower rows so
        // they do not print over each other.
        let span = x_end - first.t as f64;
        let mut row_ends: Vec<f64> = Vec::new();
        let mut events: Vec<&Marker> = timeline.events.iter().collect();
        events.sort_by_key(|e| e.t);
        for e in events {
            let x = e.t as f64;
            // A label is about 7 px a character on a ~1000 px wide plot.
            let width = span * (e.label.len() as f64 * 7.5 + 8.0) / 1000.0;
            let row = row_ends
                .iter()
                .position(|&end| x > end)
                .unwrap_or(row_ends.len());
            if row == row_ends.len() {
                row_ends.push(0.0);
            }
            row_ends[row] = x + width;
            let label_y = y_end * (0.91 - 0.055 * row as f64);
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, 0.0), (x, y_end * 0.9)],
                    EVENT.mix(0.7).stroke_width(2),
                )))
                .map_err(draw_err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    e.label.clone(),
                    (x, label_y),
                    ("sans-serif", 14).into_font().color(&EVENT),
                )))
                .map_err(draw_err)?;
        }

        chart
            .draw_series(LineSeries::new(
                steps(rows, |r| r.desired),
                DESIRED.stroke_width(2),
            ))
            .map_err(draw_err)?
            .label("desired")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], DESIRED.stroke_width(2)));
        chart
            .draw_series(DashedLineSeries::new(
                steps(rows, |r| r.seen),
                7,
                4,
                SEEN.stroke_width(2),
            ))
            .map_err(draw_err)?
            .label("seen on the ledger")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], SEEN.stroke_width(2)));
        chart
            .draw_series(LineSeries::new(
                steps(rows, |r| r.live),
                LIVE.stroke_width(3),
            ))
            .map_err(draw_err)?
            .label("live")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], LIVE.stroke_width(3)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(draw_err)?;
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

    #[test]
    fn an_empty_run_is_refused() {
        let t = Timeline {
            title: "x".into(),
            rows: &[],
            period: 15,
            events: &[],
        };
        assert!(matches!(timeline_svg(&t), Err(PlotError::Empty(_))));
    }
}
