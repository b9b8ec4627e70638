//! The flat records of the runtime's data commands (`get`, `status`, `measure`, `experiment
//! lesson`), for `--format csv`: one row per record, in the one schema of the lab's outputs
//! ([`setpoint_sim::output::Record`], printed by [`setpoint_sim::output::print`]). Every record of
//! a kind has the same keys in the same order; what does not apply is empty (`null`).
//! `docs/output.md` lists the keys.

use setpoint_core::metrics::Metrics;
use setpoint_reality::experiment::CellOutcome;
use setpoint_reality::jitter::{JitterOutcome, LabRuns};
use setpoint_runtime::measure::{Measurement, Spread};
use setpoint_runtime::ops::{Status, WorkloadStatus};
use setpoint_sim::output::{self, push_lesson_metrics, Record};

/// The keys of a `get` row.
pub const GET_KEYS: &[&str] = &[
    "schema",
    "workload",
    "controller",
    "period_ms",
    "desired",
    "live",
    "on_ledger",
    "pending_create",
    "pending_delete",
    "copies",
    "generation",
    "updated",
    "idle_reason",
    "idle_for_ms",
    "backing_off",
    "restarts",
    "rollout_generation",
    "rollout_updated",
    "rollout_desired",
    "rollout_old",
    "rollout_stalled",
    "rollout_for_ms",
    "cut_off",
    "stop_when_cut_off_ms",
];

/// The keys of a `status` row.
pub const STATUS_KEYS: &[&str] = &[
    "schema",
    "revision",
    "leader",
    "leader_held_ms",
    "leader_ttl_ms",
    "workloads",
    "idle_workloads",
    "node",
    "live",
    "lease",
    "lease_ttl_ms",
    "lease_held_ms",
    "agent_pid",
    "host",
    "since_report_ms",
    "report_lag_ms",
    "starting",
    "running",
    "exited",
    "assigned",
    "problems",
];

/// CSV of `records`, or the header alone for none.
pub fn csv(records: &[Record], keys: &[&str]) -> String {
    if records.is_empty() {
        return format!("{}\n", keys.join(","));
    }
    output::print(records, output::Format::Csv, &[])
}

/// One row per workload: its counts, its idle reason, its backoff and its rollout.
pub fn get_records(all: &[WorkloadStatus]) -> Vec<Record> {
    all.iter()
        .map(|w| {
            let mut r = Record::new();
            r.push("workload", w.name.as_str());
            r.push("controller", w.controller.as_str());
            r.push("period_ms", w.period_ms);
            r.push("desired", w.desired);
            r.push("live", w.live);
            r.push("on_ledger", w.on_ledger);
            r.push("pending_create", w.pending_create);
            r.push("pending_delete", w.pending_delete);
            r.push("copies", w.copies.len() as u64);
            r.push("generation", w.generation);
            r.push("updated", w.updated);
            let idle = w.idle.as_ref();
            r.push("idle_reason", idle.map(|i| word(&i.reason)));
            r.push("idle_for_ms", idle.map(|i| i.for_ms));
            let backing = w.backoff.iter().filter(|b| b.backing_off).count() as u64;
            r.push("backing_off", backing);
            r.push(
                "restarts",
                w.backoff.iter().map(|b| b.restarts).sum::<u64>(),
            );
            let ro = w.rollout.as_ref();
            r.push("rollout_generation", ro.map(|x| x.generation));
            r.push("rollout_updated", ro.map(|x| x.updated));
            r.push("rollout_desired", ro.map(|x| x.desired));
            r.push("rollout_old", ro.map(|x| x.old));
            r.push("rollout_stalled", ro.map(|x| x.stalled));
            r.push("rollout_for_ms", ro.map(|x| x.for_ms));
            r.push("cut_off", w.cut_off);
            r.push("stop_when_cut_off_ms", w.stop_when_cut_off_ms);
            r
        })
        .collect()
}

/// One row per node, each carrying the store's revision, the leader and the workload counts.
pub fn status_records(s: &Status) -> Vec<Record> {
    s.nodes
        .iter()
        .map(|n| {
            let mut r = Record::new();
            r.push("revision", s.revision);
            let l = s.leader.as_ref();
            r.push("leader", l.map(|l| l.holder.clone()));
            r.push("leader_held_ms", l.map(|l| l.held_ms));
            r.push("leader_ttl_ms", l.map(|l| l.ttl_ms));
            r.push("workloads", s.workloads);
            r.push("idle_workloads", s.idle.len() as u64);
            r.push("node", n.node.as_str());
            r.push("live", n.live);
            let lease = n.lease.as_ref();
            r.push("lease", lease.map(|x| x.lease));
            r.push("lease_ttl_ms", lease.map(|x| x.ttl_ms));
            r.push("lease_held_ms", lease.map(|x| x.held_ms));
            r.push("agent_pid", lease.map(|x| u64::from(x.agent_pid)));
            r.push("host", lease.map(|x| x.host.clone()));
            r.push("since_report_ms", n.since_report_ms);
            r.push("report_lag_ms", n.report_lag_ms);
            r.push("starting", n.starting);
            r.push("running", n.running);
            r.push("exited", n.exited);
            r.push("assigned", n.assigned);
            r.push("problems", s.problems.len() as u64);
            r
        })
        .collect()
}

/// The measured delays of [`Measurement::jitter`], by name.
fn jitter(m: &Measurement) -> [(&'static str, &Spread); 5] {
    let j = &m.jitter;
    let [a, b, c, d, e] = JITTER_NAMES;
    [
        (a, &j.ready_to_ledger),
        (b, &j.exit_to_ledger),
        (c, &j.create_to_start),
        (d, &j.start_to_ready),
        (e, &j.round_error),
    ]
}

/// Appends a spread of milliseconds as `{name}_{count,min,p50,p99,max}{unit}`; no samples gives
/// a count of 0 and empty values.
fn push_spread(r: &mut Record, name: &str, unit: &str, s: &Spread) {
    r.push(format!("{name}_count"), s.count);
    for (what, v) in [
        ("min", s.min),
        ("p50", s.p50),
        ("p99", s.p99),
        ("max", s.max),
    ] {
        r.push(format!("{name}_{what}{unit}"), (s.count > 0).then_some(v));
    }
}

/// One row per measured workload: its window, the lesson's metrics, restarts and the delays.
pub fn measure_records(all: &[Measurement]) -> Vec<Record> {
    all.iter()
        .map(|m| {
            let mut r = Record::new();
            r.push("workload", m.workload.as_str());
            r.push("origin_ms", m.origin_ms);
            r.push("time_scale", m.time_scale);
            r.push("second_ms", m.window.second_ms());
            r.push("last_second", m.last_second);
            push_lesson_metrics(&mut r, &m.metrics);
            r.push("restarts", m.restarts);
            for (name, s) in jitter(m) {
                push_spread(&mut r, name, "_ms", s);
            }
            r
        })
        .collect()
}

/// Appends the lesson's metrics with `prefix`, or nulls under the same keys.
fn push_prefixed(r: &mut Record, prefix: &str, m: Option<&Metrics>) {
    let mut inner = Record::default();
    push_lesson_metrics(&mut inner, m.unwrap_or(&Metrics::default()));
    for (k, v) in inner.fields {
        let v = if m.is_some() { v } else { output::Value::Null };
        r.push(format!("{prefix}{k}"), v);
    }
}

/// One row per cell of `experiment lesson`: the lab's metrics (`lab_…`), and with `--real` the
/// measured ones (`real_…`), the kill, the store's own delay and the measured delays; without
/// `--real` those are empty. `lab` gives each cell's (delay, controller, lab metrics).
pub fn experiment_records(
    time_scale: f64,
    lab: &[(u64, &str, Metrics)],
    real: Option<&[CellOutcome]>,
) -> Vec<Record> {
    lab.iter()
        .map(|(delay, controller, sim)| {
            let cell = real.and_then(|cells| {
                cells
                    .iter()
                    .find(|c| c.delay == *delay && c.controller.name() == *controller)
            });
            let mut r = Record::new();
            r.push("controller", *controller);
            r.push("delay", *delay);
            r.push("time_scale", cell.map(|_| time_scale));
            push_prefixed(&mut r, "lab_", Some(sim));
            push_prefixed(&mut r, "real_", cell.map(|c| &c.measured.metrics));
            push_real(
                &mut r,
                cell.map(|c| {
                    (
                        &c.measured,
                        c.killed.len(),
                        c.kill_late_ms,
                        &c.store_delay_us,
                    )
                }),
            );
            r
        })
        .collect()
}

/// One lab cell of `experiment lesson --delay-model`: controller, model text, seed, the lab's
/// run at that seed and its spread over seeds.
pub type JitterLab = (&'static str, String, u64, Metrics, LabRuns);

/// One row per cell of `experiment lesson --delay-model`, controllers slowest: `controller`,
/// `delay_model`, `seed`, `time_scale` (empty without `--real`), the lab's run at the seed
/// (`lab_…`), the lab's overshoot over many seeds (`lab_runs`, `lab_p_overshoot`,
/// `lab_overshoot_mean`, `lab_overshoot_p95`, `lab_overshoot_max`), then as in
/// [`experiment_records`] the measured metrics, the kill, the store's delay and the measured
/// delays (empty without `--real`).
pub fn jitter_records(
    time_scale: f64,
    lab: &[JitterLab],
    real: Option<&[JitterOutcome]>,
) -> Vec<Record> {
    lab.iter()
        .map(|(controller, model, seed, sim, runs)| {
            let cell = real.and_then(|cells| {
                cells
                    .iter()
                    .find(|c| c.delay_model == *model && c.controller.name() == *controller)
            });
            let mut r = Record::new();
            r.push("controller", *controller);
            r.push("delay_model", model.as_str());
            r.push("seed", *seed);
            r.push("time_scale", cell.map(|_| time_scale));
            push_prefixed(&mut r, "lab_", Some(sim));
            r.push("lab_runs", runs.runs);
            r.push("lab_p_overshoot", runs.p_overshoot);
            r.push("lab_overshoot_mean", runs.overshoot_mean);
            r.push("lab_overshoot_p95", runs.overshoot_p95);
            r.push("lab_overshoot_max", runs.overshoot_max);
            push_prefixed(&mut r, "real_", cell.map(|c| &c.measured.metrics));
            push_real(
                &mut r,
                cell.map(|c| {
                    (
                        &c.measured,
                        c.killed.len(),
                        c.kill_late_ms,
                        &c.store_delay_us,
                    )
                }),
            );
            r
        })
        .collect()
}

/// The measured columns after `real_…`: restarts, the kill, the store's delay and the measured
/// delays; empty without a real run.
fn push_real(r: &mut Record, real: Option<(&Measurement, usize, i64, &Spread)>) {
    r.push("real_restarts", real.map(|x| x.0.restarts));
    r.push("killed", real.map(|x| x.1 as u64));
    r.push("kill_late_ms", real.map(|x| x.2));
    let none = Spread::of(Vec::new());
    push_spread(r, "store_delay", "_us", real.map_or(&none, |x| x.3));
    for (k, name) in JITTER_NAMES.iter().enumerate() {
        let s = real.map_or(&none, |x| jitter(x.0)[k].1);
        push_spread(r, name, "_ms", s);
    }
}

/// The names of [`jitter`]'s delays, in order.
const JITTER_NAMES: [&str; 5] = [
    "ready_to_ledger",
    "exit_to_ledger",
    "create_to_start",
    "start_to_ready",
    "round_error",
];

/// A serde enum's word (`no_live_node`).
fn word<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use setpoint_runtime::ops::{IdleStatus, RolloutStatus};

    fn keys(r: &Record) -> Vec<&str> {
        r.fields.iter().map(|(k, _)| k.as_ref()).collect()
    }

    fn workload(idle: bool) -> WorkloadStatus {
        WorkloadStatus {
            name: "w".into(),
            controller: "intent".into(),
            period_ms: 15_000,
            desired: 3,
            live: None,
            on_ledger: 2,
            pending_create: 1,
            pending_delete: 0,
            copies: Vec::new(),
            idle: idle.then(|| IdleStatus {
                reason: setpoint_runtime::model::loops::IdleReason::NoLiveNode,
                text: "no live node".into(),
                for_ms: 1500,
            }),
            backoff: Vec::new(),
            generation: 2,
            updated: 2,
            rollout: (!idle).then_some(RolloutStatus {
                generation: 2,
                updated: 1,
                desired: 3,
                old: 2,
                stalled: false,
                for_ms: 10,
            }),
            cut_off: if idle { "stop" } else { "fence" },
            stop_when_cut_off_ms: idle.then_some(30_000),
        }
    }

    #[test]
    fn get_rows_have_the_same_keys_whatever_applies() {
        let rows = get_records(&[workload(true), workload(false)]);
        for r in &rows {
            assert_eq!(keys(r), GET_KEYS);
        }
        let text = csv(&rows, GET_KEYS);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], GET_KEYS.join(","));
        assert_eq!(
            lines[1],
            format!(
                "{},w,intent,15000,3,,2,1,0,0,2,2,no_live_node,1500,0,0,,,,,,,stop,30000",
                setpoint_sim::output::SCHEMA
            )
        );
        assert_eq!(
            lines[2],
            format!(
                "{},w,intent,15000,3,,2,1,0,0,2,2,,,0,0,2,1,3,2,false,10,fence,",
                setpoint_sim::output::SCHEMA
            )
        );
        assert_eq!(csv(&[], GET_KEYS), format!("{}\n", GET_KEYS.join(",")));
    }

    #[test]
    fn experiment_rows_without_real_cells_have_the_real_keys_empty() {
        let m = Metrics {
            created: 16,
            overshoot: 6,
            ..Metrics::default()
        };
        let rows = experiment_records(0.01, &[(20, "ledger", m)], None);
        let r = &rows[0];
        assert_eq!(r.get("lab_overshoot"), Some(&output::Value::U64(6)));
        assert_eq!(r.get("real_overshoot"), Some(&output::Value::Null));
        assert_eq!(r.get("store_delay_count"), Some(&output::Value::U64(0)));
        assert_eq!(r.get("ready_to_ledger_p50_ms"), Some(&output::Value::Null));
    }
}
