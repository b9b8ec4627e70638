//! The runtime at scale (issue 21): simulated nodes (`agent --simulate-nodes`), reports written
//! on change, and the bad input of both. One controller and one process of simulated agents on
//! a SQLite data directory; every wait polls with a deadline, and the rig kills what it started.

use super::harness::{assert_one_line, sleeping, Rig};

#[test]
fn simulated_nodes_need_simulated_copies_and_a_count_in_range_and_resyncs_no_shorter_than_r() {
    let c = Rig::new();
    for (args, needles) in [
        (
            vec!["agent", "--simulate-nodes", "3"],
            vec!["--simulate-nodes", "add --simulate-copies"],
        ),
        (
            vec!["agent", "--simulate-nodes", "0", "--simulate-copies"],
            vec!["--simulate-nodes", "0"],
        ),
        (
            vec!["agent", "--simulate-nodes", "10001", "--simulate-copies"],
            vec!["--simulate-nodes", "10001"],
        ),
        (
            vec![
                "agent",
                "--node",
                "a",
                "--simulate-nodes",
                "2",
                "--simulate-copies",
            ],
            vec!["--node", "--simulate-nodes"],
        ),
        (
            vec![
                "agent",
                "--simulate-nodes",
                "5",
                "--simulate-first",
                "9999",
                "--simulate-copies",
            ],
            vec!["number 10003", "accepted numbers 1 to 10000"],
        ),
        (
            vec!["agent", "--node", "a", "--simulate-first", "3"],
            vec!["--simulate-first", "--simulate-nodes"],
        ),
        (
            vec!["agent", "--node", "a", "--report-resync", "500ms"],
            vec!["--report-resync 500ms is shorter than --report-every 1s"],
        ),
    ] {
        let out = c.run(&args);
        assert_one_line(&out, 2, &needles, &format!("{args:?}"));
    }
}

/// `--simulate-first` numbers a process's simulated nodes from K, so that two processes share
/// out one cluster: sim-0001 in one, sim-0009 and sim-0010 in the other, all three live.
#[test]
fn two_processes_of_simulated_nodes_share_out_one_cluster_by_their_first_number() {
    let mut c = Rig::new();
    let agent = |first: &'static str, n: &'static str| {
        vec![
            "agent",
            "--simulate-nodes",
            n,
            "--simulate-first",
            first,
            "--simulate-copies",
        ]
    };
    c.start("agents-1", &agent("1", "1"));
    c.start("agents-9", &agent("9", "2"));
    c.until("three simulated nodes live", |c| {
        let nodes = c.status()["nodes"].clone();
        let live: Vec<&str> = nodes
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["live"] == true)
            .filter_map(|n| n["node"].as_str())
            .collect();
        live == ["sim-0001", "sim-0009", "sim-0010"]
    });
    // Simulated copies are not processes: a simulated node keeps no lease file for a later
    // agent (a real agent writes one at each renewal), and sweeps no logs.
    let nodes = c.data_dir_of("agents-1").join("nodes");
    let files: Vec<String> = std::fs::read_dir(&nodes)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files.iter().any(|f| f == "sim-0001.json"),
        "the state file is kept: {files:?}"
    );
    assert!(
        !files.iter().any(|f| f.ends_with(".lease")),
        "no lease file: {files:?}"
    );
}

/// Twenty simulated nodes hold 200 copies, spread over all of them, and once steady they write
/// no report (R = 100 ms, no resync within the run): every node stays live on its lease while
/// its last report grows old, and `status` says which is which.
#[test]
fn simulated_nodes_hold_a_workload_and_a_steady_node_writes_no_report_until_it_has_news() {
    let mut c = Rig::new();
    c.start("controller", &["controller", "--lease-ttl", "1s"]);
    c.start(
        "agents",
        &[
            "agent",
            "--simulate-nodes",
            "20",
            "--simulate-copies",
            "--report-every",
            "100ms",
            "--sync-every",
            "50ms",
            "--node-timeout",
            "2s",
        ],
    );
    c.until("20 simulated nodes live", |c| {
        c.status()["nodes"]
            .as_array()
            .is_some_and(|n| n.len() == 20 && n.iter().all(|n| n["live"] == true))
    });
    let names: Vec<String> = c.status()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names.first().map(String::as_str), Some("sim-0001"));
    assert_eq!(names.last().map(String::as_str), Some("sim-0020"));
    c.apply(&sleeping(
        "sim", 200, "intent", 1000, "200ms", "100ms", "1s",
    ));
    c.until("200 copies on the ledger", |c| {
        c.get("sim")["on_ledger"].as_u64() == Some(200)
    });
    let nodes = c.status()["nodes"].as_array().unwrap().clone();
    assert!(
        nodes.iter().all(|n| n["running"].as_u64() == Some(10)),
        "placed evenly: {nodes:?}"
    );
    // Steady: 3 s, 30 observations a node, and no news.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let nodes = c.status()["nodes"].as_array().unwrap().clone();
    for n in &nodes {
        assert_eq!(n["live"], true, "{n}");
        let age = n["since_report_ms"].as_u64().unwrap();
        assert!(
            age >= 2_500,
            "{} wrote a report {age} ms ago: {n}",
            n["node"]
        );
    }
    let text = c.ok(&["status"]);
    assert!(text.contains("LIVE is the node lease"), "{text}");
    // News: ten more copies, one a node (placed on the fewest), each written by its node at
    // once, long before a resync.
    c.apply(&sleeping(
        "sim", 220, "intent", 1000, "200ms", "100ms", "1s",
    ));
    c.until("220 copies on the ledger", |c| {
        c.get("sim")["on_ledger"].as_u64() == Some(220)
    });
    let nodes = c.status()["nodes"].as_array().unwrap().clone();
    assert!(
        nodes
            .iter()
            .all(|n| n["running"].as_u64() == Some(11)
                && n["since_report_ms"].as_u64().unwrap() < 2_500),
        "every node wrote its new copy: {nodes:?}"
    );
    // `kill` ends a simulated copy as a commanded death, replaced at once under a new number.
    let killed = c.kill_copies("sim", 2);
    assert_eq!(killed.len(), 2, "{killed:?}");
    c.until("the killed copies replaced", |c| {
        let g = c.get("sim");
        let rows = c.json(&["get", "copies", "sim", "--format", "json"])["copies"].clone();
        let numbers: Vec<String> = rows
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["state"] == "running")
            .map(|c| c["copy"].as_str().unwrap().to_owned())
            .collect();
        g["on_ledger"].as_u64() == Some(220)
            && numbers.len() == 220
            && killed.iter().all(|k| !numbers.contains(k))
    });
}
