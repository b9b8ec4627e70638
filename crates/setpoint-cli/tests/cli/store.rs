//! `--store URL`: every runtime command takes it; a malformed URL, an unreachable etcd and a
//! store of another format each get one line; a controller and agents run on etcd as separate
//! processes. The etcd tests start their own etcd (ports 23100-23199) and skip, saying why,
//! when etcd is not installed.

use std::time::Duration;

use rustix::process::Signal;
use setpoint_runtime::process::signal_group;
use setpoint_runtime::store::url::VERSION_KEY;
use setpoint_runtime::store::Txn;
use setpoint_runtime::testing::EtcdCluster;
use setpoint_runtime::{SqliteStore, Store};

use super::harness::{assert_one_line, Rig};

/// Runs `args`, expects exit `code` and one line on stderr containing every needle.
fn one_line(r: &Rig, args: &[&str], code: i32, needles: &[&str]) {
    assert_one_line(&r.run(args), code, needles, &format!("{args:?}"));
}

/// Every runtime command, with what it needs besides `--store`.
fn runtime_commands(file: &str) -> Vec<Vec<&str>> {
    vec![
        vec!["up"],
        vec!["controller"],
        vec!["agent", "--node", "n1"],
        vec!["apply", "-f", file],
        vec!["get"],
        vec!["status"],
        vec!["delete", "w"],
        vec!["kill", "w", "1"],
        vec!["measure"],
        vec!["experiment", "lesson", "--real"],
    ]
}

#[test]
fn a_malformed_store_url_is_refused_by_every_runtime_command_with_exit_2() {
    let r = Rig::new();
    for cmd in runtime_commands("w.toml") {
        for url in ["etcd://", "etcd://h1", "sqlite:", "zk://h:1"] {
            let mut args = cmd.clone();
            args.extend(["--store", url]);
            one_line(
                &r,
                &args,
                2,
                &[url, "is not a store URL", "accepted sqlite:DIR, etcd://"],
            );
        }
    }
    assert!(!r.data_dir().exists(), "nothing was created");
}

#[test]
fn an_unreachable_etcd_fails_one_shot_commands_with_exit_1_naming_the_endpoint() {
    let r = Rig::new();
    let file = r.write(
        "w.toml",
        "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"9\"]\ncopies = 1\n",
    );
    // Nothing listens on port 1 of loopback: the connection is refused at once.
    for cmd in [
        vec!["apply", "-f", &file],
        vec!["get"],
        vec!["status"],
        vec!["delete", "w"],
        vec!["measure"],
    ] {
        let mut args = cmd.clone();
        args.extend(["--store", "etcd://127.0.0.1:1"]);
        one_line(&r, &args, 1, &["etcd at 127.0.0.1:1", "refused"]);
    }
}

#[test]
fn a_store_of_another_format_is_refused_with_one_line_and_left_as_it_is() {
    let r = Rig::new();
    let file = r.write(
        "w.toml",
        "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"9\"]\ncopies = 1\n",
    );
    r.ok(&["apply", "-f", &file]);
    let store = SqliteStore::open(&r.data_dir()).unwrap();
    let other = r#"{"format":99,"setpoint":"9.9.9"}"#;
    let rev = store.commit(&Txn::new().put(VERSION_KEY, other)).unwrap();
    for args in [vec!["get"], vec!["apply", "-f", &file]] {
        one_line(
            &r,
            &args,
            2,
            &["format 99", "9.9.9", "reads format 1", "sqlite:"],
        );
    }
    assert_eq!(store.revision().unwrap(), rev, "nothing was written");
}

#[test]
fn a_controller_and_two_agents_on_etcd_keep_three_copies_as_separate_processes() {
    let Some(etcd) = EtcdCluster::start_or_skip("cli::store::on_etcd", 1) else {
        return;
    };
    let mut d = Rig::on_store(&etcd.url());
    let file = d.write(
        "w.toml",
        "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"120\"]\ncopies = 3\n\
         controller = \"intent\"\nperiod = \"200ms\"\nstartup = \"100ms\"\ngrace = \"500ms\"\n",
    );
    d.start("n1", &["agent", "--node", "n1", "--report-every", "50ms"]);
    d.start("n2", &["agent", "--node", "n2", "--report-every", "50ms"]);
    d.start("controller", &["controller", "--lease-ttl", "1s"]);
    d.ok(&["apply", "-f", &file]);
    d.until("3 copies live and on the ledger", |d| {
        let g = d.get("w");
        d.marked().len() == 3 && g["live"] == 3 && g["on_ledger"] == 3
    });
    let status = d.status();
    assert!(status["leader"]["holder"].is_string(), "{status}");
    assert_eq!(status["nodes"].as_array().unwrap().len(), 2, "{status}");

    // A copy that dies is replaced, and nothing is started twice.
    let victim = d.marked()[0].clone();
    signal_group(victim.pid, Signal::KILL).unwrap();
    d.until("the dead copy is replaced", |d| {
        let c = d.marked();
        c.len() == 3 && c.iter().all(|m| m.pid != victim.pid) && d.get("w")["on_ledger"] == 3
    });
    let mut names: Vec<String> = d.marked().into_iter().map(|m| m.copy).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 3, "one process per identity: {names:?}");
}

#[test]
fn a_daemon_waits_for_etcd_logging_once_and_leads_when_it_answers() {
    let Some(mut etcd) = EtcdCluster::start_or_skip("cli::store::daemon_waits", 1) else {
        return;
    };
    etcd.kill(0);
    let mut d = Rig::on_store(&etcd.url());
    d.start("controller", &["controller", "--lease-ttl", "1s"]);
    // Each attempt lasts the store's deadline (3 s); then the backoff.
    std::thread::sleep(Duration::from_millis(4_500));
    let waiting = d.log("controller");
    assert_eq!(
        waiting.matches("retrying with backoff").count(),
        1,
        "one line while it waits: {waiting}"
    );
    assert!(waiting.contains(&etcd.endpoints()[0]), "{waiting}");
    assert!(d.runs("controller"), "it still runs");
    etcd.restart(0).unwrap();
    etcd.wait_for_leader(Duration::from_secs(20)).unwrap();
    d.until("the controller leads", |d| {
        d.log("controller").contains("became the leader")
    });
    assert!(d.log("controller").contains("answers"));
}
