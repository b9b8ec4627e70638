//! The lesson's world on real processes under a **random report-delay model** (`experiment
//! lesson --real --delay-model LIST`), set against the lab on the same model.
//!
//! The lab draws one delay per report from the model with its seeded generator
//! ([`setpoint_sim::delay::WorldRng`]). Here the same model and generator draw a schedule, one
//! delay per agent report, seeded by the cell's seed ([`schedule`]); the agent gives its reports
//! those delays in turn ([`setpoint_runtime::report_delay`]), scaled to real time. The
//! runtime itself neither draws nor depends on the lab.
//!
//! The two need not draw the same way. Under the lab's default per-report pipeline, delays
//! belong to copy events (a start, an end), each on its own, so two starts can reach the
//! ledger in the opposite order. The real agent reports whole snapshots, in order: a report
//! with a short delay waits behind an older one with a long delay. So a jittered real ledger
//! lags by the larger delays more often than a per-report lab's. So the lab side of a cell runs
//! the agent's own pipeline by default ([`crate::experiment::agent_pipeline`]: in-order
//! snapshots every half second), which models exactly that. Against a random model the lab's
//! single run is one sample; the cell also carries the lab's distribution over many seeds
//! ([`LabRuns`]), which is what one real run should fall inside.

use serde::Serialize;
use setpoint_core::ControllerKind;
use setpoint_runtime::measure::{Measurement, Spread};
use setpoint_runtime::report_delay::ReportDelays;
use setpoint_sim::delay::{DelayModel, WorldRng};
use setpoint_sim::montecarlo::monte_carlo;
use setpoint_sim::pipeline::PipelineSpec;
use setpoint_sim::sweep::model_text;
use setpoint_sim::{run, Metrics, Scenario};

use crate::experiment::{lesson_spec, run_real, ExperimentError, RealLesson};

/// How many lab runs (seeds `seed`, `seed + 1`, …) give a cell's [`LabRuns`].
pub const LAB_RUNS: u64 = 200;

/// The lab's overshoot over [`LAB_RUNS`] seeds of a cell's world.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LabRuns {
    /// How many runs.
    pub runs: u64,
    /// The fraction of runs with any overshoot.
    pub p_overshoot: f64,
    /// The mean overshoot.
    pub overshoot_mean: f64,
    /// The 95th percentile (nearest rank).
    pub overshoot_p95: f64,
    /// The largest.
    pub overshoot_max: f64,
}

/// One cell under a delay model: the lab at the cell's seed and over many seeds, and the real
/// run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JitterOutcome {
    /// The controller.
    #[serde(serialize_with = "kind_name")]
    pub controller: ControllerKind,
    /// The model's canonical text (`uniform:5:30`, `lesson-chain`).
    pub delay_model: String,
    /// The cell's seed: the lab's run and the agent's schedule.
    pub seed: u64,
    /// What the lab measures with that seed.
    pub simulated: Metrics,
    /// What the lab measures over [`LAB_RUNS`] seeds from it.
    pub lab_runs: LabRuns,
    /// What the real run measured.
    pub measured: Measurement,
    /// The copies killed at second 300.
    pub killed: Vec<String>,
    /// How late the kill came, in real milliseconds.
    pub kill_late_ms: i64,
    /// The store's own delay, in real microseconds.
    pub store_delay_us: Spread,
}

fn kind_name<S: serde::Serializer>(k: &ControllerKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(k.name())
}

/// `reports` delays drawn from `model` with the world's generator seeded by `seed`, as real
/// milliseconds at `time_scale` (a virtual millisecond lasts `time_scale` real ones), rounded.
pub fn schedule(model: &DelayModel, seed: u64, reports: usize, time_scale: f64) -> Vec<u64> {
    let mut rng = WorldRng::new(seed);
    (0..reports)
        .map(|_| (model.sample(&mut rng) as f64 * time_scale).round() as u64)
        .collect()
}

/// The lab's form of a cell: the lesson's world with `model` as its delay, `seed`, the report
/// pipeline `pipeline` (the agent's is [`crate::experiment::agent_pipeline`]), and every copy's
/// startup drawn from `startup` when given (`--startup-model`, the lab side only).
pub fn lab_scenario(
    model: &DelayModel,
    startup: Option<&DelayModel>,
    controller: ControllerKind,
    seed: u64,
    pipeline: PipelineSpec,
) -> Result<Scenario, ExperimentError> {
    let bad = |e: setpoint_sim::ScenarioError| ExperimentError::BadInput(e.to_string());
    let base = Scenario::from_lesson_spec(&lesson_spec(0, controller)).map_err(bad)?;
    let mut spec = base.spec().clone();
    spec.delay = model.clone();
    spec.seed = seed;
    spec.pipeline = pipeline;
    spec.startup_model = startup.cloned();
    Scenario::new(spec).map_err(bad)
}

/// The lab's run at the cell's seed and its spread over [`LAB_RUNS`] seeds, under `pipeline`,
/// with the startup drawn from `startup` when given ([`lab_scenario`]).
pub fn lab_of(
    model: &DelayModel,
    startup: Option<&DelayModel>,
    controller: ControllerKind,
    seed: u64,
    pipeline: PipelineSpec,
) -> Result<(Metrics, LabRuns), ExperimentError> {
    let bad = |e: setpoint_sim::ScenarioError| ExperimentError::BadInput(e.to_string());
    let scenario = lab_scenario(model, startup, controller, seed, pipeline)?;
    let one = run(&scenario, seed).map_err(bad)?.workloads[0].metrics;
    let summary = monte_carlo(&scenario, seed, LAB_RUNS).map_err(bad)?;
    let w = &summary.workloads[0];
    let spread = w
        .metrics
        .iter()
        .find(|m| m.metric == "overshoot")
        .and_then(|m| m.spread);
    let pick = |f: fn(&setpoint_sim::montecarlo::Spread) -> f64| spread.as_ref().map_or(0.0, f);
    Ok((
        one,
        LabRuns {
            runs: summary.runs,
            p_overshoot: w.p_overshoot,
            overshoot_mean: pick(|s| s.mean),
            overshoot_p95: pick(|s| s.p95),
            overshoot_max: pick(|s| s.max),
        },
    ))
}

/// A directory name for a model: its text with `:` and `.` as `-`.
fn slug(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// Runs one cell on real processes with the agent's delays drawn from `model`, and sets it
/// against the lab.
pub async fn run_jitter_cell(
    cfg: &RealLesson,
    model: &DelayModel,
    controller: ControllerKind,
    seed: u64,
) -> Result<JitterOutcome, ExperimentError> {
    let world = lesson_spec(0, controller);
    // One report every half virtual second, over the run and its start: a few to spare.
    let reports = (world.duration as usize + 60) * 2;
    let delays = ReportDelays::new(schedule(model, seed, reports, cfg.time_scale));
    let text = model_text(model);
    let name = format!("{}-{}", controller.name(), slug(&text));
    let (simulated, lab_runs) = lab_of(model, None, controller, seed, cfg.pipeline)?;
    let real = run_real(cfg, &world, &name, delays).await?;
    Ok(JitterOutcome {
        controller,
        delay_model: text,
        seed,
        simulated,
        lab_runs,
        measured: real.measured,
        killed: real.killed,
        kill_late_ms: real.kill_late_ms,
        store_delay_us: real.store_delay_us,
    })
}

/// Every (controller, model) cell, controllers slowest, `cfg.jobs` at a time.
pub async fn run_jitter_all(
    cfg: &RealLesson,
    models: &[DelayModel],
    seed: u64,
) -> Result<Vec<JitterOutcome>, ExperimentError> {
    cfg.validate()?;
    let cells: Vec<(ControllerKind, DelayModel)> = cfg
        .controllers
        .iter()
        .flat_map(|&c| models.iter().map(move |m| (c, m.clone())))
        .collect();
    let mut out = Vec::with_capacity(cells.len());
    for chunk in cells.chunks(cfg.jobs) {
        let mut set = tokio::task::JoinSet::new();
        for (i, (c, m)) in chunk.iter().cloned().enumerate() {
            let cfg = cfg.clone();
            set.spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(97 * i as u64)).await;
                (i, run_jitter_cell(&cfg, &m, c, seed).await)
            });
        }
        let mut done = Vec::new();
        while let Some(r) = set.join_next().await {
            done.push(r.map_err(|e| ExperimentError::Stalled(format!("a cell panicked: {e}")))?);
        }
        done.sort_by_key(|d: &(usize, _)| d.0);
        for (_, r) in done {
            out.push(r?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::agent_pipeline;

    #[test]
    fn a_schedule_is_the_models_draws_scaled_and_seeded() {
        let m = DelayModel::Uniform {
            min: 5_000,
            max: 30_000,
        };
        let a = schedule(&m, 7, 500, 0.01);
        assert_eq!(
            a,
            schedule(&m, 7, 500, 0.01),
            "the same seed, the same delays"
        );
        assert_ne!(a, schedule(&m, 8, 500, 0.01));
        assert!(a.iter().all(|&d| (50..=300).contains(&d)), "{a:?}");
        // The draws are the lab's: the generator's sequence through the model.
        let mut rng = WorldRng::new(7);
        let lab: Vec<u64> = (0..500).map(|_| m.sample(&mut rng)).collect();
        let back: Vec<u64> = a.iter().map(|&d| d * 100).collect();
        let close = lab.iter().zip(&back).all(|(l, b)| l.abs_diff(*b) <= 50);
        assert!(close, "rounded to the real millisecond");
        let mean = a.iter().sum::<u64>() as f64 / a.len() as f64;
        assert!(
            (160.0..190.0).contains(&mean),
            "uniform 50..=300 ms: mean {mean}"
        );
        assert_eq!(
            schedule(&DelayModel::fixed_seconds(20), 1, 3, 0.01),
            [200; 3]
        );
    }

    #[test]
    fn the_agents_pipeline_is_the_default_and_delays_the_lab_as_the_agent_does() {
        assert_eq!(RealLesson::new("x").pipeline, agent_pipeline());
        // The figure: ledger, uniform 5..30 s, seed 4, whose real run overshot 12.
        // Per-report draws put 12 outside the lab's 200 seeds; the agent's pipeline, whose
        // ledger waits for the slowest snapshot in flight, puts it inside.
        let m = DelayModel::Uniform {
            min: 5_000,
            max: 30_000,
        };
        let ledger = ControllerKind::Ledger;
        let (_, per_report) = lab_of(&m, None, ledger, 4, PipelineSpec::default()).unwrap();
        let (_, agent) = lab_of(&m, None, ledger, 4, agent_pipeline()).unwrap();
        assert!(per_report.overshoot_max < 12.0, "{per_report:?}");
        assert!(agent.overshoot_max >= 12.0, "{agent:?}");
        assert!(agent.overshoot_mean > per_report.overshoot_mean + 2.0);
        // Under a fixed whole-second delay the agent's snapshots, every half second, deliver
        // each change at its own due: the lab row equals per-report's (and the real run's).
        let fixed = DelayModel::fixed_seconds(20);
        assert_eq!(
            lab_of(&fixed, None, ledger, 1, agent_pipeline()).unwrap(),
            lab_of(&fixed, None, ledger, 1, PipelineSpec::default()).unwrap()
        );
    }

    #[test]
    fn the_lab_side_of_a_jittered_cell_spreads_over_seeds() {
        let m = DelayModel::lesson_chain();
        let (one, runs) =
            lab_of(&m, None, ControllerKind::Ledger, 3, PipelineSpec::default()).unwrap();
        assert_eq!(runs.runs, LAB_RUNS);
        assert!(
            runs.p_overshoot > 0.0 && runs.p_overshoot <= 1.0,
            "{runs:?}"
        );
        assert!(f64::from(one.overshoot as u32) <= runs.overshoot_max);
        let (_, intent) = lab_of(&m, None, ControllerKind::Intent, 3, agent_pipeline()).unwrap();
        assert_eq!(
            intent.p_overshoot, 0.0,
            "intent never overshoots: {intent:?}"
        );
    }
}
