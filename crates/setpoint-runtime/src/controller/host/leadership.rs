//! The host's side of the election and of the leader's renewal: a follower's reads of
//! `/leader`, its watch of it as a standby, the claim, becoming the leader, being deposed, and
//! the keep-alives. The rules are [`crate::controller::election`]'s; this part sends the requests
//! they call for and routes the replies back.

use super::*;

impl Host {
    // ---- election ----

    pub(super) fn follow_error(&mut self, e: StoreError) {
        if e.is_lost() {
            return self.lost(e);
        }
        if let Some(f) = self.follower() {
            f.failed();
        }
        self.reach_failed(format!("cannot reach the store: {e}"));
    }

    /// Logs `what` if the store was answering until now (once per stretch of failures).
    pub(super) fn reach_failed(&mut self, what: String) {
        self.condition_failed(
            STORE,
            None,
            format!("{what} (retrying; logged again when it answers)"),
        );
    }

    /// Logs that the store answers again, if it was failing.
    pub(super) fn reach_answered(&mut self) {
        if self.conditions.ended(STORE) {
            self.log(None, "the store answers again");
        }
    }

    /// A try of the condition `what` failed, as `line` says: logged (as `who`'s) when the
    /// condition begins, not at every try ([`Conditions::failed`]).
    pub(super) fn condition_failed(&mut self, what: &str, who: Option<&str>, line: String) {
        if let Some(line) = self.conditions.failed(self.now, what, line) {
            self.log(who, line);
        }
    }

    /// A pass of loop `name` failed with `e`: logged when its passes begin to fail.
    pub(super) fn pass_failed(&mut self, name: &str, e: impl std::fmt::Display) {
        let who = format!("loop {name}");
        self.condition_failed(&who, Some(&who), format!("pass failed: {e}"));
    }

    /// Someone else holds the lease: say so once per stretch of following.
    pub(super) fn standby(&mut self) {
        self.reach_answered();
        if self.follower().is_some_and(Follower::standby) {
            self.log(
                None,
                "standby: another controller holds the lease; waiting for it",
            );
        }
    }

    pub(super) fn on_leader_read(&mut self, result: StoreResult) {
        match read_of(result) {
            Ok((read, _)) if election::held(&read) => {
                self.standby();
                self.watch_leader(read.revision);
            }
            Ok((read, now_ms)) => {
                let replaces = election::forged(&read);
                let ttl = self.cfg.controller.lease_ttl;
                self.send(
                    StoreRequest::Grant { ttl },
                    Purpose::Election,
                    Awaiting::Grant {
                        acquired_ms: now_ms,
                        asked_ms: self.now,
                        replaces,
                    },
                );
            }
            Err(e) => self.follow_error(e),
        }
    }

    /// With a watch cache, a standby watches `/leader` from the read that showed it held, and
    /// reads it again only when the watch says it ended (or is lost), and once per lease TTL
    /// regardless; without one it reads it every poll.
    pub(super) fn watch_leader(&mut self, after: Revision) {
        if !self.cfg.watch_cache {
            return;
        }
        let (now, ttl, poll) = (self.now, self.cfg.ttl_ms(), self.cfg.poll_ms());
        let Some(f) = self.follower() else { return };
        if !f.wait_on_watch(now, ttl, poll) {
            return;
        }
        let id = self.send(
            StoreRequest::Watch {
                prefixes: vec![LEADER.to_owned()],
                after,
            },
            Purpose::Election,
            Awaiting::FollowWatch,
        );
        if let Some(f) = self.follower() {
            f.watching(id);
        }
    }

    pub(super) fn on_grant(
        &mut self,
        result: StoreResult,
        acquired_ms: u64,
        asked_ms: u64,
        replaces: Revision,
    ) {
        match result {
            Ok(StoreReply::Granted(lease)) => {
                let c = &self.cfg.controller;
                let txn =
                    election::claim(&c.holder, acquired_ms, self.cfg.ttl_ms(), lease, replaces);
                self.send(
                    StoreRequest::Commit(txn),
                    Purpose::Election,
                    Awaiting::Create { lease, asked_ms },
                );
            }
            other => self.follow_error(unexpected(other)),
        }
    }

    pub(super) fn on_create(&mut self, result: StoreResult, lease: LeaseId, asked_ms: u64) {
        match committed(result) {
            Ok(fence) => self.become_leader(lease, fence, asked_ms),
            Err(e) => {
                self.send(
                    StoreRequest::Revoke(lease),
                    Purpose::Election,
                    Awaiting::Discard,
                );
                if e.is_conflict() {
                    self.standby();
                } else {
                    self.follow_error(e);
                }
            }
        }
    }

    pub(super) fn become_leader(&mut self, lease: LeaseId, fence: Revision, asked_ms: u64) {
        if let Some(id) = self.follower().and_then(Follower::end_watch) {
            self.push_cancel(id);
        }
        self.reach_answered();
        self.log(None, format!("became the leader (lease {lease})"));
        self.term += 1;
        let now = self.now;
        self.role = Role::Lead(Box::new(Lead {
            lease: Lease::new(lease, fence, asked_ms),
            next_poll_ms: now,
            declarations: Declarations::default(),
            loops: Schedule::default(),
            gc: Collector::default(),
            compaction: Compactor::new(now),
            cache: self.cfg.watch_cache.then(HostCache::new),
            catch_up: CatchUp::default(),
        }));
    }

    /// This host is not the leader any more: its loops end and it follows.
    pub(super) fn depose(&mut self) {
        if !self.is_leader() {
            return;
        }
        self.term += 1;
        // A new role starts afresh.
        self.conditions.ended(STORE);
        self.log(None, "lost the leader lease; following");
        let old = std::mem::replace(&mut self.role, Role::Follow(Follower::new(self.now)));
        if let Role::Lead(l) = old {
            self.cancel_watch(&l);
        }
    }

    /// Ends the watch of a leadership that ends.
    pub(super) fn cancel_watch(&mut self, l: &Lead) {
        if let Some(id) = l.cache.as_ref().and_then(HostCache::watch) {
            self.push_cancel(id);
        }
    }

    /// Asks the driver to end watch `id` (a request without a reply).
    pub(super) fn push_cancel(&mut self, id: ReqId) {
        self.out.push(HostOutput::Request {
            id: self.next_id,
            request: StoreRequest::CancelWatch(id),
            purpose: Purpose::Cache,
        });
        self.next_id += 1;
    }

    pub(super) fn on_keep_alive(&mut self, result: StoreResult, sent_ms: u64) {
        let ttl = self.cfg.ttl_ms();
        let now = self.now;
        match result {
            Ok(StoreReply::KeptAlive) => {
                self.conditions.ended(RENEWAL);
                if let Some(l) = self.lead() {
                    l.lease.kept_alive(sent_ms);
                }
            }
            Err(StoreError::LeaseExpired(_)) => self.depose(),
            other => {
                let e = unexpected(other);
                if e.is_lost() {
                    return self.lost(e);
                }
                self.condition_failed(
                    RENEWAL,
                    None,
                    format!("cannot renew the lease: {e} (retrying)"),
                );
                let Some(l) = self.lead() else { return };
                if l.lease.renewal_failed(now, ttl) {
                    self.depose();
                }
            }
        }
    }
}
