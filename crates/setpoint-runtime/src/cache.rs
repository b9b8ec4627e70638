//! The informer: a local copy of some prefixes of the store, built from one read and then kept
//! by a watch from that read's revision, so that a pass reads memory instead of every key.
//!
//! - **One read, then a watch.** [`Cache::start`] reads the prefixes once and watches for the
//!   changes after that read's revision ([`Store::watch`]). Each delivery holds whole
//!   transactions and is applied under one lock, so the cache is always the store's state at one
//!   revision, restricted to its prefixes: it can show only what the store held, never a mix of
//!   two revisions, and never a copy that no report showed.
//! - **Resync.** When the watch is lost (the history it needed was compacted, the connection
//!   broke) the cache reads everything again and watches from there; until the read succeeds it
//!   is *not live*, and [`CachedStore`] sends reads to the store (which then fails as the store
//!   fails, rather than serve old data as new).
//! - **Stores that cannot push** ([`Store::watch`] is `None`: SQLite, memory) are polled: the
//!   cache reads again whenever [`Store::revision`] moves.
//! - **Its revision is exposed** ([`Cache::revision`], and the `revision` of every [`Read`] it
//!   serves), and [`Cache::subscribe`] wakes whoever waits for a change.
//! - **Read your writes.** A [`CachedStore`] remembers the newest revision it committed or met in
//!   a conflict, and a read waits (a bounded time) until the cache has caught up with it, so a
//!   pass that lost a race reads the state that beat it instead of losing again.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::store::{
    Change, Entry, LeaseId, Op, Read, Revision, Store, StoreError, Txn, WatchEvent, Watcher,
};

/// How long a [`CachedStore`] read waits for the cache to reach a revision it committed before
/// it reads the store instead.
const CATCH_UP: Duration = Duration::from_secs(1);

/// What the cache has done, for measurements (`scripts/bench-runtime.sh`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Full reads of the prefixes: the first, and one per resync.
    pub full_reads: u64,
    /// Keys those full reads returned.
    pub keys_read: u64,
    /// Key changes the watch delivered.
    pub changes: u64,
    /// Reads a [`CachedStore`] served from the cache.
    pub served: u64,
    /// Reads a [`CachedStore`] sent to the store (cache not live, or behind, or not covering).
    pub passed_through: u64,
}

/// The I/O-free part of a cache: the copy of some prefixes at one revision, whether it follows
/// the store, and what it has done. [`Cache`] keeps one on a thread of its own; the controller
/// host ([`crate::controller::Host`]) keeps one in its state and feeds it the replies and watch
/// deliveries it asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheCore {
    prefixes: Vec<String>,
    revision: Revision,
    kv: BTreeMap<String, Entry>,
    live: bool,
    stats: CacheStats,
}

impl CacheCore {
    /// An empty, not yet live cache of `prefixes`.
    pub fn new(prefixes: &[&str]) -> Self {
        Self {
            prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
            ..Self::default()
        }
    }

    /// The prefixes it holds.
    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }

    /// Whether every key under `prefix` is under one of the cache's prefixes.
    pub fn covers(&self, prefix: &str) -> bool {
        self.prefixes.iter().any(|p| prefix.starts_with(p.as_str()))
    }

    /// The revision it is at (0 before its first read).
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// Whether it follows the store now: its last full read succeeded and its watch was not
    /// lost since.
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// What it has done so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Replaces its contents with `read`, a read of every prefix: it is live from here.
    pub fn reset(&mut self, read: Read) {
        self.stats.full_reads += 1;
        self.stats.keys_read += read.entries.len() as u64;
        self.kv = read
            .entries
            .into_iter()
            .map(|e| (e.key.clone(), e))
            .collect();
        self.revision = read.revision;
        self.live = true;
    }

    /// Applies one watch delivery: `changes`, after which the store is at `revision`. Returns
    /// the keys changed.
    pub fn apply(&mut self, revision: Revision, changes: Vec<Change>) -> Vec<String> {
        let keys: Vec<String> = changes.iter().map(|c| c.key.clone()).collect();
        self.stats.changes += changes.len() as u64;
        for c in changes {
            match c.entry {
                Some(e) => {
                    self.kv.insert(c.key, e);
                }
                None => {
                    self.kv.remove(&c.key);
                }
            }
        }
        self.revision = self.revision.max(revision);
        keys
    }

    /// Marks it as not following the store (its watch is lost, or its read failed): it serves
    /// nothing until the next [`CacheCore::reset`].
    pub fn set_live(&mut self, live: bool) {
        self.live = live;
    }

    /// The keys under `prefixes` as it holds them, if it is live and covers them all; counts a
    /// read served.
    pub fn read(&mut self, prefixes: &[&str]) -> Option<Read> {
        if !self.live || !prefixes.iter().all(|p| self.covers(p)) {
            return None;
        }
        let mut entries: Vec<Entry> = Vec::new();
        for p in prefixes {
            // The range `p .. prefix_end(p)`, without building either bound as a string (an
            // agent's sync reads three prefixes this way).
            entries.extend(
                self.kv
                    .range::<str, _>((Bound::Included(*p), Bound::Unbounded))
                    .take_while(|(k, _)| below_prefix_end(k, p))
                    .map(|(_, e)| e.clone()),
            );
        }
        if prefixes.len() > 1 {
            entries.sort_by(|a, b| a.key.cmp(&b.key));
            entries.dedup_by(|a, b| a.key == b.key);
        }
        self.stats.served += 1;
        Some(Read {
            revision: self.revision,
            entries,
        })
    }

    /// What [`CacheCore::read`] would return, borrowed instead of copied: the revision and the
    /// entries under `prefixes` in key order, if it is live and covers them all. `None` too if
    /// one of `prefixes` is a prefix of another (their ranges would overlap): [`CacheCore::read`]
    /// serves those. A read served this way is counted by its caller
    /// ([`CacheCore::count_served`]), which may instead answer from an earlier snapshot.
    pub fn entries<'a>(
        &'a self,
        prefixes: &[&'a str],
    ) -> Option<(Revision, impl Iterator<Item = &'a Entry> + 'a)> {
        if !self.live || !prefixes.iter().all(|p| self.covers(p)) {
            return None;
        }
        let mut sorted: Vec<&'a str> = prefixes.to_vec();
        // A caller that sorts once (the snapshot's prefixes) spares the sort on every read.
        if !prefixes.is_sorted_by(|a, b| a < b) {
            sorted.sort_unstable();
            sorted.dedup();
        }
        if sorted.windows(2).any(|w| w[1].starts_with(w[0])) {
            return None;
        }
        let kv = &self.kv;
        // Disjoint prefixes sorted: their ranges follow each other, so this is key order.
        // The range `p .. prefix_end(p)`, without building either bound as a string.
        let entries = sorted.into_iter().flat_map(move |p| {
            kv.range::<str, _>((Bound::Included(p), Bound::Unbounded))
                .take_while(move |(k, _)| below_prefix_end(k, p))
                .map(|(_, e)| e)
        });
        Some((self.revision, entries))
    }

    /// The entry of `key` as it holds it (whether live or not).
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        self.kv.get(key)
    }

    /// How many keys it holds.
    pub fn len(&self) -> usize {
        self.kv.len()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.kv.is_empty()
    }

    /// Counts a read served from [`CacheCore::entries`].
    pub fn count_served(&mut self) {
        self.stats.served += 1;
    }

    /// Counts a read it could not serve.
    pub fn passed_through(&mut self) {
        self.stats.passed_through += 1;
    }
}

type State = CacheCore;

/// A local copy of some prefixes of a store, kept by a watch (or by polling).
pub struct Cache {
    prefixes: Vec<String>,
    state: Mutex<State>,
    moved: Condvar,
    changed: tokio::sync::watch::Sender<Revision>,
    /// Those woken only by changes under some prefixes.
    subscribers: Mutex<Vec<(Vec<String>, tokio::sync::watch::Sender<Revision>)>>,
    stop: AtomicBool,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("prefixes", &self.prefixes)
            .field("revision", &self.revision())
            .finish()
    }
}

/// Stops a cache's thread when the last handle goes.
#[derive(Debug)]
pub struct CacheHandle {
    cache: Arc<Cache>,
}

impl Drop for CacheHandle {
    fn drop(&mut self) {
        self.cache.stop.store(true, Ordering::SeqCst);
    }
}

impl std::ops::Deref for CacheHandle {
    type Target = Cache;
    fn deref(&self) -> &Cache {
        &self.cache
    }
}

impl Cache {
    /// Starts a cache of `prefixes` of `store` on its own thread. `poll` is how often a store
    /// that cannot push is asked for its revision. The thread ends soon after the handle is
    /// dropped.
    pub fn start(store: Arc<dyn Store>, prefixes: &[&str], poll: Duration) -> Arc<CacheHandle> {
        let cache = Arc::new(Cache {
            prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
            state: Mutex::new(CacheCore::new(prefixes)),
            moved: Condvar::new(),
            changed: tokio::sync::watch::channel(0).0,
            subscribers: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let worker = Arc::clone(&cache);
        std::thread::Builder::new()
            .name("setpoint-cache".into())
            .spawn(move || worker.run(&*store, poll))
            .expect("a thread can be started");
        Arc::new(CacheHandle { cache })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The revision the cache is at (0 before its first read).
    pub fn revision(&self) -> Revision {
        self.lock().revision
    }

    /// Whether the cache follows the store now (its last read or watch delivery succeeded and
    /// the watch is running).
    pub fn is_live(&self) -> bool {
        self.lock().live
    }

    /// A receiver that sees the cache's revision each time it moves.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Revision> {
        self.changed.subscribe()
    }

    /// A receiver that sees the cache's revision each time a change under one of `prefixes`
    /// arrives (and after every resync, which may hide any change).
    pub fn subscribe_to(&self, prefixes: &[&str]) -> tokio::sync::watch::Receiver<Revision> {
        let (tx, rx) = tokio::sync::watch::channel(self.revision());
        self.subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((prefixes.iter().map(|p| (*p).to_owned()).collect(), tx));
        rx
    }

    /// Wakes the subscribers whose prefixes hold one of `keys` (all of them if `None`).
    fn notify(&self, keys: Option<&[String]>, rev: Revision) {
        let subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        for (prefixes, tx) in subs.iter() {
            let hit = keys.is_none_or(|keys| {
                keys.iter()
                    .any(|k| prefixes.iter().any(|p| k.starts_with(p.as_str())))
            });
            if hit {
                tx.send_replace(rev);
            }
        }
    }

    /// What the cache has done so far.
    pub fn stats(&self) -> CacheStats {
        self.lock().stats
    }

    /// Whether every key under `prefix` is under one of the cache's prefixes.
    pub fn covers(&self, prefix: &str) -> bool {
        self.prefixes.iter().any(|p| prefix.starts_with(p.as_str()))
    }

    /// Waits until the cache is live at `revision` or later, at most `wait`.
    pub fn wait_for(&self, revision: Revision, wait: Duration) -> bool {
        let deadline = std::time::Instant::now() + wait;
        let mut s = self.lock();
        while !(s.live && s.revision >= revision) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            s = self
                .moved
                .wait_timeout(s, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// The keys under `prefixes` as the cache holds them, if it is live.
    fn read(&self, prefixes: &[&str]) -> Option<Read> {
        self.lock().read(prefixes)
    }

    fn publish(&self, s: MutexGuard<'_, State>) {
        let rev = s.revision;
        drop(s);
        self.moved.notify_all();
        self.changed.send_if_modified(|r| {
            let moved = *r != rev;
            *r = rev;
            moved
        });
    }

    fn set_live(&self, live: bool) {
        let mut s = self.lock();
        s.live = live;
        self.publish(s);
    }

    /// Reads every prefix and replaces the cache's contents with it.
    fn full_read(&self, store: &dyn Store) -> Result<Revision, StoreError> {
        let refs: Vec<&str> = self.prefixes.iter().map(String::as_str).collect();
        let read = store.read(&refs)?;
        let mut s = self.lock();
        s.reset(read);
        let rev = s.revision;
        self.publish(s);
        self.notify(None, rev);
        Ok(rev)
    }

    fn run(&self, store: &dyn Store, poll: Duration) {
        let mut backoff = Duration::from_millis(50);
        while !self.stop.load(Ordering::SeqCst) {
            let rev = match self.full_read(store) {
                Ok(r) => {
                    backoff = Duration::from_millis(50);
                    r
                }
                Err(_) => {
                    self.set_live(false);
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            };
            let refs: Vec<&str> = self.prefixes.iter().map(String::as_str).collect();
            match store.watch(&refs, rev) {
                Some(Ok(w)) => self.follow(w),
                Some(Err(_)) => std::thread::sleep(backoff),
                None => self.poll(store, rev, poll),
            }
            // The watch is lost (or polling saw a change): read everything again.
            if !self.stop.load(Ordering::SeqCst) {
                let mut s = self.lock();
                s.live = false;
                drop(s);
            }
        }
    }

    /// Applies a watch's deliveries until it is lost or the cache stops.
    fn follow(&self, mut w: Box<dyn Watcher>) {
        while !self.stop.load(Ordering::SeqCst) {
            match w.next(Duration::from_millis(100)) {
                WatchEvent::Idle => {}
                WatchEvent::Lost(_) => return,
                WatchEvent::Changes { revision, changes } => {
                    let mut s = self.lock();
                    let keys = s.apply(revision, changes);
                    let rev = s.revision;
                    self.publish(s);
                    self.notify(Some(&keys), rev);
                }
            }
        }
    }

    /// For a store that cannot push: returns when its revision moves past `rev`.
    fn poll(&self, store: &dyn Store, rev: Revision, every: Duration) {
        while !self.stop.load(Ordering::SeqCst) {
            std::thread::sleep(every);
            match store.revision() {
                Ok(r) if r == rev => {}
                _ => return,
            }
        }
    }
}

/// A store whose reads of the cached prefixes come from a [`Cache`], and whose writes and
/// leases go to the store. Reads of other prefixes, and every read while the cache is not live,
/// go to the store.
pub struct CachedStore {
    inner: Arc<dyn Store>,
    cache: Arc<CacheHandle>,
    /// The newest revision this handle committed or saw in a conflict: reads wait for it.
    seen: AtomicU64,
}

impl CachedStore {
    /// Reads of `cache`'s prefixes from `cache`, everything else from `inner` (the store the
    /// cache follows).
    pub fn new(inner: Arc<dyn Store>, cache: Arc<CacheHandle>) -> Self {
        Self {
            inner,
            cache,
            seen: AtomicU64::new(0),
        }
    }

    /// The cache behind this store.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    fn saw(&self, rev: Revision) {
        self.seen.fetch_max(rev, Ordering::SeqCst);
    }
}

/// A store for passes over `prefixes` of `store`: a [`CachedStore`] when `store` can push
/// changes ([`Store::watch`]); `store` itself when it cannot, so that an embedded store is read
/// directly, as fresh as it is. Returns the cache too, if there is one.
pub fn cached(
    store: &Arc<dyn Store>,
    prefixes: &[&str],
) -> (Arc<dyn Store>, Option<Arc<CacheHandle>>) {
    if !store.watches() {
        return (Arc::clone(store), None);
    }
    let cache = Cache::start(Arc::clone(store), prefixes, Duration::from_millis(50));
    let s: Arc<dyn Store> = Arc::new(CachedStore::new(Arc::clone(store), Arc::clone(&cache)));
    (s, Some(cache))
}

impl CachedStore {
    /// The read of `prefixes` from the cache, once it shows this store's own last write (waiting
    /// up to [`CATCH_UP`]), or `None` (counted as passed through) when the store must answer.
    fn cached(&self, prefixes: &[&str]) -> Option<Read> {
        if prefixes.iter().all(|p| self.cache.covers(p))
            && self
                .cache
                .wait_for(self.seen.load(Ordering::SeqCst), CATCH_UP)
        {
            if let Some(r) = self.cache.read(prefixes) {
                return Some(r);
            }
        }
        self.cache.lock().passed_through();
        None
    }
}

impl Store for CachedStore {
    fn alarm(&self) -> Result<Option<String>, StoreError> {
        self.inner.alarm()
    }

    fn read(&self, prefixes: &[&str]) -> Result<Read, StoreError> {
        self.cached(prefixes)
            .map_or_else(|| self.inner.read(prefixes), Ok)
    }

    fn read_until(&self, prefixes: &[&str], deadline: Instant) -> Result<Read, StoreError> {
        self.cached(prefixes)
            .map_or_else(|| self.inner.read_until(prefixes, deadline), Ok)
    }

    /// Commits to the store. A commit that wrote a cached key, or a conflict on one, makes the
    /// next read wait for the cache to show it; a commit of other keys alone (an agent's report)
    /// does not, since no change of the cache would ever show it.
    fn commit(&self, txn: &Txn) -> Result<Revision, StoreError> {
        let touches = txn.ops.iter().any(|op| match op {
            Op::Put { key, .. } | Op::Delete { key } => self.cache.covers(key),
        });
        match self.inner.commit(txn) {
            Ok(rev) => {
                if touches {
                    self.saw(rev);
                }
                Ok(rev)
            }
            Err(e) => {
                if let StoreError::Conflict { key, found, .. } = &e {
                    if self.cache.covers(key) {
                        self.saw(*found);
                    }
                }
                Err(e)
            }
        }
    }

    /// The cache's revision while it is live (no round trip); the store's otherwise.
    fn revision(&self) -> Result<Revision, StoreError> {
        let s = self.cache.lock();
        if s.live {
            Ok(s.revision)
        } else {
            drop(s);
            self.inner.revision()
        }
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

    fn compact_history(&self, before: Revision) -> Result<(), StoreError> {
        self.inner.compact_history(before)
    }

    fn now_ms(&self) -> u64 {
        self.inner.now_ms()
    }
}

/// Whether `key` sorts before [`crate::store::prefix_end`]`(prefix)` (the prefix followed by
/// `\x7f`), comparing in place.
fn below_prefix_end(key: &str, prefix: &str) -> bool {
    let (k, p) = (key.as_bytes(), prefix.as_bytes());
    let n = p.len().min(k.len());
    match k[..n].cmp(&p[..n]) {
        std::cmp::Ordering::Less => true,
        std::cmp::Ordering::Greater => false,
        // They agree as far as both go: a key no longer than the prefix is before the end;
        // a longer one is before it if its next byte is below `\x7f` (a key
        // that is exactly the end is not below it).
        std::cmp::Ordering::Equal => k.get(p.len()).is_none_or(|&b| b < 0x7f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{EtcdStore, MemoryStore};
    use crate::testing::EtcdCluster;

    const PREFIXES: [&str; 2] = ["/a/", "/b/"];

    #[test]
    fn below_prefix_end_is_the_string_comparison_with_the_end() {
        let keys = [
            "",
            "/a",
            "/a/",
            "/a/b",
            "/a\u{7f}",
            "/a\u{7f}x",
            "/a\u{7e}",
            "/b",
            "/a/é",
            "/",
        ];
        for p in ["/a", "/a/", "", "/"] {
            for k in keys {
                let want = k < crate::store::prefix_end(p).as_str();
                assert_eq!(below_prefix_end(k, p), want, "{k:?} under {p:?}");
            }
        }
    }

    /// A seeded sequence of writes: puts, deletes and leased puts under the cached prefixes, a
    /// key between them and one after them (which the cache must not show).
    fn churn(s: &dyn Store, seed: u64, steps: usize) {
        let mut x = seed;
        let mut next = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        let lease = s.grant(Duration::from_secs(30)).unwrap();
        for i in 0..steps {
            let mut t = Txn::new();
            for _ in 0..=next() % 3 {
                let key = format!(
                    "{}{}",
                    ["/a/", "/b/", "/ab", "/c/"][(next() % 4) as usize],
                    next() % 5
                );
                t = match next() % 4 {
                    0 => t.delete(key),
                    1 => t.put_leased(key, format!("l{i}"), lease),
                    _ => t.put(key, format!("v{i}")),
                };
            }
            s.commit(&t).unwrap();
        }
        s.revoke(lease).unwrap();
    }

    fn assert_follows(store: Arc<dyn Store>, at_revision: impl Fn(Revision) -> Read) {
        let cache = Cache::start(Arc::clone(&store), &PREFIXES, Duration::from_millis(5));
        let cached = CachedStore::new(Arc::clone(&store), Arc::clone(&cache));
        for round in 0..4 {
            churn(&*store, round, 40);
            let rev = store
                .commit(&Txn::new().put("/b/marker", round.to_string()))
                .unwrap();
            assert!(
                cache.wait_for(rev, Duration::from_secs(5)),
                "the cache never caught up"
            );
            // Whatever revision the cache is at, it shows exactly the store at that revision.
            let seen = cached.read(&PREFIXES).unwrap();
            let truth = at_revision(seen.revision);
            assert_eq!(
                seen.entries, truth.entries,
                "round {round} at {}",
                seen.revision
            );
            assert!(seen.entries.iter().all(|e| !e.key.starts_with("/ab")));
        }
        let stats = cache.stats();
        assert!(stats.served >= 4, "{stats:?}");
        assert!(stats.changes > 0 || stats.full_reads > 1, "{stats:?}");
    }

    #[test]
    fn borrowed_entries_are_the_entries_a_read_copies() {
        let store = MemoryStore::new();
        churn(&store, 7, 60);
        let mut core = CacheCore::new(&PREFIXES);
        assert!(core.entries(&PREFIXES).is_none(), "not live yet");
        core.reset(store.read(&PREFIXES).unwrap());
        for prefixes in [&["/b/", "/a/"][..], &["/a/"], &["/b/", "/b/"], &[]] {
            let read = core.read(prefixes).unwrap();
            let (revision, entries) = core.entries(prefixes).unwrap();
            let entries: Vec<Entry> = entries.cloned().collect();
            assert_eq!(
                (revision, &entries),
                (read.revision, &read.entries),
                "{prefixes:?}"
            );
        }
        assert!(
            core.entries(&["/c/"]).is_none(),
            "a prefix it does not hold"
        );
        assert!(
            core.entries(&["/a/", "/a/1"]).is_none(),
            "overlapping prefixes"
        );
        assert_eq!(
            core.stats().served,
            4,
            "the copied reads count as served; a borrowed one is counted by its caller"
        );
        core.set_live(false);
        assert!(core.entries(&["/a/"]).is_none(), "not live");
    }

    #[test]
    fn a_polled_cache_shows_the_store_as_it_was_at_the_cache_revision() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let s = Arc::clone(&store);
        // Memory keeps no history: compare after the cache has caught up with the last write.
        assert_follows(store, move |rev| {
            let r = s.read(&PREFIXES).unwrap();
            assert_eq!(r.revision, rev, "a polled cache catches up with the store");
            r
        });
    }

    /// `revision` is what the cache shows (the position its users compare their writes
    /// against), and a new subscriber starts from it rather than from 0, which would read as
    /// "moved" at once.
    #[test]
    fn a_cache_gives_the_revision_it_shows_and_a_new_subscriber_starts_there() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = Cache::start(Arc::clone(&store), &PREFIXES, Duration::from_millis(5));
        let rev = store.commit(&Txn::new().put("/a/1", "x")).unwrap();
        assert!(
            cache.wait_for(rev, Duration::from_secs(5)),
            "never caught up"
        );
        assert_eq!(cache.revision(), rev);
        assert_eq!(*cache.subscribe_to(&["/a/"]).borrow(), rev);
    }

    #[test]
    fn a_cache_whose_last_handle_is_dropped_stops_its_thread_and_lets_the_store_go() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = Cache::start(Arc::clone(&store), &PREFIXES, Duration::from_millis(5));
        let again = Arc::clone(&cache);
        drop(cache);
        // Another handle keeps it running: its thread still holds the store.
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(Arc::strong_count(&store), 2, "the thread ended too early");
        drop(again);
        // The thread looks at its stop flag after each poll (5 ms): bounded, not timed.
        let mut polls = 0;
        while Arc::strong_count(&store) > 1 {
            polls += 1;
            assert!(
                polls < 400,
                "the cache's thread still runs 2 s after its handle went"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_lease_given_up_through_the_cached_store_ends_at_once_with_its_keys() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = Cache::start(Arc::clone(&store), &PREFIXES, Duration::from_millis(5));
        let cached = CachedStore::new(Arc::clone(&store), Arc::clone(&cache));
        let lease = cached.grant(Duration::from_secs(30)).unwrap();
        cached
            .commit(&Txn::new().put_leased("/a/leader", "c1", lease))
            .unwrap();
        cached.keep_alive(lease).unwrap();
        // A controller that stops gives its lease up, so that a standby need not wait a TTL.
        cached.revoke(lease).unwrap();
        assert!(store.get("/a/leader").unwrap().is_none(), "the key lingers");
        assert!(
            matches!(store.keep_alive(lease), Err(StoreError::LeaseExpired(_))),
            "the lease lingers"
        );
    }

    /// etcd's history is the oracle: a read at the cache's revision.
    fn read_at(store: &EtcdStore, rev: Revision) -> Read {
        let mut client = store.client();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut entries = Vec::new();
        for p in PREFIXES {
            let opts = etcd_client::GetOptions::new()
                .with_range(crate::store::prefix_end(p))
                .with_revision(rev as i64);
            let resp = rt.block_on(client.get(p, Some(opts))).unwrap();
            for kv in resp.kvs() {
                entries.push(Entry {
                    key: kv.key_str().unwrap().to_owned(),
                    value: kv.value_str().unwrap().to_owned(),
                    create_revision: kv.create_revision() as Revision,
                    mod_revision: kv.mod_revision() as Revision,
                    lease: (kv.lease() != 0).then_some(kv.lease() as LeaseId),
                });
            }
        }
        Read {
            revision: rev,
            entries,
        }
    }

    #[test]
    fn a_watched_cache_shows_the_store_as_it_was_at_the_cache_revision() {
        let Some(etcd) = EtcdCluster::start_or_skip(module_path!(), 1) else {
            return;
        };
        let oracle = etcd.store();
        let store: Arc<dyn Store> = Arc::new(etcd.store());
        assert!(store.watches());
        assert_follows(store, move |rev| read_at(&oracle, rev));
    }

    #[test]
    fn a_watch_from_compacted_history_is_lost_and_the_cache_resyncs_after_an_outage() {
        let Some(mut etcd) = EtcdCluster::start_or_skip(module_path!(), 1) else {
            return;
        };
        let s = etcd.store_with(crate::store::EtcdOptions {
            timeout: Duration::from_millis(700),
        });
        let first = s.commit(&Txn::new().put("/a/1", "1")).unwrap();
        let now = s.commit(&Txn::new().put("/a/1", "2")).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(s.client().compact(now as i64, None)).unwrap();
        let mut w = s.watch(&PREFIXES, first - 1).unwrap().unwrap();
        match w.next(Duration::from_secs(5)) {
            WatchEvent::Lost(why) => assert!(why.contains("compacted"), "{why}"),
            other => panic!("{other:?}"),
        }

        let store: Arc<dyn Store> = Arc::new(s);
        let cache = Cache::start(Arc::clone(&store), &PREFIXES, Duration::from_millis(5));
        let cached = CachedStore::new(Arc::clone(&store), Arc::clone(&cache));
        assert!(cache.wait_for(now, Duration::from_secs(5)));
        assert_eq!(cached.get("/a/1").unwrap().unwrap().value, "2");
        etcd.kill(0);
        // While the store is gone the cache does not pass old data off as current.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while cache.is_live() {
            assert!(
                std::time::Instant::now() < deadline,
                "the cache stayed live"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(matches!(
            cached.read(&PREFIXES),
            Err(StoreError::Unavailable(_))
        ));
        etcd.restart(0).unwrap();
        etcd.wait_for_leader(Duration::from_secs(20)).unwrap();
        let rev = store.commit(&Txn::new().put("/b/2", "after")).unwrap();
        assert!(cache.wait_for(rev, Duration::from_secs(10)), "no resync");
        assert_eq!(cached.get("/b/2").unwrap().unwrap().value, "after");
        assert!(cache.stats().full_reads >= 2, "{:?}", cache.stats());
    }

    #[test]
    fn a_read_after_a_commit_waits_for_the_cache_to_show_it() {
        let Some(etcd) = EtcdCluster::start_or_skip(module_path!(), 1) else {
            return;
        };
        let store: Arc<dyn Store> = Arc::new(etcd.store());
        let (cached, cache) = cached(&store, &PREFIXES);
        let cache = cache.expect("etcd pushes changes");
        for i in 0..50 {
            let key = format!("/a/{i}");
            let rev = cached
                .commit(&Txn::new().expect(&key, 0).put(&key, "x"))
                .unwrap();
            let e = cached.get(&key).unwrap().expect("read your write");
            assert_eq!(e.mod_revision, rev);
        }
        // A commit of keys the cache does not hold does not make reads wait.
        let t0 = std::time::Instant::now();
        cached.commit(&Txn::new().put("/z/report", "r")).unwrap();
        cached.read(&PREFIXES).unwrap();
        assert!(t0.elapsed() < CATCH_UP / 2, "{:?}", t0.elapsed());
        let stats = cache.stats();
        assert_eq!(stats.full_reads, 1, "{stats:?}");
        assert_eq!(stats.passed_through, 0, "{stats:?}");
        // An embedded store is read directly: no cache.
        let sqlite: Arc<dyn Store> = Arc::new(MemoryStore::new());
        assert!(super::cached(&sqlite, &PREFIXES).1.is_none());
    }
}
