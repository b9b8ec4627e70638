//! The one real-process harness of the CLI tests: a [`Rig`] starts the parts of the runtime
//! (`up`, `controller`, `agent`) as child processes of the real `setpoint` binary, each with its
//! own log file, runs the one-shot commands (`apply`, `get`, `status`, `kill`, `measure`) and
//! parses their JSON, lists the copies the agents started by their mark, and waits for
//! conditions with one bounded wait ([`Wait`]) that names what it waited for and shows the tail
//! of every log on timeout.
//!
//! It works on a SQLite store in a data directory shared by every process ([`Rig::new`]), on
//! any `--store URL` such as etcd's ([`Rig::on_store`]), and across hosts, where each process
//! has a data directory of its own and runs through a command prefix such as `ip netns exec`
//! ([`Rig::per_process`], [`Start::on`]).
//!
//! Dropping a rig ends every process it still runs, by pid: SIGTERM (and SIGCONT, so that a
//! stopped one can act on it), then SIGKILL after [`STOP_BOUND`]; each is reaped. Then every
//! copy its agents left is killed by pid ([`Marks`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use serde_json::Value;
use setpoint_runtime::process::Marked;
use setpoint_runtime::testing::{node_mark, wait_until, Marks, Wait};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_setpoint");
/// How long a wait polls by default before it fails the test.
pub const DEADLINE: Duration = Duration::from_secs(30);
/// How often a wait polls by default.
pub const POLL: Duration = Duration::from_millis(50);
/// How long a process has, after SIGTERM, to end by itself before SIGKILL.
pub const STOP_BOUND: Duration = Duration::from_secs(2);
/// How many lines of each log a timeout shows.
const TAIL: usize = 40;

/// How a rig's processes find their store and data.
#[derive(Clone, Debug)]
enum Layout {
    /// Every process on `ROOT/data`, the SQLite store in it (`--store` absent).
    Sqlite,
    /// Every process on `ROOT/data`, with `--store URL`.
    Shared(String),
    /// Each process `NAME` on `ROOT/NAME`, the one-shot commands on `ROOT/cli`, with
    /// `--store URL`: as if each ran on a machine of its own.
    PerProcess(String),
}

/// How to start one long-running process: `[prefix…] setpoint ARGS [--store URL] --data-dir D`.
pub struct Start {
    name: String,
    args: Vec<String>,
    prefix: Vec<String>,
    env: Vec<(String, String)>,
    stderr: Option<Stdio>,
    append: bool,
}

impl Start {
    /// Process `name` (its log is `ROOT/NAME.log`) running `setpoint ARGS`.
    pub fn new(name: &str, args: &[&str]) -> Self {
        Self {
            name: name.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            prefix: Vec::new(),
            env: Vec::new(),
            stderr: None,
            append: false,
        }
    }

    /// Runs it through a command prefix that execs it (such as `ip netns exec NS`, or a shell
    /// that sets something up first), so that the child's pid is setpoint's.
    pub fn on(mut self, prefix: &[String]) -> Self {
        self.prefix = prefix.to_vec();
        self
    }

    /// Sets an environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Sends stderr there instead of the log file.
    pub fn stderr(mut self, stderr: Stdio) -> Self {
        self.stderr = Some(stderr);
        self
    }

    /// Appends to the log of an earlier process of the same name instead of starting it anew.
    pub fn append(mut self) -> Self {
        self.append = true;
        self
    }

    /// The nodes whose copies this process starts: `agent --node N`, or `up --nodes N`'s
    /// `node-1`…`node-N`.
    fn nodes(&self) -> Vec<String> {
        let value = |flag: &str| {
            self.args
                .iter()
                .position(|a| a == flag)
                .and_then(|i| self.args.get(i + 1))
        };
        match self.args.first().map(String::as_str) {
            Some("agent") => value("--node").into_iter().cloned().collect(),
            Some("up") => {
                // `up`'s default is 3 nodes.
                let n: u32 = value("--nodes").map_or(3, |n| n.parse().unwrap());
                (1..=n).map(|i| format!("node-{i}")).collect()
            }
            _ => Vec::new(),
        }
    }
}

/// A data directory (or one per process), the setpoint processes started on it, and the copies
/// their agents run. See the module's documentation.
pub struct Rig {
    /// Every process this rig runs, by name.
    daemons: BTreeMap<String, Child>,
    /// Every log a timeout shows: the processes' own, and any other watched.
    logs: BTreeMap<String, PathBuf>,
    /// The copies of every node an agent of this rig ran.
    marks: Marks,
    layout: Layout,
    deadline: Duration,
    poll: Duration,
    tmp: tempfile::TempDir,
    /// What every command is given beside `--store URL` (`--etcd-ca FILE`, …).
    store_extra: Vec<String>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop_all();
        // Then `marks` drops: every copy left is killed by pid.
    }
}

impl Rig {
    fn with(layout: Layout) -> Self {
        Self {
            daemons: BTreeMap::new(),
            logs: BTreeMap::new(),
            marks: Marks::new(),
            layout,
            deadline: DEADLINE,
            poll: POLL,
            tmp: tempfile::tempdir().unwrap(),
            store_extra: Vec::new(),
        }
    }

    /// Gives every command `args` beside `--store URL`, such as an etcd's `--etcd-ca FILE`.
    pub fn store_extra(mut self, args: Vec<String>) -> Self {
        self.store_extra = args;
        self
    }

    /// Every process on `ROOT/data`, with the SQLite store in it.
    pub fn new() -> Self {
        Self::with(Layout::Sqlite)
    }

    /// Every process on `ROOT/data` with `--store url`.
    pub fn on_store(url: &str) -> Self {
        Self::with(Layout::Shared(url.to_owned()))
    }

    /// Each process on a data directory of its own (`ROOT/NAME`, the one-shot commands on
    /// `ROOT/cli`), with `--store url`.
    pub fn per_process(url: &str) -> Self {
        Self::with(Layout::PerProcess(url.to_owned()))
    }

    /// How long [`Rig::until`] waits.
    pub fn deadline(mut self, d: Duration) -> Self {
        self.deadline = d;
        self
    }

    /// How often [`Rig::until`] polls.
    pub fn poll(mut self, d: Duration) -> Self {
        self.poll = d;
        self
    }

    /// The rig's own directory: logs, written files, data directories.
    pub fn dir(&self) -> &Path {
        self.tmp.path()
    }

    /// The data directory of the one-shot commands (and of every process but per-process).
    pub fn data_dir(&self) -> PathBuf {
        match self.layout {
            Layout::PerProcess(_) => self.dir().join("cli"),
            _ => self.dir().join("data"),
        }
    }

    /// The data directory of process `name`.
    pub fn data_dir_of(&self, name: &str) -> PathBuf {
        match self.layout {
            Layout::PerProcess(_) => self.dir().join(name),
            _ => self.dir().join("data"),
        }
    }

    /// The SQLite store's file (of a rig on SQLite).
    pub fn store_file(&self) -> PathBuf {
        self.data_dir().join("store.sqlite")
    }

    /// `--store URL` for every command, if the rig has one.
    fn store_args(&self) -> Vec<&str> {
        match &self.layout {
            Layout::Sqlite => Vec::new(),
            Layout::Shared(url) | Layout::PerProcess(url) => {
                let mut out = vec!["--store", url.as_str()];
                out.extend(self.store_extra.iter().map(String::as_str));
                out
            }
        }
    }

    /// `[prefix…] setpoint ARGS [--store URL] --data-dir DATA`.
    pub fn command_in(&self, prefix: &[String], data: &Path, args: &[&str]) -> Command {
        let mut c = match prefix.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        c.args(args)
            .args(self.store_args())
            .arg("--data-dir")
            .arg(data);
        c
    }

    /// A one-shot `setpoint ARGS` on the rig's store and data directory.
    pub fn command(&self, args: &[&str]) -> Command {
        self.command_in(&[], &self.data_dir(), args)
    }

    /// Runs a one-shot command to its end.
    pub fn run(&self, args: &[&str]) -> Output {
        bounded(self.command(args), args)
    }

    /// Runs a one-shot command that must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "setpoint {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs a one-shot command that must succeed and print JSON; the JSON.
    pub fn json(&self, args: &[&str]) -> Value {
        let text = self.ok(args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("setpoint {args:?}: {e}: {text}"))
    }

    /// Runs a one-shot command and its JSON, or `None` if it fails (a store that does not
    /// answer yet, or not now).
    pub fn try_json(&self, args: &[&str]) -> Option<Value> {
        let out = self.run(args);
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    /// `get WORKLOAD --format json`: the workload's object.
    pub fn get(&self, workload: &str) -> Value {
        self.json(&["get", workload, "--format", "json"])["workloads"][0].clone()
    }

    /// [`Rig::get`], or `None` if the command fails.
    pub fn try_get(&self, workload: &str) -> Option<Value> {
        self.try_json(&["get", workload, "--format", "json"])
            .map(|v| v["workloads"][0].clone())
    }

    /// `status --format json`; `null` on SQLite until a process has made the store (read
    /// commands refuse a data directory without one).
    pub fn status(&self) -> Value {
        if matches!(self.layout, Layout::Sqlite) && !self.store_file().is_file() {
            return Value::Null;
        }
        self.json(&["status", "--format", "json"])
    }

    /// [`Rig::status`], or `None` if the command fails.
    pub fn try_status(&self) -> Option<Value> {
        self.try_json(&["status", "--format", "json"])
    }

    /// `measure WORKLOAD --time-scale SCALE --format json`: the workload's object.
    pub fn measure(&self, workload: &str, scale: &str) -> Value {
        self.json(&[
            "measure",
            workload,
            "--time-scale",
            scale,
            "--format",
            "json",
        ])["workloads"][0]
            .clone()
    }

    /// `kill WORKLOAD N`, which must succeed: the copies it names (`killed COPY` lines).
    pub fn kill_copies(&self, workload: &str, n: u64) -> Vec<String> {
        self.ok(&["kill", workload, &n.to_string()])
            .lines()
            .map(|l| l.strip_prefix("killed ").unwrap().to_owned())
            .collect()
    }

    /// Writes `text` to `ROOT/NAME`; its path.
    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// Writes `text` to `ROOT/NAME` and runs `apply -f` on it, to its end.
    pub fn apply_file(&self, name: &str, text: &str) -> Output {
        let path = self.write(name, text);
        self.run(&["apply", "-f", &path])
    }

    /// [`Rig::apply_file`] on `workloads.toml`, which must succeed.
    pub fn apply(&self, text: &str) {
        let path = self.write("workloads.toml", text);
        self.ok(&["apply", "-f", &path]);
    }

    /// The log file of process `name`.
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.dir().join(format!("{name}.log"))
    }

    /// What process `name` has logged so far.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.log_path(name)).unwrap_or_default()
    }

    /// Shows `path` as log `name` when a wait times out (a log a process writes itself).
    pub fn watch_log(&mut self, name: &str, path: PathBuf) {
        self.logs.insert(name.to_owned(), path);
    }

    /// Starts `setpoint ARGS` as process `name`, stderr to its log.
    pub fn start(&mut self, name: &str, args: &[&str]) -> u32 {
        self.spawn(Start::new(name, args))
    }

    /// Starts a long-running process; its pid. Its nodes' copies are watched from now on.
    pub fn spawn(&mut self, s: Start) -> u32 {
        assert!(
            !self.daemons.contains_key(&s.name),
            "{} runs already",
            s.name
        );
        let data = self.data_dir_of(&s.name);
        for node in s.nodes() {
            self.marks.add(&node, node_mark(&data.join("nodes"), &node));
        }
        let mut cmd = self.command_in(
            &s.prefix,
            &data,
            &s.args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        for (k, v) in &s.env {
            cmd.env(k, v);
        }
        let stderr = match s.stderr {
            Some(stderr) => stderr,
            None => {
                let path = self.log_path(&s.name);
                let log = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .append(s.append)
                    .truncate(!s.append)
                    .open(&path)
                    .unwrap();
                self.logs.insert(s.name.clone(), path);
                Stdio::from(log)
            }
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", s.name));
        let pid = child.id();
        self.daemons.insert(s.name, child);
        pid
    }

    /// The names of the processes this rig started and has not seen end.
    pub fn names(&self) -> Vec<String> {
        self.daemons.keys().cloned().collect()
    }

    /// The pid of process `name`.
    pub fn pid(&self, name: &str) -> u32 {
        self.daemons[name].id()
    }

    /// Whether process `name` was started by this rig and not yet ended.
    pub fn runs(&mut self, name: &str) -> bool {
        self.daemons
            .get_mut(name)
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// Sends `signal` to process `name` and leaves it running (SIGSTOP, SIGCONT).
    pub fn send(&self, name: &str, signal: Signal) {
        signal_pid(self.pid(name), signal);
    }

    /// Sends `signal` to process `name` and waits for it to end; how it ended.
    pub fn signal(&mut self, name: &str, signal: Signal) -> ExitStatus {
        self.send(name, signal);
        self.wait_exit(name)
    }

    /// Waits for process `name` to end (by itself, or of a signal sent to it), within the
    /// rig's deadline; how it ended.
    pub fn wait_exit(&mut self, name: &str) -> ExitStatus {
        self.wait_exit_within(
            name,
            self.deadline,
            self.poll.min(Duration::from_millis(10)),
        )
    }

    /// [`Rig::wait_exit`] with a bound and a poll of its own.
    pub fn wait_exit_within(&mut self, name: &str, within: Duration, poll: Duration) -> ExitStatus {
        let mut status = None;
        let child = self.daemons.get_mut(name).unwrap();
        let wait = Wait::new(format!("{name} to end"), within, poll);
        let logs = &self.logs;
        wait_until(
            wait,
            || {
                status = child.try_wait().unwrap();
                status.is_some()
            },
            || tails(logs),
        );
        self.daemons.remove(name);
        status.unwrap()
    }

    /// Every running copy of every node the rig's agents ran.
    pub fn marked(&self) -> Vec<Marked> {
        self.marks.marked()
    }

    /// The running copies of every node, by copy identity, with their pids.
    pub fn processes(&self) -> BTreeMap<String, Vec<u32>> {
        self.marks.processes()
    }

    /// The running copies of one node, by copy identity, with their pids.
    pub fn processes_of(&self, node: &str) -> BTreeMap<String, Vec<u32>> {
        self.marks
            .by_node(&[node])
            .into_iter()
            .map(|(c, on)| (c, on.into_iter().map(|(_, pid)| pid).collect()))
            .collect()
    }

    /// The running copies of `nodes`, by copy identity, with each process's node and pid.
    pub fn processes_on(&self, nodes: &[&str]) -> BTreeMap<String, Vec<(String, u32)>> {
        self.marks.by_node(nodes)
    }

    /// The mark of `node`'s copies (of an agent on the rig's data directory, unless one of
    /// the rig's agents ran it elsewhere).
    pub fn mark(&self, node: &str) -> String {
        self.marks.mark(node).map_or_else(
            || node_mark(&self.data_dir().join("nodes"), node),
            str::to_owned,
        )
    }

    /// The tail of every log, for a failure's message.
    pub fn logs(&self) -> String {
        tails(&self.logs)
    }

    /// Waits until `want` holds, within the rig's deadline; how long it took.
    pub fn until(&self, what: &str, want: impl FnMut(&Self) -> bool) -> Duration {
        self.until_within(what, self.deadline, want)
    }

    /// Waits until `want` holds, within `within`; how long it took. On timeout the test fails
    /// with what it waited for, the copies that run and the tail of every log.
    pub fn until_within(
        &self,
        what: &str,
        within: Duration,
        mut want: impl FnMut(&Self) -> bool,
    ) -> Duration {
        wait_until(
            Wait::new(what, within, self.poll),
            || want(self),
            || format!("processes {:?}\n{}", self.processes(), self.logs()),
        )
    }

    /// Polls `check` every `every` for `span` (an assertion that must hold throughout).
    pub fn during(&self, span: Duration, every: Duration, mut check: impl FnMut(&Self)) {
        let end = Instant::now() + span;
        while Instant::now() < end {
            check(self);
            std::thread::sleep(every);
        }
    }

    /// Ends every process: SIGTERM and SIGCONT to all, then SIGKILL to those still running
    /// after [`STOP_BOUND`]; each is reaped.
    fn stop_all(&mut self) {
        for child in self.daemons.values() {
            signal_pid(child.id(), Signal::TERM);
            signal_pid(child.id(), Signal::CONT);
        }
        let end = Instant::now() + STOP_BOUND;
        for child in self.daemons.values_mut() {
            while child.try_wait().ok().flatten().is_none() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.daemons.clear();
    }
}

/// Asserts that a command was refused as bad input is: exit `code`, one line on stderr (UTF-8),
/// holding every needle; `what` names the case in a failure.
pub fn assert_one_line(out: &Output, code: i32, needles: &[&str], what: &str) {
    let err = std::str::from_utf8(&out.stderr).expect("stderr is UTF-8");
    assert_eq!(out.status.code(), Some(code), "{what}: {err}");
    assert_eq!(err.lines().count(), 1, "{what}: not one line: {err}");
    for n in needles {
        assert!(err.contains(n), "{what}: no '{n}' in {err}");
    }
}

/// A workload of `copies` real copies of `sleep SECS` under `controller`, as `apply -f` reads
/// it; `period`, `startup` and `grace` are durations such as `"200ms"`.
pub fn sleeping(
    name: &str,
    copies: u64,
    controller: &str,
    secs: u32,
    period: &str,
    startup: &str,
    grace: &str,
) -> String {
    format!(
        "[[workload]]\nname = \"{name}\"\ncommand = [\"sleep\", \"{secs}\"]\ncopies = {copies}\n\
         controller = \"{controller}\"\nperiod = \"{period}\"\nstartup = \"{startup}\"\ngrace = \"{grace}\"\n"
    )
}

/// Sends `signal` to `pid`, which may have ended already.
pub fn signal_pid(pid: u32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// The last [`TAIL`] lines of each log.
fn tails(logs: &BTreeMap<String, PathBuf>) -> String {
    logs.iter()
        .map(|(name, path)| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(TAIL);
            format!(
                "--- {name} ({})\n{}\n",
                path.display(),
                lines[from..].join("\n")
            )
        })
        .collect()
}

/// Whether `pid` runs (a zombie has ended; nobody may have reaped it yet).
fn alive(pid: u32) -> bool {
    setpoint_runtime::process::proc_stat(pid).is_some_and(|s| s.state != 'Z')
}

/// The guard itself: dropping a rig ends its processes by pid within [`STOP_BOUND`], a
/// stopped (SIGSTOP) one included, and kills every copy an agent killed with SIGKILL left.
#[test]
fn a_dropped_rig_ends_its_processes_a_stopped_one_too_and_kills_every_copy_left() {
    let mut r = Rig::new();
    r.start("agent", &["agent", "--node", "a", "--report-every", "50ms"]);
    let c1 = r.start("c1", &["controller", "--lease-ttl", "1s"]);
    r.apply(&sleeping("w", 2, "intent", 120, "100ms", "50ms", "300ms"));
    r.until("two copies run", |r| r.marked().len() == 2);
    // The agent dies without stopping its copies: orphans, until the guard kills them.
    r.signal("agent", Signal::KILL);
    let copies: Vec<u32> = r.marked().iter().map(|m| m.pid).collect();
    assert_eq!(copies.len(), 2);
    let c2 = r.start("c2", &["controller"]);
    r.until("c2 runs", |r| {
        r.log("c2").contains("standby") || r.log("c2").contains("leader")
    });
    r.send("c2", Signal::STOP);
    let mark = r.mark("a");
    let started = Instant::now();
    drop(r);
    let took = started.elapsed();
    for pid in [c1, c2].into_iter().chain(copies) {
        // A SIGKILL is delivered asynchronously: an orphaned copy may take a moment to go (and
        // be reaped by init) after the guard's kill returns, under load. Bounded: 1 s.
        let gone = (0..100).any(|_| {
            let g = !alive(pid);
            if !g {
                std::thread::sleep(Duration::from_millis(10));
            }
            g
        });
        assert!(gone, "{pid} still runs");
    }
    assert!(setpoint_runtime::process::find_marked(&mark).is_empty());
    // SIGTERM was enough, for the stopped one too: no SIGKILL was needed.
    assert!(took < STOP_BOUND, "took {took:?}");
}

/// How long a one-shot command may run before [`Rig::run`] kills it and fails the test: a
/// command that should have been refused but started a daemon would otherwise hang the suite.
const ONE_SHOT_BOUND: std::time::Duration = std::time::Duration::from_secs(300);

/// Runs `cmd` to its end, killing it by its pid (and failing) if it runs past
/// [`ONE_SHOT_BOUND`]; its output.
fn bounded(mut cmd: std::process::Command, args: &[&str]) -> Output {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = std::time::Instant::now() + ONE_SHOT_BOUND;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("setpoint {args:?} still ran after {ONE_SHOT_BOUND:?}: killed");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}
