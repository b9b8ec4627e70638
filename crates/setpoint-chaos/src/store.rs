//! A simulated store with etcd's semantics, on virtual time.
//!
//! The rules, as etcd v3 applies them (and as [`setpoint_runtime::store`] documents them):
//! - one revision for the whole store, bumped by every transaction that writes; each key keeps
//!   the revision that created it and the one that last changed it;
//! - a transaction compares `mod_revision`s (0: absent) and the first comparison that fails is
//!   reported as [`StoreError::Conflict`]; then every leased put must name a live lease
//!   ([`StoreError::LeaseExpired`]); then all writes apply at one new revision, or none does;
//! - leases have a time to live. As etcd's lessor, the store looks for expired leases only every
//!   [`EXPIRY_CHECK_MS`] (500 ms): a lease past its deadline still holds its keys until the next
//!   check revokes it, but it can no longer be kept alive. Each revocation that removes keys is
//!   one revision;
//! - every revision's changes are kept in a history, so a watch from an old revision replays
//!   them in revision order. [`SimStore::compact`] drops history up to a revision: a watch that
//!   needs compacted history is lost and its reader must read again;
//! - a change of store leader resets every lease to its full time to live, as etcd does
//!   (etcd #9395): a lease that should have expired during an election lives on.
//!
//! Time is passed in by the caller (`now_ms`, the store's own clock); nothing here reads a
//! clock. [`SharedSimStore`] wraps it in setpoint-runtime's [`Store`] trait, with a clock, so
//! the runtime's own conformance cases run on it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use setpoint_runtime::store::{
    check_txn, Change, Entry, LeaseId, Op, Read, Revision, Store, StoreError, Txn,
};

/// How often the lessor looks for expired leases, in milliseconds (etcd's
/// `leaseRevokeRate`-driven loop checks every 500 ms).
pub const EXPIRY_CHECK_MS: u64 = 500;

/// Who asked for a lease or a commit: a host's index in the world, or `None` for the operator
/// (declarations written as `setpoint apply` would).
pub type Client = Option<usize>;

#[derive(Clone, Debug)]
struct Lease {
    ttl_ms: u64,
    expires_ms: u64,
    owner: Client,
}

/// One revision's changes, as history keeps them for watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revised {
    /// The revision.
    pub revision: Revision,
    /// Its changes, in the order the transaction wrote them.
    pub changes: Vec<Change>,
}

/// The store's state. Every method takes the store's clock as `now_ms`.
#[derive(Clone, Debug, Default)]
pub struct SimStore {
    revision: Revision,
    kv: BTreeMap<String, Entry>,
    leases: BTreeMap<LeaseId, Lease>,
    next_lease: LeaseId,
    history: Vec<Revised>,
    compacted: Revision,
    next_check_ms: u64,
}

/// A watch asked for history that compaction removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compacted {
    /// The store's compacted revision: history up to it is gone.
    pub compacted: Revision,
}

/// Whether `key` is under one of `prefixes` (a prefix equal to a whole key matches it).
pub fn under(key: &str, prefixes: &[String]) -> bool {
    prefixes.iter().any(|p| key.starts_with(p.as_str()))
}

impl SimStore {
    /// An empty store at revision 0 whose lessor first checks at `EXPIRY_CHECK_MS`.
    pub fn new() -> Self {
        Self {
            next_check_ms: EXPIRY_CHECK_MS,
            ..Self::default()
        }
    }

    /// The current revision.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The revision up to which history is compacted (0: none).
    pub fn compacted(&self) -> Revision {
        self.compacted
    }

    /// One key, if present.
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        self.kv.get(key)
    }

    /// Whether some lease expires by `now_ms` (the lessor's next check revokes it).
    pub fn any_expired(&self, now_ms: u64) -> bool {
        self.leases.values().any(|l| l.expires_ms <= now_ms)
    }

    /// Whether the lessor's checks due up to `now_ms` ([`SimStore::advance`]) revoke nothing: no
    /// lease is past its deadline. Then they write nothing and end no lease.
    pub fn checks_revoke_nothing(&self, now_ms: u64) -> bool {
        !self.any_expired(now_ms)
    }

    /// The client that was granted `lease`, if the lease is alive.
    pub fn lease_owner(&self, lease: LeaseId) -> Option<Client> {
        self.leases.get(&lease).map(|l| l.owner)
    }

    /// When `lease` expires at the store (its deadline, before the lessor's next check
    /// revokes it), milliseconds; `None` if it is gone.
    pub fn lease_expiry(&self, lease: LeaseId) -> Option<u64> {
        self.leases.get(&lease).map(|l| l.expires_ms)
    }

    /// The client that holds `key` through its lease: `Some(owner)` if the key is present under
    /// a live lease.
    pub fn holder(&self, key: &str) -> Option<Client> {
        let lease = self.kv.get(key)?.lease?;
        self.lease_owner(lease)
    }

    /// When the lessor next looks for expired leases.
    pub fn next_check_ms(&self) -> u64 {
        self.next_check_ms
    }

    /// Runs the lessor's checks due up to `now_ms`: each revokes the leases past their
    /// deadline at that check. Returns the revisions written.
    pub fn advance(&mut self, now_ms: u64) -> Vec<Revision> {
        let mut written = Vec::new();
        while self.next_check_ms <= now_ms {
            let at = self.next_check_ms;
            let expired: Vec<LeaseId> = self
                .leases
                .iter()
                .filter(|(_, l)| l.expires_ms <= at)
                .map(|(&id, _)| id)
                .collect();
            for id in expired {
                written.extend(self.revoke(id));
            }
            self.next_check_ms += EXPIRY_CHECK_MS;
        }
        written
    }

    /// Reads every key under `prefixes` at the current revision, in key order.
    pub fn read(&self, prefixes: &[String]) -> Read {
        use std::ops::Bound;
        let mut entries: Vec<Entry> = Vec::new();
        for p in prefixes {
            entries.extend(
                self.kv
                    .range::<str, _>((Bound::Included(p.as_str()), Bound::Unbounded))
                    .take_while(|(k, _)| k.starts_with(p.as_str()))
                    .map(|(_, e)| e.clone()),
            );
        }
        // One prefix's range is in key order already, without repeats.
        if prefixes.len() > 1 {
            entries.sort_by(|a, b| a.key.cmp(&b.key));
            entries.dedup_by(|a, b| a.key == b.key);
        }
        Read {
            revision: self.revision,
            entries,
        }
    }

    /// Applies `txn` all together or not at all, returning the revision written (the current
    /// one if `txn` writes nothing).
    pub fn commit(&mut self, txn: &Txn) -> Result<Revision, StoreError> {
        check_txn(
            txn,
            |k| self.kv.get(k).map_or(0, |e| e.mod_revision),
            |id| self.leases.contains_key(&id),
        )?;
        if txn.ops.is_empty() {
            return Ok(self.revision);
        }
        let rev = self.revision + 1;
        let mut changes = Vec::with_capacity(txn.ops.len());
        for op in &txn.ops {
            match op {
                Op::Put { key, value, lease } => {
                    // A key written again keeps its entry (and the value's buffer).
                    let entry = match self.kv.get_mut(key.as_str()) {
                        Some(e) => {
                            e.value.clone_from(value);
                            e.mod_revision = rev;
                            e.lease = *lease;
                            e.clone()
                        }
                        None => {
                            let e = Entry {
                                key: key.clone(),
                                value: value.clone(),
                                create_revision: rev,
                                mod_revision: rev,
                                lease: *lease,
                            };
                            self.kv.insert(key.clone(), e.clone());
                            e
                        }
                    };
                    changes.push(Change {
                        key: key.clone(),
                        entry: Some(entry),
                    });
                }
                Op::Delete { key } => {
                    if self.kv.remove(key).is_some() {
                        changes.push(Change {
                            key: key.clone(),
                            entry: None,
                        });
                    }
                }
            }
        }
        self.revision = rev;
        self.history.push(Revised {
            revision: rev,
            changes,
        });
        Ok(rev)
    }

    /// Grants a lease of `ttl_ms` to `owner`, expiring at `now_ms + ttl_ms`.
    pub fn grant(&mut self, now_ms: u64, ttl_ms: u64, owner: Client) -> LeaseId {
        self.next_lease += 1;
        self.leases.insert(
            self.next_lease,
            Lease {
                ttl_ms,
                expires_ms: now_ms + ttl_ms,
                owner,
            },
        );
        self.next_lease
    }

    /// Extends `lease` to `now_ms` plus its time to live. A lease past its deadline cannot be
    /// kept alive even before the lessor revokes it (etcd's `Renew` refuses an expired lease).
    pub fn keep_alive(&mut self, now_ms: u64, lease: LeaseId) -> Result<(), StoreError> {
        match self.leases.get_mut(&lease) {
            Some(l) if l.expires_ms > now_ms => {
                l.expires_ms = now_ms + l.ttl_ms;
                Ok(())
            }
            _ => Err(StoreError::LeaseExpired(lease)),
        }
    }

    /// Ends `lease` and removes its keys at one new revision (none if it held no key). Revoking
    /// an ended lease does nothing.
    pub fn revoke(&mut self, lease: LeaseId) -> Option<Revision> {
        self.leases.remove(&lease)?;
        let gone: Vec<String> = self
            .kv
            .values()
            .filter(|e| e.lease == Some(lease))
            .map(|e| e.key.clone())
            .collect();
        if gone.is_empty() {
            return None;
        }
        let txn = gone.iter().fold(Txn::new(), |t, k| t.delete(k.clone()));
        self.commit(&txn).ok()
    }

    /// A store leader change at `now_ms`: every lease gets its full time to live again
    /// (etcd #9395: the new leader does not know how long the old one had left).
    pub fn leader_change(&mut self, now_ms: u64) {
        for l in self.leases.values_mut() {
            l.expires_ms = now_ms + l.ttl_ms;
        }
    }

    /// Drops history up to `revision` (at most the current one).
    pub fn compact(&mut self, revision: Revision) {
        let revision = revision.min(self.revision);
        if revision <= self.compacted {
            return;
        }
        self.compacted = revision;
        self.history.retain(|r| r.revision > revision);
    }

    /// The changes under `prefixes` after revision `after`, one item per revision that changed
    /// one of them, in revision order; an error if part of that history is compacted.
    pub fn since(&self, after: Revision, prefixes: &[String]) -> Result<Vec<Revised>, Compacted> {
        if after < self.compacted {
            return Err(Compacted {
                compacted: self.compacted,
            });
        }
        let start = self.history.partition_point(|r| r.revision <= after);
        Ok(self.history[start..]
            .iter()
            .filter_map(|r| filtered(r, prefixes))
            .collect())
    }

    /// The changes of the latest revision under `prefixes`, if it changed any.
    pub fn last_under(&self, prefixes: &[String]) -> Option<Revised> {
        self.history
            .last()
            .filter(|r| r.revision == self.revision)
            .and_then(|r| filtered(r, prefixes))
    }

    /// Every key, for the end-of-run checks.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.kv.values()
    }
}

fn filtered(r: &Revised, prefixes: &[String]) -> Option<Revised> {
    let changes: Vec<Change> = r
        .changes
        .iter()
        .filter(|c| under(&c.key, prefixes))
        .cloned()
        .collect();
    (!changes.is_empty()).then_some(Revised {
        revision: r.revision,
        changes,
    })
}

/// Where a [`SharedSimStore`] reads its clock.
#[derive(Debug)]
pub enum Clock {
    /// A clock that moves only when [`SharedSimStore::advance_to`] sets it, in milliseconds.
    Manual(AtomicU64),
    /// Milliseconds of real time since the store was made: for the runtime's conformance cases,
    /// which sleep while leases expire.
    Wall(Instant),
}

/// [`SimStore`] behind setpoint-runtime's [`Store`] trait, so every test the runtime runs on
/// its real stores runs on the simulation too. Leases belong to the operator (`None`).
#[derive(Debug)]
pub struct SharedSimStore {
    state: Mutex<SimStore>,
    clock: Clock,
}

impl SharedSimStore {
    /// A store on a manual clock at 0 ms.
    pub fn manual() -> Self {
        Self {
            state: Mutex::new(SimStore::new()),
            clock: Clock::Manual(AtomicU64::new(0)),
        }
    }

    /// `state` (say, a finished run's store) on a manual clock at `now_ms`: so that the
    /// runtime's readers (the event log's, the measurement's) can read it.
    pub fn from_state(state: SimStore, now_ms: u64) -> Self {
        Self {
            state: Mutex::new(state),
            clock: Clock::Manual(AtomicU64::new(now_ms)),
        }
    }

    /// A store whose clock is real time since now.
    pub fn wall() -> Self {
        Self {
            state: Mutex::new(SimStore::new()),
            clock: Clock::Wall(Instant::now()),
        }
    }

    /// Moves a manual clock forward to `now_ms` (never back); a wall clock ignores it.
    pub fn advance_to(&self, now_ms: u64) {
        if let Clock::Manual(t) = &self.clock {
            t.fetch_max(now_ms, Ordering::SeqCst);
        }
    }

    fn clock_ms(&self) -> u64 {
        match &self.clock {
            Clock::Manual(t) => t.load(Ordering::SeqCst),
            Clock::Wall(start) => start.elapsed().as_millis() as u64,
        }
    }

    /// The state with the lessor's checks run up to now, and now.
    fn lock(&self) -> (std::sync::MutexGuard<'_, SimStore>, u64) {
        let now = self.clock_ms();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.advance(now);
        (s, now)
    }
}

impl Store for SharedSimStore {
    fn read(&self, prefixes: &[&str]) -> Result<Read, StoreError> {
        let prefixes: Vec<String> = prefixes.iter().map(|p| p.to_string()).collect();
        Ok(self.lock().0.read(&prefixes))
    }

    fn commit(&self, txn: &Txn) -> Result<Revision, StoreError> {
        self.lock().0.commit(txn)
    }

    fn revision(&self) -> Result<Revision, StoreError> {
        Ok(self.lock().0.revision())
    }

    fn grant(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        let (mut s, now) = self.lock();
        Ok(s.grant(now, ttl.as_millis() as u64, None))
    }

    fn keep_alive(&self, lease: LeaseId) -> Result<(), StoreError> {
        let (mut s, now) = self.lock();
        s.keep_alive(now, lease)
    }

    fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.lock().0.revoke(lease);
        Ok(())
    }

    fn now_ms(&self) -> u64 {
        self.clock_ms()
    }
}

/// The names of the runtime's conformance cases that [`SharedSimStore`] passes, for the docs.
pub fn conformance_case_names() -> BTreeSet<&'static str> {
    setpoint_runtime::store::conformance::CASES
        .iter()
        .map(|(n, _)| *n)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random leases (granted, kept alive, holding keys or not) and lessor checks: whenever
    /// [`SimStore::checks_revoke_nothing`] says so, the checks write nothing, end no lease and
    /// move no deadline (the world then skips the rest of its lessor's event). Saying so with a
    /// lease past its deadline (an off-by-one at the deadline, say) fails it.
    #[test]
    fn checks_said_to_revoke_nothing_change_nothing() {
        use proptest::prelude::*;
        #[derive(Clone, Debug)]
        enum Op {
            /// A lease with this TTL, holding a key or not.
            Grant(u64, bool),
            /// Keeps lease `n` alive.
            Keep(u64),
            /// Time moves on this much.
            Wait(u64),
            /// The lessor's next check comes due (the world's event for it), or a check at any
            /// time.
            Check(bool),
        }
        // Times in steps of 50 ms: deadlines fall on the checks' times (every 500 ms) often.
        let op = prop_oneof![
            (1u64..30, any::<bool>()).prop_map(|(t, k)| Op::Grant(50 * t, k)),
            (1u64..6).prop_map(Op::Keep),
            (0u64..12).prop_map(|d| Op::Wait(50 * d)),
            any::<bool>().prop_map(Op::Check),
        ];
        proptest!(ProptestConfig::with_cases(512), |(ops in proptest::collection::vec(op, 1..60))| {
            let mut s = SimStore::new();
            let mut now = 0;
            for op in ops {
                match op {
                    Op::Grant(ttl, key) => {
                        let l = s.grant(now, ttl, None);
                        if key {
                            s.commit(&Txn::new().put_leased(format!("/k{l}"), "v", l)).unwrap();
                        }
                    }
                    Op::Keep(l) => {
                        let _ = s.keep_alive(now, l);
                    }
                    Op::Wait(d) => now += d,
                    Op::Check(due) => {
                        if due {
                            now = now.max(s.next_check_ms());
                        }
                        let leases = |s: &SimStore| {
                            (1..=s.next_lease).map(|l| s.lease_expiry(l)).collect::<Vec<_>>()
                        };
                        if s.checks_revoke_nothing(now) {
                            let before = (s.revision(), leases(&s));
                            prop_assert!(s.advance(now).is_empty());
                            prop_assert_eq!((s.revision(), leases(&s)), before);
                        } else {
                            s.advance(now);
                        }
                    }
                }
            }
        });
    }

    fn p(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn passes_every_conformance_case_of_the_runtime() {
        for (name, case) in setpoint_runtime::store::conformance::CASES {
            let s = SharedSimStore::wall();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(&s)));
            assert!(
                r.is_ok(),
                "conformance case {name} failed on the simulated store"
            );
        }
        setpoint_runtime::store::conformance::keep_alive_holds_a_lease_past_its_ttl(
            &SharedSimStore::wall(),
            Duration::from_millis(600),
        );
    }

    #[test]
    fn an_expired_lease_holds_its_keys_until_the_next_lessor_check() {
        let s = SharedSimStore::manual();
        let lease = s.grant(Duration::from_millis(700)).unwrap();
        s.commit(&Txn::new().put_leased("/leader", "a", lease))
            .unwrap();
        s.advance_to(800);
        // Past its deadline: no renewal, but the key is still there until the check at 1000.
        assert_eq!(s.keep_alive(lease), Err(StoreError::LeaseExpired(lease)));
        assert!(s.get("/leader").unwrap().is_some());
        s.advance_to(999);
        assert!(s.get("/leader").unwrap().is_some());
        s.advance_to(1000);
        assert_eq!(s.get("/leader").unwrap(), None);
    }

    #[test]
    fn a_leader_change_gives_every_lease_its_full_ttl_again() {
        let mut s = SimStore::new();
        let lease = s.grant(0, 1000, Some(3));
        s.commit(&Txn::new().put_leased("/leader", "a", lease))
            .unwrap();
        s.leader_change(900);
        s.advance(1500);
        assert_eq!(s.holder("/leader"), Some(Some(3)), "reset to 900 + 1000");
        s.advance(2000);
        assert_eq!(s.holder("/leader"), None);
        assert!(s.entry("/leader").is_none());
    }

    #[test]
    fn history_replays_in_revision_order_and_compaction_loses_it() {
        let mut s = SimStore::new();
        let r1 = s
            .commit(&Txn::new().put("/a/1", "x").put("/b/1", "y"))
            .unwrap();
        let r2 = s.commit(&Txn::new().put("/b/2", "y")).unwrap();
        let r3 = s.commit(&Txn::new().delete("/a/1")).unwrap();
        let a = s.since(0, &p(&["/a/"])).unwrap();
        assert_eq!(
            a.iter().map(|r| r.revision).collect::<Vec<_>>(),
            [r1, r3],
            "revision {r2} does not touch /a/"
        );
        assert_eq!(a[1].changes[0].entry, None);
        assert_eq!(s.since(r1, &p(&["/b/"])).unwrap().len(), 1);
        s.compact(r2);
        assert_eq!(s.since(r1, &p(&["/a/"])), Err(Compacted { compacted: r2 }));
        assert_eq!(s.since(r2, &p(&["/a/"])).unwrap().len(), 1);
        assert_eq!(s.last_under(&p(&["/a/"])).unwrap().revision, r3);
        assert_eq!(s.last_under(&p(&["/b/"])), None);
    }

    #[test]
    fn the_holder_of_a_leased_key_is_the_client_granted_the_lease() {
        let mut s = SimStore::new();
        let mine = s.grant(0, 10_000, Some(1));
        s.commit(&Txn::new().put_leased("/leader", "1", mine))
            .unwrap();
        s.commit(&Txn::new().put("/plain", "1")).unwrap();
        assert_eq!(s.holder("/leader"), Some(Some(1)));
        assert_eq!(s.holder("/plain"), None);
        assert_eq!(s.revoke(mine), Some(3));
        assert_eq!(s.holder("/leader"), None);
        assert_eq!(s.revoke(mine), None);
    }
}
