//! Prometheus text-format histograms: `NAME_bucket{…,le="…"} COUNT` lines with `NAME_sum` and
//! `NAME_count`, as an exporter or `curl …/metrics` prints them.
//!
//! **Series.** Every label set of one metric (the labels other than `le`) is one series; the
//! series are summed bucket by bucket, which needs the same bounds in each.
//!
//! **Units.** Bounds and `_sum` are seconds, Prometheus's base unit, unless the metric's name
//! ends in `_milliseconds` or `_ms`, when they are milliseconds.
//!
//! **Checked:** every bucket has a parseable `le` and a finite count that is not negative; no
//! bound is negative (a delay never is) or given twice; counts never decrease as `le` grows;
//! every series ends in `le="+Inf"`; `_count`, when present, equals the `+Inf` bucket; and the
//! total is above 0. Each error names the line.

use std::collections::BTreeMap;

use super::fit::{fit_buckets, Buckets};
use super::{CalibrateError, DelayKind, Fit, Request, Source};

/// One series of the metric: bounds with their count and line, the `+Inf` bucket, `_sum`,
/// `_count`.
#[derive(Default)]
struct Series {
    buckets: Vec<(f64, f64, usize)>,
    inf: Option<(f64, usize)>,
    sum: Option<f64>,
    count: Option<(f64, usize)>,
    first_line: usize,
}

/// A sample line: its metric name, its labels and its value.
struct Line<'a> {
    name: &'a str,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn parse_line(line: &str) -> Result<Line<'_>, String> {
    let end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("a sample without a value: accepted NAME{LABELS} VALUE")?;
    let name = &line[..end];
    let mut rest = &line[end..];
    let mut labels = BTreeMap::new();
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices().peekable();
        let close;
        loop {
            while chars
                .peek()
                .is_some_and(|(_, c)| c.is_whitespace() || *c == ',')
            {
                chars.next();
            }
            match chars.peek() {
                Some(&(i, '}')) => {
                    close = i;
                    break;
                }
                None => return Err("a label set without its closing '}'".into()),
                _ => {}
            }
            let mut key = String::new();
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!(
                    "label '{}' has no quoted value: accepted key=\"value\"",
                    key.trim()
                ));
            }
            let mut value = String::new();
            let mut closed = false;
            while let Some((_, c)) = chars.next() {
                match c {
                    '\\' => match chars.next().map(|(_, c)| c) {
                        Some('n') => value.push('\n'),
                        Some(c) => value.push(c),
                        None => break,
                    },
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => value.push(c),
                }
            }
            if !closed {
                return Err(format!("label '{}' has an unclosed value", key.trim()));
            }
            labels.insert(key.trim().to_owned(), value);
        }
        rest = &r[close + 1..];
    }
    let value = rest
        .split_whitespace()
        .next()
        .ok_or("a sample without a value: accepted NAME{LABELS} VALUE")?;
    let value = parse_number(value).ok_or_else(|| format!("'{value}' is not a number"))?;
    Ok(Line {
        name,
        labels,
        value,
    })
}

fn parse_number(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        _ => s.parse::<f64>().ok(),
    }
}

/// The histogram metrics a scrape holds (names with `_bucket` lines), in name order.
fn histograms(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let end = l.find(|c: char| c == '{' || c.is_whitespace())?;
            l[..end].strip_suffix("_bucket").map(str::to_owned)
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Reads the histogram `req.metric` (or the scrape's only histogram) from `text` and fits it.
pub fn calibrate(file: &str, text: &str, req: &Request) -> Result<Fit, CalibrateError> {
    let present = histograms(text);
    let list = || {
        if present.is_empty() {
            "none".to_owned()
        } else {
            present.join(", ")
        }
    };
    let metric = match &req.metric {
        Some(m) => {
            let m = m.strip_suffix("_bucket").unwrap_or(m);
            if !present.iter().any(|p| p == m) {
                return Err(CalibrateError::unusable(
                    file,
                    format!("no histogram named '{m}' (no {m}_bucket line); histograms present: {}; accepted: --metric with one of them", list()),
                ));
            }
            m.to_owned()
        }
        None => match present.as_slice() {
            [one] => one.clone(),
            [] => {
                return Err(CalibrateError::unusable(
                    file,
                    "neither a Prometheus histogram (no NAME_bucket{le=\"…\"} line) nor a kubectl -o json list; accepted: Prometheus text format with a histogram, or kubectl get pods|events -o json",
                ))
            }
            _ => {
                return Err(CalibrateError::unusable(
                    file,
                    format!("holds several histograms ({}); accepted: --metric NAME to pick one", list()),
                ))
            }
        },
    };
    let ms_unit = metric.ends_with("_milliseconds") || metric.ends_with("_ms");
    let scale = if ms_unit { 1.0 } else { 1000.0 };
    let (bucket, sum, count) = (
        format!("{metric}_bucket"),
        format!("{metric}_sum"),
        format!("{metric}_count"),
    );
    let mut series: BTreeMap<String, Series> = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') || !l.starts_with(metric.as_str()) {
            continue;
        }
        let bad = |m: String| CalibrateError::bad(file, format!("line {n}"), m);
        let parsed = parse_line(l).map_err(bad)?;
        if parsed.name != bucket && parsed.name != sum && parsed.name != count {
            continue;
        }
        let mut labels = parsed.labels;
        let le = labels.remove("le");
        let key = labels
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join(",");
        let s = series.entry(key).or_insert_with(|| Series {
            first_line: n,
            ..Series::default()
        });
        let v = parsed.value;
        if parsed.name == bucket {
            let le = le.ok_or_else(|| {
                bad(format!(
                    "{bucket} without an le label: accepted {bucket}{{le=\"BOUND\"}} COUNT"
                ))
            })?;
            let bound = parse_number(&le).filter(|b| !b.is_nan()).ok_or_else(|| {
                bad(format!(
                    "le=\"{le}\" is not a number: accepted a bound such as \"0.5\" or \"+Inf\""
                ))
            })?;
            if bound < 0.0 {
                return Err(bad(format!("le=\"{le}\" is negative: accepted bounds of 0 or more, since a delay never is negative")));
            }
            if !v.is_finite() || v < 0.0 {
                return Err(bad(format!(
                    "bucket count {v} is not accepted: accepted a count of 0 or more"
                )));
            }
            if bound.is_infinite() {
                if s.inf.is_some() {
                    return Err(bad("a second le=\"+Inf\" bucket in one series".into()));
                }
                s.inf = Some((v, n));
            } else {
                if s.buckets.iter().any(|b| b.0 == bound * scale) {
                    return Err(bad(format!("le=\"{le}\" given twice in one series")));
                }
                s.buckets.push((bound * scale, v, n));
            }
        } else if parsed.name == sum {
            s.sum = Some(v * scale);
        } else {
            s.count = Some((v, n));
        }
    }
    let mut total: Option<Buckets> = None;
    for (key, mut s) in series {
        let name = if key.is_empty() {
            metric.clone()
        } else {
            format!("{metric}{{{key}}}")
        };
        if s.buckets.is_empty() && s.inf.is_none() {
            continue; // a _sum or _count without buckets
        }
        s.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let Some((inf, inf_line)) = s.inf else {
            return Err(CalibrateError::bad(
                file,
                format!("line {}", s.first_line),
                format!("series {name} has no le=\"+Inf\" bucket: accepted a histogram whose buckets end in le=\"+Inf\", the total count"),
            ));
        };
        let mut prev: Option<(f64, f64)> = None;
        for &(bound, c, line) in s
            .buckets
            .iter()
            .chain([(f64::INFINITY, inf, inf_line)].iter())
        {
            if let Some((pb, pc)) = prev {
                if c < pc {
                    return Err(CalibrateError::bad(
                        file,
                        format!("line {line}"),
                        format!(
                            "series {name}: the count {c} at le={} is below the count {pc} at le={}: accepted cumulative counts that never decrease as le grows",
                            le_text(bound, scale),
                            le_text(pb, scale)
                        ),
                    ));
                }
            }
            prev = Some((bound, c));
        }
        if let Some((c, line)) = s.count {
            if c != inf {
                return Err(CalibrateError::bad(
                    file,
                    format!("line {line}"),
                    format!("{count} {c} differs from the le=\"+Inf\" bucket's {inf}: accepted a _count equal to the total"),
                ));
            }
        }
        let b = Buckets {
            bounds: s.buckets.iter().map(|&(b, c, _)| (b, c)).collect(),
            total: inf,
            sum_ms: s.sum,
        };
        total = Some(match total {
            None => b,
            Some(mut t) => {
                let same = t.bounds.len() == b.bounds.len()
                    && t.bounds.iter().zip(&b.bounds).all(|(x, y)| x.0 == y.0);
                if !same {
                    return Err(CalibrateError::bad(
                        file,
                        format!("line {}", s.first_line),
                        format!("series {name} has other bucket bounds than the series before it: accepted series with the same bounds, which calibrate sums"),
                    ));
                }
                for (x, y) in t.bounds.iter_mut().zip(&b.bounds) {
                    x.1 += y.1;
                }
                t.total += b.total;
                t.sum_ms = t.sum_ms.zip(b.sum_ms).map(|(x, y)| x + y);
                t
            }
        });
    }
    let Some(b) = total else {
        return Err(CalibrateError::unusable(
            file,
            format!("{metric}: no bucket lines"),
        ));
    };
    if b.total <= 0.0 {
        return Err(CalibrateError::unusable(
            file,
            format!("{metric}: no samples (the le=\"+Inf\" count is 0): accepted a histogram with at least one observation"),
        ));
    }
    let fitted = fit_buckets(&b, file).map_err(|m| CalibrateError::unusable(file, m))?;
    Ok(Fit {
        delay: req.kind.unwrap_or(DelayKind::ReportDelay),
        source: Source::Prometheus,
        from: file.to_owned(),
        metric: Some(metric),
        count: b.total.round() as u64,
        cdf: fitted.cdf,
        measured: fitted.measured,
        ks: fitted.ks,
        band95: super::fit::band95(b.total.round() as u64),
        bucket_mass: fitted.bucket_mass,
        pipeline: None,
        notes: fitted.notes,
    })
}

fn le_text(bound_ms: f64, scale: f64) -> String {
    if bound_ms.is_infinite() {
        "\"+Inf\"".into()
    } else {
        format!("\"{}\"", bound_ms / scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = "# HELP report_delay_seconds How long a report takes.\n\
# TYPE report_delay_seconds histogram\n\
report_delay_seconds_bucket{node=\"a\",le=\"1\"} 2\n\
report_delay_seconds_bucket{node=\"a\",le=\"2.5\"} 6\n\
report_delay_seconds_bucket{node=\"a\",le=\"+Inf\"} 8\n\
report_delay_seconds_sum{node=\"a\"} 14\n\
report_delay_seconds_count{node=\"a\"} 8\n\
report_delay_seconds_bucket{node=\"b\",le=\"1\"} 0\n\
report_delay_seconds_bucket{node=\"b\",le=\"2.5\"} 4\n\
report_delay_seconds_bucket{node=\"b\",le=\"+Inf\"} 4\n\
report_delay_seconds_sum{node=\"b\"} 7\n\
other_total 3\n";

    fn req(metric: Option<&str>) -> Request {
        Request {
            metric: metric.map(str::to_owned),
            kind: None,
        }
    }

    fn err(text: &str, metric: Option<&str>) -> String {
        calibrate("s.prom", text, &req(metric))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn series_are_summed_bucket_by_bucket_in_seconds() {
        let f = calibrate("s.prom", SCRAPE, &req(None)).unwrap();
        assert_eq!(f.count, 12);
        assert_eq!(f.metric.as_deref(), Some("report_delay_seconds"));
        assert_eq!(f.measured, vec![(1000, 2.0 / 12.0), (2500, 10.0 / 12.0)]);
        assert_eq!(f.delay, DelayKind::ReportDelay);
        assert!(f.cdf.max_ms() > 2500, "the +Inf share lies above 2.5 s");
    }

    #[test]
    fn a_milliseconds_metric_is_read_in_milliseconds() {
        let t = "x_ms_bucket{le=\"100\"} 1\nx_ms_bucket{le=\"+Inf\"} 1\n";
        let f = calibrate("s.prom", t, &req(None)).unwrap();
        assert_eq!(f.cdf.max_ms(), 100);
    }

    #[test]
    fn every_malformed_histogram_names_its_line_and_what_is_accepted() {
        let cases = [
            ("a_bucket{le=\"1\"} 5\na_bucket{le=\"2\"} 3\na_bucket{le=\"+Inf\"} 5\n", "line 2", "never decrease"),
            ("a_bucket{le=\"1\"} 5\na_bucket{le=\"+Inf\"} 4\n", "line 2", "never decrease"),
            ("a_bucket{le=\"1\"} 5\na_bucket{le=\"2\"} 6\n", "line 1", "+Inf"),
            ("a_bucket{le=\"1\"} 0\na_bucket{le=\"+Inf\"} 0\n", "s.prom", "no samples"),
            ("a_bucket{le=\"x\"} 0\n", "line 1", "not a number"),
            ("a_bucket{le=\"-1\"} 0\n", "line 1", "negative"),
            ("a_bucket{le=\"1\"} -2\n", "line 1", "0 or more"),
            ("a_bucket{le=\"1\"} many\n", "line 1", "not a number"),
            ("a_bucket{le=\"1\" 4\n", "line 1", "label"),
            ("a_bucket{le=\"1\"", "line 1", "closing"),
            ("a_bucket{le=\"1\"}\n", "line 1", "without a value"),
            ("a_bucket{le=\"1} 4\n", "line 1", "unclosed value"),
            ("a_bucket{le=1} 4\n", "line 1", "quoted"),
            ("a_bucket{} 4\n", "line 1", "without an le"),
            ("a_bucket{le=\"1\"} 1\na_bucket{le=\"1\"} 1\na_bucket{le=\"+Inf\"} 1\n", "line 2", "twice"),
            ("a_bucket{le=\"+Inf\"} 1\na_bucket{le=\"+Inf\"} 1\n", "line 2", "second"),
            ("a_bucket{le=\"+Inf\"} 3\na_count 4\n", "line 2", "_count"),
            ("a_bucket{k=\"1\",le=\"1\"} 1\na_bucket{k=\"1\",le=\"+Inf\"} 1\na_bucket{k=\"2\",le=\"2\"} 1\na_bucket{k=\"2\",le=\"+Inf\"} 1\n", "line 3", "same bounds"),
            ("up 1\n", "s.prom", "neither a Prometheus histogram"),
        ];
        for (text, at, what) in cases {
            let e = err(text, None);
            assert!(
                e.starts_with("s.prom") && e.contains(at) && e.contains(what),
                "{text:?}: {e}"
            );
            assert_eq!(e.lines().count(), 1);
        }
    }

    #[test]
    fn a_metric_not_present_lists_those_that_are() {
        let e = err(SCRAPE, Some("startup_seconds"));
        assert!(
            e.contains("no histogram named 'startup_seconds'")
                && e.contains("report_delay_seconds"),
            "{e}"
        );
        let two = format!("{SCRAPE}b_bucket{{le=\"+Inf\"}} 1\n");
        assert!(err(&two, None).contains("several histograms (b, report_delay_seconds)"));
        assert!(calibrate("s", &two, &req(Some("b_bucket"))).is_ok());
    }
}
