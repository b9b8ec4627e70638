//! The leader's poll: every `poll` it starts whatever is due (a cache read, a compaction, a
//! renewal, the declarations, a collection, in that order), then the passes that are due.

use super::*;

impl Host {
    // ---- the leader's poll ----

    pub(super) fn drive(&mut self) {
        let now = self.now;
        let poll = self.cfg.poll_ms();
        match &mut self.role {
            Role::Follow(f) => {
                if f.attempt_due(now, poll) {
                    self.send(
                        StoreRequest::Read {
                            prefixes: vec![LEADER.to_owned()],
                        },
                        Purpose::Election,
                        Awaiting::LeaderRead,
                    );
                }
            }
            Role::Lead(_) => self.drive_lead(),
            Role::Releasing | Role::Stopped => {}
        }
    }

    pub(super) fn drive_lead(&mut self) {
        let now = self.now;
        let poll = self.cfg.poll_ms();
        let ttl = self.cfg.ttl_ms();
        let retention = crate::controller::config::millis(self.cfg.controller.event_retention);
        let Some(l) = self.lead() else { return };
        if l.lease.lapsed(now, ttl) {
            // No renewal for a whole TTL: the store may have let the lease go.
            return self.depose();
        }
        if now >= l.next_poll_ms {
            l.next_poll_ms = now + poll;
            let compact = l.compaction.due(now, retention);
            let renew = l.lease.renewal_due(now, ttl);
            let declare = l.declarations.start();
            let collect = l.gc.due(now);
            let lease = l.lease.id;
            self.resync();
            if compact {
                self.send(
                    StoreRequest::Read {
                        prefixes: strings(&retention::COMPACTION_PREFIXES),
                    },
                    Purpose::Compaction,
                    Awaiting::CompactRead,
                );
            }
            if renew {
                self.send(
                    StoreRequest::KeepAlive(lease),
                    Purpose::Renewal,
                    Awaiting::KeepAlive { sent_ms: now },
                );
            }
            // Answers from the cache come back at once and may end the leadership.
            if declare && self.is_leader() {
                self.request_revision();
            }
            if collect && self.is_leader() {
                self.request_snapshot(Purpose::Gc, Awaiting::GcRead);
            }
        }
        self.drive_loops();
    }

    /// Starts the pass of every loop that is due.
    pub(super) fn drive_loops(&mut self) {
        let now = self.now;
        let Some(l) = self.lead() else { return };
        let due = l.loops.due(now);
        if due.is_empty() {
            // Most steps (every poll, every reply): nothing more to look at. Nor are there
            // skipped rounds to take: only `due` counts them, for a loop it starts, and they
            // are taken right after.
            return;
        }
        for (name, rounds) in l.loops.take_skipped() {
            self.observed.skipped(&name, rounds);
        }
        // A pass that is provably a no-op is not run (`rounds.rs`): its round is one left out.
        let serving = self
            .cfg
            .controller
            .skip_quiet_passes
            .then(|| self.cache().and_then(|c| c.serving_revision()))
            .flatten();
        let round_at_ms = now.saturating_add_signed(self.store_offset);
        let resync_ms = crate::controller::config::millis(self.cfg.controller.round_resync);
        for (name, gen) in due {
            if !self.is_leader() {
                return;
            }
            let Some(lp) = self.pass_loop(&name, gen) else {
                continue;
            };
            if serving.is_some_and(|rev| lp.may_skip(rev, round_at_ms, resync_ms)) {
                lp.free();
                self.observed.skipped_quiet(&name);
                continue;
            }
            lp.ended_quiet(None);
            self.observed.begin(&name, now);
            self.request_snapshot(Purpose::Pass, Awaiting::PassRead { name, gen });
        }
    }
}
