//! A runtime you can trust with real processes (issue 11), on the real binary: crash-loop
//! backoff, clean shutdown through a closed pipe, idle reasons, refused settings.
//! Every wait polls with a deadline; dropping a [`Rig`] kills every process it started and
//! every copy they left.

use std::process::{Output, Stdio};
use std::time::Duration;

use rustix::process::Signal;
use serde_json::Value;
use setpoint_runtime::testing::{wait_until, Wait};

use super::harness::{assert_one_line, Rig, Start};

const DEADLINE: Duration = Duration::from_secs(40);

/// A rig whose waits last up to 40s.
pub(super) fn rig() -> Rig {
    Rig::new().deadline(DEADLINE)
}

/// `setpoint up` with `nodes` nodes and fast reports, stderr to `stderr`; the log that `up`
/// writes itself (`DATA/up.log`) is shown when a wait times out.
pub(super) fn up(r: &mut Rig, nodes: u32, stderr: Stdio) {
    let n = nodes.to_string();
    r.spawn(Start::new("up", &["up", "--nodes", &n, "--report-every", "50ms"]).stderr(stderr));
    let log = r.data_dir().join("up.log");
    r.watch_log("up", log);
}

/// Writes `text` to `w.toml` and applies it, to the end of the command.
pub(super) fn apply(r: &Rig, text: &str) -> Output {
    r.apply_file("w.toml", text)
}

/// `get NAME` as JSON, `null` while the command fails (no store yet).
pub(super) fn get(r: &Rig, name: &str) -> Value {
    r.try_get(name).unwrap_or_default()
}

/// What `up` has written to its own log, `DATA/up.log`.
pub(super) fn up_log(r: &Rig) -> String {
    std::fs::read_to_string(r.data_dir().join("up.log")).unwrap_or_default()
}

/// Declares `n` copies of `sleep 300` and waits until they run.
fn sleepers(r: &Rig, n: usize) {
    r.until("the store exists", |r| r.store_file().is_file());
    let out = apply(
        r,
        &format!(
            "[[workload]]\nname = \"sleeper\"\ncommand = [\"sleep\", \"300\"]\ncopies = {n}\nperiod = \"100ms\"\nstartup = \"50ms\"\ngrace = \"500ms\"\n"
        ),
    );
    assert!(out.status.success());
    r.until("the copies run", |r| r.marked().len() == n);
}

/// Milliseconds since midnight of a log line's `HH:MM:SS.mmm` stamp.
pub(super) fn stamp_ms(line: &str) -> u64 {
    let t = line.split_whitespace().next().unwrap();
    let (hms, ms) = t.split_once('.').unwrap();
    let p: Vec<u64> = hms.split(':').map(|x| x.parse().unwrap()).collect();
    ((p[0] * 60 + p[1]) * 60 + p[2]) * 1000 + ms.parse::<u64>().unwrap()
}

/// The times (ms since midnight) at which `up`'s log says an attempt of `ghost` was created.
fn created_ms(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains(GHOST_CREATED))
        .map(stamp_ms)
        .collect()
}

const GHOST_CREATED: &str = "loop ghost: target 2, counted 0: created ghost-";

const CRASHING: &str = r#"
[[workload]]
name = "ghost"
command = ["false"]
copies = 2
period = "100ms"
startup = "100ms"
backoff = { initial = "400ms", max = "1600ms", reset = "1h" }

[[workload]]
name = "missing"
command = ["/nonexistent/setpoint-test-binary"]
copies = 2
controller = "named"
period = "100ms"
startup = "100ms"
backoff = { initial = "400ms", max = "1600ms" }
"#;

#[test]
fn a_failing_command_and_a_missing_binary_back_off_on_the_kubelet_schedule() {
    let mut r = rig();
    up(&mut r, 2, Stdio::null());
    r.until("the store exists", |r| r.store_file().is_file());
    assert!(apply(&r, CRASHING).status.success());
    r.until("ghost has failed 5 attempts", |r| {
        get(r, "ghost")["backoff"][0]["failures"]
            .as_u64()
            .is_some_and(|f| f >= 5)
    });
    let g = get(&r, "ghost");
    let b = &g["backoff"][0];
    assert_eq!(b["key"], "ghost");
    assert_eq!(b["last_exit"], "exit status 1");
    // Two copies per attempt, every one a restart (the last attempt's second copy may not be
    // collected yet).
    let failures = b["failures"].as_u64().unwrap();
    assert!(b["restarts"].as_u64().unwrap() >= 2 * failures - 1, "{g}");
    assert!(b["next_try_in_ms"].as_u64().unwrap() <= 1600, "{g}");
    // The attempts, from the log: each creation waits the doubled delay after the last
    // failure (400, 800, 1600, 1600 ms), never less and never more than a few periods later.
    let log = up_log(&r);
    let created = created_ms(&log);
    let failed: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("loop ghost: ghost-") && l.contains("next try of ghost in"))
        .map(stamp_ms)
        .collect();
    assert!(created.len() >= 5 && failed.len() >= 4, "{log}");
    for (i, w) in created.windows(2).take(4).enumerate() {
        let want = [400, 800, 1600, 1600][i];
        let gap = w[1] - w[0];
        assert!(
            gap >= want && gap <= want + 700,
            "attempt {i}: {gap} ms after the one before, want {want} ms (+ up to 700)\n{log}"
        );
    }
    // One log line per failed copy, not one per period: per attempt at most its creation, its
    // collection (once or per copy), the start of the backoff and, under load, of a wait; at
    // 1600 ms of backoff and U = 100 ms a line per period would be 16 per attempt.
    let ghost_lines = log.lines().filter(|l| l.contains("loop ghost:")).count();
    let restarts = log
        .lines()
        .filter(|l| l.contains("loop ghost: ghost-") && l.contains("failed to start"))
        .count();
    assert!(ghost_lines <= restarts + 5 * created.len() + 2, "{log}");
    // `named` backs off per name; a missing binary is a failed start too.
    r.until("missing has backed off twice per name", |r| {
        let g = get(r, "missing");
        g["backoff"]
            .as_array()
            .is_some_and(|b| b.len() == 2 && b.iter().all(|k| k["failures"].as_u64() >= Some(2)))
    });
    let m = get(&r, "missing");
    assert_eq!(m["backoff"][0]["key"], "missing-0");
    assert!(m["backoff"][0]["last_exit"]
        .as_str()
        .unwrap()
        .starts_with("failed to start"));
    // The table says BACKOFF with the exit, the restarts and the next try.
    let table = r.ok(&["get"]);
    let row = table.lines().find(|l| l.starts_with("ghost")).unwrap();
    assert!(
        row.contains("BACKOFF ghost-") && row.contains("exit status 1") && row.contains("restarts")
            || row.contains("idle: waiting for expectations"),
        "{table}"
    );
}

#[test]
fn ctrl_c_with_stderr_through_a_closed_pipe_still_stops_every_copy() {
    let mut r = rig();
    let (reader, writer) = std::io::pipe().unwrap();
    up(&mut r, 2, Stdio::from(writer));
    sleepers(&r, 4);
    // The reader goes first, as `tee` does when Ctrl-C reaches the whole pipeline.
    drop(reader);
    r.send("up", Signal::INT);
    let status = r.wait_exit_within("up", Duration::from_secs(15), Duration::from_millis(20));
    assert!(status.success(), "{status:?}\n{}", up_log(&r));
    assert!(r.marked().is_empty(), "copies survived: {:?}", r.marked());
    // The log kept what stderr lost.
    let log = up_log(&r);
    assert!(log.contains("setpoint: SIGINT: shutting down"), "{log}");
    assert!(log.contains("agent node-1: stopped"), "{log}");
}

#[test]
fn sighup_and_sigterm_stop_up_cleanly_too() {
    for sig in [Signal::HUP, Signal::TERM] {
        let mut r = rig();
        up(&mut r, 1, Stdio::null());
        sleepers(&r, 2);
        let status = r.signal("up", sig);
        assert!(status.success(), "{sig:?}: {status:?}");
        assert!(r.marked().is_empty(), "{sig:?}: copies survived");
    }
}

#[test]
fn a_controller_with_no_live_node_says_so_once_and_get_and_status_show_it() {
    let mut r = rig();
    r.start("controller", &["controller", "--lease-ttl", "1s"]);
    r.until("the store exists", |r| r.store_file().is_file());
    assert!(apply(
        &r,
        "[[workload]]\nname = \"lonely\"\ncommand = [\"sleep\", \"60\"]\ncopies = 2\nperiod = \"100ms\"\n"
    )
    .status
    .success());
    r.until("get shows the reason", |r| {
        get(r, "lonely")["idle"]["reason"] == "no_live_node"
    });
    std::thread::sleep(Duration::from_millis(1000));
    let text = r.log("controller");
    let said = text.matches("loop lonely: idle: no live node").count();
    assert_eq!(said, 1, "said once, not every period:\n{text}");
    let status = r.ok(&["status"]);
    assert!(
        status.contains("workload lonely: idle, no live node"),
        "{status}"
    );
    // A standby says it is one, once.
    r.start("standby", &["controller"]);
    let path = r.log_path("standby");
    r.until("the standby says so", |_| {
        std::fs::read_to_string(&path).is_ok_and(|t| t.contains("standby:"))
    });
    std::thread::sleep(Duration::from_millis(500));
    let t = std::fs::read_to_string(&path).unwrap();
    assert_eq!(t.matches("standby:").count(), 1, "{t}");
}

fn refused(r: &Rig, body: &str, field: &str) {
    let out = apply(
        r,
        &format!("[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"60\"]\ncopies = 3\n{body}\n"),
    );
    assert_one_line(&out, 2, &[field, "accepted"], body);
}

#[test]
fn out_of_range_backoff_and_rollout_settings_are_refused_and_the_earlier_declaration_stays() {
    let r = rig();
    let first = apply(
        &r,
        "[[workload]]\nname = \"w\"\ncommand = [\"sleep\", \"60\"]\ncopies = 1\nbackoff = { initial = \"2s\" }\n",
    );
    assert!(first.status.success());
    let before = r.ok(&["get", "--format", "json"]);
    for (body, field) in [
        ("backoff = { initial = \"0\" }", "backoff.initial"),
        ("backoff = { initial = \"-5s\" }", "backoff.initial"),
        (
            "backoff = { initial = \"25h\", max = \"25h\" }",
            "backoff.initial",
        ),
        (
            "backoff = { initial = \"1m\", max = \"1s\" }",
            "backoff.max",
        ),
        ("backoff = { reset = \"0\" }", "backoff.reset"),
        (
            "rollout = { max_surge = 0, max_unavailable = 0 }",
            "rollout.max_unavailable",
        ),
        ("rollout = { max_surge = \"-5%\" }", "rollout.max_surge"),
        (
            "rollout = { progress_deadline = \"0\" }",
            "rollout.progress_deadline",
        ),
    ] {
        refused(&r, body, field);
    }
    assert_eq!(r.ok(&["get", "--format", "json"]), before);
}

fn web(command: &str, extra: &str) -> String {
    format!(
        "[[workload]]\nname = \"web\"\ncommand = {command}\ncopies = 4\nperiod = \"100ms\"\nstartup = \"200ms\"\ngrace = \"300ms\"\nrollout = {{ max_surge = 1, max_unavailable = 0{extra} }}\nbackoff = {{ initial = \"5s\" }}\n"
    )
}

/// The command line of process `pid`, its arguments joined by spaces.
pub(super) fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
        .trim()
        .to_owned()
}

#[test]
fn a_changed_command_rolls_out_within_the_surge_and_a_failing_one_stalls_with_the_old_copies_running(
) {
    let mut r = rig();
    up(&mut r, 2, Stdio::null());
    r.until("the store exists", |r| r.store_file().is_file());
    assert!(apply(&r, &web(r#"["sleep", "300"]"#, "")).status.success());
    r.until("4 copies on the ledger", |r| {
        get(r, "web")["on_ledger"] == 4
    });
    assert_eq!(get(&r, "web")["generation"], 1);

    // --dry-run says what would change and writes nothing.
    let path = r.dir().join("w.toml");
    std::fs::write(&path, web(r#"["sleep", "301"]"#, "")).unwrap();
    let plan = r.ok(&["apply", "-f", path.to_str().unwrap(), "--dry-run"]);
    assert_eq!(
        plan,
        "workload web: command changed: generation 1 -> 2, a rolling update replaces every copy (max surge 1, max unavailable 0)\n"
    );
    assert_eq!(get(&r, "web")["generation"], 1);

    assert!(apply(&r, &web(r#"["sleep", "301"]"#, "")).status.success());
    // Polled every 20ms, to see any moment with too many or too few copies.
    let mut wait = Wait::new("the rollout to finish", DEADLINE, Duration::from_millis(20));
    let (mut most, mut fewest, mut progress_shown) = (0, usize::MAX, false);
    loop {
        let procs = r.marked();
        most = most.max(procs.len());
        fewest = fewest.min(procs.len());
        let g = get(&r, "web");
        if g["rollout"].is_object() && r.ok(&["get"]).contains("/4 updated") {
            progress_shown = true;
        }
        if g["rollout"].is_null()
            && g["updated"] == 4
            && procs.len() == 4
            && procs.iter().all(|p| cmdline(p.pid) == "sleep 301")
        {
            break;
        }
        match wait.again() {
            Ok(pause) => std::thread::sleep(pause),
            Err(t) => panic!("{t}: rollout did not finish: {g}\n{}", r.logs()),
        }
    }
    assert!(most <= 5, "{most} copies ran at once: desired 4 + surge 1");
    assert!(
        fewest >= 4,
        "{fewest} copies ran at once: desired 4 - unavailable 0"
    );
    assert!(progress_shown, "get showed the progress");
    assert_eq!(get(&r, "web")["generation"], 2);
    let log = up_log(&r);
    assert!(
        log.contains("loop web: rollout of generation 2 complete: 4/4 updated"),
        "{log}"
    );

    // A new command that never starts: the rollout stalls after its deadline and stops there,
    // the old copies still running.
    assert!(
        apply(&r, &web(r#"["false"]"#, r#", progress_deadline = "1s""#))
            .status
            .success()
    );
    r.until("the rollout stalls", |r| {
        get(r, "web")["rollout"]["stalled"] == true
    });
    let procs = r.marked();
    assert_eq!(procs.len(), 4);
    assert!(procs.iter().all(|p| cmdline(p.pid) == "sleep 301"));
    let table = r.ok(&["get"]);
    assert!(table.contains("rollout STALLED 0/4 updated"), "{table}");
    assert_eq!(get(&r, "web")["idle"]["reason"], "rollout_paused");
}

#[test]
fn logs_prints_tails_follows_rotates_and_history_is_removed_after_its_retention() {
    let mut r = rig();
    r.spawn(
        Start::new(
            "up",
            &[
                "up",
                "--nodes",
                "1",
                "--report-every",
                "50ms",
                "--log-max-size",
                "1KiB",
                "--log-retention",
                "2s",
                "--event-retention",
                "2s",
            ],
        )
        .stderr(Stdio::null()),
    );
    r.until("the store exists", |r| r.store_file().is_file());
    let start_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    assert!(apply(
        &r,
        "[[workload]]\nname = \"talker\"\ncommand = \"echo hello $SETPOINT_COPY; i=0; while :; do echo line $i; i=$((i+1)); sleep 0.005; done\"\ncopies = 1\nperiod = \"100ms\"\nstartup = \"50ms\"\ngrace = \"300ms\"\n"
    )
    .status
    .success());
    let logs = r.data_dir().join("nodes").join("logs");
    r.until("the log rotated", |_| logs.join("talker-0.log.1").is_file());
    let tail = r.ok(&["logs", "talker-0", "--tail", "2"]);
    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(lines.len(), 2, "{tail}");
    assert!(lines.iter().all(|l| l.starts_with("line ")), "{tail}");
    // Cut before the limit, by the copy's output reader itself.
    let size = std::fs::metadata(logs.join("talker-0.log")).unwrap().len();
    assert!(size <= 1024, "{size} bytes");

    // A copy writing as fast as it can (`yes`) stays within 1 KiB × 5 files, and the other
    // copy's output goes on.
    assert!(apply(
        &r,
        "[[workload]]\nname = \"talker\"\ncommand = \"echo hello $SETPOINT_COPY; i=0; while :; do echo line $i; i=$((i+1)); sleep 0.005; done\"\ncopies = 1\nperiod = \"100ms\"\nstartup = \"50ms\"\ngrace = \"300ms\"\n\n[[workload]]\nname = \"flood\"\ncommand = \"yes\"\ncopies = 1\nperiod = \"100ms\"\nstartup = \"50ms\"\ngrace = \"300ms\"\n"
    )
    .status
    .success());
    r.until("the flood rotated to its last file", |_| {
        logs.join("flood-0.log.4").is_file()
    });
    let before = r.ok(&["logs", "talker-0", "--tail", "1"]);
    std::thread::sleep(Duration::from_millis(1500));
    let flood: u64 = std::fs::read_dir(&logs)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("flood-0.log"))
        // A file can be renamed or removed by a rotation between the listing and the stat;
        // what is gone takes no space.
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    assert!(flood <= 5 * 1024, "{flood} bytes of flood");
    assert!(!logs.join("flood-0.log.5").exists());
    assert_ne!(
        r.ok(&["logs", "talker-0", "--tail", "1"]),
        before,
        "the talker goes on"
    );
    r.ok(&["delete", "flood"]);

    // --follow prints new lines as they come and ends when the copy ends.
    let mut follow = r
        .command(&["logs", "talker-0", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    r.ok(&["delete", "talker"]);
    wait_until(
        Wait::new(
            "--follow to end with the copy",
            Duration::from_secs(15),
            Duration::from_millis(50),
        ),
        || follow.try_wait().unwrap().is_some(),
        || r.logs(),
    );
    let mut out = String::new();
    std::io::Read::read_to_string(follow.stdout.as_mut().unwrap(), &mut out).unwrap();
    let numbers: Vec<u64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("line ")?.parse().ok())
        .collect();
    assert!(numbers.len() > 50, "{} lines followed", numbers.len());
    assert!(
        numbers.windows(2).all(|w| w[1] == w[0] + 1),
        "in order, no line lost to a rotation"
    );

    // History is bounded: the ended copy's logs go after 2 s (swept every 10 s), the events
    // before the retention are removed, and measure refuses a window reaching back there.
    r.until("the ended copy's logs are removed", |_| {
        !logs.join("talker-0.log").exists() && !logs.join("talker-0.log.1").exists()
    });
    let out = r.run(&["measure", "--since", &start_ms]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("retention") && err.contains("accepted"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let bad = r.run(&["logs", "nobody-0"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no copy 'nobody-0' in the store"));
}

#[test]
fn the_lab_predicts_the_runtimes_crash_loop_attempt_times() {
    // Runtime: U = 200 ms, B = 300 ms, backoff 400 ms doubling to 1600 ms; `false` ends a few
    // tens of milliseconds after its creation. Lab, in ticks of 100 ms: U = 2, B = 3, each
    // copy ends 1 tick after creation, backoff 4 doubling to 16.
    use setpoint_core::backoff::BackoffPolicy;
    use setpoint_sim::scenario::{
        creation_times, ControllerSpec, Event, Scenario, ScenarioSpec, TimedEvent, Workload,
    };
    let lab = Scenario::new(ScenarioSpec {
        period: 2,
        duration: 200,
        delay: setpoint_sim::delay::DelayModel::Fixed(0),
        controller: ControllerSpec::new(setpoint_core::ControllerKind::Intent),
        workloads: vec![Workload {
            name: "ghost".into(),
            desired: 2,
            startup: 3,
        }],
        events: vec![TimedEvent {
            at: 0,
            workload: None,
            event: Event::CrashLoop {
                after: 1,
                starts: 1000,
                backoff: BackoffPolicy {
                    initial: 4,
                    max: 16,
                    reset: 100_000,
                },
            },
        }],
        unique_names: true,
        seed: 1,
        pipeline: Default::default(),
        startup_model: None,
    })
    .unwrap();
    let predicted: Vec<u64> = creation_times(&lab, 1, 0)
        .unwrap()
        .windows(2)
        .map(|w| (w[1] - w[0]) * 100)
        .take(4)
        .collect();
    assert_eq!(predicted, [600, 1000, 1800, 1800]);

    let mut r = rig();
    up(&mut r, 1, Stdio::null());
    r.until("the store exists", |r| r.store_file().is_file());
    assert!(apply(&r, "[[workload]]\nname = \"ghost\"\ncommand = [\"false\"]\ncopies = 2\nperiod = \"200ms\"\nstartup = \"300ms\"\nbackoff = { initial = \"400ms\", max = \"1600ms\" }\n")
        .status
        .success());
    r.until("five attempts", |r| {
        up_log(r).matches(GHOST_CREATED).count() >= 5
    });
    let log = up_log(&r);
    let created = created_ms(&log);
    let real: Vec<u64> = created.windows(2).map(|w| w[1] - w[0]).take(4).collect();
    for (i, (p, m)) in predicted.iter().zip(&real).enumerate() {
        // A real exit is seen up to a period later than the lab's whole tick under load.
        assert!(
            m.abs_diff(*p) <= 250,
            "attempt {i}: lab {p} ms after the one before, runtime {m} ms\n{log}"
        );
    }
    println!("crash loop attempt gaps: lab {predicted:?} ms, runtime {real:?} ms");
}
