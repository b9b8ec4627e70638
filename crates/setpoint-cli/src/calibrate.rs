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
    /// json`, told apart by their content; or a live endpoint, http://HOST:PORT/metrics, read
    /// once. With --store: at most one workload name instead.
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
            let name = path.display().to_string();
            if name.starts_with("http://") || name.starts_with("https://") {
                let text = scrape(&name)?;
                fits.extend(calibrate::calibrate_text(&name, &text, &req)?);
            } else {
                fits.extend(calibrate::calibrate_file(path, &req)?);
            }
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

/// The most a scrape may be: far above any exporter's page, far below what would hurt.
const MAX_SCRAPE: u64 = 64 << 20;

/// How long a scrape may take to connect, and each read or write.
const SCRAPE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads `url` (`http://HOST:PORT/PATH`) once with a plain HTTP/1.0 GET, as Prometheus would
/// scrape it, and returns the body. HTTP/1.0 asks the server for a body without chunked
/// encoding, ended by its length or by closing.
fn scrape(url: &str) -> Result<String, calibrate::CalibrateError> {
    use std::io::{Read, Write};
    use std::net::ToSocketAddrs;
    let bad = |m: String| calibrate::CalibrateError::Unusable {
        file: url.to_owned(),
        message: m,
    };
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        bad(
            "https is not read here: accepted http://HOST:PORT/PATH, or a file saved with curl"
                .into(),
        )
    })?;
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
    if authority.is_empty() || authority.contains('@') {
        return Err(bad("no host: accepted http://HOST:PORT/PATH".into()));
    }
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let addr = with_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            bad(format!(
                "cannot resolve '{authority}': accepted http://HOST:PORT/PATH"
            ))
        })?;
    let mut conn = std::net::TcpStream::connect_timeout(&addr, SCRAPE_TIMEOUT)
        .map_err(|e| bad(format!("cannot connect to {addr}: {e}")))?;
    let io = |e: std::io::Error| bad(format!("reading the scrape: {e}"));
    conn.set_read_timeout(Some(SCRAPE_TIMEOUT)).map_err(io)?;
    conn.set_write_timeout(Some(SCRAPE_TIMEOUT)).map_err(io)?;
    write!(
        conn,
        "GET {path} HTTP/1.0\r\nHost: {authority}\r\nAccept: text/plain;version=0.0.4, application/openmetrics-text;q=0.5\r\nConnection: close\r\n\r\n"
    )
    .map_err(io)?;
    let mut raw = Vec::new();
    conn.take(MAX_SCRAPE + 1)
        .read_to_end(&mut raw)
        .map_err(io)?;
    if raw.len() as u64 > MAX_SCRAPE {
        return Err(bad(format!("the scrape is over {} MiB", MAX_SCRAPE >> 20)));
    }
    let text = String::from_utf8(raw).map_err(|_| bad("the scrape is not UTF-8 text".into()))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| bad("the answer is not HTTP: no end of its headers".into()))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(bad(format!("the server answered '{status}': accepted 200")));
    }
    Ok(body.to_owned())
}
