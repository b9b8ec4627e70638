//! Runs scenarios given in the reference driver's JSON-lines format and prints the results in the
//! reference model's shape, so that `scripts/compare-reference.sh` can time setpoint and the
//! reference on exactly the same cells and compare their answers.
//!
//! ```text
//! cargo run --release -p setpoint-sim --example cases -- [--repeat N] < cases.jsonl
//! ```
//!
//! Each input line is an object with any of `desired`, `U`, `G`, `B`, `duration`, `intent` and
//! `deaths` (`[[at, count], …]`); omitted keys take the lesson's defaults. The whole list is
//! simulated N times (default 1) on one thread, then each result is printed once, in input order,
//! with the reference's keys: round, workRound, created, unneeded, commands, deleted, overshoot,
//! stable. With N = 0 nothing is simulated or printed: that run measures start-up and parsing.
//!
//! Two keys are defined differently from setpoint's own metrics, to match the reference:
//! `unneeded` subtracts every scheduled death, struck or not, and `stable` is 1, not 0, for a run
//! that never drifts.

use std::hint::black_box;
use std::io::{self, BufRead, Write};
use std::process::ExitCode;

use serde_json::{json, Value};
use setpoint_core::ControllerKind;
use setpoint_sim::{simulate, Death, LessonSpec, LessonWorld, Metrics};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let repeat = match args.as_slice() {
        [] => 1,
        [flag, n] if flag == "--repeat" => n
            .parse::<u64>()
            .map_err(|_| format!("--repeat '{n}' is not a whole number"))?,
        _ => return Err("usage: cases [--repeat N] < cases.jsonl".into()),
    };
    let mut scenarios = Vec::new();
    for (i, line) in io::stdin().lock().lines().enumerate() {
        let line = line.map_err(|e| format!("reading stdin: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let scenario = parse_case(&line).map_err(|e| format!("line {}: {e}", i + 1))?;
        scenarios.push(scenario);
    }
    let mut results = Vec::new();
    for _ in 0..repeat {
        results = scenarios
            .iter()
            .map(|s| simulate(black_box(s)))
            .collect::<Vec<_>>();
    }
    let mut out = io::BufWriter::new(io::stdout().lock());
    for (scenario, m) in scenarios.iter().zip(&results) {
        writeln!(out, "{}", reference_shape(scenario.spec(), m)).map_err(|e| e.to_string())?;
    }
    out.flush().map_err(|e| e.to_string())
}

fn parse_case(line: &str) -> Result<LessonWorld, String> {
    let case: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let base = LessonSpec::default();
    let number = |key: &str, default: u64| -> Result<u64, String> {
        match case.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| format!("'{key}' is not a whole number: {v}")),
        }
    };
    let deaths = match case.get("deaths") {
        None => base.deaths.clone(),
        Some(list) => list
            .as_array()
            .ok_or("'deaths' is not a list")?
            .iter()
            .map(|pair| match pair.as_array().map(Vec::as_slice) {
                Some([at, count]) => Ok(Death {
                    at: at.as_u64().ok_or("a death time is not a whole number")?,
                    count: count
                        .as_u64()
                        .ok_or("a death count is not a whole number")?,
                }),
                _ => Err("a death is not a pair [at, count]".to_owned()),
            })
            .collect::<Result<Vec<_>, String>>()?,
    };
    let intent = case.get("intent").and_then(Value::as_bool).unwrap_or(false);
    LessonWorld::new(LessonSpec {
        desired: number("desired", base.desired)?,
        period: number("U", base.period)?,
        delay: number("G", base.delay)?,
        startup: number("B", base.startup)?,
        duration: number("duration", base.duration)?,
        deaths,
        controller: if intent {
            ControllerKind::Intent
        } else {
            ControllerKind::Ledger
        },
    })
    .map_err(|e| e.to_string())
}

fn reference_shape(spec: &LessonSpec, m: &Metrics) -> Value {
    let scheduled: u64 = spec.deaths.iter().map(|d| d.count).sum();
    let unneeded = i128::from(m.created) - i128::from(spec.desired) - i128::from(scheduled);
    json!({
        "round": m.rounds,
        "workRound": m.work_per_round,
        "created": m.created,
        "unneeded": unneeded as i64,
        "commands": m.delete_commands,
        "deleted": m.deleted,
        "overshoot": m.overshoot,
        "stable": m.stable.map(|s| s.max(1)),
    })
}
