//! Hardening (issue 14), with the real binary: a store that cannot be lost silently, an agent
//! that trusts nothing it is handed, and `apply` refusing what can never run.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use super::runtime::{Cluster, DEADLINE};

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
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: {err}");
    assert_eq!(err.lines().count(), 1, "{what}: {err}");
    assert!(err.contains(needle), "{what}: {err}");
}

impl Cluster {
    /// Waits for a daemon to end by itself; returns its exit code.
    fn exits(&mut self, name: &str) -> Option<i32> {
        let deadline = Instant::now() + DEADLINE;
        let child = self.daemons.get_mut(name).unwrap();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.daemons.remove(name);
                return status.code();
            }
            assert!(Instant::now() < deadline, "{name} did not end");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    fn store_file(&self) -> std::path::PathBuf {
        self.data_dir().join("store.sqlite")
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

#[test]
fn a_store_removed_under_a_running_up_stops_every_part_in_one_line_each_and_apply_is_refused() {
    let mut c = Cluster::new();
    c.up(2);
    c.apply(3, "intent");
    c.converged(3);
    let store = c.store_file();
    let [wal, shm] = ["-wal", "-shm"].map(|s| c.data_dir().join(format!("store.sqlite{s}")));
    std::fs::remove_file(&store).unwrap();
    assert_eq!(c.exits("up"), Some(1), "{}", c.log("up"));
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
    let mut c = Cluster::new();
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
        assert_eq!(c.exits("up"), Some(2), "{}", c.log("up"));
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
    let mut c = Cluster::new();
    c.up(1);
    c.apply(2, "intent");
    c.converged(2);
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
    for dir in [c.dir.path(), &data, &nodes] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for f in std::fs::read_dir(&data).unwrap().flatten() {
        if f.path().is_file() {
            std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    let out = std::process::Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_setpoint"))
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
