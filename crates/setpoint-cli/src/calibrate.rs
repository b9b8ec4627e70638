//! `setpoint calibrate`: an empirical delay model fitted from measurements: Prometheus
//! histograms, Kubernetes pod and event lists, or the runtime's own event log (`--store`). The
//! fitting and the file format are setpoint-sim's ([`setpoint_sim::calibrate`]).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use setpoint_sim::calibrate::{self, model_file, DelayKind, Request};

use crate::output::Format;
use crate::BadInput;

/// `setpoint calibrate` arguments.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Measurement files: Prometheus text (`curl …/metrics`) or `kubectl get pods|events -o
    /// json`, told apart by their content. With --store: at most one workload name instead.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The Prometheus histogram to read (`NAME` of its `NAME_bucket` lines); needed when a
    /// scrape holds several.
    #[arg(long, value_name = "NAME")]
    pub metric: Option<String>,
    /// Which delay the measurement stands for: report-delay or startup [default: report-delay
    /// for a histogram, startup for a pod or event list].
    #[arg(long = "as", value_name = "DELAY", value_parser = delay_kind)]
    pub kind: Option<DelayKind>,
    /// Write the fitted model file here (TOML; docs/output.md, "Delay model files").
    #[arg(short = 'o', long, value_name = "MODEL.toml")]
    pub output: Option<PathBuf>,
    /// The summary's format: one record per fitted delay.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

fn delay_kind(s: &str) -> Result<DelayKind, String> {
    match DelayKind::from_name(s) {
        Some(k @ (DelayKind::ReportDelay | DelayKind::Startup)) => Ok(k),
        _ => Err(format!(
            "'{s}' is not accepted: accepted report-delay or startup"
        )),
    }
}

/// Runs `calibrate` and returns the summary it prints; notes go to stderr.
pub fn run(args: &CalibrateArgs) -> anyhow::Result<String> {
    let fits = {
        if args.files.is_empty() {
            return Err(BadInput(
                    "calibrate needs a FILE (Prometheus text or kubectl … -o json) or --store URL; usage: setpoint calibrate FILE... [--metric NAME] [--as report-delay|startup] [-o MODEL.toml]".into(),
                )
                .into());
        }
        let req = Request {
            metric: args.metric.clone(),
            kind: args.kind,
        };
        let mut fits = Vec::new();
        for path in &args.files {
            fits.extend(calibrate::calibrate_file(path, &req)?);
        }
        fits
    };
    for f in &fits {
        for note in &f.notes {
            eprintln!("note: {} ({}): {note}", f.from, f.delay);
        }
    }
    if let Some(path) = &args.output {
        std::fs::write(path, model_file::to_toml(&fits))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(setpoint_sim::output::print(
        &calibrate::summary_records(&fits),
        args.format.into(),
        &["schema"],
    ))
}
