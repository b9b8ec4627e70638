//! The advisor: given a report delay (a number or a delay model) and a startup time, which loop
//! period and which controller to run, and why.
//!
//! The reasoning follows the lesson and `docs/relation.md`. A copy is invisible to the loop for
//! `G + B` seconds after it is created; the loop runs `K = max(1, ⌈(G + B) / U⌉)` blind rounds in
//! that time, and a ledger-only loop creates the same shortfall again on each. A period of at
//! least `G + B` (with G the worst delay) makes `K = 1`, so even a controller that forgets its
//! pending work in a restart cannot create a copy twice. Shorter periods replace lost copies
//! sooner and read the ledger more often; only a controller that counts its own work in flight,
//! under names that survive a restart (`named`), stays at zero overshoot there.

use rayon::prelude::*;
use serde::Serialize;
use setpoint_core::ControllerKind;

use crate::delay::{whole_seconds, DelayModel};
use crate::lesson_world::{LessonSpec, Limit};
use crate::predict::predict;
use crate::scenario::ScenarioError;
use crate::scenario::{ControllerSpec, Event, Scenario, ScenarioSpec, TimedEvent, Toll, Workload};
use crate::SettingError;

/// Why the advisor could not answer.
#[derive(Debug, thiserror::Error)]
pub enum AdviceError {
    /// A setting outside its accepted range; the message names it and the range.
    #[error(transparent)]
    Input(#[from] SettingError),
    /// The Monte Carlo would run longer than [`crate::limits::MAX_ADVISE_SECONDS`] allows.
    #[error(transparent)]
    Budget(#[from] crate::limits::LimitError),
    /// A Monte Carlo run could not be built or run; the message says why. Narrow the periods or
    /// the delay model.
    #[error(transparent)]
    Lab(#[from] ScenarioError),
}

/// The periods the advisor compares when none are given, in seconds.
pub const COMMON_PERIODS: [u64; 11] = [1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120];

/// The accepted number of Monte Carlo runs per period and controller.
pub const RUNS: Limit = Limit {
    field: "runs",
    min: 1,
    max: 100_000,
    unit: "runs",
};

/// What the advisor is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdviceRequest {
    /// The report delay: fixed, or a random model.
    pub delay: DelayModel,
    /// Startup time B, in seconds.
    pub startup: u64,
    /// A startup-time model drawn for every copy instead of the fixed `startup`; the blind span
    /// then counts its worst case.
    pub startup_model: Option<DelayModel>,
    /// Declared copies.
    pub desired: u64,
    /// Periods to compare, in seconds, ascending; the recommended one is added if missing.
    pub periods: Vec<u64>,
    /// Monte Carlo runs per period and controller, for a random delay.
    pub runs: u64,
    /// The seed of the first Monte Carlo run; run `i` uses `seed + i`.
    pub seed: u64,
    /// The report pipeline of the compared runs. Default per-report; a pipeline that does not
    /// deliver every report at its own due under a fixed delay (`snapshot`, snapshots every R)
    /// is compared by Monte Carlo even under a fixed delay, since the exact predictor assumes
    /// per-report delivery.
    pub pipeline: crate::pipeline::PipelineSpec,
}

/// The comparison at one period.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeriodAdvice {
    /// Loop period U, in seconds.
    pub period: u64,
    /// Blind rounds `max(1, ⌈(G + B) / U⌉)` with G the worst delay.
    pub blind_rounds: u64,
    /// For a fixed delay: the `ledger` controller's overshoot when the workload starts from zero
    /// (the exact predictor). `None` for a random delay.
    pub ledger_overshoot: Option<u64>,
    /// For a random delay: per controller (`ledger`, `intent`, `named`), the share of Monte Carlo
    /// runs with any overshoot. `None` for a fixed delay.
    pub p_overshoot: Option<Vec<(String, f64)>>,
    /// For a random delay: the `ledger` controller's mean overshoot over the runs.
    pub ledger_mean_overshoot: Option<f64>,
    /// Ledger reads per hour: one per round.
    pub reads_per_hour: f64,
    /// Copy records read per hour: one read lists every copy of the workload.
    pub records_read_per_hour: f64,
    /// Mean seconds from a copy's death to its replacement running: `G + U/2 + B` (mean delay).
    pub replace_mean_s: f64,
    /// Worst seconds from a copy's death to its replacement running: `G + U + B` (worst delay).
    pub replace_worst_s: f64,
}

/// The advisor's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advice {
    /// The delay model, described.
    pub delay: String,
    /// Startup time B, in seconds.
    pub startup: u64,
    /// Declared copies.
    pub desired: u64,
    /// The worst lag from a copy event to the ledger, in whole seconds: the delay model's
    /// worst draw plus the pipeline's report period R (a node reporting every R holds an event
    /// up to R before its snapshot leaves).
    pub worst_delay_s: u64,
    /// The mean report delay, in seconds.
    pub mean_delay_s: f64,
    /// The recommended loop period, in seconds.
    pub recommended_period: u64,
    /// The recommended controller.
    pub recommended_controller: String,
    /// The reasoning, in plain words, one sentence per entry.
    pub reasons: Vec<String>,
    /// The comparison, one entry per period, ascending.
    pub periods: Vec<PeriodAdvice>,
    /// Monte Carlo runs per period and controller (random delays only).
    pub runs: Option<u64>,
    /// The seed of the first run (random delays only).
    pub seed: Option<u64>,
}

/// Works out the advice. Deterministic: the same request gives the same advice.
pub fn advise(req: &AdviceRequest) -> Result<Advice, AdviceError> {
    // With a startup model, B is its worst case in whole seconds, the rounding of the world.
    let req = &AdviceRequest {
        startup: req
            .startup_model
            .as_ref()
            .map_or(req.startup, |m| whole_seconds(m.max_ms())),
        ..req.clone()
    };
    Limit::STARTUP.check(req.startup)?;
    Limit::DESIRED.check(req.desired)?;
    RUNS.check(req.runs)?;
    req.pipeline
        .check()
        .map_err(|e| AdviceError::Lab(ScenarioError::Pipeline(e)))?;
    for &p in &req.periods {
        Limit::PERIOD.check(p)?;
    }
    // A node that reports every R holds an event for up to R before its snapshot leaves, and
    // an in-order pipeline delivers that snapshot no later than its own worst draw (the ones
    // before it left earlier with no larger bound), so the ledger lags by at most max + R.
    let worst = whole_seconds(
        req.delay
            .max_ms()
            .saturating_add(req.pipeline.report_every_ms),
    );
    let mean = req.delay.mean_ms() / 1000.0;
    let blind_span = worst + req.startup;
    let mut periods = req.periods.clone();
    let recommended = periods
        .iter()
        .copied()
        .find(|&p| p >= blind_span.max(1))
        .unwrap_or(blind_span.max(1));
    if !periods.contains(&recommended) {
        periods.push(recommended);
    }
    periods.sort_unstable();
    periods.dedup();
    let random = req.delay.is_random()
        || req
            .startup_model
            .as_ref()
            .is_some_and(DelayModel::is_random)
        || !req.pipeline.per_report_under_fixed_delay();
    if random {
        // Checked before any run, in the terms the user gave: the worst delay and the periods.
        crate::limits::check_advise(&periods, 3, req.runs, |u| {
            let span = worst.saturating_add(req.startup).saturating_add(u);
            monte_carlo_duration(span, u)
        })?;
    }
    let rows = periods
        .par_iter()
        .map(|&u| period_advice(req, u, worst, mean, random))
        .collect::<Result<Vec<_>, _>>()?;

    let at = |u: u64| {
        rows.iter()
            .find(|r| r.period == u)
            .expect("a compared period")
    };
    let rec = at(recommended);
    let mut reasons = vec![format!(
        "Reports take up to {worst} s to reach the ledger (mean {mean:.1} s) and a copy takes {} s to start, so a new copy is invisible to the loop for up to {blind_span} s.",
        req.startup
    )];
    for (what, model) in [
        ("report delay", Some(&req.delay)),
        ("startup time", req.startup_model.as_ref()),
    ] {
        if let Some(DelayModel::Empirical(e)) = model {
            reasons.push(format!(
                "The {what} is the distribution measured in {} (median {:.1} s, p99 {:.1} s, worst {:.1} s); the period is set against its worst, the longest the measurements show, so measure again if the cluster's delays grow.",
                e.label(),
                e.quantile(0.5) / 1000.0,
                e.quantile(0.99) / 1000.0,
                e.max_ms() as f64 / 1000.0
            ));
        }
    }
    let common = rows.iter().find(|r| r.period == 15).unwrap_or(&rows[0]);
    let ledger_at = |r: &PeriodAdvice| match (&r.ledger_overshoot, &r.p_overshoot) {
        (Some(o), _) => format!("overshoots by {o} copies"),
        (None, Some(p)) => format!(
            "overshoots in {:.0}% of runs (mean {:.1} copies)",
            100.0 * p[0].1,
            r.ledger_mean_overshoot.unwrap_or(0.0)
        ),
        _ => String::new(),
    };
    reasons.push(format!(
        "At U = {} s that is {} blind rounds: a loop that trusts the ledger alone {}, creating the same shortfall again on every blind round.",
        common.period,
        common.blind_rounds,
        ledger_at(common)
    ));
    reasons.push(format!(
        "At U = {recommended} s there is {} blind round, so even a controller that forgets its pending work in a restart cannot create a copy twice; the ledger-only loop {} there.",
        rec.blind_rounds,
        ledger_at(rec)
    ));
    if random {
        if let Some(quiet) = rows
            .iter()
            .find(|r| r.p_overshoot.as_ref().is_some_and(|p| p[0].1 == 0.0))
        {
            if quiet.period < recommended {
                reasons.push(format!(
                    "In the seeded runs the ledger-only loop never overshot from U = {} s on: delays near the worst case are rare, but U = {recommended} s is the period that rules them out.",
                    quiet.period
                ));
            }
        }
    }
    reasons.push(
        "Run `named`: it counts the copies it commanded under fixed names as existing, so it creates nothing twice at any period and across restarts; `intent` also stays at zero until a restart inside the blind window makes it forget its work in flight.".to_owned(),
    );
    reasons.push(format!(
        "Read load: at U = {recommended} s the loop reads the ledger {:.0} times an hour ({:.0} copy records); each halving of U doubles that.",
        rec.reads_per_hour, rec.records_read_per_hour
    ));
    reasons.push(format!(
        "Settling: a lost copy is running again about {:.1} s after it dies ({:.0} s at worst); every extra second of period adds half a second on average.",
        rec.replace_mean_s, rec.replace_worst_s
    ));
    if let Some(fast) = rows
        .iter()
        .find(|r| r.period < recommended && r.period >= 5)
    {
        reasons.push(format!(
            "If faster replacement matters more than read load, `named` at U = {} s replaces a copy in about {:.1} s, at {:.0} reads an hour.",
            fast.period, fast.replace_mean_s, fast.reads_per_hour
        ));
    }
    Ok(Advice {
        delay: req.delay.describe(),
        startup: req.startup,
        desired: req.desired,
        worst_delay_s: worst,
        mean_delay_s: mean,
        recommended_period: recommended,
        recommended_controller: ControllerKind::Named.name().to_owned(),
        reasons,
        periods: rows,
        runs: random.then_some(req.runs),
        seed: random.then_some(req.seed),
    })
}

fn period_advice(
    req: &AdviceRequest,
    u: u64,
    worst: u64,
    mean: f64,
    random: bool,
) -> Result<PeriodAdvice, AdviceError> {
    let b = req.startup;
    let blind_rounds = (worst + b).div_ceil(u).max(1);
    let reads_per_hour = 3600.0 / u as f64;
    let (ledger_overshoot, p_overshoot, ledger_mean_overshoot) = if random {
        let mut shares = Vec::new();
        let mut ledger_mean = 0.0;
        for kind in [
            ControllerKind::Ledger,
            ControllerKind::Intent,
            ControllerKind::Named,
        ] {
            // The same Monte Carlo machinery as `run --runs` and sweeps (seeds seed, seed + 1, …).
            let scenario = monte_carlo_scenario(req, u, worst, kind)?;
            let summary = crate::montecarlo::monte_carlo(&scenario, req.seed, req.runs)?;
            let w = &summary.workloads[0];
            shares.push((kind.name().to_owned(), w.p_overshoot));
            if kind == ControllerKind::Ledger {
                ledger_mean = w
                    .metrics
                    .iter()
                    .find(|m| m.metric == "overshoot")
                    .and_then(|m| m.spread)
                    .map_or(0.0, |s| s.mean);
            }
        }
        (None, Some(shares), Some(ledger_mean))
    } else {
        let spec = LessonSpec {
            desired: req.desired,
            period: u,
            delay: worst,
            startup: b,
            duration: 4 * (worst + b + u) + 60,
            deaths: Vec::new(),
            controller: ControllerKind::Ledger,
        };
        (Some(predict(&spec).overshoot), None, None)
    };
    Ok(PeriodAdvice {
        period: u,
        blind_rounds,
        ledger_overshoot,
        p_overshoot,
        ledger_mean_overshoot,
        reads_per_hour,
        records_read_per_hour: reads_per_hour * req.desired as f64,
        replace_mean_s: mean + u as f64 / 2.0 + b as f64,
        replace_worst_s: (worst + u + b) as f64,
    })
}

/// The simulated seconds of one Monte Carlo run: settle, lose copies, settle again.
fn monte_carlo_duration(span: u64, u: u64) -> u64 {
    span.saturating_mul(8).saturating_add(u.saturating_mul(2))
}

/// The Monte Carlo world for one period and controller: the workload starts from zero, settles,
/// then loses a third of its copies (at least one), and settles again.
fn monte_carlo_scenario(
    req: &AdviceRequest,
    u: u64,
    worst: u64,
    kind: ControllerKind,
) -> Result<Scenario, AdviceError> {
    let span = worst + req.startup + u;
    let deaths_at = 4 * span;
    let spec = ScenarioSpec {
        period: u,
        duration: monte_carlo_duration(span, u),
        delay: req.delay.clone(),
        controller: ControllerSpec::new(kind),
        workloads: vec![Workload {
            name: "w".into(),
            desired: req.desired,
            startup: req.startup,
        }],
        events: vec![TimedEvent {
            at: deaths_at,
            workload: None,
            event: Event::Deaths(Toll::Count((req.desired / 3).max(1))),
        }],
        unique_names: true,
        seed: req.seed,
        pipeline: req.pipeline,
        startup_model: None,
    };
    Ok(Scenario::new(spec)?.with_startup_model(req.startup_model.clone())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(delay: DelayModel) -> AdviceRequest {
        AdviceRequest {
            delay,
            startup: 5,
            startup_model: None,
            desired: 6,
            periods: COMMON_PERIODS.to_vec(),
            runs: 40,
            seed: 1,
            pipeline: Default::default(),
        }
    }

    #[test]
    fn fixed_delay_recommends_the_first_period_past_delay_plus_startup() {
        let a = advise(&request(DelayModel::fixed_seconds(30))).unwrap();
        assert_eq!(a.recommended_period, 45);
        assert_eq!(a.recommended_controller, "named");
        let at = |u: u64| a.periods.iter().find(|p| p.period == u).unwrap();
        // The lesson's row: U = 15, G = 30, B = 5 overshoots by 12.
        assert_eq!(at(15).ledger_overshoot, Some(12));
        assert_eq!(at(15).blind_rounds, 3);
        assert_eq!(at(45).ledger_overshoot, Some(0));
        assert_eq!(at(45).blind_rounds, 1);
        assert!(a.reasons.iter().any(|r| r.contains("35 s")));
    }

    #[test]
    fn a_node_that_reports_every_r_adds_r_to_the_ledgers_worst_lag() {
        let mut r = request(DelayModel::fixed_seconds(20));
        r.runs = 20;
        r.pipeline = crate::pipeline::PipelineSpec {
            mode: crate::pipeline::Pipeline::InOrder,
            nodes: 1,
            report_every_ms: 1_500,
        };
        let a = advise(&r).unwrap();
        // 20 s + 1.5 s, in whole seconds: 22; blind span 22 + B = 27, so U = 30.
        assert_eq!(a.worst_delay_s, 22);
        assert_eq!(a.recommended_period, 30);
        r.pipeline.report_every_ms = 0;
        let a = advise(&r).unwrap();
        assert_eq!(a.worst_delay_s, 20);
        assert_eq!(a.recommended_period, 30);
        r.pipeline.report_every_ms = 500;
        r.delay = DelayModel::fixed_seconds(25);
        // 25.5 s → 26 s, + B = 31: past 30, so the next common period.
        let a = advise(&r).unwrap();
        assert_eq!(a.worst_delay_s, 26);
        assert!(a.recommended_period > 30, "{}", a.recommended_period);
    }

    #[test]
    fn a_period_not_in_the_list_is_added_when_it_is_the_boundary() {
        let mut r = request(DelayModel::fixed_seconds(200));
        r.periods = vec![15, 60];
        let a = advise(&r).unwrap();
        assert_eq!(a.recommended_period, 205);
        assert_eq!(a.periods.last().unwrap().period, 205);
    }

    #[test]
    fn jittered_delay_reports_probabilities_and_named_never_overshoots() {
        let a = advise(&request(DelayModel::lesson_chain())).unwrap();
        assert_eq!(a.worst_delay_s, 27);
        assert_eq!(a.recommended_period, 45);
        for p in &a.periods {
            let shares = p.p_overshoot.as_ref().unwrap();
            assert_eq!(shares[2].0, "named");
            assert_eq!(shares[2].1, 0.0, "named overshot at U = {}", p.period);
            assert_eq!(shares[1].1, 0.0, "intent overshot at U = {}", p.period);
        }
        let at = |u: u64| a.periods.iter().find(|p| p.period == u).unwrap();
        assert!(
            at(5).p_overshoot.as_ref().unwrap()[0].1 > 0.9,
            "ledger at U = 5"
        );
        assert_eq!(
            at(45).p_overshoot.as_ref().unwrap()[0].1,
            0.0,
            "ledger at U = 45"
        );
        assert_eq!(advise(&request(DelayModel::lesson_chain())).unwrap(), a);
    }
}
