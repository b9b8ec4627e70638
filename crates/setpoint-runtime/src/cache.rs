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

    /// The store's clock as [`Pushing`] tells it, far from any real clock.
    const CLOCK_MS: u64 = 1_234_567_890_123;

    /// What a [`Pushing`] store does and has been asked, shared with its watches.
    #[derive(Default)]
    struct Knobs {
        inner: MemoryStore,
        /// Whether it pushes changes (else the cache polls its revision).
        pushes: bool,
        /// Reads fail while this is above 0, each counting it down.
        failing_reads: AtomicU64,
        /// When each read was asked for.
        reads: Mutex<Vec<std::time::Instant>>,
        /// While set, reads wait (a resync that takes its time).
        held: Mutex<bool>,
        released: Condvar,
        /// While set, watches deliver nothing (a watch running late).
        watch_held: AtomicBool,
        /// Watches started before the count reached its value now are lost.
        losses: AtomicU64,
        /// Calls of `revision`: round trips.
        revision_calls: AtomicU64,
        /// What `compact_history` was asked.
        compacted: Mutex<Vec<Revision>>,
        /// Watches started.
        watches: AtomicU64,
    }

    impl Knobs {
        fn hold_reads(&self, hold: bool) {
            *self.held.lock().unwrap() = hold;
            self.released.notify_all();
        }

        fn reads(&self) -> Vec<std::time::Instant> {
            self.reads.lock().unwrap().clone()
        }

        /// Waits until the cache has started its `n`th watch: a change committed before would
        /// fall between its read and its watch, and be read again.
        fn watching(&self, n: u64) {
            eventually("the cache watches", || {
                self.watches.load(Ordering::SeqCst) >= n
            });
        }
    }

    /// A [`MemoryStore`] that pushes changes as etcd does (its watch compares the store with
    /// what it last delivered), whose reads can fail or wait, whose watches can be lost or run
    /// late, and whose clock is [`CLOCK_MS`]: the drivers' threaded cache without an etcd.
    struct Pushing(Arc<Knobs>);

    impl Pushing {
        fn start(pushes: bool, failing_reads: u64) -> (Arc<dyn Store>, Arc<Knobs>) {
            let knobs = Arc::new(Knobs {
                pushes,
                failing_reads: AtomicU64::new(failing_reads),
                ..Knobs::default()
            });
            (Arc::new(Pushing(Arc::clone(&knobs))), knobs)
        }
    }

    impl Store for Pushing {
        fn read(&self, prefixes: &[&str]) -> Result<Read, StoreError> {
            let k = &self.0;
            k.reads.lock().unwrap().push(std::time::Instant::now());
            let mut held = k.held.lock().unwrap();
            while *held {
                held = k.released.wait(held).unwrap();
            }
            drop(held);
            let fail = k
                .failing_reads
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            if fail.is_ok() {
                return Err(StoreError::Unavailable("refused by the test".into()));
            }
            k.inner.read(prefixes)
        }
        fn commit(&self, txn: &Txn) -> Result<Revision, StoreError> {
            self.0.inner.commit(txn)
        }
        fn revision(&self) -> Result<Revision, StoreError> {
            self.0.revision_calls.fetch_add(1, Ordering::SeqCst);
            self.0.inner.revision()
        }
        fn grant(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
            self.0.inner.grant(ttl)
        }
        fn keep_alive(&self, lease: LeaseId) -> Result<(), StoreError> {
            self.0.inner.keep_alive(lease)
        }
        fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
            self.0.inner.revoke(lease)
        }
        fn now_ms(&self) -> u64 {
            CLOCK_MS
        }
        fn watches(&self) -> bool {
            self.0.pushes
        }
        fn alarm(&self) -> Result<Option<String>, StoreError> {
            Ok(Some("NOSPACE (the test's)".into()))
        }
        fn compact_history(&self, before: Revision) -> Result<(), StoreError> {
            self.0.compacted.lock().unwrap().push(before);
            Ok(())
        }
        fn watch(
            &self,
            prefixes: &[&str],
            after: Revision,
        ) -> Option<Result<Box<dyn Watcher>, StoreError>> {
            if !self.0.pushes {
                return None;
            }
            let prefixes: Vec<String> = prefixes.iter().map(|p| (*p).to_owned()).collect();
            let refs: Vec<&str> = prefixes.iter().map(String::as_str).collect();
            let now = self.0.inner.read(&refs).unwrap();
            self.0.watches.fetch_add(1, Ordering::SeqCst);
            Some(Ok(Box::new(Diffing {
                knobs: Arc::clone(&self.0),
                generation: self.0.losses.load(Ordering::SeqCst),
                // A store that moved since `after` lost the history in between.
                gap: now.revision != after,
                at: now.revision,
                kv: now
                    .entries
                    .into_iter()
                    .map(|e| (e.key.clone(), e))
                    .collect(),
                prefixes,
            })))
        }
    }

    /// [`Pushing`]'s watch: each `next` delivers what changed under its prefixes since the last.
    struct Diffing {
        knobs: Arc<Knobs>,
        generation: u64,
        gap: bool,
        prefixes: Vec<String>,
        at: Revision,
        kv: BTreeMap<String, Entry>,
    }

    impl Watcher for Diffing {
        fn next(&mut self, wait: Duration) -> WatchEvent {
            if self.gap || self.knobs.losses.load(Ordering::SeqCst) > self.generation {
                return WatchEvent::Lost("lost by the test".into());
            }
            std::thread::sleep(wait.min(Duration::from_millis(1)));
            if self.knobs.watch_held.load(Ordering::SeqCst) {
                return WatchEvent::Idle;
            }
            let refs: Vec<&str> = self.prefixes.iter().map(String::as_str).collect();
            let now = self.knobs.inner.read(&refs).unwrap();
            let kv: BTreeMap<String, Entry> = now
                .entries
                .into_iter()
                .map(|e| (e.key.clone(), e))
                .collect();
            let mut changes: Vec<Change> = kv
                .iter()
                .filter(|(k, e)| self.kv.get(*k) != Some(*e))
                .map(|(k, e)| Change {
                    key: k.clone(),
                    entry: Some(e.clone()),
                })
                .collect();
            changes.extend(
                self.kv
                    .keys()
                    .filter(|k| !kv.contains_key(*k))
                    .map(|k| Change {
                        key: k.clone(),
                        entry: None,
                    }),
            );
            if changes.is_empty() || now.revision == self.at {
                return WatchEvent::Idle;
            }
            self.at = now.revision;
            self.kv = kv;
            WatchEvent::Changes {
                revision: now.revision,
                changes,
            }
        }
    }

    /// Waits (bounded, not timed) until `cond` holds.
    fn eventually(what: &str, cond: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !cond() {
            assert!(std::time::Instant::now() < deadline, "never: {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A store that refuses reads must not be asked as fast as it answers: the cache waits 50 ms
    /// after the first failed full read, then twice as long after each next one.
    #[test]
    fn a_cache_whose_reads_fail_waits_twice_as_long_after_each_failure_before_it_reads_again() {
        let (store, knobs) = Pushing::start(true, 3);
        let cache = Cache::start(Arc::clone(&store), &PREFIXES, Duration::from_millis(5));
        assert!(cache.wait_for(0, Duration::from_secs(5)), "never read");
        let reads = knobs.reads();
        assert_eq!(reads.len(), 4, "three refused, one read");
        for (i, want_ms) in [50, 100, 200].into_iter().enumerate() {
            let gap = reads[i + 1] - reads[i];
            assert!(
                gap >= Duration::from_millis(want_ms),
                "read {} came {gap:?} after a failure, not {want_ms} ms",
                i + 2
            );
        }
        assert_eq!(cache.stats().full_reads, 1);
    }

    /// A store that cannot push is asked for its revision every poll period, and read again
    /// only once that moved.
    #[test]
    fn a_polled_cache_reads_the_store_again_only_when_its_revision_moved() {
        let (store, knobs) = Pushing::start(false, 0);
        store.commit(&Txn::new().put("/a/1", "x")).unwrap();
        let cache = Cache::start(Arc::clone(&store), &PREFIXES, Duration::from_millis(1));
        assert!(cache.wait_for(1, Duration::from_secs(5)), "never read");
        eventually("ten polls", || {
            knobs.revision_calls.load(Ordering::SeqCst) >= 10
        });
        assert_eq!(knobs.reads().len(), 1, "read again with nothing changed");
        let stats = cache.stats();
        assert_eq!((stats.full_reads, stats.keys_read), (1, 1), "{stats:?}");
        let rev = store.commit(&Txn::new().put("/b/2", "y")).unwrap();
        assert!(
            cache.wait_for(rev, Duration::from_secs(5)),
            "never read again"
        );
        assert_eq!(cache.read(&PREFIXES).unwrap().entries.len(), 2);
        let stats = cache.stats();
        assert_eq!((stats.full_reads, stats.keys_read), (2, 3), "{stats:?}");
    }

    /// Once its watch is lost the cache may have missed changes: it serves nothing, and a
    /// [`CachedStore`] asks the store for the revision, until its next full read is done.
    #[test]
    fn a_cache_that_lost_its_watch_is_not_live_until_it_has_read_everything_again() {
        let (store, knobs) = Pushing::start(true, 0);
        let r0 = store.commit(&Txn::new().put("/a/1", "x")).unwrap();
        let cache = Cache::start(Arc::clone(&store), &PREFIXES, Duration::from_millis(5));
        let cached = CachedStore::new(Arc::clone(&store), Arc::clone(&cache));
        assert!(cache.wait_for(r0, Duration::from_secs(5)), "never read");
        knobs.watching(1);
        assert!(cache.is_live());
        let calls = knobs.revision_calls.load(Ordering::SeqCst);
        assert_eq!(cached.revision().unwrap(), r0);
        assert_eq!(
            knobs.revision_calls.load(Ordering::SeqCst),
            calls,
            "a live cache gives its revision without a round trip"
        );

        knobs.hold_reads(true);
        knobs.losses.fetch_add(1, Ordering::SeqCst);
        // A change the lost watch never delivers.
        let r1 = store.commit(&Txn::new().delete("/a/1")).unwrap();
        eventually("the cache is not live", || !cache.is_live());
        assert!(cache.read(&PREFIXES).is_none(), "served while not live");
        assert_eq!(cached.revision().unwrap(), r1, "the store's revision");
        eventually("the resync's read waits", || knobs.reads().len() == 2);

        knobs.hold_reads(false);
        assert!(cache.wait_for(r1, Duration::from_secs(5)), "no resync");
        assert!(cached.read(&PREFIXES).unwrap().entries.is_empty());
        assert_eq!(cache.stats().full_reads, 2);
    }

    /// Each revision the watch brings wakes whoever waits for it: [`Cache::wait_for`], every
    /// [`Cache::subscribe`]r, and the [`Cache::subscribe_to`]rs whose prefixes changed (all of
    /// them after a resync, which may hide any change). A delivery is applied, not read again.
    #[test]
    fn a_cache_wakes_its_waiters_and_the_subscribers_of_what_changed() {
        let (store, knobs) = Pushing::start(true, 0);
        // Subscribed before the first read, which wakes every subscriber to prefixes.
        knobs.hold_reads(true);
        let cache = Cache::start(Arc::clone(&store), &PREFIXES, Duration::from_millis(5));
        let mut all = cache.subscribe();
        let mut a = cache.subscribe_to(&["/a/"]);
        let mut b = cache.subscribe_to(&["/b/"]);
        knobs.hold_reads(false);
        assert!(cache.wait_for(0, Duration::from_secs(5)), "never read");
        eventually("the first read wakes every subscriber to prefixes", || {
            a.has_changed().unwrap() && b.has_changed().unwrap()
        });
        a.mark_unchanged();
        b.mark_unchanged();
        assert!(!all.has_changed().unwrap(), "the revision did not move");
        knobs.watching(1);

        let waiter = {
            let cache = Arc::clone(&cache);
            std::thread::spawn(move || {
                let t0 = std::time::Instant::now();
                (cache.wait_for(1, Duration::from_secs(10)), t0.elapsed())
            })
        };
        let r1 = store.commit(&Txn::new().put("/a/1", "x")).unwrap();
        let (woken, after) = waiter.join().unwrap();
        assert!(
            woken && after < Duration::from_secs(5),
            "woken after {after:?}"
        );
        // The subscribers are told just after the waiters are woken.
        eventually("the subscribers of /a/ see it", || {
            *all.borrow() == r1 && *a.borrow() == r1
        });
        assert!(all.has_changed().unwrap() && a.has_changed().unwrap());
        all.mark_unchanged();
        a.mark_unchanged();
        assert!(!b.has_changed().unwrap(), "woken by a change elsewhere");

        let r2 = store.commit(&Txn::new().put("/b/1", "y")).unwrap();
        eventually("the subscribers of /b/ see it", || {
            *all.borrow() == r2 && *b.borrow() == r2
        });
        assert!(all.has_changed().unwrap() && b.has_changed().unwrap());
        all.mark_unchanged();
        b.mark_unchanged();
        assert!(!a.has_changed().unwrap(), "woken by a change elsewhere");
        let stats = cache.stats();
        assert_eq!((stats.full_reads, stats.changes), (1, 2), "{stats:?}");

        knobs.losses.fetch_add(1, Ordering::SeqCst);
        eventually("a resync wakes every subscriber to prefixes", || {
            a.has_changed().unwrap() && b.has_changed().unwrap()
        });
        assert_eq!(cache.stats().full_reads, 2);
        assert!(!all.has_changed().unwrap(), "the revision did not move");
    }

    /// A read after a commit of a cached key, or after a conflict on one, shows that write:
    /// it waits for the cache to show it (here the watch runs late). A commit of other keys
    /// alone makes no read wait.
    #[test]
    fn a_read_through_the_cached_store_shows_the_write_it_committed_or_lost_to() {
        let (store, knobs) = Pushing::start(true, 0);
        let cache = Cache::start(Arc::clone(&store), &PREFIXES, Duration::from_millis(5));
        let cached = CachedStore::new(Arc::clone(&store), Arc::clone(&cache));
        assert!(cache.wait_for(0, Duration::from_secs(5)), "never read");
        knobs.watching(1);
        let late_watch = |knobs: &Arc<Knobs>| {
            knobs.watch_held.store(true, Ordering::SeqCst);
            let knobs = Arc::clone(knobs);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                knobs.watch_held.store(false, Ordering::SeqCst);
            })
        };

        let late = late_watch(&knobs);
        let rev = cached.commit(&Txn::new().put("/a/1", "mine")).unwrap();
        let read = cached.read(&PREFIXES).unwrap();
        assert_eq!((read.revision, read.entries.len()), (rev, 1), "{read:?}");
        late.join().unwrap();

        let late = late_watch(&knobs);
        let theirs = store.commit(&Txn::new().put("/b/1", "theirs")).unwrap();
        let lost = cached.commit(&Txn::new().expect("/b/1", 0).put("/b/1", "mine"));
        assert!(matches!(lost, Err(StoreError::Conflict { .. })), "{lost:?}");
        let e = cached.get("/b/1").unwrap().expect("the write that won");
        assert_eq!((e.value.as_str(), e.mod_revision), ("theirs", theirs));
        late.join().unwrap();

        let before = cache.stats();
        knobs.watch_held.store(true, Ordering::SeqCst);
        cached.commit(&Txn::new().put("/z/report", "r")).unwrap();
        cached.read(&PREFIXES).unwrap();
        let stats = cache.stats();
        assert_eq!(
            (stats.served, stats.passed_through),
            (before.served + 1, before.passed_through),
            "{stats:?}"
        );
        // A prefix the cache does not hold is read from the store.
        assert_eq!(cached.get("/z/report").unwrap().unwrap().value, "r");
        assert_eq!(cache.stats().passed_through, before.passed_through + 1);
        knobs.watch_held.store(false, Ordering::SeqCst);
    }

    /// Only the cached prefixes' reads come from the cache: the clock, alarms, leases and
    /// compaction are the store's.
    #[test]
    fn the_cached_store_passes_the_clock_alarms_leases_and_compaction_to_the_store() {
        let (store, knobs) = Pushing::start(true, 0);
        let (cached, cache) = cached(&store, &PREFIXES);
        let cache = cache.expect("a store that pushes gets a cache");
        assert!(cache.wait_for(0, Duration::from_secs(5)), "never read");
        assert_eq!(cached.now_ms(), CLOCK_MS);
        assert_eq!(
            cached.alarm().unwrap().as_deref(),
            Some("NOSPACE (the test's)")
        );
        cached.compact_history(7).unwrap();
        assert_eq!(*knobs.compacted.lock().unwrap(), [7]);
        let lease = cached.grant(Duration::from_secs(30)).unwrap();
        cached.keep_alive(lease).unwrap();
        cached.revoke(lease).unwrap();
        assert!(matches!(
            cached.keep_alive(lease),
            Err(StoreError::LeaseExpired(_))
        ));
        assert!(format!("{:?}", *cache).contains("\"/a/\""), "{cache:?}");
        let own = CachedStore::new(Arc::clone(&store), Arc::clone(&cache));
        assert!(std::ptr::eq(own.cache(), &**cache));
        // An embedded store is read directly: no cache.
        let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let (direct, none) = super::cached(&memory, &PREFIXES);
        assert!(none.is_none());
        assert!(Arc::ptr_eq(&direct, &memory));
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
