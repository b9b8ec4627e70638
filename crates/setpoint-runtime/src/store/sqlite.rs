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
//! CREATE TABLE meta   (id INTEGER PRIMARY KEY CHECK (id = 0), revision INTEGER NOT NULL);
//! CREATE TABLE kv     (key TEXT PRIMARY KEY, value TEXT NOT NULL, create_revision INTEGER NOT NULL,
//!                      mod_revision INTEGER NOT NULL, lease INTEGER) WITHOUT ROWID;
//! CREATE TABLE leases (id INTEGER PRIMARY KEY AUTOINCREMENT, ttl_ms INTEGER NOT NULL,
//!                      expires_ms INTEGER NOT NULL);
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::{prefix_end, wall_ms, Entry, LeaseId, Op, Read, Revision, Store, StoreError, Txn};

/// The database file's name inside the data directory.
pub const DB_FILE: &str = "store.sqlite";

/// How long a write waits for another process's write to finish before it gives up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (id INTEGER PRIMARY KEY CHECK (id = 0), revision INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL,
    create_revision INTEGER NOT NULL, mod_revision INTEGER NOT NULL, lease INTEGER) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_lease ON kv (lease) WHERE lease IS NOT NULL;
CREATE TABLE IF NOT EXISTS leases (id INTEGER PRIMARY KEY AUTOINCREMENT, ttl_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (id, revision) VALUES (0, 0);
";

/// A store in a SQLite database under a data directory.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Mutex<Connection>,
    path: PathBuf,
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

fn db(e: rusqlite::Error) -> StoreError {
    unavailable(e)
}

impl SqliteStore {
    /// Opens (creating if needed) the store in `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(data_dir)
            .map_err(|e| unavailable(format!("creating {}: {e}", data_dir.display())))?;
        let path = data_dir.join(DB_FILE);
        // Switching to WAL and creating the schema can meet another process doing the same,
        // and SQLite reports that as "locked" at once rather than waiting; so wait here.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        loop {
            match Self::try_open(&path) {
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if matches!(
                        e.code,
                        rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                    ) && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(unavailable(format!("opening {}: {e}", path.display()))),
                Ok(conn) => {
                    return Ok(Self {
                        conn: Mutex::new(conn),
                        path,
                    })
                }
            }
        }
    }

    fn try_open(path: &Path) -> Result<Connection, rusqlite::Error> {
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(rusqlite::Error::InvalidParameterName(format!(
                "journal mode {mode}: WAL is needed; is the data directory on a network filesystem?"
            )));
        }
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(SCHEMA)?;
        tx.commit()?;
        Ok(conn)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` in one write transaction, after removing expired leases and their keys.
    fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>, Revision, u64) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db)?;
        let now = wall_ms();
        let rev = sweep(&tx, now)?;
        let out = f(&tx, rev, now)?;
        tx.commit().map_err(db)?;
        Ok(out)
    }

    /// Removes expired leases first if there are any, so that reads never show their keys.
    fn sweep_if_due(&self) -> Result<(), StoreError> {
        let due: bool = self
            .lock()
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
    fn read(&self, prefixes: &[&str]) -> Result<Read, StoreError> {
        self.sweep_if_due()?;
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(db)?;
        let rev = revision(&tx)?;
        let mut entries = Vec::new();
        {
            let mut q = tx
                .prepare_cached(
                    "SELECT key, value, create_revision, mod_revision, lease FROM kv
                     WHERE key >= ?1 AND key < ?2 ORDER BY key",
                )
                .map_err(db)?;
            for p in prefixes {
                let rows = q
                    .query_map(params![p, prefix_end(p)], |r| {
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
        self.sweep_if_due()?;
        revision(&self.lock())
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
}
