//! `/metrics` on a real cluster (issue 26): the controller's and the agents' series scraped
//! with a plain HTTP GET, the report-lag histogram of jittered report delays fitted by
//! `calibrate` from the live URL and used by `run`; JSON log lines; `--metrics-addr` and
//! `--log-level` refused in one line.

use std::io::{Read, Write};

use serde_json::Value;

use crate::harness::Rig;
use crate::lab_cmd::{ok, run};
use crate::runtime::{apply, converged, up_with};

/// A port free right now (bound to 127.0.0.1:0 and let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET /metrics` on `127.0.0.1:port`: the status line and the body, or `None` while nothing
/// answers.
fn scrape(port: u16) -> Option<(String, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.to_owned(), body.to_owned()))
}

/// The value of the sample `series` (its name and labels, exactly as served).
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The sum over every sample of the metric `name` whose labels contain `with`.
fn total(body: &str, name: &str, with: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(with))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// `up` with two agents whose reports take jittered delays of 60 to 300 ms, one endpoint for
/// the whole cluster. Its series have the names, labels and types of docs/runtime.md; the
/// report lag lies within the delays; `calibrate` fits it from the live URL, and `run` predicts
/// with the fitted file.
#[test]
fn a_clusters_metrics_are_scraped_and_its_report_lag_calibrates_a_prediction() {
    let mut c = Rig::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    up_with(
        &mut c,
        2,
        &[
            "--report-delays",
            "60ms,240ms,150ms,90ms,300ms,120ms",
            "--metrics-addr",
            &addr,
        ],
    );
    c.until("the endpoint answers", |_| scrape(port).is_some());
    apply(&c, 6, "intent");
    converged(&c, 6);
    // Replaced copies become ready again: more readiness to measure.
    for _ in 0..2 {
        c.kill_copies("collector", 3);
        converged(&c, 6);
    }
    let ready = 12.0;
    let lag = "setpoint_agent_report_lag_seconds";
    c.until("every readiness is on the report lag", |_| {
        scrape(port).is_some_and(|(_, b)| total(&b, &format!("{lag}_count"), "") >= ready)
    });
    // A family appears once it has a sample: a lease renewal comes every third of the node
    // lease (3.3 s), each node at its own phase, so wait for one of each node rather than
    // scrape before it (with reports on change the cluster gets here sooner than a renewal
    // of both: the CI rehearsal once scraped node-1's first and node-2's not yet).
    c.until("a lease renewal of each node is counted", |_| {
        scrape(port).is_some_and(|(_, b)| {
            ["node-1", "node-2"].iter().all(|n| {
                total(
                    &b,
                    "setpoint_agent_lease_renewals_total",
                    &format!("node=\"{n}\""),
                ) > 0.0
            })
        })
    });
    let (head, body) = scrape(port).unwrap();
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    assert!(
        head.to_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    for (name, kind) in [
        ("setpoint_controller_pass_duration_seconds", "histogram"),
        ("setpoint_controller_passes", "counter"),
        ("setpoint_controller_copies_created", "counter"),
        ("setpoint_controller_copies_deleted", "counter"),
        ("setpoint_controller_leader", "gauge"),
        ("setpoint_controller_fence_token", "gauge"),
        (
            "setpoint_controller_store_request_duration_seconds",
            "histogram",
        ),
        ("setpoint_agent_copies", "gauge"),
        ("setpoint_agent_starts", "counter"),
        ("setpoint_agent_exits", "counter"),
        (lag, "histogram"),
        ("setpoint_agent_reports", "counter"),
        ("setpoint_agent_lease_renewals", "counter"),
        ("setpoint_agent_lease_renewal_duration_seconds", "histogram"),
        ("setpoint_agent_fencings", "counter"),
        ("setpoint_agent_log_bytes", "gauge"),
        ("setpoint_agent_store_request_duration_seconds", "histogram"),
    ] {
        assert!(
            body.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} {kind}:\n{body}"
        );
    }
    assert_eq!(sample(&body, "setpoint_controller_leader"), Some(1.0));
    assert!(sample(&body, "setpoint_controller_fence_token").unwrap() > 0.0);
    let created = sample(
        &body,
        "setpoint_controller_copies_created_total{workload=\"collector\"}",
    );
    assert!(created.unwrap() >= ready, "{body}");
    assert_eq!(
        total(&body, "setpoint_agent_copies", "state=\"running\""),
        6.0,
        "{body}"
    );
    assert!(
        total(&body, "setpoint_agent_starts_total", "") >= ready,
        "{body}"
    );
    // The harness's kills are SIGKILL.
    assert!(
        total(&body, "setpoint_agent_exits_total", "cause=\"signal\"") >= 6.0,
        "{body}"
    );
    assert!(total(&body, "setpoint_agent_reports_total", "result=\"ok\"") > 0.0);
    assert!(
        total(
            &body,
            "setpoint_agent_lease_renewals_total",
            "node=\"node-2\""
        ) > 0.0
    );
    for series in [
        "setpoint_controller_passes_total{workload=\"collector\",outcome=\"wrote\"}",
        "setpoint_agent_fencings_total{node=\"node-1\"}",
    ] {
        assert!(sample(&body, series).is_some(), "{series}:\n{body}");
    }
    assert!(
        body.contains("setpoint_controller_store_request_duration_seconds_count{kind=\"commit\",result=\"ok\"}"),
        "{body}"
    );
    // Metrics only: not the copies' command nor anything of the environment.
    assert!(!body.contains("sleep") && !body.contains("PATH"), "{body}");

    // Every lag is at least the shortest delay, and within the longest plus a report period
    // and the write.
    let count = total(&body, &format!("{lag}_count"), "");
    assert_eq!(
        total(&body, &format!("{lag}_bucket"), "le=\"0.05\""),
        0.0,
        "{body}"
    );
    assert_eq!(
        total(&body, &format!("{lag}_bucket"), "le=\"0.5\""),
        count,
        "{body}"
    );

    let dir = c.dir().to_path_buf();
    let model = dir.join("lag.toml");
    let url = format!("http://{addr}/metrics");
    let summary = ok(&[
        "calibrate",
        &url,
        "--metric",
        lag,
        "-o",
        model.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(summary.lines().count(), 1, "one fit: {summary}");
    let fit: Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(fit["delay"], "report-delay", "{summary}");
    assert_eq!(fit["from"], url.as_str(), "{summary}");
    assert!(fit["count"].as_f64().unwrap() >= count, "{summary}");
    assert!(fit["min_ms"].as_f64().unwrap() >= 50.0, "{summary}");
    assert!(fit["max_ms"].as_f64().unwrap() <= 500.0, "{summary}");

    let g = format!("empirical:{}", model.display());
    let predicted: Value = serde_json::from_str(
        ok(&[
            "run",
            "--delay-model",
            &g,
            "--seed",
            "3",
            "--format",
            "json",
        ])
        .lines()
        .next()
        .unwrap(),
    )
    .unwrap();
    assert!(
        predicted["setup"].as_str().unwrap().contains("empirical"),
        "{predicted}"
    );
}

/// A controller and an agent as processes of their own, each with its endpoint: the agent's
/// series carry its node, the controller's say it leads. The controller logs JSON lines with
/// its level and fields.
#[test]
fn a_controller_and_an_agent_each_serve_their_own_and_log_json_on_request() {
    let mut c = Rig::new();
    let (pa, pc) = (free_port(), free_port());
    c.start(
        "agent",
        &[
            "agent",
            "--node",
            "a",
            "--report-every",
            "50ms",
            "--metrics-addr",
            &pa.to_string(),
        ],
    );
    c.start(
        "controller",
        &[
            "controller",
            "--lease-ttl",
            "1s",
            "--metrics-addr",
            &format!("127.0.0.1:{pc}"),
            "--log-format",
            "json",
        ],
    );
    apply(&c, 2, "intent");
    converged(&c, 2);
    c.until("both endpoints count", |_| {
        let a = scrape(pa).map(|(_, b)| b).unwrap_or_default();
        let k = scrape(pc).map(|(_, b)| b).unwrap_or_default();
        total(&a, "setpoint_agent_starts_total", "node=\"a\"") == 2.0
            && sample(&k, "setpoint_controller_leader") == Some(1.0)
    });
    let (_, agent) = scrape(pa).unwrap();
    let (_, controller) = scrape(pc).unwrap();
    assert!(
        !agent.contains("\nsetpoint_controller_passes_total"),
        "{agent}"
    );
    assert!(
        !controller.contains("\nsetpoint_agent_starts_total"),
        "{controller}"
    );
    let lines: Vec<Value> = c
        .log("controller")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let led = lines
        .iter()
        .find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("became the leader"))
        })
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(led["level"], "INFO");
    assert!(
        led["holder"].as_str().unwrap().starts_with("controller/"),
        "{led}"
    );
    assert!(led["time"].as_str().unwrap().ends_with('Z'), "{led}");
    assert!(led["fence"].as_u64().unwrap() > 0, "{led}");
    let created = lines
        .iter()
        .find(|l| l["message"].as_str().is_some_and(|m| m.contains("created")))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(created["workload"], "collector", "{created}");
}

/// An address in use, one that does not parse, a log filter that does not parse, and a history
/// compaction too frequent to leave watches any history: one line each, exit 2, before
/// anything runs.
#[test]
fn a_metrics_address_or_log_filter_that_cannot_be_used_is_refused_in_one_line() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = held.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    for (args, says) in [
        (
            vec!["agent", "--node", "a", "--metrics-addr", &busy],
            "cannot listen there",
        ),
        (
            vec!["controller", "--metrics-addr", "localhost:x"],
            "is not an address",
        ),
        (vec!["up", "--metrics-addr", "70000"], "is not an address"),
        (
            vec!["controller", "--log-level", "info,=[x"],
            "is not a log filter",
        ),
        (
            vec!["controller", "--compact-history", "10ms"],
            "--compact-history 10ms is too short: accepted 0 (off) or at least 1s",
        ),
    ] {
        let mut a = args.clone();
        a.extend(["--data-dir", data]);
        let out = run(&a);
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{a:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{a:?}: {err}");
        assert!(err.contains(says), "{a:?}: {err}");
    }
    drop(held);
}

/// On etcd the controller reads through its watch cache: the cache's full read and the reads
/// it served are counted, and the agent's report lag is measured as on SQLite.
#[test]
fn on_etcd_the_watch_cache_and_the_report_lag_are_counted() {
    let Some(etcd) = setpoint_runtime::testing::EtcdCluster::start_or_skip("cli::metrics", 1)
    else {
        return;
    };
    let mut c = Rig::on_store(&etcd.url());
    let port = free_port();
    c.start(
        "up",
        &[
            "up",
            "--nodes",
            "1",
            "--report-every",
            "50ms",
            "--lease-ttl",
            "1s",
            "--report-delay",
            "100ms",
            "--metrics-addr",
            &port.to_string(),
        ],
    );
    c.until("the endpoint answers", |_| scrape(port).is_some());
    apply(&c, 3, "intent");
    converged(&c, 3);
    c.until("the lag of three readinesses and cached reads", |_| {
        scrape(port).is_some_and(|(_, b)| {
            total(
                &b,
                "setpoint_agent_report_lag_seconds_count",
                "node=\"node-1\"",
            ) >= 3.0
                && sample(&b, "setpoint_controller_watch_cache_served_reads_total")
                    .is_some_and(|n| n > 0.0)
        })
    });
    let (_, body) = scrape(port).unwrap();
    assert!(sample(&body, "setpoint_controller_watch_cache_full_reads_total").unwrap() >= 1.0);
    // The cache's revision is the store's, within the revisions written since it was served.
    let at = sample(&body, "setpoint_controller_watch_cache_revision").unwrap();
    let store_rev = setpoint_runtime::Store::revision(&etcd.store()).unwrap() as f64;
    assert!(
        at > 1.0 && at <= store_rev,
        "cache at {at}, store at {store_rev}"
    );
    assert!(sample(&body, "setpoint_controller_watch_cache_behind_revisions").is_some());
    // A fixed delay of 100 ms: no lag below it.
    let lag = "setpoint_agent_report_lag_seconds_bucket";
    assert_eq!(total(&body, lag, "le=\"0.075\""), 0.0, "{body}");
}
