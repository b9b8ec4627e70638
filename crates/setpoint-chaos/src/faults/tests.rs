//! The fault model's unit tests: parsing, errors, schedules, replay files, swarm and drift.

use super::*;

const MODEL: &str = r#"
description = "t"
seconds = 60
settle = 20
[cluster]
controllers = 2
agents = 3
skew_max_ms = 100
[network]
delay_ms = 2
jitter_ms = 3
loss = 0.01
[[workload]]
name = "web"
copies = 6
[[fault]]
kind = "partition"
count = 3
target = "agent"
min_ms = 500
max_ms = 5000
[[fault]]
kind = "crash"
count = 2
"#;

fn err(text: &str) -> String {
    parse("m.toml", text).unwrap_err().to_string()
}

#[test]
fn a_model_parses_with_its_defaults() {
    let m = parse("m.toml", MODEL).unwrap();
    assert_eq!((m.duration_ms, m.settle_ms, m.agents), (60_000, 20_000, 3));
    assert_eq!(m.net.loss_ppm, 10_000);
    assert_eq!(m.workloads[0].controller, ControllerKind::Named);
    assert_eq!(m.workloads[0].period_ms, 1000);
    assert_eq!(m.faults[1].target, Target::Any);
}

#[test]
fn errors_name_file_line_and_key() {
    let bad = MODEL.replace("count = 3", "count = -1");
    assert_eq!(
        err(&bad),
        "m.toml:18: fault[1].count: -1 is out of range: accepted 0 to 10000"
    );
    let bad = MODEL.replace("kind = \"crash\"", "kind = \"meteor\"");
    assert!(
        err(&bad).starts_with(
            "m.toml:23: fault[2].kind: unknown fault kind 'meteor': accepted partition,"
        ),
        "{}",
        err(&bad)
    );
    let bad = MODEL.replace("agents = 3", "agnets = 3");
    assert!(
        err(&bad).starts_with("m.toml:7: cluster.agnets: unknown field `agnets`"),
        "{}",
        err(&bad)
    );
    let bad = MODEL.replace("agents = 3", "agents = 3\nreport_delay_ms = -5");
    assert_eq!(
        err(&bad),
        "m.toml:8: cluster.report_delay_ms: -5 is out of range: accepted 0 to 3600000"
    );
    let ok = MODEL.replace("agents = 3", "agents = 3\nreport_delay_ms = 2500");
    assert_eq!(parse("m.toml", &ok).unwrap().timing.report_delay_ms, 2500);
    let bad = MODEL.replace("loss = 0.01", "loss = 2");
    assert_eq!(
        err(&bad),
        "m.toml:12: network.loss: 2 is not accepted: a fraction from 0 to 1"
    );
    let bad = MODEL.replace("count = 2", "count = 2\nmin_ms = 4");
    assert_eq!(
        err(&bad),
        "m.toml:25: fault[2].min_ms: a 'crash' fault is an instant: drop 'min_ms'"
    );
    let bad = MODEL.replace("settle = 20", "settle = 60");
    assert_eq!(
        err(&bad),
        "m.toml:4: settle: settle 60 must be shorter than the run's 60 seconds"
    );
}

#[test]
fn a_schedule_is_a_function_of_the_seed_and_keeps_out_of_the_settle_window() {
    let m = parse("m.toml", MODEL).unwrap();
    let a = m.schedule(5);
    assert_eq!(a, m.schedule(5));
    assert_ne!(a, m.schedule(6));
    assert_eq!(a.len(), 5);
    for f in &a {
        assert!(f.at_ms + f.duration_ms <= 40_000, "{f:?}");
        if f.kind == FaultKind::Partition {
            assert!((2..5).contains(&f.host), "agents are hosts 2 to 4: {f:?}");
        }
    }
}

#[test]
fn fault_models_and_replay_files_are_told_from_lab_scenarios_by_their_keys() {
    assert!(looks_like_model(MODEL));
    assert!(looks_like_model(
        "seed = 1\n[[event]]\nat_ms = 5\nkind = \"crash\"\n"
    ));
    assert!(looks_like_model("seconds = 60\nsettle = 20\n"));
    let lab = "seed = 1\nperiod = 15\n[[workload]]\nname = \"a\"\ndesired = 2\n\
               [[event]]\nat = 30\nkind = \"deaths\"\ncount = 1\n";
    assert!(!looks_like_model(lab));
    assert!(!looks_like_model("not = [toml"));
}

#[test]
fn a_restart_strikes_controllers_by_default_a_shutdown_agents_and_either_any_host_when_asked() {
    let with = |kind: &str, target: &str| {
        let text = format!(
            "seconds = 60\nsettle = 20\n[cluster]\ncontrollers = 2\nagents = 3\n\
             [[workload]]\nname = \"web\"\ncopies = 2\n[[fault]]\nkind = \"{kind}\"\ncount = 40\n{target}"
        );
        let m = parse("m.toml", &text).unwrap();
        let hosts: std::collections::BTreeSet<usize> =
            m.schedule(1).iter().map(|f| f.host).collect();
        hosts
    };
    for kind in ["restart", "shutdown"] {
        assert_eq!(with(kind, "target = \"controller\""), [0, 1].into());
        assert_eq!(with(kind, "target = \"agent\""), [2, 3, 4].into());
        assert_eq!(with(kind, "target = \"any\""), (0..5).collect());
    }
    assert_eq!(with("restart", ""), [0, 1].into());
    assert_eq!(with("shutdown", ""), [2, 3, 4].into());
    // A shutdown lasts (the host is down until it ends) and cuts no one off.
    let s = FaultKind::Shutdown;
    assert!(s.lasts() && s.on_host() && !s.cuts_off() && !s.restarts_host());
}

#[test]
fn a_lost_state_file_strikes_agents_only() {
    let text = |target: &str| {
        format!(
            "seconds = 60\nsettle = 20\n[cluster]\ncontrollers = 2\nagents = 3\n\
             [[workload]]\nname = \"web\"\ncopies = 2\n[[fault]]\nkind = \"lose-state\"\ncount = 40\n{target}"
        )
    };
    for target in ["", "target = \"agent\""] {
        let m = parse("m.toml", &text(target)).unwrap();
        let hosts: std::collections::BTreeSet<usize> =
            m.schedule(1).iter().map(|f| f.host).collect();
        assert_eq!(hosts, [2, 3, 4].into(), "{target:?}");
    }
    for target in ["controller", "any"] {
        let err = parse("m.toml", &text(&format!("target = \"{target}\""))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "m.toml:12: fault[1].target: a 'lose-state' fault strikes an agent: target \
             agent, or drop 'target'"
        );
    }
}

#[test]
fn a_replay_file_parses_back_to_the_model_with_its_schedule() {
    let m = parse("m.toml", MODEL).unwrap();
    let sched = m.schedule(9);
    let text = m.replay_file(9, &sched, "seed 9 failed");
    let back = parse("r.toml", &text).unwrap();
    assert_eq!(back.seed, Some(9));
    assert_eq!(back.schedule.as_deref(), Some(&sched[..]));
    assert_eq!(
        back.schedule(123),
        sched,
        "an explicit schedule is not drawn"
    );
    assert_eq!(
        (back.net, back.workloads.clone()),
        (m.net, m.workloads.clone())
    );
    let empty = parse("r.toml", &m.replay_file(9, &[], "")).unwrap();
    assert_eq!(empty.schedule, Some(vec![]));
}

const DURING: &str = r#"
seconds = 600
settle = 100
[cluster]
controllers = 2
agents = 3
[[workload]]
name = "web"
copies = 2
[[fault]]
kind = "partition"
count = 3
target = "any"
min_ms = 2000
max_ms = 40000
[[fault]]
kind = "quorum-loss"
count = 1
[[fault]]
kind = "restart"
count = 6
target = "agent"
during = "partition"
[[fault]]
kind = "crash"
count = 2
during = "quorum-loss"
"#;

#[test]
fn a_during_rule_strikes_inside_a_fault_of_its_kind_on_that_faults_host() {
    let m = parse("m.toml", DURING).unwrap();
    let mut restarts = 0;
    for seed in 1..40 {
        let s = m.schedule(seed);
        let within = |f: &Fault, kind: FaultKind, same_host: bool| {
            s.iter().any(|w| {
                w.kind == kind
                    && (!same_host || w.host == f.host)
                    && (w.at_ms..=w.at_ms + w.duration_ms).contains(&f.at_ms)
            })
        };
        for f in &s {
            match f.kind {
                FaultKind::Restart => {
                    restarts += 1;
                    assert!((2..5).contains(&f.host), "agents only: {f:?}");
                    assert!(within(f, FaultKind::Partition, true), "{seed}: {f:?}");
                }
                FaultKind::Crash => assert!(within(f, FaultKind::QuorumLoss, false)),
                FaultKind::QuorumLoss => assert_eq!(f.host, 0, "it strikes no host"),
                _ => {}
            }
        }
        // No partition of an agent: no window for the restarts, and none is drawn.
        let agents_cut = s
            .iter()
            .any(|f| f.kind == FaultKind::Partition && f.host >= 2);
        let n = s.iter().filter(|f| f.kind == FaultKind::Restart).count();
        assert_eq!(n, if agents_cut { 6 } else { 0 }, "seed {seed}");
    }
    assert!(restarts > 100, "{restarts}");
    let bad = DURING.replace("during = \"partition\"", "during = \"crash\"");
    assert!(
        err(&bad).starts_with("m.toml:23: fault[3].during: 'crash' is an instant"),
        "{}",
        err(&bad)
    );
    let bad = DURING.replace("during = \"partition\"", "during = \"pause\"");
    assert_eq!(
        err(&bad),
        "m.toml:23: fault[3].during: no earlier [[fault]] rule draws a 'pause': declare it \
         above this one"
    );
    let bad = DURING.replace(
        "kind = \"quorum-loss\"\ncount = 1",
        "kind = \"quorum-loss\"\ncount = 1\ntarget = \"agent\"",
    );
    assert!(
        err(&bad).contains("a 'quorum-loss' fault strikes no host"),
        "{}",
        err(&bad)
    );
}

#[test]
fn swarm_switches_each_rule_on_or_off_per_seed_from_the_seed_alone() {
    let plain = parse("m.toml", DURING).unwrap();
    let swarm = parse("m.toml", &format!("swarm = true\n{DURING}")).unwrap();
    assert!(!plain.swarm && swarm.swarm);
    let mut seen = [[false; 2]; 4];
    for seed in 1..60 {
        assert_eq!(plain.rules_on(seed), [true; 4]);
        let on = swarm.rules_on(seed);
        assert_eq!(on, swarm.rules_on(seed), "a function of the seed");
        let s = swarm.schedule(seed);
        assert_eq!(s, swarm.schedule(seed));
        for (i, rule) in swarm.faults.iter().enumerate() {
            seen[i][usize::from(on[i])] = true;
            if !on[i] {
                assert!(
                    s.iter().all(|f| f.kind != rule.kind),
                    "{seed}: {on:?} {s:?}"
                );
            }
        }
        if on.iter().all(|&o| o) {
            assert_eq!(s, plain.schedule(seed), "all on: the plain schedule");
        }
    }
    assert_eq!(
        seen, [[true; 2]; 4],
        "each rule is on for some seeds, off for others"
    );
}

#[test]
fn clocks_drift_within_the_models_bound_and_not_at_all_by_default() {
    let m = parse("m.toml", MODEL).unwrap();
    assert_eq!(m.drifts(3), [0; 5]);
    let text = MODEL.replace(
        "skew_max_ms = 100",
        "skew_max_ms = 100\ndrift_max_ppm = 50000",
    );
    let d = parse("m.toml", &text).unwrap();
    assert_eq!(
        d.skews(3),
        m.skews(3),
        "drift leaves the skews as they were"
    );
    let all: Vec<i64> = (1..30).flat_map(|s| d.drifts(s)).collect();
    assert!(all.iter().all(|x| x.abs() <= 50_000));
    assert!(all.iter().any(|&x| x < -10_000) && all.iter().any(|&x| x > 10_000));
    assert_eq!(d.drifts(3), d.drifts(3));
    let back = parse("r.toml", &d.replay_file(3, &[], "")).unwrap();
    assert_eq!(back.drift_max_ppm, 50_000, "a replay file keeps the drift");
    let bad = MODEL.replace("skew_max_ms = 100", "drift_max_ppm = 300000");
    assert_eq!(
        err(&bad),
        "m.toml:8: cluster.drift_max_ppm: 300000 is out of range: accepted 0 to 200000"
    );
}

const AFTER: &str = r#"
seconds = 600
settle = 120
[cluster]
controllers = 2
agents = 3
[[workload]]
name = "web"
copies = 2
[[fault]]
kind = "restart"
count = 4
target = "agent"
[[fault]]
kind = "partition"
count = 4
target = "any"
min_ms = 8000
max_ms = 14000
after = "restart"
within_ms = 50
"#;

#[test]
fn an_after_rule_strikes_within_its_window_after_a_fault_of_its_kind_on_that_faults_host() {
    let m = parse("m.toml", AFTER).unwrap();
    let last = 480_000;
    for seed in 1..40 {
        let s = m.schedule(seed);
        let restarts: Vec<&Fault> = s.iter().filter(|f| f.kind == FaultKind::Restart).collect();
        assert_eq!(restarts.len(), 4);
        let cuts: Vec<&Fault> = s
            .iter()
            .filter(|f| f.kind == FaultKind::Partition)
            .collect();
        assert_eq!(cuts.len(), 4, "seed {seed}");
        for c in cuts {
            assert!(
                restarts
                    .iter()
                    .any(|r| r.host == c.host && (r.at_ms..=r.at_ms + 50).contains(&c.at_ms)),
                "{seed}: {c:?} is not within 50 ms after a restart of its host: {s:?}"
            );
            assert!(c.at_ms + c.duration_ms <= last, "{seed}: {c:?}");
            assert!((1..=14_000).contains(&c.duration_ms), "{seed}: {c:?}");
        }
    }
    // Without the restarts' rule switched on (a count of 0) nothing is drawn after them.
    let none = parse(
        "m.toml",
        &AFTER.replace(
            "count = 4\ntarget = \"agent\"",
            "count = 0\ntarget = \"agent\"",
        ),
    )
    .unwrap();
    assert!(none.schedule(1).is_empty());
    for (from, to, said) in [
        (
            "after = \"restart\"",
            "after = \"pause\"",
            "m.toml:20: fault[2].after: 'pause' lasts: 'after' names an instant",
        ),
        (
            "after = \"restart\"",
            "after = \"crash\"",
            "m.toml:20: fault[2].after: no earlier [[fault]] rule draws a 'crash'",
        ),
        (
            "after = \"restart\"\n",
            "",
            "m.toml:20: fault[2].within_ms: 'within_ms' is the window of 'after'",
        ),
        (
            "within_ms = 50",
            "within_ms = 0",
            "m.toml:21: fault[2].within_ms: 0 is out of range",
        ),
    ] {
        let bad = AFTER.replace(from, to);
        assert!(err(&bad).starts_with(said), "{to}: {}", err(&bad));
    }
    let both = AFTER
        .replace(
            "[[fault]]\nkind = \"partition\"",
            "[[fault]]\nkind = \"pause\"\ncount = 1\n[[fault]]\nkind = \"partition\"",
        )
        .replace("within_ms = 50", "within_ms = 50\nduring = \"pause\"");
    assert!(
        err(&both).contains("fault[3].after: a rule draws 'during' one fault or 'after' one"),
        "{}",
        err(&both)
    );
}
