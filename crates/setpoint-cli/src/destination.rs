//! Where `-o` sends a picture or a page: a file whose extension says its format, or `-` for
//! standard output.
//!
//! The extension is checked when the command line is parsed, before any work, so `-o run.pdf`
//! costs nothing and exits 2, and a `.png` file always holds a PNG.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// The format of a file, from its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `.svg`: the picture as SVG text.
    Svg,
    /// `.png`: the picture rasterized by resvg with the bundled font.
    Png,
    /// `.html`: a self-contained page.
    Html,
}

impl Kind {
    fn extension(self) -> &'static str {
        match self {
            Kind::Svg => "svg",
            Kind::Png => "png",
            Kind::Html => "html",
        }
    }
}

/// Where `-o` writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// `-`: standard output, in the command's own text format (SVG for a picture, HTML for a
    /// page), and no "wrote" line.
    Stdout,
    /// A file, in the format its extension names.
    File(PathBuf, Kind),
}

/// What `plot` writes: a picture as SVG, PNG or an HTML page around the SVG.
const PICTURE: &[Kind] = &[Kind::Svg, Kind::Png, Kind::Html];
/// What `report` writes: its HTML page.
const PAGE: &[Kind] = &[Kind::Html];

fn parse(s: &str, accepted: &[Kind]) -> Result<Output, String> {
    if s == "-" {
        return Ok(Output::Stdout);
    }
    let list = accepted
        .iter()
        .map(|k| format!("FILE.{}", k.extension()))
        .collect::<Vec<_>>()
        .join(", ");
    let path = PathBuf::from(s);
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match accepted
        .iter()
        .find(|k| ext.as_deref() == Some(k.extension()))
    {
        Some(&kind) => Ok(Output::File(path, kind)),
        None => Err(format!(
            "the extension names the format; accepted: {list}, or - for standard output"
        )),
    }
}

/// The `value_parser` of a picture's `-o`.
pub fn picture(s: &str) -> Result<Output, String> {
    parse(s, PICTURE)
}

/// The `value_parser` of a page's `-o`.
pub fn page(s: &str) -> Result<Output, String> {
    parse(s, PAGE)
}

impl Output {
    /// Writes a picture, given as SVG, in the format the destination asks for; returns the
    /// line to print.
    pub fn write_picture(&self, svg: &str) -> anyhow::Result<String> {
        match self {
            Output::Stdout => to_stdout(svg.as_bytes()),
            Output::File(path, Kind::Svg) => to_file(path, svg.as_bytes()),
            Output::File(path, Kind::Png) => to_file(path, &setpoint_plot::svg_to_png(svg)?),
            Output::File(path, Kind::Html) => to_file(
                path,
                format!(
                    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>setpoint plot</title></head><body>\n{svg}\n</body></html>\n"
                )
                .as_bytes(),
            ),
        }
    }

    /// Writes an HTML page; returns the line to print.
    pub fn write_page(&self, html: &str) -> anyhow::Result<String> {
        match self {
            Output::Stdout => to_stdout(html.as_bytes()),
            Output::File(path, _) => to_file(path, html.as_bytes()),
        }
    }
}

fn to_stdout(bytes: &[u8]) -> anyhow::Result<String> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .context("writing to stdout")?;
    Ok(String::new())
}

fn to_file(path: &Path, bytes: &[u8]) -> anyhow::Result<String> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(format!("wrote {}\n", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extension_names_the_format_and_a_dash_is_stdout() {
        assert_eq!(picture("-"), Ok(Output::Stdout));
        assert_eq!(
            picture("a/run.PNG"),
            Ok(Output::File("a/run.PNG".into(), Kind::Png))
        );
        assert_eq!(
            picture("x.svg"),
            Ok(Output::File("x.svg".into(), Kind::Svg))
        );
        assert_eq!(
            page("r.html"),
            Ok(Output::File("r.html".into(), Kind::Html))
        );
    }

    #[test]
    fn other_extensions_are_refused_with_what_is_accepted() {
        for bad in ["run.pdf", "run", "/dev/null", "svg", "run.svg.gz"] {
            let e = picture(bad).unwrap_err();
            assert!(e.contains("FILE.svg, FILE.png, FILE.html"), "{bad}: {e}");
        }
        assert!(page("r.png").unwrap_err().contains("accepted: FILE.html,"));
    }
}
