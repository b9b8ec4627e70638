//! A legend drawn in its own strip beside the data, never over it.
//!
//! plotters draws series labels inside the plotting area, where they cover lines and cells. Our
//! pictures give the legend a strip of its own below the chart and lay its entries out from
//! left to right with the bundled font's real widths, wrapping to a new row when one is full.

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::png::text_width;
use crate::{draw_err, PlotError};

/// How an entry's sample looks.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Swatch {
    /// A line of this colour and width, solid or dashed.
    Line(RGBColor, u32, bool),
    /// A wide translucent band, as the desired line is drawn.
    Band(RGBColor, f64),
    /// A filled box of this colour and opacity, as a shaded span.
    Shade(RGBColor, f64),
    /// A filled triangle.
    Triangle(RGBColor),
    /// A cross.
    Cross(RGBColor),
    /// A dot.
    Dot(RGBColor),
    /// A short vertical tick.
    Tick(RGBColor),
    /// No sample: a note.
    Nothing,
}

/// One legend entry.
pub(crate) struct Entry {
    /// Its sample.
    pub swatch: Swatch,
    /// Its text.
    pub label: String,
}

/// Font size of legend text, in pixels.
pub(crate) const SIZE: f64 = 13.0;
/// Height of one legend row, in pixels.
pub(crate) const ROW: i32 = 20;
const SAMPLE: i32 = 22;
const GAP: i32 = 18;

/// The rows `entries` need in a strip `width` pixels wide, as (x, row) per entry.
fn layout(entries: &[Entry], width: i32, left: i32) -> (Vec<(i32, i32)>, i32) {
    let mut at = Vec::with_capacity(entries.len());
    let (mut x, mut row) = (left, 0);
    for e in entries {
        let w = SAMPLE + 6 + text_width(&e.label, SIZE).ceil() as i32;
        if x > left && x + w > width - 8 {
            x = left;
            row += 1;
        }
        at.push((x, row));
        x += w + GAP;
    }
    (at, if entries.is_empty() { 0 } else { row + 1 })
}

/// The height in pixels of a legend strip for `entries` in `width` pixels.
pub(crate) fn height(entries: &[Entry], width: i32, left: i32) -> i32 {
    layout(entries, width, left).1 * ROW + 8
}

/// Draws `entries` on `area`, from pixel `left` on.
pub(crate) fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[Entry],
    left: i32,
) -> Result<(), PlotError> {
    let width = area.dim_in_pixel().0 as i32;
    let (at, _) = layout(entries, width, left);
    for (e, &(x, row)) in entries.iter().zip(&at) {
        let y = 4 + row * ROW + ROW / 2;
        let (a, b) = (x, x + SAMPLE);
        let mid = (a + b) / 2;
        match e.swatch {
            Swatch::Line(c, w, false) => area
                .draw(&PathElement::new(vec![(a, y), (b, y)], c.stroke_width(w)))
                .map_err(draw_err)?,
            Swatch::Line(c, w, true) => {
                for k in 0..3 {
                    let s = a + k * 8;
                    area.draw(&PathElement::new(
                        vec![(s, y), (s + 5, y)],
                        c.stroke_width(w),
                    ))
                    .map_err(draw_err)?;
                }
            }
            Swatch::Band(c, alpha) => area
                .draw(&PathElement::new(
                    vec![(a, y), (b, y)],
                    c.mix(alpha).stroke_width(9),
                ))
                .map_err(draw_err)?,
            Swatch::Shade(c, alpha) => area
                .draw(&Rectangle::new(
                    [(a, y - 7), (b, y + 7)],
                    c.mix(alpha).filled(),
                ))
                .map_err(draw_err)?,
            Swatch::Triangle(c) => area
                .draw(&TriangleMarker::new((mid, y), 6, c.filled()))
                .map_err(draw_err)?,
            Swatch::Cross(c) => area
                .draw(&Cross::new((mid, y), 5, c.stroke_width(2)))
                .map_err(draw_err)?,
            Swatch::Dot(c) => area
                .draw(&Circle::new((mid, y), 3, c.filled()))
                .map_err(draw_err)?,
            Swatch::Nothing => {}
            Swatch::Tick(c) => area
                .draw(&PathElement::new(vec![(mid, y - 6), (mid, y + 6)], c))
                .map_err(draw_err)?,
        }
        area.draw(&Text::new(
            e.label.clone(),
            (b + 6, y),
            ("sans-serif", SIZE).into_font().color(&BLACK).pos(
                plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Left,
                    plotters::style::text_anchor::VPos::Center,
                ),
            ),
        ))
        .map_err(draw_err)?;
    }
    Ok(())
}
