//! `--store URL`: every runtime command takes it; a malformed URL, an unreachable etcd and a
//! store of another format each get one line; a controller and agents run on etcd as separate
//! processes. The etcd tests start their own etcd (ports 23100-23199) and skip, saying why,
//! when etcd is not installed.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rustix::process::Signal;
use serde_json::Value;
use setpoint_runtime::process::{find_marked, signal_group};
use setpoint_runtime::store::url::VERSION_KEY;
use setpoint_runtime::store::Txn;
use setpoint_runtime::testing::EtcdCluster;
use setpoint_runtime::{SqliteStore, Store};

fn setpoint(dir: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_setpoint"));
    c.args(args).arg("--data-dir").arg(dir.join("data"));
    c
}

fn run(dir: &std::path::Path, args: &[&str]) -> Output {
    setpoint(dir, args).output().unwrap()
}

/// Runs `args`, expects exit `code` and one line on stderr containing every needle.
fn one_line(dir: &std::path::Path, args: &[&str], code: i32, needles: &[&str]) {
    let out = run(dir, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: no '{n}' in {err}");
    }
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
    let dir = tempfile::tempdir().unwrap();
    for cmd in runtime_commands("w.toml") {
        for url in ["etcd://", "etcd://h1", "sqlite:", "zk://h:1"] {
            let mut args = cmd.clone();
            args.extend(["--store", url]);
            one_line(
                dir.path(),
                &args,
                2,
                &[url, "is not a store URL", "accepted sqlite:DIR, etcd://"],
            );
        }
    }
    assert!(!dir.path().join("data").exists(), "nothing was created");
}

#[test]
fn an_unreachable_etcd_fails_one_shot_commands_with_exit_1_naming_the_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("w.toml");
    std::fs::write(
        &file,
        "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"9\"]\ncopies = 1\n",
    )
    .unwrap();
    // Nothing listens on port 1 of loopback: the connection is refused at once.
    for cmd in [
        vec!["apply", "-f", file.to_str().unwrap()],
        vec!["get"],
        vec!["status"],
        vec!["delete", "w"],
        vec!["measure"],
    ] {
        let mut args = cmd.clone();
        args.extend(["--store", "etcd://127.0.0.1:1"]);
        one_line(dir.path(), &args, 1, &["etcd at 127.0.0.1:1", "refused"]);
    }
}

#[test]
fn a_store_of_another_format_is_refused_with_one_line_and_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("w.toml");
    std::fs::write(
        &file,
        "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"9\"]\ncopies = 1\n",
    )
    .unwrap();
    let out = run(dir.path(), &["apply", "-f", file.to_str().unwrap()]);
    assert!(out.status.success());
    let store = SqliteStore::open(&dir.path().join("data")).unwrap();
    let other = r#"{"format":99,"setpoint":"9.9.9"}"#;
    let rev = store.commit(&Txn::new().put(VERSION_KEY, other)).unwrap();
    for args in [vec!["get"], vec!["apply", "-f", file.to_str().unwrap()]] {
        one_line(
            dir.path(),
            &args,
            2,
            &["format 99", "9.9.9", "reads format 1", "sqlite:"],
        );
    }
    assert_eq!(store.revision().unwrap(), rev, "nothing was written");
}

/// Setpoint daemons on one etcd; dropping it kills them and every copy they started.
struct Daemons {
    dir: tempfile::TempDir,
    url: String,
    children: Vec<(String, Child)>,
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for m in self.copies() {
            let _ = signal_group(m.pid, Signal::KILL);
        }
    }
}

impl Daemons {
    fn new(url: String) -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            url,
            children: Vec::new(),
        }
    }

    fn start(&mut self, name: &str, args: &[&str]) {
        let log = std::fs::File::create(self.dir.path().join(format!("{name}.log"))).unwrap();
        let mut args = args.to_vec();
        args.extend(["--store", &self.url]);
        let child = setpoint(self.dir.path(), &args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.children.push((name.to_owned(), child));
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    fn ok(&self, args: &[&str]) -> String {
        let mut args = args.to_vec();
        args.extend(["--store", &self.url]);
        let out = run(self.dir.path(), &args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn copies(&self) -> Vec<setpoint_runtime::process::Marked> {
        let nodes = self.dir.path().join("data").join("nodes");
        let Ok(nodes) = nodes.canonicalize() else {
            return Vec::new();
        };
        ["n1", "n2"]
            .iter()
            .flat_map(|n| find_marked(&nodes.join(n).display().to_string()))
            .collect()
    }

    fn until(&self, what: &str, want: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !want(self) {
            if Instant::now() >= deadline {
                let logs: String = self
                    .children
                    .iter()
                    .map(|(n, _)| format!("--- {n}\n{}\n", self.log(n)))
                    .collect();
                panic!("timed out waiting for: {what}\n{logs}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn a_controller_and_two_agents_on_etcd_keep_three_copies_as_separate_processes() {
    let Some(etcd) = EtcdCluster::start_or_skip("cli::store::on_etcd", 1) else {
        return;
    };
    let mut d = Daemons::new(etcd.url());
    let file = d.dir.path().join("w.toml");
    std::fs::write(
        &file,
        "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"120\"]\ncopies = 3\n\
         controller = \"intent\"\nperiod = \"200ms\"\nstartup = \"100ms\"\ngrace = \"500ms\"\n",
    )
    .unwrap();
    d.start("n1", &["agent", "--node", "n1", "--report-every", "50ms"]);
    d.start("n2", &["agent", "--node", "n2", "--report-every", "50ms"]);
    d.start("controller", &["controller", "--lease-ttl", "1s"]);
    d.ok(&["apply", "-f", file.to_str().unwrap()]);
    let get = |d: &Daemons| -> Value {
        serde_json::from_str::<Value>(&d.ok(&["get", "w", "--format", "json"])).unwrap()
            ["workloads"][0]
            .clone()
    };
    d.until("3 copies live and on the ledger", |d| {
        let g = get(d);
        d.copies().len() == 3 && g["live"] == 3 && g["on_ledger"] == 3
    });
    let status: Value = serde_json::from_str(&d.ok(&["status", "--format", "json"])).unwrap();
    assert!(status["leader"]["holder"].is_string(), "{status}");
    assert_eq!(status["nodes"].as_array().unwrap().len(), 2, "{status}");

    // A copy that dies is replaced, and nothing is started twice.
    let victim = d.copies()[0].clone();
    signal_group(victim.pid, Signal::KILL).unwrap();
    d.until("the dead copy is replaced", |d| {
        let c = d.copies();
        c.len() == 3 && c.iter().all(|m| m.pid != victim.pid) && get(d)["on_ledger"] == 3
    });
    let mut names: Vec<String> = d.copies().into_iter().map(|m| m.copy).collect();
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
    let mut d = Daemons::new(etcd.url());
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
    assert!(
        d.children[0].1.try_wait().unwrap().is_none(),
        "it still runs"
    );
    etcd.restart(0).unwrap();
    etcd.wait_for_leader(Duration::from_secs(20)).unwrap();
    d.until("the controller leads", |d| {
        d.log("controller").contains("became the leader")
    });
    assert!(d.log("controller").contains("answers"));
}
