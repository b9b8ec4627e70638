//! Room on the SQLite store's filesystem: how big its write-ahead log may grow, and what a
//! full disk looks like to the operator.
//!
//! # Why the log is sized by the filesystem
//! SQLite copies its write-ahead log back into the database (a checkpoint) once the log holds
//! `wal_autocheckpoint` pages, 1,000 by default: about 4 MiB. On a filesystem smaller than that
//! the log filled the disk before its first checkpoint, and every write failed from then on,
//! lease renewals included, so every agent fenced its copies; freeing space did not help for
//! long, because the log refilled it within seconds (issue 25: a 2 MiB filesystem "never
//! recovers"). So the log's checkpoint threshold is a sixteenth of the filesystem, between 16
//! pages and SQLite's own 1,000 (no change on an ordinary disk), and `journal_size_limit` cuts
//! the file back to twice that after each checkpoint. A log that has been cut back is rewritten
//! from its start, in place, so once the store is steady the writes that change records in place
//! (lease renewals, reports, loop records) need no new space: they go on while the disk is full,
//! and only writes that grow the database (new events, new keys) fail.
//!
//! # What a full disk does
//! A write that fails on a full disk is refused with [`FULL`] and the directory's free space,
//! after one attempt to cut the log back; nothing already committed is touched (SQLite rolls the
//! transaction back). The daemons log it once, as they do for a store that stops answering, and
//! once when it answers again: writes resume by themselves once space is freed.

use std::path::Path;

/// The first words of the error of a write refused because the filesystem is full.
pub const FULL: &str = "the store's filesystem is full";

/// SQLite's page size for setpoint's stores (the default).
const PAGE: u64 = 4096;

/// Below this much free space at start a daemon says that the store may not fit.
pub const LOW_SPACE: u64 = 16 * 1024 * 1024;

/// The write-ahead log's checkpoint threshold, in pages, for a filesystem of `total` bytes:
/// a sixteenth of it, between 16 pages and SQLite's default of 1,000.
pub fn checkpoint_pages(total: u64) -> u64 {
    (total / 16 / PAGE).clamp(16, 1000)
}

/// The size, in bytes, the log is cut back to after a checkpoint: twice its threshold.
pub fn log_limit(pages: u64) -> u64 {
    2 * pages * PAGE
}

/// The total and free bytes of the filesystem holding `dir`, if it can be asked.
pub fn room(dir: &Path) -> Option<(u64, u64)> {
    let s = rustix::fs::statvfs(dir).ok()?;
    let unit = s.f_frsize.max(1);
    Some((
        s.f_blocks.saturating_mul(unit),
        s.f_bavail.saturating_mul(unit),
    ))
}

/// The error line of a write refused on a full disk. It names no changing figure (such as the
/// bytes free), so that a daemon that logs a condition once per change logs it once.
pub fn full_message(dir: &Path) -> String {
    format!(
        "{FULL} ({}): nothing stored is lost, and writes resume once space is freed",
        dir.display()
    )
}

/// Below this much free space the store's filesystem counts as full for [`alarm`]: sixteen
/// pages, the least the write-ahead log is ever allowed to grow by before a checkpoint.
pub const FULL_BELOW: u64 = 16 * PAGE;

/// The store's alarm ([`crate::store::Store::alarm`]) for the filesystem holding `dir`: a line
/// when it has less than [`FULL_BELOW`] free, `None` otherwise or when it cannot be asked. A
/// reader sees it as a separate process (`get`, `status`), where the daemons' refused writes
/// are only in their logs. On such a disk the writes that add records (a new copy's
/// assignment, an event) are refused; those that rewrite records in place (renewals, reports)
/// go on while the log holds room for them, so the picture may or may not be stale.
pub fn alarm(dir: &Path) -> Option<String> {
    let (_, free) = room(dir)?;
    (free < FULL_BELOW).then(|| {
        format!(
            "{FULL} ({}: {} free): writes that add records (new copies, events) are refused \
             until space is freed there, and reports may stop too; nothing stored is lost",
            dir.display(),
            bytes(free)
        )
    })
}

/// A line for a daemon to log at start when the filesystem holding `dir` is short of room.
pub fn low_space_note(dir: &Path) -> Option<String> {
    let (total, free) = room(dir)?;
    (free < LOW_SPACE).then(|| {
        format!(
            "{} has {} free of {}: the store keeps its write-ahead log within {} there, but it \
             needs room for its records and event log; writes that need more wait until space \
             is freed",
            dir.display(),
            bytes(free),
            bytes(total),
            bytes(log_limit(checkpoint_pages(total)))
        )
    })
}

/// `n` bytes as the largest unit that keeps a whole number above 1, one decimal.
fn bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if n >= size {
            return format!("{:.1} {unit}", n as f64 / size as f64);
        }
    }
    format!("{n} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_threshold_is_a_sixteenth_of_the_filesystem_within_sqlites_bounds() {
        // A 2 MiB filesystem: 32 pages (128 KiB), cut back to 256 KiB.
        assert_eq!(checkpoint_pages(2 << 20), 32);
        assert_eq!(log_limit(32), 256 * 1024);
        // Tiny ones keep a workable log; ordinary disks keep SQLite's default.
        assert_eq!(checkpoint_pages(64 * 1024), 16);
        assert_eq!(checkpoint_pages(64 << 20), 1000);
        assert_eq!(checkpoint_pages(1 << 40), 1000);
    }

    #[test]
    fn sizes_read_in_their_largest_unit() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(2 << 20), "2.0 MiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn the_full_disk_line_names_the_directory_and_says_nothing_is_lost() {
        let line = full_message(Path::new("/"));
        assert!(line.starts_with(FULL), "{line}");
        assert!(line.contains("(/)"), "{line}");
        assert!(line.contains("nothing stored is lost"), "{line}");
    }
}
