//! Reading a fault model: telling it from a lab scenario, finding the shipped ones, and
//! validating every value into a [`Model`].

use std::path::{Path, PathBuf};

use setpoint_core::ControllerKind;
use setpoint_sim::scenario_file::toml_error;
use toml::{Spanned, Value};

use super::raw::{Located, RawFile};
use super::{Fault, FaultKind, FaultRule, Model, ModelError, Target, Timing, WorkloadModel};
use crate::net::NetConfig;

/// Whether `text` is a fault model or a replay file rather than a lab scenario, by its keys:
/// one of the tables `[cluster]`, `[network]`, `[process]`, `[[fault]]`, the keys `settle` or
/// `event_budget`, or events timed in `at_ms` (a lab scenario's are in `at`). Text that is not
/// TOML is not (the lab's reader then names the error).
pub fn looks_like_model(text: &str) -> bool {
    let Ok(table) = text.parse::<toml::Table>() else {
        return false;
    };
    [
        "cluster",
        "network",
        "process",
        "fault",
        "settle",
        "event_budget",
    ]
    .iter()
    .any(|k| table.contains_key(*k))
        || table
            .get("event")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_table)
            .is_some_and(|e| e.contains_key("at_ms"))
}

/// The fault model files this repository ships in `scenarios/chaos/{dir}` (`""` for the
/// models themselves, `regressions`, `open`), sorted: for the tests and the mutation run, which
/// run every one of them.
pub fn shipped(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/chaos")
        .join(dir);
    let mut out: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    out.sort();
    out
}

/// Reads and validates the fault model at `path`.
pub fn load(path: &Path) -> Result<Model, ModelError> {
    let label = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::Unreadable {
        path: label.clone(),
        message: e.to_string(),
    })?;
    parse(&label, &text)
}

/// The most of one fault per run.
pub const MAX_COUNT: i64 = 10_000;
/// The longest run, seconds (a day).
pub const MAX_SECONDS: i64 = 86_400;
/// The most a host's clock may drift, parts per million (20 %: far beyond a real quartz or
/// NTP slew, which stays within 500 ppm, so that a model can press on the agent's margin of a
/// tenth of its lease).
pub const MAX_DRIFT_PPM: u64 = 200_000;

/// Parses the text of a fault model; `label` names it in errors.
pub fn parse(label: &str, text: &str) -> Result<Model, ModelError> {
    let f = Located { label, text };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let (line, key, message) = toml_error(text, &e);
        ModelError::File {
            path: label.to_owned(),
            line,
            key,
            message,
        }
    })?;
    let seconds = f.opt(&raw.seconds, "seconds", 1, MAX_SECONDS, 600)?;
    let settle = f.opt(&raw.settle, "settle", 0, MAX_SECONDS, 120.min(seconds / 2))?;
    if settle >= seconds {
        let span = raw.settle.as_ref().map_or(0..0, |s| s.span());
        return Err(f.at(
            span,
            Some("settle"),
            format!("settle {settle} must be shorter than the run's {seconds} seconds"),
        ));
    }
    let cluster = raw.cluster.as_ref();
    let controllers = f.opt(
        &cluster.and_then(|c| c.controllers.clone()),
        "cluster.controllers",
        1,
        8,
        2,
    )? as usize;
    let agents = f.opt(
        &cluster.and_then(|c| c.agents.clone()),
        "cluster.agents",
        1,
        32,
        3,
    )? as usize;
    let skew_max_ms = f.opt(
        &cluster.and_then(|c| c.skew_max_ms.clone()),
        "cluster.skew_max_ms",
        0,
        60_000,
        0,
    )?;
    let drift_max_ppm = f.opt(
        &cluster.and_then(|c| c.drift_max_ppm.clone()),
        "cluster.drift_max_ppm",
        0,
        MAX_DRIFT_PPM as i64,
        0,
    )?;
    let knob = |k: &str, v: Option<Spanned<i64>>, default: u64| {
        f.opt(&v, &format!("cluster.{k}"), 10, 3_600_000, default)
    };
    let timing = Timing {
        leader_ttl_ms: knob(
            "leader_ttl_ms",
            cluster.and_then(|c| c.leader_ttl_ms.clone()),
            5_000,
        )?,
        node_ttl_ms: knob(
            "node_ttl_ms",
            cluster.and_then(|c| c.node_ttl_ms.clone()),
            10_000,
        )?,
        poll_ms: knob("poll_ms", cluster.and_then(|c| c.poll_ms.clone()), 100)?,
        sync_ms: knob("sync_ms", cluster.and_then(|c| c.sync_ms.clone()), 100)?,
        report_ms: knob(
            "report_ms",
            cluster.and_then(|c| c.report_ms.clone()),
            1_000,
        )?,
        report_delay_ms: f.opt(
            &cluster.and_then(|c| c.report_delay_ms.clone()),
            "cluster.report_delay_ms",
            0,
            3_600_000,
            0,
        )?,
    };
    let net_raw = raw.network.as_ref();
    let delay_ms = f.opt(
        &net_raw.and_then(|n| n.delay_ms.clone()),
        "network.delay_ms",
        0,
        60_000,
        1,
    )?;
    let jitter_ms = f.opt(
        &net_raw.and_then(|n| n.jitter_ms.clone()),
        "network.jitter_ms",
        0,
        60_000,
        0,
    )?;
    let loss_ppm = match net_raw.and_then(|n| n.loss.as_ref()) {
        None => 0,
        Some(v) => {
            let x = match v.get_ref() {
                Value::Float(x) => *x,
                Value::Integer(i) => *i as f64,
                _ => f64::NAN,
            };
            if !(0.0..=1.0).contains(&x) {
                return Err(f.at(
                    v.span(),
                    Some("network.loss"),
                    format!("{} is not accepted: a fraction from 0 to 1", v.get_ref()),
                ));
            }
            (x * 1e6).round() as u64
        }
    };
    let slow_ms = f.opt(
        &net_raw.and_then(|n| n.slow_ms.clone()),
        "network.slow_ms",
        0,
        60_000,
        2_000,
    )?;
    let proc_raw = raw.process.as_ref();
    let start_ms = f.opt(
        &proc_raw.and_then(|p| p.start_ms.clone()),
        "process.start_ms",
        0,
        600_000,
        20,
    )?;
    let term_exit_ms = f.opt(
        &proc_raw.and_then(|p| p.term_exit_ms.clone()),
        "process.term_exit_ms",
        0,
        600_000,
        100,
    )?;
    if raw.workload.is_empty() {
        return Err(ModelError::File {
            path: label.to_owned(),
            line: 1,
            key: "workload".into(),
            message: "the model has no workload: declare at least one [[workload]]".into(),
        });
    }
    let mut workloads: Vec<WorkloadModel> = Vec::new();
    for (i, w) in raw.workload.iter().enumerate() {
        let key = |k: &str| format!("workload[{}].{k}", i + 1);
        let name = w.name.get_ref().clone();
        let ok = name.len() <= 48
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            return Err(f.at(
                w.name.span(),
                Some(&key("name")),
                format!("'{name}' is not accepted: 1 to 48 lowercase letters, digits and '-', starting with a letter"),
            ));
        }
        if workloads.iter().any(|o| o.name == name) {
            return Err(f.at(
                w.name.span(),
                Some(&key("name")),
                format!("'{name}' is declared twice"),
            ));
        }
        let controller = match &w.controller {
            None => ControllerKind::Named,
            Some(c) => c.get_ref().parse().map_err(|_| {
                let names: Vec<&str> = ControllerKind::ALL.iter().map(|k| k.name()).collect();
                f.at(
                    c.span(),
                    Some(&key("controller")),
                    format!(
                        "unknown controller '{}': accepted {}",
                        c.get_ref(),
                        names.join(", ")
                    ),
                )
            })?,
        };
        workloads.push(WorkloadModel {
            name,
            controller,
            copies: f.int(&w.copies, &key("copies"), 0, 1000)?,
            period_ms: f.opt(&w.period_ms, &key("period_ms"), 10, 3_600_000, 1000)?,
            startup_ms: f.opt(&w.startup_ms, &key("startup_ms"), 0, 3_600_000, 2000)?,
            grace_ms: f.opt(&w.grace_ms, &key("grace_ms"), 0, 3_600_000, 3000)?,
            stop_when_cut_off_ms: match &w.stop_when_cut_off_ms {
                None => None,
                Some(v) if controller == ControllerKind::Named => {
                    return Err(f.at(
                        v.span(),
                        Some(&key("stop_when_cut_off_ms")),
                        "named copies are always stopped by their agent's fence: accepted only \
                         for ledger, intent, expectations and gated",
                    ))
                }
                Some(v) => Some(f.int(v, &key("stop_when_cut_off_ms"), 1000, 604_800_000)?),
            },
        });
    }
    let mut faults = Vec::new();
    for (i, r) in raw.fault.iter().enumerate() {
        let key = |k: &str| format!("fault[{}].{k}", i + 1);
        let kind = f.kind(&r.kind, &key("kind"))?;
        let target = match &r.target {
            None => Target::Any,
            Some(t) if !kind.on_host() => {
                return Err(f.at(
                    t.span(),
                    Some(&key("target")),
                    format!("a '{}' fault strikes no host: drop 'target'", kind.name()),
                ))
            }
            Some(t) => match t.get_ref().as_str() {
                "agent" => Target::Agent,
                "controller" => Target::Controller,
                "any" => Target::Any,
                other => {
                    return Err(f.at(
                        t.span(),
                        Some(&key("target")),
                        format!("unknown target '{other}': accepted agent, controller, any"),
                    ))
                }
            },
        };
        // A restart with no target strikes a controller, as before agents could restart, so
        // that older models draw the schedules they drew.
        let target = if kind == FaultKind::Restart && r.target.is_none() {
            Target::Controller
        } else if kind == FaultKind::Shutdown && r.target.is_none() {
            // The operator's stop is of an agent unless the rule says otherwise.
            Target::Agent
        } else if kind.agent_only() {
            // Only an agent keeps a state file to lose, and a node's processes to find.
            match (&r.target, target) {
                (None, _) | (_, Target::Agent) => Target::Agent,
                (Some(t), _) => {
                    return Err(f.at(
                        t.span(),
                        Some(&key("target")),
                        format!(
                            "a '{}' fault strikes an agent: target agent, or drop 'target'",
                            kind.name()
                        ),
                    ))
                }
            }
        } else {
            target
        };
        let (min_ms, max_ms) = if kind.lasts() {
            let lo = f.opt(&r.min_ms, &key("min_ms"), 1, MAX_SECONDS * 1000, 1000)?;
            let hi = f.opt(
                &r.max_ms,
                &key("max_ms"),
                1,
                MAX_SECONDS * 1000,
                lo.max(10_000),
            )?;
            if hi < lo {
                let span = r.max_ms.as_ref().map_or(r.kind.span(), |s| s.span());
                return Err(f.at(
                    span,
                    Some(&key("max_ms")),
                    format!("max_ms {hi} is below min_ms {lo}"),
                ));
            }
            (lo, hi)
        } else {
            for (v, k) in [(&r.min_ms, "min_ms"), (&r.max_ms, "max_ms")] {
                if let Some(v) = v {
                    return Err(f.at(
                        v.span(),
                        Some(&key(k)),
                        format!("a '{}' fault is an instant: drop '{k}'", kind.name()),
                    ));
                }
            }
            (0, 0)
        };
        let during = match &r.during {
            None => None,
            Some(d) => {
                let within = f.kind(d, &key("during"))?;
                if !within.lasts() {
                    return Err(f.at(
                        d.span(),
                        Some(&key("during")),
                        format!(
                            "'{}' is an instant: 'during' names a lasting kind ({})",
                            within.name(),
                            FaultKind::names_that_last(true)
                        ),
                    ));
                }
                if !faults.iter().any(|e: &FaultRule| e.kind == within) {
                    return Err(f.at(
                        d.span(),
                        Some(&key("during")),
                        format!(
                            "no earlier [[fault]] rule draws a '{}': declare it above this one",
                            within.name()
                        ),
                    ));
                }
                Some(within)
            }
        };
        let after = match &r.after {
            None => None,
            Some(a) => {
                let before = f.kind(a, &key("after"))?;
                if before.lasts() {
                    return Err(f.at(
                        a.span(),
                        Some(&key("after")),
                        format!(
                            "'{}' lasts: 'after' names an instant ({}); for a lasting kind use \
                             'during'",
                            before.name(),
                            FaultKind::names_that_last(false)
                        ),
                    ));
                }
                if during.is_some() {
                    return Err(f.at(
                        a.span(),
                        Some(&key("after")),
                        "a rule draws 'during' one fault or 'after' one: drop one of them",
                    ));
                }
                if !faults.iter().any(|e: &FaultRule| e.kind == before) {
                    return Err(f.at(
                        a.span(),
                        Some(&key("after")),
                        format!(
                            "no earlier [[fault]] rule draws a '{}': declare it above this one",
                            before.name()
                        ),
                    ));
                }
                Some(before)
            }
        };
        let within_ms = match (&r.within_ms, after) {
            (Some(w), None) => {
                return Err(f.at(
                    w.span(),
                    Some(&key("within_ms")),
                    "'within_ms' is the window of 'after': add 'after', or drop 'within_ms'",
                ))
            }
            (_, None) => 0,
            (w, Some(_)) => f.opt(w, &key("within_ms"), 1, MAX_SECONDS * 1000, 1000)?,
        };
        faults.push(FaultRule {
            kind,
            count: f.int(&r.count, &key("count"), 0, MAX_COUNT)?,
            target,
            min_ms,
            max_ms,
            during,
            after,
            within_ms,
        });
    }
    let hosts = controllers + agents;
    let schedule = match &raw.event {
        None => None,
        Some(events) => {
            let mut out = Vec::new();
            for (i, e) in events.get_ref().iter().enumerate() {
                let key = |k: &str| format!("event[{}].{k}", i + 1);
                let kind = f.kind(&e.kind, &key("kind"))?;
                let host = f.opt(&e.host, &key("host"), 0, hosts as i64 - 1, 0)? as usize;
                let duration_ms = f.opt(
                    &e.duration_ms,
                    &key("duration_ms"),
                    0,
                    MAX_SECONDS * 1000,
                    0,
                )?;
                out.push(Fault {
                    at_ms: f.int(&e.at_ms, &key("at_ms"), 0, (seconds * 1000) as i64)?,
                    kind,
                    host,
                    duration_ms,
                });
            }
            out.sort();
            Some(out)
        }
    };
    let seed = match &raw.seed {
        None => None,
        Some(s) => Some(f.int(s, "seed", 0, i64::MAX)?),
    };
    Ok(Model {
        description: raw.description.unwrap_or_default(),
        duration_ms: seconds * 1000,
        settle_ms: settle * 1000,
        event_budget: f.opt(&raw.event_budget, "event_budget", 1, i64::MAX, 5_000_000)?,
        seed,
        controllers,
        agents,
        skew_max_ms,
        timing,
        net: NetConfig {
            delay_ms,
            jitter_ms,
            loss_ppm,
            slow_ms,
        },
        start_ms,
        term_exit_ms,
        workloads,
        faults,
        swarm: raw.swarm.unwrap_or(false),
        drift_max_ppm,
        schedule,
    })
}
