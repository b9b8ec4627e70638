//! A memory store whose commits fail by a test's rule: a write refused, or not answered in
//! time, at the commit the test picks, or another writer's change just before it.

use crate::store::{LeaseId, MemoryStore, Read, Revision, Store, StoreError, Txn};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A [`MemoryStore`] whose commits a rule may fail. Just before each commit, `fail` is handed
/// the store under it (to change it first, as another writer would), the commit's number
/// (from 1) and its transaction; the error it returns fails the commit, which is then not
/// carried out. Everything else is the memory store's.
pub(crate) struct FailingCommits<F> {
    pub(crate) inner: MemoryStore,
    commits: AtomicUsize,
    fail: F,
}

impl<F> FailingCommits<F>
where
    F: Fn(&MemoryStore, usize, &Txn) -> Option<StoreError> + Send + Sync + 'static,
{
    /// The store `inner`, its commits failed by `fail`.
    pub(crate) fn new(inner: MemoryStore, fail: F) -> Self {
        Self {
            inner,
            commits: AtomicUsize::new(0),
            fail,
        }
    }

    /// How many commits were tried, failed ones too.
    pub(crate) fn commits(&self) -> usize {
        self.commits.load(Ordering::SeqCst)
    }
}

/// A store that refuses, as too big, every transaction of more than `max_ops` operations, as
/// an etcd run with a `--max-txn-ops` below its default does (with 0, every write: reads and
/// leases go on).
pub(crate) fn refusing(
    inner: MemoryStore,
    max_ops: usize,
) -> FailingCommits<impl Fn(&MemoryStore, usize, &Txn) -> Option<StoreError> + Send + Sync> {
    FailingCommits::new(inner, move |_: &MemoryStore, _, txn: &Txn| {
        (crate::store::limits::txn_ops(txn) > max_ops).then(|| {
            StoreError::TooBig(
                "etcd at test refused a transaction as too big (etcdserver: too many \
                 operations in txn request)"
                    .into(),
            )
        })
    })
}

impl<F> Store for FailingCommits<F>
where
    F: Fn(&MemoryStore, usize, &Txn) -> Option<StoreError> + Send + Sync + 'static,
{
    fn read(&self, prefixes: &[&str]) -> Result<Read, StoreError> {
        self.inner.read(prefixes)
    }
    fn commit(&self, txn: &Txn) -> Result<Revision, StoreError> {
        let n = 1 + self.commits.fetch_add(1, Ordering::SeqCst);
        match (self.fail)(&self.inner, n, txn) {
            Some(e) => Err(e),
            None => self.inner.commit(txn),
        }
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
    fn now_ms(&self) -> u64 {
        self.inner.now_ms()
    }
}
