//! A store that cannot be lost silently: the file checks behind [`SqliteStore`](super::SqliteStore).
//!
//! - **Created whole or not at all.** A new store is built in a private temporary file (mode
//!   0600: SQLite gives its `-wal` and `-shm` files the same mode), with its schema and a random
//!   *store id*, then hard-linked into place. `link` fails if the name exists, so two processes
//!   racing to create a store cannot initialise one file twice, and nobody ever sees a
//!   half-made store.
//! - **Never initialised over.** An existing file that is empty (0 bytes), is not SQLite, or is
//!   SQLite without setpoint's identity table is refused, never written. A store file that is
//!   missing while its `-wal` or `-shm` is still there is refused too: the store was removed
//!   under running parts, and a new database at that name would share, and be corrupted by, the
//!   old write-ahead log (this is how `rm store.sqlite` and a later `apply` wedged a cluster).
//! - **Held with its identity.** Each handle remembers the file's device and inode. Before every
//!   operation it checks that the name still leads to that inode, and inside every transaction
//!   that the store id is still the one it opened; if not, the store is *lost*.
//!
//! Nothing here talks to SQLite except through the caller; it is the file-system half.

use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Read as _};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The first 16 bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The mode of directories setpoint creates: only its owner may list or enter them.
pub const DIR_MODE: u32 = 0o700;
/// The mode of files setpoint creates: only its owner may read or write them.
pub const FILE_MODE: u32 = 0o600;

/// Where a file is: its device and inode. A file replaced at the same name has another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    /// The device number.
    pub dev: u64,
    /// The inode number.
    pub ino: u64,
}

impl FileId {
    /// The identity of the file at `path` now.
    pub fn of(path: &Path) -> io::Result<Self> {
        let m = std::fs::metadata(path)?;
        Ok(Self {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// Creates `dir` and its missing parents with mode 0700 (an existing directory keeps its mode).
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Opens `path` for appending, creating it with mode 0600 if needed.
pub fn open_private_append(path: &Path) -> io::Result<std::fs::File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(FILE_MODE)
        .open(path)
}

/// Writes `bytes` to `path` through a temporary file and a rename, with mode 0600, so a reader
/// sees the old content or the new, never a part.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(FILE_MODE)
        .open(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// What is at a store's path before it is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// Nothing, and no leftover write-ahead log: a store may be created.
    Absent,
    /// A file with SQLite's header: open it and check its identity table.
    Sqlite,
    /// Something that must not be opened or written; the reason says what and what to do.
    Refused(String),
}

/// The `-wal` and `-shm` companions of a database file.
pub fn companions(path: &Path) -> [PathBuf; 2] {
    ["-wal", "-shm"].map(|suffix| {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        PathBuf::from(p)
    })
}

/// Looks at `path` without changing anything.
pub fn inspect(path: &Path) -> io::Result<Found> {
    let shown = path.display();
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let left: Vec<String> = companions(path)
                .iter()
                .filter(|p| p.exists())
                .map(|p| p.display().to_string())
                .collect();
            return Ok(if left.is_empty() {
                Found::Absent
            } else {
                Found::Refused(format!(
                    "{shown} is missing but {} is still there: the store was removed while setpoint parts may still run on it; stop them, then restore {shown} or remove {}",
                    left.join(" and "),
                    left.join(" and ")
                ))
            });
        }
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(Found::Refused(format!(
            "{shown} is not a regular file: accepted a setpoint store or no file at all"
        )));
    }
    if meta.len() == 0 {
        return Ok(Found::Refused(format!(
            "{shown} is empty (0 bytes), not a setpoint store: it is never initialised over; remove it or choose another --data-dir"
        )));
    }
    let mut head = [0u8; 16];
    let n = file.read(&mut head)?;
    if n < head.len() || &head != SQLITE_MAGIC {
        return Ok(Found::Refused(format!(
            "{shown} is not a SQLite database, so not a setpoint store: it is never written over; remove it or choose another --data-dir"
        )));
    }
    Ok(Found::Sqlite)
}

/// A temporary name beside `path` for building a new store, unique to this process and call.
pub fn temporary_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "store".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(
        ".{name}.{}.{}.new",
        std::process::id(),
        random_hex(4)
    ))
}

/// Creates an empty file at `path` with mode 0600; fails if it exists.
pub fn create_private_new(path: &Path) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
        .map(drop)
}

/// `bytes` random bytes from the kernel, as lowercase hex.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf));
    if read.is_err() {
        // Without /dev/urandom, the time and pid are unique enough for a temporary name; a
        // store id or a nonce made this way is still unique, only guessable.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            ^ u128::from(std::process::id()) << 64;
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (seed >> ((i % 16) * 8)) as u8;
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_foreign_and_orphaned_logs_are_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.sqlite");
        assert_eq!(inspect(&path).unwrap(), Found::Absent);
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(inspect(&path).unwrap(), Found::Refused(r) if r.contains("0 bytes")));
        std::fs::write(&path, b"hello, this is not a database at all").unwrap();
        assert!(matches!(inspect(&path).unwrap(), Found::Refused(r) if r.contains("not a SQLite")));
        std::fs::remove_file(&path).unwrap();
        std::fs::write(companions(&path)[0].clone(), b"wal").unwrap();
        assert!(
            matches!(inspect(&path).unwrap(), Found::Refused(r) if r.contains("store.sqlite-wal"))
        );
        assert!(!path.exists(), "inspect never creates the store");
    }

    #[test]
    fn private_files_and_directories_are_created_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("a/b");
        create_private_dir(&sub).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(&sub), 0o700);
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        let f = sub.join("state.json");
        write_private(&f, b"{}").unwrap();
        assert_eq!(mode(&f), 0o600);
        let log = sub.join("c.log");
        drop(open_private_append(&log).unwrap());
        assert_eq!(mode(&log), 0o600);
        assert_ne!(random_hex(16), random_hex(16));
        assert_eq!(random_hex(16).len(), 32);
    }
}
