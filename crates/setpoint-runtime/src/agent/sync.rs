//! Sync ([`Sync`]): when and how the agent learns its node's assignments and kill requests.
//!
//! Every `sync_every`, one read of the node's placements and kill requests; with a watch cache
//! ([`super::watch_cache`]) that serves, a sync from it at once whenever it changes or a copy is
//! forgotten, and every [`CACHE_RESYNC_MS`] regardless. A read sent under a lease since lost is
//! never acted on (the caller checks the lease the reply names).
//!
//! Nothing read from the store is trusted: an entry that does not decode, breaks a rule of
//! `apply` ([`crate::rules::check_assignment`]) or does not sit at its own key is refused, logged
//! once, and never reaches a path or a command ([`parse_assignments`]).
//!
//! It is separate because it decides what the agent believes it must run; what to do about it is
//! the supervisor's and the kills' business.

use std::collections::{BTreeMap, BTreeSet};

use super::kills::Kill;
use super::outbox::{Outbox, Purpose, Soonest};
use super::watch_cache::{WatchCache, CACHE_RESYNC_MS};
use super::AgentCoreConfig;
use crate::log_requests::Asked;
use crate::machine::{StoreReply, StoreRequest, StoreResult, WatchDelivery};
use crate::model::keys::log_requests_of;
use crate::model::{decode, placements_of, Assignment};
use crate::remote;
use crate::store::{Entry, LeaseId, Read, Revision, StoreError};

/// How long a sync waits after a watch event changed the cache, in milliseconds: the events
/// handed over with it (all at once after a pause) are applied before anything starts.
pub(super) const WATCH_SETTLE_MS: u64 = 1;

/// The assignments of a node by copy identity, each with its incarnation.
pub(crate) type Assigned = BTreeMap<String, (Assignment, Revision)>;

/// One placement entry, decoded and checked: the assignment and its incarnation, or why it was
/// refused.
type Parsed = Result<(Assignment, Revision), String>;

/// What a sync read gives ([`Sync::parse`]): the node's assignments, its kill and log requests
/// still to answer, and the newest placement's `mod_revision`.
#[derive(Debug, Default)]
pub(super) struct Parse {
    /// The read's entries, each key with its `mod_revision`, in key order. A read with the same
    /// keys at the same revisions holds the same entries (the store gives every write a new
    /// revision), so it gives this same parse: it is not parsed again.
    seen: Vec<(String, Revision)>,
    /// The newest `mod_revision` among the placements read (0: none).
    pub(super) newest: Revision,
    /// The assignments, by copy identity.
    pub(super) assigned: Assigned,
    /// The kill requests still to carry out.
    pub(super) kills: Vec<Kill>,
    /// The log requests still to answer.
    pub(super) logs: Vec<Asked>,
}

impl Parse {
    /// Whether `entries` (a read's, in key order) are the keys this parse was made from, each at
    /// the same `mod_revision`.
    fn made_from<'a>(&self, entries: impl IntoIterator<Item = &'a Entry>) -> bool {
        let mut seen = self.seen.iter();
        for e in entries {
            match seen.next() {
                Some((key, rev)) if *rev == e.mod_revision && *key == e.key => {}
                _ => return false,
            }
        }
        seen.next().is_none()
    }
}

/// What a due sync found ([`Sync::drive`]).
#[derive(Debug)]
pub(super) enum Synced {
    /// A read to act on (the watch cache's, copied).
    Read(Read),
    /// The watch cache at this revision holds what the last parse was made from, key for key at
    /// the same revisions: act on [`Sync::last`] again.
    Unchanged(Revision),
}

impl Synced {
    /// The revision of the view synced.
    pub(super) fn revision(&self) -> Revision {
        match self {
            Synced::Read(read) => read.revision,
            Synced::Unchanged(revision) => *revision,
        }
    }
}

/// The sync's schedule, its read in flight and what it has parsed: see the
/// [module docs](self).
#[derive(Debug)]
pub(super) struct Sync {
    /// When the next sync is due (without a reason to sync sooner).
    next_sync: u64,
    /// A sync read is in flight.
    in_flight: bool,
    /// A sync is due at once: the cache was read, or a copy was forgotten.
    wanted: bool,
    /// A watch event changed the cache: the next sync waits until this time, so that every
    /// event delivered with it (a resumed agent's queued events, a burst) is applied first.
    settling: Option<u64>,
    /// The watch cache, with [`AgentCoreConfig::watch_cache`].
    cache: Option<WatchCache>,
    /// When the last sync served from the cache ran.
    cache_synced_ms: u64,
    /// The placements decoded and checked, by key, with the `mod_revision` they were read at:
    /// an entry unchanged since the last sync is not decoded again.
    parsed: BTreeMap<String, (Revision, Parsed)>,
    /// The last read parsed and what it gave; a read of the same entries is not parsed again.
    last: Parse,
    /// The synced prefixes: the node's placements, kill requests and log requests.
    prefixes: [String; 3],
    /// Store entries refused as forged or damaged, by key, so each is logged once.
    refused_keys: BTreeSet<String>,
    /// The sync read in flight was sent before the fence came down: never acted on, even if
    /// the rejoin revives the same lease ([`Sync::fenced`]).
    void_read: bool,
    /// The revision of the newest read a sync acted on. No sync acts on an older one: a view
    /// older than one acted on may show assignments since removed (and copies since stopped
    /// and forgotten), and a copy started from it runs beside its replacement elsewhere.
    acted: Revision,
}

impl Sync {
    /// The first sync due at `now`.
    pub(super) fn new(cfg: &AgentCoreConfig, now: u64) -> Self {
        Self {
            next_sync: now,
            in_flight: false,
            wanted: false,
            settling: None,
            cache: cfg.watch_cache.then(|| WatchCache::new(&cfg.node, now)),
            cache_synced_ms: now,
            parsed: BTreeMap::new(),
            last: Parse::default(),
            prefixes: [
                placements_of(&cfg.node),
                remote::kills_of(&cfg.node),
                log_requests_of(&cfg.node),
            ],
            refused_keys: BTreeSet::new(),
            void_read: false,
            acted: 0,
        }
    }

    /// The fence came down. The lease may come back with the same id (the rejoin keeps a lease
    /// still alive), so what was read under it before cannot be told from what is read after
    /// by the lease alone: the sync read in flight is voided, and the watch cache reads and
    /// watches afresh. Meanwhile the node may have been lost and its names given elsewhere.
    pub(super) fn fenced(&mut self, out: &mut Outbox) {
        self.void_read = self.in_flight;
        if let Some(c) = &mut self.cache {
            c.fenced(out);
        }
    }

    /// Whether a sync read is in flight.
    pub(super) fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// A sync is due at once.
    pub(super) fn want(&mut self) {
        self.wanted = true;
    }

    /// The next periodic sync is due at `at`.
    pub(super) fn next_at(&mut self, at: u64) {
        self.next_sync = at;
    }

    /// When the next sync is due under `held` (the lease held now), if nothing asks for one
    /// sooner: every `sync_every_ms` while syncs read the store; every [`CACHE_RESYNC_MS`] while
    /// the watch cache serves them (they run at once when it changes).
    fn next_sync_ms(&self, held: Option<LeaseId>) -> u64 {
        if let Some(at) = self.settling {
            return at;
        }
        if self.wanted {
            return 0;
        }
        match held {
            Some(lease) if self.cache_serves(lease) => self
                .next_sync
                .max(self.cache_synced_ms.saturating_add(CACHE_RESYNC_MS)),
            _ => self.next_sync,
        }
    }

    /// Whether the watch cache can serve a sync under `lease`: it can, and it is not behind
    /// the newest read a sync acted on (a direct read while the cache was catching up).
    fn cache_serves(&self, lease: LeaseId) -> bool {
        self.cache
            .as_ref()
            .is_some_and(|c| c.serves(lease) && c.revision() >= self.acted)
    }

    /// Syncs if one is due under `lease`, held now: from the watch cache when it can serve (what
    /// it found is returned, to be acted on at once), else by a read of the store.
    pub(super) fn drive(
        &mut self,
        now: u64,
        lease: LeaseId,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) -> Option<Synced> {
        if now < self.next_sync_ms(Some(lease)) {
            return None;
        }
        self.wanted = false;
        self.settling = None;
        self.next_sync = now + cfg.sync_every_ms;
        if self.cache_serves(lease) {
            let [a, b, c] = &self.prefixes;
            let refs = [a.as_str(), b.as_str(), c.as_str()];
            let cache = self.cache.as_mut().expect("the cache serves");
            // Most syncs it serves (every CACHE_RESYNC_MS) find what the last one parsed.
            let served = match cache.holds(&refs, |held| self.last.made_from(held)) {
                Some(revision) => Some(Synced::Unchanged(revision)),
                None => cache.read(&refs).map(Synced::Read),
            };
            if let Some(synced) = served {
                self.cache_synced_ms = now;
                self.acted = self.acted.max(synced.revision());
                return Some(synced);
            }
        }
        if let Some(c) = &mut self.cache {
            c.passed_through();
        }
        self.in_flight = true;
        out.send(
            now,
            StoreRequest::Read {
                prefixes: self.prefixes.to_vec(),
            },
            Purpose::Sync { lease },
            cfg.request_timeout_ms,
        );
        None
    }

    /// Starts the watch cache's full read under `lease` if it needs one.
    pub(super) fn drive_cache(
        &mut self,
        now: u64,
        lease: LeaseId,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) {
        if let Some(c) = &mut self.cache {
            c.drive(now, lease, cfg, out);
        }
    }

    /// The sync read's reply arrived; it is no longer in flight. Returns whether it was
    /// voided by a fence since it was sent (then it is never acted on).
    pub(super) fn replied(&mut self) -> bool {
        self.in_flight = false;
        std::mem::take(&mut self.void_read)
    }

    /// What the sync read's reply gives, once the caller has checked it may act on it: the read,
    /// or the store's loss for good (the agent must stop). A failure is logged once. A read
    /// older than a view already acted on gives nothing.
    pub(super) fn on_reply(
        &mut self,
        now: u64,
        result: StoreResult,
        out: &mut Outbox,
    ) -> Option<Result<Read, StoreError>> {
        match result {
            Ok(StoreReply::Read { read, .. }) => {
                out.ended("sync", "the store answers again");
                if read.revision < self.acted {
                    // Older than a view already acted on (a store member behind the one that
                    // served that view): passed over; the next sync reads again.
                    return None;
                }
                self.acted = read.revision;
                if let Some(c) = &mut self.cache {
                    c.vouched_by(&read);
                }
                Some(Ok(read))
            }
            Ok(_) => None,
            Err(e) if e.is_lost() => Some(Err(e)),
            Err(e) => {
                out.failed(
                    now,
                    "sync",
                    format!(
                        "cannot read assignments: {e} (retrying; logged again when it answers)"
                    ),
                );
                None
            }
        }
    }

    /// The assignments, kill and log requests in a read of the node's placements, kill and log
    /// requests; refused entries are logged once. A read of the same entries as the last one
    /// parsed gives that parse again, without parsing.
    pub(super) fn parse(&mut self, read: Read, cfg: &AgentCoreConfig, out: &mut Outbox) -> &Parse {
        if !self.last.made_from(&read.entries) {
            self.last = self.parse_afresh(read, cfg, out);
        }
        &self.last
    }

    /// What the last read parsed gave ([`Synced::Unchanged`]).
    pub(super) fn last(&self) -> &Parse {
        &self.last
    }

    /// [`Sync::parse`] of a read of other entries than the last.
    fn parse_afresh(&mut self, read: Read, cfg: &AgentCoreConfig, out: &mut Outbox) -> Parse {
        let node = &cfg.node;
        let seen = read
            .entries
            .iter()
            .map(|e| (e.key.clone(), e.mod_revision))
            .collect();
        let placements = placements_of(node);
        let (placed, asked): (Vec<Entry>, Vec<Entry>) = read
            .entries
            .into_iter()
            .partition(|e| e.key.starts_with(&placements));
        let newest = placed.iter().map(|e| e.mod_revision).max().unwrap_or(0);
        let (assigned, mut forged) = self.parse_placed(&placed, node);
        // A kill request that does not decode is skipped (`pending_kills`): logged once here.
        let kills_prefix = remote::kills_of(node);
        forged.extend(
            asked
                .iter()
                .filter(|e| e.key.starts_with(&kills_prefix))
                .filter_map(|e| {
                    let err = decode::<remote::KillRequest>(e).err()?;
                    Some((e.key.clone(), format!("not a kill request: {err}")))
                }),
        );
        self.log_refused(forged, out);
        let kills = remote::pending_kills(&asked, node);
        let logs = crate::log_requests::pending(&asked, node);
        Parse {
            seen,
            newest,
            assigned,
            kills,
            logs,
        }
    }

    /// [`parse_assignments`], decoding only the entries that changed since the last sync.
    fn parse_placed(&mut self, placed: &[Entry], node: &str) -> (Assigned, Vec<(String, String)>) {
        let mut out = BTreeMap::new();
        let mut refused = Vec::new();
        let mut parsed = BTreeMap::new();
        for e in placed {
            let p = match self.parsed.remove(&e.key) {
                Some((rev, p)) if rev == e.mod_revision => p,
                _ => parse_assignment(e, node),
            };
            match &p {
                Ok((a, incarnation)) => {
                    out.insert(a.copy.clone(), (a.clone(), *incarnation));
                }
                Err(why) => refused.push((e.key.clone(), why.clone())),
            }
            parsed.insert(e.key.clone(), (e.mod_revision, p));
        }
        self.parsed = parsed;
        (out, refused)
    }

    /// Logs the store entries refused (key, why), each key once in the agent's life.
    pub(super) fn log_refused(&mut self, refused: Vec<(String, String)>, out: &mut Outbox) {
        for (key, why) in refused {
            if self.refused_keys.insert(key.clone()) {
                out.log(format!("refused the entry {}: {why}", key.escape_debug()));
            }
        }
    }

    /// After the reply to the watch cache's full read under `lease`.
    pub(super) fn on_cache_read(
        &mut self,
        now: u64,
        lease: LeaseId,
        result: StoreResult,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) {
        if let Some(c) = &mut self.cache {
            if c.on_read(now, lease, result, cfg, out) {
                self.wanted = true;
            }
        }
    }

    /// After the reply to the watch cache's watch request.
    pub(super) fn on_cache_watching(
        &mut self,
        now: u64,
        result: &StoreResult,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) {
        if let Some(c) = &mut self.cache {
            c.on_watching(now, result, cfg, out);
        }
    }

    /// An event of the watch cache's watch.
    pub(super) fn on_watch(
        &mut self,
        now: u64,
        d: WatchDelivery,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) {
        if let Some(c) = &mut self.cache {
            if c.on_watch(now, d, cfg, out) {
                // Not in this step: the events queued behind this one may already undo it (an
                // assignment placed and removed while the agent was paused), and a copy started
                // from a superseded assignment runs, unreported, until it is stopped.
                self.settling.get_or_insert(now + WATCH_SETTLE_MS);
            }
        }
    }

    /// This agent committed at `rev` under the synced prefixes (a kill answer).
    pub(super) fn saw_own_write(&mut self, result: &StoreResult) {
        if let (Ok(StoreReply::Committed(rev)), Some(c)) = (result, &mut self.cache) {
            c.saw(*rev);
        }
    }

    /// Ends the watch cache's watch (the machine stops).
    pub(super) fn stop(&mut self, out: &mut Outbox) {
        if let Some(c) = &mut self.cache {
            c.stop(out);
        }
    }

    /// For a tick answered without the step: the soonest time at which a tick under `held` (the
    /// lease held now) syncs or starts the cache's read (0: at once); `u64::MAX` while a sync
    /// read is in flight (neither is driven until it answers).
    pub(super) fn quiet_until(&self, held: LeaseId) -> u64 {
        if self.in_flight {
            return u64::MAX;
        }
        let cache = self
            .cache
            .as_ref()
            .and_then(|c| c.acts_from(held))
            .unwrap_or(u64::MAX);
        self.next_sync_ms(Some(held)).min(cache)
    }

    /// The times this part must be stepped at, under `held` (the lease held now), while the agent
    /// runs unfenced: the next sync and the cache's retry, unless a sync read is in flight.
    pub(super) fn wake_times(&self, held: Option<LeaseId>, soonest: &mut Soonest) {
        if !self.in_flight {
            soonest.at(self.next_sync_ms(held));
            // The cache's read is driven with the sync, so only when no sync is in flight.
            if let Some(at) = self.cache.as_ref().and_then(WatchCache::retry_at) {
                soonest.at(at);
            }
        }
    }
}

/// The assignments among `entries` (a read of the node's placements), by copy identity with
/// their incarnations, and the entries refused with why.
///
/// Nothing read from the store is trusted: an entry that does not decode, breaks a rule of
/// `apply` ([`crate::rules::check_assignment`]) or does not sit at its own key is refused, and
/// never reaches a path or a command.
pub(crate) fn parse_assignments(
    entries: &[Entry],
    node: &str,
) -> (Assigned, Vec<(String, String)>) {
    let mut out = BTreeMap::new();
    let mut refused = Vec::new();
    for e in entries {
        match parse_assignment(e, node) {
            Ok((a, incarnation)) => {
                out.insert(a.copy.clone(), (a, incarnation));
            }
            Err(why) => refused.push((e.key.clone(), why)),
        }
    }
    (out, refused)
}

/// One entry of [`parse_assignments`]: the assignment and its incarnation, or why it is refused.
fn parse_assignment(e: &Entry, node: &str) -> Parsed {
    let a: Assignment = decode(e).map_err(|err| err.to_string())?.value;
    crate::rules::check_assignment(&a, node)?;
    let own = crate::model::placement_key(node, &a.workload, a.n);
    if e.key != own {
        return Err(format!("it sits at {}, not at its own key {own}", e.key));
    }
    Ok((a, e.create_revision))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::assignment;
    use super::super::AgentOutput;
    use super::*;
    use crate::machine::carry_out;
    use crate::model::{encode, placement_key};
    use crate::store::{Change, MemoryStore, Store, Txn, WatchEvent};

    /// What the agent acts on for `synced` ([`super::super::core`]'s `on_sync_read`).
    fn act<'s>(
        sync: &'s mut Sync,
        synced: Synced,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) -> &'s Parse {
        match synced {
            Synced::Read(read) => sync.parse(read, cfg, out),
            Synced::Unchanged(_) => sync.last(),
        }
    }

    fn read_all(store: &MemoryStore) -> Read {
        let prefixes = vec![placements_of("a"), remote::kills_of("a")];
        match carry_out(store, &StoreRequest::Read { prefixes }) {
            Ok(StoreReply::Read { read, .. }) => read,
            other => panic!("{other:?}"),
        }
    }

    /// An agent `a` with the watch cache on an empty store: its cache read under lease 1 at
    /// time 0, answered, and the watch that follows asked for (its id returned).
    fn cache_read_and_watching() -> (
        MemoryStore,
        AgentCoreConfig,
        Sync,
        Outbox,
        crate::machine::ReqId,
    ) {
        let store = MemoryStore::new();
        let cfg = AgentCoreConfig {
            watch_cache: true,
            ..AgentCoreConfig::new("a")
        };
        let mut sync = Sync::new(&cfg, 0);
        let mut out = Outbox::new();
        sync.drive_cache(0, 1, &cfg, &mut out);
        let Some(AgentOutput::Store { id, request }) = out.drain().pop() else {
            panic!("no cache read");
        };
        let _ = out.take(id);
        sync.on_cache_read(0, 1, carry_out(&store, &request), &cfg, &mut out);
        let Some(AgentOutput::Store { id: watch, .. }) = out.drain().pop() else {
            panic!("no watch");
        };
        (store, cfg, sync, out, watch)
    }

    /// The decoded placements are kept between syncs, by revision: a placement rewritten in
    /// place (the same key, a new revision) is decoded again, and each sync equals a decoding
    /// from scratch (mutant 374 of the mutation sample: reusing the old decoding when the
    /// revision changed ran the superseded assignment; the chaos world never rewrites one).
    #[test]
    fn a_placement_rewritten_in_place_is_decoded_again() {
        let store = MemoryStore::new();
        let key = placement_key("a", "w", 0);
        let cfg = AgentCoreConfig::new("a");
        let mut sync = Sync::new(&cfg, 0);
        let mut out = Outbox::new();
        let mut last = None;
        // The third sync reads an unchanged entry: its decoding is reused.
        for grace_ms in [3_000, 7_000, 7_000, 1_000] {
            let mut a = assignment(0);
            a.grace_ms = grace_ms;
            if last != Some(grace_ms) {
                store.commit(&Txn::new().put(&key, encode(&a))).unwrap();
            }
            last = Some(grace_ms);
            let read = read_all(&store);
            let (fresh, _) = parse_assignments(&read.entries, "a");
            let assigned = &sync.parse(read, &cfg, &mut out).assigned;
            assert_eq!(*assigned, fresh);
            assert_eq!(assigned["w-0"].0.grace_ms, grace_ms);
        }
    }

    #[test]
    fn a_placement_at_another_key_or_a_bad_kill_request_is_refused_and_logged_once() {
        let store = MemoryStore::new();
        let good = placement_key("a", "w", 0);
        let wrong = placement_key("a", "w", 7);
        let bad_kill = format!("{}x", remote::kills_of("a"));
        let txn = Txn::new()
            .put(&good, encode(&assignment(0)))
            .put(&wrong, encode(&assignment(1)))
            .put(&bad_kill, "{not json");
        store.commit(&txn).unwrap();
        let cfg = AgentCoreConfig::new("a");
        let mut sync = Sync::new(&cfg, 0);
        let mut out = Outbox::new();
        for round in 0..2 {
            let parse = sync.parse(read_all(&store), &cfg, &mut out);
            assert_eq!(parse.assigned.keys().collect::<Vec<_>>(), ["w-0"]);
            assert!(parse.kills.is_empty());
            let lines = out.drain_logs();
            if round == 0 {
                assert_eq!(lines.len(), 2, "{lines:?}");
                assert!(lines[0].contains("not at its own key"), "{lines:?}");
                assert!(lines[1].contains("not a kill request"), "{lines:?}");
            } else {
                assert!(lines.is_empty(), "logged once: {lines:?}");
            }
        }
    }

    #[test]
    fn a_sync_reads_the_store_every_period_and_at_once_when_wanted() {
        let cfg = AgentCoreConfig {
            sync_every_ms: 100,
            ..AgentCoreConfig::new("a")
        };
        let mut sync = Sync::new(&cfg, 0);
        let mut out = Outbox::new();
        assert!(sync.drive(0, 1, &cfg, &mut out).is_none());
        assert!(sync.in_flight());
        assert_eq!(out.drain().len(), 1, "one read");
        sync.replied();
        assert!(sync.drive(50, 1, &cfg, &mut out).is_none());
        assert!(out.drain().is_empty(), "not due before 100");
        let mut soonest = Soonest::new(50);
        sync.wake_times(Some(1), &mut soonest);
        assert_eq!(soonest.or_a_second(), 100);
        sync.want();
        assert!(sync.drive(60, 1, &cfg, &mut out).is_none());
        assert_eq!(out.drain().len(), 1, "wanted: at once");
    }

    /// An agent `a` with the watch cache, nothing read yet, on a store where `w-0` is placed
    /// on it (its placement's key returned).
    fn placed_with_a_cache() -> (MemoryStore, String, AgentCoreConfig, Sync, Outbox) {
        let store = MemoryStore::new();
        let key = placement_key("a", "w", 0);
        store
            .commit(&Txn::new().put(&key, encode(&assignment(0))))
            .unwrap();
        let cfg = AgentCoreConfig {
            watch_cache: true,
            ..AgentCoreConfig::new("a")
        };
        let sync = Sync::new(&cfg, 0);
        (store, key, cfg, sync, Outbox::new())
    }

    #[test]
    fn the_watch_cache_serves_only_under_the_lease_it_was_read_under() {
        let (store, _, cfg, mut sync, mut out) = placed_with_a_cache();
        sync.drive_cache(0, 1, &cfg, &mut out);
        let Some(AgentOutput::Store { id, request }) = out.drain().pop() else {
            panic!("no cache read");
        };
        let Some(Purpose::CacheRead { lease }) = out.take(id) else {
            panic!("not the cache's read");
        };
        sync.on_cache_read(0, lease, carry_out(&store, &request), &cfg, &mut out);
        let watch = out.drain();
        assert!(
            matches!(
                watch[..],
                [AgentOutput::Store {
                    request: StoreRequest::Watch { .. },
                    ..
                }]
            ),
            "{watch:?}"
        );
        // Served from the cache under lease 1, at once (the read made a sync due)...
        let synced = sync
            .drive(1, 1, &cfg, &mut out)
            .expect("served by the cache");
        assert_eq!(act(&mut sync, synced, &cfg, &mut out).assigned.len(), 1);
        assert!(out.drain().is_empty(), "no store read");
        // ...but under another lease a sync reads the store.
        sync.want();
        assert!(sync.drive(2, 2, &cfg, &mut out).is_none());
        assert_eq!(out.drain().len(), 1);
    }

    #[test]
    fn after_its_own_kill_answer_a_sync_reads_the_store_until_the_cache_shows_the_answer() {
        let (store, cfg, mut sync, mut out, watch) = cache_read_and_watching();
        assert!(
            sync.drive(1, 1, &cfg, &mut out).is_some(),
            "served by the cache"
        );
        // The agent answers a kill request: its own write under the synced prefixes.
        let key = format!("{}w-0", crate::remote::kills_of("a"));
        let answer = store.commit(&Txn::new().put(&key, "answered")).unwrap();
        sync.saw_own_write(&Ok(StoreReply::Committed(answer)));
        sync.want();
        assert!(
            sync.drive(2, 1, &cfg, &mut out).is_none(),
            "the cache, older than the answer, served a sync"
        );
        assert_eq!(out.drain().len(), 1, "a store read instead");
        sync.replied();
        // Once the watch shows the answer, the cache serves again.
        let entry = read_all(&store).entries.into_iter().find(|e| e.key == key);
        let changes = vec![Change { key, entry }];
        let event = WatchEvent::Changes {
            revision: answer,
            changes,
        };
        sync.on_watch(3, WatchDelivery { watch, event }, &cfg, &mut out);
        sync.want();
        assert!(sync.drive(3 + WATCH_SETTLE_MS, 1, &cfg, &mut out).is_some());
        assert!(out.drain().is_empty(), "no store read");
    }

    /// While the watch cache serves, a sync with nothing changed is due `CACHE_RESYNC_MS` after
    /// the last one it served, not a sync period later: between changes, which run a sync at
    /// once, the agent sleeps (mutant 628 of the mutation sample made every sync period a sync
    /// the cache answered with the same view, and the agent never slept longer). Under a lease
    /// the cache does not serve, syncs read the store every period.
    #[test]
    fn while_the_watch_cache_serves_a_sync_is_due_a_cache_resync_later_not_a_sync_period() {
        let (_store, cfg, mut sync, mut out, _watch) = cache_read_and_watching();
        sync.on_cache_watching(0, &Ok(StoreReply::Watching), &cfg, &mut out);
        assert!(sync.drive(1, 1, &cfg, &mut out).is_some(), "served");
        assert!(out.drain().is_empty(), "no store read");
        let due = |sync: &Sync, lease| {
            let mut soonest = Soonest::new(1);
            sync.wake_times(Some(lease), &mut soonest);
            soonest.or_a_second()
        };
        assert_eq!(due(&sync, 1), 1 + CACHE_RESYNC_MS);
        assert_eq!(due(&sync, 2), 1 + cfg.sync_every_ms);
        assert!(sync
            .drive(1 + cfg.sync_every_ms, 1, &cfg, &mut out)
            .is_none());
        assert!(out.drain().is_empty(), "nothing due a sync period on");
    }

    /// The next output, a store request: its id (taken out of the outbox) and the request.
    fn sent(out: &mut Outbox) -> (crate::machine::ReqId, StoreRequest) {
        let Some(AgentOutput::Store { id, request }) = out.drain().pop() else {
            panic!("no store request");
        };
        let _ = out.take(id);
        (id, request)
    }

    /// No sync acts on an older view than one a sync acted on. A watch cache whose full read
    /// was sent before a read of the store that was acted on, and answered after it (to an
    /// agent paused between the two), serves no sync until its watch has brought it up to that
    /// read; meanwhile syncs read the store. Swarm seed 82,058 of 100,000: an agent whose state
    /// was lost, paused 1.9 s, acted on its direct read and then on its cache's older one,
    /// started three copies removed in between, and `web-1` ran on two nodes for 100 ms.
    #[test]
    fn no_sync_acts_on_an_older_view_than_one_it_acted_on() {
        let (store, key, cfg, mut sync, mut out) = placed_with_a_cache();
        // The cache's full read, carried out now: it shows w-0 placed.
        sync.drive_cache(0, 1, &cfg, &mut out);
        let (_, request) = sent(&mut out);
        let old = carry_out(&store, &request);
        // w-0 is removed; a sync reads the store and acts on it.
        let removed = store.commit(&Txn::new().delete(&key)).unwrap();
        assert!(sync.drive(1, 1, &cfg, &mut out).is_none());
        let (_, request) = sent(&mut out);
        sync.replied();
        let Some(Ok(read)) = sync.on_reply(1, carry_out(&store, &request), &mut out) else {
            panic!("the sync read is acted on");
        };
        assert!(read.entries.is_empty());
        // Only now the cache's older read arrives: live, but behind the view acted on.
        sync.on_cache_read(2, 1, old, &cfg, &mut out);
        let (watch, _) = sent(&mut out);
        assert!(
            sync.drive(3, 1, &cfg, &mut out).is_none(),
            "a sync served the older view, with w-0 placed"
        );
        let (_, request) = sent(&mut out);
        assert!(matches!(request, StoreRequest::Read { .. }), "{request:?}");
        sync.replied();
        // The watch brings the removal: the cache is at the view acted on and serves again.
        let event = WatchEvent::Changes {
            revision: removed,
            changes: vec![Change { key, entry: None }],
        };
        sync.on_watch(4, WatchDelivery { watch, event }, &cfg, &mut out);
        sync.want();
        let synced = sync
            .drive(4 + WATCH_SETTLE_MS, 1, &cfg, &mut out)
            .expect("served by the cache");
        assert!(act(&mut sync, synced, &cfg, &mut out).assigned.is_empty());
        assert!(out.drain().is_empty(), "no store read");
    }

    /// A read of the store older than a view acted on is passed over (a store member behind
    /// the one that served that view).
    #[test]
    fn a_sync_read_older_than_a_view_acted_on_is_passed_over() {
        let store = MemoryStore::new();
        let cfg = AgentCoreConfig::new("a");
        let mut sync = Sync::new(&cfg, 0);
        let mut out = Outbox::new();
        let prefixes = vec![placements_of("a"), remote::kills_of("a")];
        let read = || {
            carry_out(
                &store,
                &StoreRequest::Read {
                    prefixes: prefixes.clone(),
                },
            )
        };
        let before = read();
        store
            .commit(&Txn::new().put(placement_key("a", "w", 0), encode(&assignment(0))))
            .unwrap();
        assert!(matches!(sync.on_reply(0, read(), &mut out), Some(Ok(_))));
        assert!(sync.on_reply(1, before, &mut out).is_none());
        assert!(
            matches!(sync.on_reply(2, read(), &mut out), Some(Ok(_))),
            "the same view again"
        );
    }

    /// A cache behind a read of the store that was acted on, but holding exactly what it found
    /// (nothing changed under the node's keys since the cache's revision), is vouched for by
    /// that read: it moves up to its revision and serves the next sync, rather than leaving
    /// every sync to read the store until the node's keys next change. A delivery up to that
    /// revision, still on its way, is passed over.
    #[test]
    fn a_read_of_the_store_that_finds_what_the_cache_holds_brings_the_cache_up_to_it() {
        let (store, cfg, mut sync, mut out, watch) = cache_read_and_watching();
        // Others write elsewhere: the store moves on, the node's keys do not.
        let elsewhere = store.commit(&Txn::new().put("/workloads/x", "{}")).unwrap();
        let prefixes: Vec<String> = [
            placements_of("a"),
            remote::kills_of("a"),
            log_requests_of("a"),
        ]
        .into();
        let direct = carry_out(&store, &StoreRequest::Read { prefixes });
        assert!(matches!(sync.on_reply(1, direct, &mut out), Some(Ok(_))));
        sync.want();
        let synced = sync
            .drive(2, 1, &cfg, &mut out)
            .expect("served by the cache");
        assert_eq!(synced.revision(), elsewhere);
        assert!(out.drain().is_empty(), "no store read");
        // A late delivery that ends at or below it is passed over (here a placement no store
        // ever held under this node at that revision: applied, it would show).
        let other = MemoryStore::new();
        let key = placement_key("a", "w", 0);
        other
            .commit(&Txn::new().put(&key, encode(&assignment(0))))
            .unwrap();
        let entry = read_all(&other).entries.into_iter().next();
        assert!(entry.is_some());
        let event = WatchEvent::Changes {
            revision: elsewhere,
            changes: vec![Change { key, entry }],
        };
        sync.on_watch(3, WatchDelivery { watch, event }, &cfg, &mut out);
        sync.want();
        let synced = sync
            .drive(3 + WATCH_SETTLE_MS, 1, &cfg, &mut out)
            .expect("served by the cache");
        assert_eq!(synced.revision(), elsewhere);
        let assigned = &act(&mut sync, synced, &cfg, &mut out).assigned;
        assert!(assigned.is_empty(), "{assigned:?}");
    }

    #[test]
    fn after_a_refused_watch_syncs_read_the_store_until_the_cache_is_read_and_watched_again() {
        let (store, cfg, mut sync, mut out, _) = cache_read_and_watching();
        // The store refuses the watch (or does not confirm it in time).
        let refused = Err(crate::store::StoreError::Unavailable(
            "too many watches".into(),
        ));
        sync.on_cache_watching(0, &refused, &cfg, &mut out);
        out.drain();
        // Placed since: a cache that follows nothing would never show it.
        let key = placement_key("a", "w", 0);
        store
            .commit(&Txn::new().put(&key, encode(&assignment(0))))
            .unwrap();
        sync.want();
        assert!(
            sync.drive(1, 1, &cfg, &mut out).is_none(),
            "a sync served by a cache that follows nothing"
        );
        let sent = out.drain();
        let Some(AgentOutput::Store { id, .. }) = sent.first() else {
            panic!("no store read: {sent:?}");
        };
        assert!(matches!(out.take(*id), Some(Purpose::Sync { .. })));
        // The cache is read and watched again a sync period after the refusal, not before.
        sync.drive_cache(cfg.sync_every_ms - 1, 1, &cfg, &mut out);
        assert!(out.drain().is_empty(), "read again before a sync period");
        sync.drive_cache(cfg.sync_every_ms, 1, &cfg, &mut out);
        let sent = out.drain();
        let Some(AgentOutput::Store { id, .. }) = sent.first() else {
            panic!("the cache is not read again: {sent:?}");
        };
        assert!(matches!(out.take(*id), Some(Purpose::CacheRead { .. })));
    }

    #[test]
    fn a_placement_placed_and_removed_in_queued_watch_events_is_never_synced() {
        let (store, cfg, mut sync, mut out, watch) = cache_read_and_watching();
        assert!(sync.drive(1, 1, &cfg, &mut out).is_some(), "the read syncs");
        // While the agent was paused, w-3 was placed on it and removed again (a redeclaration's
        // garbage collection): both events arrive in consecutive steps of the same millisecond.
        let key = placement_key("a", "w", 3);
        let placed = store
            .commit(&Txn::new().put(&key, encode(&assignment(3))))
            .unwrap();
        let entry = read_all(&store).entries.into_iter().next();
        assert!(entry.is_some());
        let removed = store.commit(&Txn::new().delete(&key)).unwrap();
        let events = [(placed, entry), (removed, None)];
        for (i, (revision, entry)) in events.into_iter().enumerate() {
            let changes = vec![Change {
                key: key.clone(),
                entry,
            }];
            let event = WatchEvent::Changes { revision, changes };
            sync.on_watch(50, WatchDelivery { watch, event }, &cfg, &mut out);
            assert!(
                sync.drive(50, 1, &cfg, &mut out).is_none(),
                "event {i}: no sync in the step that delivered it"
            );
        }
        let mut soonest = Soonest::new(50);
        sync.wake_times(Some(1), &mut soonest);
        assert_eq!(soonest.or_a_second(), 50 + WATCH_SETTLE_MS);
        let synced = sync
            .drive(50 + WATCH_SETTLE_MS, 1, &cfg, &mut out)
            .expect("served by the cache once the events settled");
        let assigned = &act(&mut sync, synced, &cfg, &mut out).assigned;
        assert!(assigned.is_empty(), "w-3 is gone: {assigned:?}");
        assert!(out.drain().is_empty(), "no store read");
    }

    /// A read of the node's placements, kill and log requests, as a sync reads them.
    fn read_synced(store: &MemoryStore) -> Read {
        let prefixes = vec![
            placements_of("a"),
            remote::kills_of("a"),
            log_requests_of("a"),
        ];
        match carry_out(store, &StoreRequest::Read { prefixes }) {
            Ok(StoreReply::Read { read, .. }) => read,
            other => panic!("{other:?}"),
        }
    }

    /// Random histories of the node's keys (placements put, rewritten in place, put at another
    /// copy's key or damaged, removed; kill and log requests, open, answered or damaged; writes
    /// under another node's keys), synced after every change or with nothing changed, from the
    /// watch cache or by reads of the store. Every sync must act on exactly what its read gives
    /// parsed from scratch (`parse_assignments`, `pending_kills`, `log_requests::pending`, the
    /// newest placement's revision), whether it was parsed, taken from the last parse for the
    /// same entries ([`Sync::parse`]), or served as unchanged by the cache ([`Synced::Unchanged`]).
    /// A sync that reused the last parse for other entries (a revision or a key left out of the
    /// comparison, say) fails it.
    #[test]
    fn every_sync_acts_on_what_its_read_gives_parsed_from_scratch() {
        use crate::log_requests::{LogAnswer, LogRequest};
        use crate::model::keys::log_request_key;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Op {
            /// `w-n` placed, or rewritten in place, with this grace.
            Place(u64, u64),
            /// `w-n`'s assignment put at `w-(n+3)`'s key.
            Misplace(u64),
            /// A value that does not decode at `w-n`'s key.
            Damage(u64),
            Remove(u64),
            /// A kill request for `w-n`, answered or not.
            Kill(u64, bool),
            /// A kill request that does not decode.
            BadKill,
            /// A log request for `w-n`, answered or not.
            Ask(u64, bool),
            /// A log request that does not decode.
            BadAsk,
            /// A placement on another node.
            Elsewhere(u64),
            /// Nothing written: the next sync reads what the last one did.
            Nothing,
        }
        let op = prop_oneof![
            (0u64..3, prop_oneof![Just(100u64), Just(200)]).prop_map(|(n, g)| Op::Place(n, g)),
            (0u64..3).prop_map(Op::Misplace),
            (0u64..3).prop_map(Op::Damage),
            (0u64..3).prop_map(Op::Remove),
            (0u64..2, any::<bool>()).prop_map(|(n, a)| Op::Kill(n, a)),
            Just(Op::BadKill),
            (0u64..2, any::<bool>()).prop_map(|(n, a)| Op::Ask(n, a)),
            Just(Op::BadAsk),
            (0u64..2).prop_map(Op::Elsewhere),
            Just(Op::Nothing),
            Just(Op::Nothing),
        ];
        let unchanged = std::cell::Cell::new(0u64);
        proptest!(ProptestConfig::with_cases(128), |(
            cached in any::<bool>(),
            ops in proptest::collection::vec(op, 1..24),
        )| {
            let (store, cfg, mut sync, mut out, watch) = if cached {
                cache_read_and_watching()
            } else {
                let cfg = AgentCoreConfig::new("a");
                let sync = Sync::new(&cfg, 0);
                (MemoryStore::new(), cfg, sync, Outbox::new(), 0)
            };
            for (i, op) in ops.into_iter().enumerate() {
                let now = 10 * (i as u64 + 1);
                let before = read_synced(&store);
                let kill = |n: u64, answered: bool| remote::KillRequest {
                    copy: format!("w-{n}"),
                    incarnation: 1,
                    requested_ms: 0,
                    outcome: answered.then(|| "killed pid 7".to_owned()),
                };
                let ask = |n: u64, answered: bool| LogRequest {
                    copy: format!("w-{n}"),
                    from: 0,
                    tail: None,
                    max_bytes: 100,
                    requested_ms: 0,
                    answer: answered.then(|| LogAnswer {
                        from: 0,
                        hex: String::new(),
                        len: 0,
                        running: true,
                        missing: false,
                        error: None,
                    }),
                };
                let txn = match op {
                    Op::Place(n, grace_ms) => {
                        let mut a = assignment(n);
                        a.grace_ms = grace_ms;
                        Some(Txn::new().put(placement_key("a", "w", n), encode(&a)))
                    }
                    Op::Misplace(n) => {
                        Some(Txn::new().put(placement_key("a", "w", n + 3), encode(&assignment(n))))
                    }
                    Op::Damage(n) => Some(Txn::new().put(placement_key("a", "w", n), "{not json")),
                    Op::Remove(n) => Some(Txn::new().delete(placement_key("a", "w", n))),
                    Op::Kill(n, answered) => Some(Txn::new().put(
                        format!("{}k{n}", remote::kills_of("a")),
                        encode(&kill(n, answered)),
                    )),
                    Op::BadKill => Some(Txn::new().put(format!("{}bad", remote::kills_of("a")), "{")),
                    Op::Ask(n, answered) => Some(Txn::new().put(
                        log_request_key("a", &format!("r{n}")),
                        encode(&ask(n, answered)),
                    )),
                    Op::BadAsk => Some(Txn::new().put(log_request_key("a", "bad"), "[")),
                    Op::Elsewhere(n) => {
                        Some(Txn::new().put(placement_key("b", "w", n), encode(&assignment(n))))
                    }
                    Op::Nothing => None,
                };
                if let Some(txn) = txn {
                    store.commit(&txn).unwrap();
                }
                let read = read_synced(&store);
                if cached && read.revision > before.revision {
                    // The watch's event for the write: the keys read that changed or went.
                    let old: BTreeMap<&str, &Entry> =
                        before.entries.iter().map(|e| (e.key.as_str(), e)).collect();
                    let mut changes: Vec<Change> = read
                        .entries
                        .iter()
                        .filter(|e| old.get(e.key.as_str()).is_none_or(|o| *o != *e))
                        .map(|e| Change { key: e.key.clone(), entry: Some(e.clone()) })
                        .collect();
                    changes.extend(
                        old.keys()
                            .filter(|k| !read.entries.iter().any(|e| e.key == **k))
                            .map(|k| Change { key: (*k).to_owned(), entry: None }),
                    );
                    let event = WatchEvent::Changes { revision: read.revision, changes };
                    sync.on_watch(now, WatchDelivery { watch, event }, &cfg, &mut out);
                }
                let later = now + WATCH_SETTLE_MS;
                sync.want();
                let parse = match sync.drive(later, 1, &cfg, &mut out) {
                    Some(synced) => {
                        prop_assert!(cached, "only the cache serves at once");
                        if matches!(synced, Synced::Unchanged(_)) {
                            unchanged.set(unchanged.get() + 1);
                        }
                        act(&mut sync, synced, &cfg, &mut out)
                    }
                    None => {
                        prop_assert!(!cached, "the cache serves");
                        let Some(AgentOutput::Store { id, request }) = out.drain().pop() else {
                            panic!("no sync read");
                        };
                        let _ = out.take(id);
                        sync.replied();
                        let Some(Ok(read)) = sync.on_reply(later, carry_out(&store, &request), &mut out)
                        else {
                            panic!("the read failed");
                        };
                        act(&mut sync, Synced::Read(read), &cfg, &mut out)
                    }
                };
                let placed: Vec<Entry> = read
                    .entries
                    .iter()
                    .filter(|e| e.key.starts_with(&placements_of("a")))
                    .cloned()
                    .collect();
                let newest = placed.iter().map(|e| e.mod_revision).max().unwrap_or(0);
                prop_assert_eq!(&parse.assigned, &parse_assignments(&placed, "a").0, "step {}", i);
                prop_assert_eq!(&parse.kills, &remote::pending_kills(&read.entries, "a"));
                prop_assert_eq!(&parse.logs, &crate::log_requests::pending(&read.entries, "a"));
                prop_assert_eq!(parse.newest, newest);
                out.drain_logs();
            }
        });
        assert!(unchanged.get() > 0, "no sync was served as unchanged");
    }
}
