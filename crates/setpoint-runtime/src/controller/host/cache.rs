//! The host's side of the leader's watch cache: its read, its watch, and what a lost watch
//! costs (a read again). What the cache serves, and when, is [`crate::controller::serving`]'s.

use super::*;

impl Host {
    // ---- the watch cache ----

    /// Starts a full read of the cache, if it needs one and none is in flight.
    pub(super) fn resync(&mut self) {
        if self.cache().is_some_and(HostCache::start_read) {
            self.send(snapshot_read(), Purpose::Cache, Awaiting::CacheRead);
        }
    }

    pub(super) fn on_cache_read(&mut self, result: StoreResult) {
        let read = read_of(result);
        if let Err(e) = &read {
            if e.is_lost() {
                return self.lost(e.clone());
            }
        }
        let Some(c) = self.cache() else { return };
        let Some((prefixes, after)) = c.read_done(read.ok().map(|(read, _)| read)) else {
            return;
        };
        let id = self.send(
            StoreRequest::Watch { prefixes, after },
            Purpose::Cache,
            Awaiting::CacheWatch,
        );
        if let Some(c) = self.cache() {
            c.watching(id);
        }
        self.wake_all();
    }

    pub(super) fn on_cache_watch(&mut self, result: StoreResult) {
        match result {
            Ok(StoreReply::Watching) => {}
            other => {
                let e = unexpected(other);
                if e.is_lost() {
                    return self.lost(e);
                }
                // Not established (or not in time): read again and watch again.
                self.watch_lost();
            }
        }
    }

    pub(super) fn watch_lost(&mut self) {
        let Some(c) = self.cache() else { return };
        if let Some(id) = c.lose_watch() {
            self.push_cancel(id);
        }
        self.resync();
    }

    /// With `wake_on_change`: a new node report (or a resync, which may hide one) wakes every
    /// loop.
    pub(super) fn wake_all(&mut self) {
        if !self.cfg.controller.wake_on_change {
            return;
        }
        if let Some(l) = self.lead() {
            l.loops.wake_all();
        }
    }
}
