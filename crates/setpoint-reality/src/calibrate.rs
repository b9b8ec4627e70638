//! `setpoint calibrate --store`: empirical delay models from the runtime's own event log
//! ([`setpoint_runtime::events`]). It lives here, not in the lab, because it reads the runtime's
//! store; the fitting and the model file are the lab's ([`setpoint_sim::calibrate`]).
//!
//! For every copy incarnation of the workloads measured, the log gives (in store milliseconds):
//! - **startup**: its `create` (the pass that wrote its assignment) to its `ready`: the lab's B,
//!   which runs from creation to running;
//! - **report-delay**: its `ready` to its `seen` (the report that put it on the ledger): the
//!   lab's G for a start report;
//! - **death-report**: its `exit` to its `unseen` (the report that took it off the ledger), for
//!   copies that were on the ledger, whether the exit was commanded or a death: the lab's G for
//!   an end report.
//!
//! Real milliseconds become the lab's by the run's time scale: a delay of `x` real ms at time
//! scale `s` is `x / s` lab milliseconds (`experiment lesson --real --time-scale 0.1` runs ten
//! times faster than the lab's clock).
//!
//! **The pipeline it shows** (`docs/model.md`, "Report pipelines"): reports of one node that
//! reach the ledger in another order than they were made (a later change on the ledger before
//! an earlier one) show `per-report`; a log where that never happens shows `in-order`. The log
//! records no report that was replaced in flight, so it cannot tell `snapshot` from `in-order`,
//! nor `per-copy` from `per-report`; the notes say so.

use std::collections::BTreeMap;

use setpoint_runtime::events::{logged_workloads, read_log, CopyEventKind, Logged};
use setpoint_runtime::{OpenMode, StoreUrl};
use setpoint_sim::calibrate::{CalibrateError, DelayKind, Fit, Source};

/// Why the event log could not be calibrated from.
#[derive(Debug, thiserror::Error)]
pub enum StoreCalibrateError {
    /// A store URL that does not parse; the message says what is accepted.
    #[error("--store {0}")]
    Url(String),
    /// The store could not be opened.
    #[error(transparent)]
    Open(#[from] setpoint_runtime::store::OpenError),
    /// The store failed while the log was read.
    #[error(transparent)]
    Store(#[from] setpoint_runtime::StoreError),
    /// The store holds no event log for the workload (or none at all). Name a workload that
    /// ran (`setpoint get`).
    #[error("{0}")]
    NoLog(String),
    /// A time scale outside (0, 1000000].
    #[error("--time-scale {0} is out of range: accepted above 0, up to 1000000")]
    TimeScale(f64),
    /// The log's delays could not be fitted.
    #[error(transparent)]
    Fit(#[from] CalibrateError),
}

impl StoreCalibrateError {
    /// Whether the error is the user's input (exit 2) rather than a failing store (exit 1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            StoreCalibrateError::Url(_)
            | StoreCalibrateError::NoLog(_)
            | StoreCalibrateError::TimeScale(_)
            | StoreCalibrateError::Fit(_) => true,
            StoreCalibrateError::Open(o) => o.is_bad_input(),
            StoreCalibrateError::Store(_) => false,
        }
    }
}

/// The fits of the event log in the store at `url`: of `workload`, or of every workload with a
/// log, at `time_scale`.
pub fn from_store(
    url: &str,
    workload: Option<&str>,
    time_scale: f64,
) -> Result<Vec<Fit>, StoreCalibrateError> {
    if !(time_scale > 0.0 && time_scale <= 1e6) {
        return Err(StoreCalibrateError::TimeScale(time_scale));
    }
    let parsed: StoreUrl = url
        .parse()
        .map_err(|e: setpoint_runtime::store::StoreUrlError| {
            StoreCalibrateError::Url(e.to_string())
        })?;
    let store = parsed.open(OpenMode::ReadOnly)?;
    let names = match workload {
        Some(w) => vec![w.to_owned()],
        None => logged_workloads(&*store)?,
    };
    let mut logs = Vec::new();
    for name in names {
        logs.push(read_log(&*store, &name)?);
    }
    fits_from_logs(url, workload, &logs, time_scale)
}

/// One report: the change's time, its arrival on the ledger, its node and copy.
struct Report {
    made: u64,
    arrived: u64,
    node: String,
}

/// The fits of these logs (one per workload), named `from` in outputs.
pub fn fits_from_logs(
    from: &str,
    workload: Option<&str>,
    logs: &[Vec<Logged>],
    time_scale: f64,
) -> Result<Vec<Fit>, StoreCalibrateError> {
    // Each copy incarnation's events: the kind's first time and its node. Events of one copy
    // carry their incarnation, except `create` whose incarnation is the entry's revision; the
    // copy number with the latest create before an event ties them (copy numbers are not
    // reused within a workload, so by number is enough).
    let mut samples: BTreeMap<DelayKind, Vec<u64>> = BTreeMap::new();
    let mut reports: Vec<Report> = Vec::new();
    for log in logs {
        let mut lives: BTreeMap<u64, BTreeMap<CopyEventKind, (u64, String)>> = BTreeMap::new();
        for l in log {
            if let Logged::Copy { kind, n, event, .. } = l {
                lives
                    .entry(*n)
                    .or_default()
                    .entry(*kind)
                    .or_insert_with(|| (event.at_ms, event.node.clone()));
            }
        }
        let lab = |ms: u64| (ms as f64 / time_scale).round() as u64;
        for life in lives.values() {
            let at = |k: CopyEventKind| life.get(&k).map(|e| e.0);
            let node = |k: CopyEventKind| life.get(&k).map(|e| e.1.clone()).unwrap_or_default();
            let pairs = [
                (
                    DelayKind::Startup,
                    CopyEventKind::Create,
                    CopyEventKind::Ready,
                ),
                (
                    DelayKind::ReportDelay,
                    CopyEventKind::Ready,
                    CopyEventKind::Seen,
                ),
                (
                    DelayKind::DeathReport,
                    CopyEventKind::Exit,
                    CopyEventKind::Unseen,
                ),
            ];
            for (kind, a, b) in pairs {
                if let (Some(x), Some(y)) = (at(a), at(b)) {
                    if y >= x {
                        samples.entry(kind).or_default().push(lab(y - x));
                        if kind != DelayKind::Startup {
                            reports.push(Report {
                                made: x,
                                arrived: y,
                                node: node(a),
                            });
                        }
                    }
                }
            }
        }
    }
    if samples.is_empty() {
        return Err(StoreCalibrateError::NoLog(match workload {
            Some(w) => format!("{from}: no copy of workload '{w}' has a logged delay (see 'setpoint get'): accepted a workload whose copies were created and became ready"),
            None => format!("{from}: the event log holds no copy with a logged delay: accepted a store where a workload ran"),
        }));
    }
    let (pipeline, pipeline_note) = pipeline(&mut reports);
    samples
        .into_iter()
        .map(|(kind, xs)| {
            let mut notes = Vec::new();
            if time_scale != 1.0 {
                notes.push(format!(
                    "real milliseconds divided by the time scale {time_scale}"
                ));
            }
            let mut f = Fit::from_samples(from, Source::EventLog, kind, xs, notes)?;
            if kind != DelayKind::Startup {
                f.pipeline = Some(pipeline.to_owned());
                f.notes.push(pipeline_note.clone());
            }
            Ok(f)
        })
        .collect()
}

/// The pipeline mode the reports show, and a sentence on the evidence.
fn pipeline(reports: &mut [Report]) -> (&'static str, String) {
    reports.sort_by(|a, b| (&a.node, a.made, a.arrived).cmp(&(&b.node, b.made, b.arrived)));
    let mut overtaken = 0u64;
    for node in reports.chunk_by(|a, b| a.node == b.node) {
        // A report is overtaken when one made later on its node arrived before it.
        let mut earliest_later = u64::MAX;
        for r in node.iter().rev() {
            if r.arrived > earliest_later {
                overtaken += 1;
            }
            earliest_later = earliest_later.min(r.arrived);
        }
    }
    if overtaken > 0 {
        ("per-report", format!("{overtaken} of {} reports reached the ledger after a report made later on their node: the pipeline is per-report (the log cannot tell it from per-copy)", reports.len()))
    } else {
        ("in-order", format!("none of {} reports reached the ledger after a report made later on their node: the pipeline is in order per node (the log records no replaced snapshot, so it cannot tell snapshot from in-order)", reports.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use setpoint_runtime::events::CopyEvent;

    fn ev(kind: CopyEventKind, n: u64, at_ms: u64, node: &str) -> Logged {
        Logged::Copy {
            kind,
            n,
            incarnation: n,
            event: CopyEvent {
                at_ms,
                node: node.into(),
                pid: None,
                commanded: false,
                how: None,
            },
        }
    }

    /// Copy `n` on `node`: created at `c`, ready at `r`, on the ledger at `s`.
    fn copy(n: u64, node: &str, c: u64, r: u64, s: u64) -> Vec<Logged> {
        vec![
            ev(CopyEventKind::Create, n, c, node),
            ev(CopyEventKind::Start, n, c + 10, node),
            ev(CopyEventKind::Ready, n, r, node),
            ev(CopyEventKind::Seen, n, s, node),
        ]
    }

    #[test]
    fn the_log_gives_startup_report_and_death_delays_in_lab_milliseconds() {
        let mut log = copy(1, "a", 0, 500, 2500);
        log.extend(copy(2, "a", 100, 600, 2600));
        log.push(ev(CopyEventKind::Exit, 1, 9000, "a"));
        log.push(ev(CopyEventKind::Unseen, 1, 9300, "a"));
        let fits = fits_from_logs("sqlite:x", None, &[log], 0.1).unwrap();
        let by = |k| fits.iter().find(|f| f.delay == k).unwrap();
        let s = by(DelayKind::Startup);
        assert_eq!((s.count, s.cdf.min_ms(), s.cdf.max_ms()), (2, 5000, 5000));
        let g = by(DelayKind::ReportDelay);
        assert_eq!((g.count, g.cdf.max_ms()), (2, 20_000));
        assert_eq!(g.pipeline.as_deref(), Some("in-order"));
        let d = by(DelayKind::DeathReport);
        assert_eq!(
            (d.count, d.cdf.max_ms(), d.source),
            (1, 3000, Source::EventLog)
        );
        assert!(s.pipeline.is_none());
    }

    #[test]
    fn reports_that_overtake_on_one_node_show_a_per_report_pipeline() {
        // Copy 2 became ready later than copy 1 but reached the ledger first, on one node.
        let mut log = copy(1, "a", 0, 500, 3000);
        log.extend(copy(2, "a", 0, 700, 1000));
        let fits = fits_from_logs("s", None, &[log.clone()], 1.0).unwrap();
        let g = fits
            .iter()
            .find(|f| f.delay == DelayKind::ReportDelay)
            .unwrap();
        assert_eq!(g.pipeline.as_deref(), Some("per-report"));
        assert!(g.notes.iter().any(|n| n.starts_with("1 of 2 reports")));
        // The same on two nodes is no overtaking: order holds per node.
        let mut two = copy(1, "a", 0, 500, 3000);
        two.extend(copy(2, "b", 0, 700, 1000));
        let fits = fits_from_logs("s", None, &[two], 1.0).unwrap();
        let g = fits
            .iter()
            .find(|f| f.delay == DelayKind::ReportDelay)
            .unwrap();
        assert_eq!(g.pipeline.as_deref(), Some("in-order"));
    }

    #[test]
    fn a_log_without_delays_says_so() {
        let e = fits_from_logs("s", Some("web"), &[vec![]], 1.0).unwrap_err();
        assert!(e.to_string().contains("no copy of workload 'web'"), "{e}");
        assert!(e.is_bad_input());
        assert!(from_store("sqlite:/nonexistent/x", None, 0.0)
            .unwrap_err()
            .is_bad_input());
        let e = from_store("carrier-pigeon:x", None, 1.0).unwrap_err();
        assert!(
            matches!(e, StoreCalibrateError::Url(_)) && e.is_bad_input(),
            "{e}"
        );
        let e = from_store("sqlite:/nonexistent/x", None, 1.0).unwrap_err();
        assert!(e.is_bad_input(), "a store that is not there: {e}");
    }
}
