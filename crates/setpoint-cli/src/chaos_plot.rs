//! `setpoint plot timeline` of a chaos fault model or replay file: the run in the chaos world
//! (`setpoint chaos --replay`'s run, or one seed of a model), drawn by
//! [`setpoint_plot::chaos_svg`]: live processes of a workload per node, desired, each host's
//! faults on its lane, the `/leader` holder, and the first violation.

use std::path::Path;

use clap::parser::ValueSource;
use setpoint_chaos::adapt::{make, Bugs};
use setpoint_chaos::runner::run_checked;
use setpoint_chaos::Role;
use setpoint_plot::{chaos_svg, ChaosTimeline, FaultBar, NodeSeries};

use crate::plot::TimelineArgs;
use crate::BadInput;

/// The flags that mean something with a chaos file.
const ACCEPTED: [&str; 4] = ["scenario", "workload", "output", "seed"];

/// The chaos timeline of the file at `path`, for `plot timeline`'s arguments `a`.
pub fn timeline(
    path: &Path,
    a: &TimelineArgs,
    matches: &clap::ArgMatches,
) -> anyhow::Result<String> {
    let label = path.display().to_string();
    if let Some(flag) = matches.ids().map(|id| id.as_str()).find(|id| {
        !ACCEPTED.contains(id) && matches.value_source(id) == Some(ValueSource::CommandLine)
    }) {
        return Err(BadInput(format!(
            "--{} does not apply to {label}, a chaos fault model: accepted --workload, --seed, --output",
            flag.replace('_', "-")
        ))
        .into());
    }
    let model = setpoint_chaos::faults::load(path)?;
    let (seed, schedule) = match (model.seed, &model.schedule) {
        (Some(seed), Some(s)) if a.world.seed.is_none_or(|x| x == seed) => (seed, s.clone()),
        (Some(seed), Some(_)) => {
            return Err(BadInput(format!(
                "{label} replays seed {seed} with its own schedule: drop --seed {}",
                a.world.seed.unwrap_or_default()
            ))
            .into())
        }
        (_, Some(s)) => (a.world.seed.unwrap_or(1), s.clone()),
        (_, None) => {
            let seed = a.world.seed.or(model.seed).unwrap_or(1);
            (seed, model.schedule(seed))
        }
    };
    let names: Vec<&str> = model.workloads.iter().map(|w| w.name.as_str()).collect();
    let workload = match &a.workload {
        None => &model.workloads[0],
        Some(name) => model
            .workloads
            .iter()
            .find(|w| &w.name == name)
            .ok_or_else(|| {
                BadInput(format!(
                    "no workload '{name}' in {label}; accepted: {}",
                    names.join(", ")
                ))
            })?,
    };
    let f = |i: usize, r: &Role, now: u64| make(&model, Bugs::default(), seed, i, r, now);
    let (report, out) = run_checked(&model, seed, schedule.clone(), &f, true);
    let out = out.ok_or_else(|| anyhow::anyhow!("a traced run keeps its outcome"))?;

    let roles = model.roles();
    let hosts: Vec<String> = roles
        .iter()
        .enumerate()
        .map(|(i, r)| match r {
            Role::Controller => format!("controller-{i}"),
            Role::Agent(node) => node.clone(),
        })
        .collect();
    let nodes: Vec<NodeSeries> = roles
        .iter()
        .filter_map(|r| match r {
            Role::Agent(node) => Some(node),
            Role::Controller => None,
        })
        .map(|node| {
            let mut changes: Vec<(u64, i64)> = Vec::new();
            for p in out
                .procs
                .iter()
                .filter(|p| &p.node == node && p.workload == workload.name)
            {
                if let Some(up) = p.up_ms {
                    changes.push((up, 1));
                    if let Some(end) = p.end_ms {
                        changes.push((end, -1));
                    }
                }
            }
            changes.sort_unstable();
            let mut steps: Vec<(u64, u64)> = Vec::new();
            let mut live: i64 = 0;
            for (t, d) in changes {
                live += d;
                match steps.last_mut() {
                    Some(last) if last.0 == t => last.1 = live.max(0) as u64,
                    _ => steps.push((t, live.max(0) as u64)),
                }
            }
            NodeSeries {
                node: node.clone(),
                steps,
            }
        })
        .collect();
    let faults: Vec<FaultBar> = schedule
        .iter()
        .map(|f| FaultBar {
            host: f.kind.on_host().then_some(f.host),
            from_ms: f.at_ms,
            to_ms: f.at_ms + if f.kind.lasts() { f.duration_ms } else { 0 },
            label: f.kind.name().to_owned(),
        })
        .collect();
    let leaders: Vec<(u64, Option<usize>)> =
        out.leaders.iter().map(|&(t, h)| (t, h.flatten())).collect();
    let first = report.violations.iter().min_by_key(|v| v.at_ms);
    let mut checks: Vec<&str> = report.violations.iter().map(|v| v.check.name()).collect();
    checks.sort_unstable();
    checks.dedup();
    let file = path
        .file_name()
        .map_or(label.clone(), |f| f.to_string_lossy().into_owned());
    let verdict = if checks.is_empty() {
        "every check held".to_owned()
    } else {
        format!(
            "FAILED {} ({} violations)",
            checks.join(", "),
            report.violations.len()
        )
    };
    let title = format!(
        "{file}: {}, {} copies, seed {seed}, {} faults: {verdict}",
        workload.name,
        workload.copies,
        schedule.len()
    );
    Ok(chaos_svg(&ChaosTimeline {
        title,
        duration_ms: out.end_ms.max(1),
        desired: workload.copies,
        hosts: &hosts,
        nodes: &nodes,
        faults: &faults,
        leaders: &leaders,
        violation: first.map(|v| (v.at_ms, v.check.name().to_owned())),
    })?)
}
