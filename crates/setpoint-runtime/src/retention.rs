//! Bounded history: the event log is compacted, copy logs rotate and are removed a retention
//! period after their copy ended.
//!
//! - **Event log** (`/events/…`, [`crate::events`]). The leader removes every entry whose
//!   `at_ms` is older than the retention (default 1 h, as Kubernetes keeps events), in
//!   transactions of at most [`BATCH`] keys, about every [`COMPACT_EVERY_MS`]. It then records
//!   the cutoff under [`COMPACTED`], so that `measure` refuses, clearly, a window that reaches
//!   back past what was kept. The SQLite file does not shrink after deletes, but its free pages
//!   are reused: once a retention period has passed the file stays flat
//!   (docs/performance-runtime.md).
//! - **Copy logs** (`{data-dir}/nodes/logs/{copy}.log`). Each copy's standard output and error
//!   go through a pipe to a reader thread that writes the file and rotates it by size itself,
//!   by rename, keeping `{copy}.log.1` … `{copy}.log.{N-1}` ([`crate::copy_output`]; default
//!   10 MiB × 5). A copy started by an older agent, which writes its file directly, is still
//!   rotated by the agent ([`rotate_log`], copy-and-truncate, off the agent's loop). A log whose
//!   copy no longer runs on the node and that was last written longer ago than the retention
//!   (default 1 h) is removed, with its older files and its FIFO.

use std::collections::BTreeSet;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::events::EVENTS;
use crate::model::{decode, encode};
use crate::store::{Read, Store, StoreError, Txn};

/// The default retention of events and of ended copies' logs: one hour.
pub const DEFAULT_RETENTION_MS: u64 = 3_600_000;
/// The default size at which a copy's log rotates: 10 MiB.
pub const DEFAULT_LOG_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// The default number of files a copy's log keeps, the current one included: 5.
pub const DEFAULT_LOG_MAX_FILES: u32 = 5;
/// The most keys one compaction transaction removes: what a default etcd takes in one
/// transaction (`--max-txn-ops` 128).
pub const BATCH: usize = crate::store::TxnLimits::ETCD_DEFAULT.max_ops;
/// How often the leader compacts, in milliseconds.
pub const COMPACT_EVERY_MS: u64 = 10_000;
/// The key of the compaction record: events before its `before_ms` are gone.
pub const COMPACTED: &str = "/compacted/events";

/// What the last compaction removed: nothing older than `before_ms` is kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compacted {
    /// Events with `at_ms` before this (store milliseconds) have been removed.
    pub before_ms: u64,
}

#[derive(Deserialize)]
struct At {
    at_ms: u64,
}

/// Removes every event older than `now_ms − retention_ms`, at most [`BATCH`] per transaction,
/// and records the cutoff. Returns how many entries it removed.
pub fn compact_events(
    store: &dyn Store,
    now_ms: u64,
    retention_ms: u64,
) -> Result<u64, StoreError> {
    if now_ms.saturating_sub(retention_ms) == 0 {
        return Ok(0);
    }
    let read = store.read(&COMPACTION_PREFIXES)?;
    let plan = plan_compaction(&read, now_ms, retention_ms)?;
    for txn in &plan.txns {
        store.commit(txn)?;
    }
    Ok(plan.removed)
}

/// What a compaction reads, in one [`Store::read`]: the event log and the compaction record.
pub const COMPACTION_PREFIXES: [&str; 2] = [EVENTS, COMPACTED];

/// A compaction's writes, ready to commit one after another.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactionPlan {
    /// The removals, at most [`BATCH`] keys each, then the new record of the cutoff if it moved.
    pub txns: Vec<Txn>,
    /// How many entries the removals remove.
    pub removed: u64,
    /// The time of the oldest event kept (store milliseconds), if any is: until a retention
    /// after it, a compaction would find nothing to remove, unless an event older than it
    /// is written meanwhile (an agent that was cut off flushing late). Its leader reads the log
    /// again no sooner (see [`crate::controller`]); a late old event then waits for that compaction,
    /// which only keeps it longer than the retention, never shorter.
    pub oldest_kept_ms: Option<u64>,
}

/// Decides a compaction on `read` (a read of [`COMPACTION_PREFIXES`]) at `now_ms`: the removal
/// of every event older than `now_ms − retention_ms` and the record of that cutoff.
pub fn plan_compaction(
    read: &Read,
    now_ms: u64,
    retention_ms: u64,
) -> Result<CompactionPlan, StoreError> {
    let cutoff = now_ms.saturating_sub(retention_ms);
    if cutoff == 0 {
        return Ok(CompactionPlan::default());
    }
    let mut old: Vec<String> = Vec::new();
    let mut oldest_kept_ms: Option<u64> = None;
    for e in read.entries.iter().filter(|e| e.key.starts_with(EVENTS)) {
        match serde_json::from_str::<At>(&e.value) {
            Ok(a) if a.at_ms < cutoff => old.push(e.key.clone()),
            Ok(a) => oldest_kept_ms = Some(oldest_kept_ms.map_or(a.at_ms, |o| o.min(a.at_ms))),
            Err(_) => {}
        }
    }
    let mut txns: Vec<Txn> = old
        .chunks(BATCH)
        .map(|chunk| chunk.iter().fold(Txn::new(), |t, k| t.delete(k.clone())))
        .collect();
    let prev = match read.entries.iter().find(|e| e.key == COMPACTED) {
        Some(e) => decode::<Compacted>(e)?.value.before_ms,
        None => 0,
    };
    if cutoff > prev {
        txns.push(Txn::new().put(COMPACTED, encode(&Compacted { before_ms: cutoff })));
    }
    Ok(CompactionPlan {
        txns,
        removed: old.len() as u64,
        oldest_kept_ms,
    })
}

/// Events before this time (store milliseconds) may have been removed; 0 if none was.
pub fn kept_from(store: &dyn Store) -> Result<u64, StoreError> {
    Ok(match store.get(COMPACTED)? {
        Some(e) => decode::<Compacted>(&e)?.value.before_ms,
        None => 0,
    })
}

/// Rotates `path` if it is larger than `max_bytes`: copies it to `{path}.1` and truncates it.
/// Returns whether it rotated.
pub fn rotate_log(path: &Path, max_bytes: u64) -> io::Result<bool> {
    let len = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if len <= max_bytes {
        return Ok(false);
    }
    std::fs::copy(path, rotated(path))?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .set_len(0)?;
    Ok(true)
}

/// The rotated file of log `path`: `{path}.1`.
pub fn rotated(path: &Path) -> std::path::PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".1");
    p.into()
}

/// Removes the logs in `dir` of copies not in `running` that were last written more than
/// `retention_ms` before `now_ms` (wall-clock milliseconds). Returns how many files it removed.
pub fn sweep_logs(
    dir: &Path,
    running: &BTreeSet<String>,
    now_ms: u64,
    retention_ms: u64,
) -> io::Result<u64> {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir)?.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(copy) = log_file_copy(name) else {
            continue;
        };
        if running.contains(copy) {
            continue;
        }
        let Ok(modified) = entry.metadata().and_then(|m| m.modified()) else {
            continue;
        };
        let at = modified
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        if at.saturating_add(retention_ms) < now_ms {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(removed)
}

/// The copy a file in the log folder belongs to: `{copy}.log`, `{copy}.log.{n}` or
/// `{copy}.log.pipe`.
fn log_file_copy(name: &str) -> Option<&str> {
    if let Some(copy) = name.strip_suffix(".log") {
        return Some(copy);
    }
    let (stem, tail) = name.rsplit_once('.')?;
    let copy = stem.strip_suffix(".log")?;
    (tail == "pipe" || (!tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit())))
        .then_some(copy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{append_all, round_key};
    use crate::store::MemoryStore;

    #[test]
    fn events_older_than_the_retention_go_in_batches_and_the_cutoff_is_recorded() {
        let store = MemoryStore::new();
        let entries: Vec<(String, String)> = (0..1200u64)
            .map(|i| {
                (
                    round_key("w", i * 10, i),
                    format!("{{\"at_ms\":{}}}", i * 10),
                )
            })
            .collect();
        append_all(&store, entries).unwrap();
        let before = store.revision().unwrap();
        // Keep the last 1000 ms of 12 000: entries at 11 000 and later.
        let removed = compact_events(&store, 12_000, 1_000).unwrap();
        assert_eq!(removed, 1100);
        let left = store.read(&[EVENTS]).unwrap().entries;
        assert_eq!(left.len(), 100);
        assert!(left[0].key.contains(&format!("{:015}", 11_000)));
        // Batches of at most what a default etcd takes (128), then the record.
        assert_eq!(BATCH, 128);
        assert_eq!(
            store.revision().unwrap(),
            before + 1100u64.div_ceil(128) + 1
        );
        assert_eq!(kept_from(&store).unwrap(), 11_000);
        assert_eq!(compact_events(&store, 12_000, 1_000).unwrap(), 0);
    }

    #[test]
    fn a_log_rotates_past_its_limit_and_old_logs_of_ended_copies_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("w-0.log");
        std::fs::write(&log, vec![b'x'; 100]).unwrap();
        assert!(!rotate_log(&log, 100).unwrap());
        std::fs::write(&log, vec![b'y'; 101]).unwrap();
        assert!(rotate_log(&log, 100).unwrap());
        assert_eq!(std::fs::metadata(&log).unwrap().len(), 0);
        assert_eq!(std::fs::read(rotated(&log)).unwrap(), vec![b'y'; 101]);
        std::fs::write(dir.path().join("w-1.log"), "bye").unwrap();
        std::fs::write(dir.path().join("w-1.log.3"), "old").unwrap();
        std::fs::write(dir.path().join("w-1.log.x"), "not a log").unwrap();
        let now = crate::store::wall_ms();
        let running: BTreeSet<String> = ["w-0".to_owned()].into();
        // Fresh files stay; the running copy's stay whatever their age.
        assert_eq!(sweep_logs(dir.path(), &running, now, 60_000).unwrap(), 0);
        assert_eq!(
            sweep_logs(dir.path(), &running, now + 120_000, 60_000).unwrap(),
            2
        );
        assert!(dir.path().join("w-1.log.x").exists());
        assert!(!dir.path().join("w-1.log").exists());
        assert!(log.exists() && rotated(&log).exists());
        assert_eq!(
            sweep_logs(dir.path(), &BTreeSet::new(), now + 120_000, 60_000).unwrap(),
            2
        );
    }
}
