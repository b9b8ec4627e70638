//! The embedded default store: one SQLite database in WAL mode under the data directory.
//!
//! Several processes on one machine may open the same directory. Each write is one
//! `BEGIN IMMEDIATE` transaction, so writers queue on SQLite's lock (waiting up to the busy
//! timeout) and every compare sees the latest committed state. Readers see a consistent snapshot
//! without blocking writers (WAL). Lease deadlines are wall-clock milliseconds, which all
//! processes on the machine share.
//!
//! # Schema
//! ```sql
//! CREATE TABLE meta   (id INTEGER PRIMARY KEY CHECK (id = 0), revision INTEGER NOT NULL,
//!                      store_id TEXT NOT NULL);
//! CREATE TABLE kv     (key TEXT PRIMARY KEY, value TEXT NOT NULL, create_revision INTEGER NOT NULL,
//!                      mod_revision INTEGER NOT NULL, lease INTEGER) WITHOUT ROWID;
//! CREATE TABLE leases (id INTEGER PRIMARY KEY AUTOINCREMENT, ttl_ms INTEGER NOT NULL,
//!                      expires_ms INTEGER NOT NULL);
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use super::identity::{self, FileId, Found};
use super::space;
use super::{prefix_end, wall_ms, Entry, LeaseId, Op, Read, Revision, Store, StoreError, Txn};

/// The database file's name inside the data directory.
pub const DB_FILE: &str = "store.sqlite";

/// How long a write waits for another process's write to finish before it gives up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The version of the schema below, kept in the identity table.
const FORMAT: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE meta (id INTEGER PRIMARY KEY CHECK (id = 0), revision INTEGER NOT NULL,
    store_id TEXT NOT NULL);
CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL,
    create_revision INTEGER NOT NULL, mod_revision INTEGER NOT NULL, lease INTEGER) WITHOUT ROWID;
CREATE INDEX kv_lease ON kv (lease) WHERE lease IS NOT NULL;
CREATE TABLE leases (id INTEGER PRIMARY KEY AUTOINCREMENT, ttl_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL);
CREATE TABLE identity (id INTEGER PRIMARY KEY CHECK (id = 0), store_id TEXT NOT NULL,
    format INTEGER NOT NULL);
";

/// A store in a SQLite database under a data directory.
///
/// Each handle holds the file with its identity (device, inode and the store id written at
/// creation; see [`identity`]). Once the file is removed or replaced, the
/// handle is *lost*: every call fails with [`StoreError::Lost`] without touching the database,
/// and the connection is never closed, because closing the last connection checkpoints and
/// deletes the write-ahead log, which by then may belong to another database at that name.
#[derive(Debug)]
pub struct SqliteStore {
    /// `None` once lost.
    conn: Mutex<Option<Connection>>,
    path: PathBuf,
    file: FileId,
    store_id: String,
    read_only: bool,
    /// Why the store was lost, once it is.
    lost: Mutex<Option<String>>,
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

fn db(e: rusqlite::Error) -> StoreError {
    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
        // Named here and completed with the directory by `write`, which can say where.
        return unavailable(space::FULL);
    }
    unavailable(e)
}

fn is_full(e: &StoreError) -> bool {
    matches!(e, StoreError::Unavailable(why) if why == space::FULL)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

/// Retries `f` while SQLite says "busy" or "locked" at once rather than waiting (switching
/// journal modes and first reads can), up to the busy timeout.
fn retry_busy<T>(mut f: impl FnMut() -> Result<T, rusqlite::Error>) -> Result<T, rusqlite::Error> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match f() {
            Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

impl SqliteStore {
    /// Opens the store in `data_dir`, creating the directory (mode 0700) and a new store (mode
    /// 0600) if there is none. An empty or foreign file, or a store file missing beside its
    /// leftover write-ahead log, is refused ([`StoreError::Refused`]) and left as it is.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        identity::create_private_dir(data_dir)
            .map_err(|e| unavailable(format!("creating {}: {e}", data_dir.display())))?;
        let path = data_dir.join(DB_FILE);
        let io = |e: std::io::Error| unavailable(format!("{}: {e}", path.display()));
        if identity::inspect(&path).map_err(io)? == Found::Absent {
            create(&path)?;
        }
        Self::open_file(path, false)
    }

    /// Opens the existing store in `data_dir` for reading only: nothing is created, and nothing
    /// is written, not even the expiry of leases (reads leave out the keys of expired leases
    /// instead). A user who may read the store's files but not write them can use it.
    pub fn open_read_only(data_dir: &Path) -> Result<Self, StoreError> {
        Self::open_file(data_dir.join(DB_FILE), true)
    }

    fn open_file(path: PathBuf, read_only: bool) -> Result<Self, StoreError> {
        let shown = path.display().to_string();
        let io = |e: std::io::Error| unavailable(format!("{shown}: {e}"));
        match identity::inspect(&path).map_err(io)? {
            Found::Sqlite => {}
            Found::Refused(why) => return Err(StoreError::Refused(why)),
            Found::Absent => {
                return Err(StoreError::Refused(format!(
                    "no store at {shown}: accepted a --data-dir that 'setpoint up', 'apply' or 'controller' has used"
                )))
            }
        }
        let file = FileId::of(&path).map_err(io)?;
        let conn = retry_busy(|| connect(&path, read_only))
            .map_err(|e| unavailable(format!("opening {shown}: {e}")))?;
        let store_id = match verify(&conn, &path, read_only) {
            Ok(id) => id,
            Err(e) => {
                // Closing might checkpoint a write-ahead log that is not this file's into it.
                std::mem::forget(conn);
                return Err(e);
            }
        };
        if FileId::of(&path).map_err(io)? != file {
            return Err(unavailable(format!(
                "{shown} was replaced while it was being opened; try again"
            )));
        }
        Ok(Self {
            conn: Mutex::new(Some(conn)),
            path,
            file,
            store_id,
            read_only,
            lost: Mutex::new(None),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The store id written when the store was created.
    pub fn store_id(&self) -> &str {
        &self.store_id
    }

    /// Marks the store lost (once) and lets its connection go without closing it.
    /// Marks the store lost (once). The caller may hold the connection (inside a
    /// transaction), so the connection is let go later, by [`Self::lock`] or on drop.
    fn lose(&self, why: String) -> StoreError {
        let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        StoreError::Lost(lost.get_or_insert(why).clone())
    }

    /// Lets the connection go without closing it: closing would checkpoint the write-ahead log
    /// into the file and delete it, and the log may no longer be this file's, nor the file
    /// this store.
    fn forget_connection(&self) {
        if let Some(conn) = self.conn.lock().unwrap_or_else(|p| p.into_inner()).take() {
            std::mem::forget(conn);
        }
    }

    /// Checks that the store's name still leads to the file this handle opened.
    fn check(&self) -> Result<(), StoreError> {
        if let Some(why) = self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Err(StoreError::Lost(why));
        }
        let shown = self.path.display();
        match FileId::of(&self.path) {
            Ok(f) if f == self.file => Ok(()),
            Ok(_) => Err(self.lose(format!(
                "the store {shown} was replaced by another file (store id {} is gone)",
                self.store_id
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(self.lose(format!(
                "the store {shown} was removed (store id {})",
                self.store_id
            ))),
            Err(e) => Err(unavailable(format!("{shown}: {e}"))),
        }
    }

    /// Checks, inside a transaction, that the file still holds this store; returns the
    /// revision.
    fn check_inside(&self, tx: &Connection) -> Result<Revision, StoreError> {
        let read = tx.query_row(
            "SELECT revision, store_id FROM meta WHERE id = 0",
            [],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
        );
        match read {
            Ok((rev, id)) if id == self.store_id => Ok(rev as Revision),
            Ok((_, id)) => Err(self.lose(format!(
                "the store {} now holds store id {id}, not {}: it was overwritten",
                self.path.display(),
                self.store_id
            ))),
            Err(e) if is_busy(&e) => Err(db(e)),
            Err(e) => Err(self.lose(format!(
                "the store {} is no longer a setpoint store: {e}",
                self.path.display()
            ))),
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, Option<Connection>>, StoreError> {
        if let Err(e) = self.check() {
            if e.is_lost() {
                self.forget_connection();
            }
            return Err(e);
        }
        let guard = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            drop(guard);
            return Err(self.lose("its connection is gone".into()));
        }
        Ok(guard)
    }

    /// Runs `f` in one write transaction, after removing expired leases and their keys.
    fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>, Revision, u64) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if self.read_only {
            return Err(unavailable(format!(
                "{} is open read-only",
                self.path.display()
            )));
        }
        let mut guard = self.lock()?;
        let conn = guard.as_mut().expect("checked by lock");
        let done = (|| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(db)?;
            // The file may have been removed while this waited for the lock.
            self.check()?;
            self.check_inside(&tx)?;
            let now = wall_ms();
            let rev = sweep(&tx, now)?;
            let out = f(&tx, rev, now)?;
            tx.commit().map_err(db)?;
            Ok(out)
        })();
        match done {
            Err(e) if is_full(&e) => {
                // The transaction was rolled back. Cutting the log back may free enough for the
                // next write; whether it did or not, this one is refused, and says where.
                let _ = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)");
                Err(unavailable(space::full_message(self.dir())))
            }
            other => other,
        }
    }

    /// The data directory.
    fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// [`Self::sweep_if_due`], or `false` if the disk is too full for it.
    fn sweep_or_full(&self) -> Result<bool, StoreError> {
        match self.sweep_if_due() {
            Ok(()) => Ok(true),
            Err(StoreError::Unavailable(why)) if why.starts_with(space::FULL) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes expired leases first if there are any, so that reads never show their keys.
    fn sweep_if_due(&self) -> Result<(), StoreError> {
        if self.read_only {
            return Ok(());
        }
        let due: bool = self
            .lock()?
            .as_ref()
            .expect("checked by lock")
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM leases WHERE expires_ms <= ?1)",
                [wall_ms() as i64],
                |r| r.get(0),
            )
            .map_err(db)?;
        if due {
            self.write(|_, _, _| Ok(()))?;
        }
        Ok(())
    }
}

/// Checks that an open connection holds a setpoint store, and that the write-ahead log beside
/// the file is its own; returns the store id.
fn verify(conn: &Connection, path: &Path, read_only: bool) -> Result<String, StoreError> {
    let shown = path.display().to_string();
    let mode: String = retry_busy(|| conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)))
        .map_err(|e| not_setpoint(&shown, e))?;
    if !mode.eq_ignore_ascii_case("wal") && !read_only {
        return Err(StoreError::Refused(format!(
            "{shown} is a SQLite database in journal mode {mode}, not a setpoint store (they use WAL): it is never written over"
        )));
    }
    let (store_id, format): (String, i64) = retry_busy(|| {
        conn.query_row(
            "SELECT store_id, format FROM identity WHERE id = 0",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    })
    .map_err(|e| not_setpoint(&shown, e))?;
    if format != FORMAT {
        return Err(StoreError::Refused(format!(
            "{shown} has store format {format}: this setpoint reads format {FORMAT}"
        )));
    }
    let logged: String =
        retry_busy(|| conn.query_row("SELECT store_id FROM meta WHERE id = 0", [], |r| r.get(0)))
            .map_err(|e| not_setpoint(&shown, e))?;
    // The file alone, without its log: a read of a file being checkpointed may fail, and then
    // this check is skipped, never failed.
    let in_file: Option<String> = Connection::open_with_flags(
        immutable_uri(path),
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .and_then(|c| c.query_row("SELECT store_id FROM meta WHERE id = 0", [], |r| r.get(0)))
    .ok();
    let wal = identity::companions(path)[0].display().to_string();
    if logged != store_id || in_file.as_ref().is_some_and(|f| *f != store_id) {
        return Err(StoreError::Refused(format!(
            "{wal} belongs to another store (store id {logged}, the file holds {store_id}): it was left by parts of a store removed or replaced under them; stop them, then remove {wal} and its -shm, or put the original store back"
        )));
    }
    Ok(store_id)
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        let lost = self
            .lost
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        if lost {
            self.forget_connection();
        }
    }
}

/// Why a SQLite file that could not be read as a setpoint store is refused.
fn not_setpoint(shown: &str, e: rusqlite::Error) -> StoreError {
    if is_busy(&e) {
        return unavailable(format!("opening {shown}: {e}"));
    }
    StoreError::Refused(format!(
        "{shown} is not a setpoint store ({e}): it is never written over; remove it or choose another --data-dir"
    ))
}

/// Opens a connection to an existing file, never creating one.
fn connect(path: &Path, read_only: bool) -> Result<Connection, rusqlite::Error> {
    let flags = OpenFlags::SQLITE_OPEN_NO_MUTEX
        | if read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
        };
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    if read_only {
        // A reader that may not create the `-shm` file can still read a store no writer has
        // open (no `-wal` file): then the file cannot change under it.
        let wal = identity::companions(path)[0].exists();
        let probe = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
            r.get::<_, i64>(0)
        });
        if let Err(e) = probe {
            let cannot_open = matches!(&e, rusqlite::Error::SqliteFailure(f, _)
                if f.code == rusqlite::ErrorCode::CannotOpen);
            if cannot_open && !wal {
                drop(conn);
                let c = Connection::open_with_flags(
                    immutable_uri(path),
                    OpenFlags::SQLITE_OPEN_READ_ONLY
                        | OpenFlags::SQLITE_OPEN_URI
                        | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                return Ok(c);
            }
            return Err(e);
        }
    } else {
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        // The log sized by the filesystem, so that it can never fill a small one (`space`).
        let total = path
            .parent()
            .and_then(space::room)
            .map_or(u64::MAX, |(total, _)| total);
        let pages = space::checkpoint_pages(total);
        conn.pragma_update(None, "wal_autocheckpoint", pages as i64)?;
        conn.pragma_update(None, "journal_size_limit", space::log_limit(pages) as i64)?;
    }
    Ok(conn)
}

/// `file:PATH?immutable=1`, with the characters a URI path cannot hold escaped.
fn immutable_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'%' | b'?' | b'#' => uri.push_str(&format!("%{b:02X}")),
            _ => uri.push(*b as char),
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// Builds a new store in a private temporary file and links it into place at `path`. If
/// another process linked its store first, that one is kept.
fn create(path: &Path) -> Result<(), StoreError> {
    let tmp = identity::temporary_beside(path);
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        unavailable(format!("creating {}: {what}: {e}", path.display()))
    };
    let built = (|| {
        identity::create_private_new(&tmp).map_err(|e| fail("temporary file", &e))?;
        let mut conn = Connection::open_with_flags(
            &tmp,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| fail("opening", &e))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(|e| fail("WAL", &e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(fail(
                "journal mode",
                &format!("{mode}: WAL is needed; is the data directory on a network filesystem?"),
            ));
        }
        let tx = conn.transaction().map_err(|e| fail("schema", &e))?;
        tx.execute_batch(SCHEMA).map_err(|e| fail("schema", &e))?;
        // The id sits in two places: `identity`, written once, so always in the main file, and
        // `meta`, rewritten by every commit, so in any write-ahead log that holds a commit. A
        // log whose `meta` disagrees with the file's `identity` is another store's.
        let id = identity::random_hex(16);
        tx.execute(
            "INSERT INTO identity (id, store_id, format) VALUES (0, ?1, ?2)",
            params![id, FORMAT],
        )
        .map_err(|e| fail("identity", &e))?;
        tx.execute(
            "INSERT INTO meta (id, revision, store_id) VALUES (0, 0, ?1)",
            params![id],
        )
        .map_err(|e| fail("identity", &e))?;
        tx.commit().map_err(|e| fail("schema", &e))?;
        // Closing the only connection checkpoints the log into the file and deletes it: the
        // file is then complete on its own, in WAL mode.
        conn.close().map_err(|(_, e)| fail("closing", &e))?;
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(fail("linking", &e)),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    for c in identity::companions(&tmp) {
        let _ = std::fs::remove_file(c);
    }
    built
}

fn revision(tx: &rusqlite::Connection) -> Result<Revision, StoreError> {
    tx.query_row("SELECT revision FROM meta WHERE id = 0", [], |r| {
        r.get::<_, i64>(0)
    })
    .map(|r| r as Revision)
    .map_err(db)
}

fn set_revision(tx: &rusqlite::Connection, rev: Revision) -> Result<(), StoreError> {
    tx.execute("UPDATE meta SET revision = ?1 WHERE id = 0", [rev as i64])
        .map_err(db)?;
    Ok(())
}

/// Deletes expired leases and their keys; returns the revision after that.
fn sweep(tx: &rusqlite::Transaction<'_>, now: u64) -> Result<Revision, StoreError> {
    let mut rev = revision(tx)?;
    let expired = tx
        .execute("DELETE FROM leases WHERE expires_ms <= ?1", [now as i64])
        .map_err(db)?;
    if expired > 0 {
        let gone = tx
            .execute(
                "DELETE FROM kv WHERE lease IS NOT NULL AND lease NOT IN (SELECT id FROM leases)",
                [],
            )
            .map_err(db)?;
        if gone > 0 {
            rev += 1;
            set_revision(tx, rev)?;
        }
    }
    Ok(rev)
}

fn lease_alive(tx: &rusqlite::Transaction<'_>, id: LeaseId) -> Result<bool, StoreError> {
    tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM leases WHERE id = ?1)",
        [id as i64],
        |r| r.get(0),
    )
    .map_err(db)
}

impl Store for SqliteStore {
    /// A full filesystem under the store ([`space::alarm`]).
    fn alarm(&self) -> Result<Option<String>, StoreError> {
        Ok(space::alarm(self.dir()))
    }

    fn read(&self, prefixes: &[&str]) -> Result<Read, StoreError> {
        // On a full disk the sweep cannot write; the read leaves out the keys of expired
        // leases instead, as a read-only handle does, rather than failing too.
        let swept = self.sweep_or_full()?;
        let mut guard = self.lock()?;
        let conn = guard.as_mut().expect("checked by lock");
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(db)?;
        let rev = self.check_inside(&tx)?;
        // A read-only handle cannot sweep expired leases, so it leaves out their keys.
        let now = if self.read_only || !swept {
            wall_ms() as i64
        } else {
            0
        };
        let mut entries = Vec::new();
        {
            let mut q = tx
                .prepare_cached(
                    "SELECT key, value, create_revision, mod_revision, lease FROM kv
                     WHERE key >= ?1 AND key < ?2 AND (lease IS NULL OR ?3 = 0 OR lease IN
                         (SELECT id FROM leases WHERE expires_ms > ?3))
                     ORDER BY key",
                )
                .map_err(db)?;
            for p in prefixes {
                let rows = q
                    .query_map(params![p, prefix_end(p), now], |r| {
                        Ok(Entry {
                            key: r.get(0)?,
                            value: r.get(1)?,
                            create_revision: r.get::<_, i64>(2)? as Revision,
                            mod_revision: r.get::<_, i64>(3)? as Revision,
                            lease: r.get::<_, Option<i64>>(4)?.map(|l| l as LeaseId),
                        })
                    })
                    .map_err(db)?;
                for row in rows {
                    entries.push(row.map_err(db)?);
                }
            }
        }
        tx.commit().map_err(db)?;
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        entries.dedup_by(|a, b| a.key == b.key);
        Ok(Read {
            revision: rev,
            entries,
        })
    }

    fn commit(&self, txn: &Txn) -> Result<Revision, StoreError> {
        self.write(|tx, rev, _| {
            {
                let mut q = tx
                    .prepare_cached("SELECT mod_revision FROM kv WHERE key = ?1")
                    .map_err(db)?;
                for c in &txn.compares {
                    let found = q
                        .query_row([&c.key], |r| r.get::<_, i64>(0))
                        .optional()
                        .map_err(db)?
                        .map_or(0, |r| r as Revision);
                    if found != c.mod_revision {
                        return Err(StoreError::Conflict {
                            key: c.key.clone(),
                            expected: c.mod_revision,
                            found,
                        });
                    }
                }
            }
            if txn.ops.is_empty() {
                return Ok(rev);
            }
            let next = rev + 1;
            for op in &txn.ops {
                match op {
                    Op::Put { key, value, lease } => {
                        if let Some(id) = lease {
                            if !lease_alive(tx, *id)? {
                                return Err(StoreError::LeaseExpired(*id));
                            }
                        }
                        tx.execute(
                            "INSERT INTO kv (key, value, create_revision, mod_revision, lease)
                             VALUES (?1, ?2, ?3, ?3, ?4)
                             ON CONFLICT (key) DO UPDATE SET value = excluded.value,
                                 mod_revision = excluded.mod_revision, lease = excluded.lease",
                            params![key, value, next as i64, lease.map(|l| l as i64)],
                        )
                        .map_err(db)?;
                    }
                    Op::Delete { key } => {
                        tx.execute("DELETE FROM kv WHERE key = ?1", [key])
                            .map_err(db)?;
                    }
                }
            }
            set_revision(tx, next)?;
            Ok(next)
        })
    }

    fn revision(&self) -> Result<Revision, StoreError> {
        self.sweep_or_full()?;
        let guard = self.lock()?;
        self.check_inside(guard.as_ref().expect("checked by lock"))
    }

    fn grant(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        let ttl_ms = ttl.as_millis() as i64;
        self.write(|tx, _, now| {
            tx.execute(
                "INSERT INTO leases (ttl_ms, expires_ms) VALUES (?1, ?2)",
                [ttl_ms, now as i64 + ttl_ms],
            )
            .map_err(db)?;
            Ok(tx.last_insert_rowid() as LeaseId)
        })
    }

    fn keep_alive(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.write(|tx, _, now| {
            let n = tx
                .execute(
                    "UPDATE leases SET expires_ms = ?1 + ttl_ms WHERE id = ?2",
                    [now as i64, lease as i64],
                )
                .map_err(db)?;
            if n == 0 {
                Err(StoreError::LeaseExpired(lease))
            } else {
                Ok(())
            }
        })
    }

    fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.write(|tx, rev, _| {
            if tx
                .execute("DELETE FROM leases WHERE id = ?1", [lease as i64])
                .map_err(db)?
                > 0
                && tx
                    .execute("DELETE FROM kv WHERE lease = ?1", [lease as i64])
                    .map_err(db)?
                    > 0
            {
                set_revision(tx, rev + 1)?;
            }
            Ok(())
        })
    }

    fn now_ms(&self) -> u64 {
        wall_ms()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Option<(tempfile::TempDir, SqliteStore)> {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(dir.path()).unwrap();
        Some((dir, s))
    }

    crate::store::conformance_tests!(store(), Duration::from_millis(100));

    #[test]
    fn two_handles_on_one_directory_see_each_others_writes_and_conflict() {
        let dir = tempfile::tempdir().unwrap();
        let a = SqliteStore::open(dir.path()).unwrap();
        let b = SqliteStore::open(dir.path()).unwrap();
        let r = a
            .commit(&Txn::new().expect("/k", 0).put("/k", "a"))
            .unwrap();
        assert_eq!(b.get("/k").unwrap().unwrap().mod_revision, r);
        let lost = b.commit(&Txn::new().expect("/k", 0).put("/k", "b"));
        assert!(lost.unwrap_err().is_conflict());
        assert_eq!(a.get("/k").unwrap().unwrap().value, "a");
    }

    #[test]
    fn concurrent_creators_of_one_key_from_many_threads_have_exactly_one_winner() {
        let dir = tempfile::tempdir().unwrap();
        let wins: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|i| {
                    let path = dir.path().to_owned();
                    scope.spawn(move || {
                        let s = SqliteStore::open(&path).unwrap();
                        s.commit(&Txn::new().expect("/one", 0).put("/one", i.to_string()))
                            .is_ok() as usize
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(wins, 1);
    }

    fn bytes(p: &Path) -> Option<Vec<u8>> {
        std::fs::read(p).ok()
    }

    #[test]
    fn a_removed_store_is_lost_for_every_handle_and_its_log_is_never_touched() {
        let dir = tempfile::tempdir().unwrap();
        let a = SqliteStore::open(dir.path()).unwrap();
        let b = SqliteStore::open(dir.path()).unwrap();
        a.commit(&Txn::new().put("/k", "1")).unwrap();
        let path = dir.path().join(DB_FILE);
        let [wal, shm] = identity::companions(&path);
        std::fs::remove_file(&path).unwrap();
        let log_before = (bytes(&wal), bytes(&shm));
        for s in [&a, &b] {
            assert!(s.commit(&Txn::new().put("/k", "2")).unwrap_err().is_lost());
            assert!(s.read(&["/"]).unwrap_err().is_lost());
            assert!(s.revision().unwrap_err().is_lost());
        }
        drop(a);
        drop(b);
        assert_eq!(
            (bytes(&wal), bytes(&shm)),
            log_before,
            "the log is untouched"
        );
        assert!(
            wal.exists(),
            "dropping a lost handle does not checkpoint or delete the log"
        );
        // And nothing is created over it.
        let refused = SqliteStore::open(dir.path()).unwrap_err();
        assert!(
            matches!(refused, StoreError::Refused(ref r) if r.contains("-wal")),
            "{refused}"
        );
        assert!(!path.exists());
    }

    #[test]
    fn a_store_replaced_at_its_name_is_lost() {
        let dir = tempfile::tempdir().unwrap();
        let a = SqliteStore::open(dir.path()).unwrap();
        let other = tempfile::tempdir().unwrap();
        let b = SqliteStore::open(other.path()).unwrap();
        b.commit(&Txn::new().put("/k", "other")).unwrap();
        drop(b);
        std::fs::rename(other.path().join(DB_FILE), dir.path().join(DB_FILE)).unwrap();
        let e = a.get("/k").unwrap_err();
        assert!(e.is_lost() && e.to_string().contains("replaced"), "{e}");
    }

    #[test]
    fn an_empty_or_foreign_file_is_refused_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE);
        std::fs::write(&path, b"").unwrap();
        for open in [SqliteStore::open, SqliteStore::open_read_only] {
            assert!(
                matches!(open(dir.path()), Err(StoreError::Refused(r)) if r.contains("0 bytes"))
            );
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        // A SQLite database that setpoint did not make.
        std::fs::remove_file(&path).unwrap();
        let c = Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .unwrap();
        drop(c);
        let before = bytes(&path);
        for open in [SqliteStore::open, SqliteStore::open_read_only] {
            assert!(
                matches!(open(dir.path()), Err(StoreError::Refused(r)) if r.contains("not a setpoint store"))
            );
        }
        assert_eq!(bytes(&path), before);
    }

    #[test]
    fn a_read_only_handle_reads_everything_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let w = SqliteStore::open(dir.path()).unwrap();
        let lease = w.grant(Duration::from_millis(200)).unwrap();
        w.commit(&Txn::new().put("/a", "1").put_leased("/b", "2", lease))
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        drop(w);
        let path = dir.path().join(DB_FILE);
        let before = bytes(&path);
        let r = SqliteStore::open_read_only(dir.path()).unwrap();
        let keys: Vec<_> = r
            .read(&["/"])
            .unwrap()
            .entries
            .into_iter()
            .map(|e| e.key)
            .collect();
        assert_eq!(keys, ["/a"], "the expired lease's key is left out");
        assert!(r.commit(&Txn::new().put("/c", "3")).is_err());
        drop(r);
        assert_eq!(bytes(&path), before);
        // SQLite may leave an empty log behind a reader where it may create one; never content.
        let wal = bytes(&identity::companions(&path)[0]);
        assert!(wal.is_none_or(|w| w.is_empty()), "nothing was logged");
        let missing = tempfile::tempdir().unwrap();
        assert!(matches!(
            SqliteStore::open_read_only(missing.path()),
            Err(StoreError::Refused(r)) if r.contains("no store")
        ));
        assert!(!missing.path().join(DB_FILE).exists());
    }

    #[test]
    fn a_new_store_is_owner_only_and_has_an_id() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let s = SqliteStore::open(&data).unwrap();
        s.commit(&Txn::new().put("/a", "1")).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&data.join(DB_FILE)), 0o600);
        assert_eq!(mode(&identity::companions(&data.join(DB_FILE))[0]), 0o600);
        assert_eq!(s.store_id().len(), 32);
        assert_eq!(SqliteStore::open(&data).unwrap().store_id(), s.store_id());
    }

    #[test]
    fn a_store_lost_inside_a_transaction_stops_without_deadlock_and_never_closes() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(dir.path()).unwrap();
        s.commit(&Txn::new().put("/k", "1")).unwrap();
        // As when a check inside a transaction finds the file gone: the connection is held.
        let guard = s.lock().unwrap();
        assert!(s.lose("gone".into()).is_lost());
        drop(guard);
        assert!(s.get("/k").unwrap_err().is_lost());
        assert!(
            s.conn.lock().unwrap().is_none(),
            "the connection was let go"
        );
        drop(s);
        let wal = identity::companions(&dir.path().join(DB_FILE))[0].clone();
        assert!(
            wal.exists(),
            "nothing closed the connection, so nothing checkpointed"
        );
    }
}
