//! The one scenario type of the lab, and the one entry point that runs it.
//!
//! A [`Scenario`] has one or many workloads, any controller with its settings, a report-delay
//! model and a timeline of [`Event`]s. [`run`] simulates it: with the lesson's fast engine
//! ([`crate::simulate`]) when the scenario is one the lesson's world can express, and with the
//! general engine ([`crate::world`]) otherwise. Which engine ran is reported in
//! [`Outcome::engine`] and never changes a number: both give the same metrics where both apply,
//! which property tests check (`tests/model`).

use serde::Serialize;
use setpoint_core::rollout::Amount;
use setpoint_core::{ControllerKind, ExpectationsConfig, Time};
use thiserror::Error;

use crate::delay::{DelayModel, Stage, MAX_DELAY_MS, MAX_STAGES};
use crate::engine::simulate;
use crate::lesson_world::{
    Death, LessonSpec, LessonWorld, Limit, SettingError, MAX_COPIES, MAX_DEATH_ENTRIES, MAX_SECONDS,
};
use crate::metrics::Metrics;

/// Something wrong with a lab scenario, or a run that outgrew the general engine.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ScenarioError {
    /// A setting outside its range or otherwise malformed; the message says which and what it
    /// accepts.
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// The scenario declares no workload. Add at least one `[[workload]]`.
    #[error("the scenario has no workload: declare at least one [[workload]]")]
    NoWorkload,
    /// A workload name that is empty, too long, or has characters other than letters, digits,
    /// `-` and `_`. Rename it.
    #[error("workload name '{0}' is not accepted: use 1 to 64 letters, digits, '-' or '_'")]
    BadWorkloadName(String),
    /// Two workloads with one name. Rename one of them.
    #[error("workload name '{0}' is declared twice")]
    DuplicateWorkload(String),
    /// An event names a workload the scenario does not declare. Fix the name, or leave it out to
    /// strike every workload.
    #[error("event at second {at} names workload '{name}', which is not declared")]
    UnknownWorkload {
        /// The event's time.
        at: Time,
        /// The name as given.
        name: String,
    },
    /// A setting of one controller given for another. Drop it, or pick the controller it
    /// belongs to.
    #[error("{setting} applies only to controller 'expectations', not '{controller}'")]
    DoesNotApply {
        /// The setting, as given (such as `--ttl`).
        setting: String,
        /// The controller in use.
        controller: ControllerKind,
    },
    /// A delay model that cannot be drawn from. The message says what is wrong.
    #[error("delay model: {0}")]
    BadDelay(String),
    /// A fraction of copies outside 0 to 1, or finer than a millionth.
    #[error("death fraction {0} is out of range: accepted 0 to 1, in steps of 0.000001")]
    BadFraction(String),
    /// An event list longer than [`MAX_DEATH_ENTRIES`].
    #[error("{0} events are too many: accepted at most {MAX_DEATH_ENTRIES}")]
    TooManyEvents(usize),
    /// The run created more copies than the general engine keeps records of. Shorten the run,
    /// lengthen the loop period, or lower the desired counts.
    #[error("the run created more than {0} copies, the most the general engine keeps one record each of; shorten the run, lengthen the period or lower desired")]
    TooManyCopies(u64),
    /// The run would need more than a limit of [`crate::limits`] allows; checked before it starts.
    #[error(transparent)]
    Limit(#[from] crate::limits::LimitError),
    /// A scenario file that could not be read or parsed; `line` and `key` say where.
    #[error("{path}:{line}: {key}: {message}")]
    File {
        /// The file as named on the command line.
        path: String,
        /// The line of the problem, from 1.
        line: usize,
        /// The key (or table) at fault, such as `event[2].count`.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// An `update` event's budgets outside their range: each is 0 to 100 % or 0 to
    /// [`MAX_COPIES`] copies, and not both 0.
    #[error("update event at second {at}: {message}")]
    BadRollout {
        /// The event's time.
        at: Time,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// A report-pipeline setting out of range or out of place; the message says which.
    #[error("report pipeline: {0}")]
    Pipeline(crate::pipeline::PipelineError),
    /// A scenario file that could not be read at all.
    #[error("{path}: {message}")]
    Unreadable {
        /// The file as named on the command line.
        path: String,
        /// The operating system's reason.
        message: String,
    },
}

/// One workload: a set of interchangeable copies with its own desired count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// Its name: letters, digits, `-` and `_`. Named copies are called `{name}-{k}`.
    pub name: String,
    /// Declared copies at second 0.
    pub desired: u64,
    /// Startup time B, in seconds: a copy created at t is running at t + B.
    pub startup: Time,
}

/// How many copies a death event kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toll {
    /// This many of the oldest live copies (fewer if fewer are live).
    Count(u64),
    /// This share of the copies live at that second, in millionths, rounded down.
    PartsPerMillion(u64),
}

/// One scripted event of the timeline. `docs/model.md` defines each precisely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Copies die: the oldest live copies, as many as the toll says.
    Deaths(Toll),
    /// The desired count changes.
    Scale {
        /// The new desired count.
        desired: u64,
    },
    /// No report reaches the ledger for `seconds`; the reports due meanwhile all arrive when the
    /// outage ends.
    Outage {
        /// How long the outage lasts, in seconds.
        seconds: Time,
    },
    /// The controller restarts and loses its memory.
    Restart,
    /// For `seconds`, every pass reads the ledger as it stood just before the window opened.
    Stale {
        /// How long the window lasts, in seconds.
        seconds: Time,
    },
    /// The next `count` delete commands the controller sends are lost in transit: they count as
    /// commands and reach no copy.
    LoseDeletes {
        /// How many commands are lost.
        count: u64,
    },
    /// The next `starts` copies created end by themselves `after` seconds after their
    /// creation, before or after their startup time; every such end counts, and the workload
    /// backs off as the runtime does (`setpoint_core::backoff`) with `backoff`, the settings its
    /// declaration would carry.
    CrashLoop {
        /// Seconds from creation to the end.
        after: Time,
        /// How many creations it strikes.
        starts: u64,
        /// The backoff settings, in seconds.
        backoff: setpoint_core::backoff::BackoffPolicy,
    },
    /// The workload's template changes: its generation goes up by one, and copies of older
    /// generations are replaced by the rule the runtime applies (`setpoint_core::rollout`),
    /// under these budgets. See "Rolling updates" in `docs/model.md`.
    Update {
        /// Copies above desired the rollout may run (rounded up from a percentage).
        max_surge: Amount,
        /// Copies below desired the rollout may leave unavailable (rounded down).
        max_unavailable: Amount,
        /// A rollout with no progress for this many seconds stalls and stops.
        progress_deadline: Time,
        /// Whether the rollout counts its own pending work (the runtime's rule, the default).
        /// Off, it counts only what the ledger shows: a lab-only switch that shows what a
        /// rollout that forgets its pending creations and deletions costs under a late ledger.
        counts_pending: bool,
    },
}

impl Event {
    /// The event's name in scenario files and outputs.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Deaths(_) => "deaths",
            Event::Scale { .. } => "scale",
            Event::Outage { .. } => "outage",
            Event::Restart => "restart",
            Event::Stale { .. } => "stale",
            Event::LoseDeletes { .. } => "lose-delete",
            Event::CrashLoop { .. } => "crash-loop",
            Event::Update { .. } => "update",
        }
    }
}

/// An event at a second, for one workload or for all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedEvent {
    /// The second at which it happens.
    pub at: Time,
    /// The workload it strikes, by name; `None` strikes every workload.
    pub workload: Option<String>,
    /// What happens.
    pub event: Event,
}

/// The controller of every workload, with its settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerSpec {
    /// Which controller runs the passes.
    pub kind: ControllerKind,
    /// Settings of `expectations` (ignored by the others).
    pub expectations: ExpectationsConfig,
}

impl ControllerSpec {
    /// The controller of the given kind with default settings.
    pub fn new(kind: ControllerKind) -> Self {
        ControllerSpec {
            kind,
            expectations: ExpectationsConfig::default(),
        }
    }

    /// A fresh controller with these settings.
    pub fn build(&self) -> setpoint_core::Controller {
        match self.kind {
            ControllerKind::Expectations => setpoint_core::Controller::Expectations(
                setpoint_core::Expectations::new(self.expectations),
            ),
            kind => setpoint_core::Controller::new(kind),
        }
    }
}

/// The raw settings of a lab run, before validation. The defaults are the lesson's run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioSpec {
    /// Loop period U, in seconds. Default 15.
    pub period: Time,
    /// The last second of the run; seconds 0 to `duration` are simulated. Default 900.
    pub duration: Time,
    /// The report-delay model. Default fixed 0 s.
    pub delay: DelayModel,
    /// The controller and its settings. Default `ledger`.
    pub controller: ControllerSpec,
    /// The workloads, in output order. Default one, `collector`, 6 copies, 5 s startup.
    pub workloads: Vec<Workload>,
    /// The timeline, in any order; events of one second happen in the order given. Default:
    /// 2 deaths at second 300.
    pub events: Vec<TimedEvent>,
    /// Whether a creation under a name that already exists is a no-op where copies run (the
    /// world rule that `named` relies on). Default true.
    ///
    /// ## Warning
    /// Turning it off shows what `named` would do without the rule: a restart inside the blind
    /// window then runs two copies under one name.
    pub unique_names: bool,
    /// The seed of the world's random number generator. Default 1.
    pub seed: u64,
    /// How reports travel to the ledger, and the nodes copies run on. Default per-report, one
    /// node: every report its own delay ([`crate::pipeline`]).
    pub pipeline: crate::pipeline::PipelineSpec,
    /// Every copy's startup time drawn from this model when it is created, in place of each
    /// workload's fixed `startup` (`--startup-model`, a file's `[startup]`;
    /// [`Scenario::with_startup_model`] gives the rule). Default none.
    pub startup_model: Option<DelayModel>,
}

impl Default for ScenarioSpec {
    fn default() -> Self {
        ScenarioSpec {
            period: 15,
            duration: 900,
            delay: DelayModel::Fixed(0),
            controller: ControllerSpec::new(ControllerKind::Ledger),
            workloads: vec![Workload {
                name: "collector".into(),
                desired: 6,
                startup: 5,
            }],
            events: vec![TimedEvent {
                at: 300,
                workload: None,
                event: Event::Deaths(Toll::Count(2)),
            }],
            unique_names: true,
            seed: 1,
            pipeline: Default::default(),
            startup_model: None,
        }
    }
}

/// The most workloads one scenario may declare.
pub const MAX_WORKLOADS: usize = 1000;

/// The most copies one run of the general engine may create, over all workloads. It keeps one
/// record per copy, about 100 bytes each.
pub const MAX_LAB_COPIES: u64 = 5_000_000;

/// Accepted `ttl` of `expectations`, in seconds.
pub const TTL: Limit = Limit {
    field: "ttl",
    min: 0,
    max: MAX_SECONDS,
    unit: "seconds",
};
/// Accepted `burst` of `expectations`, in copies per pass.
pub const BURST: Limit = Limit {
    field: "burst",
    min: 1,
    max: MAX_COPIES,
    unit: "copies",
};
/// Accepted event times.
pub const EVENT_AT: Limit = Limit {
    field: "at",
    min: 0,
    max: MAX_SECONDS,
    unit: "seconds",
};
/// Accepted lengths of outages and stale windows.
pub const WINDOW: Limit = Limit {
    field: "seconds",
    min: 0,
    max: MAX_SECONDS,
    unit: "seconds",
};
/// Accepted counts in events (deaths, lost delete commands).
pub const EVENT_COUNT: Limit = Limit {
    field: "count",
    min: 0,
    max: MAX_COPIES,
    unit: "copies",
};

/// Accepted progress deadlines of `update` events, in seconds.
pub const PROGRESS_DEADLINE: Limit = Limit {
    field: "progress_deadline",
    min: 1,
    max: MAX_SECONDS,
    unit: "seconds",
};

/// The default progress deadline of an `update` event: 600 s, as the runtime's (and
/// Kubernetes' `progressDeadlineSeconds`).
pub const DEFAULT_PROGRESS_DEADLINE: Time = 600;

/// What an `update` event's two budgets accept: a percentage from 0 to 100 or 0 to
/// [`MAX_COPIES`] copies each, not both 0 (a rollout could never replace a copy). The error
/// says which is wrong and what is accepted.
pub fn check_rollout(max_surge: Amount, max_unavailable: Amount) -> Result<(), String> {
    for (key, a) in [
        ("max_surge", max_surge),
        ("max_unavailable", max_unavailable),
    ] {
        let ok = match a {
            Amount::Copies(n) => n <= MAX_COPIES,
            Amount::Percent(p) => p <= 100,
        };
        if !ok {
            return Err(format!("{key} {a} is out of range: {}", rollout_accepted()));
        }
    }
    if max_surge.is_zero() && max_unavailable.is_zero() {
        return Err("max_unavailable 0 with max_surge 0 is out of range: a rollout could never replace a copy; accepted at least one of the two above 0".into());
    }
    Ok(())
}

/// What an `update` event's `max_surge` and `max_unavailable` accept, in words.
pub fn rollout_accepted() -> String {
    format!("accepted a number of copies from 0 to {MAX_COPIES} or a percentage from \"0%\" to \"100%\"")
}

/// A validated lab scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    spec: ScenarioSpec,
}

impl Scenario {
    /// Validates `spec`: every number inside its limit, workload names unique and well formed,
    /// events naming declared workloads, and a delay model that can be drawn from. Events are
    /// sorted by time, keeping the given order within a second.
    pub fn new(mut spec: ScenarioSpec) -> Result<Self, ScenarioError> {
        Limit::PERIOD.check(spec.period)?;
        Limit::DURATION.check(spec.duration)?;
        check_delay(&spec.delay)?;
        if let Some(m) = &spec.startup_model {
            check_delay(m)?;
        }
        spec.pipeline.check().map_err(ScenarioError::Pipeline)?;
        TTL.check(spec.controller.expectations.ttl)?;
        BURST.check(spec.controller.expectations.burst)?;
        if spec.workloads.is_empty() {
            return Err(ScenarioError::NoWorkload);
        }
        if spec.workloads.len() > MAX_WORKLOADS {
            return Err(SettingError::OutOfRange {
                field: "workloads",
                value: spec.workloads.len().to_string(),
                min: 1,
                max: MAX_WORKLOADS as u64,
                unit: "workloads",
            }
            .into());
        }
        for (i, w) in spec.workloads.iter().enumerate() {
            check_workload_name(&w.name)?;
            if spec.workloads[..i].iter().any(|o| o.name == w.name) {
                return Err(ScenarioError::DuplicateWorkload(w.name.clone()));
            }
            Limit::DESIRED.check(w.desired)?;
            Limit::STARTUP.check(w.startup)?;
        }
        if spec.events.len() > MAX_DEATH_ENTRIES {
            return Err(ScenarioError::TooManyEvents(spec.events.len()));
        }
        for e in &spec.events {
            EVENT_AT.check(e.at)?;
            if let Some(name) = &e.workload {
                if !spec.workloads.iter().any(|w| &w.name == name) {
                    return Err(ScenarioError::UnknownWorkload {
                        at: e.at,
                        name: name.clone(),
                    });
                }
            }
            match e.event {
                Event::Deaths(Toll::Count(n)) | Event::LoseDeletes { count: n } => {
                    EVENT_COUNT.check(n)?;
                }
                Event::Deaths(Toll::PartsPerMillion(ppm)) => {
                    if ppm > 1_000_000 {
                        return Err(ScenarioError::BadFraction(format!("{}", ppm as f64 / 1e6)));
                    }
                }
                Event::Scale { desired } => {
                    Limit::DESIRED.check(desired)?;
                }
                Event::Outage { seconds } | Event::Stale { seconds } => {
                    WINDOW.check(seconds)?;
                }
                Event::Restart => {}
                Event::CrashLoop {
                    after,
                    starts,
                    backoff,
                } => {
                    WINDOW.check(after)?;
                    EVENT_COUNT.check(starts)?;
                    WINDOW.check(backoff.initial.max(1))?;
                    WINDOW.check(backoff.max.max(backoff.initial))?;
                }
                Event::Update {
                    max_surge,
                    max_unavailable,
                    progress_deadline,
                    ..
                } => {
                    check_rollout(max_surge, max_unavailable)
                        .map_err(|message| ScenarioError::BadRollout { at: e.at, message })?;
                    PROGRESS_DEADLINE.check(progress_deadline)?;
                }
            }
        }
        spec.events.sort_by_key(|e| e.at);
        Ok(Scenario { spec })
    }

    /// The lesson's scenario, as a lab scenario.
    pub fn from_lesson(scenario: &LessonWorld) -> Self {
        Scenario::from_lesson_spec(scenario.spec())
            .expect("a valid lesson scenario is a valid lab scenario")
    }

    /// The lesson's world with any controller: one workload `collector`, a fixed delay of whole
    /// seconds and deaths by count, as `spec` says. The fast engine runs it when the controller
    /// is one of the lesson's two, the general engine otherwise.
    pub fn from_lesson_spec(s: &LessonSpec) -> Result<Self, ScenarioError> {
        Scenario::new(ScenarioSpec {
            period: s.period,
            duration: s.duration,
            delay: DelayModel::fixed_seconds(s.delay),
            controller: ControllerSpec::new(s.controller),
            workloads: vec![Workload {
                name: "collector".into(),
                desired: s.desired,
                startup: s.startup,
            }],
            events: death_events(&s.deaths),
            unique_names: true,
            seed: 1,
            pipeline: Default::default(),
            startup_model: None,
        })
    }

    /// The validated settings.
    pub fn spec(&self) -> &ScenarioSpec {
        &self.spec
    }

    /// The same scenario with every copy's startup time drawn from `model` when it is created
    /// (`--startup-model`; `None` keeps each workload's fixed `startup`). A draw of `d`
    /// milliseconds makes the copy run `⌈d / 1000⌉` seconds after its creation, the rounding of
    /// report delays, and uses the world's generator, so a scenario with a random startup
    /// model always runs on the general engine.
    pub fn with_startup_model(mut self, model: Option<DelayModel>) -> Result<Self, ScenarioError> {
        if let Some(m) = &model {
            check_delay(m)?;
        }
        self.spec.startup_model = model;
        Ok(self)
    }

    /// The startup-time model, if the scenario has one.
    pub fn startup_model(&self) -> Option<&DelayModel> {
        self.spec.startup_model.as_ref()
    }

    /// The same scenario as the lesson's [`LessonWorld`], when the lesson's world can express it:
    /// one workload, `ledger` or `intent`, a fixed delay of whole seconds, no event but
    /// deaths by count, and a pipeline that delivers every report at its own due under a fixed
    /// delay ([`crate::pipeline::PipelineSpec::per_report_under_fixed_delay`]). Those are the
    /// scenarios the fast engine runs.
    pub fn as_lesson(&self) -> Option<LessonWorld> {
        if self.spec.startup_model.is_some() {
            return None;
        }
        let s = &self.spec;
        if !s.pipeline.per_report_under_fixed_delay() {
            return None;
        }
        let [w] = s.workloads.as_slice() else {
            return None;
        };
        let delay = s.delay.fixed_whole_seconds()?;
        let deaths = s
            .events
            .iter()
            .map(|e| match e.event {
                Event::Deaths(Toll::Count(count)) => Some(Death { at: e.at, count }),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        LessonWorld::new(LessonSpec {
            desired: w.desired,
            period: s.period,
            delay,
            startup: w.startup,
            duration: s.duration,
            deaths,
            controller: s.controller.kind,
        })
        .ok()
    }

    /// The number of rounds the run holds: one at every multiple of the period in
    /// `0..=duration`.
    pub fn rounds(&self) -> u64 {
        self.spec.duration / self.spec.period + 1
    }
}

/// The lesson's scripted deaths as events that strike every workload.
pub fn death_events(deaths: &[Death]) -> Vec<TimedEvent> {
    deaths
        .iter()
        .map(|d| TimedEvent {
            at: d.at,
            workload: None,
            event: Event::Deaths(Toll::Count(d.count)),
        })
        .collect()
}

pub(crate) fn check_workload_name(name: &str) -> Result<(), ScenarioError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(ScenarioError::BadWorkloadName(name.to_owned()))
    }
}

fn check_delay(delay: &DelayModel) -> Result<(), ScenarioError> {
    let bad = |s: String| Err(ScenarioError::BadDelay(s));
    let range = |what: &str, min: u64, max: u64| {
        if min > max {
            bad(format!("{what}: min {min} ms is above max {max} ms"))
        } else if max > MAX_DELAY_MS {
            bad(format!(
                "{what}: max {max} ms is above the accepted {MAX_DELAY_MS} ms"
            ))
        } else {
            Ok(())
        }
    };
    match delay {
        DelayModel::Fixed(d) => range("fixed", *d, *d),
        DelayModel::Uniform { min, max } => range("uniform", *min, *max),
        // Validated when built: its knots never go back and end within MAX_DELAY_MS.
        DelayModel::Empirical(e) => range("empirical", e.min_ms(), e.max_ms()),
        DelayModel::Chain(stages) => {
            if stages.is_empty() || stages.len() > MAX_STAGES {
                return bad(format!(
                    "a chain has {} stages: accepted 1 to {MAX_STAGES}",
                    stages.len()
                ));
            }
            for Stage { name, min, max } in stages {
                range(&format!("stage '{name}'"), *min, *max)?;
            }
            if delay.max_ms() > MAX_DELAY_MS {
                return bad(format!(
                    "the chain's worst case {} ms is above the accepted {MAX_DELAY_MS} ms",
                    delay.max_ms()
                ));
            }
            Ok(())
        }
    }
}

/// What one workload measured in one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadMetrics {
    /// The workload's name.
    pub workload: String,
    /// The lesson's metrics, plus peak live and copy-seconds above desired. With desired
    /// changes, `unneeded` is `created − (initial desired + every increase of desired + died)`.
    #[serde(flatten)]
    pub metrics: Metrics,
    /// Times a copy started running while another copy of the same name was running: duplicate
    /// identities. Always 0 for unnamed copies.
    pub duplicate_names: u64,
    /// Creations under a name that already existed, which the world absorbed as no-ops. They
    /// count as work.
    pub absorbed_creates: u64,
    /// Delete commands lost in transit (counted in `delete_commands` too).
    pub lost_deletes: u64,
    /// What the run's rolling updates did; `None` for a run with no `update` event.
    #[serde(flatten)]
    pub rollout: RolloutMetrics,
}

/// What a workload's rolling updates did, beside the overshoot. `docs/model.md` ("Rolling
/// updates") defines each; every field is `None` in a run with no `update` event for the
/// workload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RolloutMetrics {
    /// The largest surge budget of the run's rollouts: `max_surge` of desired, rounded up.
    pub surge_budget: Option<u64>,
    /// Surge: the most running copies above desired, during a rollout, within its surge
    /// budget. Copies beyond the budget count as `overshoot` instead.
    pub surge: Option<u64>,
    /// Copy-seconds of surge: running copies above desired, within the budget, summed over
    /// the seconds of the rollouts.
    pub surge_copy_seconds: Option<u64>,
    /// The overshoot during the rollouts alone: the most running copies beyond desired plus
    /// the surge budget, in a second while a rollout was under way.
    pub rollout_overshoot: Option<u64>,
    /// The second at which the last rollout's pass found it done (every copy of the new
    /// generation, exactly desired, all on the ledger); `None` while one is under way at the
    /// end, or stalled.
    pub rollout_done: Option<Time>,
    /// The second at which the last rollout stalled: no progress within its deadline, and it
    /// stopped there (as the runtime's does); `None` if none stalled.
    pub rollout_stalled: Option<Time>,
}

/// The result of one lab run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// The seed of the run, when the run drew random numbers; `None` when it drew none.
    pub seed: Option<u64>,
    /// Which engine ran it: `fast` (the lesson's) or `general`.
    pub engine: &'static str,
    /// One entry per workload, in the scenario's order.
    pub workloads: Vec<WorkloadMetrics>,
}

/// Runs `scenario` with `seed`: on the fast engine when [`Scenario::as_lesson`] says the
/// lesson's world can express it, on the general engine otherwise. The same scenario and seed
/// always give the same outcome.
pub fn run(scenario: &Scenario, seed: u64) -> Result<Outcome, ScenarioError> {
    match scenario.as_lesson() {
        Some(lesson) => Ok(fast_outcome(scenario, simulate(&lesson))),
        None => crate::world::run_general(scenario, seed),
    }
}

/// [`run`] with every workload's name left empty, which allocates nothing: for Monte Carlo,
/// whose summary names the workloads once instead of once per run.
pub(crate) fn run_unnamed(scenario: &Scenario, seed: u64) -> Result<Outcome, ScenarioError> {
    match scenario.as_lesson() {
        Some(lesson) => Ok(fast_outcome_named(String::new(), simulate(&lesson))),
        None => crate::world::run_general_unnamed(scenario, seed),
    }
}

/// The outcome of a scenario the fast engine ran: one workload, no randomness, and none of the
/// general engine's counts (names, absorbed creates, lost deletes) can occur.
fn fast_outcome(scenario: &Scenario, metrics: Metrics) -> Outcome {
    fast_outcome_named(scenario.spec.workloads[0].name.clone(), metrics)
}

/// [`fast_outcome`] with the workload named `workload`.
fn fast_outcome_named(workload: String, metrics: Metrics) -> Outcome {
    Outcome {
        seed: None,
        engine: "fast",
        workloads: vec![WorkloadMetrics {
            workload,
            metrics,
            duplicate_names: 0,
            absorbed_creates: 0,
            lost_deletes: 0,
            rollout: RolloutMetrics::default(),
        }],
    }
}

/// [`run`], handing `observer` one [`TraceRow`](setpoint_core::metrics::TraceRow) per workload (by index) per second: from the
/// fast engine when the lesson's world can express the scenario, from the general one otherwise.
pub fn run_traced(
    scenario: &Scenario,
    seed: u64,
    observer: &mut dyn FnMut(usize, &crate::TraceRow),
) -> Result<Outcome, ScenarioError> {
    match scenario.as_lesson() {
        Some(lesson) => Ok(fast_outcome(
            scenario,
            crate::simulate_traced(&lesson, &mut |r| observer(0, r)),
        )),
        None => crate::world::run_general_traced(scenario, seed, observer),
    }
}

/// [`run_traced`] one [`crate::TraceSpan`] per workload (by index) at a time: stretches in
/// which nothing changes come as one span each, so a run that holds still costs what changes,
/// not its seconds (`plot timeline`, issue 24).
pub fn run_spans(
    scenario: &Scenario,
    seed: u64,
    observer: &mut dyn FnMut(usize, &crate::TraceSpan),
) -> Result<Outcome, ScenarioError> {
    match scenario.as_lesson() {
        Some(lesson) => Ok(fast_outcome(
            scenario,
            crate::engine::simulate_spans(&lesson, &mut |s| observer(0, s)),
        )),
        None => crate::world::run_general_spans(scenario, seed, observer),
    }
}

/// The seconds at which workload `w` of `scenario` created copies: a crash loop's attempt
/// times, to set beside the runtime's (`setpoint-cli`'s `trust` tests).
pub fn creation_times(
    scenario: &Scenario,
    seed: u64,
    w: usize,
) -> Result<Vec<Time>, ScenarioError> {
    let mut out = Vec::new();
    run_traced(scenario, seed, &mut |i, r| {
        if i == w && r.created > 0 {
            out.push(r.t);
        }
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_lab_spec_is_the_lessons_run_on_the_fast_engine() {
        let s = Scenario::new(ScenarioSpec::default()).unwrap();
        let lesson = s.as_lesson().unwrap();
        assert_eq!(lesson, LessonWorld::lesson(0, ControllerKind::Ledger));
        assert_eq!(run(&s, 1).unwrap().engine, "fast");
    }

    #[test]
    fn random_delays_new_controllers_and_other_events_need_the_general_engine() {
        let general = |spec: ScenarioSpec| Scenario::new(spec).unwrap().as_lesson().is_none();
        assert!(general(ScenarioSpec {
            delay: DelayModel::lesson_chain(),
            ..ScenarioSpec::default()
        }));
        assert!(general(ScenarioSpec {
            controller: ControllerSpec::new(ControllerKind::Named),
            ..ScenarioSpec::default()
        }));
        assert!(general(ScenarioSpec {
            events: vec![TimedEvent {
                at: 10,
                workload: None,
                event: Event::Restart
            }],
            ..ScenarioSpec::default()
        }));
        assert!(general(ScenarioSpec {
            delay: DelayModel::Fixed(1500),
            ..ScenarioSpec::default()
        }));
    }

    #[test]
    fn events_naming_unknown_workloads_are_refused() {
        let err = Scenario::new(ScenarioSpec {
            events: vec![TimedEvent {
                at: 10,
                workload: Some("db".into()),
                event: Event::Restart,
            }],
            ..ScenarioSpec::default()
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "event at second 10 names workload 'db', which is not declared"
        );
    }

    #[test]
    fn workload_names_must_be_unique_and_plain() {
        let mut spec = ScenarioSpec::default();
        spec.workloads.push(spec.workloads[0].clone());
        assert_eq!(
            Scenario::new(spec).unwrap_err(),
            ScenarioError::DuplicateWorkload("collector".into())
        );
        let mut spec = ScenarioSpec::default();
        spec.workloads[0].name = "a b".into();
        assert!(matches!(
            Scenario::new(spec),
            Err(ScenarioError::BadWorkloadName(_))
        ));
    }

    #[test]
    fn a_uniform_delay_with_min_above_max_is_refused() {
        let err = Scenario::new(ScenarioSpec {
            delay: DelayModel::Uniform {
                min: 5000,
                max: 1000,
            },
            ..ScenarioSpec::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("min 5000 ms is above max 1000 ms"));
    }

    #[test]
    fn a_fixed_startup_model_measures_what_the_fixed_startup_does() {
        for (delay, kind) in [
            (0, ControllerKind::Ledger),
            (20, ControllerKind::Intent),
            (60, ControllerKind::Ledger),
        ] {
            let spec = ScenarioSpec {
                delay: DelayModel::fixed_seconds(delay),
                controller: ControllerSpec::new(kind),
                ..ScenarioSpec::default()
            };
            let plain = Scenario::new(spec.clone()).unwrap();
            // 4.2 s rounds up to the workload's 5 s, as a report delay would.
            let drawn = Scenario::new(spec)
                .unwrap()
                .with_startup_model(Some(DelayModel::Fixed(4200)))
                .unwrap();
            assert!(drawn.as_lesson().is_none());
            let (a, b) = (run(&plain, 1).unwrap(), run(&drawn, 1).unwrap());
            assert_eq!(b.engine, "general");
            assert_eq!(b.seed, None, "a fixed startup draws nothing");
            assert_eq!(a.workloads, b.workloads, "G={delay} {kind}");
        }
    }

    #[test]
    fn a_random_startup_model_draws_per_copy_from_the_seed() {
        let spec = ScenarioSpec {
            delay: DelayModel::fixed_seconds(10),
            ..ScenarioSpec::default()
        };
        let model = DelayModel::Uniform {
            min: 0,
            max: 60_000,
        };
        let s = Scenario::new(spec)
            .unwrap()
            .with_startup_model(Some(model))
            .unwrap();
        let outs: Vec<_> = (1..=8).map(|seed| run(&s, seed).unwrap()).collect();
        assert_eq!(outs[0].seed, Some(1));
        assert_eq!(run(&s, 1).unwrap(), outs[0]);
        let overshoots: std::collections::BTreeSet<u64> = outs
            .iter()
            .map(|o| o.workloads[0].metrics.overshoot)
            .collect();
        assert!(
            overshoots.len() > 1,
            "startup times vary with the seed: {overshoots:?}"
        );
        let too_long = DelayModel::Fixed(MAX_DELAY_MS + 1);
        assert!(Scenario::new(ScenarioSpec::default())
            .unwrap()
            .with_startup_model(Some(too_long))
            .is_err());
    }
}
