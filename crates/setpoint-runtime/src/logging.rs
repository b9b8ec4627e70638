//! The runtime's log lines through `tracing`: levels, `RUST_LOG`-style filters, text or JSON.
//!
//! Every line of the runtime goes through [`crate::rt::log_at`] (and [`crate::rt::log`],
//! [`crate::rt::warn`], [`crate::rt::debug`]), which emits a `tracing` event with the fields
//! `who`, `workload`, `copy`, `node`, `holder` and `fence` where they are known. [`init`]
//! installs the one subscriber a daemon uses: an [`EnvFilter`] (from `--log-level`, else the
//! `RUST_LOG` environment variable, else `info`) and a layer that formats each event as one line
//! and writes it with [`crate::rt::say`], so that the log file of `setpoint up` and the quiet
//! stderr of the lab's commands ([`crate::rt::quiet_stderr`]) keep working as before.
//!
//! **Text** (the default) keeps the lines as they always were, `HH:MM:SS.mmm who: what`, with
//! the level after the time when it is not `INFO` and the fields neither `who` nor the words
//! already say (`copy=web-3`) at the end (the fencing token only in JSON), so that the interleaved lines of `setpoint up` stay
//! readable by their `who` prefixes. **JSON** is one object per line: `time` (RFC 3339, UTC,
//! milliseconds), `level`, `message` and every field that is known.
//!
//! Without [`init`] (a library user, the lab, the tests) there is no subscriber and
//! [`crate::rt::log_at`] writes every line straight through [`crate::rt::say`] as before.

use std::fmt::Write as _;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::{EnvFilter, Layer};

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `HH:MM:SS.mmm [LEVEL] who: what [key=value…]`.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// A log setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The filter does not parse.
    #[error("{from} '{filter}' is not a log filter: {why}; accepted a level (error, warn, info, debug, trace) or RUST_LOG-style directives such as 'info,setpoint=debug'")]
    BadFilter {
        /// Where the filter came from: `--log-level` or `RUST_LOG`.
        from: &'static str,
        /// The filter as given.
        filter: String,
        /// The parser's words.
        why: String,
    },
}

/// Installs the process's subscriber: `level` (a `RUST_LOG`-style filter; `None`: the
/// `RUST_LOG` environment variable, else `info`) and `format`. Only the first call in a process
/// takes effect; later ones are accepted and change nothing.
pub fn init(level: Option<&str>, format: LogFormat) -> Result<(), LogError> {
    let env = std::env::var("RUST_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty());
    let (from, filter) = match (level, env) {
        (Some(l), _) => ("--log-level", l.to_owned()),
        (None, Some(e)) => ("RUST_LOG", e),
        (None, None) => ("--log-level", "info".to_owned()),
    };
    if let Some(word) = bare_unknown_target(&filter) {
        return Err(LogError::BadFilter {
            from,
            filter: filter.clone(),
            why: format!(
                "'{word}' is not a level, and a bare target other than setpoint's is taken for a typo (write '{word}=trace' to mean it)"
            ),
        });
    }
    let filter_layer = EnvFilter::builder()
        .parse(&filter)
        .map_err(|e| LogError::BadFilter {
            from,
            filter: filter.clone(),
            why: e.to_string(),
        })?;
    let subscriber = tracing_subscriber::registry()
        .with(filter_layer)
        .with(SayLayer { format });
    let _ = tracing::subscriber::set_global_default(subscriber);
    Ok(())
}

/// A directive of `filter` that is a bare word, neither a level nor one of setpoint's own
/// targets. `EnvFilter` takes such a word for a target to log at every level, so a typo such as
/// `--log-level wran` would silence everything without a word; it is refused instead.
fn bare_unknown_target(filter: &str) -> Option<&str> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    filter
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty() && !d.contains('=') && !d.contains('['))
        .find(|d| !LEVELS.iter().any(|l| d.eq_ignore_ascii_case(l)) && !d.starts_with("setpoint"))
}

/// The fields read from `who`: `agent NODE`, `loop WORKLOAD`, `controller HOLDER`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Derived<'a> {
    pub(crate) node: Option<&'a str>,
    pub(crate) workload: Option<&'a str>,
    pub(crate) holder: Option<&'a str>,
}

/// What `who` says of the fields.
pub(crate) fn from_who(who: &str) -> Derived<'_> {
    let mut d = Derived::default();
    if let Some(n) = who.strip_prefix("agent ") {
        d.node = Some(n);
    } else if let Some(w) = who.strip_prefix("loop ") {
        d.workload = Some(w);
    } else if let Some(h) = who.strip_prefix("controller ") {
        d.holder = Some(h);
    }
    d
}

/// The level of a line a machine emitted (the machines' log outputs carry text only): warn for
/// what failed or was refused (`cannot …`, `pass failed: …`, `refused …`, a fence, a controller
/// that stops on a lost store), info for the rest.
pub fn level_of(line: &str) -> tracing::Level {
    let warn = ["cannot ", "pass failed", "refused ", "skipped "]
        .iter()
        .any(|p| line.starts_with(p))
        || ["fenced", "this controller stops", "another agent"]
            .iter()
            .any(|p| line.contains(p));
    if warn {
        tracing::Level::WARN
    } else {
        tracing::Level::INFO
    }
}

/// The copy an agent's line is about, for the `copy` field: `started C (pid …)`, `stopping C
/// (pid …)`, `adopted [unrecorded ]C (pid …)`, `C ended: …`, `cannot start C: …`.
pub fn copy_of(line: &str) -> Option<&str> {
    let name = |s: &str| -> Option<usize> {
        let n = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(s.len());
        (n > 0 && s[..n].contains('-')).then_some(n)
    };
    for p in [
        "started ",
        "stopping ",
        "adopted unrecorded ",
        "adopted ",
        "cannot start ",
    ] {
        if let Some(rest) = line.strip_prefix(p) {
            return name(rest).map(|n| &rest[..n]);
        }
    }
    let n = name(line)?;
    line[n..].starts_with(" ended: ").then(|| &line[..n])
}

/// One text line: `HH:MM:SS.mmm [LEVEL ]who: what[ key=value…]`.
pub(crate) fn text_line(
    wall_ms: u64,
    level: Option<&str>,
    who: &str,
    what: &str,
    extra: &[(&str, String)],
) -> String {
    let (s, ms) = (wall_ms / 1000, wall_ms % 1000);
    let mut line = format!(
        "{:02}:{:02}:{:02}.{ms:03} ",
        (s / 3600) % 24,
        (s / 60) % 60,
        s % 60
    );
    if let Some(l) = level {
        let _ = write!(line, "{l} ");
    }
    let _ = write!(line, "{who}: {what}");
    for (k, v) in extra {
        let _ = write!(line, " {k}={v}");
    }
    line
}

/// `wall_ms` as RFC 3339 in UTC with milliseconds: `2026-12-02T16:31:00.123Z`.
pub(crate) fn rfc3339(wall_ms: u64) -> String {
    let (days, rest) = (wall_ms / 86_400_000, wall_ms % 86_400_000);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (s, ms) = (rest / 1000, rest % 1000);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

/// The fields of one event.
#[derive(Default)]
struct Line {
    message: String,
    who: Option<String>,
    workload: Option<String>,
    copy: Option<String>,
    node: Option<String>,
    holder: Option<String>,
    fence: Option<u64>,
    /// Fields of events from other crates, in order.
    other: Vec<(String, String)>,
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        let v = Some(value.to_owned());
        match field.name() {
            "message" => self.message = value.to_owned(),
            "who" => self.who = v,
            "workload" => self.workload = v,
            "copy" => self.copy = v,
            "node" => self.node = v,
            "holder" => self.holder = v,
            name => self.other.push((name.to_owned(), value.to_owned())),
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "fence" => self.fence = Some(value),
            name => self.other.push((name.to_owned(), value.to_string())),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            name => self.other.push((name.to_owned(), format!("{value:?}"))),
        }
    }
}

/// Formats each event as one line and writes it with [`crate::rt::say`].
struct SayLayer {
    format: LogFormat,
}

impl<S: Subscriber> Layer<S> for SayLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut l = Line::default();
        event.record(&mut l);
        let meta = event.metadata();
        let now = crate::store::wall_ms();
        let line = match self.format {
            LogFormat::Json => {
                let mut o = serde_json::Map::new();
                o.insert("time".into(), rfc3339(now).into());
                o.insert("level".into(), meta.level().as_str().into());
                o.insert("target".into(), meta.target().into());
                o.insert("message".into(), l.message.into());
                for (k, v) in [
                    ("who", l.who),
                    ("workload", l.workload),
                    ("copy", l.copy),
                    ("node", l.node),
                    ("holder", l.holder),
                ] {
                    if let Some(v) = v {
                        o.insert(k.into(), v.into());
                    }
                }
                if let Some(f) = l.fence {
                    o.insert("fence".into(), f.into());
                }
                for (k, v) in l.other {
                    o.insert(k, v.into());
                }
                serde_json::Value::Object(o).to_string()
            }
            LogFormat::Text => {
                let who = l.who.clone().unwrap_or_else(|| meta.target().to_owned());
                let derived = from_who(&who);
                let mut extra = Vec::new();
                for (k, v, d) in [
                    ("workload", &l.workload, derived.workload),
                    ("node", &l.node, derived.node),
                ] {
                    if let Some(v) = v.as_deref().filter(|v| Some(*v) != d) {
                        extra.push((k, v.to_owned()));
                    }
                }
                // The copy only when the words do not name it; the fencing token (on every
                // line of a leader) only in JSON, so that the lines stay as they always were.
                if let Some(c) = l.copy.as_ref().filter(|c| !l.message.contains(c.as_str())) {
                    extra.push(("copy", c.clone()));
                }
                let other: Vec<(&str, String)> = l
                    .other
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.clone()))
                    .collect();
                extra.extend(other);
                let level = (*meta.level() != tracing::Level::INFO).then(|| meta.level().as_str());
                text_line(now, level, &who, &l.message, &extra)
            }
        };
        crate::rt::say(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        // 2024-02-29T23:59:59.999Z, a leap day.
        assert_eq!(rfc3339(1_709_251_199_999), "2024-02-29T23:59:59.999Z");
        assert_eq!(rfc3339(1_796_228_460_123), "2026-12-02T16:21:00.123Z");
    }

    #[test]
    fn a_text_line_keeps_the_old_shape_and_adds_the_level_and_fields() {
        let t = 3_600_000 + 61_005;
        assert_eq!(
            text_line(t, None, "agent n1", "up", &[]),
            "01:01:01.005 agent n1: up"
        );
        assert_eq!(
            text_line(t, Some("WARN"), "loop w", "x", &[("copy", "w-1".into())]),
            "01:01:01.005 WARN loop w: x copy=w-1"
        );
    }

    #[test]
    fn who_names_the_node_the_workload_or_the_holder() {
        assert_eq!(from_who("agent node-1").node, Some("node-1"));
        assert_eq!(from_who("loop web").workload, Some("web"));
        assert_eq!(from_who("controller c/1/2").holder, Some("c/1/2"));
        assert_eq!(from_who("setpoint up"), Derived::default());
    }

    #[test]
    fn a_machines_line_gets_its_level_and_copy_from_its_words() {
        assert_eq!(level_of("cannot report: unavailable"), tracing::Level::WARN);
        assert_eq!(level_of("pass failed: conflict"), tracing::Level::WARN);
        assert_eq!(
            level_of("lease 3 not renewed for 800ms: fenced, stopping 2 copies (SIGTERM)"),
            tracing::Level::WARN
        );
        assert_eq!(level_of("started web-3 (pid 12)"), tracing::Level::INFO);
        assert_eq!(copy_of("started web-3 (pid 12)"), Some("web-3"));
        assert_eq!(copy_of("adopted unrecorded web-3 (pid 12)"), Some("web-3"));
        assert_eq!(copy_of("web-3 ended: signal 9"), Some("web-3"));
        assert_eq!(copy_of("cannot start web-3: no such file"), Some("web-3"));
        assert_eq!(copy_of("stopped"), None);
        assert_eq!(copy_of("ready with 0 copies"), None);
    }

    #[test]
    fn a_bare_word_that_is_no_level_is_refused_and_levels_and_own_targets_are_not() {
        assert_eq!(bare_unknown_target("wran"), Some("wran"));
        assert_eq!(bare_unknown_target("info, loud"), Some("loud"));
        for ok in [
            "info",
            "WARN",
            "off",
            "info,setpoint=debug",
            "setpoint_runtime",
            "hyper=warn",
            "[span]=debug",
            "",
        ] {
            assert_eq!(bare_unknown_target(ok), None, "{ok}");
        }
        let e = init(Some("wran"), LogFormat::Text).unwrap_err();
        assert!(e.to_string().contains("'wran' is not a level"), "{e}");
    }

    #[test]
    fn a_bad_filter_is_refused_in_words() {
        let e = init(Some("info,=[bad"), LogFormat::Text).unwrap_err();
        assert!(e.to_string().contains("--log-level 'info,=[bad'"), "{e}");
    }
}
