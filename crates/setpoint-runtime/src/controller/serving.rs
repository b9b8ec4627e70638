//! The leader's watch cache and its serving rule: what the cache may answer in the store's
//! place.
//!
//! On a store that pushes changes ([`HostConfig::watch_cache`](super::HostConfig)) the leader
//! reads [`Snapshot::PREFIXES`] once and watches from that read's revision. A lost watch
//! (compacted history, a broken connection) is cancelled, and the cache reads and watches
//! again ([`HostCache::start_read`]).
//!
//! **The serving rule** ([`HostCache::serve`]):
//! - a read of cached prefixes is answered from the cache only while it is live and has caught
//!   up with the newest revision this host committed to a cached key or met in a conflict on one
//!   (read your writes: [`HostCache::saw`]); a pass's or a collection's read is answered with
//!   its snapshot, built from the cache's entries borrowed (and the last snapshot's unchanged
//!   values), which is what decoding a copied reply would give; when the last snapshot is the
//!   one it served last, that snapshot is brought up to date by the keys the watch changed
//!   since, and nothing else is looked at ([`Snapshot::patched`]: at 100,000 copies a pass's
//!   snapshot after one changed report costs microseconds, not a walk over every key);
//! - the store's revision is answered while the cache is live;
//! - everything else goes to the store. A read served is dated with the store's clock as the
//!   last read reply showed it.

use std::collections::BTreeSet;

use crate::cache::{CacheCore, CacheStats};
use crate::machine::{ReqId, StoreReply, StoreRequest};
use crate::model::{Snapshot, REPORTS};
use crate::store::{Change, Op, Read, Revision, StoreError, Txn};

/// How the watch cache answered a request.
#[derive(Debug)]
pub(super) enum Served {
    /// The reply the store would have given.
    Reply(StoreReply),
    /// A pass's or a collection's snapshot, built from the cache without copying a reply.
    /// Boxed: the host asks for the revision every poll, and an unboxed snapshot made every
    /// answer as large as a snapshot to move; the host's own snapshot reads go through
    /// [`HostCache::serve_snapshot`], which returns it unboxed.
    Snapshot(Box<Result<Snapshot, StoreError>>),
}

/// [`Snapshot::PREFIXES`] in key order (as [`CacheCore::entries`] would sort them), sorted once
/// for the process.
fn sorted_snapshot_prefixes() -> &'static [&'static str] {
    static SORTED: std::sync::LazyLock<Vec<&str>> = std::sync::LazyLock::new(|| {
        let mut p = Snapshot::PREFIXES.to_vec();
        p.sort_unstable();
        p.dedup();
        p
    });
    &SORTED
}

/// The leader's watch cache: one read of [`Snapshot::PREFIXES`], then a watch from its
/// revision; a lost watch reads everything again.
#[derive(Debug)]
pub(super) struct HostCache {
    /// The copy of the prefixes, and whether it follows the store.
    core: CacheCore,
    /// The watch's request id, once asked for.
    watch: Option<ReqId>,
    /// A full read is in flight.
    reading: bool,
    /// Read your writes: the newest revision this host committed to a cached key, or met in a
    /// conflict on one. The cache serves no read until it has caught up with it.
    seen: Revision,
    /// The revision of the last snapshot it served, and the keys the watch changed since: a
    /// memo at that revision is brought up to date by these keys alone
    /// ([`Snapshot::patched`]). `None` after a full read, or when the keys grew past half the
    /// cache and past 1,024 (then going over every key again costs about as much).
    dirty: Option<(Revision, BTreeSet<String>)>,
    /// Whether the cache's prefixes cover every one of [`Snapshot::PREFIXES`] (which are
    /// disjoint): then [`CacheCore::entries`] of them is `Some` exactly while the cache is
    /// live. Both sets are fixed, so this is asked once instead of at every snapshot read.
    snapshot_covered: bool,
}

impl HostCache {
    /// An empty cache of [`Snapshot::PREFIXES`], not live yet.
    pub(super) fn new() -> Self {
        let core = CacheCore::new(&Snapshot::PREFIXES);
        let sorted = sorted_snapshot_prefixes();
        debug_assert!(
            !sorted.windows(2).any(|w| w[1].starts_with(w[0])),
            "the snapshot's prefixes are disjoint"
        );
        let snapshot_covered = sorted.iter().all(|p| core.covers(p));
        Self {
            core,
            watch: None,
            reading: false,
            seen: 0,
            dirty: None,
            snapshot_covered,
        }
    }

    /// What the cache has done.
    pub(super) fn stats(&self) -> CacheStats {
        self.core.stats()
    }

    /// Where the cache stands: the revision its copy is at, and how many revisions it is
    /// behind the newest this host knows the store reached on a cached key (its own commits
    /// and the conflicts it met). While behind, no pass read is served from it.
    pub(super) fn position(&self) -> (Revision, u64) {
        let at = self.core.revision();
        (at, self.seen.saturating_sub(at))
    }

    /// Answers `request` from the cache if the serving rule lets it (see the
    /// [module](self) documentation), dated `now_ms` on the store's clock. With
    /// `wants_snapshot` (a pass's or a collection's read) the answer is the snapshot, reusing
    /// `memo`'s unchanged values (and using `memo` up). A read of cached prefixes it cannot
    /// answer is counted as passed through.
    pub(super) fn serve(
        &mut self,
        request: &StoreRequest,
        wants_snapshot: bool,
        now_ms: u64,
        memo: &mut Option<Snapshot>,
    ) -> Option<Served> {
        match request {
            StoreRequest::Read { prefixes } => {
                let refs: Vec<&str> = prefixes.iter().map(String::as_str).collect();
                if wants_snapshot && refs == Snapshot::PREFIXES {
                    return self
                        .serve_snapshot(now_ms, memo)
                        .map(|s| Served::Snapshot(Box::new(s)));
                }
                let caught_up = self.core.revision() >= self.seen;
                let mut borrowed = None;
                if let Some((revision, entries)) = (caught_up && wants_snapshot)
                    .then(|| self.core.entries(&refs))
                    .flatten()
                {
                    borrowed = Some(match memo.take() {
                        // Nothing under the cached prefixes changed since the last snapshot:
                        // it is this read, taken later.
                        Some(mut same) if same.revision == revision => {
                            same.now_ms = now_ms;
                            Ok(same)
                        }
                        earlier => {
                            Snapshot::from_entries_reusing(revision, entries, now_ms, earlier)
                        }
                    });
                }
                let borrowed = borrowed.map(|snapshot| {
                    self.core.count_served();
                    self.dirty = snapshot
                        .as_ref()
                        .ok()
                        .map(|s| (s.revision, BTreeSet::new()));
                    Served::Snapshot(Box::new(snapshot))
                });
                let served = borrowed.or_else(|| {
                    caught_up
                        .then(|| self.core.read(&refs))
                        .flatten()
                        .map(|read| Served::Reply(StoreReply::Read { read, now_ms }))
                });
                if served.is_none() && refs.iter().all(|p| self.core.covers(p)) {
                    self.core.passed_through();
                }
                served
            }
            StoreRequest::Revision => self
                .live_revision()
                .map(|r| Served::Reply(StoreReply::Revision(r))),
            _ => None,
        }
    }

    /// [`HostCache::serve`] of a pass's or a collection's read of [`Snapshot::PREFIXES`]: the
    /// snapshot, if the serving rule lets the cache answer it (a read of these prefixes is
    /// never answered as a reply). Asked without the request: the host builds the read's
    /// prefixes as strings only for a read that goes to the store.
    pub(super) fn serve_snapshot(
        &mut self,
        now_ms: u64,
        memo: &mut Option<Snapshot>,
    ) -> Option<Result<Snapshot, StoreError>> {
        let caught_up = self.core.revision() >= self.seen;
        // `CacheCore::entries` of the snapshot's prefixes is `Some` exactly when this holds.
        if !(caught_up && self.core.is_live() && self.snapshot_covered) {
            if self.snapshot_covered {
                self.core.passed_through();
            }
            return None;
        }
        let revision = self.core.revision();
        let snapshot = match memo.take() {
            // Nothing under the cached prefixes changed since the last snapshot: it is this
            // read, taken later (a snapshot is its entries and the time of the read, nothing
            // else).
            Some(mut same) if same.revision == revision => {
                same.now_ms = now_ms;
                Ok(same)
            }
            // The memo is the last snapshot served (or a store's read of the same prefixes at
            // the same revision: the same entries), and the watch changed these keys since.
            Some(earlier)
                if self
                    .dirty
                    .as_ref()
                    .is_some_and(|(at, _)| *at == earlier.revision) =>
            {
                let keys = self.dirty.take().map(|(_, keys)| keys).unwrap_or_default();
                let core = &self.core;
                Ok(Snapshot::patched(
                    earlier,
                    revision,
                    now_ms,
                    keys.iter().map(String::as_str),
                    |k| core.entry(k),
                ))
            }
            earlier => {
                let (revision, entries) = self
                    .core
                    .entries(sorted_snapshot_prefixes())
                    .expect("a live cache covering the snapshot's prefixes serves them");
                Snapshot::from_entries_reusing(revision, entries, now_ms, earlier)
            }
        };
        self.core.count_served();
        self.dirty = snapshot
            .as_ref()
            .ok()
            .map(|s| (s.revision, BTreeSet::new()));
        Some(snapshot)
    }

    /// The store's revision as the cache answers it ([`HostCache::serve`] of
    /// [`StoreRequest::Revision`]): its own, while it is live.
    pub(super) fn live_revision(&self) -> Option<Revision> {
        self.core.is_live().then(|| self.core.revision())
    }

    /// The revision a snapshot read would be served at now, if the cache would serve it (live
    /// and caught up with this host's own writes and reads).
    pub(super) fn serving_revision(&self) -> Option<Revision> {
        (self.core.is_live() && self.core.revision() >= self.seen).then(|| self.core.revision())
    }

    /// Whether the cache follows the store but has not caught up with this host's own writes
    /// and reads yet: a snapshot read then waits for it ([`CatchUp`]) instead of reading the
    /// store.
    pub(super) fn is_behind(&self) -> bool {
        self.core.is_live() && self.core.revision() < self.seen
    }

    /// Whether `txn` writes a key the cache holds.
    pub(super) fn touches(&self, txn: &Txn) -> bool {
        txn.ops.iter().any(|op| match op {
            Op::Put { key, .. } | Op::Delete { key } => self.core.covers(key),
        })
    }

    /// Read your writes: the cache serves nothing older than `rev` from now on.
    pub(super) fn saw(&mut self, rev: Revision) {
        self.seen = self.seen.max(rev);
    }

    /// Notes a conflict's revision, if it is on a key the cache holds.
    pub(super) fn saw_conflict(&mut self, e: &StoreError) {
        if let StoreError::Conflict { key, found, .. } = e {
            if self.core.covers(key) {
                self.saw(*found);
            }
        }
    }

    /// Whether a full read starts now: the cache has no watch and no read in flight. If so it
    /// stops serving until the read is done.
    pub(super) fn start_read(&mut self) -> bool {
        if !self.would_start_read() {
            return false;
        }
        self.reading = true;
        self.core.set_live(false);
        true
    }

    /// Whether [`Self::start_read`] would start a read now: none is in flight and no watch is
    /// open. It changes nothing.
    pub(super) fn would_start_read(&self) -> bool {
        !(self.reading || self.watch.is_some())
    }

    /// The full read ended: with `read` if it succeeded (the cache is live from it, and returns
    /// the prefixes to watch and the revision to watch after), or failed (tried again at the
    /// next poll; meanwhile reads go to the store).
    pub(super) fn read_done(&mut self, read: Option<Read>) -> Option<(Vec<String>, Revision)> {
        self.reading = false;
        let read = read?;
        let after = read.revision;
        self.core.reset(read);
        self.dirty = None;
        Some((self.core.prefixes().to_vec(), after))
    }

    /// The watch was asked for as `id`.
    pub(super) fn watching(&mut self, id: ReqId) {
        self.watch = Some(id);
    }

    /// The watch, if one was asked for.
    pub(super) fn watch(&self) -> Option<ReqId> {
        self.watch
    }

    /// The watch is lost: the cache stops serving. Returns the watch, to be cancelled.
    pub(super) fn lose_watch(&mut self) -> Option<ReqId> {
        let old = self.watch.take();
        self.core.set_live(false);
        old
    }

    /// The watch delivered `changes`, after which the store is at `revision`. Returns whether a
    /// node report changed (which wakes the loops with `wake_on_change`).
    pub(super) fn apply(&mut self, revision: Revision, changes: Vec<Change>) -> bool {
        let keys = self.core.apply(revision, changes);
        let report = keys.iter().any(|k| k.starts_with(REPORTS));
        if let Some((_, dirty)) = &mut self.dirty {
            dirty.extend(keys);
            if dirty.len() > (self.core.len() / 2).max(1_024) {
                self.dirty = None;
            }
        }
        report
    }
}

/// How long a pass's or a collection's read waits for a live cache to catch up with this host's
/// own writes before it reads the store instead: the threaded cache's rule
/// ([`crate::cache::CachedStore`]), one second.
pub(super) const CATCH_UP_MS: u64 = 1_000;

/// The snapshot reads waiting for the cache to catch up, each with the time it stops waiting.
///
/// Why wait: right after a pass commits, the watch has not yet delivered that commit, so the
/// cache is behind the host's own write and may not serve the next read (read your writes).
/// Sending that read to the store instead reads every key of [`Snapshot::PREFIXES`] (at 100,000
/// copies, every assignment, placement and report), the heaviest read there is, from a store
/// that the commits just kept busy; the watch brings the same state a moment later at no cost.
/// So a read of a live cache that is behind waits, up to [`CATCH_UP_MS`], and is served as soon
/// as a delivery catches the cache up; past that, or when the watch is lost, it goes to the
/// store as before.
#[derive(Debug)]
pub(super) struct CatchUp<T> {
    waiting: Vec<(u64, T)>,
}

impl<T> Default for CatchUp<T> {
    fn default() -> Self {
        Self {
            waiting: Vec::new(),
        }
    }
}

impl<T> CatchUp<T> {
    /// `read` waits from `now` until the cache has caught up, or [`CATCH_UP_MS`] at most.
    pub(super) fn wait(&mut self, now: u64, read: T) {
        self.waiting.push((now.saturating_add(CATCH_UP_MS), read));
    }

    /// The reads that stop waiting at `now`, in the order they began: all of them once the cache
    /// is no longer behind (caught up, or not live: then they go to the store), else those whose
    /// wait is over.
    pub(super) fn ready(&mut self, now: u64, behind: bool) -> Vec<T> {
        if self.waiting.is_empty() {
            return Vec::new();
        }
        let (go, stay): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|(until, _)| !behind || *until <= now);
        self.waiting = stay;
        go.into_iter().map(|(_, read)| read).collect()
    }

    /// When the first wait ends, if any read waits.
    pub(super) fn next_wake(&self) -> Option<u64> {
        self.waiting.iter().map(|(until, _)| *until).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{encode, workload_key, WORKLOADS};
    use crate::store::Entry;

    fn entry(key: &str, value: String, rev: Revision) -> Entry {
        Entry {
            key: key.into(),
            value,
            create_revision: rev,
            mod_revision: rev,
            lease: None,
        }
    }

    fn workloads() -> StoreRequest {
        StoreRequest::Read {
            prefixes: vec![WORKLOADS.to_owned()],
        }
    }

    /// A live cache at revision 5 holding one declaration.
    fn live() -> HostCache {
        let mut c = HostCache::new();
        assert!(c.start_read());
        let spec = super::super::reconcile::tests::test_spec(
            "w",
            1,
            setpoint_core::ControllerKind::Intent,
            100,
        );
        let read = Read {
            revision: 5,
            entries: vec![entry(&workload_key("w"), encode(&spec), 3)],
        };
        let (prefixes, after) = c.read_done(Some(read)).unwrap();
        assert_eq!(after, 5);
        assert_eq!(prefixes.len(), Snapshot::PREFIXES.len());
        c.watching(1);
        c
    }

    #[test]
    fn reads_wait_for_the_cache_in_order_and_no_longer_than_their_second() {
        let mut w = CatchUp::default();
        assert_eq!(w.next_wake(), None);
        w.wait(100, "a");
        w.wait(400, "b");
        w.wait(250, "c");
        assert_eq!(w.next_wake(), Some(100 + CATCH_UP_MS));
        assert!(
            w.ready(100 + CATCH_UP_MS - 1, true).is_empty(),
            "still behind"
        );
        assert_eq!(
            w.ready(250 + CATCH_UP_MS, true),
            ["a", "c"],
            "their waits are over"
        );
        assert_eq!(w.next_wake(), Some(400 + CATCH_UP_MS));
        w.wait(500, "d");
        assert_eq!(w.ready(600, false), ["b", "d"], "caught up: all, in order");
        assert_eq!(w.next_wake(), None);
        assert!(w.ready(10_000, false).is_empty());
    }

    #[test]
    fn a_live_cache_is_behind_until_it_reaches_what_this_host_saw() {
        let mut c = live();
        assert!(!c.is_behind());
        c.saw(9);
        assert!(c.is_behind());
        c.apply(9, Vec::new());
        assert!(!c.is_behind(), "caught up");
        c.saw(12);
        c.lose_watch();
        assert!(
            !c.is_behind(),
            "a cache that follows nothing is not behind: reads go to the store"
        );
    }

    #[test]
    fn nothing_is_served_before_the_first_read_and_such_reads_pass_through() {
        let mut c = HostCache::new();
        let mut memo = None;
        assert!(c.serve(&workloads(), false, 0, &mut memo).is_none());
        assert!(c
            .serve(&StoreRequest::Revision, false, 0, &mut memo)
            .is_none());
        assert_eq!(c.stats().passed_through, 1, "the read of a cached prefix");
        // A prefix the cache does not hold is not its business.
        let other = StoreRequest::Read {
            prefixes: vec!["/events/".into()],
        };
        assert!(live().serve(&other, false, 0, &mut memo).is_none());
    }

    #[test]
    fn a_live_cache_answers_reads_and_the_revision_dated_by_the_store_clock() {
        let mut c = live();
        let mut memo = None;
        match c.serve(&workloads(), false, 77, &mut memo) {
            Some(Served::Reply(StoreReply::Read { read, now_ms })) => {
                assert_eq!((read.revision, read.entries.len(), now_ms), (5, 1, 77));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            c.serve(&StoreRequest::Revision, false, 77, &mut memo),
            Some(Served::Reply(StoreReply::Revision(5)))
        ));
        assert!(c
            .serve(&StoreRequest::KeepAlive(1), false, 77, &mut memo)
            .is_none());
        let snapshot = StoreRequest::Read {
            prefixes: Snapshot::PREFIXES.iter().map(|p| (*p).to_owned()).collect(),
        };
        match c.serve(&snapshot, true, 77, &mut memo) {
            Some(Served::Snapshot(s)) if s.is_ok() => {
                let s = s.unwrap();
                assert_eq!(s.revision, 5);
                assert!(s.workloads.contains_key("w"));
            }
            other => panic!("{other:?}"),
        }
        // The two reads; an answered revision is not counted as a read served.
        assert_eq!(c.stats().served, 2);
    }

    #[test]
    fn after_its_own_write_the_cache_serves_no_read_until_the_watch_shows_it() {
        let mut c = live();
        let mut memo = None;
        let txn = Txn::new().put(workload_key("w"), "{}");
        assert!(c.touches(&txn));
        assert!(!c.touches(&Txn::new().put("/events/x", "{}")));
        c.saw(6);
        assert!(c.serve(&workloads(), false, 0, &mut memo).is_none());
        // The revision is served regardless: it only says whether anything moved.
        assert!(c
            .serve(&StoreRequest::Revision, false, 0, &mut memo)
            .is_some());
        assert!(!c.apply(6, vec![]), "no report changed");
        assert!(c.serve(&workloads(), false, 0, &mut memo).is_some());
    }

    #[test]
    fn a_conflict_on_a_cached_key_holds_reads_back_and_one_elsewhere_does_not() {
        let mut c = live();
        let mut memo = None;
        c.saw_conflict(&StoreError::Conflict {
            key: "/compacted/events".into(),
            expected: 1,
            found: 50,
        });
        assert!(c.serve(&workloads(), false, 0, &mut memo).is_some());
        c.saw_conflict(&StoreError::Conflict {
            key: workload_key("w"),
            expected: 3,
            found: 9,
        });
        assert!(c.serve(&workloads(), false, 0, &mut memo).is_none());
    }

    #[test]
    fn a_lost_watch_stops_serving_until_a_new_read() {
        let mut c = live();
        let mut memo = None;
        assert!(!c.start_read(), "it has a watch");
        assert_eq!(c.lose_watch(), Some(1));
        assert!(c.serve(&workloads(), false, 0, &mut memo).is_none());
        assert!(c
            .serve(&StoreRequest::Revision, false, 0, &mut memo)
            .is_none());
        assert!(c.start_read());
        assert!(!c.start_read(), "one read at a time");
        assert_eq!(c.read_done(None), None, "failed");
        assert!(c.start_read(), "tried again");
    }

    /// A pass's snapshot as `c` serves it at `now`, reusing `memo`.
    fn serve(c: &mut HostCache, now: u64, memo: &mut Option<Snapshot>) -> Snapshot {
        let read = StoreRequest::Read {
            prefixes: Snapshot::PREFIXES.iter().map(|p| (*p).to_owned()).collect(),
        };
        match c.serve(&read, true, now, memo) {
            Some(Served::Snapshot(s)) if s.is_ok() => s.unwrap(),
            other => panic!("{other:?}"),
        }
    }

    /// The snapshot of what `c` holds, decoded afresh, dated `now`.
    fn fresh(c: &mut HostCache, now: u64) -> Snapshot {
        let read = c.core.read(&Snapshot::PREFIXES).unwrap();
        Snapshot::from_read(&read, now).unwrap()
    }

    /// A snapshot served at the revision of the last one is that one with the new time; after
    /// a change it is built again. Either way it equals a snapshot decoded afresh.
    #[test]
    fn a_snapshot_at_an_unchanged_revision_is_the_last_one_read_later() {
        let mut c = live();
        let mut memo = None;
        let first = serve(&mut c, 10, &mut memo);
        memo = Some(first);
        let again = serve(&mut c, 20, &mut memo);
        assert_eq!((again.revision, again.now_ms), (5, 20));
        assert_eq!(format!("{again:?}"), format!("{:?}", fresh(&mut c, 20)));
        memo = Some(again);
        let spec = super::super::reconcile::tests::test_spec(
            "v",
            2,
            setpoint_core::ControllerKind::Intent,
            100,
        );
        c.apply(
            6,
            vec![Change {
                key: workload_key("v"),
                entry: Some(entry(&workload_key("v"), encode(&spec), 6)),
            }],
        );
        let changed = serve(&mut c, 30, &mut memo);
        assert_eq!(changed.revision, 6);
        assert!(changed.workloads.contains_key("v"));
        assert_eq!(format!("{changed:?}"), format!("{:?}", fresh(&mut c, 30)));
    }

    /// After a snapshot is served, the keys the watch changes are kept, through other reads, and
    /// the next snapshot is the last one brought up to date by those keys alone; a memo of
    /// another revision, or a full read of the cache, starts afresh. Each equals a snapshot
    /// decoded afresh.
    #[test]
    fn the_next_snapshot_is_the_last_one_patched_by_the_keys_the_watch_changed() {
        let mut c = live();
        let fresh = |c: &mut HostCache, now: u64| format!("{:?}", fresh(c, now));
        let mut memo = Some(serve(&mut c, 10, &mut None));
        assert_eq!(c.dirty, Some((5, BTreeSet::new())));
        let spec = |name: &str| {
            encode(&super::super::reconcile::tests::test_spec(
                name,
                2,
                setpoint_core::ControllerKind::Intent,
                100,
            ))
        };
        let change = |key: String, value: Option<String>, rev: Revision| Change {
            entry: value.map(|v| entry(&key, v, rev)),
            key,
        };
        c.apply(6, vec![change(workload_key("v"), Some(spec("v")), 6)]);
        c.apply(
            7,
            vec![
                change(workload_key("w"), None, 7),
                change(format!("{REPORTS}n1"), Some("{not json".into()), 7),
            ],
        );
        // A read that is not a snapshot's leaves the changed keys alone.
        assert!(c.serve(&workloads(), false, 15, &mut memo).is_some());
        let keys: Vec<String> = c.dirty.as_ref().unwrap().1.iter().cloned().collect();
        assert_eq!(keys, ["/reports/n1", "/workloads/v", "/workloads/w"]);
        let patched = serve(&mut c, 20, &mut memo);
        assert!(patched.workloads.contains_key("v") && !patched.workloads.contains_key("w"));
        assert!(patched.problems.contains_key("/reports/n1"));
        assert_eq!(format!("{patched:?}"), fresh(&mut c, 20));
        assert_eq!(c.dirty, Some((7, BTreeSet::new())));

        // A memo of another revision (a store's read) is not patched by keys counted from 7.
        c.apply(8, vec![change(workload_key("x"), Some(spec("x")), 8)]);
        let mut other = patched;
        other.revision = 3;
        let rebuilt = serve(&mut c, 30, &mut Some(other));
        assert_eq!(format!("{rebuilt:?}"), fresh(&mut c, 30));

        // A full read forgets the keys: the cache's contents were replaced.
        assert_eq!(c.lose_watch(), Some(1));
        assert!(c.start_read());
        c.read_done(Some(Read {
            revision: 9,
            entries: Vec::new(),
        }));
        assert_eq!(c.dirty, None);
    }

    #[test]
    fn a_changed_node_report_is_told_apart_from_other_changes() {
        let mut c = live();
        let report = Change {
            key: format!("{REPORTS}a"),
            entry: None,
        };
        assert!(c.apply(6, vec![report]));
        assert_eq!(c.stats().changes, 1);
    }
}
