//! Issue 23's smaller items on the runtime's one-shot commands, with the real binary: `kill`
//! asked for more copies than run, or for a workload that does not exist; `apply -f -`;
//! `apply --store memory:`; a refused second `up`.

use std::io::Write;
use std::process::Stdio;

use super::harness::{assert_one_line, sleeping, Rig};
use super::runtime::up;

#[test]
fn kill_says_when_fewer_copies_run_than_asked_and_a_missing_workload_is_bad_input() {
    let mut c = Rig::new();
    up(&mut c, 1);
    c.until("one node reports", |c| {
        c.status()["nodes"].as_array().is_some_and(|n| n.len() == 1)
    });

    // `apply -f -` reads the declaration from standard input.
    let mut child = c
        .command(&["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let text = sleeping("w", 2, "intent", 120, "200ms", "100ms", "500ms");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "workload w created\n");
    c.until("two live copies", |c| c.get("w")["live"] == 2);

    let out = c.run(&["kill", "w", "5"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(
        stdout.lines().all(|l| l.starts_with("killed w-")),
        "{stdout}"
    );
    assert_eq!(
        stderr.trim_end(),
        "note: only 2 copies of 'w' were running: asked to kill 5, killing 2"
    );

    // As `get` and `delete` do, a name that is not declared is the user's to fix: exit 2.
    assert_one_line(
        &c.run(&["kill", "nosuch", "1"]),
        2,
        &["no workload named 'nosuch'"],
        "kill",
    );
    assert_one_line(
        &c.run(&["get", "nosuch"]),
        2,
        &["no workload named 'nosuch'"],
        "get",
    );

    // A second `up` on the same data directory is refused before it writes a line anywhere,
    // so the running one's up.log is as it was.
    let log = c.data_dir().join("up.log");
    let before = std::fs::read_to_string(&log).unwrap();
    assert!(
        before.contains("setpoint up: a controller and 1 agent on"),
        "{before}"
    );
    assert_one_line(
        &c.run(&["up", "--nodes", "1"]),
        2,
        &["node 'node-1' already has an agent on"],
        "second up",
    );
    let after = std::fs::read_to_string(&log).unwrap();
    assert!(
        after.starts_with(&before),
        "the running up.log was rewritten"
    );
    assert_eq!(
        after.matches("setpoint up: a controller").count(),
        1,
        "a refused up wrote its banner into the running one's log: {after}"
    );
}

#[test]
fn apply_to_a_memory_store_is_refused_since_the_declaration_would_die_with_the_command() {
    let c = Rig::new();
    let path = c.write(
        "w.toml",
        &sleeping("w", 1, "intent", 1, "200ms", "100ms", "500ms"),
    );
    assert_one_line(
        &c.run(&["apply", "-f", &path, "--store", "memory:"]),
        2,
        &[
            "--store memory: keeps nothing past this command",
            "sqlite:DIR",
        ],
        "apply memory:",
    );
    // Saying what would change writes nothing, so it is fine there.
    let out = c.ok(&["apply", "-f", &path, "--store", "memory:", "--dry-run"]);
    assert_eq!(out, "workload w: would be created\n");
}
