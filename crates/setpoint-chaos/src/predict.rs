//! The lab's overshoot prediction for a fault-free run, and the overshoot a run showed: the
//! check `overshoot` ([`crate::check::Check::Overshoot`]).
//!
//! # Where the lab has a prediction
//! For a workload of `ledger` or `intent` (the controllers the lab's tables predict) whose loop
//! period is a whole number of seconds, in a run with no fault. The runtime's pipeline adds to
//! the lab's B and G: a copy becomes ready after its startup time plus the agent's next
//! assignment read and the process start; a change reaches the ledger after the report delay
//! plus the wait for the agent's next report, and each store hop's network delay. So the
//! prediction is the **largest** overshoot the lab's general engine computes over every whole
//! B and G those pipelines span (`B ∈ ⌊startup⌋ ..= ⌈startup + sync + start + 2·net⌉`,
//! `G ∈ ⌊report_delay⌋ ..= ⌈report_delay + report + poll + 3·net⌉`, seconds; `net` is the
//! network's delay plus its jitter), for the run's desired copies and length, no deaths.
//!
//! # What a run showed
//! Measured as the lab measures: second `k` is `k·1000 ..< (k+1)·1000` ms of virtual time; a
//! copy is live in second `k` when it became ready (its process up plus the startup time) in
//! second `k` or earlier and ended in a later one; the overshoot is the largest
//! `live − desired` over the run's seconds.

use setpoint_core::ControllerKind;
use setpoint_sim::delay::DelayModel;
use setpoint_sim::scenario::{ControllerSpec, Workload};
use setpoint_sim::world::run_general;
use setpoint_sim::{Scenario, ScenarioSpec};

use crate::faults::{Model, WorkloadModel};
use crate::world::Outcome;

/// One lab second, in milliseconds of the world.
const SECOND_MS: u64 = 1000;

/// The most B and G values the prediction spans each; a wider pipeline has no prediction.
const MAX_SPAN: u64 = 64;

/// The lab's overshoot prediction for workload `w` of `model` run by `kind`, if the lab has
/// one (see the module doc).
pub fn predicted(model: &Model, w: &WorkloadModel, kind: ControllerKind) -> Option<u64> {
    if !ControllerKind::LESSON.contains(&kind) || w.period_ms % SECOND_MS != 0 {
        return None;
    }
    let t = &model.timing;
    let net = model.net.delay_ms + model.net.jitter_ms;
    let b_lo = w.startup_ms / SECOND_MS;
    let b_hi = (w.startup_ms + t.sync_ms + model.start_ms + 2 * net).div_ceil(SECOND_MS);
    let g_lo = t.report_delay_ms / SECOND_MS;
    let g_hi = (t.report_delay_ms + t.report_ms + t.poll_ms + 3 * net).div_ceil(SECOND_MS);
    if b_hi - b_lo >= MAX_SPAN || g_hi - g_lo >= MAX_SPAN {
        return None;
    }
    let mut most = 0;
    for b in b_lo..=b_hi {
        for g in g_lo..=g_hi {
            let spec = ScenarioSpec {
                period: w.period_ms / SECOND_MS,
                duration: model.duration_ms / SECOND_MS,
                delay: DelayModel::fixed_seconds(g),
                controller: ControllerSpec::new(kind),
                workloads: vec![Workload {
                    name: "w".into(),
                    desired: w.copies,
                    startup: b,
                }],
                events: Vec::new(),
                unique_names: true,
                seed: 1,
                pipeline: Default::default(),
                startup_model: None,
            };
            let run = Scenario::new(spec).and_then(|s| run_general(&s, 1)).ok()?;
            most = most.max(run.workloads[0].metrics.overshoot);
        }
    }
    Some(most)
}

/// The overshoot run `out` showed for workload `w` (see the module doc), and the second of its
/// first peak.
pub fn measured(out: &Outcome, w: &WorkloadModel) -> (u64, u64) {
    let seconds = (out.end_ms / SECOND_MS) as usize;
    let mut change = vec![0i64; seconds + 2];
    for p in out.procs.iter().filter(|p| p.workload == w.name) {
        let Some(up) = p.up_ms else { continue };
        let from = ((up + w.startup_ms) / SECOND_MS) as usize;
        let to = p.end_ms.map_or(seconds + 1, |e| (e / SECOND_MS) as usize);
        if from < to && from <= seconds {
            change[from] += 1;
            change[to.min(seconds + 1)] -= 1;
        }
    }
    let (mut live, mut most, mut at) = (0i64, 0u64, 0u64);
    for (k, c) in change.iter().take(seconds + 1).enumerate() {
        live += c;
        let over = (live - w.copies as i64).max(0) as u64;
        if over > most {
            (most, at) = (over, k as u64);
        }
    }
    (most, at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapt::{make, Bugs};
    use crate::check::{overshoot, Check};
    use crate::faults::parse;
    use crate::machine::{Machine, Role};
    use crate::runner::run_checked;

    fn model(controller: &str, period_ms: u64, startup_ms: u64, report_delay_ms: u64) -> Model {
        let text = format!(
            "seconds = 90\n[cluster]\ncontrollers = 2\nagents = 3\nreport_delay_ms = {report_delay_ms}\n[network]\ndelay_ms = 2\njitter_ms = 3\n[[workload]]\nname = \"web\"\ncontroller = \"{controller}\"\ncopies = 4\nperiod_ms = {period_ms}\nstartup_ms = {startup_ms}\n"
        );
        parse("m.toml", &text).unwrap()
    }

    fn run(m: &Model) -> (Vec<Check>, Outcome) {
        let f = |i: usize, r: &Role, now: u64| -> Box<dyn Machine> {
            make(m, Bugs::default(), 3, i, r, now)
        };
        let (rep, out) = run_checked(m, 3, m.schedule(3), &f, false);
        (
            rep.violations.iter().map(|v| v.check).collect(),
            out.unwrap(),
        )
    }

    #[test]
    fn fault_free_runs_of_ledger_and_intent_stay_within_the_prediction() {
        let mut overshot = 0;
        for controller in ["ledger", "intent"] {
            for (u, b, g) in [(5000, 2000, 0), (5000, 2000, 4000), (3000, 1000, 6000)] {
                let m = model(controller, u, b, g);
                let (checks, out) = run(&m);
                assert_eq!(checks, [], "{controller} U={u} B={b} G={g}");
                let (got, _) = measured(&out, &m.workloads[0]);
                overshot += u64::from(got > 0);
                assert!(predicted(&m, &m.workloads[0], m.workloads[0].controller).is_some());
            }
        }
        // The late-ledger runs of `ledger` do overshoot: the check has something to bound.
        assert!(overshot >= 2, "{overshot}");
    }

    #[test]
    fn a_ledger_run_held_to_the_prediction_for_intent_fails_the_check() {
        // The injected bug: the workload runs a controller that ignores its pending work
        // (`ledger`) where the lab's prediction is for one that counts it (`intent`).
        let m = model("ledger", 3000, 1000, 6000);
        let (_, out) = run(&m);
        let caught = overshoot(&m, &out, |_| ControllerKind::Intent);
        assert_eq!(caught.len(), 1, "{caught:?}");
        assert_eq!(caught[0].check, Check::Overshoot);
        assert!(overshoot(&m, &out, |w| w.controller).is_empty());
    }

    #[test]
    fn there_is_no_prediction_for_other_controllers_or_fractional_periods() {
        let m = model("named", 5000, 2000, 0);
        assert_eq!(predicted(&m, &m.workloads[0], ControllerKind::Named), None);
        let m = model("ledger", 1500, 2000, 0);
        assert_eq!(predicted(&m, &m.workloads[0], ControllerKind::Ledger), None);
    }
}
