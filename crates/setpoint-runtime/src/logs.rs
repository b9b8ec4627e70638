//! A copy's output, as `setpoint logs COPY [--tail N] [--follow]` prints it.
//!
//! An agent appends each copy's standard output and error to `{state_dir}/logs/{copy}.log`
//! (`{data-dir}/nodes/logs/…` for the CLI), rotated by rename to `{copy}.log.1`, `.log.2`, …
//! past its size limit ([`crate::copy_output`]) and removed a retention period after the copy
//! ended ([`crate::retention`]). Reading needs no agent: the files are the record.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The log file of `copy` under an agent's `state_dir`.
pub fn log_path(state_dir: &Path, copy: &str) -> PathBuf {
    state_dir.join("logs").join(format!("{copy}.log"))
}

/// Whether `copy` can name a log file: a copy identity, `{workload}-{n}`, of `a-z`, `0-9`
/// and `-` only (so no path can be smuggled in).
pub fn valid_copy_name(copy: &str) -> bool {
    !copy.is_empty()
        && copy.len() <= crate::spec::MAX_NAME + 21
        && copy
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The most older files [`read`] looks for.
const MAX_OLDER: u32 = 10_000;

/// The last `tail` lines (all, if `None`) of `copy`'s output, the rotated files first, oldest
/// first (`.log.N` … `.log.1`, then `.log`). `Ok(None)` if the copy has no log.
pub fn read(state_dir: &Path, copy: &str, tail: Option<usize>) -> io::Result<Option<Vec<u8>>> {
    let path = log_path(state_dir, copy);
    let older = (1..MAX_OLDER)
        .take_while(|&n| crate::copy_output::numbered(&path, n).exists())
        .last()
        .unwrap_or(0);
    let mut text = Vec::new();
    for n in (1..=older).rev() {
        match std::fs::read(crate::copy_output::numbered(&path, n)) {
            Ok(t) => text.extend_from_slice(&t),
            // Rotated away meanwhile: what is left is still in order.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    match std::fs::read(&path) {
        Ok(t) => text.extend_from_slice(&t),
        Err(e) if e.kind() == io::ErrorKind::NotFound && !text.is_empty() => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    }
    Ok(Some(match tail {
        None => text,
        Some(n) => last_lines(&text, n).to_vec(),
    }))
}

/// A piece of a copy's log, as [`read_range`] reads it for a reader on another host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// Where `bytes` start, in bytes from the start of the log's oldest kept part.
    pub from: u64,
    /// The bytes read.
    pub bytes: Vec<u8>,
    /// The log's length when read, in bytes, all kept parts together.
    pub len: u64,
}

/// At most `max` bytes of `copy`'s log (its kept parts joined, oldest first, as [`read`]
/// joins them) from byte `from`, or, with `tail`, from the start of its last `tail` lines.
/// A `from` past the end means the log was rotated since: reading goes on from the start of
/// the current part. `Ok(None)` if the copy has no log. Only what is returned is read (the
/// tail's start is found in the last parts).
pub fn read_range(
    state_dir: &Path,
    copy: &str,
    from: u64,
    tail: Option<usize>,
    max: usize,
) -> io::Result<Option<Range>> {
    let path = log_path(state_dir, copy);
    // The kept parts, oldest first: `.log.N … .log.1`, then `.log`, as [`read`] joins them.
    let older = (1..MAX_OLDER)
        .take_while(|&n| crate::copy_output::numbered(&path, n).exists())
        .last()
        .unwrap_or(0);
    let mut parts: Vec<PathBuf> = (1..=older)
        .rev()
        .map(|n| crate::copy_output::numbered(&path, n))
        .collect();
    parts.push(path);
    let mut lens = vec![0u64; parts.len()];
    let mut found = false;
    for (i, p) in parts.iter().enumerate() {
        match std::fs::metadata(p) {
            Ok(m) => (lens[i], found) = (m.len(), true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    if !found {
        return Ok(None);
    }
    let len: u64 = lens.iter().sum();
    let start = match tail {
        Some(n) => {
            // Lines are found from the end; a tail is at most `max` bytes from it at first
            // (the reader asks for the rest from where it stopped).
            let window = (max as u64).saturating_mul(4).min(len);
            let back = read_span(&parts, &lens, len - window, window as usize)?;
            len - last_lines(&back, n).len() as u64
        }
        // Rotated since: go on from the start of the newest part.
        None if from > len => len - lens[lens.len() - 1],
        None => from,
    };
    let want = (len - start).min(max as u64) as usize;
    Ok(Some(Range {
        from: start,
        bytes: read_span(&parts, &lens, start, want)?,
        len,
    }))
}

/// `want` bytes from `at` of the parts joined, whose lengths are `lens` (fewer if a part
/// shrank meanwhile).
fn read_span(parts: &[PathBuf], lens: &[u64], at: u64, want: usize) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(want);
    let mut base = 0;
    let end = at + want as u64;
    for (p, &l) in parts.iter().zip(lens) {
        if at.max(base) < (base + l).min(end) {
            let lo = at.max(base) - base;
            let mut f = std::fs::File::open(p)?;
            f.seek(SeekFrom::Start(lo))?;
            f.take((base + l).min(end) - base - lo)
                .read_to_end(&mut out)?;
        }
        base += l;
    }
    Ok(out)
}

/// The last `n` lines of `text` (a final line without a newline counts as a line).
pub fn last_lines(text: &[u8], n: usize) -> &[u8] {
    if n == 0 {
        return &[];
    }
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let mut seen = 0;
    for (i, &b) in body.iter().enumerate().rev() {
        if b == b'\n' {
            seen += 1;
            if seen == n {
                return &text[i + 1..];
            }
        }
    }
    text
}

/// Reads what is appended to a log after a point, across rotations.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    pos: u64,
    /// The inode of the file read so far, to tell a rotation by rename.
    ino: Option<u64>,
}

impl Follower {
    /// Follows `copy`'s log from its current end.
    pub fn new(state_dir: &Path, copy: &str) -> Self {
        use std::os::unix::fs::MetadataExt;
        let path = log_path(state_dir, copy);
        let meta = std::fs::metadata(&path).ok();
        Self {
            path,
            pos: meta.as_ref().map_or(0, |m| m.len()),
            ino: meta.map(|m| m.ino()),
        }
    }

    /// What was appended since the last call. A file renamed away (to `.log.1`) is read to its
    /// end first, then the new file from its beginning; a file shorter than what was read was
    /// copied and truncated: reading starts again from its beginning.
    pub fn poll(&mut self) -> io::Result<Vec<u8>> {
        use std::os::unix::fs::MetadataExt;
        let mut out = Vec::new();
        let mut f = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        let meta = f.metadata()?;
        if self.ino.is_some_and(|ino| ino != meta.ino()) {
            let older = crate::copy_output::numbered(&self.path, 1);
            if let Ok(mut old) = std::fs::File::open(older) {
                if old.metadata().is_ok_and(|m| Some(m.ino()) == self.ino) {
                    old.seek(SeekFrom::Start(self.pos))?;
                    old.read_to_end(&mut out)?;
                }
            }
            self.pos = 0;
        }
        self.ino = Some(meta.ino());
        if meta.len() < self.pos {
            self.pos = 0;
        }
        f.seek(SeekFrom::Start(self.pos))?;
        let before = out.len();
        f.read_to_end(&mut out)?;
        self.pos += (out.len() - before) as u64;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_counts_lines_from_the_end_with_or_without_a_final_newline() {
        assert_eq!(last_lines(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(last_lines(b"a\nb\nc", 2), b"b\nc");
        assert_eq!(last_lines(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(last_lines(b"a\nb\n", 0), b"");
    }

    #[test]
    fn read_joins_the_rotated_part_and_a_follower_survives_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        let path = log_path(dir.path(), "w-0");
        assert_eq!(read(dir.path(), "w-0", None).unwrap(), None);
        std::fs::write(&path, "1\n2\n").unwrap();
        let mut f = Follower::new(dir.path(), "w-0");
        crate::retention::rotate_log(&path, 1).unwrap();
        std::fs::write(&path, "3\n").unwrap();
        assert_eq!(
            read(dir.path(), "w-0", None).unwrap().unwrap(),
            b"1\n2\n3\n"
        );
        assert_eq!(
            read(dir.path(), "w-0", Some(2)).unwrap().unwrap(),
            b"2\n3\n"
        );
        assert_eq!(
            f.poll().unwrap(),
            b"3\n",
            "after the truncation, from the start"
        );
        assert_eq!(f.poll().unwrap(), b"");
        // A rotation by rename: the follower finishes the renamed file, then reads the new one.
        let mut w = crate::copy_output::Rotating::open(
            path.clone(),
            crate::copy_output::LogLimits {
                max_bytes: 4,
                max_files: 3,
            },
        )
        .unwrap();
        w.write(b"4\n");
        w.write(b"5\n6\n");
        assert_eq!(f.poll().unwrap(), b"4\n5\n6\n");
        assert_eq!(
            read(dir.path(), "w-0", None).unwrap().unwrap(),
            b"1\n2\n3\n4\n5\n6\n",
            "oldest first, across three files"
        );
        assert!(valid_copy_name("web-12") && !valid_copy_name("../x") && !valid_copy_name(""));
    }

    #[test]
    fn a_range_reads_across_the_rotated_part_and_a_tail_starts_at_its_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        let path = log_path(dir.path(), "w-0");
        assert_eq!(read_range(dir.path(), "w-0", 0, None, 10).unwrap(), None);
        std::fs::write(crate::retention::rotated(&path), "one\ntwo\n").unwrap();
        std::fs::write(&path, "three\n").unwrap();
        let all = read(dir.path(), "w-0", None).unwrap().unwrap();
        // Every start and size against the joined text.
        for from in 0..=all.len() as u64 {
            for max in 0..=all.len() + 1 {
                let r = read_range(dir.path(), "w-0", from, None, max)
                    .unwrap()
                    .unwrap();
                let lo = from as usize;
                let hi = (lo + max).min(all.len());
                assert_eq!((r.from, &r.bytes[..], r.len), (from, &all[lo..hi], 14));
            }
        }
        let t = read_range(dir.path(), "w-0", 0, Some(2), 100)
            .unwrap()
            .unwrap();
        assert_eq!((t.from, &t.bytes[..]), (4, &b"two\nthree\n"[..]));
        let t = read_range(dir.path(), "w-0", 0, Some(1), 3)
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.from, &t.bytes[..]),
            (8, &b"thr"[..]),
            "a tail's first chunk is bounded"
        );
        let past = read_range(dir.path(), "w-0", 99, None, 100)
            .unwrap()
            .unwrap();
        assert_eq!(
            (past.from, &past.bytes[..]),
            (8, &b"three\n"[..]),
            "rotated since"
        );
        // Three kept parts, `.log.2` oldest: every start and size against `read`'s join.
        std::fs::write(crate::copy_output::numbered(&path, 2), "zero\n").unwrap();
        let all = read(dir.path(), "w-0", None).unwrap().unwrap();
        assert_eq!(all, b"zero\none\ntwo\nthree\n");
        for from in 0..=all.len() as u64 {
            for max in 0..=all.len() + 1 {
                let r = read_range(dir.path(), "w-0", from, None, max)
                    .unwrap()
                    .unwrap();
                let lo = from as usize;
                let hi = (lo + max).min(all.len());
                assert_eq!((r.from, &r.bytes[..], r.len), (from, &all[lo..hi], 19));
            }
        }
        let past = read_range(dir.path(), "w-0", 99, None, 100)
            .unwrap()
            .unwrap();
        assert_eq!(past.from, 13, "rotated since: the newest part's start");
    }
}
