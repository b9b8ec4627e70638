//! A copy's output through a pipe: a bounded reader, off the agent's loop, that writes the
//! copy's log and rotates it by size itself.
//!
//! A copy's standard output and error go to a FIFO, `{state_dir}/logs/{copy}.log.pipe`
//! ([`pipe_path`]). The copy is given that FIFO opened *read-write*, so the copy itself always
//! holds a read end: when no agent reads (the agent crashed or restarts), a write never gets
//! `SIGPIPE` or `EPIPE`; it fills the pipe's buffer (64 KiB on Linux) and then waits. The next
//! agent adopts the copy ([`crate::agent`]'s recovery) and opens the same FIFO again
//! ([`follow_pipe`]), and the copy carries on where it waited; nothing it wrote is lost. A relay
//! process per copy would keep reading while no agent runs, but it is one more process to
//! adopt, supervise and kill; a file the copy writes directly cannot be rotated by rename. The
//! FIFO keeps the copy and its output in the copy's own lifetime.
//!
//! The reader is one thread per copy. It writes what it reads to `{copy}.log` and, before the
//! file would pass `max_bytes`, renames `.log` to `.log.1` (`.log.1` to `.log.2`, …, keeping
//! `max_files` files in all) and opens a new `.log`: a rename loses no line, unlike the
//! copy-and-truncate a file held by the copy needs. A chunk is split at its last newline before
//! the limit, so lines stay whole across files; a line longer than `max_bytes` is split. A copy
//! that writes faster than the disk takes is slowed by its own pipe, never the agent. A write
//! that fails (a full disk) drops the chunk, counts it, and once writing works again one line
//! `[setpoint: dropped N bytes of output: why]` says so in the log.
//!
//! Disk use per copy is at most `max_bytes × max_files`: every file is cut before it passes
//! `max_bytes`.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// How much the reader takes from the pipe at once, in bytes.
const CHUNK: usize = 64 * 1024;

/// The size and number of a copy's log files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogLimits {
    /// A file is cut before it passes this size, in bytes (at least 1).
    pub max_bytes: u64,
    /// How many files are kept, the current one included (at least 1).
    pub max_files: u32,
}

impl Default for LogLimits {
    /// 10 MiB × 5.
    fn default() -> Self {
        Self {
            max_bytes: crate::retention::DEFAULT_LOG_MAX_BYTES,
            max_files: crate::retention::DEFAULT_LOG_MAX_FILES,
        }
    }
}

/// The FIFO of the copy whose log is `log`: `{log}.pipe`.
pub fn pipe_path(log: &Path) -> PathBuf {
    let mut p = log.as_os_str().to_owned();
    p.push(".pipe");
    p.into()
}

/// The `n`th older file of log `log`: `{log}.{n}`.
pub fn numbered(log: &Path, n: u32) -> PathBuf {
    let mut p = log.as_os_str().to_owned();
    p.push(format!(".{n}"));
    p.into()
}

/// Makes the FIFO of log `log` (replacing a stale one) and opens it read-write, for the copy's
/// standard output and error.
pub fn make_pipe(log: &Path) -> io::Result<File> {
    if let Some(dir) = log.parent() {
        crate::store::identity::create_private_dir(dir)?;
    }
    let pipe = pipe_path(log);
    match std::fs::remove_file(&pipe) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &pipe,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )?;
    // Read-write: the copy holds a read end itself, so it never sees SIGPIPE (module doc).
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&pipe)
}

/// Starts the thread that reads the FIFO of log `log` into its files until every writer has
/// closed it (the copy and what it started have ended), then removes the FIFO. Used both for a
/// copy just started and for one adopted from an agent before.
pub fn follow_pipe(log: &Path, limits: LogLimits) -> io::Result<std::thread::JoinHandle<()>> {
    use rustix::fs::{fcntl_setfl, OFlags};
    let pipe = pipe_path(log);
    // Non-blocking open: a FIFO's read end opens at once; then reads block again.
    let fd = rustix::fs::open(
        &pipe,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    fcntl_setfl(&fd, OFlags::empty())?;
    let mut reader = File::from(fd);
    let mut writer = Rotating::open(log.to_path_buf(), limits)?;
    std::thread::Builder::new()
        .name("setpoint-copy-output".into())
        .spawn(move || {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => writer.write(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = std::fs::remove_file(pipe_path(&writer.path));
        })
}

/// A log that rotates by size: `path`, `path.1`, …, `path.{max_files − 1}`.
#[derive(Debug)]
pub struct Rotating {
    path: PathBuf,
    limits: LogLimits,
    file: Option<File>,
    len: u64,
    /// Bytes dropped since the last note, and why.
    dropped: Option<(u64, String)>,
}

impl Rotating {
    /// Opens (appending to) the log at `path`.
    pub fn open(path: PathBuf, limits: LogLimits) -> io::Result<Self> {
        let limits = LogLimits {
            max_bytes: limits.max_bytes.max(1),
            max_files: limits.max_files.max(1),
        };
        let file = crate::store::identity::open_private_append(&path)?;
        let len = file.metadata()?.len();
        Ok(Self {
            path,
            limits,
            file: Some(file),
            len,
            dropped: None,
        })
    }

    /// Writes `chunk`, rotating first whenever it would pass the size limit. Never fails: what
    /// cannot be written is dropped and counted (module doc).
    pub fn write(&mut self, mut chunk: &[u8]) {
        if let Some((n, why)) = self.dropped.take() {
            let note = format!("[setpoint: dropped {n} bytes of output: {why}]\n");
            if let Err(e) = self.put(note.as_bytes()) {
                self.drop_bytes(chunk.len() as u64, e);
                let (m, _) = self.dropped.get_or_insert((0, String::new()));
                *m += n;
                return;
            }
        }
        while !chunk.is_empty() {
            let room = self.limits.max_bytes.saturating_sub(self.len) as usize;
            if chunk.len() <= room {
                if let Err(e) = self.put(chunk) {
                    self.drop_bytes(chunk.len() as u64, e);
                }
                return;
            }
            // Cut at the last newline that fits; a line longer than a whole file is split.
            let cut = match chunk[..room].iter().rposition(|&b| b == b'\n') {
                Some(i) => i + 1,
                None if self.len == 0 => room,
                None => 0,
            };
            let (now, later) = chunk.split_at(cut);
            if !now.is_empty() {
                if let Err(e) = self.put(now) {
                    self.drop_bytes(now.len() as u64, e);
                }
            }
            if let Err(e) = self.rotate() {
                self.drop_bytes(later.len() as u64, e);
                return;
            }
            chunk = later;
        }
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        let file = match &mut self.file {
            Some(f) => f,
            None => self
                .file
                .insert(crate::store::identity::open_private_append(&self.path)?),
        };
        file.write_all(bytes)?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    fn drop_bytes(&mut self, n: u64, e: io::Error) {
        let (m, why) = self.dropped.get_or_insert((0, String::new()));
        *m += n;
        *why = e.to_string();
    }

    /// Shifts the older files up by one (the oldest goes), renames the current one to `.1` and
    /// starts a new one.
    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        let keep = self.limits.max_files;
        if keep == 1 {
            ignore_missing(std::fs::remove_file(&self.path))?;
        } else {
            for n in (1..keep - 1).rev() {
                ignore_missing(std::fs::rename(
                    numbered(&self.path, n),
                    numbered(&self.path, n + 1),
                ))?;
            }
            ignore_missing(std::fs::rename(&self.path, numbered(&self.path, 1)))?;
        }
        self.len = 0;
        self.file = Some(crate::store::identity::open_private_append(&self.path)?);
        Ok(())
    }
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all(path: &Path, files: u32) -> (Vec<u8>, Vec<u64>) {
        let mut text = Vec::new();
        let mut sizes = Vec::new();
        for n in (1..files).rev() {
            if let Ok(t) = std::fs::read(numbered(path, n)) {
                sizes.push(t.len() as u64);
                text.extend(t);
            }
        }
        let t = std::fs::read(path).unwrap_or_default();
        sizes.push(t.len() as u64);
        text.extend(t);
        (text, sizes)
    }

    proptest! {
        /// Against the obvious oracle: every file within the limit, at most `files` of them,
        /// and together they are the last bytes written, in order.
        #[test]
        fn rotation_keeps_a_suffix_of_the_output_in_bounded_files(
            chunks in prop::collection::vec(prop::collection::vec(prop::sample::select(b"ab\n".to_vec()), 0..40), 0..30),
            max_bytes in 1u64..32,
            max_files in 1u32..4,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("w-0.log");
            let mut w = Rotating::open(path.clone(), LogLimits { max_bytes, max_files }).unwrap();
            let mut written = Vec::new();
            for c in &chunks {
                w.write(c);
                written.extend_from_slice(c);
            }
            let (kept, sizes) = all(&path, max_files);
            prop_assert!(sizes.len() <= max_files as usize);
            prop_assert!(sizes.iter().all(|&s| s <= max_bytes), "{sizes:?}");
            prop_assert!(written.ends_with(&kept));
            prop_assert!(!numbered(&path, max_files).exists());
        }
    }

    #[test]
    fn lines_stay_whole_across_files_unless_longer_than_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w-0.log");
        let limits = LogLimits {
            max_bytes: 8,
            max_files: 3,
        };
        let mut w = Rotating::open(path.clone(), limits).unwrap();
        w.write(b"aaa\nbbb\ncc");
        assert_eq!(std::fs::read(numbered(&path, 1)).unwrap(), b"aaa\nbbb\n");
        assert_eq!(std::fs::read(&path).unwrap(), b"cc");
        w.write(b"c\n0123456789ab\n");
        // "ccc" closed its file; the long line filled one and went on in the next.
        assert_eq!(std::fs::read(numbered(&path, 2)).unwrap(), b"ccc\n");
        assert_eq!(std::fs::read(numbered(&path, 1)).unwrap(), b"01234567");
        w.write(b"x\n");
        assert_eq!(std::fs::read(&path).unwrap(), b"89ab\nx\n");
    }

    #[test]
    fn a_copy_writing_to_its_pipe_with_no_reader_waits_and_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs").join("w-0.log");
        let mut copy_end = make_pipe(&log).unwrap();
        // No reader yet (an agent restarting): the write neither fails nor kills.
        copy_end.write_all(b"before\n").unwrap();
        let reader = follow_pipe(&log, LogLimits::default()).unwrap();
        copy_end.write_all(b"after\n").unwrap();
        drop(copy_end);
        reader.join().unwrap();
        assert_eq!(std::fs::read(&log).unwrap(), b"before\nafter\n");
        assert!(!pipe_path(&log).exists(), "the FIFO goes with its copy");
    }
}
