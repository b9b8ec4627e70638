//! Scenario files: a [`ScenarioSpec`] written in TOML.
//!
//! ```toml
//! description = "The lesson's run"   # free text, ignored
//! period = 15                        # loop period U, seconds (default 15)
//! duration = 900                     # last second of the run (default 900)
//! seed = 1                           # seed of the world's generator (default 1)
//! unique_names = true                # named creations of an existing name are no-ops (default)
//!
//! [controller]                       # default: kind = "ledger"
//! kind = "expectations"              # ledger | intent | expectations | named | gated
//! ttl = 300                          # expectations only: seconds (default 300)
//! burst = 500                        # expectations only: copies per pass (default 500)
//!
//! [delay]                            # default: model = "fixed", seconds = 0
//! model = "uniform"                  # fixed (seconds) | uniform (min, max) | chain (stages)
//! min = 5                            #   | lesson-chain (no settings)
//! max = 30                           # seconds, to the millisecond
//!
//! [startup]                          # default: none (each workload's fixed `startup`)
//! model = "empirical"                # every copy's startup drawn from a model: the models
//! file = "empirical/startup.toml"    #   and keys of [delay]; empirical takes the file's
//!                                    #   `startup` model
//!
//! [pipeline]                         # default: mode = "per-report", nodes = 1
//! mode = "in-order"                  # per-report | in-order | snapshot | per-copy
//! nodes = 3                          # copies placed round robin in creation order
//! report_every = 0.5                 # in-order only: a node snapshot every 0.5 s (default 0:
//!                                    #   one report per copy event)
//!
//! [[workload]]                       # one or more
//! name = "collector"
//! desired = 6
//! startup = 5                        # seconds (default 5)
//!
//! [[event]]                          # any number; `workload` omitted strikes every workload
//! at = 300
//! kind = "deaths"                    # deaths (count or fraction) | scale (desired)
//! count = 2                          #   | outage (seconds) | restart | stale (seconds)
//!                                    #   | lose-delete (count, default 1)
//!                                    #   | crash-loop (seconds: each of the next `count`
//!                                    #     copies ends this long after its creation; the
//!                                    #     workload backs off from `initial` (10) to `max` (300))
//!                                    #   | update (the template changes: a rolling update
//!                                    #     replaces every copy under `max_surge` and
//!                                    #     `max_unavailable`, each copies or "N%", default
//!                                    #     "25%", not both 0; `progress_deadline` seconds,
//!                                    #     default 600; `counts_pending = false` makes it
//!                                    #     count only the ledger, to show what that costs)
//! ```
//!
//! Every error names the file, the line and the key, on one line: an unknown key, a value of the
//! wrong type, a value out of range, or a setting that does not apply (such as `ttl` for the
//! `ledger` controller).

use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use setpoint_core::{ControllerKind, ExpectationsConfig};
use toml::{Spanned, Value};

use crate::delay::{DelayModel, Millis, Stage, MAX_DELAY_MS};
use crate::lesson_world::{Limit, MAX_SECONDS};
use crate::pipeline::{PipelineSpec, UnknownPipeline, MAX_NODES};
use crate::scenario::{
    ControllerSpec, Event, ScenarioError, ScenarioSpec, TimedEvent, Toll, Workload, BURST,
    DEFAULT_PROGRESS_DEADLINE, EVENT_AT, EVENT_COUNT, PROGRESS_DEADLINE, TTL, WINDOW,
};
use setpoint_core::rollout::Amount;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[allow(dead_code)]
    description: Option<String>,
    period: Option<Spanned<i64>>,
    duration: Option<Spanned<i64>>,
    seed: Option<Spanned<i64>>,
    unique_names: Option<bool>,
    controller: Option<RawController>,
    delay: Option<RawDelay>,
    /// Every copy's startup time drawn from this model, with the keys of `[delay]`.
    startup: Option<RawDelay>,
    pipeline: Option<RawPipeline>,
    #[serde(default)]
    workload: Vec<RawWorkload>,
    #[serde(default)]
    event: Vec<RawEvent>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawController {
    kind: Spanned<String>,
    ttl: Option<Spanned<i64>>,
    burst: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDelay {
    model: Spanned<String>,
    seconds: Option<Spanned<Value>>,
    min: Option<Spanned<Value>>,
    max: Option<Spanned<Value>>,
    stages: Option<Spanned<Vec<RawStage>>>,
    /// For `empirical`: the model file, relative to the scenario file.
    file: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPipeline {
    mode: Option<Spanned<String>>,
    nodes: Option<Spanned<i64>>,
    report_every: Option<Spanned<Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStage {
    name: Spanned<String>,
    min: Spanned<Value>,
    max: Spanned<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    name: Spanned<String>,
    desired: Spanned<i64>,
    startup: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    at: Spanned<i64>,
    kind: Spanned<String>,
    workload: Option<Spanned<String>>,
    count: Option<Spanned<i64>>,
    fraction: Option<Spanned<Value>>,
    desired: Option<Spanned<i64>>,
    seconds: Option<Spanned<i64>>,
    initial: Option<Spanned<i64>>,
    max: Option<Spanned<i64>>,
    max_surge: Option<Spanned<Value>>,
    max_unavailable: Option<Spanned<Value>>,
    progress_deadline: Option<Spanned<i64>>,
    counts_pending: Option<Spanned<bool>>,
}

/// Reads and parses the scenario file at `path`.
pub fn load(path: &Path) -> Result<ScenarioSpec, ScenarioError> {
    let label = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError::Unreadable {
        path: label.clone(),
        message: e.to_string(),
    })?;
    parse(&label, &text)
}

/// Parses the text of a scenario file; `label` names it in errors.
pub fn parse(label: &str, text: &str) -> Result<ScenarioSpec, ScenarioError> {
    let file = Located { label, text };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let (line, key, message) = toml_error(text, &e);
        ScenarioError::File {
            path: label.to_owned(),
            line,
            key,
            message,
        }
    })?;
    file.convert(raw)
}

/// Where a TOML syntax or type error sits, and what it says: `(line, key, message)`, with
/// toml's wording made readable on one line. Every setpoint file format that reports
/// `file:line: key: message` (scenario files, chaos fault models) reads its errors through it.
pub fn toml_error(text: &str, e: &toml::de::Error) -> (usize, String, String) {
    let message = e
        .message()
        .trim_end()
        .replace('\n', "; ")
        .replace("expected i64", "expected a whole number");
    match e.span() {
        Some(span) => {
            let (line, key) = locate(text, span.start);
            (line, key, message)
        }
        None => (1, "(file)".into(), message),
    }
}

/// The file being converted, for errors.
struct Located<'a> {
    label: &'a str,
    text: &'a str,
}

impl Located<'_> {
    /// An error at byte range `span`; `key` is the key path when known, otherwise it is read
    /// from the file around the span.
    fn error_at(&self, span: Range<usize>, key: Option<&str>, message: String) -> ScenarioError {
        let (line, found) = locate(self.text, span.start);
        ScenarioError::File {
            path: self.label.to_owned(),
            line,
            key: key.map_or(found, str::to_owned),
            message,
        }
    }

    fn error<T>(&self, value: &Spanned<T>, key: &str, message: impl Into<String>) -> ScenarioError {
        self.error_at(value.span(), Some(key), message.into())
    }

    /// A whole number inside `limit`.
    fn limited(&self, value: &Spanned<i64>, key: &str, limit: Limit) -> Result<u64, ScenarioError> {
        let v = *value.get_ref();
        u64::try_from(v)
            .ok()
            .and_then(|v| limit.check(v).ok())
            .ok_or_else(|| {
                self.error(
                    value,
                    key,
                    format!(
                        "{v} is out of range: accepted {} to {} {}",
                        limit.min, limit.max, limit.unit
                    ),
                )
            })
    }

    /// Seconds, whole or with up to three decimals, as milliseconds.
    fn millis(&self, value: &Spanned<Value>, key: &str) -> Result<Millis, ScenarioError> {
        let range = format!("accepted 0 to {MAX_SECONDS} seconds, to the millisecond");
        let ms = match value.get_ref() {
            Value::Integer(i) => i.checked_mul(1000),
            Value::Float(f) if f.is_finite() => {
                let ms = (f * 1000.0).round();
                if (f * 1000.0 - ms).abs() > 1e-6 {
                    return Err(self.error(
                        value,
                        key,
                        format!("{f} is finer than a millisecond: {range}"),
                    ));
                }
                (ms.abs() < 9.0e18).then_some(ms as i64)
            }
            other => {
                return Err(self.error(
                    value,
                    key,
                    format!("expected a number of seconds, found {}", other.type_str()),
                ))
            }
        };
        ms.and_then(|ms| u64::try_from(ms).ok())
            .filter(|&ms| ms <= MAX_DELAY_MS)
            .ok_or_else(|| {
                self.error(
                    value,
                    key,
                    format!("{} is out of range: {range}", value.get_ref()),
                )
            })
    }

    fn convert(&self, raw: RawFile) -> Result<ScenarioSpec, ScenarioError> {
        let mut spec = ScenarioSpec {
            events: Vec::new(),
            workloads: Vec::new(),
            ..ScenarioSpec::default()
        };
        if let Some(v) = &raw.period {
            spec.period = self.limited(v, "period", Limit::PERIOD)?;
        }
        if let Some(v) = &raw.duration {
            spec.duration = self.limited(v, "duration", Limit::DURATION)?;
        }
        if let Some(v) = &raw.seed {
            let seed = *v.get_ref();
            spec.seed = u64::try_from(seed).map_err(|_| {
                self.error(
                    v,
                    "seed",
                    format!("{seed} is out of range: accepted 0 to {}", i64::MAX),
                )
            })?;
        }
        if let Some(u) = raw.unique_names {
            spec.unique_names = u;
        }
        if let Some(c) = &raw.controller {
            spec.controller = self.controller(c)?;
        }
        if let Some(d) = &raw.delay {
            spec.delay = self.delay(d, "delay", crate::calibrate::DelayKind::ReportDelay)?;
        }
        if let Some(d) = &raw.startup {
            spec.startup_model =
                Some(self.delay(d, "startup", crate::calibrate::DelayKind::Startup)?);
        }
        if let Some(p) = &raw.pipeline {
            spec.pipeline = self.pipeline(p)?;
        }
        if raw.workload.is_empty() {
            return Err(ScenarioError::File {
                path: self.label.to_owned(),
                line: 1,
                key: "workload".into(),
                message: "the scenario has no workload: declare at least one [[workload]]".into(),
            });
        }
        for (i, w) in raw.workload.iter().enumerate() {
            let key = |k: &str| format!("workload[{}].{k}", i + 1);
            let name = w.name.get_ref().clone();
            if let Err(e) = crate::scenario::check_workload_name(&name) {
                return Err(self.error(&w.name, &key("name"), e.to_string()));
            }
            if spec.workloads.iter().any(|o: &Workload| o.name == name) {
                return Err(self.error(
                    &w.name,
                    &key("name"),
                    format!("workload name '{name}' is declared twice"),
                ));
            }
            let desired = self.limited(&w.desired, &key("desired"), Limit::DESIRED)?;
            let startup = match &w.startup {
                // One startup rule per file: a model, or each workload's fixed time.
                Some(v) if raw.startup.is_some() => {
                    return Err(self.error(
                        v,
                        &key("startup"),
                        "does not apply with a [startup] model, which draws every copy's startup; accepted: one of the two",
                    ))
                }
                Some(v) => self.limited(v, &key("startup"), Limit::STARTUP)?,
                None => 5,
            };
            spec.workloads.push(Workload {
                name,
                desired,
                startup,
            });
        }
        for (i, e) in raw.event.iter().enumerate() {
            let event = self.event(e, i + 1, &spec.workloads)?;
            spec.events.push(event);
        }
        Ok(spec)
    }

    fn controller(&self, c: &RawController) -> Result<ControllerSpec, ScenarioError> {
        let kind: ControllerKind =
            c.kind
                .get_ref()
                .parse()
                .map_err(|e: setpoint_core::UnknownController| {
                    self.error(&c.kind, "controller.kind", e.to_string())
                })?;
        let mut config = ExpectationsConfig::default();
        for (value, key, limit, slot) in [
            (&c.ttl, "controller.ttl", TTL, &mut config.ttl),
            (&c.burst, "controller.burst", BURST, &mut config.burst),
        ] {
            if let Some(v) = value {
                if kind != ControllerKind::Expectations {
                    return Err(self.error(
                        v,
                        key,
                        format!("applies only to controller 'expectations', not '{kind}'"),
                    ));
                }
                *slot = self.limited(v, key, limit)?;
            }
        }
        Ok(ControllerSpec {
            kind,
            expectations: config,
        })
    }

    fn pipeline(&self, p: &RawPipeline) -> Result<PipelineSpec, ScenarioError> {
        let mut spec = PipelineSpec::default();
        if let Some(mode) = &p.mode {
            spec.mode = mode
                .get_ref()
                .parse()
                .map_err(|e: UnknownPipeline| self.error(mode, "pipeline.mode", e.to_string()))?;
        }
        if let Some(nodes) = &p.nodes {
            spec.nodes = u32::try_from(*nodes.get_ref())
                .ok()
                .filter(|n| (1..=MAX_NODES).contains(n))
                .ok_or_else(|| {
                    self.error(
                        nodes,
                        "pipeline.nodes",
                        format!(
                            "{} is out of range: accepted 1 to {MAX_NODES} nodes",
                            nodes.get_ref()
                        ),
                    )
                })?;
        }
        if let Some(every) = &p.report_every {
            spec.report_every_ms = self.millis(every, "pipeline.report_every")?;
            if let Err(e) = spec.check() {
                return Err(self.error(every, "pipeline.report_every", e.to_string()));
            }
        }
        Ok(spec)
    }

    /// The model of a `[delay]` or `[startup]` table (`table`, which names its keys in errors);
    /// `empirical` reads the model file's model of `kind`.
    fn delay(
        &self,
        d: &RawDelay,
        table: &str,
        kind: crate::calibrate::DelayKind,
    ) -> Result<DelayModel, ScenarioError> {
        let what = if table == "delay" {
            "delay model"
        } else {
            "startup model"
        };
        let model = d.model.get_ref().as_str();
        let allowed: &[&str] = match model {
            "fixed" => &["seconds"],
            "uniform" => &["min", "max"],
            "chain" => &["stages"],
            "lesson-chain" => &[],
            "empirical" => &["file"],
            other => {
                return Err(self.error(
                    &d.model,
                    &format!("{table}.model"),
                    format!(
                        "unknown {what} '{other}': accepted are fixed, uniform, chain, lesson-chain, empirical"
                    ),
                ))
            }
        };
        let present = [
            ("seconds", d.seconds.as_ref().map(Spanned::span)),
            ("min", d.min.as_ref().map(Spanned::span)),
            ("max", d.max.as_ref().map(Spanned::span)),
            ("stages", d.stages.as_ref().map(Spanned::span)),
            ("file", d.file.as_ref().map(Spanned::span)),
        ];
        for (key, span) in present {
            match span {
                Some(span) if !allowed.contains(&key) => {
                    return Err(self.error_at(
                        span,
                        Some(&format!("{table}.{key}")),
                        format!("does not apply to {what} '{model}'"),
                    ))
                }
                None if allowed.contains(&key) => {
                    return Err(self.error(
                        &d.model,
                        &format!("{table}.{key}"),
                        format!("{what} '{model}' needs '{key}'"),
                    ))
                }
                _ => {}
            }
        }
        Ok(match model {
            "fixed" => DelayModel::Fixed(self.millis(
                d.seconds.as_ref().expect("checked"),
                &format!("{table}.seconds"),
            )?),
            "uniform" => {
                let (min, max) = (
                    d.min.as_ref().expect("checked"),
                    d.max.as_ref().expect("checked"),
                );
                let (lo, hi) = (
                    self.millis(min, &format!("{table}.min"))?,
                    self.millis(max, &format!("{table}.max"))?,
                );
                if lo > hi {
                    return Err(self.error(
                        max,
                        &format!("{table}.max"),
                        format!("max is below min ({} s)", crate::delay::seconds(lo)),
                    ));
                }
                DelayModel::Uniform { min: lo, max: hi }
            }
            "chain" => {
                let stages = d.stages.as_ref().expect("checked");
                if stages.get_ref().is_empty() || stages.get_ref().len() > crate::delay::MAX_STAGES
                {
                    return Err(self.error(
                        stages,
                        &format!("{table}.stages"),
                        format!("accepted 1 to {} stages", crate::delay::MAX_STAGES),
                    ));
                }
                let mut out = Vec::new();
                for (i, s) in stages.get_ref().iter().enumerate() {
                    let key = |k: &str| format!("{table}.stages[{}].{k}", i + 1);
                    let (lo, hi) = (
                        self.millis(&s.min, &key("min"))?,
                        self.millis(&s.max, &key("max"))?,
                    );
                    if lo > hi {
                        return Err(self.error(
                            &s.max,
                            &key("max"),
                            format!("max is below min ({} s)", crate::delay::seconds(lo)),
                        ));
                    }
                    out.push(Stage {
                        name: s.name.get_ref().clone(),
                        min: lo,
                        max: hi,
                    });
                }
                let chain = DelayModel::Chain(out);
                if chain.max_ms() > MAX_DELAY_MS {
                    return Err(self.error(
                        stages,
                        &format!("{table}.stages"),
                        format!("the chain's worst case is above {MAX_SECONDS} seconds"),
                    ));
                }
                chain
            }
            "empirical" => {
                let file = d.file.as_ref().expect("checked");
                // Relative to the scenario file, so a scenario and its model move together.
                let dir = Path::new(self.label).parent().unwrap_or(Path::new(""));
                let path = dir.join(file.get_ref());
                let e = crate::calibrate::model_file::load_kind(&path, kind)
                    .map_err(|e| self.error(file, &format!("{table}.file"), e.to_string()))?;
                DelayModel::Empirical(std::sync::Arc::new(e))
            }
            _ => DelayModel::lesson_chain(),
        })
    }

    fn event(
        &self,
        e: &RawEvent,
        n: usize,
        workloads: &[Workload],
    ) -> Result<TimedEvent, ScenarioError> {
        let key = |k: &str| format!("event[{n}].{k}");
        let at = self.limited(&e.at, &key("at"), EVENT_AT)?;
        let kind = e.kind.get_ref().as_str();
        let allowed: &[&str] = match kind {
            "deaths" => &["count", "fraction"],
            "scale" => &["desired"],
            "outage" | "stale" => &["seconds"],
            "restart" => &[],
            "lose-delete" => &["count"],
            "crash-loop" => &["seconds", "count", "initial", "max"],
            "update" => &[
                "max_surge",
                "max_unavailable",
                "progress_deadline",
                "counts_pending",
            ],
            other => {
                return Err(self.error(
                    &e.kind,
                    &key("kind"),
                    format!("unknown event '{other}': accepted are deaths, scale, outage, restart, stale, lose-delete, crash-loop, update"),
                ))
            }
        };
        let present = [
            ("count", e.count.as_ref().map(Spanned::span)),
            ("fraction", e.fraction.as_ref().map(Spanned::span)),
            ("desired", e.desired.as_ref().map(Spanned::span)),
            ("seconds", e.seconds.as_ref().map(Spanned::span)),
            ("initial", e.initial.as_ref().map(Spanned::span)),
            ("max", e.max.as_ref().map(Spanned::span)),
            ("max_surge", e.max_surge.as_ref().map(Spanned::span)),
            (
                "max_unavailable",
                e.max_unavailable.as_ref().map(Spanned::span),
            ),
            (
                "progress_deadline",
                e.progress_deadline.as_ref().map(Spanned::span),
            ),
            (
                "counts_pending",
                e.counts_pending.as_ref().map(Spanned::span),
            ),
        ];
        for (k, span) in &present {
            if let Some(span) = span {
                if !allowed.contains(k) {
                    return Err(self.error_at(
                        span.clone(),
                        Some(&key(k)),
                        format!("does not apply to a '{kind}' event"),
                    ));
                }
            }
        }
        let needs = |k: &str| self.error(&e.kind, &key(k), format!("a '{kind}' event needs '{k}'"));
        let event = match kind {
            "deaths" => match (&e.count, &e.fraction) {
                (Some(c), None) => {
                    Event::Deaths(Toll::Count(self.limited(c, &key("count"), EVENT_COUNT)?))
                }
                (None, Some(f)) => {
                    Event::Deaths(Toll::PartsPerMillion(self.fraction(f, &key("fraction"))?))
                }
                (Some(_), Some(f)) => {
                    return Err(self.error(
                        f,
                        &key("fraction"),
                        "give either count or fraction, not both",
                    ))
                }
                (None, None) => return Err(needs("count")),
            },
            "scale" => Event::Scale {
                desired: self.limited(
                    e.desired.as_ref().ok_or_else(|| needs("desired"))?,
                    &key("desired"),
                    Limit::DESIRED,
                )?,
            },
            "outage" => Event::Outage {
                seconds: self.limited(
                    e.seconds.as_ref().ok_or_else(|| needs("seconds"))?,
                    &key("seconds"),
                    WINDOW,
                )?,
            },
            "stale" => Event::Stale {
                seconds: self.limited(
                    e.seconds.as_ref().ok_or_else(|| needs("seconds"))?,
                    &key("seconds"),
                    WINDOW,
                )?,
            },
            "restart" => Event::Restart,
            "update" => {
                let max_surge = self.amount(&e.max_surge, &key("max_surge"))?;
                let max_unavailable = self.amount(&e.max_unavailable, &key("max_unavailable"))?;
                if max_surge.is_zero() && max_unavailable.is_zero() {
                    let at = e.max_unavailable.as_ref().or(e.max_surge.as_ref());
                    let message = crate::scenario::check_rollout(max_surge, max_unavailable)
                        .expect_err("both 0 is refused");
                    return Err(match at {
                        Some(v) => self.error(v, &key("max_unavailable"), message),
                        None => self.error(&e.kind, &key("max_unavailable"), message),
                    });
                }
                Event::Update {
                    max_surge,
                    max_unavailable,
                    progress_deadline: match &e.progress_deadline {
                        Some(v) => self.limited(v, &key("progress_deadline"), PROGRESS_DEADLINE)?,
                        None => DEFAULT_PROGRESS_DEADLINE,
                    },
                    counts_pending: e.counts_pending.as_ref().is_none_or(|v| *v.get_ref()),
                }
            }
            "crash-loop" => {
                let secs = |v: &Option<Spanned<i64>>, k: &str, default: u64| match v {
                    Some(v) => self.limited(v, &key(k), WINDOW),
                    None => Ok(default),
                };
                let initial = secs(&e.initial, "initial", 10)?;
                Event::CrashLoop {
                    after: self.limited(
                        e.seconds.as_ref().ok_or_else(|| needs("seconds"))?,
                        &key("seconds"),
                        WINDOW,
                    )?,
                    starts: self.limited(
                        e.count.as_ref().ok_or_else(|| needs("count"))?,
                        &key("count"),
                        EVENT_COUNT,
                    )?,
                    backoff: setpoint_core::backoff::BackoffPolicy {
                        initial,
                        max: secs(&e.max, "max", 300)?.max(initial),
                        reset: 600,
                    },
                }
            }
            _ => Event::LoseDeletes {
                count: match &e.count {
                    Some(c) => self.limited(c, &key("count"), EVENT_COUNT)?,
                    None => 1,
                },
            },
        };
        let workload = match &e.workload {
            None => None,
            Some(w) => {
                let name = w.get_ref();
                if !workloads.iter().any(|d| &d.name == name) {
                    return Err(self.error(
                        w,
                        &key("workload"),
                        format!("workload '{name}' is not declared"),
                    ));
                }
                Some(name.clone())
            }
        };
        Ok(TimedEvent {
            at,
            workload,
            event,
        })
    }

    /// A rollout budget: a whole number of copies (0 to the most copies) or a percentage
    /// (`"25%"`, 0 to 100); 25 % when absent, Kubernetes' default.
    fn amount(&self, value: &Option<Spanned<Value>>, key: &str) -> Result<Amount, ScenarioError> {
        let Some(value) = value else {
            return Ok(Amount::Percent(25));
        };
        let found = match value.get_ref() {
            Value::Integer(i) => u64::try_from(*i).ok().map(Amount::Copies),
            Value::String(t) if t.trim().ends_with('%') => Amount::from_text(t),
            _ => None,
        };
        found
            .filter(|a| crate::scenario::check_rollout(*a, Amount::Copies(1)).is_ok())
            .ok_or_else(|| {
                self.error(
                    value,
                    key,
                    format!(
                        "{} is out of range: {}",
                        value.get_ref(),
                        crate::scenario::rollout_accepted()
                    ),
                )
            })
    }

    /// A fraction in `0 ..= 1`, as parts per million.
    fn fraction(&self, value: &Spanned<Value>, key: &str) -> Result<u64, ScenarioError> {
        let f = match value.get_ref() {
            Value::Float(f) => *f,
            Value::Integer(i) => *i as f64,
            other => {
                return Err(self.error(
                    value,
                    key,
                    format!("expected a number from 0 to 1, found {}", other.type_str()),
                ))
            }
        };
        let ppm = (f * 1e6).round();
        if !(0.0..=1.0).contains(&f) || (f * 1e6 - ppm).abs() > 1e-6 {
            return Err(self.error(
                value,
                key,
                format!("{f} is out of range: accepted 0 to 1, in steps of 0.000001"),
            ));
        }
        Ok(ppm as u64)
    }
}

/// The line (from 1) of byte `offset` in `text`, and the key path written there: the enclosing
/// table header (`event[2]` for the second `[[event]]`) joined to the key the line assigns.
/// Other TOML files of the lab (the chaos fault models) report their errors with it too.
pub fn locate(text: &str, offset: usize) -> (usize, String) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line_no = before.matches('\n').count() + 1;
    let mut header = String::new();
    let mut arrays: std::collections::BTreeMap<String, usize> = Default::default();
    let mut on_header = false;
    for (i, line) in text.lines().enumerate().take(line_no) {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
            let name = name.trim().to_owned();
            let n = arrays.entry(name.clone()).or_insert(0);
            *n += 1;
            header = format!("{name}[{n}]");
            on_header = i + 1 == line_no;
        } else if let Some(name) = t.strip_prefix('[').and_then(|r| r.split(']').next()) {
            header = name.trim().to_owned();
            on_header = i + 1 == line_no;
        } else {
            on_header = false;
        }
    }
    let line = text.lines().nth(line_no - 1).unwrap_or("");
    let assigned = line
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches('"').to_owned())
        .filter(|k| !k.is_empty() && !k.starts_with('['));
    let key = match (on_header, assigned) {
        (true, _) | (false, None) if !header.is_empty() => header,
        (_, Some(k)) if header.is_empty() => k,
        (_, Some(k)) => format!("{header}.{k}"),
        _ => "(file)".to_owned(),
    };
    (line_no, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse("s.toml", text).unwrap_err().to_string()
    }

    const LESSON: &str = r#"
period = 15
duration = 900

[controller]
kind = "ledger"

[delay]
model = "fixed"
seconds = 20

[[workload]]
name = "collector"
desired = 6
startup = 5

[[event]]
at = 300
kind = "deaths"
count = 2
"#;

    #[test]
    fn a_lesson_file_parses_into_the_lessons_spec() {
        let spec = parse("s.toml", LESSON).unwrap();
        assert_eq!(spec.delay, DelayModel::Fixed(20_000));
        assert_eq!(spec.workloads[0].desired, 6);
        assert_eq!(spec.events[0].event, Event::Deaths(Toll::Count(2)));
    }

    #[test]
    fn a_crash_loop_event_reads_its_ending_count_and_backoff() {
        let text = LESSON.replace(
            "kind = \"deaths\"\ncount = 2",
            "kind = \"crash-loop\"\nseconds = 1\ncount = 5\ninitial = 4",
        );
        let spec = parse("s.toml", &text).unwrap();
        assert_eq!(
            spec.events[0].event,
            Event::CrashLoop {
                after: 1,
                starts: 5,
                backoff: setpoint_core::backoff::BackoffPolicy {
                    initial: 4,
                    max: 300,
                    reset: 600
                }
            }
        );
        let e = err(&text.replace("count = 5", "count = 5\ndesired = 3"));
        assert!(e.contains("does not apply to a 'crash-loop' event"), "{e}");
        let e = err(&text.replace("seconds = 1\n", ""));
        assert!(e.contains("a 'crash-loop' event needs 'seconds'"), "{e}");
    }

    #[test]
    fn an_update_event_reads_its_budgets_and_refuses_them_out_of_range() {
        let text = LESSON.replace(
            "kind = \"deaths\"\ncount = 2",
            "kind = \"update\"\nmax_surge = 2\nmax_unavailable = \"10%\"",
        );
        let spec = parse("s.toml", &text).unwrap();
        assert_eq!(
            spec.events[0].event,
            Event::Update {
                max_surge: Amount::Copies(2),
                max_unavailable: Amount::Percent(10),
                progress_deadline: 600,
                counts_pending: true,
            }
        );
        let defaults = parse(
            "s.toml",
            &LESSON.replace("kind = \"deaths\"\ncount = 2", "kind = \"update\""),
        )
        .unwrap();
        assert_eq!(
            defaults.events[0].event,
            Event::Update {
                max_surge: Amount::Percent(25),
                max_unavailable: Amount::Percent(25),
                progress_deadline: 600,
                counts_pending: true,
            }
        );
        for (bad, want) in [
            (
                "max_surge = 0\nmax_unavailable = \"0%\"",
                "s.toml:21: event[1].max_unavailable: max_unavailable 0 with max_surge 0 is out of range",
            ),
            (
                "max_surge = \"150%\"",
                "s.toml:20: event[1].max_surge: \"150%\" is out of range: accepted a number of copies from 0 to 100000000 or a percentage from \"0%\" to \"100%\"",
            ),
            ("max_surge = -1", "s.toml:20: event[1].max_surge: -1 is out of range"),
            ("max_unavailable = \"x\"", "s.toml:20: event[1].max_unavailable: \"x\" is out of range"),
            (
                "progress_deadline = 0",
                "s.toml:20: event[1].progress_deadline: 0 is out of range: accepted 1 to",
            ),
            ("count = 3", "s.toml:20: event[1].count: does not apply to a 'update' event"),
        ] {
            let e = err(&LESSON.replace("kind = \"deaths\"\ncount = 2", &format!("kind = \"update\"\n{bad}")));
            assert!(e.starts_with(want), "{bad}: {e}");
        }
    }

    #[test]
    fn an_unknown_key_is_reported_with_file_line_and_key() {
        let text = LESSON.replace("count = 2", "cuont = 2");
        assert!(
            err(&text).starts_with("s.toml:20: event[1].cuont: unknown field `cuont`"),
            "{}",
            err(&text)
        );
    }

    #[test]
    fn a_wrong_type_is_reported_with_file_line_and_key() {
        let text = LESSON.replace("desired = 6", "desired = \"six\"");
        let e = err(&text);
        assert!(
            e.starts_with("s.toml:14: workload[1].desired: invalid type: string \"six\", expected a whole number"),
            "{e}"
        );
    }

    #[test]
    fn an_impossible_value_is_reported_with_file_line_and_key() {
        let e = err(&LESSON.replace("period = 15", "period = 0"));
        assert_eq!(
            e,
            "s.toml:2: period: 0 is out of range: accepted 1 to 1000000000 seconds"
        );
        let e = err(&LESSON.replace("seconds = 20", "seconds = -1"));
        assert!(
            e.starts_with("s.toml:10: delay.seconds: -1 is out of range"),
            "{e}"
        );
    }

    #[test]
    fn settings_that_do_not_apply_are_refused() {
        let e = err(&LESSON.replace("kind = \"ledger\"", "kind = \"ledger\"\nttl = 30"));
        assert_eq!(
            e,
            "s.toml:7: controller.ttl: applies only to controller 'expectations', not 'ledger'"
        );
        let e = err(&LESSON.replace("count = 2", "count = 2\nseconds = 4"));
        assert_eq!(
            e,
            "s.toml:21: event[1].seconds: does not apply to a 'deaths' event"
        );
    }

    #[test]
    fn a_missing_key_names_its_table() {
        let e = err(&LESSON.replace("desired = 6\n", ""));
        assert!(
            e.starts_with("s.toml:12: workload[1]: missing field `desired`"),
            "{e}"
        );
    }

    #[test]
    fn events_must_name_declared_workloads() {
        let e = err(&LESSON.replace("count = 2", "count = 2\nworkload = \"db\""));
        assert_eq!(
            e,
            "s.toml:21: event[1].workload: workload 'db' is not declared"
        );
    }

    #[test]
    fn delays_take_seconds_to_the_millisecond() {
        let spec = parse("s.toml", &LESSON.replace("seconds = 20", "seconds = 0.25")).unwrap();
        assert_eq!(spec.delay, DelayModel::Fixed(250));
        let e = err(&LESSON.replace("seconds = 20", "seconds = 0.0001"));
        assert!(e.contains("finer than a millisecond"), "{e}");
    }

    #[test]
    fn a_syntax_error_is_one_line_with_its_position() {
        let e = err("period = \n");
        assert!(e.starts_with("s.toml:1: period: "), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn a_startup_table_draws_every_copys_startup_from_its_model() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        let label = root.join("measured-cluster.toml").display().to_string();
        let text = "[startup]\nmodel = \"uniform\"\nmin = 2\nmax = 8.5\n[[workload]]\nname = \"w\"\ndesired = 2\n";
        let spec = parse(&label, text).unwrap();
        assert_eq!(
            spec.startup_model,
            Some(DelayModel::Uniform {
                min: 2000,
                max: 8500
            })
        );
        let scenario = crate::Scenario::new(spec).unwrap();
        assert_eq!(
            scenario.as_lesson(),
            None,
            "a startup model runs on the general engine"
        );
        let empirical = "[startup]\nmodel = \"empirical\"\nfile = \"empirical/startup.toml\"\n[[workload]]\nname = \"w\"\ndesired = 2\n";
        let spec = parse(&label, empirical).unwrap();
        assert!(matches!(spec.startup_model, Some(DelayModel::Empirical(_))));
        // The file's report-delay model is not a startup model.
        let wrong = empirical.replace("startup.toml", "report-delay.toml");
        let e = parse(&label, &wrong).unwrap_err().to_string();
        assert!(
            e.contains(":3: startup.file: ") && e.contains("holds no startup model"),
            "{e}"
        );
        for (bad, says) in [
            (
                text.replace("min = 2", "min = 9"),
                ":4: startup.max: max is below min (9 s)",
            ),
            (
                text.replace("\"uniform\"", "\"gauss\""),
                ":2: startup.model: unknown startup model 'gauss'",
            ),
            (
                text.replace("min = 2", "seconds = 2"),
                "startup.seconds: does not apply to startup model 'uniform'",
            ),
            (
                text.replace("desired = 2", "desired = 2\nstartup = 5"),
                "workload[1].startup: does not apply with a [startup] model",
            ),
        ] {
            let e = parse(&label, &bad).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        assert_eq!(
            parse(&label, "[[workload]]\nname = \"w\"\ndesired = 2\n")
                .unwrap()
                .startup_model,
            None
        );
    }

    #[test]
    fn an_empirical_delay_reads_its_model_file_beside_the_scenario() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        let label = root.join("measured-cluster.toml").display().to_string();
        let text = "[delay]\nmodel = \"empirical\"\nfile = \"empirical/report-delay.toml\"\n[[workload]]\nname = \"w\"\ndesired = 2\n";
        let spec = parse(&label, text).unwrap();
        assert!(matches!(spec.delay, DelayModel::Empirical(_)) && spec.delay.is_random());
        let missing = text.replace("report-delay.toml", "nothing.toml");
        let e = parse(&label, &missing).unwrap_err().to_string();
        assert!(
            e.contains(":3: delay.file: ") && e.contains("nothing.toml: cannot read it"),
            "{e}"
        );
        let startup_only = text.replace("report-delay.toml", "startup.toml");
        let e = parse(&label, &startup_only).unwrap_err().to_string();
        assert!(e.contains("holds no report-delay model"), "{e}");
        let no_file = "[delay]\nmodel = \"empirical\"\n[[workload]]\nname = \"w\"\ndesired = 2\n";
        assert!(parse(&label, no_file)
            .unwrap_err()
            .to_string()
            .contains("needs 'file'"));
    }

    #[test]
    fn a_pipeline_table_sets_mode_nodes_and_period_and_refuses_what_does_not_apply() {
        use crate::pipeline::Pipeline;
        let with = |table: &str| LESSON.replace("[controller]", &format!("{table}\n[controller]"));
        assert_eq!(
            parse("s.toml", LESSON).unwrap().pipeline,
            PipelineSpec::default()
        );
        let spec = parse(
            "s.toml",
            &with("[pipeline]\nmode = \"in-order\"\nnodes = 3\nreport_every = 0.5\n"),
        )
        .unwrap();
        assert_eq!(
            spec.pipeline,
            PipelineSpec {
                mode: Pipeline::InOrder,
                nodes: 3,
                report_every_ms: 500
            }
        );
        let e = err(&with("[pipeline]\nmode = \"fifo\"\n"));
        assert!(
            e.starts_with("s.toml:6: pipeline.mode: unknown report pipeline 'fifo': accepted are"),
            "{e}"
        );
        let e = err(&with("[pipeline]\nnodes = 0\n"));
        assert!(
            e.starts_with("s.toml:6: pipeline.nodes: 0 is out of range"),
            "{e}"
        );
        let e = err(&with("[pipeline]\nmode = \"snapshot\"\nreport_every = 1\n"));
        assert!(
            e.contains("pipeline.report_every: report every applies only to the in-order"),
            "{e}"
        );
    }
}
