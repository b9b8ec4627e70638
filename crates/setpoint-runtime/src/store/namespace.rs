//! A store inside another: every key under one prefix, so that several independent runtimes
//! (the cells of `setpoint experiment lesson --real`) share one etcd cluster without seeing each
//! other's keys. Revisions and leases stay the shared store's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Compare, LeaseId, Op, Read, Revision, Store, StoreError, Txn, WatchEvent, Watcher};

/// The keys of `inner` under `prefix`, seen without the prefix.
pub struct Namespaced {
    inner: Arc<dyn Store>,
    prefix: String,
}

impl Namespaced {
    /// The part of `inner` under `prefix` (such as `/experiment/ledger-g5`, without a trailing
    /// `/`: keys already start with one).
    pub fn new(inner: Arc<dyn Store>, prefix: impl Into<String>) -> Self {
        Self {
            inner,
            prefix: prefix.into(),
        }
    }

    fn outer(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// Removes every key of the namespace, as many per transaction as a default etcd takes.
    pub fn clear(&self) -> Result<(), StoreError> {
        // Every key starts with `/`, so the namespace's keys are those under `{prefix}/`, and
        // a neighbour such as `{prefix}0/…` is not among them.
        let read = self.inner.read(&[&format!("{}/", self.prefix)])?;
        for chunk in read.entries.chunks(super::TxnLimits::ETCD_DEFAULT.max_ops) {
            let txn = chunk
                .iter()
                .fold(Txn::new(), |t, e| t.delete(e.key.clone()));
            self.inner.commit(&txn)?;
        }
        Ok(())
    }
}

impl Namespaced {
    /// `read` (the inner store's read or read-until) of `prefixes` under this namespace, with the
    /// namespace taken off the keys read.
    fn read_with(
        &self,
        prefixes: &[&str],
        read: impl FnOnce(&[&str]) -> Result<Read, StoreError>,
    ) -> Result<Read, StoreError> {
        let outer: Vec<String> = prefixes.iter().map(|p| self.outer(p)).collect();
        let refs: Vec<&str> = outer.iter().map(String::as_str).collect();
        let mut read = read(&refs)?;
        for e in &mut read.entries {
            e.key = e.key[self.prefix.len()..].to_owned();
        }
        Ok(read)
    }
}

impl Store for Namespaced {
    fn read(&self, prefixes: &[&str]) -> Result<Read, StoreError> {
        self.read_with(prefixes, |p| self.inner.read(p))
    }

    fn read_until(&self, prefixes: &[&str], deadline: Instant) -> Result<Read, StoreError> {
        self.read_with(prefixes, |p| self.inner.read_until(p, deadline))
    }

    fn commit(&self, txn: &Txn) -> Result<Revision, StoreError> {
        let outer = Txn {
            compares: txn
                .compares
                .iter()
                .map(|c| Compare {
                    key: self.outer(&c.key),
                    mod_revision: c.mod_revision,
                })
                .collect(),
            ops: txn
                .ops
                .iter()
                .map(|op| match op {
                    Op::Put { key, value, lease } => Op::Put {
                        key: self.outer(key),
                        value: value.clone(),
                        lease: *lease,
                    },
                    Op::Delete { key } => Op::Delete {
                        key: self.outer(key),
                    },
                })
                .collect(),
        };
        self.inner.commit(&outer).map_err(|e| match e {
            StoreError::Conflict {
                key,
                expected,
                found,
            } => StoreError::Conflict {
                key: key
                    .strip_prefix(&self.prefix)
                    .map_or(key.clone(), str::to_owned),
                expected,
                found,
            },
            other => other,
        })
    }

    fn alarm(&self) -> Result<Option<String>, StoreError> {
        self.inner.alarm()
    }

    fn revision(&self) -> Result<Revision, StoreError> {
        self.inner.revision()
    }

    fn grant(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        self.inner.grant(ttl)
    }

    fn keep_alive(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.inner.keep_alive(lease)
    }

    fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.inner.revoke(lease)
    }

    /// The history is the whole store's: a namespace shares its revisions with every other.
    fn compact_history(&self, before: Revision) -> Result<(), StoreError> {
        self.inner.compact_history(before)
    }

    fn now_ms(&self) -> u64 {
        self.inner.now_ms()
    }

    fn watches(&self) -> bool {
        self.inner.watches()
    }

    fn watch(
        &self,
        prefixes: &[&str],
        after: Revision,
    ) -> Option<Result<Box<dyn Watcher>, StoreError>> {
        let outer: Vec<String> = prefixes.iter().map(|p| self.outer(p)).collect();
        let refs: Vec<&str> = outer.iter().map(String::as_str).collect();
        Some(self.inner.watch(&refs, after)?.map(|inner| {
            Box::new(Stripped {
                inner,
                cut: self.prefix.len(),
            }) as Box<dyn Watcher>
        }))
    }
}

/// A watch of the outer store whose keys lose the namespace's prefix.
struct Stripped {
    inner: Box<dyn Watcher>,
    cut: usize,
}

impl Watcher for Stripped {
    fn next(&mut self, wait: Duration) -> WatchEvent {
        match self.inner.next(wait) {
            WatchEvent::Changes {
                revision,
                mut changes,
            } => {
                for c in &mut changes {
                    c.key = c.key[self.cut..].to_owned();
                    if let Some(e) = &mut c.entry {
                        e.key = c.key.clone();
                    }
                }
                WatchEvent::Changes { revision, changes }
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    fn store() -> Option<((), Namespaced)> {
        let inner: Arc<dyn Store> = Arc::new(MemoryStore::new());
        // Keys outside the namespace, before and after it in key order, must stay invisible.
        inner
            .commit(&Txn::new().put("/a", "x").put("/ns0/a", "x"))
            .unwrap();
        Some(((), Namespaced::new(inner, "/ns")))
    }

    crate::store::conformance_tests!(store(), Duration::from_millis(100));

    #[test]
    fn two_namespaces_do_not_see_each_other_and_clear_removes_only_its_own() {
        let inner: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let (a, b) = (
            Namespaced::new(Arc::clone(&inner), "/x/a"),
            Namespaced::new(Arc::clone(&inner), "/x/a0"),
        );
        a.commit(&Txn::new().expect("/k", 0).put("/k", "1"))
            .unwrap();
        b.commit(&Txn::new().expect("/k", 0).put("/k", "2"))
            .unwrap();
        assert_eq!(a.get("/k").unwrap().unwrap().value, "1");
        let lost = a.commit(&Txn::new().expect("/k", 0).put("/k", "3"));
        assert!(matches!(lost, Err(StoreError::Conflict { ref key, .. }) if key == "/k"));
        a.clear().unwrap();
        assert_eq!(a.get("/k").unwrap(), None);
        assert_eq!(b.get("/k").unwrap().unwrap().value, "2");
        assert_eq!(inner.read(&["/"]).unwrap().entries.len(), 1);
    }
}
