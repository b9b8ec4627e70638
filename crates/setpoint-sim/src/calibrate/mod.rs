//! Calibration: an empirical delay model fitted from measurements (`setpoint calibrate`).
//!
//! A measurement is either a set of **samples** (one delay per copy: a `kubectl get pods -o
//! json` list, an event list, the runtime's own event log) or a **histogram** (Prometheus text
//! format, bucket counts only). [`fit`] turns either into an [`Empirical`] CDF and measures how
//! far the fit lies from the data (the Kolmogorov–Smirnov distance); [`model_file`] writes and
//! reads the fitted models as TOML (`docs/output.md`, "Delay model files"), which
//! `--delay-model empirical:FILE` and `--startup-model empirical:FILE` load.
//!
//! # Layout
//! - [`fit`]: samples and histograms to a CDF, and the fit's error.
//! - [`prometheus`]: Prometheus text-format histograms.
//! - [`kube`]: Kubernetes pod lists and event lists (`kubectl … -o json`).
//! - [`model_file`]: the model file format.
//!
//! The runtime's event log is read in `setpoint-reality` (it needs the runtime), which hands
//! its samples to [`fit::fit_samples`].

pub mod fit;
pub mod kube;
pub mod model_file;
pub mod prometheus;

use std::fmt;

use crate::empirical::Empirical;

/// The fewest samples a fit is trusted from. Below it `calibrate` still writes the model but
/// says so: with fewer than 30 samples the 95 % Dvoretzky–Kiefer–Wolfowitz band around the
/// measured CDF is wider than 0.25, so the true distribution may lie a quarter of the
/// probability away from the fit anywhere.
pub const MIN_SAMPLES: u64 = 30;

/// Which delay a fitted model stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DelayKind {
    /// A copy's start (ready) to the ledger showing it: the report delay G.
    ReportDelay,
    /// A copy's creation to ready: the startup time B.
    Startup,
    /// A copy's death to the ledger showing it gone: the report delay of a death.
    DeathReport,
    /// A pod's creation to its `PodScheduled` condition.
    Scheduling,
    /// `PodScheduled` to `Initialized`.
    Initialization,
    /// `Initialized` to `ContainersReady`.
    Containers,
    /// `ContainersReady` to `Ready`.
    Readiness,
}

impl DelayKind {
    /// Every kind, in output order.
    pub const ALL: [DelayKind; 7] = [
        DelayKind::ReportDelay,
        DelayKind::Startup,
        DelayKind::DeathReport,
        DelayKind::Scheduling,
        DelayKind::Initialization,
        DelayKind::Containers,
        DelayKind::Readiness,
    ];

    /// Its name in model files, summaries and `--as`.
    pub fn name(self) -> &'static str {
        match self {
            DelayKind::ReportDelay => "report-delay",
            DelayKind::Startup => "startup",
            DelayKind::DeathReport => "death-report",
            DelayKind::Scheduling => "scheduling",
            DelayKind::Initialization => "initialization",
            DelayKind::Containers => "containers",
            DelayKind::Readiness => "readiness",
        }
    }

    /// The kind of this name.
    pub fn from_name(name: &str) -> Option<Self> {
        DelayKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for DelayKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a fitted model's measurements came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A Prometheus text-format histogram.
    Prometheus,
    /// A `kubectl get pods -o json` list.
    PodList,
    /// A `kubectl get events -o json` list.
    EventList,
    /// The runtime's own event log (`setpoint calibrate --store`).
    EventLog,
}

impl Source {
    /// Its name in model files and summaries.
    pub fn name(self) -> &'static str {
        match self {
            Source::Prometheus => "prometheus",
            Source::PodList => "pod-list",
            Source::EventList => "event-list",
            Source::EventLog => "event-log",
        }
    }

    /// The source of this name.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            Source::Prometheus,
            Source::PodList,
            Source::EventList,
            Source::EventLog,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }

    /// Whether its data are samples (one delay each) rather than bucket counts.
    pub fn has_samples(self) -> bool {
        self != Source::Prometheus
    }
}

/// One fitted delay: the CDF and what it was fitted from.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    /// Which delay it stands for.
    pub delay: DelayKind,
    /// What kind of measurement it came from.
    pub source: Source,
    /// The file (or store URL) as named on the command line.
    pub from: String,
    /// The Prometheus metric, for a histogram.
    pub metric: Option<String>,
    /// The number of measured delays (a histogram's total count).
    pub count: u64,
    /// The fitted distribution.
    pub cdf: Empirical,
    /// The measured CDF, as `(milliseconds, probability of a delay at most that)`: every bucket
    /// bound of a histogram, or every distinct sample value (at most
    /// [`crate::empirical::MAX_KNOTS`], evenly thinned beyond).
    pub measured: Vec<(u64, f64)>,
    /// The Kolmogorov–Smirnov distance between the fit and the measured CDF, where the data
    /// define it: at every sample, or at every bucket bound.
    pub ks: f64,
    /// The 95 % Dvoretzky–Kiefer–Wolfowitz band `√(ln(2/0.05) / 2n)`: with 95 % confidence the
    /// true CDF lies this close to the measured one everywhere. It shrinks with the count.
    pub band95: f64,
    /// For a histogram, the largest probability one bucket holds: inside a bucket the data say
    /// nothing, so the true CDF may differ from the fit by up to this much there.
    pub bucket_mass: Option<f64>,
    /// The report pipeline the event log shows (`docs/model.md`), for the runtime's own log.
    pub pipeline: Option<String>,
    /// What the fit assumed or left out, one sentence each.
    pub notes: Vec<String>,
}

impl Fit {
    /// The fit of samples `xs` (milliseconds) from `file` by [`fit::fit_samples`], with the
    /// source's `notes` before the fit's own.
    pub fn from_samples(
        file: &str,
        source: Source,
        kind: DelayKind,
        xs: Vec<u64>,
        mut notes: Vec<String>,
    ) -> Result<Fit, CalibrateError> {
        let count = xs.len() as u64;
        let f = fit::fit_samples(xs, file)
            .map_err(|m| CalibrateError::unusable(file, format!("{kind}: {m}")))?;
        notes.extend(f.notes);
        Ok(Fit {
            delay: kind,
            source,
            from: file.to_owned(),
            metric: None,
            count,
            cdf: f.cdf,
            measured: f.measured,
            ks: f.ks,
            band95: fit::band95(count),
            bucket_mass: None,
            pipeline: None,
            notes,
        })
    }

    /// Whether it was fitted from fewer than [`MIN_SAMPLES`] measurements.
    pub fn few_samples(&self) -> bool {
        self.count < MIN_SAMPLES
    }
}

/// Measurements that could not be read or fitted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibrateError {
    /// A file whose content is malformed: `at` names the line or field, the message what is
    /// wrong and what is accepted.
    #[error("{file}: {at}: {message}")]
    Bad {
        /// The file as named on the command line.
        file: String,
        /// Where: `line 12`, or a field such as `items[3].metadata.creationTimestamp`.
        at: String,
        /// What is wrong, and what is accepted.
        message: String,
    },
    /// A file that holds nothing calibrate can use as a whole: the message says why.
    #[error("{file}: {message}")]
    Unusable {
        /// The file as named on the command line.
        file: String,
        /// What is wrong, and what is accepted.
        message: String,
    },
}

impl CalibrateError {
    pub(crate) fn bad(file: &str, at: impl Into<String>, message: impl Into<String>) -> Self {
        CalibrateError::Bad {
            file: file.to_owned(),
            at: at.into(),
            message: message.into(),
        }
    }

    pub(crate) fn unusable(file: &str, message: impl Into<String>) -> Self {
        CalibrateError::Unusable {
            file: file.to_owned(),
            message: message.into(),
        }
    }
}

/// What `calibrate` is asked about one file.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// The Prometheus metric to read; needed when a scrape holds several histograms.
    pub metric: Option<String>,
    /// Which delay the measurement stands for: for a histogram, default `report-delay`; for a
    /// pod or event list, default `startup` (the only one they hold).
    pub kind: Option<DelayKind>,
}

/// Fits the delays of one file, whose kind is read from its content: JSON (`{…}`) is a
/// `kubectl … -o json` list of pods or events, anything else is Prometheus text.
pub fn calibrate_text(file: &str, text: &str, req: &Request) -> Result<Vec<Fit>, CalibrateError> {
    if text.trim_start().starts_with('{') {
        kube::calibrate(file, text, req)
    } else {
        prometheus::calibrate(file, text, req).map(|f| vec![f])
    }
}

/// [`calibrate_text`] on a file read from disk.
pub fn calibrate_file(path: &std::path::Path, req: &Request) -> Result<Vec<Fit>, CalibrateError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CalibrateError::unusable(&file, format!("cannot read it: {e}")))?;
    calibrate_text(&file, &text, req)
}

/// The summary record of one fitted delay (`docs/output.md`, "Calibration summaries"): one per
/// fit, in the given order.
pub fn summary_records(fits: &[Fit]) -> Vec<crate::output::Record> {
    use crate::output::{Record, Value};
    fits.iter()
        .map(|f| {
            let ms = |p: f64| f.cdf.quantile(p).round() as u64;
            let mut r = Record::new();
            r.push("delay", f.delay.name());
            r.push("source", f.source.name());
            r.push("from", f.from.as_str());
            r.push("metric", f.metric.clone().map_or(Value::Null, Value::Str));
            r.push("count", f.count);
            r.push("min_ms", f.cdf.min_ms());
            r.push("p50_ms", ms(0.5));
            r.push("p90_ms", ms(0.9));
            r.push("p99_ms", ms(0.99));
            r.push("max_ms", f.cdf.max_ms());
            r.push("mean_ms", f.cdf.mean_ms());
            r.push("ks", f.ks);
            r.push("band95", f.band95);
            r.push("bucket_mass", f.bucket_mass.map_or(Value::Null, Value::F64));
            r.push("few_samples", f.few_samples());
            r.push(
                "pipeline",
                f.pipeline.clone().map_or(Value::Null, Value::Str),
            );
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! Round trips: draws from a known model, written as a Prometheus histogram and as a pod
    //! list, calibrated back within a stated Kolmogorov–Smirnov distance of the known model.
    use super::fit::ks_between;
    use super::*;
    use crate::delay::WorldRng;
    use crate::empirical::{Knot, CDF_ONE};
    use std::fmt::Write as _;

    /// The known models: uniform 5 to 30 s (the jittered case) and a skewed one, 60 %
    /// between 2 and 4 s and a long tail to 20 s.
    fn known() -> Vec<Empirical> {
        let k = |ms, cum| Knot { ms, cum };
        vec![
            Empirical::new(vec![k(5000, 0), k(30_000, CDF_ONE)], "uniform").unwrap(),
            Empirical::new(
                vec![k(2000, 0), k(4000, 600_000_000), k(20_000, CDF_ONE)],
                "skewed",
            )
            .unwrap(),
        ]
    }

    fn draws(model: &Empirical, n: usize, seed: u64) -> Vec<u64> {
        let mut rng = WorldRng::new(seed);
        (0..n).map(|_| model.sample(&mut rng)).collect()
    }

    /// A scrape of `xs` as two series of one histogram (odd and even draws), bounds every
    /// second to 40 s, in seconds.
    fn scrape(xs: &[u64]) -> String {
        let mut out = String::from("# TYPE delay_seconds histogram\n");
        for node in 0..2 {
            let mine: Vec<u64> = xs.iter().skip(node).step_by(2).copied().collect();
            for le in 1..=40u64 {
                let c = mine.iter().filter(|&&x| x <= le * 1000).count();
                let _ = writeln!(
                    out,
                    "delay_seconds_bucket{{node=\"n{node}\",le=\"{le}\"}} {c}"
                );
            }
            let _ = writeln!(
                out,
                "delay_seconds_bucket{{node=\"n{node}\",le=\"+Inf\"}} {}",
                mine.len()
            );
            let sum: u64 = mine.iter().sum();
            let _ = writeln!(
                out,
                "delay_seconds_sum{{node=\"n{node}\"}} {}",
                sum as f64 / 1000.0
            );
            let _ = writeln!(
                out,
                "delay_seconds_count{{node=\"n{node}\"}} {}",
                mine.len()
            );
        }
        out
    }

    /// A pod list whose pods are created at any millisecond and turn Ready `x` ms later, with
    /// the apiserver's whole-second timestamps.
    fn pod_list(xs: &[u64]) -> String {
        let t = |ms: u64| {
            let s = 1_714_564_800 + ms / 1000; // 2024-05-01T12:00:00Z on
            let (h, m, sec) = (12 + (s - 1_714_564_800) / 3600, (s / 60) % 60, s % 60);
            format!("2024-05-{:02}T{:02}:{m:02}:{sec:02}Z", 1 + h / 24, h % 24)
        };
        let pods: Vec<String> = xs
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                // Creations at any millisecond, as on a real cluster: both ends are truncated.
                let created = i as u64 * 7000 + (i as u64 * 7919) % 1000;
                format!("{{\"kind\":\"Pod\",\"metadata\":{{\"name\":\"p{i}\",\"creationTimestamp\":\"{}\"}},\"status\":{{\"conditions\":[{{\"type\":\"Ready\",\"status\":\"True\",\"lastTransitionTime\":\"{}\"}}]}}}}", t(created), t(created + x))
            })
            .collect();
        format!("{{\"kind\":\"List\",\"items\":[{}]}}", pods.join(","))
    }

    #[test]
    fn a_histogram_of_known_draws_calibrates_back_within_the_stated_distance() {
        for (m, seed) in known().iter().zip([11, 12]) {
            let xs = draws(m, 4000, seed);
            let text = scrape(&xs);
            let fits = calibrate_text("s.prom", &text, &Request::default()).unwrap();
            let f = &fits[0];
            assert_eq!(f.count, 4000);
            let ks = ks_between(&f.cdf, m);
            // Stated bound: the data's 95 % band plus the largest bucket's share.
            let bound = f.band95 + f.bucket_mass.unwrap();
            assert!(
                ks <= bound && ks < 0.06,
                "{}: ks {ks} bound {bound}",
                m.label()
            );
        }
    }

    #[test]
    fn a_pod_list_of_known_draws_calibrates_back_within_the_stated_distance() {
        for (m, seed) in known().iter().zip([21, 22]) {
            let xs = draws(m, 1500, seed);
            let fits = calibrate_text("p.json", &pod_list(&xs), &Request::default()).unwrap();
            let f = fits.iter().find(|f| f.delay == DelayKind::Startup).unwrap();
            assert_eq!(f.count, 1500);
            let ks = ks_between(&f.cdf, m);
            // Stated bound: the 95 % band, the quantile table's step (1 %), and the whole-second
            // timestamps, which move a delay by up to 1 s: at most 1 s times the model's
            // steepest density (1/25 s⁻¹ uniform, 0.3 s⁻¹ skewed).
            let density = if m.label() == "uniform" { 0.04 } else { 0.3 };
            let bound = f.band95 + 0.01 + density;
            assert!(ks <= bound, "{}: ks {ks} bound {bound}", m.label());
        }
    }
}
