//! The agent's watch cache ([`WatchCache`]): one read of its placements and kill requests, then a
//! watch from that read's revision ([`crate::cache::CacheCore`], as the controller host keeps
//! one), on a store that pushes changes ([`AgentCoreConfig::watch_cache`]).
//!
//! It serves a sync only while it follows the store, was read under the lease held now (a
//! rejoin reads it again: names given away while the node was lost must not come back from an
//! old copy), and has caught up with the agent's own kill answers (read your writes). A watch
//! that fails is read and watched again after a sync period, so that one that keeps failing
//! costs a read per period, not a loop.
//!
//! It is separate from [`super::sync`] because it is an optimisation with its own failure modes:
//! the sync is correct without it, reading the store every period.

use super::outbox::{Outbox, Purpose};
use super::AgentCoreConfig;
use crate::cache::CacheCore;
use crate::machine::{ReqId, StoreReply, StoreRequest, StoreResult, WatchDelivery};
use crate::model::placements_of;
use crate::remote;
use crate::store::{Entry, LeaseId, Read, Revision, WatchEvent};

/// How often an agent whose watch cache serves syncs them anyway, with nothing changed, in
/// milliseconds: a safety net, not the way changes arrive.
pub const CACHE_RESYNC_MS: u64 = 10_000;

/// The watch cache of the node's placements and kill requests: see the [module docs](self).
#[derive(Debug)]
pub(super) struct WatchCache {
    core: CacheCore,
    /// The watch following it, once asked for.
    watch: Option<ReqId>,
    /// A full read is in flight.
    reading: bool,
    /// A failed read is tried again no earlier than this.
    retry_ms: u64,
    /// Read your writes: the newest revision this agent committed under the cached prefixes.
    /// The cache serves no sync until it has caught up with it.
    seen: Revision,
    /// The lease the cache was read under. A new lease reads it again: the node may have been
    /// lost meanwhile, and what the cache showed then must not be acted on under the new one.
    lease: Option<LeaseId>,
}

impl WatchCache {
    /// An empty cache of `node`'s prefixes, to be read from `now`.
    pub(super) fn new(node: &str, now: u64) -> Self {
        Self {
            core: CacheCore::new(&[
                &placements_of(node),
                &remote::kills_of(node),
                &crate::model::keys::log_requests_of(node),
            ]),
            watch: None,
            reading: false,
            retry_ms: now,
            seen: 0,
            lease: None,
        }
    }

    /// Whether it can serve a sync under `lease`.
    pub(super) fn serves(&self, lease: LeaseId) -> bool {
        self.core.is_live() && self.lease == Some(lease) && self.core.revision() >= self.seen
    }

    /// What it holds under `prefixes`, if it can answer.
    pub(super) fn read(&mut self, prefixes: &[&str]) -> Option<Read> {
        self.core.read(prefixes)
    }

    /// Whether what it holds under `prefixes` (its entries in key order) passes `same`, if it can
    /// answer: then its revision, counted as a read served as [`WatchCache::read`] counts one.
    /// `None` if it does not pass, or the cache cannot answer this way.
    pub(super) fn holds<F>(&mut self, prefixes: &[&str], same: F) -> Option<Revision>
    where
        F: FnOnce(&mut dyn Iterator<Item = &Entry>) -> bool,
    {
        let (revision, mut held) = self.core.entries(prefixes)?;
        let same = same(&mut held);
        drop(held);
        if !same {
            return None;
        }
        self.core.count_served();
        Some(revision)
    }

    /// The revision it is at.
    pub(super) fn revision(&self) -> Revision {
        self.core.revision()
    }

    /// A read of the store at `read.revision`, of the cache's own prefixes, was acted on. If the
    /// cache holds exactly what that read found (every key, at the same modification revision),
    /// it is at that revision too: it moves up to it, and the watch's deliveries up to it, if any
    /// are still on their way, are passed over ([`WatchCache::on_watch`]): they end where it
    /// already is. Without this, a cache behind a read that was acted on could serve no sync
    /// until its node's keys next changed ([`super::sync`]: a sync never acts on an older
    /// view than one it acted on).
    pub(super) fn vouched_by(&mut self, read: &Read) {
        if !self.core.is_live() || read.revision <= self.core.revision() {
            return;
        }
        let prefixes: Vec<&str> = self.core.prefixes().iter().map(String::as_str).collect();
        let Some((_, held)) = self.core.entries(&prefixes) else {
            return;
        };
        let held: Vec<(&str, Revision)> = held.map(|e| (e.key.as_str(), e.mod_revision)).collect();
        let mut found: Vec<(&str, Revision)> = read
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.mod_revision))
            .collect();
        found.sort_unstable();
        if held == found {
            self.core.apply(read.revision, Vec::new());
        }
    }

    /// A sync read the store instead.
    pub(super) fn passed_through(&mut self) {
        self.core.passed_through();
    }

    /// This agent committed at `rev` under the cached prefixes.
    pub(super) fn saw(&mut self, rev: Revision) {
        self.seen = self.seen.max(rev);
    }

    /// When it wants to be stepped to start its read, if it does.
    pub(super) fn retry_at(&self) -> Option<u64> {
        (!self.reading && self.watch.is_none()).then_some(self.retry_ms)
    }

    /// From when [`WatchCache::drive`] under `lease` starts a read, if it would before an
    /// input: for a tick answered without the step.
    pub(super) fn acts_from(&self, lease: LeaseId) -> Option<u64> {
        let idle = self.reading || (self.lease == Some(lease) && self.watch.is_some());
        (!idle).then_some(self.retry_ms)
    }

    /// Starts the full read if it needs one: none yet, its watch was lost, or it was read under
    /// another lease than `lease`, held now.
    pub(super) fn drive(
        &mut self,
        now: u64,
        lease: LeaseId,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) {
        if self.reading
            || (self.lease == Some(lease) && self.watch.is_some())
            || now < self.retry_ms
        {
            return;
        }
        let old = self.watch.take();
        self.core.set_live(false);
        self.reading = true;
        self.lease = Some(lease);
        let prefixes = self.core.prefixes().to_vec();
        if let Some(id) = old {
            out.cancel(id);
        }
        out.send(
            now,
            StoreRequest::Read { prefixes },
            Purpose::CacheRead { lease },
            cfg.request_timeout_ms,
        );
    }

    /// After the reply to the full read under `lease`: watches from its revision. Returns
    /// whether the cache changed (a sync is due).
    pub(super) fn on_read(
        &mut self,
        now: u64,
        lease: LeaseId,
        result: StoreResult,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) -> bool {
        self.reading = false;
        let read = match result {
            Ok(StoreReply::Read { read, .. }) if self.lease == Some(lease) => read,
            _ => {
                // Failed, or read under a lease since replaced: read again (a failure after a
                // sync period; syncs read the store meanwhile).
                self.lease = None;
                self.retry_ms = now + cfg.sync_every_ms;
                return false;
            }
        };
        let after = read.revision;
        self.core.reset(read);
        let prefixes = self.core.prefixes().to_vec();
        let id = out.send(
            now,
            StoreRequest::Watch { prefixes, after },
            Purpose::CacheWatch,
            cfg.request_timeout_ms,
        );
        self.watch = Some(id);
        true
    }

    /// After the reply to the watch request: not established (or not in time), it reads and
    /// watches again.
    pub(super) fn on_watching(
        &mut self,
        now: u64,
        result: &StoreResult,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) {
        if !matches!(result, Ok(StoreReply::Watching)) {
            self.lost(now, cfg, out);
        }
    }

    /// An event of a watch. Returns whether the cache changed (a sync is due).
    pub(super) fn on_watch(
        &mut self,
        now: u64,
        d: WatchDelivery,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) -> bool {
        if self.watch != Some(d.watch) {
            // A watch this machine no longer follows.
            return false;
        }
        match d.event {
            WatchEvent::Idle => false,
            WatchEvent::Lost(_) => {
                self.lost(now, cfg, out);
                false
            }
            // Changes up to a revision a read has shown it holds already (`vouched_by`).
            WatchEvent::Changes { revision, .. } if revision <= self.core.revision() => false,
            WatchEvent::Changes { revision, changes } => {
                self.core.apply(revision, changes);
                true
            }
        }
    }

    /// The watch is gone: it serves nothing until it has read and watched again.
    fn lost(&mut self, now: u64, cfg: &AgentCoreConfig, out: &mut Outbox) {
        self.core.set_live(false);
        self.lease = None;
        // Read and watch again after a sync period (syncs read the store meanwhile), so that a
        // watch that keeps failing costs a read per period, not a loop.
        self.retry_ms = now + cfg.sync_every_ms;
        if let Some(id) = self.watch.take() {
            out.cancel(id);
        }
    }

    /// The fence came down: nothing read or watched under the lease counts any more, even if
    /// the same lease is revived. A read in flight stays marked as such, so that its reply,
    /// refused for want of a lease, comes before the next read.
    pub(super) fn fenced(&mut self, out: &mut Outbox) {
        self.core.set_live(false);
        self.lease = None;
        if let Some(id) = self.watch.take() {
            out.cancel(id);
        }
    }

    pub(super) fn stop(&mut self, out: &mut Outbox) {
        if let Some(id) = self.watch.take() {
            out.cancel(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::messages::AgentOutput;
    use crate::store::StoreError;

    /// How many full reads the step sent.
    fn reads(out: &mut Outbox) -> usize {
        out.drain()
            .into_iter()
            .filter(|o| {
                matches!(
                    o,
                    AgentOutput::Store {
                        request: StoreRequest::Read { .. },
                        ..
                    }
                )
            })
            .count()
    }

    /// The fence ends what the cache holds: it serves nothing under the same lease revived, its
    /// watch is cancelled, and it reads again before it serves (mutant 351 of the mutation
    /// sample, `fenced` doing nothing: the world never revives a lease across a fence).
    #[test]
    fn after_the_fence_it_serves_nothing_until_it_has_read_again() {
        let cfg = AgentCoreConfig::new("a");
        let mut out = Outbox::new();
        let mut c = WatchCache::new("a", 0);
        c.drive(0, 7, &cfg, &mut out);
        let read = crate::store::Read {
            revision: 3,
            entries: Vec::new(),
        };
        let reply = Ok(StoreReply::Read { read, now_ms: 0 });
        assert!(c.on_read(10, 7, reply, &cfg, &mut out));
        let _ = out.drain();
        assert!(c.serves(7));
        c.fenced(&mut out);
        assert!(!c.serves(7), "the same lease revived");
        assert!(
            out.drain().iter().any(|o| matches!(
                o,
                AgentOutput::Store {
                    request: StoreRequest::CancelWatch(_),
                    ..
                }
            )),
            "its watch cancelled"
        );
        c.drive(20, 7, &cfg, &mut out);
        assert_eq!(reads(&mut out), 1, "read again");
    }

    #[test]
    fn a_failed_read_asks_to_be_woken_a_sync_period_later_and_is_read_again_then() {
        let cfg = AgentCoreConfig::new("a");
        let mut out = Outbox::new();
        let mut c = WatchCache::new("a", 0);
        assert_eq!(c.retry_at(), Some(0), "its first read is due at once");
        c.drive(0, 7, &cfg, &mut out);
        assert_eq!(reads(&mut out), 1);
        assert_eq!(c.retry_at(), None, "a read in flight wants no wake");
        let failed = Err(StoreError::Unavailable("down".into()));
        assert!(!c.on_read(30, 7, failed, &cfg, &mut out));
        let again = 30 + cfg.sync_every_ms;
        // The agent must be woken for the retry, or it waits for its next wake (up to 1 s).
        assert_eq!(c.retry_at(), Some(again));
        c.drive(again - 1, 7, &cfg, &mut out);
        assert_eq!(reads(&mut out), 0, "not before a sync period");
        c.drive(again, 7, &cfg, &mut out);
        assert_eq!(reads(&mut out), 1);
    }
}
