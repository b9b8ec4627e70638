//! Hardening (issue 14), with the real binary: a store that cannot be lost silently, an agent
//! that trusts nothing it is handed, and `apply` refusing what can never run.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use setpoint_runtime::testing::{wait_until, Wait};

use super::harness::{assert_one_line, Rig, Start, BIN, DEADLINE};
use super::runtime::{apply, converged, up};

/// A file's length and a hash of its bytes, or `None` if it is absent.
fn bytes(p: &Path) -> Option<(usize, u64)> {
    use std::hash::{Hash, Hasher};
    let b = std::fs::read(p).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    Some((b.len(), h.finish()))
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// Asserts one line on stderr, exit code 2, and that the line holds `needle`.
fn refused(out: &Output, needle: &str, what: &str) {
    assert_one_line(out, 2, &[needle], what);
}

#[test]
fn a_store_removed_under_a_running_up_stops_every_part_in_one_line_each_and_apply_is_refused() {
    let mut c = Rig::new();
    up(&mut c, 2);
    apply(&c, 3, "intent");
    converged(&c, 3);
    let store = c.store_file();
    let [wal, shm] = ["-wal", "-shm"].map(|s| c.data_dir().join(format!("store.sqlite{s}")));
    std::fs::remove_file(&store).unwrap();
    assert_eq!(c.wait_exit("up").code(), Some(1), "{}", c.log("up"));
    let log = c.log("up");
    let lost: Vec<&str> = log.lines().filter(|l| l.contains("store lost")).collect();
    // The controller and the two agents, once each, and the process's own error line.
    assert_eq!(lost.len(), 4, "{log}");
    for part in ["controller", "agent node-1", "agent node-2"] {
        assert_eq!(
            lost.iter().filter(|l| l.contains(part)).count(),
            1,
            "{part}: {log}"
        );
    }
    assert!(!log.contains("not a database"), "{log}");
    assert!(c.processes().is_empty(), "copies left running");
    // The log is left exactly as the parts left it, and nothing is created over it.
    let before = (bytes(&wal), bytes(&shm));
    assert!(
        before.0.is_some(),
        "the parts did not close (checkpoint and delete) the log"
    );
    let path = c.write(
        "w.toml",
        "[[workload]]\nname = \"w\"\ncommand = [\"true\"]\ncopies = 1\n",
    );
    let out = c.run(&["apply", "-f", &path]);
    refused(&out, "store.sqlite-wal", "apply after rm");
    assert!(!store.exists());
    assert_eq!((bytes(&wal), bytes(&shm)), before);
}

#[test]
fn an_empty_or_foreign_store_file_is_refused_by_every_command_and_never_written() {
    let mut c = Rig::new();
    std::fs::create_dir_all(c.data_dir()).unwrap();
    let path = c.write(
        "w.toml",
        "[[workload]]\nname = \"w\"\ncommand = [\"true\"]\ncopies = 1\n",
    );
    for (content, needle) in [
        (&b""[..], "empty (0 bytes)"),
        (&b"name,value\nnot,sqlite\n"[..], "not a SQLite database"),
    ] {
        std::fs::write(c.store_file(), content).unwrap();
        for args in [
            vec!["get"],
            vec!["status"],
            vec!["measure"],
            vec!["delete", "w"],
            vec!["apply", "-f", &path],
            vec!["controller"],
            vec!["agent", "--node", "n1"],
        ] {
            refused(&c.run(&args), needle, &format!("{args:?}"));
        }
        c.start("up", &["up", "--nodes", "1"]);
        assert_eq!(c.wait_exit("up").code(), Some(2), "{}", c.log("up"));
        assert!(c.log("up").contains(needle), "{}", c.log("up"));
        assert_eq!(
            std::fs::read(c.store_file()).unwrap(),
            content,
            "the file was written"
        );
        assert!(!c.data_dir().join("store.sqlite-wal").exists());
    }
}

#[test]
fn get_status_and_measure_write_nothing_and_run_for_a_user_who_may_only_read() {
    let mut c = Rig::new();
    up(&mut c, 1);
    apply(&c, 2, "intent");
    converged(&c, 2);
    // Modes: the data directory and everything setpoint made in it are its owner's alone.
    let data = c.data_dir();
    let nodes = data.join("nodes");
    for (p, want) in [
        (data.clone(), 0o700),
        (c.store_file(), 0o600),
        (data.join("store.sqlite-wal"), 0o600),
        (nodes.clone(), 0o700),
        (nodes.join("node-1.json"), 0o600),
        (nodes.join("logs"), 0o700),
        (nodes.join("logs/collector-0.log"), 0o600),
    ] {
        assert_eq!(mode(&p), want, "{}", p.display());
    }
    assert!(c.signal("up", rustix::process::Signal::INT).success());
    let files: Vec<_> = ["store.sqlite", "store.sqlite-wal", "nodes/node-1.json"]
        .map(|f| data.join(f))
        .to_vec();
    let before: Vec<_> = files.iter().map(|f| bytes(f)).collect();
    for args in [
        vec!["get", "--format", "json"],
        vec!["status"],
        vec!["measure", "--time-scale", "0.01", "--format", "json"],
    ] {
        c.ok(&args);
    }
    let after: Vec<_> = files.iter().map(|f| bytes(f)).collect();
    unchanged(&before, &after, "a read command");

    // A user who may read the store but not write it (here: nobody, after the owner opens
    // the directory for reading) can run `get`.
    let Ok(setpriv) = which("setpriv") else {
        eprintln!("skipping the unprivileged get: setpriv is not installed");
        return;
    };
    for dir in [c.dir(), &data, &nodes] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for f in std::fs::read_dir(&data).unwrap().flatten() {
        if f.path().is_file() {
            std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    let out = std::process::Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(BIN)
        .args(["get", "collector", "--format", "json", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "get as nobody: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(r#""name":"collector""#));
    let after: Vec<_> = files.iter().map(|f| bytes(f)).collect();
    unchanged(&before, &after, "get as nobody");
}

/// The store file and the state file are byte for byte the same; the log is the same, or
/// SQLite made an empty one for its locks where it may (a read-only connection does where the
/// directory lets it), never with content.
fn unchanged(before: &[Option<(usize, u64)>], after: &[Option<(usize, u64)>], what: &str) {
    assert_eq!(
        (before[0], before[2]),
        (after[0], after[2]),
        "{what} changed the store"
    );
    assert!(
        before[1] == after[1] || (before[1].is_none() && after[1].is_some_and(|w| w.0 == 0)),
        "{what} wrote to the log: {:?} then {:?}",
        before[1],
        after[1]
    );
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(())
}

/// An agent of node `a` reporting every 50 ms, with a node lease long enough that it is not
/// lost while it is down.
const AGENT_A: [&str; 7] = [
    "agent",
    "--node",
    "a",
    "--report-every",
    "50ms",
    "--node-timeout",
    "60s",
];

#[test]
fn a_foreign_process_with_the_agents_mark_is_never_adopted_and_the_real_copy_starts() {
    let mut c = Rig::new();
    c.start("controller", &["controller", "--lease-ttl", "1s"]);
    c.start("agent", &AGENT_A);
    c.until("node a reports", |c| {
        c.status()["nodes"].as_array().is_some_and(|n| n.len() == 1)
    });
    // While the agent is down, its copy is assigned, and someone starts a process that carries
    // the agent's mark and the copy's identity, as an unprivileged user could.
    c.signal("agent", rustix::process::Signal::KILL);
    apply(&c, 1, "intent");
    c.until("collector-0 is assigned", |c| {
        c.get("collector")["pending_create"] == 1
    });
    let fake = |c: &Rig, prefix: &[&str]| {
        let mut cmd = std::process::Command::new(prefix.first().copied().unwrap_or("sleep"));
        cmd.args(prefix.iter().skip(1))
            .args(if prefix.is_empty() {
                vec!["3333"]
            } else {
                vec!["sleep", "3333"]
            })
            .env("SETPOINT_AGENT", c.mark("a"))
            .env("SETPOINT_COPY", "collector-0")
            .process_group(0)
            .spawn()
            .unwrap()
    };
    use std::os::unix::process::CommandExt;
    let mut same_user = fake(&c, &[]);
    let other_user = which("setpriv").ok().map(|p| {
        let p = p.display().to_string();
        fake(
            &c,
            &[&p, "--reuid=65534", "--regid=65534", "--clear-groups"],
        )
    });
    // `setpriv` drops to the other user only after it starts, carrying the mark already: an
    // agent that looked before then would rightly see a process of its own user (this raced
    // under load in a CI rehearsal). Wait until it runs as the other user.
    let runs_as_other_user = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|u| u.split_whitespace().next())
                == Some("65534")
        })
    };
    c.until("the fakes carry the mark", |c| {
        c.processes().get("collector-0").map_or(0, Vec::len) == 1 + other_user.iter().count()
            && other_user
                .as_ref()
                .is_none_or(|o| runs_as_other_user(o.id()))
    });
    let fakes: Vec<u32> = std::iter::once(same_user.id())
        .chain(other_user.as_ref().map(|o| o.id()))
        .collect();
    c.start("agent", &AGENT_A);
    c.until("the real collector-0 runs", |c| {
        c.processes()
            .get("collector-0")
            .is_some_and(|pids| pids.iter().any(|p| !fakes.contains(p)))
            && c.get("collector")["live"] == 1
    });
    let log = c.log("agent");
    assert!(
        log.contains(&format!(
            "foreign process {} carries the mark of collector-0 without its nonce: not adopted",
            fakes[0]
        )),
        "{log}"
    );
    assert!(!log.contains("adopted unrecorded"), "{log}");
    // The same user's impostor is stopped; another user's is reported and left alone.
    wait_until(
        Wait::new(
            "the impostor to be stopped",
            DEADLINE,
            Duration::from_millis(20),
        ),
        || same_user.try_wait().unwrap().is_some(),
        || format!("the impostor still runs\n{}", c.logs()),
    );
    if let Some(mut o) = other_user {
        assert!(
            log.contains(&format!("foreign process {} of user 65534", o.id())),
            "{log}"
        );
        assert!(
            o.try_wait().unwrap().is_none(),
            "another user's process was signalled"
        );
        let _ = o.kill();
        let _ = o.wait();
    } else {
        eprintln!("skipping another user's impostor: setpriv is not installed");
    }
}

#[test]
fn copies_get_only_their_declared_environment_and_stdio_descriptors() {
    let mut c = Rig::new();
    // The agent holds a secret in its environment and a descriptor without close-on-exec (7).
    let sh = ["sh", "-c", r#"exec 7</etc/hostname; exec "$0" "$@""#].map(str::to_owned);
    let up_pid = c.spawn(
        Start::new("up", &["up", "--nodes", "1", "--report-every", "50ms"])
            .on(&sh)
            .env("AWS_SECRET_ACCESS_KEY", "hunter2")
            .env("KEEP_ME", "kept"),
    );
    let path = c.write(
        "env.toml",
        "[[workload]]\nname = \"collector\"\ncommand = [\"sleep\", \"120\"]\ncopies = 1\nperiod = \"200ms\"\nstartup = \"100ms\"\nenv = { GREETING = \"hi\" }\nenv_passthrough = [\"KEEP_ME\", \"NOT_SET_ANYWHERE\"]\n",
    );
    c.until("the store exists", |c| c.store_file().is_file());
    c.ok(&["apply", "-f", &path]);
    converged(&c, 1);
    assert!(
        Path::new(&format!("/proc/{up_pid}/fd/7")).exists(),
        "the agent did not inherit descriptor 7: the test proves nothing"
    );
    let pid = c.processes()["collector-0"][0];
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let mut vars: Vec<String> = environ
        .split(|&b| b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    vars.sort();
    let names: Vec<&str> = vars.iter().map(|v| v.split('=').next().unwrap()).collect();
    assert_eq!(
        names,
        [
            "GREETING",
            "KEEP_ME",
            "SETPOINT_AGENT",
            "SETPOINT_COPY",
            "SETPOINT_NODE",
            "SETPOINT_NONCE",
            "SETPOINT_WORKLOAD"
        ],
        "{vars:?}"
    );
    assert!(vars.contains(&"GREETING=hi".to_owned()) && vars.contains(&"KEEP_ME=kept".to_owned()));
    let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    fds.sort();
    assert_eq!(fds, ["0", "1", "2"]);
}

#[test]
fn a_forged_placement_is_refused_and_logged_and_never_reaches_a_path_or_a_command() {
    use setpoint_runtime::model::{encode, placement_key, Assignment};
    use setpoint_runtime::store::{Store, Txn};
    let mut c = Rig::new();
    up(&mut c, 1);
    c.until("node-1 reports", |c| {
        c.status()["nodes"].as_array().is_some_and(|n| n.len() == 1)
    });
    let pwned = c.dir().join("pwned");
    let forged = |copy: &str, n: u64, command: Vec<String>| Assignment {
        copy: copy.into(),
        workload: "evil".into(),
        owner_uid: 1,
        n,
        node: "node-1".into(),
        command,
        startup_ms: 0,
        readiness: None,
        grace_ms: 0,
        created_ms: 0,
        env: Default::default(),
        generation: 0,
        cut_off: Default::default(),
        heartbeat: false,
    };
    let touch = |suffix: &str| {
        vec![
            "sh".to_owned(),
            "-c".into(),
            format!("touch {}{suffix}", pwned.display()),
        ]
    };
    let entries = [
        (
            placement_key("node-1", "evil", 1),
            forged("../../../escaped", 1, touch("")),
        ),
        (
            placement_key("node-1", "evil", 2),
            forged("evil-2", 2, touch("\0")),
        ),
        (
            placement_key("node-1", "evil", 3),
            forged("evil-4", 4, touch("-4")),
        ),
    ];
    let store = setpoint_runtime::SqliteStore::open(&c.data_dir()).unwrap();
    let mut txn = Txn::new();
    for (key, a) in &entries {
        txn = txn.put(key, encode(a));
    }
    store.commit(&txn).unwrap();
    c.until("the agent refused all three", |c| {
        c.log("up").matches("refused the entry").count() >= 3
    });
    std::thread::sleep(Duration::from_millis(500));
    let log = c.log("up");
    for (why, key) in [
        ("not named {workload}-{n}", &entries[0].0),
        ("NUL byte", &entries[1].0),
        ("not at its own key", &entries[2].0),
    ] {
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(key.as_str())).collect();
        assert_eq!(lines.len(), 1, "{key} logged once: {log}");
        assert!(lines[0].contains(why), "{why}: {log}");
    }
    for p in [
        pwned.clone(),
        c.dir().join("pwned-4"),
        c.dir().join("escaped.log"),
    ] {
        assert!(!p.exists(), "{} exists", p.display());
    }
    assert!(c.processes().is_empty());
}

#[test]
fn apply_refuses_what_can_never_run_and_keeps_the_earlier_declaration() {
    let mut c = Rig::new();
    up(&mut c, 1);
    apply(&c, 1, "intent");
    converged(&c, 1);
    // What was declared and runs, without the idle reason's age, which moves on its own.
    let declared = |c: &Rig| {
        let mut v: serde_json::Value =
            serde_json::from_str(&c.ok(&["get", "--format", "json"])).unwrap();
        for w in v["workloads"].as_array_mut().unwrap() {
            w.as_object_mut().unwrap().remove("idle");
        }
        v
    };
    let before = declared(&c);
    let head = "[[workload]]\nname = \"collector\"\ncopies = 1\n";
    let big = "x".repeat(100 * 1024);
    let many = vec![format!("\"{big}\""); 70].join(", ");
    for (body, needle) in [
        ("command = [\"sleep\", \"1\\u0000\"]\n", "NUL byte"),
        (
            "command = [\"sleep\", \"1\"]\nenv = { A = \"\\u0000\" }\n",
            "NUL byte",
        ),
        (
            "command = [\"sleep\", \"1\"]\nperiod = \"5ms\"\n",
            "accepted at least 10ms",
        ),
        (
            &format!("command = \"{}\"\n", "y".repeat(10 * 1024 * 1024)),
            "bytes per argument",
        ),
        (&format!("command = [\"true\", {many}]\n"), "ARG_MAX"),
        (
            "command = [\"true\"]\nenv_passthrough = [\"SETPOINT_COPY\"]\n",
            "setpoint's own",
        ),
    ] {
        let path = c.write("bad.toml", &format!("{head}{body}"));
        refused(&c.run(&["apply", "-f", &path]), needle, needle);
        assert_eq!(declared(&c), before, "{needle}");
    }

    // A program the agent cannot run is the copy's failure reason.
    let plain = c.write("plain.sh", "#!/bin/sh\nsleep 60\n");
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = c.write(
        "missing.toml",
        &format!("[[workload]]\nname = \"missing\"\ncommand = [\"no-such-program-setpoint\"]\ncopies = 1\nperiod = \"200ms\"\n[[workload]]\nname = \"plain\"\ncommand = [\"{plain}\"]\ncopies = 1\nperiod = \"200ms\"\n"),
    );
    c.ok(&["apply", "-f", &path]);
    let not_executable = format!("failed to start: program '{plain}' is not executable (mode 644)");
    for (w, why) in [
        (
            "missing",
            "failed to start: program 'no-such-program-setpoint' not found on the agent's PATH",
        ),
        ("plain", not_executable.as_str()),
    ] {
        c.until(&format!("{w} reports its failure"), |c| {
            let g: serde_json::Value =
                serde_json::from_str(&c.ok(&["get", w, "--format", "json"])).unwrap();
            g["workloads"][0]["copies"]
                .as_array()
                .unwrap()
                .iter()
                .any(|copy| copy["exit"].as_str().is_some_and(|e| e.starts_with(why)))
        });
    }
    assert!(
        c.log("up").contains("cannot start missing-0: program"),
        "{}",
        c.log("up")
    );
}

#[test]
fn a_store_replaced_under_a_running_up_stops_every_part_and_the_new_file_is_left_alone() {
    let mut c = Rig::new();
    up(&mut c, 1);
    apply(&c, 2, "intent");
    converged(&c, 2);
    // Another store, made by `apply` in another directory, moved over this one.
    let other = c.dir().join("other");
    let path = c.write(
        "o.toml",
        "[[workload]]\nname = \"other\"\ncommand = [\"true\"]\ncopies = 0\n",
    );
    let out = std::process::Command::new(BIN)
        .args(["apply", "-f", &path, "--data-dir"])
        .arg(&other)
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::rename(other.join("store.sqlite"), c.store_file()).unwrap();
    let moved = bytes(&c.store_file());
    assert_eq!(c.wait_exit("up").code(), Some(1), "{}", c.log("up"));
    let log = c.log("up");
    let lost: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("was replaced by another file"))
        .collect();
    assert_eq!(
        lost.len(),
        3,
        "the controller, the agent, and the error line: {log}"
    );
    assert!(c.processes().is_empty(), "copies left running");
    assert_eq!(
        bytes(&c.store_file()),
        moved,
        "the new file was written by the old parts"
    );
    // The old store's log is still beside it: read through it, the new file would show the old
    // store's pages, and a checkpoint would write them into it. Every command refuses.
    for args in [vec!["get"], vec!["apply", "-f", &path]] {
        refused(
            &c.run(&args),
            "belongs to another store",
            &format!("{args:?}"),
        );
    }
    assert_eq!(
        bytes(&c.store_file()),
        moved,
        "a refused command wrote the new file"
    );
    // As the message says: remove the old log, and the new store is whole.
    for f in ["store.sqlite-wal", "store.sqlite-shm"] {
        std::fs::remove_file(c.data_dir().join(f)).unwrap();
    }
    let got = c.ok(&["get", "--format", "json"]);
    assert!(
        got.contains(r#""name":"other""#) && !got.contains("collector"),
        "{got}"
    );
}

/// Makes the next process forked on this machine get `pid`, as a busy host reusing a dead
/// copy's pid would (root only: `/proc/sys/kernel/ns_last_pid`). Returns the process, or why
/// it could not (other forks may take the pid first: a few tries).
fn spawn_with_pid(pid: u32) -> Result<std::process::Child, String> {
    for _ in 0..20 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
            .map_err(|e| format!("cannot write /proc/sys/kernel/ns_last_pid: {e}"))?;
        let mut child = std::process::Command::new("sleep")
            .arg("3333")
            .spawn()
            .map_err(|e| e.to_string())?;
        if child.id() == pid {
            return Ok(child);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    Err(format!("pid {pid} kept going to other processes"))
}

#[test]
fn a_dead_copys_pid_taken_by_another_program_while_its_agent_was_down_is_never_signalled() {
    // Pid reuse, as a real host does it: the copy dies while its agent is down, another
    // program gets its pid, and the agent restarts with a state file naming that pid. The
    // agent must prove the process its own (pid, start time, nonce) before it adopts or
    // signals it: here it finds the copy ended and the stranger is left alone.
    let mut c = Rig::new();
    c.start("controller", &["controller", "--lease-ttl", "1s"]);
    c.start("agent", &AGENT_A);
    apply(&c, 1, "intent");
    c.until("collector-0 runs", |c| c.get("collector")["live"] == 1);
    let copy = c.processes()["collector-0"][0];
    // The agent's copies are its children: once it is gone they come to this process, which
    // must reap the dead one for its pid to be free (this machine's init may not).
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        eprintln!("hardening::a_dead_copys_pid_…: skipped: cannot become a subreaper: {e}");
        return;
    }
    c.signal("agent", rustix::process::Signal::KILL);
    let copy_pid = rustix::process::Pid::from_raw(copy as i32).unwrap();
    let _ = rustix::process::kill_process(copy_pid, rustix::process::Signal::KILL);
    let _ = rustix::process::waitpid(Some(copy_pid), rustix::process::WaitOptions::empty());
    let mut stranger = match spawn_with_pid(copy) {
        Ok(s) => s,
        Err(why) => {
            eprintln!("hardening::a_dead_copys_pid_…: skipped: {why}");
            return;
        }
    };
    c.start("agent", &AGENT_A);
    c.until("a new copy replaces collector-0", |c| {
        c.get("collector")["live"] == 1 && c.processes().values().flatten().any(|&p| p != copy)
    });
    // Give a wrong adoption or a late signal time to show.
    std::thread::sleep(Duration::from_secs(1));
    let log = c.log("agent");
    assert!(
        stranger.try_wait().unwrap().is_none(),
        "the program that took the dead copy's pid was signalled:\n{log}"
    );
    assert!(
        !log.contains(&format!("adopted collector-0 (pid {copy})")),
        "{log}"
    );
    assert!(
        !c.processes().values().flatten().any(|&p| p == copy),
        "{:?}",
        c.processes()
    );
    let _ = stranger.kill();
    let _ = stranger.wait();
}
