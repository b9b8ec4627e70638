//! Election and renewal: the `/leader` lease, from both sides.
//!
//! - [`Follower`]: a host without the lease. It tries every poll: it reads `/leader`, and only
//!   if it is absent grants a lease and creates `/leader` under it, compared against absence
//!   ([`claim`]); the commit's revision is the fence. With a watch cache (a store that pushes
//!   changes), a standby that found `/leader` held watches it from that read instead and tries
//!   again when the watch shows the record deleted or lost ([`lease_ended`]), and once per TTL
//!   regardless.
//! - [`Lease`]: the leader's hold on it. A keep-alive every TTL/3, counted from when it was
//!   *sent* (the store extends the lease when it receives it, later), so the leader's idea of
//!   the lease never outlives the store's on the same clock rate; no successful renewal for a
//!   whole TTL means the lease may be gone ([`Lease::lapsed`]).
//!
//! The states decide; the [`Host`](super::Host) sends the requests they call for and routes the
//! replies back.

use crate::machine::ReqId;
use crate::model::{encode, Leader, LEADER};
use crate::store::{LeaseId, Read, Revision, Txn, WatchEvent};

/// A host that does not hold the lease (yet): when it tries next, and how it waits.
#[derive(Debug)]
pub(super) struct Follower {
    /// When the next read of `/leader` is due (this host's clock).
    next_try_ms: u64,
    /// An attempt (read, grant, create) is in flight.
    busy: bool,
    /// The standby line has been logged in this stretch of following.
    standby_said: bool,
    /// With a watch cache: the watch of `/leader` that tells a standby when the lease ends, so
    /// that it need not poll.
    watch: Option<ReqId>,
}

impl Follower {
    /// A follower whose first attempt is due at `now_ms`.
    pub(super) fn new(now_ms: u64) -> Self {
        Self {
            next_try_ms: now_ms,
            busy: false,
            standby_said: false,
            watch: None,
        }
    }

    /// Whether an attempt starts now: none is in flight and one is due. If so it is counted as
    /// in flight, and the next is due a poll later.
    pub(super) fn attempt_due(&mut self, now_ms: u64, poll_ms: u64) -> bool {
        if self.busy || now_ms < self.next_try_ms {
            return false;
        }
        self.busy = true;
        self.next_try_ms = now_ms + poll_ms;
        true
    }

    /// When the follower wants to be stepped: its next attempt, unless one is in flight.
    pub(super) fn next_wake(&self) -> Option<u64> {
        (!self.busy).then_some(self.next_try_ms)
    }

    /// The attempt failed: the next one is tried when due.
    pub(super) fn failed(&mut self) {
        self.busy = false;
    }

    /// Someone else holds the lease: the attempt ends. Returns whether to say so (once per
    /// stretch of following).
    pub(super) fn standby(&mut self) -> bool {
        self.busy = false;
        let say = !self.standby_said;
        self.standby_said = true;
        say
    }

    /// A standby with a watch cache waits on a watch of `/leader` instead of polling: it tries
    /// again once per TTL regardless. Returns whether the watch must be asked for (there is
    /// none yet).
    pub(super) fn wait_on_watch(&mut self, now_ms: u64, ttl_ms: u64, poll_ms: u64) -> bool {
        self.next_try_ms = now_ms + ttl_ms.max(poll_ms);
        self.watch.is_none()
    }

    /// The watch of `/leader` was asked for as `id`.
    pub(super) fn watching(&mut self, id: ReqId) {
        self.watch = Some(id);
    }

    /// Whether `id` is this follower's watch of `/leader`.
    pub(super) fn is_watch(&self, id: ReqId) -> bool {
        self.watch == Some(id)
    }

    /// The watch was not established, or not said to be in time: poll again, now. Returns the
    /// watch to cancel: a reply lost on the way (a timeout) leaves the store's side of the
    /// watch open, and a store that refused it ignores the cancel.
    pub(super) fn watch_refused(&mut self, now_ms: u64) -> Option<ReqId> {
        self.next_try_ms = now_ms;
        self.watch.take()
    }

    /// The watch delivered `event`. If the lease ended (or the watch is lost), try now; returns
    /// the watch to cancel then.
    pub(super) fn on_watch(&mut self, now_ms: u64, event: &WatchEvent) -> Option<ReqId> {
        if !lease_ended(event) {
            return None;
        }
        self.next_try_ms = now_ms;
        self.watch.take()
    }

    /// Ends the watch: returns it, to be cancelled, if there was one.
    pub(super) fn end_watch(&mut self) -> Option<ReqId> {
        self.watch.take()
    }
}

/// Whether a standby's watch of `/leader` says the lease may be free: the record was deleted,
/// or the watch is lost (so nothing is known any more).
pub(super) fn lease_ended(event: &WatchEvent) -> bool {
    match event {
        WatchEvent::Idle => false,
        WatchEvent::Lost(_) => true,
        WatchEvent::Changes { changes, .. } => {
            changes.iter().any(|c| c.key == LEADER && c.entry.is_none())
        }
    }
}

/// Whether a read of `/leader` shows it held: a record under a lease. One under none (written
/// straight into the store) is no controller's and is not a leader ([`forged`]).
pub(super) fn held(read: &Read) -> bool {
    read.entries
        .iter()
        .any(|e| e.key == LEADER && e.lease.is_some())
}

/// The `mod_revision` of a lease-less `/leader` in `read`, which a claim replaces (compared, so
/// that only that value is); 0 if there is none.
pub(super) fn forged(read: &Read) -> Revision {
    read.entries
        .iter()
        .find(|e| e.key == LEADER && e.lease.is_none())
        .map_or(0, |e| e.mod_revision)
}

/// The creation of `/leader` under `lease`, compared against its absence: who holds it, since
/// when on the store's clock (`acquired_ms`, at the read that found it free), for how long.
/// `replaces` is the `mod_revision` of a forged, lease-less `/leader` to overwrite (0: none).
pub(super) fn claim(
    holder: &str,
    acquired_ms: u64,
    ttl_ms: u64,
    lease: LeaseId,
    replaces: Revision,
) -> Txn {
    let record = Leader {
        holder: holder.to_owned(),
        acquired_ms,
        ttl_ms,
    };
    Txn::new()
        .expect(LEADER, replaces)
        .put_leased(LEADER, encode(&record), lease)
}

/// The leader's lease: its id, its fence, and how its renewals go.
#[derive(Debug)]
pub(super) struct Lease {
    /// The lease `/leader` lives under.
    pub(super) id: LeaseId,
    /// `/leader`'s revision when it was created: every write of the leader compares it.
    pub(super) fence: Revision,
    /// When the last successful renewal was sent (or the lease asked for), this host's clock.
    renewed_ms: u64,
    /// A keep-alive is in flight.
    renewing: bool,
}

impl Lease {
    /// The lease `id`, fenced at `fence`, asked for at `asked_ms`: it can end no earlier than a
    /// TTL after that.
    pub(super) fn new(id: LeaseId, fence: Revision, asked_ms: u64) -> Self {
        Self {
            id,
            fence,
            renewed_ms: asked_ms,
            renewing: false,
        }
    }

    /// No successful renewal for a whole TTL: the store may have let the lease go.
    pub(super) fn lapsed(&self, now_ms: u64, ttl_ms: u64) -> bool {
        now_ms.saturating_sub(self.renewed_ms) >= ttl_ms
    }

    /// Whether a keep-alive is due now (a third of the TTL since the last renewal, none in
    /// flight); if so it is counted as in flight.
    pub(super) fn renewal_due(&mut self, now_ms: u64, ttl_ms: u64) -> bool {
        let due = !self.renewing && now_ms - self.renewed_ms >= ttl_ms / 3;
        if due {
            self.renewing = true;
        }
        due
    }

    /// From when [`Self::lapsed`] holds, as things stand (the last renewal is never later than
    /// the host's clock).
    pub(super) fn lapses_at(&self, ttl_ms: u64) -> u64 {
        self.renewed_ms.saturating_add(ttl_ms)
    }

    /// From when [`Self::renewal_due`] would say yes, as things stand: never while a
    /// keep-alive is in flight. It changes nothing.
    pub(super) fn renewal_due_at(&self, ttl_ms: u64) -> u64 {
        if self.renewing {
            return u64::MAX;
        }
        self.renewed_ms.saturating_add(ttl_ms / 3)
    }

    /// The keep-alive sent at `sent_ms` was answered.
    pub(super) fn kept_alive(&mut self, sent_ms: u64) {
        self.renewing = false;
        self.renewed_ms = self.renewed_ms.max(sent_ms);
    }

    /// The keep-alive failed. Returns whether the lease has lapsed by now.
    pub(super) fn renewal_failed(&mut self, now_ms: u64, ttl_ms: u64) -> bool {
        self.renewing = false;
        self.lapsed(now_ms, ttl_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::decode;
    use crate::store::{Change, Entry, MemoryStore, Op, Store};

    fn entry(key: &str) -> Entry {
        Entry {
            key: key.into(),
            value: "{}".into(),
            create_revision: 1,
            mod_revision: 1,
            lease: None,
        }
    }

    #[test]
    fn a_follower_tries_once_per_poll_and_not_while_an_attempt_is_in_flight() {
        let mut f = Follower::new(100);
        assert!(!f.attempt_due(99, 25), "not before it is due");
        assert!(f.attempt_due(100, 25));
        assert_eq!(f.next_wake(), None, "busy: no wake of its own");
        assert!(!f.attempt_due(500, 25), "one attempt at a time");
        f.failed();
        assert_eq!(f.next_wake(), Some(125));
        assert!(!f.attempt_due(124, 25));
        assert!(f.attempt_due(125, 25));
    }

    #[test]
    fn the_standby_line_is_said_once_per_stretch_of_following() {
        let mut f = Follower::new(0);
        assert!(f.attempt_due(0, 10));
        assert!(f.standby());
        assert!(f.attempt_due(10, 10));
        assert!(!f.standby(), "said already");
        assert!(Follower::new(20).standby(), "a new stretch says it again");
    }

    #[test]
    fn a_watching_standby_tries_once_per_ttl_and_at_once_when_the_lease_ends() {
        let mut f = Follower::new(0);
        assert!(f.attempt_due(0, 25));
        f.standby();
        assert!(f.wait_on_watch(0, 3_000, 25), "a watch is needed");
        f.watching(7);
        assert!(f.is_watch(7) && !f.is_watch(8));
        assert_eq!(f.next_wake(), Some(3_000));
        assert!(!f.wait_on_watch(3_000, 3_000, 25), "it has one already");
        assert_eq!(f.next_wake(), Some(6_000));
        // A change to another key, or an idle tick, changes nothing.
        let other = WatchEvent::Changes {
            revision: 5,
            changes: vec![Change {
                key: LEADER.into(),
                entry: Some(entry(LEADER)),
            }],
        };
        assert_eq!(f.on_watch(10, &other), None);
        assert_eq!(f.on_watch(10, &WatchEvent::Idle), None);
        assert_eq!(f.next_wake(), Some(6_000));
        let deleted = WatchEvent::Changes {
            revision: 6,
            changes: vec![Change {
                key: LEADER.into(),
                entry: None,
            }],
        };
        assert_eq!(f.on_watch(20, &deleted), Some(7), "cancelled");
        assert_eq!(f.next_wake(), Some(20), "tries now");
        assert_eq!(f.end_watch(), None);
    }

    #[test]
    fn a_lost_or_refused_watch_sends_the_standby_back_to_polling() {
        assert!(lease_ended(&WatchEvent::Lost("compacted".into())));
        let mut f = Follower::new(0);
        f.wait_on_watch(0, 3_000, 25);
        f.watching(3);
        assert_eq!(
            f.watch_refused(40),
            Some(3),
            "cancelled: it may be open all the same"
        );
        assert!(!f.is_watch(3));
        assert_eq!(f.next_wake(), Some(40));
        assert_eq!(f.watch_refused(41), None, "cancelled once");
    }

    #[test]
    fn a_claim_creates_leader_only_if_absent_and_under_the_lease() {
        let store = MemoryStore::new();
        let lease = store.grant(std::time::Duration::from_secs(30)).unwrap();
        let txn = claim("c1", 1_234, 3_000, lease, 0);
        assert!(
            matches!(&txn.ops[..], [Op::Put { key, lease: Some(l), .. }] if key == LEADER && *l == lease)
        );
        let fence = store.commit(&txn).unwrap();
        let e = store.get(LEADER).unwrap().unwrap();
        assert_eq!(e.mod_revision, fence);
        let l = decode::<Leader>(&e).unwrap().value;
        assert_eq!(
            (l.holder.as_str(), l.acquired_ms, l.ttl_ms),
            ("c1", 1_234, 3_000)
        );
        assert!(held(&store.read(&[LEADER]).unwrap()));
        // A second claim loses: /leader exists.
        let other = store.grant(std::time::Duration::from_secs(30)).unwrap();
        assert!(store
            .commit(&claim("c2", 0, 3_000, other, 0))
            .unwrap_err()
            .is_conflict());
        store.revoke(lease).unwrap();
        assert!(!held(&store.read(&[LEADER]).unwrap()));
    }

    #[test]
    fn a_lease_is_renewed_every_third_of_its_ttl_counted_from_the_send() {
        let mut l = Lease::new(9, 4, 1_000);
        assert!(!l.renewal_due(1_999, 3_000));
        assert!(l.renewal_due(2_000, 3_000));
        assert!(!l.renewal_due(2_500, 3_000), "one keep-alive at a time");
        // Answered late: it counts from when it was sent.
        l.kept_alive(2_000);
        assert!(!l.lapsed(4_999, 3_000));
        assert!(l.lapsed(5_000, 3_000));
        // An older answer never moves the renewal back.
        l.kept_alive(1_500);
        assert!(!l.lapsed(4_999, 3_000));
    }

    #[test]
    fn a_failed_renewal_ends_the_lease_only_once_a_whole_ttl_went_unrenewed() {
        let mut l = Lease::new(9, 4, 0);
        assert!(l.renewal_due(1_000, 3_000));
        assert!(!l.renewal_failed(1_000, 3_000));
        assert!(l.renewal_due(1_100, 3_000), "tried again at the next poll");
        assert!(l.renewal_failed(3_000, 3_000));
    }
}
