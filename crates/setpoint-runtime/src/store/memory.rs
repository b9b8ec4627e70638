//! An in-memory store with the same semantics as the SQLite one, for tests and single-process use.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{
    check_txn, prefix_end, wall_ms, Entry, LeaseId, Op, Read, Revision, Store, StoreError, Txn,
};

#[derive(Debug)]
struct Lease {
    ttl: Duration,
    expires: Instant,
}

#[derive(Debug, Default)]
struct State {
    revision: Revision,
    kv: BTreeMap<String, Entry>,
    leases: BTreeMap<LeaseId, Lease>,
    next_lease: LeaseId,
}

impl State {
    /// Drops expired leases and their keys; one new revision if anything went.
    fn sweep(&mut self, now: Instant) {
        let expired: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|(_, l)| l.expires <= now)
            .map(|(&id, _)| id)
            .collect();
        if expired.is_empty() {
            return;
        }
        for id in &expired {
            self.leases.remove(id);
        }
        let before = self.kv.len();
        self.kv
            .retain(|_, e| !e.lease.is_some_and(|l| expired.contains(&l)));
        if self.kv.len() != before {
            self.revision += 1;
        }
    }
}

/// A store held in this process's memory. Leases expire on a monotonic clock.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

impl MemoryStore {
    /// An empty store at revision 0.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.sweep(Instant::now());
        s
    }
}

impl Store for MemoryStore {
    fn read(&self, prefixes: &[&str]) -> Result<Read, StoreError> {
        let s = self.lock();
        let mut entries: Vec<Entry> = Vec::new();
        for p in prefixes {
            entries.extend(
                s.kv.range(p.to_string()..prefix_end(p))
                    .map(|(_, e)| e.clone()),
            );
        }
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        entries.dedup_by(|a, b| a.key == b.key);
        Ok(Read {
            revision: s.revision,
            entries,
        })
    }

    fn commit(&self, txn: &Txn) -> Result<Revision, StoreError> {
        let mut s = self.lock();
        check_txn(
            txn,
            |k| s.kv.get(k).map_or(0, |e| e.mod_revision),
            |id| s.leases.contains_key(&id),
        )?;
        if txn.ops.is_empty() {
            return Ok(s.revision);
        }
        s.revision += 1;
        let rev = s.revision;
        for op in &txn.ops {
            match op {
                Op::Put { key, value, lease } => {
                    let create_revision = s.kv.get(key).map_or(rev, |e| e.create_revision);
                    s.kv.insert(
                        key.clone(),
                        Entry {
                            key: key.clone(),
                            value: value.clone(),
                            create_revision,
                            mod_revision: rev,
                            lease: *lease,
                        },
                    );
                }
                Op::Delete { key } => {
                    s.kv.remove(key);
                }
            }
        }
        Ok(rev)
    }

    fn revision(&self) -> Result<Revision, StoreError> {
        Ok(self.lock().revision)
    }

    fn grant(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        let mut s = self.lock();
        s.next_lease += 1;
        let id = s.next_lease;
        s.leases.insert(
            id,
            Lease {
                ttl,
                expires: Instant::now() + ttl,
            },
        );
        Ok(id)
    }

    fn keep_alive(&self, lease: LeaseId) -> Result<(), StoreError> {
        let mut s = self.lock();
        let l = s
            .leases
            .get_mut(&lease)
            .ok_or(StoreError::LeaseExpired(lease))?;
        l.expires = Instant::now() + l.ttl;
        Ok(())
    }

    fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        let mut s = self.lock();
        if s.leases.remove(&lease).is_some() {
            let before = s.kv.len();
            s.kv.retain(|_, e| e.lease != Some(lease));
            if s.kv.len() != before {
                s.revision += 1;
            }
        }
        Ok(())
    }

    fn now_ms(&self) -> u64 {
        wall_ms()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::store::conformance_tests!(Some(((), MemoryStore::new())), Duration::from_millis(100));
}
