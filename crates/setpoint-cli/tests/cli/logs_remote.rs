//! `logs COPY --store …` from a host without the copy's files: the agent of the copy's node
//! serves its log through the store (setpoint_runtime::log_requests). Every `logs` here runs
//! on a data directory of its own, which holds no log at all; on SQLite through a shared
//! store file, and on etcd.

use std::process::Stdio;
use std::time::Duration;

use rustix::process::Signal;
use setpoint_runtime::testing::{wait_until, EtcdCluster, Wait};

use super::harness::{assert_one_line, Rig};

/// A first line of 70,000 `x` (more than one 64 KiB chunk), then numbered lines every 20 ms.
const TALKER: &str = "[[workload]]\nname = \"talker\"\ncommand = \"head -c 70000 /dev/zero | tr '\\\\0' x; echo; i=0; while :; do echo line $i; i=$((i+1)); sleep 0.02; done\"\ncopies = 1\nperiod = \"100ms\"\nstartup = \"50ms\"\ngrace = \"300ms\"\n";

fn numbers(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("line ")?.parse().ok())
        .collect()
}

fn logs_from_another_host(mut r: Rig) {
    r.start("n1", &["agent", "--node", "n1", "--report-every", "50ms"]);
    r.start("controller", &["controller", "--lease-ttl", "1s"]);
    r.apply(TALKER);
    let file = r
        .data_dir_of("n1")
        .join("nodes")
        .join("logs")
        .join("talker-0.log");
    r.until("the copy has written 20 lines", |_| {
        numbers(&std::fs::read_to_string(&file).unwrap_or_default()).len() >= 20
    });
    let here = r.data_dir().join("nodes").join("logs").join("talker-0.log");

    // The whole log, in more than one chunk, and a tail.
    let all = r.ok(&["logs", "talker-0"]);
    assert!(
        !here.exists(),
        "read through the store, not from files here"
    );
    let first = all.lines().next().unwrap();
    assert_eq!(first.len(), 70_000, "the first line whole across chunks");
    assert!(first.bytes().all(|b| b == b'x'));
    let seen = numbers(&all);
    assert!(seen.len() >= 20, "{} lines", seen.len());
    assert_eq!(
        seen,
        (0..seen.len() as u64).collect::<Vec<_>>(),
        "in order, no gap"
    );
    let tail = r.ok(&["logs", "talker-0", "--tail", "2"]);
    let t = numbers(&tail);
    assert_eq!(tail.lines().count(), 2, "{tail}");
    assert_eq!(t[1], t[0] + 1, "{tail}");

    // --follow sees the lines written after it started and ends when the copy ends.
    let mut follow = r
        .command(&["logs", "talker-0", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read as it comes: the first line alone would fill the pipe.
    let mut stdout = follow.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut text).map(|_| text)
    });
    std::thread::sleep(Duration::from_millis(1_000));
    r.ok(&["delete", "talker"]);
    let ended = wait_until(
        Wait::new(
            "--follow to end with the copy",
            Duration::from_secs(20),
            Duration::from_millis(50),
        ),
        || follow.try_wait().unwrap().is_some(),
        || r.logs(),
    );
    let _ = ended;
    let out = follow.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let followed = numbers(&reader.join().unwrap().unwrap());
    assert_eq!(
        followed,
        (0..followed.len() as u64).collect::<Vec<_>>(),
        "in order, no gap"
    );
    assert!(
        followed.len() > t[1] as usize + 10,
        "lines written after it started: {} vs {}",
        followed.len(),
        t[1]
    );

    // Errors: one line, exit 2.
    assert_one_line(
        &r.run(&["logs", "nobody-0"]),
        2,
        &["no copy 'nobody-0' in the store", "get copies"],
        "unknown copy",
    );
    r.signal("n1", Signal::TERM);
    assert_one_line(
        &r.run(&["logs", "talker-0"]),
        2,
        &["node n1 has no live agent to serve the log of talker-0"],
        "a node without its agent",
    );
}

#[test]
fn logs_are_read_through_a_shared_sqlite_store_by_a_host_without_the_files() {
    let shared = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", shared.path().display());
    logs_from_another_host(Rig::per_process(&url));
}

#[test]
fn logs_are_read_through_etcd_by_a_host_without_the_files() {
    let Some(etcd) = EtcdCluster::start_or_skip("cli::logs_remote::on_etcd", 1) else {
        return;
    };
    logs_from_another_host(Rig::per_process(&etcd.url()));
}
