//! The workloads file that `setpoint apply -f` reads, and its validation.
//!
//! ```toml
//! [[workload]]
//! name = "collector"              # lowercase letters, digits, '-'; starts with a letter
//! command = ["sleep", "3600"]     # or one string, run with `sh -c`
//! copies = 6
//! controller = "intent"           # default "intent"; or ledger, expectations, named, gated
//! period = "15s"                  # loop period U, default 15s
//! startup = "5s"                  # startup time B, default 5s
//! readiness = ["test", "-f", "/tmp/ready"]  # optional; replaces the startup time
//! grace = "10s"                   # SIGTERM to SIGKILL, default 10s
//! env = { RUST_LOG = "info" }     # the copies' environment; nothing else is inherited
//! env_passthrough = ["HOME"]      # variables copied from the agent's environment, by name
//! backoff = { initial = "10s", max = "5m", reset = "10m" }  # after failed starts (defaults)
//! rollout = { max_surge = "25%", max_unavailable = "25%", progress_deadline = "10m" }  # (defaults)
//! restart = "always"             # or "on-failure", "never": which ended copies are replaced
//! stop_when_cut_off = "30s"       # not for named; default: kept running while the agent is cut off
//! ```
//!
//! Commands obey [`rules`]: no NUL byte, within the system's exec limit. The
//! period is at least [`MIN_PERIOD`].
//!
//! Parse before you act: every workload of the file is checked before anything is written, and
//! one error rejects the whole file.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Deserialize;
use setpoint_core::ControllerKind;

use crate::duration::{format_duration, parse_duration};
use crate::model::backoff::{BackoffPolicy, Restart};
use crate::model::rollout::{Amount, RolloutPolicy};
use crate::model::WorkloadSpec;
use crate::rules::{self, CopyEnv};

/// The most copies one workload may declare.
pub const MAX_COPIES: u64 = 100_000;
pub use crate::rules::{check_name, MAX_NAME};
/// The shortest loop period: each pass reads the store and may write events, so a 1 ms period
/// would cost about 0.6 GB of events an hour and a core, with nothing gained below the agents'
/// own 25 ms tick.
pub const MIN_PERIOD: Duration = Duration::from_millis(10);
/// The default loop period U.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(15);
/// The default startup time B.
pub const DEFAULT_STARTUP: Duration = Duration::from_secs(5);
/// The default grace period between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// A workloads file that cannot be applied. Nothing of it was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The file is not valid TOML or has fields setpoint does not know; fix the line named.
    #[error("workloads file: {0}")]
    Syntax(String),
    /// One field of one workload is out of range; the message says what is accepted.
    #[error("workload '{workload}': {field}: {reason}")]
    Invalid {
        /// The workload's name (or its position, if the name itself is bad).
        workload: String,
        /// The field.
        field: &'static str,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// Two workloads share a name; rename one.
    #[error("workload '{0}' is declared twice")]
    Duplicate(String),
    /// The file declares nothing; add at least one `[[workload]]`.
    #[error("workloads file declares no workload: add a [[workload]] table")]
    Empty,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    workload: Vec<RawWorkload>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawCommand {
    Argv(Vec<String>),
    Shell(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    name: String,
    command: RawCommand,
    copies: i64,
    controller: Option<String>,
    period: Option<String>,
    startup: Option<String>,
    readiness: Option<RawCommand>,
    grace: Option<String>,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    env_passthrough: Vec<String>,
    backoff: Option<RawBackoff>,
    rollout: Option<RawRollout>,
    restart: Option<String>,
    stop_when_cut_off: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRollout {
    max_surge: Option<RawAmount>,
    max_unavailable: Option<RawAmount>,
    progress_deadline: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawAmount {
    Count(i64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBackoff {
    initial: Option<String>,
    max: Option<String>,
    reset: Option<String>,
}

/// Parses and validates a workloads file. Returns the workloads in file order.
pub fn parse_workloads(text: &str) -> Result<Vec<WorkloadSpec>, SpecError> {
    let file: File = toml::from_str(text).map_err(|e| {
        SpecError::Syntax(
            e.to_string()
                .lines()
                .collect::<Vec<_>>()
                .join(" ")
                .trim()
                .to_owned(),
        )
    })?;
    if file.workload.is_empty() {
        return Err(SpecError::Empty);
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(file.workload.len());
    for raw in file.workload {
        let w = validate(raw)?;
        if !seen.insert(w.name.clone()) {
            return Err(SpecError::Duplicate(w.name));
        }
        out.push(w);
    }
    Ok(out)
}

fn validate(raw: RawWorkload) -> Result<WorkloadSpec, SpecError> {
    let name = raw.name;
    let bad = |field, reason: String| SpecError::Invalid {
        workload: name.clone(),
        field,
        reason,
    };
    check_name(&name).map_err(|r| bad("name", r))?;
    let env = CopyEnv {
        vars: raw.env,
        passthrough: raw.env_passthrough,
    };
    rules::check_env(&env).map_err(|r| bad("env", r))?;
    let command = argv(raw.command, &env).map_err(|r| bad("command", r))?;
    if raw.copies < 0 || raw.copies as u64 > MAX_COPIES {
        return Err(bad(
            "copies",
            format!("{} is out of range: accepted 0 to {MAX_COPIES}", raw.copies),
        ));
    }
    let controller = match raw.controller {
        None => ControllerKind::Intent,
        Some(c) => c
            .parse()
            .map_err(|e: setpoint_core::UnknownController| bad("controller", e.to_string()))?,
    };
    let duration = |field, text: Option<String>, default: Duration, allow_zero: bool| {
        let d = match text {
            None => default,
            Some(t) => parse_duration(&t).map_err(|e| bad(field, e.to_string()))?,
        };
        if d.is_zero() && !allow_zero {
            return Err(bad(
                field,
                "0 is out of range: accepted at least 1ms".into(),
            ));
        }
        Ok(d.as_millis() as u64)
    };
    let period_ms = duration("period", raw.period, DEFAULT_PERIOD, false)?;
    if period_ms < MIN_PERIOD.as_millis() as u64 {
        return Err(bad(
            "period",
            format!(
                "{period_ms}ms is too short: accepted at least {}ms",
                MIN_PERIOD.as_millis()
            ),
        ));
    }
    let startup_ms = duration("startup", raw.startup, DEFAULT_STARTUP, true)?;
    let grace_ms = duration("grace", raw.grace, DEFAULT_GRACE, true)?;
    let readiness = raw
        .readiness
        .map(|r| argv(r, &env))
        .transpose()
        .map_err(|r| bad("readiness", r))?;
    let backoff = match raw.backoff {
        None => BackoffPolicy::default(),
        Some(b) => backoff_policy(b).map_err(|(field, reason)| bad(field, reason))?,
    };
    let rollout = match raw.rollout {
        None => RolloutPolicy::default(),
        Some(r) => rollout_policy(r).map_err(|(field, reason)| bad(field, reason))?,
    };
    let restart = match raw.restart.as_deref() {
        None => Restart::default(),
        Some(w) => Restart::parse(w).ok_or_else(|| {
            bad(
                "restart",
                format!(
                    "'{w}' is not a restart setting: accepted are {}",
                    Restart::ACCEPTED
                ),
            )
        })?,
    };
    let stop_when_cut_off_ms = match raw.stop_when_cut_off {
        None => None,
        Some(t) => {
            let d = parse_duration(&t).map_err(|e| bad("stop_when_cut_off", e.to_string()))?;
            let ms = d.as_millis() as u64;
            check_stop_when_cut_off(controller, ms).map_err(|r| bad("stop_when_cut_off", r))?;
            Some(ms)
        }
    };
    Ok(WorkloadSpec {
        name: name.clone(),
        command,
        copies: raw.copies as u64,
        controller,
        period_ms,
        startup_ms,
        readiness,
        grace_ms,
        env,
        backoff,
        rollout,
        restart,
        stop_when_cut_off_ms,
        generation: 0,
    })
}

/// The shortest `stop_when_cut_off`: an agent renews its lease every quarter of it (2.5 s by
/// default), so anything shorter than a second would stop copies between two renewals.
pub const MIN_STOP_WHEN_CUT_OFF: Duration = Duration::from_secs(1);
/// The longest `stop_when_cut_off`.
pub const MAX_STOP_WHEN_CUT_OFF: Duration = Duration::from_secs(7 * 24 * 3600);

fn check_stop_when_cut_off(controller: ControllerKind, ms: u64) -> Result<(), String> {
    if controller == ControllerKind::Named {
        return Err(
            "named copies are always stopped by their agent's fence when it is cut off \
             (never two of one name): accepted only for ledger, intent, expectations and gated"
                .into(),
        );
    }
    let (min, max) = (
        MIN_STOP_WHEN_CUT_OFF.as_millis() as u64,
        MAX_STOP_WHEN_CUT_OFF.as_millis() as u64,
    );
    if !(min..=max).contains(&ms) {
        return Err(format!(
            "{} is out of range: accepted {} to {}",
            format_duration(Duration::from_millis(ms)),
            format_duration(MIN_STOP_WHEN_CUT_OFF),
            format_duration(MAX_STOP_WHEN_CUT_OFF)
        ));
    }
    Ok(())
}

/// Checks a declaration read back from the store by the rules [`parse_workloads`] checks on the
/// way in: a record written straight into the store (not through `apply`) that breaks one is
/// refused the same way, so `copies = 10000000` cannot make a pass's work unbounded, nor
/// `period_ms = 0` a hot loop. The reason names the field and what is accepted.
pub fn check_stored(w: &WorkloadSpec) -> Result<(), String> {
    check_name(&w.name).map_err(|r| format!("name: {r}"))?;
    rules::check_env(&w.env).map_err(|r| format!("env: {r}"))?;
    rules::check_command(&w.command, &w.env).map_err(|r| format!("command: {r}"))?;
    if let Some(r) = &w.readiness {
        rules::check_command(r, &w.env).map_err(|r| format!("readiness: {r}"))?;
    }
    if w.copies > MAX_COPIES {
        return Err(format!(
            "copies: {} is out of range: accepted 0 to {MAX_COPIES}",
            w.copies
        ));
    }
    if let Some(ms) = w.stop_when_cut_off_ms {
        check_stop_when_cut_off(w.controller, ms)
            .map_err(|r| format!("stop_when_cut_off_ms: {r}"))?;
    }
    let min = MIN_PERIOD.as_millis() as u64;
    if w.period_ms < min {
        return Err(format!(
            "period_ms: {} is too short: accepted at least {min}",
            w.period_ms
        ));
    }
    let day = crate::model::backoff::MAX_INITIAL_MS;
    let b = &w.backoff;
    if b.initial_ms == 0 || b.initial_ms > day || b.max_ms < b.initial_ms || b.max_ms > day {
        return Err(format!(
            "backoff: initial {}ms, max {}ms are out of range: accepted initial 1ms to 24h and max from initial to 24h",
            b.initial_ms, b.max_ms
        ));
    }
    if b.reset_ms == 0 {
        return Err("backoff: reset 0 is out of range: accepted at least 1ms".into());
    }
    let r = &w.rollout;
    for (field, a) in [
        ("max_surge", r.max_surge),
        ("max_unavailable", r.max_unavailable),
    ] {
        let ok = match a {
            Amount::Copies(n) => n <= MAX_COPIES,
            Amount::Percent(p) => p <= 100,
        };
        if !ok {
            return Err(format!(
                "rollout.{field}: {a:?} is out of range: accepted 0 to {MAX_COPIES} copies or 0% to 100%"
            ));
        }
    }
    if r.max_surge.is_zero() && r.max_unavailable.is_zero() {
        return Err(
            "rollout: max_surge and max_unavailable are both 0: accepted at least one above 0"
                .into(),
        );
    }
    if !(1_000..=day).contains(&r.progress_deadline_ms) {
        return Err(format!(
            "rollout.progress_deadline_ms: {} is out of range: accepted 1000 to {day}",
            r.progress_deadline_ms
        ));
    }
    Ok(())
}

/// Reads `rollout = { max_surge, max_unavailable, progress_deadline }`: each budget a number of
/// copies (0 to 100000) or a percentage (`"25%"`, 0 to 100), not both 0; the deadline from 1s to
/// 24h.
fn rollout_policy(r: RawRollout) -> Result<RolloutPolicy, (&'static str, String)> {
    let d = RolloutPolicy::default();
    let amount = |field: &'static str, raw: Option<RawAmount>, default: Amount| {
        let accepted =
            "accepted a number of copies from 0 to 100000 or a percentage from \"0%\" to \"100%\"";
        match raw {
            None => Ok(default),
            Some(RawAmount::Count(n)) if (0..=MAX_COPIES as i64).contains(&n) => {
                Ok(Amount::Copies(n as u64))
            }
            Some(RawAmount::Count(n)) => Err((field, format!("{n} is out of range: {accepted}"))),
            Some(RawAmount::Text(t)) => t
                .strip_suffix('%')
                .and_then(|p| p.trim().parse::<u64>().ok())
                .filter(|p| *p <= 100)
                .map(Amount::Percent)
                .ok_or_else(|| (field, format!("'{t}' is not valid: {accepted}"))),
        }
    };
    let max_surge = amount("rollout.max_surge", r.max_surge, d.max_surge)?;
    let max_unavailable = amount(
        "rollout.max_unavailable",
        r.max_unavailable,
        d.max_unavailable,
    )?;
    if max_surge.is_zero() && max_unavailable.is_zero() {
        return Err((
            "rollout.max_unavailable",
            "0 with rollout.max_surge 0 is out of range: a rollout could never replace a copy; accepted at least one of the two above 0".into(),
        ));
    }
    let progress_deadline_ms = match r.progress_deadline {
        None => d.progress_deadline_ms,
        Some(t) => parse_duration(&t)
            .map(|d| d.as_millis() as u64)
            .map_err(|e| {
                (
                    "rollout.progress_deadline",
                    format!("{e}; accepted 1s to 24h"),
                )
            })?,
    };
    if !(1_000..=crate::model::backoff::MAX_INITIAL_MS).contains(&progress_deadline_ms) {
        return Err((
            "rollout.progress_deadline",
            format!(
                "{} is out of range: accepted 1s to 24h",
                format_duration(Duration::from_millis(progress_deadline_ms))
            ),
        ));
    }
    Ok(RolloutPolicy {
        max_surge,
        max_unavailable,
        progress_deadline_ms,
    })
}

/// Reads `backoff = { initial, max, reset }`: `initial` from 1ms to 24h, `max` at least
/// `initial` and at most 24h, `reset` at least 1ms. Missing fields take the kubelet's defaults.
fn backoff_policy(b: RawBackoff) -> Result<BackoffPolicy, (&'static str, String)> {
    let d = BackoffPolicy::default();
    let read = |field: &'static str, text: Option<String>, default: u64| match text {
        None => Ok(default),
        Some(t) => parse_duration(&t)
            .map(|d| d.as_millis() as u64)
            .map_err(|e| (field, format!("{e}; accepted 1ms to 24h"))),
    };
    let initial_ms = read("backoff.initial", b.initial, d.initial_ms)?;
    let max_ms = read("backoff.max", b.max, d.max_ms.max(initial_ms))?;
    let reset_ms = read("backoff.reset", b.reset, d.reset_ms)?;
    let day = crate::model::backoff::MAX_INITIAL_MS;
    if initial_ms == 0 || initial_ms > day {
        return Err((
            "backoff.initial",
            format!(
                "{} is out of range: accepted 1ms to 24h",
                format_duration(Duration::from_millis(initial_ms))
            ),
        ));
    }
    if max_ms < initial_ms || max_ms > day {
        return Err((
            "backoff.max",
            format!(
                "{} is out of range: accepted from backoff.initial ({}) to 24h",
                format_duration(Duration::from_millis(max_ms)),
                format_duration(Duration::from_millis(initial_ms))
            ),
        ));
    }
    if reset_ms == 0 {
        return Err((
            "backoff.reset",
            "0 is out of range: accepted at least 1ms".into(),
        ));
    }
    Ok(BackoffPolicy {
        initial_ms,
        max_ms,
        reset_ms,
    })
}

fn argv(c: RawCommand, env: &CopyEnv) -> Result<Vec<String>, String> {
    let v = match c {
        RawCommand::Argv(v) => v,
        RawCommand::Shell(s) => vec!["sh".into(), "-c".into(), s],
    };
    rules::check_command(&v, env)?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_everything_but_name_command_and_copies() {
        let w = parse_workloads(
            "[[workload]]\nname = \"collector\"\ncommand = [\"sleep\", \"60\"]\ncopies = 6\n",
        )
        .unwrap();
        assert_eq!(w.len(), 1);
        let w = &w[0];
        assert_eq!(w.controller, ControllerKind::Intent);
        assert_eq!(
            (w.period_ms, w.startup_ms, w.grace_ms),
            (15_000, 5_000, 10_000)
        );
        assert_eq!(w.readiness, None);
        assert_eq!(w.backoff, BackoffPolicy::default());
    }

    #[test]
    fn backoff_settings_are_read_with_units_and_missing_ones_keep_the_defaults() {
        let w = parse_workloads(
            "[[workload]]\nname = \"a\"\ncommand = [\"false\"]\ncopies = 1\nbackoff = { initial = \"200ms\", reset = \"3s\" }\n",
        )
        .unwrap();
        assert_eq!(
            w[0].backoff,
            BackoffPolicy {
                initial_ms: 200,
                max_ms: 300_000,
                reset_ms: 3_000
            }
        );
        // A large initial delay lifts the default cap with it rather than failing.
        let w = parse_workloads(
            "[[workload]]\nname = \"a\"\ncommand = [\"false\"]\ncopies = 1\nbackoff = { initial = \"10m\" }\n",
        )
        .unwrap();
        assert_eq!(
            (w[0].backoff.initial_ms, w[0].backoff.max_ms),
            (600_000, 600_000)
        );
    }

    #[test]
    fn a_string_command_runs_under_sh() {
        let w = parse_workloads(
            "[[workload]]\nname = \"a\"\ncommand = \"sleep 60\"\ncopies = 1\nreadiness = \"true\"\nperiod = \"200ms\"\n",
        )
        .unwrap();
        assert_eq!(w[0].command, ["sh", "-c", "sleep 60"]);
        assert_eq!(
            w[0].readiness.as_deref(),
            Some(&["sh".to_owned(), "-c".into(), "true".into()][..])
        );
        assert_eq!(w[0].period_ms, 200);
    }

    #[test]
    fn one_bad_workload_rejects_the_file_with_its_name_and_field() {
        let cases = [
            ("name = \"Bad\"\ncommand = [\"x\"]\ncopies = 1", "name"),
            ("name = \"a\"\ncommand = []\ncopies = 1", "command"),
            ("name = \"a\"\ncommand = [\"x\"]\ncopies = -1", "copies"),
            ("name = \"a\"\ncommand = [\"x\"]\ncopies = 100001", "copies"),
            (
                "name = \"a\"\ncommand = [\"x\"]\ncopies = 1\nperiod = \"0\"",
                "period",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ncopies = 1\nperiod = \"15\"",
                "period",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ncopies = 1\ncontroller = \"pid\"",
                "controller",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ncopies = 1\nbackoff = { initial = \"0\" }",
                "backoff.initial",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ncopies = 1\nbackoff = { initial = \"25h\", max = \"25h\" }",
                "backoff.initial",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ncopies = 1\nbackoff = { initial = \"-1s\" }",
                "backoff.initial",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ncopies = 1\nbackoff = { initial = \"1m\", max = \"10s\" }",
                "backoff.max",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ncopies = 1\nbackoff = { reset = \"0\" }",
                "backoff.reset",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ncopies = 1\nrollout = { max_surge = 0, max_unavailable = \"0%\" }",
                "rollout.max_unavailable",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ncopies = 1\nrollout = { max_surge = -1 }",
                "rollout.max_surge",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ncopies = 1\nrollout = { max_surge = \"150%\" }",
                "rollout.max_surge",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ncopies = 1\nrollout = { progress_deadline = \"0\" }",
                "rollout.progress_deadline",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ncopies = 1\nrestart = \"sometimes\"",
                "restart",
            ),
        ];
        for (body, field) in cases {
            let text = format!("[[workload]]\nname = \"ok\"\ncommand = [\"x\"]\ncopies = 1\n[[workload]]\n{body}\n");
            match parse_workloads(&text) {
                Err(SpecError::Invalid { field: f, .. }) => assert_eq!(f, field, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_restart_setting_is_read_and_a_bad_one_names_the_accepted_words() {
        let w = parse_workloads(
            "[[workload]]\nname = \"a\"\ncommand = [\"true\"]\ncopies = 1\nrestart = \"on-failure\"\n",
        )
        .unwrap();
        assert_eq!(w[0].restart, Restart::OnFailure);
        let w = parse_workloads("[[workload]]\nname = \"a\"\ncommand = [\"true\"]\ncopies = 1\n")
            .unwrap();
        assert_eq!(w[0].restart, Restart::Always);
        let e = parse_workloads(
            "[[workload]]\nname = \"a\"\ncommand = [\"true\"]\ncopies = 1\nrestart = \"onfailure\"\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "workload 'a': restart: 'onfailure' is not a restart setting: accepted are always, on-failure, never"
        );
    }

    #[test]
    fn stop_when_cut_off_is_read_refused_for_named_and_bounded() {
        use crate::model::CutOff;
        let file = |controller: &str, stop: &str| {
            format!(
                "[[workload]]\nname = \"a\"\ncommand = [\"true\"]\ncopies = 1\n\
                 controller = \"{controller}\"\nstop_when_cut_off = \"{stop}\"\n"
            )
        };
        let w = parse_workloads(&file("intent", "30s")).unwrap();
        assert_eq!(w[0].stop_when_cut_off_ms, Some(30_000));
        assert_eq!(w[0].cut_off(), CutOff::After(30_000));
        let plain = "[[workload]]\nname = \"a\"\ncommand = [\"true\"]\ncopies = 1\n";
        assert_eq!(parse_workloads(plain).unwrap()[0].cut_off(), CutOff::Keep);
        let named = format!("{plain}controller = \"named\"\n");
        assert_eq!(parse_workloads(&named).unwrap()[0].cut_off(), CutOff::Fence);
        assert_eq!(
            parse_workloads(&file("named", "30s"))
                .unwrap_err()
                .to_string(),
            "workload 'a': stop_when_cut_off: named copies are always stopped by their agent's \
             fence when it is cut off (never two of one name): accepted only for ledger, intent, \
             expectations and gated"
        );
        assert_eq!(
            parse_workloads(&file("intent", "500ms"))
                .unwrap_err()
                .to_string(),
            "workload 'a': stop_when_cut_off: 500ms is out of range: accepted 1s to 168h"
        );
        assert!(parse_workloads(&file("intent", "soon"))
            .unwrap_err()
            .to_string()
            .starts_with("workload 'a': stop_when_cut_off: "));
        // Read back from the store by the same rules.
        let mut stored = w[0].clone();
        assert_eq!(check_stored(&stored), Ok(()));
        stored.stop_when_cut_off_ms = Some(0);
        let refused = check_stored(&stored).unwrap_err();
        assert!(
            refused.starts_with("stop_when_cut_off_ms: ") && refused.contains("out of range"),
            "{refused}"
        );
        // An assignment written before the field is fenced, as before.
        let old: crate::model::Assignment = serde_json::from_str(
            r#"{"copy":"a-0","workload":"a","owner_uid":1,"n":0,"node":"n","command":["x"],
                "startup_ms":0,"readiness":null,"grace_ms":0,"created_ms":0}"#,
        )
        .unwrap();
        assert_eq!(old.cut_off, CutOff::Fence);
    }

    #[test]
    fn duplicates_unknown_fields_and_empty_files_are_refused() {
        let dup = "[[workload]]\nname = \"a\"\ncommand = [\"x\"]\ncopies = 1\n".repeat(2);
        assert_eq!(parse_workloads(&dup), Err(SpecError::Duplicate("a".into())));
        let unknown = "[[workload]]\nname = \"a\"\ncommand = [\"x\"]\ncopies = 1\nreplicas = 2\n";
        assert!(matches!(
            parse_workloads(unknown),
            Err(SpecError::Syntax(_))
        ));
        assert_eq!(parse_workloads(""), Err(SpecError::Empty));
    }
}
