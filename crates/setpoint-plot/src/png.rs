//! SVG to PNG, through resvg (pure Rust) with the one font this crate ships.
//!
//! The pictures name the generic family `sans-serif`. A rasterizer that looked for system fonts
//! would draw a different picture on every machine, or no text at all on a machine without
//! fonts, so the font database holds exactly one face: DejaVu Sans, bundled by the `dejavu`
//! crate (Bitstream Vera licence with DejaVu's changes in the public domain; free to embed and
//! redistribute). Every generic family maps to it, so the same SVG gives the same PNG anywhere.

use std::sync::{Arc, OnceLock};

use resvg::{tiny_skia, usvg};

use crate::PlotError;

/// The font family every text of a PNG is drawn in.
pub const FONT_FAMILY: &str = "DejaVu Sans";

/// The most pixels a PNG may have (width x height): 16 megapixels, 64 MiB of RGBA. Our pictures
/// are about 0.6 megapixels; this only guards against a foreign SVG asking for a huge canvas.
pub const MAX_PNG_PIXELS: u64 = 16 * 1024 * 1024;

/// The font database, built once: loading the face parses its tables.
fn fonts() -> Arc<usvg::fontdb::Database> {
    static FONTS: OnceLock<Arc<usvg::fontdb::Database>> = OnceLock::new();
    FONTS
        .get_or_init(|| {
            let mut db = usvg::fontdb::Database::new();
            db.load_font_source(usvg::fontdb::Source::Binary(Arc::new(
                dejavu::sans::regular(),
            )));
            db.set_sans_serif_family(FONT_FAMILY);
            db.set_serif_family(FONT_FAMILY);
            db.set_monospace_family(FONT_FAMILY);
            db.set_cursive_family(FONT_FAMILY);
            db.set_fantasy_family(FONT_FAMILY);
            Arc::new(db)
        })
        .clone()
}

/// The options that parse our SVG with the bundled font.
fn options() -> usvg::Options<'static> {
    usvg::Options {
        font_family: FONT_FAMILY.to_owned(),
        fontdb: fonts(),
        ..usvg::Options::default()
    }
}

/// The width in pixels of `text` set in the bundled font at `size` pixels, from the glyphs'
/// outlines. Layout uses it to keep labels apart; DejaVu Sans is among the widest sans-serif
/// faces, so a browser's own sans-serif fits in the same room.
pub fn text_width(text: &str, size: f64) -> f64 {
    let escaped = text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="4000" height="100"><text x="0" y="50" font-family="sans-serif" font-size="{size}">{escaped}</text></svg>"#
    );
    let fallback = text.chars().count() as f64 * size * 0.65;
    match usvg::Tree::from_str(&svg, &options()) {
        Ok(tree) if tree.root().has_children() => f64::from(tree.root().abs_bounding_box().width()),
        _ => fallback,
    }
}

/// Rasterizes an SVG document at its own size (one pixel per SVG unit) on a white background,
/// and encodes it as PNG.
pub fn svg_to_png(svg: &str) -> Result<Vec<u8>, PlotError> {
    let tree =
        usvg::Tree::from_str(svg, &options()).map_err(|e| PlotError::Raster(e.to_string()))?;
    let size = tree.size().to_int_size();
    if u64::from(size.width()) * u64::from(size.height()) > MAX_PNG_PIXELS {
        return Err(PlotError::Raster(format!(
            "the picture is {}x{} pixels; at most {MAX_PNG_PIXELS} pixels are rasterized",
            size.width(),
            size.height()
        )));
    }
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| PlotError::Raster("the picture has no pixels".into()))?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap
        .encode_png()
        .map_err(|e| PlotError::Raster(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The width and height of a PNG, read from its IHDR chunk.
    fn dimensions(png: &[u8]) -> (u32, u32) {
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
        assert_eq!(&png[12..16], b"IHDR");
        let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
        let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
        (w, h)
    }

    fn decoded(png: &[u8]) -> tiny_skia::Pixmap {
        tiny_skia::Pixmap::decode_png(png).unwrap()
    }

    fn dark_pixels(p: &tiny_skia::Pixmap) -> usize {
        p.pixels()
            .iter()
            .filter(|c| u32::from(c.red()) + u32::from(c.green()) + u32::from(c.blue()) < 300)
            .count()
    }

    #[test]
    fn a_picture_becomes_a_png_of_its_own_size() {
        let svg = r#"<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40"><rect x="0" y="0" width="60" height="40" fill="black"/></svg>"#;
        let png = svg_to_png(svg).unwrap();
        assert_eq!(dimensions(&png), (120, 40));
        let p = decoded(&png);
        // The left half is the black rectangle, the right half the white background.
        assert_eq!(p.pixel(10, 10).unwrap().red(), 0);
        assert_eq!(p.pixel(100, 10).unwrap().red(), 255);
    }

    #[test]
    fn text_in_the_generic_family_is_drawn_with_the_bundled_font() {
        let blank = r#"<svg xmlns="http://www.w3.org/2000/svg" width="200" height="40"></svg>"#;
        let text = r#"<svg xmlns="http://www.w3.org/2000/svg" width="200" height="40"><text x="5" y="28" font-family="sans-serif" font-size="20" fill="black">overshoot</text></svg>"#;
        assert_eq!(dark_pixels(&decoded(&svg_to_png(blank).unwrap())), 0);
        // Without a font, usvg drops the text and the picture stays white.
        assert!(dark_pixels(&decoded(&svg_to_png(text).unwrap())) > 100);
    }

    #[test]
    fn text_width_grows_with_the_text_and_its_size() {
        let one = text_width("outage 90 s", 13.0);
        assert!(one > 40.0 && one < 110.0, "{one}");
        assert!(text_width("outage 90 s, then more", 13.0) > one + 40.0);
        assert!((text_width("outage 90 s", 26.0) / one - 2.0).abs() < 0.1);
        assert!(text_width("a < b & c", 13.0) > 30.0);
    }

    #[test]
    fn a_document_that_is_not_svg_is_a_raster_error() {
        assert!(matches!(svg_to_png("<html/>"), Err(PlotError::Raster(_))));
    }
}
