//! A calibration's fit against its data: the fitted CDF of each delay as a line, the measured
//! CDF beside it (a histogram's bucket bounds as dots, samples as a step line), so a reader sees
//! where the fit follows the data and where the data say nothing (inside a wide bucket, past the
//! last finite bound).

use plotters::prelude::*;
use setpoint_sim::calibrate::Fit;

use crate::legend::{self, Entry, Swatch};
use crate::{draw_err, PlotError};

const COLOURS: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(120, 120, 120),
];

/// Draws `fits` (at most seven, each in its own colour) as an SVG document titled `title`.
pub fn calibration_svg(title: &str, fits: &[Fit]) -> Result<String, PlotError> {
    if fits.is_empty() {
        return Err(PlotError::Empty("the model holds no fitted delay"));
    }
    let fits = &fits[..fits.len().min(COLOURS.len())];
    let max_s = fits
        .iter()
        .map(|f| f.cdf.max_ms().max(f.measured.last().map_or(0, |m| m.0)))
        .max()
        .unwrap_or(0) as f64
        / 1000.0;
    let x_max = (max_s * 1.05).max(1.0);
    let mut entries = Vec::new();
    for (f, &c) in fits.iter().zip(&COLOURS) {
        let what = match &f.metric {
            Some(m) => format!("{} ({m})", f.delay),
            None => format!("{} ({})", f.delay, f.source.name()),
        };
        entries.push(Entry {
            swatch: Swatch::Line(c, 2, false),
            label: format!("{what}: fit, KS {:.3}", f.ks),
        });
        entries.push(Entry {
            swatch: if f.source.has_samples() {
                Swatch::Line(c, 1, true)
            } else {
                Swatch::Dot(c)
            },
            label: format!("measured, {} samples", f.count),
        });
    }
    let mut svg = String::new();
    {
        let strip = legend::height(&entries, 900, 68);
        let root = SVGBackend::with_string(&mut svg, (900, 560 + strip as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let (main, below) = root.split_vertically(560);
        let mut chart = ChartBuilder::on(&main)
            .caption(title, ("sans-serif", 19))
            .margin(14)
            .x_label_area_size(42)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..x_max, 0.0..1.0)
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .x_desc("delay (seconds)")
            .y_desc("share of delays at most this")
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(draw_err)?;
        for (f, &c) in fits.iter().zip(&COLOURS) {
            let s = |ms: u64| ms as f64 / 1000.0;
            let mut fitted: Vec<(f64, f64)> = vec![(0.0, 0.0)];
            fitted.extend(f.cdf.knots().iter().map(|k| (s(k.ms), k.cum as f64 / 1e9)));
            fitted.push((x_max, 1.0));
            chart
                .draw_series(LineSeries::new(fitted, c.stroke_width(2)))
                .map_err(draw_err)?;
            if f.source.has_samples() {
                // The step CDF: flat until each value, then up to its share.
                let mut steps = vec![(0.0, 0.0)];
                let mut p = 0.0;
                for &(ms, q) in &f.measured {
                    steps.push((s(ms), p));
                    steps.push((s(ms), q));
                    p = q;
                }
                steps.push((x_max, p));
                chart
                    .draw_series(DashedLineSeries::new(steps, 4, 3, c.stroke_width(1)))
                    .map_err(draw_err)?;
            } else {
                chart
                    .draw_series(
                        f.measured
                            .iter()
                            .map(|&(ms, q)| Circle::new((s(ms), q), 4, c.filled())),
                    )
                    .map_err(draw_err)?;
            }
        }
        legend::draw(&below, &entries, 68)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use setpoint_sim::calibrate::{calibrate_text, Request};

    #[test]
    fn a_fit_draws_its_line_and_its_measured_points() {
        let text =
            "d_bucket{le=\"1\"} 2\nd_bucket{le=\"2\"} 7\nd_bucket{le=\"+Inf\"} 8\nd_sum 11\n";
        let fits = calibrate_text("d.prom", text, &Request::default()).unwrap();
        let svg = calibration_svg("t", &fits).unwrap();
        // One dot per finite bucket, and one in the legend.
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("report-delay (d): fit, KS 0.000"));
        assert!(svg.contains("measured, 8 samples"));
        assert!(matches!(
            calibration_svg("t", &[]),
            Err(PlotError::Empty(_))
        ));
    }
}
