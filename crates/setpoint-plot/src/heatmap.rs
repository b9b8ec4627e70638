//! Overshoot over report delay × loop period.

use plotters::prelude::*;

use crate::legend::{self, Entry, Swatch};
use crate::{draw_err, whole, PlotError};

/// What a heatmap shows.
#[derive(Debug, Clone)]
pub struct Heatmap<'a> {
    /// The title over the chart.
    pub title: String,
    /// Report delays G, in seconds, ascending: the rows (vertical axis).
    pub delays: &'a [u64],
    /// Loop periods U, in seconds, ascending: the columns (horizontal axis).
    pub periods: &'a [u64],
    /// Measured overshoot, one per cell, row by row (all periods of the first delay first).
    pub overshoot: &'a [u64],
    /// Startup time B, in seconds, for the lesson's boundary `U = G + B`.
    pub startup: u64,
    /// Per cell, in the order of `overshoot`: whether the lesson's relation mispredicts it.
    /// Empty to mark none.
    pub lesson_wrong: &'a [bool],
    /// Names of the rows when they are report-delay models rather than delays in seconds (a
    /// sweep's `--delay-model` axis), one per entry of `delays`, drawn in the given order; empty
    /// for delays in seconds. With names, the rows are evenly spaced and the lesson's boundary
    /// `U = G + B`, which needs a number G, is not drawn.
    pub row_labels: &'a [String],
    /// The colour scale's heading: what colours a cell (`overshoot`, `p_overshoot (%)`, …).
    pub scale: &'a str,
    /// How values map to colours: [`Scale::Overshoot`] for counts whose goal is 0, which also
    /// draws the measured boundary, or [`Scale::Linear`] for any other value (`stable`,
    /// `peak_live`), which has no boundary of zeros.
    pub kind: Scale,
}

/// How a heatmap maps a cell's value to a colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Pale grey for 0 (the goal), then a log scale up to the largest value; the measured
    /// boundary (where a row's zeros begin) is drawn.
    Overshoot,
    /// Linear from the smallest value in the picture to the largest; no boundary.
    Linear,
}

impl Scale {
    /// The colour of `v` in a picture whose values run from `min` to `max`.
    fn colour(self, v: u64, min: u64, max: u64) -> RGBColor {
        match self {
            Scale::Overshoot => colour(v, max),
            Scale::Linear if max == min => ramp(0.5),
            Scale::Linear => ramp((v.saturating_sub(min)) as f64 / (max - min) as f64),
        }
    }

    /// The values the colour scale shows, ascending, each once: at most eleven, from `min` (0
    /// for overshoot) to `max`. One value when every cell has it.
    fn labels(self, min: u64, max: u64) -> Vec<u64> {
        let steps = 10u64;
        let mut v: Vec<u64> = match self {
            Scale::Overshoot => (0..=steps)
                .map(|k| match k {
                    0 => 0,
                    // Log-spaced between 1 and max.
                    _ => ((1.0 + max as f64).powf(k as f64 / steps as f64) - 1.0).round() as u64,
                })
                .collect(),
            Scale::Linear => (0..=steps)
                .map(|k| min + ((max - min) as f64 * k as f64 / steps as f64).round() as u64)
                .collect(),
        };
        v.dedup();
        v
    }
}

const LESSON: RGBColor = RGBColor(20, 20, 20);
const MEASURED: RGBColor = RGBColor(0, 150, 200);

/// Colour stops from "no overshoot" to "the most overshoot in the picture".
const STOPS: [(f64, (u8, u8, u8)); 5] = [
    (0.0, (255, 247, 188)),
    (0.25, (254, 196, 79)),
    (0.5, (236, 112, 20)),
    (0.75, (204, 40, 40)),
    (1.0, (102, 0, 40)),
];

/// The colour of an overshoot: pale grey for 0, then a log scale up to `max`.
fn colour(v: u64, max: u64) -> RGBColor {
    if v == 0 {
        return RGBColor(238, 238, 238);
    }
    ramp(((1.0 + v as f64).ln() / (1.0 + max.max(1) as f64).ln()).clamp(0.0, 1.0))
}

/// The colour at `f`, from 0 to 1, along the stops.
fn ramp(f: f64) -> RGBColor {
    let f = f.clamp(0.0, 1.0);
    let i = STOPS
        .iter()
        .position(|s| s.0 >= f)
        .unwrap_or(STOPS.len() - 1)
        .max(1);
    let (f0, a) = STOPS[i - 1];
    let (f1, b) = STOPS[i];
    let w = if f1 > f0 { (f - f0) / (f1 - f0) } else { 1.0 };
    let mix = |x: u8, y: u8| (f64::from(x) + (f64::from(y) - f64::from(x)) * w).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// The span a value's cell covers: halfway to each neighbour.
fn spans(values: &[u64]) -> Vec<(f64, f64)> {
    let v: Vec<f64> = values.iter().map(|&x| x as f64).collect();
    (0..v.len())
        .map(|i| {
            let lo = if i == 0 {
                v[0] - if v.len() > 1 {
                    (v[1] - v[0]) / 2.0
                } else {
                    0.5
                }
            } else {
                (v[i - 1] + v[i]) / 2.0
            };
            let hi = if i + 1 == v.len() {
                v[i] + if i > 0 { (v[i] - v[i - 1]) / 2.0 } else { 0.5 }
            } else {
                (v[i] + v[i + 1]) / 2.0
            };
            (lo, hi)
        })
        .collect()
}

/// For each delay, the smallest period from which every larger period in the grid has zero
/// overshoot; `None` where even the largest period overshoots.
pub fn measured_boundary(h: &Heatmap) -> Vec<Option<u64>> {
    let n = h.periods.len();
    (0..h.delays.len())
        .map(|row| {
            let cells = &h.overshoot[row * n..(row + 1) * n];
            let zeros = cells.iter().rev().take_while(|&&v| v == 0).count();
            (zeros > 0).then(|| h.periods[n - zeros])
        })
        .collect()
}

/// Draws `heatmap` as an SVG document.
pub fn heatmap_svg(h: &Heatmap) -> Result<String, PlotError> {
    if h.delays.is_empty() || h.periods.is_empty() {
        return Err(PlotError::Empty("the grid has no cells"));
    }
    if !h.row_labels.is_empty() && h.row_labels.len() != h.delays.len() {
        return Err(PlotError::Shape {
            cells: h.row_labels.len(),
            delays: h.delays.len(),
            periods: 1,
        });
    }
    if h.overshoot.len() != h.delays.len() * h.periods.len() {
        return Err(PlotError::Shape {
            cells: h.overshoot.len(),
            delays: h.delays.len(),
            periods: h.periods.len(),
        });
    }
    let max = h.overshoot.iter().copied().max().unwrap_or(0);
    let min = h.overshoot.iter().copied().min().unwrap_or(0);
    let boundary = h.kind == Scale::Overshoot;
    let xs = spans(h.periods);
    let named = !h.row_labels.is_empty();
    // Named rows (delay models) sit at 0, 1, 2, … in the given order.
    let row_at: Vec<u64> = (0..h.delays.len() as u64).collect();
    let ys = spans(if named { &row_at } else { h.delays });
    let x_range = xs[0].0..xs[xs.len() - 1].1;
    let y_range = ys[0].0..ys[ys.len() - 1].1;
    let mut svg = String::new();
    {
        let mut entries = vec![
            Entry {
                swatch: Swatch::Dot(LESSON),
                label: "lesson's relation mispredicts this cell".into(),
            },
            Entry {
                swatch: Swatch::Line(LESSON, 2, false),
                label: format!("lesson's boundary U = G + B (B = {})", h.startup),
            },
            Entry {
                swatch: Swatch::Line(MEASURED, 3, true),
                label: "measured boundary (overshoot 0 to its right)".into(),
            },
        ];
        if !boundary {
            entries.pop();
        }
        if named {
            // No number G for the lesson's relation or boundary.
            entries.drain(..2);
        }
        // The series legend gets a strip of its own under the chart, and the colour scale a
        // column to its right: neither covers a cell.
        let strip = legend::height(&entries, 870, 68);
        let root =
            SVGBackend::with_string(&mut svg, (1000, 680 + strip as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let (upper, below) = root.split_vertically(680);
        let (main, legend) = upper.split_horizontally(870);
        let mut chart = ChartBuilder::on(&main)
            .caption(&h.title, ("sans-serif", 19))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(if named {
                // Room for the longest model name at 13 px per character, at most a third.
                let longest = h.row_labels.iter().map(|l| l.chars().count()).max();
                (longest.unwrap_or(0) as u32 * 8 + 28).clamp(56, 290)
            } else {
                56
            })
            .build_cartesian_2d(x_range.clone(), y_range.clone())
            .map_err(draw_err)?;
        let row_name = |y: &f64| {
            let k = y.round();
            if (y - k).abs() < 1e-9 && k >= 0.0 {
                h.row_labels.get(k as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        let mut mesh = chart.configure_mesh();
        mesh.disable_mesh()
            .x_label_formatter(&whole)
            .x_desc("loop period U (seconds)");
        if named {
            mesh.y_labels(h.row_labels.len() + 1)
                .y_label_formatter(&row_name)
                .y_desc("report-delay model");
        } else {
            mesh.y_label_formatter(&whole)
                .y_desc("report delay G (seconds)");
        }
        mesh.draw().map_err(draw_err)?;
        let n = h.periods.len();
        chart
            .draw_series(h.overshoot.iter().enumerate().map(|(i, &v)| {
                let (row, col) = (i / n, i % n);
                Rectangle::new(
                    [(xs[col].0, ys[row].0), (xs[col].1, ys[row].1)],
                    h.kind.colour(v, min, max).filled(),
                )
            }))
            .map_err(draw_err)?;

        // Cells where the lesson's relation mispredicts: a dot each.
        chart
            .draw_series(
                h.lesson_wrong
                    .iter()
                    .enumerate()
                    .filter(|(_, &wrong)| wrong)
                    .map(|(i, _)| {
                        let (row, col) = (i / n, i % n);
                        let x = (xs[col].0 + xs[col].1) / 2.0;
                        let y = (ys[row].0 + ys[row].1) / 2.0;
                        Circle::new((x, y), 2, LESSON.filled())
                    }),
            )
            .map_err(draw_err)?;

        // The lesson's boundary U = G + B, clipped to the picture (plotters would clamp).
        let b = h.startup as f64;
        let g_lo = y_range.start.max(x_range.start - b);
        let g_hi = y_range.end.min(x_range.end - b);
        let lesson = if g_lo < g_hi && !named {
            vec![(g_lo + b, g_lo), (g_hi + b, g_hi)]
        } else {
            Vec::new()
        };
        chart
            .draw_series(std::iter::once(PathElement::new(
                lesson,
                LESSON.stroke_width(2),
            )))
            .map_err(draw_err)?;

        // The measured boundary: left edge of each row's zero run, drawn as steps.
        let mut path = Vec::new();
        let rows = if boundary {
            measured_boundary(h)
        } else {
            Vec::new()
        };
        for (row, b) in rows.iter().enumerate() {
            let x = match b {
                Some(u) => {
                    xs[h.periods
                        .iter()
                        .position(|p| p == u)
                        .expect("a grid period")]
                    .0
                }
                None => x_range.end,
            };
            path.push((x, ys[row].0));
            path.push((x, ys[row].1));
        }
        chart
            .draw_series(DashedLineSeries::new(path, 8, 5, MEASURED.stroke_width(3)))
            .map_err(draw_err)?;
        legend::draw(&below, &entries, 68)?;

        // The colour scale.
        legend
            .draw(&Text::new(
                h.scale,
                (10, 40),
                ("sans-serif", 14).into_font(),
            ))
            .map_err(draw_err)?;
        for (k, v) in h.kind.labels(min, max).into_iter().enumerate() {
            let y = 60 + (k as i32) * 52;
            legend
                .draw(&Rectangle::new(
                    [(12, y), (42, y + 40)],
                    h.kind.colour(v, min, max).filled(),
                ))
                .map_err(draw_err)?;
            legend
                .draw(&Text::new(
                    v.to_string(),
                    (50, y + 14),
                    ("sans-serif", 13).into_font(),
                ))
                .map_err(draw_err)?;
        }
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid<'a>(delays: &'a [u64], periods: &'a [u64], overshoot: &'a [u64]) -> Heatmap<'a> {
        Heatmap {
            title: "t".into(),
            delays,
            periods,
            overshoot,
            startup: 5,
            lesson_wrong: &[],
            row_labels: &[],
            scale: "overshoot",
            kind: Scale::Overshoot,
        }
    }

    #[test]
    fn measured_boundary_is_where_the_zero_run_starts() {
        let h = grid(&[0, 10], &[5, 10, 15], &[0, 0, 0, 12, 6, 0]);
        assert_eq!(measured_boundary(&h), vec![Some(5), Some(15)]);
        let h = grid(&[90], &[5, 10], &[3, 1]);
        assert_eq!(measured_boundary(&h), vec![None]);
    }

    #[test]
    fn cells_span_halfway_to_their_neighbours() {
        assert_eq!(
            spans(&[5, 10, 20]),
            vec![(2.5, 7.5), (7.5, 15.0), (15.0, 25.0)]
        );
        assert_eq!(spans(&[7]), vec![(6.5, 7.5)]);
    }

    #[test]
    fn colour_scale_runs_from_grey_to_dark_red() {
        assert_eq!(colour(0, 10), RGBColor(238, 238, 238));
        assert_eq!(colour(10, 10), RGBColor(102, 0, 40));
        assert_ne!(colour(1, 10), colour(5, 10));
    }

    #[test]
    fn the_colour_scale_lists_each_value_once_and_one_when_every_cell_is_equal() {
        assert_eq!(Scale::Overshoot.labels(0, 0), [0]);
        assert_eq!(Scale::Overshoot.labels(0, 3), [0, 1, 2, 3]);
        assert_eq!(Scale::Overshoot.labels(0, 1000).len(), 11);
        assert_eq!(Scale::Linear.labels(305, 305), [305]);
        let l = Scale::Linear.labels(300, 900);
        assert_eq!((l[0], l[10], l[1]), (300, 900, 360));
    }

    #[test]
    fn a_linear_scale_spreads_values_far_from_zero_over_the_stops() {
        // `stable` runs from 305 to 900 s: on the overshoot scale all would be dark red.
        let (lo, hi) = (
            Scale::Linear.colour(305, 305, 900),
            Scale::Linear.colour(900, 305, 900),
        );
        assert_eq!(lo, ramp(0.0));
        assert_eq!(hi, ramp(1.0));
        assert_ne!(Scale::Overshoot.colour(305, 0, 900), lo);
        let svg = heatmap_svg(&Heatmap {
            kind: Scale::Linear,
            scale: "stable",
            ..grid(&[0, 10], &[5, 10], &[305, 310, 900, 600])
        })
        .unwrap();
        assert!(!svg.contains("measured boundary"), "no zeros to bound");
    }

    #[test]
    fn a_misshapen_grid_is_refused() {
        let h = grid(&[0, 10], &[5], &[0]);
        assert!(matches!(heatmap_svg(&h), Err(PlotError::Shape { .. })));
    }
}
