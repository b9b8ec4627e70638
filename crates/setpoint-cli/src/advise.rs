//! `setpoint advise`: a loop period and a controller for a report delay and a startup time, with
//! the reasoning in plain words.

use std::fmt::Write as _;

use clap::{Args, ValueEnum};
use setpoint_sim::advise::{advise, Advice, AdviceRequest, COMMON_PERIODS, RUNS};
use setpoint_sim::delay::{parse_delay_model, DelayModel};
use setpoint_sim::Limit;

/// `setpoint advise`.
#[derive(Debug, Args)]
pub struct AdviseArgs {
    /// The report delay: seconds (`20`), or a delay model: `fixed:S`, `uniform:MIN:MAX`,
    /// `lesson-chain` (the lesson's measured four-stage chain) or `empirical:MODEL.toml` (fitted
    /// by `setpoint calibrate`).
    #[arg(short = 'G', long, value_name = "SECONDS|MODEL", value_parser = delay, allow_hyphen_values = true)]
    pub delay: DelayModel,
    /// Startup time B: seconds from creation to running.
    #[arg(short = 'B', long, default_value = "5", value_name = "SECONDS", value_parser = startup, allow_negative_numbers = true)]
    pub startup: u64,
    /// Startup-time model, drawn for every copy: fixed:S, uniform:MIN:MAX or
    /// empirical:MODEL.toml (its startup model). Replaces --startup.
    #[arg(long, value_name = "MODEL", value_parser = crate::shared_args::startup_model, conflicts_with = "startup")]
    pub startup_model: Option<DelayModel>,
    /// Declared copies.
    #[arg(long, default_value = "6", value_name = "N", value_parser = desired, allow_negative_numbers = true)]
    pub desired: u64,
    /// Loop periods U to compare, in seconds: a list or a range such as 5..=60:5, as every
    /// command takes periods; at most 100.
    #[arg(short = 'U', long = "period", alias = "periods", value_name = "GRID", value_parser = periods)]
    pub periods: Option<PeriodList>,
    /// Monte Carlo runs per period and controller (random delays only).
    #[arg(long, default_value = "200", value_parser = runs, allow_negative_numbers = true)]
    pub runs: u64,
    /// The seed of the first Monte Carlo run; run i uses SEED + i.
    #[arg(long, default_value = "1")]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: AdviseFormat,
    /// The report pipeline of the compared runs.
    #[command(flatten)]
    pub pipeline: crate::pipeline_args::PipelineArgs,
}

/// Output formats of `advise`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum AdviseFormat {
    /// The recommendation, the reasons and a table.
    Table,
    /// One JSON object.
    Json,
    /// One record per period compared (`docs/output.md`), with the recommendation repeated on
    /// each row.
    Csv,
}

/// A parsed `--periods` list. A newtype, so that clap takes the whole list as one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeriodList(pub Vec<u64>);

fn delay(s: &str) -> Result<DelayModel, String> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return Limit::DELAY
            .parse(s)
            .map(DelayModel::fixed_seconds)
            .map_err(|e| e.to_string());
    }
    parse_delay_model(s).map_err(|e| format!("{e}; or a whole number of seconds"))
}
fn startup(s: &str) -> Result<u64, String> {
    Limit::STARTUP.parse(s).map_err(|e| e.to_string())
}
fn desired(s: &str) -> Result<u64, String> {
    Limit::DESIRED.parse(s).map_err(|e| e.to_string())
}
fn runs(s: &str) -> Result<u64, String> {
    RUNS.parse(s).map_err(|e| e.to_string())
}
fn periods(s: &str) -> Result<PeriodList, String> {
    let axis = setpoint_sim::Axis::parse(Limit::PERIOD, s).map_err(|e| e.to_string())?;
    if axis.len() > 100 {
        return Err(format!("{} periods: accepted at most 100", axis.len()));
    }
    let mut v: Vec<u64> = axis.values().collect();
    v.sort_unstable();
    v.dedup();
    Ok(PeriodList(v))
}

/// Runs `advise` and returns what it prints.
pub fn run(args: &AdviseArgs) -> anyhow::Result<String> {
    let spinner = crate::progress::spinner("advise: comparing periods and controllers");
    let advice = advise(&AdviceRequest {
        delay: args.delay.clone(),
        startup: args.startup,
        startup_model: args.startup_model.clone(),
        desired: args.desired,
        periods: args
            .periods
            .as_ref()
            .map_or_else(|| COMMON_PERIODS.to_vec(), |p| p.0.clone()),
        runs: args.runs,
        seed: args.seed,
        pipeline: args.pipeline.apply(Default::default()),
    });
    spinner.finish_and_clear();
    let advice = advice?;
    Ok(match args.format {
        AdviseFormat::Json => crate::output::json_with_schema(&advice)?,
        AdviseFormat::Table => table(&advice),
        AdviseFormat::Csv => csv(&advice),
    })
}

fn table(a: &Advice) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "advice for report delay {} (the ledger sees at most {} s), startup B = {} s, {} copies\n",
        a.delay, a.worst_delay_s, a.startup, a.desired
    );
    let _ = writeln!(
        out,
        "recommended: controller {}, loop period U = {} s\n\nwhy:",
        a.recommended_controller, a.recommended_period
    );
    for r in &a.reasons {
        let _ = writeln!(out, "  - {r}");
    }
    out.push('\n');
    let random = a.runs.is_some();
    if random {
        let _ = writeln!(
            out,
            "{:>6} {:>6} {:>21} {:>9} {:>9} {:>10} {:>10} {:>11} {:>11}",
            "U(sec)",
            "blind",
            "P(overshoot): ledger",
            "intent",
            "named",
            "ledger avg",
            "reads/h",
            "replace avg",
            "replace max"
        );
    } else {
        let _ = writeln!(
            out,
            "{:>6} {:>6} {:>16} {:>10} {:>12} {:>11} {:>11}",
            "U(sec)",
            "blind",
            "ledger overshoot",
            "reads/h",
            "records/h",
            "replace avg",
            "replace max"
        );
    }
    for p in &a.periods {
        let mark = if p.period == a.recommended_period {
            "  <- recommended"
        } else {
            ""
        };
        match (&p.p_overshoot, p.ledger_overshoot) {
            (Some(shares), _) => {
                let _ = writeln!(
                    out,
                    "{:>6} {:>6} {:>20.1}% {:>8.1}% {:>8.1}% {:>10.2} {:>10.0} {:>10.1}s {:>10.0}s{mark}",
                    p.period,
                    p.blind_rounds,
                    100.0 * shares[0].1,
                    100.0 * shares[1].1,
                    100.0 * shares[2].1,
                    p.ledger_mean_overshoot.unwrap_or(0.0),
                    p.reads_per_hour,
                    p.replace_mean_s,
                    p.replace_worst_s
                );
            }
            (None, overshoot) => {
                let _ = writeln!(
                    out,
                    "{:>6} {:>6} {:>16} {:>10.0} {:>12.0} {:>10.1}s {:>10.0}s{mark}",
                    p.period,
                    p.blind_rounds,
                    overshoot.unwrap_or(0),
                    p.reads_per_hour,
                    p.records_read_per_hour,
                    p.replace_mean_s,
                    p.replace_worst_s
                );
            }
        }
    }
    if let (Some(runs), Some(seed)) = (a.runs, a.seed) {
        let _ = writeln!(
            out,
            "\nP(overshoot): share of {runs} seeded runs per period and controller (seeds {seed}..{}) in which the live count ever exceeded desired; each run starts the workload from zero, then kills a third of it once it has settled.",
            seed + runs - 1
        );
    } else {
        let _ = writeln!(
            out,
            "\nledger overshoot: the exact predictor (docs/relation.md) for a workload started from zero; intent and named never overshoot with a fixed delay."
        );
    }
    out
}

/// The advice as CSV: one record per period compared.
fn csv(advice: &setpoint_sim::advise::Advice) -> String {
    let records: Vec<setpoint_sim::output::Record> = advice
        .periods
        .iter()
        .map(|p| {
            let mut r = setpoint_sim::output::Record::new();
            r.push("delay", advice.delay.as_str());
            r.push("startup", advice.startup);
            r.push("desired", advice.desired);
            r.push("recommended_period", advice.recommended_period);
            r.push(
                "recommended_controller",
                advice.recommended_controller.as_str(),
            );
            r.push("period", p.period);
            r.push("blind_rounds", p.blind_rounds);
            r.push("ledger_overshoot", p.ledger_overshoot);
            for name in ["ledger", "intent", "named"] {
                let share = p
                    .p_overshoot
                    .as_ref()
                    .and_then(|v| v.iter().find(|(c, _)| c == name).map(|(_, x)| *x));
                r.push(format!("p_overshoot_{name}"), share);
            }
            r.push("ledger_mean_overshoot", p.ledger_mean_overshoot);
            r.push("reads_per_hour", p.reads_per_hour);
            r.push("records_read_per_hour", p.records_read_per_hour);
            r.push("replace_mean_s", p.replace_mean_s);
            r.push("replace_worst_s", p.replace_worst_s);
            r
        })
        .collect();
    setpoint_sim::output::print(&records, setpoint_sim::output::Format::Csv, &[])
}
