//! The scenario every lab command that runs one scenario shares (`run`, `plot timeline`,
//! `report`): the lesson's world from flags, or a scenario file whose settings the flags typed
//! on the command line override, with a seed, a delay model and the settings of
//! `expectations`.

use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args};
use setpoint_sim::delay::DelayModel;
use setpoint_sim::scenario::{
    death_events, ControllerSpec, Event, Scenario, ScenarioSpec, Workload,
};
use setpoint_sim::scenario_file;

use crate::shared_args::{burst, delay_model, startup_model, ttl, LessonArgs};

/// One scenario, from flags or a file.
#[derive(Debug, Args)]
pub struct ScenarioArgs {
    /// The lesson's world.
    #[command(flatten)]
    pub lesson: LessonArgs,
    /// A scenario file (TOML, see `scenarios/`). Flags given on the command line override its
    /// settings; --desired and --startup then set every workload, --deaths replaces its deaths.
    #[arg(value_name = "SCENARIO.toml")]
    pub scenario: Option<PathBuf>,
    /// Seed of the world's random number generator [default: the file's, else 1].
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Report-delay model: fixed:S, uniform:MIN:MAX or lesson-chain (seconds, to the
    /// millisecond), or empirical:MODEL.toml (a `setpoint calibrate` model file's report-delay
    /// model). Replaces --delay.
    #[arg(long, value_name = "MODEL", value_parser = delay_model, conflicts_with = "delay")]
    pub delay_model: Option<DelayModel>,
    /// Startup-time model, drawn for every copy: the syntax of --delay-model, where
    /// empirical:MODEL.toml takes the file's startup model. Replaces --startup for every
    /// workload.
    #[arg(long, value_name = "MODEL", value_parser = startup_model, conflicts_with = "startup")]
    pub startup_model: Option<DelayModel>,
    /// TTL of the expectations controller: seconds after which an unmet expectation counts as
    /// satisfied [default: 300].
    #[arg(long, value_name = "SECONDS", value_parser = ttl, allow_negative_numbers = true)]
    pub ttl: Option<u64>,
    /// Burst limit of the expectations controller: most copies one pass creates or deletes
    /// [default: 500].
    #[arg(long, value_name = "N", value_parser = burst, allow_negative_numbers = true)]
    pub burst: Option<u64>,
    /// The report pipeline.
    #[command(flatten)]
    pub pipeline: crate::pipeline_args::PipelineArgs,
}

impl ScenarioArgs {
    /// The scenario these arguments describe: the file, if one is given, with the flags typed on
    /// the command line on top; otherwise the flags alone. Returns a label for outputs too.
    /// `matches` are the subcommand's, which tell which flags the command line gave.
    pub fn build(&self, matches: &ArgMatches) -> anyhow::Result<(String, Scenario)> {
        let args = self;
        let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
        let (label, mut spec) = match &args.scenario {
            Some(path) => (path.display().to_string(), scenario_file::load(path)?),
            None => (
                "(command line)".to_owned(),
                ScenarioSpec {
                    events: Vec::new(),
                    ..ScenarioSpec::default()
                },
            ),
        };
        // Without a file every flag counts, defaults included: they are the lesson's settings.
        let set = |id: &str| args.scenario.is_none() || given(id);
        let w = &args.lesson.world;
        if set("period") {
            spec.period = args.lesson.period;
        }
        if set("duration") {
            spec.duration = w.duration;
        }
        if let Some(model) = &args.delay_model {
            spec.delay = model.clone();
        } else if set("delay") {
            spec.delay = DelayModel::fixed_seconds(args.lesson.delay);
        }
        if args.scenario.is_none() {
            spec.workloads = vec![Workload {
                name: "collector".into(),
                desired: w.desired,
                startup: w.startup,
            }];
        } else {
            for workload in &mut spec.workloads {
                if given("desired") {
                    workload.desired = w.desired;
                }
                if given("startup") {
                    workload.startup = w.startup;
                }
            }
            // A typed -B replaces the file's startup model, as any flag its setting.
            if given("startup") {
                spec.startup_model = None;
            }
        }
        if set("deaths") {
            spec.events.retain(|e| !matches!(e.event, Event::Deaths(_)));
            spec.events.extend(death_events(&w.deaths.0));
        }
        if set("controller") {
            spec.controller = ControllerSpec {
                kind: w.controller,
                ..spec.controller
            };
        }
        for (value, flag) in [(args.ttl, "--ttl"), (args.burst, "--burst")] {
            if value.is_some()
                && spec.controller.kind != setpoint_core::ControllerKind::Expectations
            {
                return Err(setpoint_sim::ScenarioError::DoesNotApply {
                    setting: flag.to_owned(),
                    controller: spec.controller.kind,
                }
                .into());
            }
        }
        if let Some(ttl) = args.ttl {
            spec.controller.expectations.ttl = ttl;
        }
        if let Some(burst) = args.burst {
            spec.controller.expectations.burst = burst;
        }
        if let Some(seed) = args.seed {
            spec.seed = seed;
        }
        if let Some(model) = &args.startup_model {
            spec.startup_model = Some(model.clone());
        }
        spec.pipeline = args.pipeline.apply(spec.pipeline);
        Ok((label, Scenario::new(spec)?))
    }
}
