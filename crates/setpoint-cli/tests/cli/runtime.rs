//! Runs the real `setpoint` binary as a cluster: `up`, `controller` and `agent` processes on a
//! SQLite store in a temporary data directory, with real copies (`sleep`) on compressed time.
//! Every wait polls with a deadline; a guard kills every process a test started.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rustix::process::Signal;
use serde_json::Value;
use setpoint_runtime::process::{find_marked, signal_group};

pub(crate) const DEADLINE: Duration = Duration::from_secs(30);

pub(crate) const WORKLOAD: &str = r#"
[[workload]]
name = "collector"
command = ["sleep", "120"]
copies = COPIES
controller = "CONTROLLER"
period = "200ms"
startup = "100ms"
grace = "500ms"
"#;

/// A data directory, the setpoint processes started on it, and the nodes they run. Dropping it
/// kills all of them and every copy they left.
pub(crate) struct Cluster {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) daemons: BTreeMap<String, Child>,
    pub(crate) nodes: Vec<String>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.daemons.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for node in &self.nodes {
            for m in find_marked(&self.mark(node)) {
                let _ = signal_group(m.pid, Signal::KILL);
            }
        }
    }
}

impl Cluster {
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            daemons: BTreeMap::new(),
            nodes: Vec::new(),
        }
    }

    pub(crate) fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub(crate) fn mark(&self, node: &str) -> String {
        // Without creating the directory, which the agent makes owner-only.
        self.dir
            .path()
            .canonicalize()
            .unwrap()
            .join("data/nodes")
            .join(node)
            .display()
            .to_string()
    }

    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_setpoint"));
        c.args(args).arg("--data-dir").arg(self.data_dir());
        c
    }

    /// Starts a long-running setpoint process, its log in the data directory's parent.
    pub(crate) fn start(&mut self, name: &str, args: &[&str]) {
        let log = std::fs::File::create(self.dir.path().join(format!("{name}.log"))).unwrap();
        let child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.daemons.insert(name.to_owned(), child);
    }

    pub(crate) fn up(&mut self, nodes: u32) {
        for i in 1..=nodes {
            let n = format!("node-{i}");
            if !self.nodes.contains(&n) {
                self.nodes.push(n);
            }
        }
        self.start(
            "up",
            &[
                "up",
                "--nodes",
                &nodes.to_string(),
                "--report-every",
                "50ms",
                "--lease-ttl",
                "1s",
            ],
        );
    }

    /// Sends `signal` to a setpoint process and waits for it to end.
    pub(crate) fn signal(&mut self, name: &str, signal: Signal) -> std::process::ExitStatus {
        let mut child = self.daemons.remove(name).unwrap();
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
        child.wait().unwrap()
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "setpoint {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    pub(crate) fn apply(&self, copies: u64, controller: &str) {
        let path = self.dir.path().join("workloads.toml");
        let text = WORKLOAD
            .replace("COPIES", &copies.to_string())
            .replace("CONTROLLER", controller);
        std::fs::write(&path, text).unwrap();
        self.ok(&["apply", "-f", path.to_str().unwrap()]);
    }

    pub(crate) fn get(&self) -> Value {
        let text = self.ok(&["get", "collector", "--format", "json"]);
        serde_json::from_str::<Value>(&text).unwrap()["workloads"][0].clone()
    }

    /// The cluster's status; `null` until a daemon has created the store (read commands refuse
    /// a data directory without one).
    pub(crate) fn status(&self) -> Value {
        if !self.data_dir().join("store.sqlite").is_file() {
            return Value::Null;
        }
        serde_json::from_str(&self.ok(&["status", "--format", "json"])).unwrap()
    }

    /// The real copies, by identity, with their pids.
    pub(crate) fn processes(&self) -> BTreeMap<String, Vec<u32>> {
        let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for node in &self.nodes {
            for m in find_marked(&self.mark(node)) {
                out.entry(m.copy).or_default().push(m.pid);
            }
        }
        out
    }

    pub(crate) fn until(&self, what: &str, want: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + DEADLINE;
        while !want(self) {
            if Instant::now() >= deadline {
                let logs: String = self
                    .daemons
                    .keys()
                    .map(|n| {
                        let log = std::fs::read_to_string(self.dir.path().join(format!("{n}.log")));
                        format!("--- {n}\n{}\n", log.unwrap_or_default())
                    })
                    .collect();
                panic!(
                    "timed out waiting for: {what}; processes {:?}\n{logs}",
                    self.processes()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `n` copies run, once each, and `get` shows them live and on the ledger.
    pub(crate) fn converged(&self, n: u64) {
        self.until(&format!("{n} live copies"), |c| {
            let p = c.processes();
            let g = c.get();
            p.len() as u64 == n
                && p.values().all(|pids| pids.len() == 1)
                && g["live"] == n
                && g["on_ledger"] == n
                && g["pending_create"] == 0
        });
    }

    pub(crate) fn kill(&self, n: u64) -> Vec<String> {
        let out = self.ok(&["kill", "collector", &n.to_string()]);
        let killed: Vec<String> = out
            .lines()
            .map(|l| l.strip_prefix("killed ").unwrap().to_owned())
            .collect();
        assert_eq!(killed.len() as u64, n);
        self.until("the killed copies are gone", |c| {
            let p = c.processes();
            killed.iter().all(|k| !p.contains_key(k))
        });
        killed
    }
}

fn copy_numbers(g: &Value) -> Vec<u64> {
    g["copies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c["copy"]
                .as_str()
                .unwrap()
                .rsplit('-')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

#[test]
fn up_keeps_six_real_copies_through_kills_scaling_and_a_crash_restart() {
    let mut c = Cluster::new();
    c.up(3);
    c.until("three nodes report", |c| {
        c.status()["nodes"].as_array().is_some_and(|n| n.len() == 3)
    });
    c.apply(6, "intent");
    c.converged(6);
    // Spread over the three nodes, two each.
    let s = c.status();
    let assigned: Vec<u64> = s["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["assigned"].as_u64().unwrap())
        .collect();
    assert_eq!(assigned, [2, 2, 2]);
    assert!(s["leader"]["holder"]
        .as_str()
        .unwrap()
        .starts_with("controller/"));

    // Kills: replaced, with new identities.
    assert_eq!(c.kill(2), ["collector-0", "collector-1"]);
    c.converged(6);
    assert_eq!(*copy_numbers(&c.get()).iter().max().unwrap(), 7);

    // A crash of the whole process (controller and agents): the copies live on, and the next
    // `up` adopts them: the same processes, none doubled, none orphaned.
    let before = c.processes();
    c.signal("up", Signal::KILL);
    assert_eq!(c.processes(), before);
    c.up(3);
    c.until("a new leader", |c| !c.status()["leader"].is_null());
    c.converged(6);
    assert_eq!(c.processes(), before);

    // Scale up and down.
    c.apply(9, "intent");
    c.converged(9);
    c.apply(3, "intent");
    c.converged(3);
    assert_eq!(c.get()["copies"].as_array().unwrap().len(), 3);

    // Ctrl-C stops everything cleanly, copies included.
    assert!(c.signal("up", Signal::INT).success());
    assert!(c.processes().is_empty());
}

#[test]
fn two_controller_processes_elect_one_leader_and_the_other_takes_over_within_a_ttl() {
    let mut c = Cluster::new();
    c.nodes.push("a".into());
    c.start("agent", &["agent", "--node", "a", "--report-every", "50ms"]);
    c.start("c1", &["controller", "--lease-ttl", "1s"]);
    c.start("c2", &["controller", "--lease-ttl", "1s"]);
    // A second acting leader would start with empty memory and create the copies again.
    c.apply(3, "intent");
    c.converged(3);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(copy_numbers(&c.get()), [0, 1, 2], "nothing created twice");

    let holder = c.status()["leader"]["holder"].as_str().unwrap().to_owned();
    let pid: u32 = holder.split('/').nth(1).unwrap().parse().unwrap();
    let leader = if c.daemons["c1"].id() == pid {
        "c1"
    } else {
        "c2"
    };
    let died = Instant::now();
    c.signal(leader, Signal::KILL);
    c.until("the other controller leads", |c| {
        c.status()["leader"]["holder"]
            .as_str()
            .is_some_and(|h| h != holder)
    });
    let takeover = died.elapsed();
    assert!(takeover < Duration::from_millis(1_600), "took {takeover:?}");

    c.kill(1);
    c.converged(3);
    assert_eq!(copy_numbers(&c.get()), [1, 2, 3]);
}

#[test]
fn runtime_bad_input_gets_one_line_and_exit_code_2() {
    let c = Cluster::new();
    let bad = c.dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[workload]]\nname = \"a\"\ncommand = []\ncopies = 1\n",
    )
    .unwrap();
    for (args, needle) in [
        (
            vec!["apply", "-f", bad.to_str().unwrap()],
            "command: it is empty",
        ),
        (
            vec!["apply", "-f", "/nonexistent.toml"],
            "reading /nonexistent.toml",
        ),
        // No command has made a store here yet: read commands refuse instead of creating one.
        (vec!["get", "nope"], "no store in"),
        (vec!["delete", "nope"], "no store in"),
        (vec!["up", "--lease-ttl", "5"], "the unit is missing"),
        (vec!["agent", "--node", "Bad_Name"], "not a valid name"),
    ] {
        let out = c.run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // Nothing of a rejected file was applied.
    let ok = c.dir.path().join("ok.toml");
    std::fs::write(
        &ok,
        "[[workload]]\nname = \"good\"\ncommand = [\"true\"]\ncopies = 1\n[[workload]]\nname = \"bad\"\ncommand = [\"true\"]\ncopies = -3\n",
    )
    .unwrap();
    // A workload already stored must survive the rejected file untouched.
    let keep = c.dir.path().join("keep.toml");
    std::fs::write(
        &keep,
        "[[workload]]\nname = \"keep\"\ncommand = [\"true\"]\ncopies = 2\n",
    )
    .unwrap();
    c.ok(&["apply", "-f", keep.to_str().unwrap()]);
    let before = c.ok(&["get", "--format", "json"]);
    assert_eq!(
        c.run(&["apply", "-f", ok.to_str().unwrap()]).status.code(),
        Some(2)
    );
    let after = c.ok(&["get", "--format", "json"]);
    assert!(
        after.contains(r#""name":"keep""#) || after.contains(r#""workload":"keep""#),
        "{after}"
    );
    assert!(
        !after.contains("good") && !after.contains("\"bad\""),
        "{after}"
    );
    assert_eq!(before, after, "the rejected file changed nothing");
}
