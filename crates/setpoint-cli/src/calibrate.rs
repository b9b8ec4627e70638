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
    /// The runtime's store (`sqlite:DIR` or `etcd://HOST:PORT`): fit from its own event log.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// With --store: the run's time scale, by which real milliseconds become the lab's (a
    /// delay of x ms at time scale s is x / s).
    #[arg(long, value_name = "S", default_value = "1", requires = "store")]
    pub time_scale: f64,
    /// Write the fitted model file here (TOML; docs/output.md, "Delay model files").
    #[arg(short = 'o', long, value_name = "MODEL.toml")]
    pub output: Option<PathBuf>,
    /// Also draw the fitted against the measured CDF: FILE.svg, FILE.png or FILE.html.
    #[arg(long, value_name = "FILE", value_parser = crate::destination::picture)]
    pub plot: Option<crate::destination::Output>,
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
    if matches!(args.plot, Some(crate::destination::Output::Stdout)) {
        return Err(BadInput("--plot -: the picture would mix with the summary on stdout; accepted FILE.svg, FILE.png or FILE.html (or setpoint plot calibration MODEL.toml -o -)".into()).into());
    }
    let fits = if let Some(url) = &args.store {
        if args.files.len() > 1 || args.metric.is_some() || args.kind.is_some() {
            return Err(BadInput(
                "calibrate --store takes at most one WORKLOAD and neither --metric nor --as: the event log gives every delay it holds".into(),
            )
            .into());
        }
        let workload = args.files.first().map(|p| p.display().to_string());
        setpoint_reality::calibrate::from_store(url, workload.as_deref(), args.time_scale).map_err(
            |e| {
                if e.is_bad_input() {
                    anyhow::Error::new(BadInput(e.to_string()))
                } else {
                    anyhow::Error::new(e)
                }
            },
        )?
    } else {
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
    if let Some(out) = &args.plot {
        // The line saying where the picture went goes to stderr, beside the notes.
        let text = out.write_picture(&crate::plot::calibration_svg(&fits)?)?;
        eprint!("{text}");
    }
    Ok(setpoint_sim::output::print(
        &calibrate::summary_records(&fits),
        args.format.into(),
        &["schema"],
    ))
}
