//! Delay model files: what `setpoint calibrate -o MODEL.toml` writes and `empirical:MODEL.toml`
//! reads. `docs/output.md` ("Delay model files") defines every key.
//!
//! ```toml
//! format = "setpoint-delay-model"
//! version = 1
//!
//! [[delay]]
//! delay = "report-delay"        # which delay: report-delay, startup, death-report, …
//! source = "prometheus"         # prometheus, pod-list, event-list or event-log
//! from = "scrape.prom"          # the file or store it was fitted from
//! metric = "report_delay_seconds"
//! count = 2000                  # measured delays
//! ks = 0.0                      # KS distance of the fit to the data
//! band95 = 0.0304               # 95 % DKW band of the data
//! bucket_mass = 0.05            # a histogram's largest bucket share
//! knots = [[0.0, 0], [0.05, 1000], …]      # [probability, ms] of the fitted CDF
//! measured = [[0.05, 1000], …]             # [probability, ms] of the measured CDF
//! ```
//!
//! Probabilities are written with nine decimals, the resolution of [`CDF_ONE`], so a file read
//! back gives the same knots and the same draws.

use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;

use super::{DelayKind, Fit, Source};
use crate::empirical::{Empirical, Knot, CDF_ONE};

/// The `format` key every model file starts with.
pub const FORMAT: &str = "setpoint-delay-model";
/// The version of the format this build writes and reads.
pub const VERSION: u64 = 1;

/// A model file that could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ModelFileError {
    /// The file as named on the command line.
    pub path: String,
    /// What is wrong (with the line, where the TOML says), and what is accepted.
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    format: String,
    version: u64,
    #[serde(default)]
    delay: Vec<RawDelay>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDelay {
    delay: String,
    source: String,
    from: String,
    metric: Option<String>,
    count: u64,
    ks: f64,
    band95: f64,
    bucket_mass: Option<f64>,
    pipeline: Option<String>,
    #[serde(default)]
    notes: Vec<String>,
    knots: Vec<(f64, u64)>,
    #[serde(default)]
    measured: Vec<(f64, u64)>,
}

fn prob(p: f64) -> String {
    let s = format!("{p:.9}");
    let s = s.trim_end_matches('0');
    if s.ends_with('.') {
        format!("{s}0")
    } else {
        s.to_owned()
    }
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// The model file of `fits`, one `[[delay]]` table each, in the given order.
pub fn to_toml(fits: &[Fit]) -> String {
    let mut out = format!("# A delay model fitted by `setpoint calibrate`: docs/output.md, \"Delay model files\".\nformat = \"{FORMAT}\"\nversion = {VERSION}\n");
    for f in fits {
        let _ = write!(
            out,
            "\n[[delay]]\ndelay = \"{}\"\nsource = \"{}\"\nfrom = {}\n",
            f.delay.name(),
            f.source.name(),
            quote(&f.from)
        );
        if let Some(m) = &f.metric {
            let _ = writeln!(out, "metric = {}", quote(m));
        }
        let _ = writeln!(
            out,
            "count = {}\nks = {}\nband95 = {}",
            f.count,
            prob(f.ks),
            prob(f.band95)
        );
        if let Some(b) = f.bucket_mass {
            let _ = writeln!(out, "bucket_mass = {}", prob(b));
        }
        if let Some(p) = &f.pipeline {
            let _ = writeln!(out, "pipeline = {}", quote(p));
        }
        if !f.notes.is_empty() {
            let notes: Vec<String> = f.notes.iter().map(|n| quote(n)).collect();
            let _ = writeln!(out, "notes = [{}]", notes.join(", "));
        }
        out.push_str("# [probability, milliseconds] of each knot of the fitted CDF, linear between knots\nknots = [\n");
        for k in f.cdf.knots() {
            let _ = writeln!(
                out,
                "  [{}, {}],",
                prob(k.cum as f64 / CDF_ONE as f64),
                k.ms
            );
        }
        out.push_str("]\n# [probability, milliseconds] of the measured CDF: a delay at most this, this often\nmeasured = [\n");
        for &(ms, p) in &f.measured {
            let _ = writeln!(out, "  [{}, {ms}],", prob(p));
        }
        out.push_str("]\n");
    }
    out
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Reads every fitted delay of a model file's text; `path` names it in errors and is each
/// distribution's label.
pub fn parse(path: &str, text: &str) -> Result<Vec<Fit>, ModelFileError> {
    let err = |message: String| ModelFileError {
        path: path.to_owned(),
        message,
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let at = e
            .span()
            .map(|s| format!("line {}: ", line_of(text, s.start)))
            .unwrap_or_default();
        err(format!(
            "{at}{}; accepted a model file written by setpoint calibrate",
            e.message().trim()
        ))
    })?;
    if raw.format != FORMAT || raw.version != VERSION {
        return Err(err(format!(
            "format '{}' version {}: accepted format \"{FORMAT}\" version {VERSION}",
            raw.format, raw.version
        )));
    }
    if raw.delay.is_empty() {
        return Err(err(
            "no [[delay]] table: accepted a model file with at least one".into(),
        ));
    }
    raw.delay
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let at = |m: String| err(format!("delay[{}]: {m}", i + 1));
            let delay = DelayKind::from_name(&d.delay).ok_or_else(|| {
                let names: Vec<&str> = DelayKind::ALL.iter().map(|k| k.name()).collect();
                at(format!(
                    "delay '{}': accepted {}",
                    d.delay,
                    names.join(", ")
                ))
            })?;
            let source = Source::from_name(&d.source).ok_or_else(|| {
                at(format!(
                    "source '{}': accepted prometheus, pod-list, event-list or event-log",
                    d.source
                ))
            })?;
            let bad_p = |p: f64| !(0.0..=1.0).contains(&p);
            if d.knots.iter().chain(&d.measured).any(|k| bad_p(k.0)) {
                return Err(at("a probability outside 0 to 1".into()));
            }
            let knots = d
                .knots
                .iter()
                .map(|&(p, ms)| Knot {
                    ms,
                    cum: (p * CDF_ONE as f64).round() as u64,
                })
                .collect();
            let cdf = Empirical::new(knots, path).map_err(|m| at(format!("knots: {m}")))?;
            Ok(Fit {
                delay,
                source,
                from: d.from,
                metric: d.metric,
                count: d.count,
                cdf,
                measured: d.measured.iter().map(|&(p, ms)| (ms, p)).collect(),
                ks: d.ks,
                band95: d.band95,
                bucket_mass: d.bucket_mass,
                pipeline: d.pipeline,
                notes: d.notes,
            })
        })
        .collect()
}

/// Reads a model file from disk.
pub fn load(path: &Path) -> Result<Vec<Fit>, ModelFileError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ModelFileError {
        path: name.clone(),
        message: format!("cannot read it: {e}"),
    })?;
    parse(&name, &text)
}

/// The model of `kind` in a model file: what `empirical:FILE` stands for.
pub fn load_kind(path: &Path, kind: DelayKind) -> Result<Empirical, ModelFileError> {
    let fits = load(path)?;
    let held: Vec<&str> = fits.iter().map(|f| f.delay.name()).collect();
    fits.iter()
        .find(|f| f.delay == kind)
        .map(|f| f.cdf.clone())
        .ok_or_else(|| ModelFileError {
            path: path.display().to_string(),
            message: format!(
                "holds no {kind} model (it holds: {}); accepted a model file with a [[delay]] whose delay is \"{kind}\"",
                held.join(", ")
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit() -> Fit {
        let xs = (0..250).map(|i| (i * i * 37) % 9001 + 400).collect();
        let mut f = Fit::from_samples(
            "m.json",
            Source::PodList,
            DelayKind::Startup,
            xs,
            vec!["a \"note\"".into()],
        )
        .unwrap();
        f.pipeline = Some("in-order".into());
        f
    }

    #[test]
    fn a_model_file_reads_back_as_it_was_written() {
        let f = fit();
        let text = to_toml(std::slice::from_ref(&f));
        let back = parse("m.json", &text).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].cdf, f.cdf);
        assert_eq!(
            (back[0].count, &back[0].notes, &back[0].pipeline),
            (f.count, &f.notes, &f.pipeline)
        );
        assert_eq!(back[0].measured.len(), f.measured.len());
        for (a, b) in back[0].measured.iter().zip(&f.measured) {
            assert_eq!(a.0, b.0);
            assert!((a.1 - b.1).abs() < 1e-9);
        }
        assert_eq!(to_toml(&back), text);
    }

    #[test]
    fn bad_model_files_say_where_and_what_is_accepted() {
        let good = to_toml(&[fit()]);
        let cases = [
            (
                good.replace("version = 1", "version = 7"),
                "accepted format",
            ),
            (
                good.replace("delay = \"startup\"", "delay = \"lunch\""),
                "delay[1]: delay 'lunch': accepted report-delay",
            ),
            (
                good.replace("source = \"pod-list\"", "source = \"tea-leaves\""),
                "accepted prometheus",
            ),
            (good.replace("count = 250", "count = -1"), "line "),
            (
                good.replace("count = 250", "count = 250\ncolour = 1"),
                "unknown field",
            ),
            (
                good.replacen("  [0.0, ", "  [0.5, ", 1),
                "knots: the first knot's probability must be 0",
            ),
            (good.replacen("  [0.01, ", "  [1.5, ", 1), "outside 0 to 1"),
            (
                "format = \"setpoint-delay-model\"\nversion = 1\n".into(),
                "no [[delay]]",
            ),
        ];
        for (text, what) in cases {
            let e = parse("m.toml", &text).unwrap_err().to_string();
            assert!(e.starts_with("m.toml: ") && e.contains(what), "{what}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn empirical_file_gives_the_model_of_its_kind_or_says_what_it_holds() {
        let dir = std::env::temp_dir().join(format!("setpoint-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.toml");
        std::fs::write(&path, to_toml(&[fit()])).unwrap();
        assert_eq!(
            load_kind(&path, DelayKind::Startup).unwrap().knots(),
            fit().cdf.knots()
        );
        let e = load_kind(&path, DelayKind::ReportDelay)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("holds no report-delay model (it holds: startup)"),
            "{e}"
        );
        let model =
            crate::delay::parse_startup_model(&format!("empirical:{}", path.display())).unwrap();
        assert!(model.is_random());
        assert!(crate::delay::parse_delay_model(&format!("empirical:{}", path.display())).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
