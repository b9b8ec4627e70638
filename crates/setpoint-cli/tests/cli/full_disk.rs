//! Issue 25, part 4: the SQLite store on a small filesystem, and a full disk, on the real binary.
//!
//! The data directory is a 2 MiB tmpfs mounted by the test (root only; without root, or where
//! tmpfs cannot be mounted, it says why it skips). Before the fix the store's write-ahead log
//! grew to SQLite's 4 MiB checkpoint threshold, so it filled the filesystem within a minute at
//! one report a second (seconds at the 50 ms the test uses), every write failed from then on,
//! lease renewals included, and freeing space did not last.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::harness::{sleeping, Rig};
use super::runtime::up_with;

/// A tmpfs mounted at a directory, unmounted (lazily, so a panic with processes still running
/// cannot leave it) when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Result<Self, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("needs root to mount a small tmpfs".into());
        }
        std::fs::create_dir_all(at).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Self(at.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn free_bytes(dir: &Path) -> u64 {
    let s = rustix::fs::statvfs(dir).unwrap();
    s.f_bavail * s.f_frsize
}

fn len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Writes zeros to `path` until the filesystem refuses more.
fn fill(path: &Path) -> u64 {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 4096];
    let mut n = 0;
    while f.write_all(&block).is_ok() {
        n += block.len() as u64;
    }
    let _ = f.flush();
    n
}

#[test]
fn a_two_mib_data_directory_keeps_its_log_small_survives_a_full_disk_and_recovers() {
    let mut c = Rig::new();
    let data = c.data_dir();
    let _fs = match Tmpfs::mount(&data, "2m") {
        Ok(m) => m,
        Err(why) => {
            eprintln!("full_disk::a_two_mib_data_directory_…: skipped: {why}");
            return;
        }
    };
    // A store that keeps writing: every report (a resync every R) and every round written,
    // as before reports on change and idle rounds left out; a quiet cluster would write
    // nothing for the full disk to refuse.
    up_with(
        &mut c,
        2,
        &["--report-resync", "50ms", "--round-resync", "0s"],
    );
    c.apply(&sleeping("web", 3, "intent", 3600, "1s", "0s", "1s"));
    c.until("3 copies live", |c| {
        c.try_get("web").is_some_and(|g| g["live"] == 3)
    });
    assert!(
        c.log("up").contains("free of 2.0 MiB"),
        "up says at start that the filesystem is short of room:\n{}",
        c.log("up")
    );

    // 15 s of reports every 50 ms from two agents: the log stays within twice its threshold
    // (2 × 32 pages of 4 KiB on 2 MiB) plus the frames of one commit.
    let wal = c.store_file().with_extension("sqlite-wal");
    let (mut most, mut least_free) = (0, u64::MAX);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(15) {
        most = most.max(len(&wal));
        least_free = least_free.min(free_bytes(&data));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        most <= 320 * 1024,
        "the write-ahead log reached {most} bytes"
    );
    assert!(least_free > 512 * 1024, "free space fell to {least_free}");
    assert_eq!(c.get("web")["live"], 3, "{}", c.logs());

    // The disk full for 12 s, past the node timeout (10 s): every write that needs room is
    // refused, lease renewals among them once the log has no room left, so the agents may
    // fence. What must hold: each part says so in one line per condition, not at every try
    // (the agents try every 50 ms: hundreds of lines before), and nothing stored is lost.
    let filler = data.join("filler");
    fill(&filler);
    // `get` and `status`, processes of their own, say the disk is full, where, and that what
    // they show may be stale: the parts' refused writes are only in their logs.
    let get = c.json(&["get", "--format", "json"]);
    let said = get["problems"]["store"].as_str().unwrap_or_default();
    assert!(
        said.starts_with("the store's filesystem is full")
            && said.contains(&data.display().to_string())
            && said.contains("stale"),
        "{get}"
    );
    let status = c.ok(&["status"]);
    assert!(
        status.contains("problem store: the store's filesystem is full"),
        "{status}"
    );
    // A command's write either fits in room the log already holds or is refused in the same
    // one line (exit 1), never a panic.
    // Kills, each a write of its own, and whose replacements are writes of new keys (an
    // assignment, a placement, events), until a part of `up` meets the full disk: a store that
    // only rewrites its reports in place may find room in pages it already holds for a while
    // (a CI rehearsal once went 12 s without a refused write). At most 30 s, then at least 12 s
    // in all, past the node timeout.
    let full_at = Instant::now();
    let met_full = |c: &Rig| c.log("up").contains("the store's filesystem is full");
    loop {
        let kill = c.run(&["kill", "web", "1"]);
        let said = String::from_utf8_lossy(&kill.stderr);
        match kill.status.code() {
            Some(0) => {}
            Some(1) => assert!(
                said.trim().lines().count() == 1 && said.contains("the store's filesystem is full"),
                "{said}"
            ),
            other => panic!("kill on a full disk exited {other:?}: {said}"),
        }
        if met_full(&c) || full_at.elapsed() > Duration::from_secs(30) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(12).saturating_sub(full_at.elapsed()));
    let window = full_at.elapsed().as_secs().max(12) as usize;
    let log = c.log("up");
    let full_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("the store's filesystem is full"))
        .collect();
    assert!(
        !full_lines.is_empty(),
        "a refused write says the disk is full, where and what it costs:\n{log}"
    );
    assert!(
        full_lines.iter().all(|l| {
            l.contains(&data.display().to_string()) && l.contains("nothing stored is lost")
        }),
        "{full_lines:#?}"
    );
    assert!(
        full_lines.len() <= window,
        "the full disk was logged {} times in {window} s, not once per condition:\n{}",
        full_lines.len(),
        full_lines.join("\n")
    );

    // Space freed: writes resume by themselves, the declaration is intact, the nodes rejoin and
    // the workload is whole again.
    std::fs::remove_file(&filler).unwrap();
    c.until("3 copies live again after the space was freed", |c| {
        c.try_get("web")
            .is_some_and(|g| g["live"] == 3 && g["desired"] == 3)
    });
    let get = c.json(&["get", "--format", "json"]);
    assert!(get["problems"]["store"].is_null(), "{get}");
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        most = most.max(len(&wal));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        most <= 320 * 1024,
        "the write-ahead log reached {most} bytes"
    );
}
