//! setpoint-plot: pictures of setpoint runs, as self-contained SVG text.
//!
//! People read a timeline faster than a table: where the live count climbs while the ledger
//! stays flat is exactly the blind window the lesson talks about. Every picture is an SVG string
//! with no external references (no fonts to load, no scripts, no links), so it can be written to
//! a file or inlined in an HTML page that makes no network requests.
//!
//! # Layout
//! - [`timeline`]: [`timeline_svg`], live, seen and desired copies over time, with rounds and
//!   events marked.
//! - [`heatmap`]: [`heatmap_svg`], overshoot over report delay × loop period, with the lesson's
//!   boundary `U = G + B` and the measured one.
//! - [`calibration`]: [`calibration_svg`], a calibration's fitted CDFs against the measured ones.
//! - [`chaos`]: [`chaos_svg`], one chaos run: live processes per node against desired, with a
//!   lane per host for its faults, the `/leader` holder and the first violation.
//! - [`png`]: [`svg_to_png`], any of these pictures as PNG, rasterized by resvg with the one
//!   font this crate ships, so text renders the same on every machine.

pub mod calibration;
pub mod chaos;
pub mod heatmap;
mod legend;
pub mod png;
pub mod timeline;

pub use calibration::calibration_svg;
pub use chaos::{chaos_svg, ChaosTimeline, FaultBar, NodeSeries};
pub use heatmap::{heatmap_svg, Heatmap, Scale};
pub use png::svg_to_png;
pub use timeline::{timeline_svg, Downsample, Marker, Span, SpanKind, Timeline};

/// A picture that could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// There is nothing to draw: the run has no seconds, or the grid no cells. Give a run with a
    /// duration, or a grid with at least one delay and one period.
    #[error("nothing to plot: {0}")]
    Empty(&'static str),
    /// The grid's values do not fit its axes: each delay needs one overshoot per period.
    #[error("the heatmap has {cells} values for {delays} delays x {periods} periods")]
    Shape {
        /// Values given.
        cells: usize,
        /// Delays given.
        delays: usize,
        /// Periods given.
        periods: usize,
    },
    /// The SVG could not be rasterized into a PNG. This is a bug in setpoint for its own
    /// pictures; please report the command.
    #[error("cannot rasterize the picture: {0}")]
    Raster(String),
    /// The drawing library failed. This is a bug in setpoint; please report the command.
    #[error("drawing failed: {0}")]
    Draw(String),
}

/// Labels whole numbers only: counts of copies and seconds have no fractions, and a tick at a
/// fraction would print a repeated, rounded label.
fn whole(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        String::new()
    }
}

/// Turns a plotters error into a [`PlotError`].
fn draw_err<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError::Draw(format!("{e:?}"))
}
