use super::*;
use crate::controller::config::ControllerConfig;
use crate::machine::carry_out;
use crate::model::{encode, Leader, Snapshot, WorkloadSpec};
use crate::store::{Entry, MemoryStore, Store};
use setpoint_core::ControllerKind;
use std::collections::VecDeque;
use std::time::Duration;

/// Decides, before a request is carried out, whether its reply reaches the machine (`false`:
/// the reply is lost). It may change the store first, as another writer would.
type Hook = Box<dyn FnMut(&dyn Store, &StoreRequest, Purpose) -> bool>;

/// Decides, before a request (a watch too, not a cancellation) is carried out, whether the
/// store fails it instead (`Some`: the request is not carried out and its reply is that
/// error).
type Failure = Box<dyn FnMut(&StoreRequest, Purpose) -> Option<StoreError>>;

/// A tiny synchronous driver: virtual time, requests carried out in order on a
/// [`MemoryStore`], every reply handed back at once.
struct Driver {
    host: Host,
    now: u64,
    wake: u64,
    queue: VecDeque<(ReqId, StoreRequest, Purpose)>,
    logs: Vec<(u64, String, String)>,
    requests: Vec<(u64, StoreRequest, Purpose)>,
    stopped: Option<Result<(), StoreError>>,
    hook: Option<Hook>,
    fail: Option<Failure>,
    /// The store after each revision the driver saw: the history a watch starts from.
    history: BTreeMap<Revision, BTreeMap<String, Entry>>,
    /// Open watches: their prefixes and the keys as last delivered.
    watches: BTreeMap<ReqId, (Vec<String>, BTreeMap<String, Entry>)>,
    /// Watch deliveries are withheld while this is set (a slow watch).
    hold_watches: bool,
    /// Requests of this purpose wait in `held` until [`Driver::release`] (a slow call).
    hold: Option<Purpose>,
    held: VecDeque<(ReqId, StoreRequest, Purpose)>,
    /// Set to the driver's time before each step and call: a [`Clocked`] store's clock.
    clock: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// Every step: when, what it was handed, and everything it asked for, in order.
    steps: Vec<(u64, String, Vec<HostOutput>)>,
}

/// A [`MemoryStore`] whose clock is the driver's virtual time (a `MemoryStore` reads the
/// wall clock), so that two runs of the same history write the same bytes.
struct Clocked {
    inner: MemoryStore,
    now: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Store for Clocked {
    fn read(&self, prefixes: &[&str]) -> Result<Read, StoreError> {
        self.inner.read(prefixes)
    }
    fn commit(&self, txn: &Txn) -> Result<Revision, StoreError> {
        self.inner.commit(txn)
    }
    fn revision(&self) -> Result<Revision, StoreError> {
        self.inner.revision()
    }
    /// The memory store ends leases on the real clock, while the history runs on the
    /// virtual one: a lease granted here lasts an hour of real time, so that a machine slow
    /// enough to take a TTL between two steps cannot end one in one run and not in the
    /// other (seen at load 20: the two runs re-elected 1 ms apart). Leases end in these
    /// histories only when revoked.
    fn grant(&self, _ttl: Duration) -> Result<crate::store::LeaseId, StoreError> {
        self.inner.grant(Duration::from_secs(3_600))
    }
    fn keep_alive(&self, lease: crate::store::LeaseId) -> Result<(), StoreError> {
        self.inner.keep_alive(lease)
    }
    fn revoke(&self, lease: crate::store::LeaseId) -> Result<(), StoreError> {
        self.inner.revoke(lease)
    }
    fn now_ms(&self) -> u64 {
        1_000_000 + self.now.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The whole store, by key.
fn everything(store: &dyn Store) -> (Revision, BTreeMap<String, Entry>) {
    let read = store.read(&[""]).unwrap();
    let kv = read
        .entries
        .into_iter()
        .map(|e| (e.key.clone(), e))
        .collect();
    (read.revision, kv)
}

/// What a watch of `prefixes` delivers to move its reader from `last` to `now`: each key under
/// them whose entry is new or changed, then each one gone.
fn changes_under(
    prefixes: &[String],
    last: &BTreeMap<String, Entry>,
    now: &BTreeMap<String, Entry>,
) -> Vec<crate::store::Change> {
    let under = |k: &String| prefixes.iter().any(|p| k.starts_with(p.as_str()));
    let mut changes = Vec::new();
    for (k, e) in now.iter().filter(|(k, _)| under(k)) {
        if last.get(k) != Some(e) {
            changes.push(crate::store::Change {
                key: k.clone(),
                entry: Some(e.clone()),
            });
        }
    }
    for k in last.keys().filter(|k| under(k) && !now.contains_key(*k)) {
        changes.push(crate::store::Change {
            key: k.clone(),
            entry: None,
        });
    }
    changes
}

impl Driver {
    fn new(cfg: HostConfig) -> Self {
        let host = Host::new(cfg, 0);
        let mut d = Self {
            host,
            now: 0,
            wake: 0,
            queue: VecDeque::new(),
            logs: Vec::new(),
            requests: Vec::new(),
            stopped: None,
            hook: None,
            fail: None,
            history: BTreeMap::new(),
            watches: BTreeMap::new(),
            hold_watches: false,
            hold: None,
            held: VecDeque::new(),
            clock: None,
            steps: Vec::new(),
        };
        d.step(HostInput::Tick);
        d
    }

    fn step(&mut self, input: HostInput) {
        if let Some(c) = &self.clock {
            c.store(self.now, std::sync::atomic::Ordering::SeqCst);
        }
        let what = format!("{input:?}");
        let outputs = self.host.step(self.now, input);
        self.steps.push((self.now, what, outputs.clone()));
        for out in outputs {
            match out {
                HostOutput::Request {
                    id,
                    request,
                    purpose,
                } => {
                    self.requests.push((self.now, request.clone(), purpose));
                    if self.hold == Some(purpose) {
                        self.held.push_back((id, request, purpose));
                    } else {
                        self.queue.push_back((id, request, purpose));
                    }
                }
                HostOutput::Log { who, line } => self.logs.push((self.now, who, line)),
                HostOutput::Wake(Wake(at)) => {
                    assert!(at >= self.now, "a wake in the past");
                    self.wake = at;
                }
                HostOutput::Stopped(r) => self.stopped = Some(r),
            }
        }
    }

    /// Carries out what is queued, then steps at each wake, until `until_ms`.
    fn run(&mut self, store: &dyn Store, until_ms: u64) {
        loop {
            while self.run_one(store) {}
            if !self.hold_watches && self.deliver_watches(store) {
                continue;
            }
            if self.stopped.is_some() || self.now >= until_ms {
                return;
            }
            self.now = self.wake.clamp(self.now + 1, until_ms);
            self.step(HostInput::Tick);
        }
    }

    /// Carries out the held requests now, ahead of the queue, and holds nothing more.
    fn release(&mut self, store: &dyn Store) {
        self.hold = None;
        while let Some(held) = self.held.pop_front() {
            self.queue.push_front(held);
            self.run_one(store);
        }
    }

    /// Carries out the oldest queued request, if there is one.
    fn run_one(&mut self, store: &dyn Store) -> bool {
        {
            if let Some((id, request, purpose)) = self.queue.pop_front() {
                let deliver = match self.hook.as_mut() {
                    Some(h) => h(store, &request, purpose),
                    None => true,
                };
                let (rev, kv) = everything(store);
                self.history.entry(rev).or_insert(kv);
                let failed = match &request {
                    StoreRequest::CancelWatch(_) => None,
                    other => self.fail.as_mut().and_then(|f| f(other, purpose)),
                };
                let result = match (&request, failed) {
                    (_, Some(e)) => Err(e),
                    (StoreRequest::Watch { prefixes, after }, None) => {
                        let base = self.history.range(..=after).next_back();
                        let base = base.map(|(_, kv)| kv.clone()).unwrap_or_default();
                        self.watches.insert(id, (prefixes.clone(), base));
                        Ok(StoreReply::Watching)
                    }
                    (StoreRequest::CancelWatch(w), None) => {
                        self.watches.remove(w);
                        return true;
                    }
                    (other, None) => carry_out(store, other),
                };
                let (rev, kv) = everything(store);
                self.history.entry(rev).or_insert(kv);
                if deliver {
                    self.step(HostInput::Replied(Replied { id, result }));
                }
                return true;
            }
        }
        false
    }

    /// Delivers to each open watch what changed under its prefixes since its last delivery.
    /// Returns whether anything was delivered.
    fn deliver_watches(&mut self, store: &dyn Store) -> bool {
        let (rev, now) = everything(store);
        let mut deliveries = Vec::new();
        for (&id, (prefixes, last)) in self.watches.iter_mut() {
            let changes = changes_under(prefixes, last, &now);
            *last = now.clone();
            if !changes.is_empty() {
                let event = WatchEvent::Changes {
                    revision: rev,
                    changes,
                };
                deliveries.push(WatchDelivery { watch: id, event });
            }
        }
        let any = !deliveries.is_empty();
        for d in deliveries {
            self.step(HostInput::Watch(d));
        }
        any
    }

    fn said(&self, what: &str) -> bool {
        self.logs.iter().any(|(_, _, l)| l.contains(what))
    }

    fn count(&self, purpose: Purpose, pred: impl Fn(&StoreRequest) -> bool) -> usize {
        self.requests
            .iter()
            .filter(|(_, r, p)| *p == purpose && pred(r))
            .count()
    }
}

fn cfg(holder: &str) -> HostConfig {
    let mut c = ControllerConfig::new(holder);
    c.lease_ttl = Duration::from_secs(3);
    c.poll = Duration::from_millis(25);
    let mut h = HostConfig::new(c);
    h.request_timeout = Duration::from_millis(500);
    h
}

fn spec(name: &str, copies: u64, period_ms: u64) -> WorkloadSpec {
    crate::controller::reconcile::tests::test_spec(name, copies, ControllerKind::Intent, period_ms)
}

fn store_with(specs: &[WorkloadSpec]) -> MemoryStore {
    let store = MemoryStore::new();
    crate::model::node::fake_node(&store, "a").unwrap();
    crate::ops::apply(&store, specs).unwrap();
    store
}

fn copies(store: &MemoryStore) -> Vec<String> {
    crate::controller::reconcile::tests::names(store)
}

fn is_pass_commit(r: &StoreRequest) -> bool {
    matches!(r, StoreRequest::Commit(_))
}

#[test]
fn a_host_takes_the_lease_runs_passes_and_gives_the_lease_up_on_shutdown() {
    let store = store_with(&[spec("w", 2, 200)]);
    let mut d = Driver::new(cfg("c1"));
    d.run(&store, 100);
    assert!(d.host.is_leader());
    let leader = Snapshot::load(&store)
        .unwrap()
        .leader
        .expect("a leader record");
    assert_eq!(leader.value.holder, "c1");
    assert_eq!(d.host.fence(), Some(leader.mod_revision));
    assert_eq!(copies(&store), ["w-0", "w-1"]);
    assert!(d.said("became the leader"));
    // A second host stands by while the first leads, and takes over once it stops.
    let mut d2 = Driver::new(cfg("c2"));
    d2.now = 100;
    d2.run(&store, 300);
    assert!(!d2.host.is_leader());
    assert!(d2.said("standby: another controller holds the lease"));
    d.step(HostInput::Shutdown);
    d.run(&store, 400);
    assert_eq!(d.stopped, Some(Ok(())));
    assert!(d.said("stopped"));
    assert!(
        Snapshot::load(&store).unwrap().leader.is_none(),
        "lease given up"
    );
    d2.run(&store, 400);
    assert!(d2.host.is_leader(), "the standby took over within a poll");
}

#[test]
fn a_leader_shutting_down_ignores_what_its_leadership_asked_and_only_gives_the_lease_up() {
    let store = store_with(&[]);
    let mut d = Driver::new(cfg("c1"));
    d.run(&store, 100);
    assert!(d.host.is_leader());
    // The keep-alive sent at 1 s is never answered; it fails at its deadline (500 ms),
    // while the host, told to stop at 1.05 s, waits for its slow revoke.
    d.hook = Some(Box::new(|_, _, p| p != Purpose::Renewal));
    d.run(&store, 1_050);
    assert_eq!(d.count(Purpose::Renewal, |_| true), 1);
    d.hold = Some(Purpose::Release);
    d.step(HostInput::Shutdown);
    d.run(&store, 1_540);
    assert_eq!(d.stopped, None, "the revoke is still on its way");
    assert!(
        !d.said("cannot renew the lease"),
        "a renewal of the leadership it gave up is reported: {:?}",
        d.logs
    );
    d.release(&store);
    d.run(&store, 1_600);
    assert_eq!(d.stopped, Some(Ok(())));
    assert!(Snapshot::load(&store).unwrap().leader.is_none());
}

/// A follower told to stop while its claim of `/leader` is on its way gives the lease it is
/// taking up and never leads: the claim's reply, coming after the stop, answers a role it no
/// longer has. Were its term not moved on (mutant 843 of the mutation sample: `term += 1` →
/// `term *= 1` in `Host::on_shutdown`), that reply would make it the leader for the moment
/// before its revoke lands, its first poll's requests sent.
#[test]
fn a_follower_stopped_while_its_claim_is_on_its_way_never_leads() {
    let store = store_with(&[]);
    let mut d = Driver::new(cfg("c1"));
    // The read of `/leader` and the grant are answered; the claim itself is held.
    d.hold = Some(Purpose::Election);
    for _ in 0..10 {
        while d.run_one(&store) {}
        match d.held.front() {
            Some((_, StoreRequest::Commit(_), _)) => break,
            Some(_) => {
                let answered = d.held.pop_front().unwrap();
                d.queue.push_back(answered);
            }
            None => d.step(HostInput::Tick),
        }
    }
    let (_, claim, _) = d.held.front().expect("the claim, held");
    assert!(matches!(claim, StoreRequest::Commit(_)), "{claim:?}");
    let before = d.requests.len();
    d.step(HostInput::Shutdown);
    d.release(&store);
    d.run(&store, 1_000);
    assert_eq!(d.stopped, Some(Ok(())));
    assert!(!d.said("became the leader"), "{:?}", d.logs);
    let after: Vec<Purpose> = d.requests[before..].iter().map(|(_, _, p)| *p).collect();
    assert!(
        after
            .iter()
            .all(|p| matches!(p, Purpose::Election | Purpose::Release)),
        "{after:?}"
    );
    assert!(Snapshot::load(&store).unwrap().leader.is_none());
}

/// How a stop ends decides the controller's exit: a lease the store failed to revoke is
/// said (a standby waits its TTL) but the stop is clean, while a store lost for good ends
/// it with that loss, not a clean "stopped".
#[test]
fn a_failed_release_is_said_and_stops_cleanly_and_a_lost_store_stops_with_the_loss() {
    for lost in [false, true] {
        let store = store_with(&[]);
        let mut d = Driver::new(cfg("c1"));
        d.run(&store, 100);
        assert!(d.host.is_leader());
        d.hold = Some(Purpose::Release);
        d.step(HostInput::Shutdown);
        let (id, request, _) = d.held.pop_front().expect("the revoke of the lease");
        assert!(matches!(request, StoreRequest::Revoke(_)), "{request:?}");
        let e = if lost {
            StoreError::Lost("its file was removed".into())
        } else {
            StoreError::Unavailable("no reply".into())
        };
        d.step(HostInput::Replied(Replied { id, result: Err(e) }));
        if lost {
            assert!(
                matches!(d.stopped, Some(Err(StoreError::Lost(_)))),
                "{:?}",
                d.stopped
            );
            assert!(!d.said("cannot give up the lease"), "{:?}", d.logs);
            assert!(!d.said("stopped"), "{:?}", d.logs);
        } else {
            assert_eq!(d.stopped, Some(Ok(())));
            assert!(
                d.said("cannot give up the lease: store unavailable: no reply"),
                "{:?}",
                d.logs
            );
            assert!(d.said("stopped"), "{:?}", d.logs);
        }
    }
}

/// `outstanding` is what a driver reads to see the requests still owed a reply: the
/// first read of `/leader` at start, and none once the host has stopped (a stop forgets
/// whatever was in flight).
#[test]
fn outstanding_counts_the_requests_owed_a_reply_and_none_once_stopped() {
    let store = store_with(&[]);
    let mut d = Driver::new(cfg("c1"));
    assert_eq!(d.host.outstanding(), 1, "the read of /leader");
    d.run(&store, 100);
    assert!(d.host.is_leader());
    d.step(HostInput::Shutdown);
    d.run(&store, 200);
    assert_eq!(d.stopped, Some(Ok(())));
    assert_eq!(d.host.outstanding(), 0);
}

#[test]
fn a_deposed_leader_takes_no_reply_to_its_old_leadership_for_its_own() {
    let store = store_with(&[spec("w", 1, 200)]);
    let mut d = Driver::new(cfg("c1"));
    // Keep-alives are carried out, but their replies are lost: each fails at its deadline
    // (500 ms after it was sent).
    d.hook = Some(Box::new(|_, _, p| p != Purpose::Renewal));
    d.run(&store, 1_050);
    assert!(d.host.is_leader());
    assert_eq!(
        d.count(Purpose::Renewal, |_| true),
        1,
        "the keep-alive sent at 1 s is on its way"
    );
    // Another controller takes /leader: the next pass's commit finds it taken.
    let mut usurp = usurp_before_commit(Purpose::Pass);
    d.hook = Some(Box::new(move |s, r, p| {
        let delivered = usurp(s, r, p);
        delivered && p != Purpose::Renewal
    }));
    crate::ops::apply(&store, &[spec("w", 2, 200)]).unwrap();
    d.run(&store, 1_400);
    assert!(!d.host.is_leader(), "still leads with /leader another's");
    assert!(d.said("lost the leader lease; following"));
    // The old leadership's keep-alive fails after the deposition: not this host's concern.
    d.run(&store, 1_700);
    assert!(
        !d.said("cannot renew the lease"),
        "a renewal of the leadership it lost is reported: {:?}",
        d.logs
    );
}

/// Every change of role gets a term of its own, never one used before: a reply to an
/// earlier leadership that arrives after the host was deposed and elected again must not
/// be taken for the new leadership's (here its old lease's expiry would depose it).
#[test]
fn a_reelected_leader_is_not_deposed_by_a_reply_to_its_earlier_leadership() {
    let store = store_with(&[spec("w", 1, 200)]);
    let mut d = Driver::new(cfg("c1"));
    // The keep-alive sent at 1 s waits for its reply (a slow store).
    d.hold = Some(Purpose::Renewal);
    d.run(&store, 1_050);
    assert!(d.host.is_leader());
    let (id, request, _) = d
        .held
        .pop_front()
        .expect("the first leadership's keep-alive");
    let StoreRequest::KeepAlive(old) = request else {
        panic!("{request:?}")
    };
    // Another controller takes /leader: the next pass's commit finds it taken.
    d.hook = Some(usurp_before_commit(Purpose::Pass));
    crate::ops::apply(&store, &[spec("w", 2, 200)]).unwrap();
    while d.host.is_leader() && d.now < 1_300 {
        d.run(&store, d.now + 1);
    }
    assert!(!d.host.is_leader(), "never deposed: {:?}", d.logs);
    // It goes away; this host takes the lease again, with a new one.
    store.commit(&Txn::new().delete(LEADER)).unwrap();
    while !d.host.is_leader() && d.now < 1_400 {
        d.run(&store, d.now + 1);
    }
    assert!(d.host.is_leader(), "never elected again: {:?}", d.logs);
    assert_ne!(store.get(LEADER).unwrap().unwrap().lease, Some(old));
    // The first leadership's keep-alive is answered now: its lease has expired.
    d.step(HostInput::Replied(Replied {
        id,
        result: Err(StoreError::LeaseExpired(old)),
    }));
    assert!(
        d.host.is_leader(),
        "deposed by its old lease's expiry: {:?}",
        d.logs
    );
}

#[test]
fn a_standby_that_stops_cancels_its_watch_of_the_leader_record() {
    let store = store_with(&[]);
    let mut d = Driver::new(cfg("c1"));
    d.run(&store, 100);
    // With a watch cache, a standby waits on a watch of /leader rather than polling.
    let mut d2 = Driver::new(cached("c2"));
    d2.now = 100;
    d2.run(&store, 300);
    assert!(d2.said("standby: another controller holds the lease"));
    assert_eq!(d2.watches.len(), 1, "it watches /leader");
    d2.step(HostInput::Shutdown);
    d2.run(&store, 400);
    assert_eq!(d2.stopped, Some(Ok(())));
    assert!(d2.watches.is_empty(), "its watch is left open at the store");
    assert!(d.host.is_leader(), "the leader is not disturbed");
}

/// A standby's watch of `/leader` that the store set up but whose reply was lost (a cut of
/// a millisecond; seed 66600 of `scenarios/chaos/partitions.toml`) is open at the store when
/// the request times out: the standby cancels it before it watches again, so that it holds
/// one watch of `/leader`, not one more after every lost reply.
#[test]
fn a_standby_whose_watch_reply_is_lost_cancels_that_watch_before_watching_again() {
    let store = store_with(&[]);
    let mut d = Driver::new(cfg("c1"));
    d.run(&store, 100);
    let mut d2 = Driver::new(cached("c2"));
    d2.now = 100;
    let mut first = true;
    d2.hook = Some(Box::new(move |_, r, _| {
        let lost = first && matches!(r, StoreRequest::Watch { .. });
        first &= !lost;
        !lost
    }));
    d2.run(&store, 1_500);
    let watches = d2.count(Purpose::Election, |r| {
        matches!(r, StoreRequest::Watch { .. })
    });
    assert_eq!(watches, 2, "it watched again after the timeout (500 ms)");
    assert_eq!(
        d2.watches.len(),
        1,
        "the first watch is left open at the store"
    );
    assert!(d.host.is_leader(), "the leader is not disturbed");
}

#[test]
fn a_follower_stopped_while_it_takes_the_lease_gives_that_lease_up() {
    let store = store_with(&[]);
    let mut d = Driver::new(cfg("c1"));
    // The read of /leader, then the grant: the creation of /leader is queued.
    assert!(d.run_one(&store) && d.run_one(&store));
    assert!(matches!(
        d.queue.front(),
        Some((_, StoreRequest::Commit(_), Purpose::Election))
    ));
    d.step(HostInput::Shutdown);
    d.run(&store, 100);
    assert_eq!(d.stopped, Some(Ok(())));
    assert!(!d.host.is_leader());
    assert!(
        Snapshot::load(&store).unwrap().leader.is_none(),
        "the lease lingers"
    );
}

/// A follower told to stop while its creation of `/leader` is on its way gives that lease
/// up with its release; the creation, landing after, belongs to the role it left and must
/// not make it revoke the lease a second time. (Only the releasing and stopped roles can
/// meet such a late creation: an attempt is in flight at most once per role, and a request
/// that timed out is forgotten, so a late reply of one is never handed back.)
#[test]
fn a_creation_that_lands_after_the_follower_began_to_stop_is_given_up_once() {
    let store = store_with(&[]);
    let mut d = Driver::new(cfg("c1"));
    // The read of /leader, then the grant: the creation is queued ahead of the release.
    assert!(d.run_one(&store) && d.run_one(&store));
    d.step(HostInput::Shutdown);
    d.run(&store, 100);
    assert_eq!(d.stopped, Some(Ok(())));
    let revokes: Vec<Purpose> = d
        .requests
        .iter()
        .filter(|(_, r, _)| matches!(r, StoreRequest::Revoke(_)))
        .map(|(_, _, p)| *p)
        .collect();
    assert_eq!(
        revokes,
        [Purpose::Release],
        "the lease is revoked by the release alone: {:?}",
        d.requests
    );
    assert!(Snapshot::load(&store).unwrap().leader.is_none());
}

/// The CLI's `run` and the reality experiments start a controller without a name: it must
/// still hold `/leader` under one that says which process holds it (an operator reading
/// `/leader` finds the pid), not under an empty name two controllers would share.
#[test]
fn a_controller_started_without_a_name_holds_the_lease_under_its_pid_and_start_time() {
    let store = store_with(&[]);
    let mut d = Driver::new(cfg(&crate::controller::config::default_holder()));
    d.run(&store, 100);
    assert!(d.host.is_leader());
    let holder = Snapshot::load(&store)
        .unwrap()
        .leader
        .expect("a leader record")
        .value
        .holder;
    let parts: Vec<&str> = holder.split('/').collect();
    assert_eq!(parts.len(), 3, "{holder:?}");
    assert_eq!(parts[0], "controller", "{holder:?}");
    assert_eq!(parts[1], std::process::id().to_string(), "{holder:?}");
    assert!(parts[2].parse::<u32>().is_ok(), "{holder:?}");
}

#[test]
fn the_lease_is_renewed_every_third_of_its_ttl_and_given_up_without_renewal() {
    let store = store_with(&[]);
    let mut d = Driver::new(cfg("c1"));
    d.run(&store, 10_000);
    let renewals = d.count(Purpose::Renewal, |_| true);
    // TTL 3 s: one every 1 s (at the first poll at or after it), for 10 s.
    assert!((9..=10).contains(&renewals), "{renewals}");
    assert!(d.host.is_leader());
    // From now on no keep-alive is answered: the host stops acting one TTL after the last
    // renewal it sent, though the request's own deadline is not over.
    let mut cfg = cfg("c2");
    cfg.request_timeout = Duration::from_secs(60);
    let store = store_with(&[]);
    let mut d = Driver::new(cfg);
    d.hook = Some(Box::new(|_, _, p| p != Purpose::Renewal));
    d.run(&store, 2_900);
    assert!(d.host.is_leader());
    d.run(&store, 3_100);
    assert!(!d.host.is_leader());
    assert!(d.said("lost the leader lease; following"));
}

/// A `/leader` under no lease (written straight into the store: no controller's) holds no one
/// back: the first claim replaces it, compared against that value, and the host leads under its
/// own lease. Were the claim made against absence (mutant 847 of the mutation sample: `forged`
/// → 0), it would conflict at every poll and no controller would ever lead while the record
/// stood. The real binaries' counterpart is `cli::hostile`'s forged leader.
#[test]
fn a_forged_lease_less_leader_record_is_replaced_by_the_first_claim() {
    let store = store_with(&[]);
    let forged = Leader {
        holder: "forged".into(),
        acquired_ms: 0,
        ttl_ms: 1,
    };
    store
        .commit(&Txn::new().put(LEADER, encode(&forged)))
        .unwrap();
    let mut d = Driver::new(cfg("c1"));
    d.run(&store, 1_000);
    assert!(d.host.is_leader(), "{:?}", d.logs);
    let e = store.get(LEADER).unwrap().expect("a /leader record");
    assert!(e.lease.is_some(), "{e:?}");
    let holder = crate::model::decode::<Leader>(&e).unwrap().value.holder;
    assert_ne!(holder, "forged");
}

/// A leader whose keep-alives go unanswered steps down at the very millisecond its lease
/// lapses, a TTL after the last renewal it sent, not at its next poll: the lapse is among its
/// wakes. Found by `driven_only_at_its_wakes_a_host_does_what_a_millisecond_clock_does`: with a
/// TTL of 900 ms, off the 40 ms poll's grid, a leader cut off from the store at 320 ms lapsed
/// at 1,220 ms; stepped every millisecond it stepped down then, stepped at its wakes only at
/// its next poll, 1,240 ms: up to a poll more as the leader, though the store may have let its
/// lease go and another controller taken it.
#[test]
fn a_leader_whose_renewals_go_unanswered_steps_down_when_its_lease_lapses_not_at_its_next_poll() {
    let mut c = cfg("c1");
    // Lapses at 3,010 ms, between the polls of 3,000 and 3,025 ms.
    c.controller.lease_ttl = Duration::from_millis(3_010);
    c.request_timeout = Duration::from_secs(60);
    let store = store_with(&[]);
    let mut d = Driver::new(c);
    d.hook = Some(Box::new(|_, _, p| p != Purpose::Renewal));
    d.run(&store, 4_000);
    let down: Vec<u64> = d
        .logs
        .iter()
        .filter(|(_, _, l)| l == "lost the leader lease; following")
        .map(|&(t, _, _)| t)
        .collect();
    assert_eq!(down, [3_010]);
}

#[test]
fn a_deposed_leaders_pass_is_refused_by_the_fence() {
    for fencing_off in [false, true] {
        let store = store_with(&[spec("w", 1, 200)]);
        let mut c = cfg("c1");
        c.bug_fencing_off = fencing_off;
        let mut d = Driver::new(c);
        d.run(&store, 100);
        assert_eq!(copies(&store), ["w-0"]);
        // Another controller takes /leader between this host's read and its commit (the
        // store let its lease go, say); the pass then wants two more copies.
        crate::ops::apply(&store, &[spec("w", 3, 200)]).unwrap();
        d.hook = Some(usurp_before_commit(Purpose::Pass));
        d.run(&store, 300);
        if fencing_off {
            // The injected bug: the deposed host's write lands.
            assert_eq!(copies(&store), ["w-0", "w-1", "w-2"]);
        } else {
            assert_eq!(copies(&store), ["w-0"], "the deposed leader wrote");
            assert!(!d.host.is_leader());
            assert!(d.said("lost the leader lease; following"));
        }
    }
}

#[test]
fn a_lost_reply_times_out_and_the_machine_carries_on() {
    let store = store_with(&[spec("w", 2, 200)]);
    let mut d = Driver::new(cfg("c1"));
    let mut lose = 1;
    // The first pass's read is carried out but its reply never comes.
    d.hook = Some(Box::new(move |_, r, p| {
        if p == Purpose::Pass && matches!(r, StoreRequest::Read { .. }) && lose > 0 {
            lose -= 1;
            return false;
        }
        true
    }));
    d.run(&store, 400);
    // Still waiting: at most one pass in flight, so no other round started.
    assert!(copies(&store).is_empty());
    assert_eq!(d.count(Purpose::Pass, |_| true), 1);
    d.run(&store, 1_000);
    assert!(d.said("pass failed: store unavailable: no reply within 500ms"));
    assert_eq!(copies(&store), ["w-0", "w-1"]);
    assert!(d.host.is_leader());
    // The late reply of a request the machine gave up on is ignored.
    let before = d.logs.len();
    d.step(HostInput::Replied(Replied {
        id: 1,
        result: Ok(StoreReply::Revision(7)),
    }));
    assert_eq!(d.logs.len(), before);
}

#[test]
fn loops_start_and_stop_with_the_declarations_and_keep_their_grid() {
    let store = store_with(&[spec("a", 1, 200), spec("b", 1, 300)]);
    let mut d = Driver::new(cfg("c1"));
    d.run(&store, 1_000);
    assert_eq!(d.host.loops(), ["a", "b"]);
    let reads = |d: &Driver| -> Vec<u64> {
        d.requests
            .iter()
            .filter(|(_, r, p)| *p == Purpose::Pass && matches!(r, StoreRequest::Read { .. }))
            .map(|(t, _, _)| *t)
            .collect()
    };
    // Both loops started at the same poll: a's rounds every 200, b's every 300.
    let t = reads(&d);
    let start = t[0];
    let expected: Vec<u64> = {
        let mut v: Vec<u64> = (0..)
            .map(|k| start + 200 * k)
            .take_while(|&x| x <= 1_000)
            .chain((0..).map(|k| start + 300 * k).take_while(|&x| x <= 1_000))
            .collect();
        v.sort();
        v
    };
    assert_eq!(t, expected);
    crate::ops::delete(&store, "b").unwrap();
    d.run(&store, 1_200);
    assert_eq!(d.host.loops(), ["a"]);
    assert!(d.said("b: no longer declared; its loop ends"));
    crate::ops::apply(&store, &[spec("a", 1, 200), spec("c", 1, 200)]).unwrap();
    d.run(&store, 1_400);
    assert_eq!(d.host.loops(), ["a", "c"]);
    assert!(copies(&store).contains(&"c-0".to_owned()));
}

#[test]
fn rounds_and_deadlines_sooner_than_a_poll_are_acted_on_when_due_not_at_the_next_poll() {
    // A poll of a second; rounds every 130 ms and requests that time out after 70 ms.
    let poll_cfg = || {
        let mut c = cfg("c1");
        c.controller.poll = Duration::from_millis(1_000);
        c.request_timeout = Duration::from_millis(70);
        c
    };
    let store = store_with(&[spec("w", 1, 130)]);
    let mut d = Driver::new(poll_cfg());
    d.run(&store, 1_000);
    let reads: Vec<u64> = d
        .requests
        .iter()
        .filter(|(_, r, p)| *p == Purpose::Pass && matches!(r, StoreRequest::Read { .. }))
        .map(|(t, _, _)| *t)
        .collect();
    assert!(reads.len() >= 7, "{reads:?}");
    let gaps: Vec<u64> = reads.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|&g| g == 130),
        "each round on its grid: {reads:?}"
    );
    // The wake asked for is the next round, exactly.
    let next = reads.last().unwrap() + 130;
    assert_eq!(d.wake, next);
    // A pass's read whose reply is lost fails at its deadline, 70 ms on, not at a poll.
    let store = store_with(&[spec("w", 1, 100_000)]);
    let mut d = Driver::new(poll_cfg());
    d.hook = Some(Box::new(|_, r, p| {
        !(p == Purpose::Pass && matches!(r, StoreRequest::Read { .. }))
    }));
    d.run(&store, 900);
    let sent = d
        .requests
        .iter()
        .find(|(_, r, p)| *p == Purpose::Pass && matches!(r, StoreRequest::Read { .. }));
    let sent = sent.expect("the first round's read").0;
    let failed: Vec<u64> = d
        .logs
        .iter()
        .filter(|(_, _, l)| l.contains("pass failed: store unavailable: no reply within 70ms"))
        .map(|(t, _, _)| *t)
        .collect();
    assert_eq!(failed, [sent + 70], "{:?}", d.logs);
}

#[test]
fn a_conflicting_commit_is_retried_on_a_fresh_read() {
    let store = store_with(&[spec("w", 2, 200)]);
    let mut d = Driver::new(cfg("c1"));
    let mut armed = true;
    // Just before the first pass commits, the declaration changes to 3 copies.
    d.hook = Some(Box::new(move |s, r, p| {
        if armed && p == Purpose::Pass && is_pass_commit(r) {
            armed = false;
            crate::ops::apply(s, &[spec("w", 3, 200)]).unwrap();
        }
        true
    }));
    d.run(&store, 100);
    assert!(d.said("1 conflicts, retried on fresh state"));
    assert_eq!(copies(&store), ["w-0", "w-1", "w-2"]);
    assert_eq!(d.count(Purpose::Pass, is_pass_commit), 2);
}

#[test]
fn a_pass_that_always_conflicts_gives_up_after_five_attempts_until_its_next_round() {
    let store = store_with(&[spec("w", 2, 1_000)]);
    let mut d = Driver::new(cfg("c1"));
    let mut n = 0u64;
    d.hook = Some(Box::new(move |s, r, p| {
        if p == Purpose::Pass && is_pass_commit(r) {
            n += 1;
            crate::ops::apply(s, &[spec("w", 2 + n % 2, 1_000)]).unwrap();
        }
        true
    }));
    d.run(&store, 500);
    assert_eq!(
        d.count(Purpose::Pass, is_pass_commit),
        MAX_ATTEMPTS as usize
    );
    assert!(d.said("pass failed: gave up after 5 conflicting attempts"));
    assert!(copies(&store).is_empty());
    assert!(d.host.is_leader());
}

#[test]
fn orphans_are_collected_every_second_and_the_injected_bug_spares_a_redeclared_ones() {
    for ignore_uid in [false, true] {
        let store = store_with(&[spec("w", 1, 100_000)]);
        let mut c = cfg("c1");
        c.bug_gc_ignores_owner_uid = ignore_uid;
        let mut d = Driver::new(c);
        d.run(&store, 100);
        assert_eq!(copies(&store), ["w-0"]);
        // Deleted and declared again: a new uid, so w-0 is an orphan.
        crate::ops::delete(&store, "w").unwrap();
        crate::ops::apply(&store, &[spec("w", 0, 100_000)]).unwrap();
        // Node a's agent reports, from a read that saw w-0's assignment, that nothing runs:
        // until then the orphan on the live node is held.
        crate::controller::reconcile::tests::report(&store, "a", &[]);
        d.run(&store, 1_200);
        if ignore_uid {
            assert_eq!(copies(&store), ["w-0"], "the bug keeps the orphan");
        } else {
            assert!(copies(&store).is_empty());
            assert!(d.said("collected orphaned assignments: w-0"));
        }
        let sweeps = d.count(Purpose::Gc, |r| matches!(r, StoreRequest::Read { .. }));
        assert_eq!(sweeps, 2, "one at the first poll, one a second later");
    }
}

/// Another controller takes `/leader` just before this host's next request of `purpose`
/// that is a commit (its lease lapsed at the store, say): the hook of [`Driver`].
fn usurp_before_commit(purpose: Purpose) -> Hook {
    let mut armed = true;
    Box::new(move |s, r, p| {
        if armed && p == purpose && matches!(r, StoreRequest::Commit(_)) {
            armed = false;
            let old = s.get(LEADER).unwrap().unwrap();
            let lease = s.grant(Duration::from_secs(30)).unwrap();
            let usurper = Leader {
                holder: "c2".into(),
                acquired_ms: 0,
                ttl_ms: 30_000,
            };
            s.commit(&Txn::new().expect(LEADER, old.mod_revision).put_leased(
                LEADER,
                encode(&usurper),
                lease,
            ))
            .unwrap();
        }
        true
    })
}

/// A pass whose commit finds `/leader` another's steps down at that reply, as a collection
/// does (the test below): it does not take the conflict for a lost race and read again
/// (mutant 559 of the mutation sample, `key == LEADER` → `false` in `Host::on_pass_commit`:
/// the step-down came a read later, from the retry's snapshot, or at the next renewal).
#[test]
fn a_leader_whose_pass_commit_finds_leader_taken_steps_down_at_that_reply() {
    let store = store_with(&[]);
    let mut d = Driver::new(cfg("c1"));
    d.run(&store, 1_050);
    assert!(d.host.is_leader());
    d.hook = Some(usurp_before_commit(Purpose::Pass));
    crate::ops::apply(&store, &[spec("w", 2, 200)]).unwrap();
    while d.host.is_leader() && d.now < 2_000 {
        d.run(&store, d.now + 1);
    }
    assert!(!d.host.is_leader(), "never deposed: {:?}", d.logs);
    assert!(d.said("lost the leader lease; following"));
    let passes: Vec<&StoreRequest> = d
        .requests
        .iter()
        .filter(|(_, _, p)| *p == Purpose::Pass)
        .map(|(_, r, _)| r)
        .collect();
    assert!(
        matches!(passes.last(), Some(StoreRequest::Commit(_))),
        "a pass request after the commit that met the usurper: {passes:?}"
    );
    assert_eq!(d.count(Purpose::Pass, is_pass_commit), 1);
    assert!(copies(&store).is_empty(), "the fence kept the creation out");
}

#[test]
fn a_leader_whose_collection_finds_leader_taken_collects_nothing_and_steps_down_at_once() {
    // Rounds far apart: no pass after the first, so only the collection can find out.
    let store = store_with(&[spec("w", 1, 100_000)]);
    let mut d = Driver::new(cfg("c1"));
    d.run(&store, 100);
    assert_eq!(copies(&store), ["w-0"]);
    crate::ops::delete(&store, "w").unwrap();
    crate::ops::apply(&store, &[spec("w", 0, 100_000)]).unwrap();
    crate::controller::reconcile::tests::report(&store, "a", &[]);
    d.hook = Some(usurp_before_commit(Purpose::Gc));
    d.run(&store, 1_200);
    assert_eq!(
        d.count(Purpose::Gc, is_pass_commit),
        1,
        "one collection tried"
    );
    assert_eq!(copies(&store), ["w-0"], "the fence kept the orphan");
    assert!(!d.host.is_leader(), "it still leads with /leader another's");
    assert!(d.said("lost the leader lease; following"));
    assert!(!d.said("collected orphaned assignments"));
}

#[test]
fn a_collection_cut_short_after_its_first_batch_says_what_it_collected() {
    // Enough orphans for more than one transaction (etcd's 128 operations).
    let store = store_with(&[spec("w", 100, 100_000)]);
    let mut d = Driver::new(cfg("c1"));
    d.run(&store, 100);
    assert_eq!(copies(&store).len(), 100);
    crate::ops::delete(&store, "w").unwrap();
    crate::ops::apply(&store, &[spec("w", 0, 100_000)]).unwrap();
    crate::controller::reconcile::tests::report(&store, "a", &[]);
    // The second batch lands, but its reply is lost: it fails at its deadline.
    let mut commits = 0;
    d.hook = Some(Box::new(move |_, r, p| {
        if p == Purpose::Gc && matches!(r, StoreRequest::Commit(_)) {
            commits += 1;
            return commits != 2;
        }
        true
    }));
    d.run(&store, 1_700);
    assert!(d.count(Purpose::Gc, is_pass_commit) >= 2, "several batches");
    let said: Vec<&String> = d
        .logs
        .iter()
        .map(|(_, _, l)| l)
        .filter(|l| l.contains("garbage collection") || l.contains("collected orphaned"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].starts_with("collected orphaned assignments: w-0, "),
        "what the first batch collected: {said:?}"
    );
    assert!(!said[0].contains("w-99"), "only the first batch: {said:?}");
}

/// A leader whose store holds `n` orphaned assignments (`w-0`…), its workload declared
/// again under a new uid and node a's report showing none of them running: its next
/// collection removes them all, in more than one batch when `n` is over 64.
fn leader_with_orphans(n: u64) -> (MemoryStore, Driver) {
    // Rounds far apart: no pass after the first, so only collections write.
    let store = store_with(&[spec("w", n, 100_000)]);
    let mut d = Driver::new(cfg("c1"));
    d.run(&store, 100);
    assert_eq!(copies(&store).len() as u64, n);
    crate::ops::delete(&store, "w").unwrap();
    crate::ops::apply(&store, &[spec("w", 0, 100_000)]).unwrap();
    crate::controller::reconcile::tests::report(&store, "a", &[]);
    (store, d)
}

/// When each collection began: the times of the collector's reads.
fn collections(d: &Driver) -> Vec<u64> {
    d.requests
        .iter()
        .filter(|(_, r, p)| *p == Purpose::Gc && matches!(r, StoreRequest::Read { .. }))
        .map(|(t, _, _)| *t)
        .collect()
}

#[test]
fn a_collection_whose_first_batch_fails_is_said_and_backs_the_collector_off() {
    let (store, mut d) = leader_with_orphans(1);
    // The store fails every commit of a collection; nothing lands.
    d.fail = Some(Box::new(|r, p| {
        (p == Purpose::Gc && is_pass_commit(r))
            .then(|| StoreError::Unavailable("the disk is full".into()))
    }));
    d.run(&store, 8_000);
    assert_eq!(copies(&store), ["w-0"], "nothing was collected");
    let failed = d
        .logs
        .iter()
        .filter(|(_, _, l)| l == "garbage collection failed: store unavailable: the disk is full")
        .count();
    let t = collections(&d);
    assert_eq!(
        failed,
        t.len() - 1,
        "each collection but the first, which found no orphan: {:?}",
        d.logs
    );
    assert!(!d.said("collected orphaned assignments"), "{:?}", d.logs);
    // The first found nothing (before the orphan); each failure since doubles the wait.
    let waits: Vec<u64> = t.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(waits[..3], [1_000, 2_000, 4_000], "{t:?}");
    assert!(d.host.is_leader());
    // The store recovers: the next collection removes the orphan and the second returns.
    d.fail = None;
    d.run(&store, 20_000);
    assert!(copies(&store).is_empty());
    assert!(d.said("collected orphaned assignments: w-0"));
    let t = collections(&d);
    let last = t[t.len() - 2..].to_vec();
    assert_eq!(
        last[1] - last[0],
        1_000,
        "a success restores the second: {t:?}"
    );
}

#[test]
fn a_collection_whose_later_batch_finds_leader_taken_deposes_the_leader_at_once() {
    let (store, mut d) = leader_with_orphans(100);
    // Another controller takes /leader between the collection's first and second batch.
    let mut first = usurp_before_commit(Purpose::Gc);
    let mut commits = 0;
    d.hook = Some(Box::new(move |s, r, p| {
        if p == Purpose::Gc && is_pass_commit(r) {
            commits += 1;
            if commits == 2 {
                return first(s, r, p);
            }
        }
        true
    }));
    d.run(&store, 1_200);
    assert_eq!(d.count(Purpose::Gc, is_pass_commit), 2, "two batches tried");
    let left = copies(&store);
    assert!(
        !left.is_empty() && left.len() < 100,
        "the first batch landed: {left:?}"
    );
    assert!(!d.host.is_leader(), "it still leads with /leader another's");
    assert!(d.said("lost the leader lease; following"));
}

#[test]
fn a_store_lost_for_good_under_a_later_batch_of_a_collection_stops_the_host() {
    let (store, mut d) = leader_with_orphans(100);
    let mut commits = 0;
    d.fail = Some(Box::new(move |r, p| {
        if p == Purpose::Gc && is_pass_commit(r) {
            commits += 1;
            if commits == 2 {
                return Some(StoreError::Lost("its file was removed".into()));
            }
        }
        None
    }));
    d.run(&store, 1_200);
    assert_eq!(d.count(Purpose::Gc, is_pass_commit), 2, "two batches tried");
    assert!(
        matches!(d.stopped, Some(Err(StoreError::Lost(_)))),
        "{:?}",
        d.stopped
    );
    assert!(!d.said("collected orphaned assignments"), "{:?}", d.logs);
}

#[test]
fn old_events_are_compacted_in_batches() {
    let store = store_with(&[]);
    let entries: Vec<(String, String)> = (0..700u64)
        .map(|i| {
            (
                crate::events::round_key("w", i, i),
                format!("{{\"at_ms\":{i}}}"),
            )
        })
        .collect();
    crate::events::append_all(&store, entries).unwrap();
    let mut c = cfg("c1");
    c.controller.event_retention = Duration::from_millis(1_000);
    let mut d = Driver::new(c);
    d.run(&store, 1_100);
    assert!(d.said("compacted the event log: 700 old entries removed"));
    assert_eq!(
        d.count(Purpose::Compaction, is_pass_commit),
        700usize.div_ceil(crate::retention::BATCH) + 1,
        "batches of what a default etcd takes, and the record"
    );
    assert!(store
        .read(&[crate::events::EVENTS])
        .unwrap()
        .entries
        .is_empty());
}

fn cached(holder: &str) -> HostConfig {
    let mut c = cfg(holder);
    c.watch_cache = true;
    c
}

#[test]
fn a_leader_with_a_watch_cache_gives_its_position_for_the_metrics_and_a_standby_none() {
    let store = store_with(&[spec("w", 2, 200)]);
    let mut d = Driver::new(cached("c1"));
    d.run(&store, 500);
    assert!(d.host.is_leader());
    assert_eq!(copies(&store), ["w-0", "w-1"]);
    let created = store
        .read(&[&crate::model::placements_of("a")])
        .unwrap()
        .entries
        .iter()
        .map(|e| e.mod_revision)
        .max()
        .unwrap();
    let (at, behind) = d.host.cache_position().expect("a leader with a cache");
    assert!(at >= created, "at {at}, its own creation at {created}");
    assert_eq!(behind, 0, "caught up with its own writes");
    let mut d2 = Driver::new(cached("c2"));
    d2.now = 500;
    d2.run(&store, 700);
    assert!(!d2.host.is_leader());
    assert_eq!(d2.host.cache_position(), None, "a standby has no cache");
}

/// A leader whose watch request fails reads everything again and watches again: a cache left
/// live at its read without a watch would never see another writer's change (mutant 527 of
/// the mutation sample, `Host::on_cache_watch` → `()`; the world answers a watch request at
/// once, so the chaos checker hardly reaches it).
#[test]
fn a_leader_whose_cache_watch_fails_reads_again_and_watches_again() {
    let store = store_with(&[spec("w", 2, 200)]);
    let mut d = Driver::new(cached("c1"));
    let mut first = true;
    d.fail = Some(Box::new(move |r, p| {
        let fails = first && p == Purpose::Cache && matches!(r, StoreRequest::Watch { .. });
        first &= !fails;
        fails.then(|| StoreError::Unavailable("etcd is down".into()))
    }));
    d.run(&store, 2_000);
    let is_read = |r: &StoreRequest| matches!(r, StoreRequest::Read { .. });
    let is_watch = |r: &StoreRequest| matches!(r, StoreRequest::Watch { .. });
    assert_eq!(d.count(Purpose::Cache, is_watch), 2, "watched again");
    assert_eq!(d.count(Purpose::Cache, is_read), 2, "read again first");
    assert_eq!(d.watches.len(), 1);
    // Another writer's change reaches the cache through the watch.
    crate::ops::apply(&store, &[spec("v", 1, 200)]).unwrap();
    d.run(&store, 3_000);
    assert_eq!(
        d.host.cache_position().map(|(at, _)| at),
        Some(store.revision().unwrap())
    );
}

fn direct_pass_reads(d: &Driver) -> usize {
    d.count(Purpose::Pass, |r| matches!(r, StoreRequest::Read { .. }))
}

#[test]
fn with_a_watch_cache_passes_read_memory_and_wait_for_their_own_writes() {
    let store = store_with(&[spec("w", 2, 200)]);
    let mut d = Driver::new(cached("c1"));
    d.run(&store, 2_000);
    assert_eq!(copies(&store), ["w-0", "w-1"]);
    // One full read and one watch; the first pass read the store (the cache was not live
    // yet), and so did the one after the pass's own write until the watch showed it.
    assert_eq!(
        d.count(Purpose::Cache, |r| matches!(r, StoreRequest::Read { .. })),
        1
    );
    assert_eq!(
        d.count(Purpose::Cache, |r| matches!(r, StoreRequest::Watch { .. })),
        1
    );
    let stats = d.host.cache_stats().unwrap();
    assert!(stats.served >= 8, "{stats:?}");
    assert!(direct_pass_reads(&d) <= 2, "{}", direct_pass_reads(&d));
    assert!(stats.changes > 0, "{stats:?}");
    // The declarations are read from the cache too: only the first poll, before the cache
    // was live, asked the store for its revision.
    assert_eq!(d.count(Purpose::Declarations, |_| true), 1);
}

/// An `apply` that lands between the cache's first read and the store's answer to the
/// declarations poll: the revision names the new declaration, but the read of
/// `/workloads/` (from the cache, still before it) does not hold it. The poll must remember
/// the revision of what it read, not the one it was told, or the next poll (the cache now
/// at that revision) finds nothing moved and the declaration is never acted on. CI caught
/// this: three copies never started on etcd.
#[test]
fn a_declaration_applied_while_the_cache_starts_is_still_acted_on() {
    let store = MemoryStore::new();
    crate::model::node::fake_node(&store, "a").unwrap();
    let mut d = Driver::new(cached("c1"));
    let mut applied = false;
    d.hook = Some(Box::new(move |store, request, purpose| {
        if purpose == Purpose::Declarations && matches!(request, StoreRequest::Revision) && !applied
        {
            applied = true;
            crate::ops::apply(store, &[spec("w", 2, 200)]).unwrap();
        }
        true
    }));
    d.run(&store, 3_000);
    assert_eq!(copies(&store), ["w-0", "w-1"]);
}

/// The race CI and a probe on etcd caught (reports on change made it likely: a quiet
/// store): the declarations read went to the store (the cache was not live yet) and saw a
/// new workload, then the cache became live at a revision before it, and the loop's first
/// pass, served from the cache, found the workload absent. The loop was marked dead and
/// ran no pass again while the workload stayed declared. Now a store read of cached state
/// holds the cache back until it has caught up (monotonic reads), and a pass that read
/// from before its declaration existed does not end its loop.
#[test]
fn a_pass_never_reads_a_cache_older_than_the_read_that_declared_its_workload() {
    let store = MemoryStore::new();
    crate::model::node::fake_node(&store, "a").unwrap();
    let mut d = Driver::new(cached("c1"));
    d.hold = Some(Purpose::Cache);
    let declarations_read = |d: &Driver| {
        d.queue
            .iter()
            .any(|(_, r, p)| *p == Purpose::Declarations && matches!(r, StoreRequest::Read { .. }))
    };
    while !declarations_read(&d) {
        assert!(d.run_one(&store), "the poll asks for /workloads/");
    }
    // The cache's full read is answered first, before the apply; the declarations read
    // after it.
    d.release(&store);
    crate::ops::apply(&store, &[spec("w", 2, 200)]).unwrap();
    d.run(&store, 3_000);
    assert_eq!(copies(&store), ["w-0", "w-1"]);
}

/// A converged workload's idle rounds write nothing: its passes read (from the cache)
/// and commit nothing, until the round resync; with no resync every round commits.
#[test]
fn a_steady_loop_commits_nothing_but_its_round_resync() {
    for (resync_ms, want) in [(1_000u64, 2usize), (0, 20)] {
        let store = store_with(&[spec("w", 2, 100)]);
        crate::model::node::fake_node(&store, "a").unwrap();
        let mut c = cached("c1");
        c.controller.round_resync = Duration::from_millis(resync_ms);
        let mut d = Driver::new(c);
        d.run(&store, 1_000);
        assert_eq!(copies(&store), ["w-0", "w-1"]);
        let commits = |d: &Driver| d.count(Purpose::Pass, |r| matches!(r, StoreRequest::Commit(_)));
        let (before, rev) = (commits(&d), store.revision().unwrap());
        d.run(&store, 3_000);
        // 20 rounds in these 2 s: with a 1 s resync, 2 of them write.
        assert_eq!(commits(&d) - before, want, "resync {resync_ms} ms");
        assert_eq!(
            store.revision().unwrap() - rev,
            want as u64,
            "resync {resync_ms} ms"
        );
    }
}

/// A [`Clocked`] store with a fake node `a`, and a driver of host `c1` with the watch cache
/// whose steps set that store's clock.
fn clocked_leader() -> (
    std::sync::Arc<std::sync::atomic::AtomicU64>,
    Clocked,
    Driver,
) {
    let clock = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let store = Clocked {
        inner: MemoryStore::new(),
        now: std::sync::Arc::clone(&clock),
    };
    crate::model::node::fake_node(&store, "a").unwrap();
    let mut d = Driver::new(cached("c1"));
    d.clock = Some(std::sync::Arc::clone(&clock));
    (clock, store, d)
}

/// A pass served by the leader's watch cache reads the store's clock as the host last learnt
/// it from a read (its offset to the host's own clock), so every round event says when the
/// pass read in store time, whoever served it (mutant 787 of the mutation sample added the
/// host's clock to the offset instead of taking it away: every served pass read the store's
/// time about twice over, which its round events and its copies' ages then carried).
#[test]
fn a_pass_served_by_the_cache_reads_the_stores_clock_through_the_hosts_offset() {
    use std::sync::atomic::Ordering;
    let (clock, store, mut d) = clocked_leader();
    crate::ops::apply(&store, &[spec("w", 2, 100)]).unwrap();
    // The cache's first read is answered at 700 ms (a slow call): the host learns the store's
    // clock from a read answered after its own clock moved on.
    d.hold = Some(Purpose::Cache);
    let mut t = 0;
    while t < 4_000 {
        t += 50;
        if t == 700 {
            d.release(&store);
        }
        if t == 3_000 {
            // Scaled up well after the cache is live: that pass is served and writes.
            crate::ops::apply(&store, &[spec("w", 4, 100)]).unwrap();
        }
        d.run(&store, t);
        clock.store(d.now, Ordering::SeqCst);
    }
    let rounds: Vec<u64> = crate::events::read_log(&store, "w")
        .unwrap()
        .into_iter()
        .filter_map(|l| match l {
            crate::events::Logged::Round(r) => Some(r.at_ms),
            _ => None,
        })
        .collect();
    assert!(!rounds.is_empty(), "no round written");
    // The store's clock is 1,000,000 ms ahead of the host's, which ran 0 .. 4,000; the
    // scale-up's pass read after 3,000.
    assert!(
        rounds
            .iter()
            .all(|&at| (1_000_000..=1_004_000).contains(&at)),
        "round events not in store time: {rounds:?}"
    );
    assert!(
        rounds.iter().any(|&at| at >= 1_003_000),
        "the scale-up's round: {rounds:?}"
    );
    let served = d.count(Purpose::Pass, |r| matches!(r, StoreRequest::Read { .. }));
    let passes = d.host.take_passes().len();
    assert!(
        passes > served,
        "no pass served by the cache: {passes} passes, {served} reads"
    );
}

/// A loop whose crash-loop backoff has run out is quiet again: once the crashed copy's
/// replacement runs, its idle rounds skip their passes as a loop that never crashed does.
/// (The backoff entry stays in the loop record for `get`'s restart count; before, any entry
/// made every later pass count as timed, so one crash cost a pass every period for good.)
#[test]
fn a_loop_whose_backoff_has_run_out_skips_its_quiet_passes_again() {
    use crate::controller::reconcile::tests::report;
    use crate::model::Phase;
    use std::sync::atomic::Ordering;
    let (clock, store, mut d) = clocked_leader();
    let mut w = spec("w", 2, 100);
    w.backoff.initial_ms = 500;
    crate::ops::apply(&store, &[w]).unwrap();
    let run_to = |d: &mut Driver, until: u64| {
        let mut t = d.now;
        while t < until {
            t += 50;
            d.run(&store, t);
            clock.store(d.now, Ordering::SeqCst);
        }
    };
    let assigned = |store: &Clocked| -> Vec<u64> {
        let s = crate::model::Snapshot::load(store).unwrap();
        s.assignments.values().map(|a| a.value.n).collect()
    };
    run_to(&mut d, 1_000);
    assert_eq!(assigned(&store), [0, 1]);
    report(&store, "a", &[(0, Phase::Running), (1, Phase::Running)]);
    run_to(&mut d, 2_000);
    // Copy 0 fails before it is ready: a crash that backs off (500 ms).
    report(&store, "a", &[(0, Phase::Exited), (1, Phase::Running)]);
    let key = crate::model::report_key("a");
    let e = store.get(&key).unwrap().unwrap();
    let mut r = crate::model::decode::<crate::model::NodeReport>(&e)
        .unwrap()
        .value;
    for c in r.copies.iter_mut().filter(|c| c.n == 0) {
        (c.killed, c.ready_ms, c.exit) = (false, None, Some("exit status 1".into()));
    }
    store.commit(&Txn::new().put(key, encode(&r))).unwrap();
    run_to(&mut d, 4_000);
    let now = assigned(&store);
    assert_eq!(now.len(), 2, "replaced after the backoff: {now:?}");
    assert!(!now.contains(&0), "{now:?}");
    let running: Vec<(u64, Phase)> = now.iter().map(|&n| (n, Phase::Running)).collect();
    report(&store, "a", &running);
    run_to(&mut d, 5_000);
    let loops = crate::model::Snapshot::load(&store).unwrap().loops;
    assert_eq!(loops["w"].value.backoff["w"].restarts, 1, "the entry stays");
    // 20 rounds in the next 2 s, on an unchanged store: each skips its pass.
    d.host.take_passes();
    let rev = store.revision().unwrap();
    run_to(&mut d, 7_000);
    assert_eq!(store.revision().unwrap(), rev, "nothing written");
    let outcomes: Vec<_> = d.host.take_passes().iter().map(|p| p.outcome).collect();
    assert!(outcomes.len() >= 19, "{outcomes:?}");
    assert!(
        outcomes.iter().all(|o| *o == Some("skipped")),
        "quiet rounds ran passes: {outcomes:?}"
    );
}

/// Skipping the passes that are provably no-ops (`rounds.rs`) changes nothing the
/// controller writes. Over random histories (declarations of every kind applied and
/// changed, node reports, nodes lost) two hosts run the same history on the virtual
/// clock, one skipping and one running every pass; their commits must be the same, at the
/// same times, byte for byte. The oracle is the host that runs every pass.
#[test]
fn skipping_quiet_passes_writes_exactly_what_running_every_pass_writes() {
    use crate::model::Phase;
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[derive(Clone, Debug)]
    enum Event {
        /// A declaration: kind, copies, period, and which command (a new one rolls out).
        Apply(usize, u64, u64, bool),
        Report(bool, u64),
        /// Copies that failed before they were ready (crash-loop backoff).
        Crash(bool, u64),
        Lose(bool),
        Wait,
    }
    let event = prop_oneof![
        (
            0usize..4,
            0u64..4,
            prop_oneof![Just(100u64), Just(300)],
            any::<bool>()
        )
            .prop_map(|(k, n, p, c)| Event::Apply(k, n, p, c)),
        (any::<bool>(), 0u64..4).prop_map(|(b, n)| Event::Report(b, n)),
        (any::<bool>(), 1u64..3).prop_map(|(b, n)| Event::Crash(b, n)),
        any::<bool>().prop_map(Event::Lose),
        Just(Event::Wait),
    ];
    let kinds = [
        ControllerKind::Ledger,
        ControllerKind::Intent,
        ControllerKind::Named,
        ControllerKind::Expectations,
    ];
    let skipped_somewhere = std::cell::Cell::new(false);
    proptest!(ProptestConfig::with_cases(64), |(steps in proptest::collection::vec((50u64..1500, event), 1..20))| {
        let run = |skip: bool| {
            let clock = Arc::new(AtomicU64::new(0));
            let store = Clocked { inner: MemoryStore::new(), now: Arc::clone(&clock) };
            crate::model::node::fake_node(&store, "a").unwrap();
            let mut c = cached("c1");
            c.controller.skip_quiet_passes = skip;
            c.controller.round_resync = Duration::from_millis(2_000);
            let mut d = Driver::new(c);
            d.clock = Some(Arc::clone(&clock));
            let mut t = 0;
            let mut declared = false;
            for (dt, e) in &steps {
                t += dt;
                d.run(&store, t);
                clock.store(d.now, Ordering::SeqCst);
                match e {
                    Event::Apply(k, n, p, c) => {
                        let mut spec = crate::controller::reconcile::tests::test_spec("w", *n, kinds[*k], *p);
                        if *c {
                            spec.command = vec!["sleep".into(), "7".into()];
                        }
                        crate::ops::apply(&store, &[spec]).unwrap();
                        declared = true;
                    }
                    Event::Report(b, n) if declared => {
                        let node = if *b { "b" } else { "a" };
                        let copies: Vec<(u64, Phase)> = (0..*n).map(|i| (i, Phase::Running)).collect();
                        crate::controller::reconcile::tests::report(&store, node, &copies);
                    }
                    Event::Crash(b, n) if declared => {
                        let node = if *b { "b" } else { "a" };
                        let copies: Vec<(u64, Phase)> = (0..*n).map(|i| (i, Phase::Exited)).collect();
                        crate::controller::reconcile::tests::report(&store, node, &copies);
                        // Failed before ready, not killed: a crash that backs off.
                        let key = crate::model::report_key(node);
                        let e = store.get(&key).unwrap().unwrap();
                        let mut r = crate::model::decode::<crate::model::NodeReport>(&e).unwrap().value;
                        for c in &mut r.copies {
                            (c.killed, c.ready_ms, c.exit) = (false, None, Some("exit status 1".into()));
                        }
                        store.commit(&Txn::new().put(key, encode(&r))).unwrap();
                    }
                    Event::Lose(b) => {
                        let node = if *b { "b" } else { "a" };
                        if let Some(e) = store.get(&crate::model::node::node_key(node)).unwrap() {
                            let rec = crate::model::decode::<crate::model::node::NodeRecord>(&e).unwrap();
                            store.revoke(rec.value.lease).unwrap();
                        }
                    }
                    _ => {}
                }
            }
            d.run(&store, t + 3_000);
            let commits: Vec<String> = d
                .requests
                .iter()
                .filter_map(|(at, r, p)| match r {
                    StoreRequest::Commit(txn) => Some(format!("{at} {p:?} {txn:?}")),
                    _ => None,
                })
                .collect();
            (commits, direct_pass_reads(&d) + d.host.cache_stats().unwrap().served as usize)
        };
        let (on, reads_on) = run(true);
        let (off, reads_off) = run(false);
        prop_assert_eq!(on, off);
        prop_assert!(reads_on <= reads_off);
        if reads_on < reads_off {
            skipped_somewhere.set(true);
        }
    });
    assert!(
        skipped_somewhere.get(),
        "no history skipped a pass: the test saw nothing"
    );
}

/// A leader's tick that provably does nothing but move its poll on the grid is answered
/// without the step ([`Quiet`]): histories of declarations, reports, lost watches, a store that
/// fails, and keep-alives whose replies are lost (so the lease lapses and the host is elected
/// again), stepped at the host's own wakes, are run twice, with quiet ticks answered so and
/// with every tick taking the whole step (as before). Every step must ask for exactly the same
/// things: the same requests at the same times, the same logs, the same wakes. A rule of the
/// poll left out of [`Quiet`] (the renewal's, say) makes a quiet tick skip that work, and this
/// fails.
#[test]
fn quiet_ticks_answered_without_the_step_do_exactly_what_the_whole_step_does() {
    use crate::model::Phase;
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[derive(Clone, Debug)]
    enum Event {
        /// A declaration: copies and period.
        Apply(u64, u64),
        /// A node's report of its first copies running.
        Report(bool, u64),
        /// The cache's watch is lost.
        LoseWatch,
        /// Until the next event the store fails every request; the watch is lost too if set.
        StoreDown(bool),
        /// Until the next event no reply arrives: to keep-alives only, or to any request.
        RepliesLost(bool),
        Wait,
    }
    let event = prop_oneof![
        (0u64..4, prop_oneof![Just(100u64), Just(700), Just(5_000)])
            .prop_map(|(n, p)| Event::Apply(n, p)),
        (any::<bool>(), 0u64..4).prop_map(|(b, n)| Event::Report(b, n)),
        Just(Event::LoseWatch),
        any::<bool>().prop_map(Event::StoreDown),
        any::<bool>().prop_map(Event::RepliesLost),
        Just(Event::Wait),
        Just(Event::Wait),
    ];
    let quiet_ticks = std::cell::Cell::new(0u64);
    // A TTL of 4 s renews every 1.33 s, off the collections' second; a request timeout of 60 s
    // leaves a keep-alive whose reply is lost in flight past the lease's lapse.
    let config = (any::<bool>(), prop_oneof![Just(500u64), Just(60_000)]);
    proptest!(ProptestConfig::with_cases(128), |((wake_on_change, timeout_ms) in config, steps in proptest::collection::vec((1u64..6_000, event), 1..16))| {
        let run = |quiet: bool| {
            let clock = Arc::new(AtomicU64::new(0));
            let store = Clocked { inner: MemoryStore::new(), now: Arc::clone(&clock) };
            crate::model::node::fake_node(&store, "a").unwrap();
            let mut c = cached("c1");
            c.controller.lease_ttl = Duration::from_secs(4);
            c.controller.event_retention = Duration::from_millis(2_500);
            c.controller.wake_on_change = wake_on_change;
            c.request_timeout = Duration::from_millis(timeout_ms);
            let mut d = Driver::new(c);
            if !quiet {
                let host = std::mem::replace(&mut d.host, Host::new(cached("x"), 0));
                d.host = host.without_quiet_ticks();
            }
            d.clock = Some(Arc::clone(&clock));
            let mut t = 0;
            let mut declared = false;
            for (dt, e) in &steps {
                t += dt;
                d.run(&store, t);
                clock.store(d.now, Ordering::SeqCst);
                d.fail = None;
                d.hook = None;
                match e {
                    Event::Apply(n, p) => {
                        let spec = crate::controller::reconcile::tests::test_spec("w", *n, ControllerKind::Named, *p);
                        crate::ops::apply(&store, &[spec]).unwrap();
                        declared = true;
                    }
                    Event::Report(b, n) if declared => {
                        let node = if *b { "b" } else { "a" };
                        let copies: Vec<(u64, Phase)> = (0..*n).map(|i| (i, Phase::Running)).collect();
                        crate::controller::reconcile::tests::report(&store, node, &copies);
                    }
                    Event::LoseWatch | Event::StoreDown(_) => {
                        if let Event::StoreDown(_) = e {
                            d.fail = Some(Box::new(|_, _| Some(StoreError::Unavailable("down".into()))));
                        }
                        let watch = d.watches.keys().next().copied();
                        if let (Some(watch), Event::LoseWatch | Event::StoreDown(true)) = (watch, e) {
                            d.watches.remove(&watch);
                            d.step(HostInput::Watch(WatchDelivery {
                                watch,
                                event: WatchEvent::Lost("compacted".into()),
                            }));
                        }
                    }
                    Event::RepliesLost(all) => {
                        let all = *all;
                        d.hook = Some(Box::new(move |_, _, p| !all && p != Purpose::Renewal));
                    }
                    Event::Report(..) | Event::Wait => {}
                }
            }
            d.fail = None;
            d.hook = None;
            d.run(&store, t + 5_000);
            (d.steps, d.host.quiet_answered)
        };
        let (quiet, answered) = run(true);
        let (whole, none) = run(false);
        prop_assert_eq!(none, 0);
        prop_assert_eq!(quiet.len(), whole.len());
        for (q, w) in quiet.iter().zip(&whole) {
            prop_assert_eq!(q, w);
        }
        quiet_ticks.set(quiet_ticks.get() + answered);
    });
    // Most ticks of a steady leader are quiet: the test must have seen them.
    assert!(
        quiet_ticks.get() > 1_000,
        "{} quiet ticks",
        quiet_ticks.get()
    );
}

/// Two states of a leader that the histories above seldom reach, set by hand (a full step
/// after each, so that what a tick would do is worked out afresh): the store's failure not yet
/// said to be over (a revision request failed, and the cache came back before the next one),
/// and a cache without a watch or a read while a poll of the declarations is in flight (its
/// reply slow). The next poll says that the store answers again, or reads the cache again: it
/// is no quiet tick.
#[test]
fn a_poll_that_would_say_the_store_answers_or_read_the_cache_is_no_quiet_tick() {
    for case in ["store failing", "cache without a watch"] {
        let run = |quiet: bool| {
            let clock = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            let store = Clocked {
                inner: MemoryStore::new(),
                now: std::sync::Arc::clone(&clock),
            };
            crate::model::node::fake_node(&store, "a").unwrap();
            crate::ops::apply(&store, &[spec("w", 1, 5_000)]).unwrap();
            let mut d = Driver::new(cached("c1"));
            if !quiet {
                let host = std::mem::replace(&mut d.host, Host::new(cached("x"), 0));
                d.host = host.without_quiet_ticks();
            }
            d.clock = Some(clock);
            d.run(&store, 2_010);
            let now = d.now;
            let Role::Lead(l) = &mut d.host.role else {
                panic!("a leader")
            };
            if case == "store failing" {
                let line = "cannot read the store: down".to_owned();
                assert!(d.host.conditions.failed(now, STORE, line).is_some());
            } else {
                assert!(l.declarations.start(), "no poll of them in flight");
                let watch = l.cache.as_mut().unwrap().lose_watch().expect("a watch");
                d.watches.remove(&watch);
            }
            d.step(HostInput::Watch(WatchDelivery {
                watch: 1_000_000,
                event: WatchEvent::Idle,
            }));
            d.run(&store, 2_500);
            (d.steps, d.logs, d.host.quiet_answered)
        };
        let (quiet, logs, answered) = run(true);
        let (whole, _, _) = run(false);
        assert!(answered > 0, "{case}");
        assert_eq!(quiet.len(), whole.len(), "{case}");
        for (q, w) in quiet.iter().zip(&whole) {
            assert_eq!(q, w, "{case}");
        }
        if case == "store failing" {
            assert!(logs.iter().any(|(_, _, l)| l == "the store answers again"));
        }
    }
}

/// Idle rounds are not written (`rounds.rs`), so a pass on a stale cache meets its
/// conflict only when its loop writes a round again: at once if every round is written,
/// and after `round_resync` otherwise.
#[test]
fn a_stale_cache_is_found_at_the_next_round_written() {
    let store = store_with(&[spec("w", 1, 200)]);
    let mut c = cached("c1");
    c.controller.round_resync = Duration::from_millis(1_000);
    let mut d = Driver::new(c);
    d.run(&store, 500);
    assert_eq!(copies(&store), ["w-0"]);
    d.hold_watches = true;
    crate::ops::apply(&store, &[spec("w", 3, 200)]).unwrap();
    d.run(&store, 700);
    assert_eq!(
        copies(&store),
        ["w-0"],
        "idle rounds on the stale cache write nothing"
    );
    // The resync's round conflicted; its retry waited for the stalled cache, then read
    // the store.
    d.run(&store, 1_700 + super::super::serving::CATCH_UP_MS);
    assert_eq!(
        copies(&store),
        ["w-0", "w-1", "w-2"],
        "the resync's round conflicted"
    );
    assert!(d.said("1 conflicts, retried on fresh state"));
}

#[test]
fn a_stale_cache_makes_a_pass_conflict_and_read_the_store() {
    let store = store_with(&[spec("w", 1, 200)]);
    let mut c = cached("c1");
    c.controller.round_resync = Duration::ZERO;
    let mut d = Driver::new(c);
    d.run(&store, 500);
    assert_eq!(copies(&store), ["w-0"]);
    // The watch stalls; someone else scales the workload up meanwhile.
    d.hold_watches = true;
    crate::ops::apply(&store, &[spec("w", 3, 200)]).unwrap();
    let direct = direct_pass_reads(&d);
    let before = d.host.cache_stats().unwrap();
    let wait = super::super::serving::CATCH_UP_MS;
    d.run(&store, 700 + wait);
    // The pass read the stale cache (one copy wanted), and its round's commit conflicted
    // on the declaration: from then on the cache is behind what this host has seen, so
    // the retry waited for it a second, then read the store and created the two copies.
    assert_eq!(copies(&store), ["w-0", "w-1", "w-2"]);
    assert!(d.said("1 conflicts, retried on fresh state"));
    assert!(
        direct_pass_reads(&d) > direct,
        "reads fell back to the store"
    );
    assert!(d.host.cache_stats().unwrap().passed_through > before.passed_through);
    assert_eq!(copies(&store).len(), 3);
    d.hold_watches = false;
    d.run(&store, 1_200 + wait);
    let served = d.host.cache_stats().unwrap().served;
    d.run(&store, 1_600 + wait);
    assert!(
        d.host.cache_stats().unwrap().served > served,
        "the cache serves again"
    );
    assert_eq!(copies(&store), ["w-0", "w-1", "w-2"]);
}

#[test]
fn after_its_own_write_a_pass_waits_a_second_for_the_cache_then_reads_the_store_and_never_conflicts(
) {
    let store = store_with(&[spec("w", 1, 200)]);
    let mut d = Driver::new(cached("c1"));
    d.run(&store, 500);
    assert_eq!(copies(&store), ["w-0"]);
    // The scale-up reaches the cache; then the watch stalls, so the cache never shows the
    // copies the next pass creates.
    crate::ops::apply(&store, &[spec("w", 3, 200)]).unwrap();
    assert!(d.deliver_watches(&store));
    d.hold_watches = true;
    let direct = direct_pass_reads(&d);
    let created = d.requests.len();
    let wait = super::super::serving::CATCH_UP_MS;
    d.run(&store, 1_000 + 2 * wait);
    assert_eq!(copies(&store), ["w-0", "w-1", "w-2"]);
    assert!(
        direct_pass_reads(&d) >= direct + 2,
        "the passes after the creation read the store: {} then {}",
        direct,
        direct_pass_reads(&d)
    );
    // Each of those reads went to the store only after waiting for the cache.
    let commits: Vec<u64> = d.requests[created..]
        .iter()
        .filter(|(_, r, p)| *p == Purpose::Pass && is_pass_commit(r))
        .map(|(t, _, _)| *t)
        .collect();
    let reads: Vec<u64> = d.requests[created..]
        .iter()
        .filter(|(_, r, p)| *p == Purpose::Pass && matches!(r, StoreRequest::Read { .. }))
        .map(|(t, _, _)| *t)
        .collect();
    assert!(!commits.is_empty() && !reads.is_empty());
    assert!(
        reads.iter().all(|&r| r >= commits[0] + wait),
        "a read sent before its wait was over: commits at {commits:?}, reads at {reads:?}"
    );
    assert!(
        !d.said("conflicts, retried"),
        "a pass acted on a cache older than its own write: {:?}",
        d.logs
    );
}

/// At scale a read sent to the store in place of a cache behind by a moment is every
/// assignment, placement and report (serving.rs, `CatchUp`): a pass after this host's own
/// write waits for the watch, and is served from the cache as soon as the watch delivers.
#[test]
fn a_pass_after_its_own_write_waits_for_the_watch_and_never_reads_the_store() {
    let store = store_with(&[spec("w", 1, 200)]);
    let mut d = Driver::new(cached("c1"));
    d.run(&store, 500);
    crate::ops::apply(&store, &[spec("w", 3, 200)]).unwrap();
    assert!(d.deliver_watches(&store));
    d.hold_watches = true;
    let direct = direct_pass_reads(&d);
    // The pass at 600 creates the two copies; the one at 800 waits for the stalled watch.
    d.run(&store, 900);
    assert_eq!(copies(&store), ["w-0", "w-1", "w-2"]);
    let served = d.host.cache_stats().unwrap().served;
    d.run(&store, 1_100);
    assert_eq!(
        d.host.cache_stats().unwrap().served,
        served,
        "nothing is served while the cache is behind"
    );
    // The watch delivers before the wait is over: the waiting pass is served at once.
    d.hold_watches = false;
    assert!(d.deliver_watches(&store));
    assert!(
        d.host.cache_stats().unwrap().served > served,
        "the waiting pass was served when the watch caught the cache up"
    );
    d.run(&store, 3_000);
    assert_eq!(direct_pass_reads(&d), direct, "no pass read the store");
    assert_eq!(copies(&store), ["w-0", "w-1", "w-2"]);
    assert!(!d.said("conflicts, retried"), "{:?}", d.logs);
}

#[test]
fn a_lost_watch_is_cancelled_and_the_cache_resyncs() {
    let store = store_with(&[spec("w", 1, 200)]);
    let mut d = Driver::new(cached("c1"));
    d.run(&store, 300);
    let watch = *d.watches.keys().next().expect("a watch");
    d.step(HostInput::Watch(WatchDelivery {
        watch,
        event: WatchEvent::Lost("required revision has been compacted".into()),
    }));
    assert!(d
        .requests
        .iter()
        .any(|(_, r, _)| *r == StoreRequest::CancelWatch(watch)));
    d.run(&store, 600);
    assert_eq!(
        d.count(Purpose::Cache, |r| matches!(r, StoreRequest::Read { .. })),
        2
    );
    assert_eq!(
        d.count(Purpose::Cache, |r| matches!(r, StoreRequest::Watch { .. })),
        2
    );
    assert_eq!(d.watches.len(), 1);
    assert!(!d.watches.contains_key(&watch));
    assert_eq!(d.host.cache_stats().unwrap().full_reads, 2);
    // A delivery of the cancelled watch, late, changes nothing.
    let before = d.host.cache_stats().unwrap();
    d.step(HostInput::Watch(WatchDelivery {
        watch,
        event: WatchEvent::Changes {
            revision: 10_000,
            changes: vec![],
        },
    }));
    assert_eq!(d.host.cache_stats().unwrap(), before);
}

#[test]
fn with_wake_on_change_a_changed_declaration_or_a_new_report_runs_a_pass_at_once() {
    for wake in [false, true] {
        let store = store_with(&[spec("w", 1, 10_000)]);
        let mut c = cached("c1");
        c.controller.wake_on_change = wake;
        let mut d = Driver::new(c);
        d.run(&store, 500);
        assert_eq!(copies(&store), ["w-0"]);
        crate::ops::apply(&store, &[spec("w", 2, 10_000)]).unwrap();
        d.run(&store, 1_000);
        // Without wake-on-change the next pass is the next round, 10 s on.
        let want: &[&str] = if wake { &["w-0", "w-1"] } else { &["w-0"] };
        assert_eq!(copies(&store), want, "wake {wake}");
        let passes = d.count(Purpose::Pass, is_pass_commit);
        // A node report, through the watch cache, wakes the loop too.
        crate::model::node::fake_node(&store, "b").unwrap();
        let report = crate::model::NodeReport {
            node: "b".into(),
            observed_ms: 0,
            reported_ms: 0,
            agent_pid: 1,
            synced_revision: u64::MAX,
            copies: vec![],
        };
        store
            .commit(&Txn::new().put(crate::model::report_key("b"), encode(&report)))
            .unwrap();
        d.run(&store, 1_500);
        let more = d.count(Purpose::Pass, is_pass_commit) - passes;
        assert_eq!(
            more > 0,
            wake,
            "wake {wake}: {more} passes after the report"
        );
    }
}

/// Two hosts on one store, whose requests are carried out in an order a schedule picks.
struct Pair {
    hosts: Vec<Host>,
    queues: Vec<VecDeque<(ReqId, StoreRequest)>>,
    wakes: Vec<u64>,
    now: u64,
}

impl Pair {
    fn new() -> Self {
        let hosts: Vec<Host> = ["c1", "c2"]
            .iter()
            .map(|h| {
                let mut c = cfg(h);
                // Leases live on the memory store's real clock: long enough never to end
                // within a test, so every take-over here is by the fence or by shutdown.
                c.controller.lease_ttl = Duration::from_secs(60);
                c.request_timeout = Duration::from_millis(300);
                Host::new(c, 0)
            })
            .collect();
        let mut p = Self {
            hosts,
            queues: vec![VecDeque::new(), VecDeque::new()],
            wakes: vec![0, 0],
            now: 0,
        };
        for i in 0..2 {
            p.step(i, HostInput::Tick);
        }
        p
    }

    fn step(&mut self, i: usize, input: HostInput) {
        for out in self.hosts[i].step(self.now, input) {
            match out {
                HostOutput::Request { id, request, .. } => self.queues[i].push_back((id, request)),
                HostOutput::Wake(Wake(at)) => {
                    assert!(at >= self.now, "a wake in the past");
                    self.wakes[i] = at;
                }
                HostOutput::Stopped(r) => panic!("stopped unasked: {r:?}"),
                HostOutput::Log { .. } => {}
            }
        }
        // At most: election or (renewal, declarations, collection, compaction, one pass),
        // plus revokes of leases that lost a race.
        assert!(self.hosts[i].outstanding() <= 8, "{:?}", self.hosts[i]);
    }

    /// Carries out host `i`'s oldest (or newest) request; its reply is delivered or lost.
    fn carry(&mut self, store: &MemoryStore, i: usize, newest: bool, deliver: bool) {
        let next = if newest {
            self.queues[i].pop_back()
        } else {
            self.queues[i].pop_front()
        };
        if let Some((id, request)) = next {
            let result = carry_out(store, &request);
            if deliver {
                self.step(i, HostInput::Replied(Replied { id, result }));
            }
        }
    }

    fn advance(&mut self, ms: u64) {
        self.now += ms;
        for i in 0..2 {
            self.step(i, HostInput::Tick);
        }
    }

    /// Runs without faults until `until`: every request answered in order, each host
    /// stepped at its wake.
    fn settle(&mut self, store: &MemoryStore, until: u64) {
        while self.now < until {
            for i in 0..2 {
                while !self.queues[i].is_empty() {
                    self.carry(store, i, false, true);
                }
            }
            let next = self.wakes.iter().copied().min().unwrap_or(until);
            self.now = next.clamp(self.now + 1, until);
            for i in 0..2 {
                if self.wakes[i] <= self.now {
                    self.step(i, HostInput::Tick);
                }
            }
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Whatever order two hosts' requests are carried out in, and whichever replies are
    /// lost, once the faults stop exactly one host leads and the workload has exactly the
    /// copies it declares, each created once.
    #[test]
    fn after_lost_and_reordered_replies_one_leader_keeps_exactly_the_declared_copies(
        schedule in proptest::collection::vec((0usize..2, 0u8..8, 1u64..200), 0..300),
    ) {
        let store = store_with(&[spec("w", 3, 200)]);
        let mut p = Pair::new();
        for (i, action, ms) in schedule {
            match action {
                0..=3 => p.carry(&store, i, false, true),
                4 => p.carry(&store, i, false, false),
                5 => p.carry(&store, i, true, true),
                6 => p.carry(&store, i, true, false),
                _ => p.advance(ms),
            }
        }
        let settled = p.now + 3_000;
        p.settle(&store, settled);
        let leaders = p.hosts.iter().filter(|h| h.is_leader()).count();
        proptest::prop_assert_eq!(leaders, 1);
        proptest::prop_assert_eq!(copies(&store), ["w-0", "w-1", "w-2"]);
        let leader = Snapshot::load(&store).unwrap().leader.unwrap();
        let fence = p.hosts.iter().find_map(|h| h.fence());
        proptest::prop_assert_eq!(fence, Some(leader.mod_revision));
    }
}

#[test]
fn a_host_can_move_between_threads() {
    fn send<T: Send + 'static>() {}
    send::<Host>();
    send::<HostOutput>();
}

#[test]
fn a_deposed_leaders_compaction_removes_nothing() {
    let store = store_with(&[]);
    let entries: Vec<(String, String)> = (0..10u64)
        .map(|i| {
            (
                crate::events::round_key("w", i, i),
                format!("{{\"at_ms\":{i}}}"),
            )
        })
        .collect();
    crate::events::append_all(&store, entries).unwrap();
    let mut c = cfg("c1");
    c.controller.event_retention = Duration::from_millis(1_000);
    let mut d = Driver::new(c);
    // Between the compaction's read and its first removal, another controller takes
    // /leader.
    d.hook = Some(Box::new(move |s, r, p| {
        if p == Purpose::Compaction && matches!(r, StoreRequest::Commit(_)) {
            let old = s.get(LEADER).unwrap().unwrap();
            let lease = s.grant(Duration::from_secs(30)).unwrap();
            let usurper = Leader {
                holder: "c2".into(),
                acquired_ms: 0,
                ttl_ms: 30_000,
            };
            let _ = s.commit(&Txn::new().expect(LEADER, old.mod_revision).put_leased(
                LEADER,
                encode(&usurper),
                lease,
            ));
        }
        true
    }));
    d.run(&store, 1_100);
    assert_eq!(
        store.read(&[crate::events::EVENTS]).unwrap().entries.len(),
        10
    );
    assert!(!d.host.is_leader());
    assert!(d.said("lost the leader lease; following"));
}

/// A pass whose later batch the store fails (unavailable) after an earlier one landed says what
/// landed and that it was cut short, not that it failed: its creations that landed are counted
/// as made, and the next pass goes on from there (mutant 308 of docs/chaos.md).
#[test]
fn a_pass_cut_short_after_a_batch_landed_says_what_landed_not_a_failure() {
    let store = store_with(&[spec("w", 100, 100_000)]);
    let mut d = Driver::new(cfg("c1"));
    let mut commits = 0;
    d.fail = Some(Box::new(move |r, p| {
        if p == Purpose::Pass && is_pass_commit(r) {
            commits += 1;
            if commits == 2 {
                return Some(StoreError::Unavailable("the disk is full".into()));
            }
        }
        None
    }));
    d.run(&store, 100);
    // Three transactions of a default etcd's size; the first landed.
    assert_eq!(copies(&store).len(), 42, "the first batch landed");
    assert!(
        d.said("wrote 1 of its 3 transactions, then: store unavailable: the disk is full; the next pass goes on"),
        "{:?}",
        d.logs
    );
    assert!(
        d.said("target 100, counted 0: created w-0, w-1"),
        "{:?}",
        d.logs
    );
    assert!(d.said("w-40, w-41"), "the last copy that landed is said");
    assert!(!d.said("w-42"), "no copy that did not land is said");
    assert!(!d.said("pass failed"), "{:?}", d.logs);
    assert!(d.host.is_leader());
}

/// The kind of a request, for telling requests apart by what they do.
fn request_kind(r: &StoreRequest) -> String {
    let d = format!("{r:?}");
    d.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// A store lost for good (its file removed: only SQLite says so) stops the host with that
/// loss whichever of its requests finds it: the election's, a renewal, the declarations, a
/// pass's read or commit, a collection's, a compaction's, the watch cache's read or watch. A
/// host that took it for a passing failure would retry forever against a store that is gone
/// (mutants 625 and 642 of the mutation sample, a `Lost` taken for a failure in one place
/// each, passed every test; the chaos world never loses its store). The requests tried are
/// the first of each kind and purpose in a run that does all of these.
#[test]
fn a_store_lost_for_good_stops_the_host_whichever_request_finds_it() {
    for cache in [false, true] {
        let run = |lose_at: Option<usize>| {
            let store = store_with(&[spec("w", 3, 100)]);
            // An orphan for the collector: an assignment whose workload is gone.
            crate::ops::apply(&store, &[spec("gone", 1, 100_000)]).unwrap();
            let mut c = cfg("c1");
            c.watch_cache = cache;
            c.controller.event_retention = Duration::from_millis(1_000);
            let mut d = Driver::new(c);
            let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
            let log = std::rc::Rc::clone(&seen);
            d.fail = Some(Box::new(move |r, p| {
                let mut log = log.borrow_mut();
                log.push((request_kind(r), p));
                (Some(log.len() - 1) == lose_at)
                    .then(|| StoreError::Lost("its file was removed".into()))
            }));
            d.run(&store, 300);
            if lose_at.is_none() {
                crate::ops::delete(&store, "gone").unwrap();
            }
            d.run(&store, 6_000);
            let seen = seen.borrow().clone();
            (d, seen)
        };
        let (d, seen) = run(None);
        assert!(d.stopped.is_none(), "{:?}", d.stopped);
        let mut firsts: BTreeMap<(String, String), usize> = BTreeMap::new();
        for (i, (kind, p)) in seen.iter().enumerate() {
            firsts.entry((kind.clone(), format!("{p:?}"))).or_insert(i);
        }
        let kinds: Vec<&(String, String)> = firsts.keys().collect();
        let purposes = [
            "Election",
            "Renewal",
            "Declarations",
            "Pass",
            "Gc",
            "Compaction",
            "Cache",
        ];
        for want in &purposes[..if cache { 7 } else { 6 }] {
            assert!(
                kinds.iter().any(|(_, p)| p == want),
                "no {want} request: {kinds:?}"
            );
        }
        for ((kind, purpose), i) in &firsts {
            let (mut d, _) = run(Some(*i));
            assert!(
                matches!(d.stopped, Some(Err(StoreError::Lost(_)))),
                "{kind} ({purpose}, cache {cache}) found the store lost: {:?}; {:?}",
                d.stopped,
                d.logs.last()
            );
            // Stopped for good: later steps ask the store for nothing.
            let sent = d.requests.len();
            d.now += 10_000;
            d.step(HostInput::Tick);
            assert_eq!(d.requests.len(), sent, "{kind} ({purpose}): asked for more");
        }
    }
}

/// A [`MemoryStore`] whose leases end on the world's virtual clock (a `MemoryStore` ends them
/// on the real one): a leader that stops renewing loses `/leader` its TTL after its last
/// keep-alive reached the store, at the same virtual millisecond in every run.
struct VirtualLeases {
    inner: MemoryStore,
    now: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Each live lease's TTL and when it ends, in the world's milliseconds.
    ends: std::sync::Mutex<BTreeMap<crate::store::LeaseId, (u64, u64)>>,
}

impl VirtualLeases {
    fn now(&self) -> u64 {
        self.now.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// When the next lease ends, if one is live.
    fn next_end(&self) -> Option<u64> {
        self.ends
            .lock()
            .unwrap()
            .values()
            .map(|&(_, end)| end)
            .min()
    }

    /// Ends the leases whose time is up (their keys go): whether any did.
    fn end_due(&self) -> bool {
        let now = self.now();
        let due: Vec<crate::store::LeaseId> = {
            let mut ends = self.ends.lock().unwrap();
            let due: Vec<_> = ends
                .iter()
                .filter(|(_, &(_, end))| end <= now)
                .map(|(&id, _)| id)
                .collect();
            for id in &due {
                ends.remove(id);
            }
            due
        };
        for &id in &due {
            self.inner.revoke(id).unwrap();
        }
        !due.is_empty()
    }
}

impl Store for VirtualLeases {
    fn read(&self, prefixes: &[&str]) -> Result<Read, StoreError> {
        self.inner.read(prefixes)
    }
    fn commit(&self, txn: &Txn) -> Result<Revision, StoreError> {
        self.inner.commit(txn)
    }
    fn revision(&self) -> Result<Revision, StoreError> {
        self.inner.revision()
    }
    fn grant(&self, ttl: Duration) -> Result<crate::store::LeaseId, StoreError> {
        // An hour on the real clock: only `end_due` ends it.
        let id = self.inner.grant(Duration::from_secs(3_600))?;
        let ttl = crate::controller::config::millis(ttl);
        let end = self.now() + ttl;
        self.ends.lock().unwrap().insert(id, (ttl, end));
        Ok(id)
    }
    fn keep_alive(&self, lease: crate::store::LeaseId) -> Result<(), StoreError> {
        let now = self.now();
        match self.ends.lock().unwrap().get_mut(&lease) {
            Some((ttl, end)) => {
                *end = now + *ttl;
                Ok(())
            }
            None => Err(StoreError::LeaseExpired(lease)),
        }
    }
    fn revoke(&self, lease: crate::store::LeaseId) -> Result<(), StoreError> {
        self.ends.lock().unwrap().remove(&lease);
        self.inner.revoke(lease)
    }
    fn now_ms(&self) -> u64 {
        1_000_000 + self.now()
    }
}

/// Two controller hosts on one store whose leases end on virtual time, every request carried
/// out when it is sent and its reply handed back `delay` later, watches delivered as the store
/// changes: the world of [`driven_only_at_its_wakes_a_host_does_what_a_millisecond_clock_does`].
/// It runs either a millisecond at a time, every host ticked at each, or only at the times
/// something happens: a wake a host asked for, a reply or a watch delivery due, a lease's end,
/// a happening of the test's, a pause's end.
struct Hosts {
    store: VirtualLeases,
    cfgs: Vec<HostConfig>,
    hosts: Vec<Host>,
    now: u64,
    /// The last wake each host asked for.
    wakes: Vec<u64>,
    /// Replies on their way, in the order their requests were sent: (due, host, reply).
    replies: Vec<(u64, usize, Replied)>,
    /// How long a reply takes.
    delay: u64,
    /// Until when each host's requests never reach the store (and get no reply).
    cut_until: Vec<u64>,
    /// Until when each host is paused: not stepped; its replies and watch deliveries wait.
    paused_until: Vec<u64>,
    /// The store after each revision the world saw: the history a watch starts from.
    history: BTreeMap<Revision, BTreeMap<String, Entry>>,
    /// Open watches, by host and id.
    watches: BTreeMap<(usize, ReqId), OpenWatch>,
    /// The store or the watches changed since the watches were last looked at.
    dirty: bool,
    /// Until when no watch delivers anything.
    watches_held_until: u64,
    /// Whether the hosts are stepped every millisecond: then every tick takes the whole step
    /// ([`Host::without_quiet_ticks`]), so that every rule of a tick is applied at every
    /// millisecond, not only those [`Quiet`] keeps.
    every_ms: bool,
    /// Times the world looks at whatever the hosts ask: the end of a pause, the millisecond
    /// after a happening (its changes are delivered to the watches then).
    pokes: std::collections::BTreeSet<u64>,
    /// Every output but the wakes, as `{ms} {host} {output:?}`.
    acts: Vec<String>,
}

/// A watch's prefixes and the keys under them as last delivered.
type OpenWatch = (Vec<String>, BTreeMap<String, Entry>);

/// What happens to the world of two hosts at a time, in
/// [`driven_only_at_its_wakes_a_host_does_what_a_millisecond_clock_does`]. A target `true`
/// is the leader (`c1` if there is none), `false` the first host that is not (`c1` if none).
#[derive(Clone, Debug)]
enum HostHappening {
    /// Workload `w` declared with this many copies and this period.
    Declare(u64, u64),
    /// Workload `w` no longer declared: its copies are collected.
    Undeclare,
    /// Node `b` (or `a`) reports its first copies running.
    Report(bool, u64),
    /// Node `b` (or `a`) is lost: its lease is revoked, its record goes.
    LoseNode(bool),
    /// The target's requests never reach the store from now until `ms` later.
    Cut(bool, u64),
    /// The target is not stepped from now until `ms` later (a stalled process).
    Pause(bool, u64),
    /// The target's watches are lost.
    LoseWatch(bool),
    /// The target shuts down.
    Shutdown(bool),
    /// Every host that stopped starts again, anew.
    Restart,
    /// Replies take this long from now on.
    Delay(u64),
    /// No watch delivers anything from now until `ms` later (a slow watch): a leader's cache
    /// falls behind its own writes, and its passes wait for it.
    HoldWatches(u64),
}

fn host_happening() -> impl proptest::strategy::Strategy<Value = HostHappening> {
    use proptest::prelude::*;
    prop_oneof![
        2 => (0u64..4, proptest::sample::select(vec![100u64, 250, 700]))
            .prop_map(|(n, p)| HostHappening::Declare(n, p)),
        1 => Just(HostHappening::Undeclare),
        1 => (any::<bool>(), 0u64..4).prop_map(|(b, n)| HostHappening::Report(b, n)),
        1 => any::<bool>().prop_map(HostHappening::LoseNode),
        2 => (any::<bool>(), 100u64..2_500).prop_map(|(l, ms)| HostHappening::Cut(l, ms)),
        1 => (any::<bool>(), 100u64..2_500).prop_map(|(l, ms)| HostHappening::Pause(l, ms)),
        1 => any::<bool>().prop_map(HostHappening::LoseWatch),
        1 => any::<bool>().prop_map(HostHappening::Shutdown),
        1 => Just(HostHappening::Restart),
        1 => proptest::sample::select(vec![0u64, 1, 4, 30]).prop_map(HostHappening::Delay),
        2 => (100u64..2_500).prop_map(HostHappening::HoldWatches),
    ]
}

impl Hosts {
    /// Hosts of `cfgs`, the first starting at 0, the others `stagger` ms apart, on a store with
    /// node `a` and workload `w` (two copies, every 250 ms) declared.
    fn new(cfgs: Vec<HostConfig>, stagger: u64, delay: u64, every_ms: bool) -> Self {
        let store = VirtualLeases {
            inner: MemoryStore::new(),
            now: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0)),
            ends: Default::default(),
        };
        crate::model::node::fake_node(&store, "a").unwrap();
        crate::ops::apply(&store, &[spec("w", 2, 250)]).unwrap();
        let starts: Vec<u64> = (0..cfgs.len() as u64).map(|i| i * stagger).collect();
        let hosts = cfgs
            .iter()
            .zip(&starts)
            .map(|(c, &s)| Self::host(c, s, every_ms))
            .collect();
        let n = cfgs.len();
        let mut w = Self {
            store,
            cfgs,
            hosts,
            now: 0,
            wakes: starts.clone(),
            replies: Vec::new(),
            delay,
            cut_until: vec![0; n],
            paused_until: starts.clone(),
            history: BTreeMap::new(),
            watches: BTreeMap::new(),
            dirty: false,
            watches_held_until: 0,
            every_ms,
            pokes: starts.into_iter().collect(),
            acts: Vec::new(),
        };
        w.changed();
        w.at(0);
        w
    }

    /// A host of `cfg` started at `now`: stepped every millisecond, without quiet ticks.
    fn host(cfg: &HostConfig, now: u64, every_ms: bool) -> Host {
        let host = Host::new(cfg.clone(), now);
        if every_ms {
            host.without_quiet_ticks()
        } else {
            host
        }
    }

    fn paused(&self, i: usize) -> bool {
        self.now < self.paused_until[i]
    }

    fn step(&mut self, i: usize, input: HostInput) {
        let now = self.now;
        for o in self.hosts[i].step(now, input) {
            if let HostOutput::Wake(Wake(t)) = o {
                assert!(t >= now, "a wake in the past");
                self.wakes[i] = t;
                continue;
            }
            self.acts
                .push(format!("{now} {} {o:?}", self.cfgs[i].controller.holder));
            if let HostOutput::Request { id, request, .. } = o {
                self.send(i, id, request);
            }
        }
    }

    /// Carries `request` of host `i` out now; its reply is due `delay` later.
    fn send(&mut self, i: usize, id: ReqId, request: StoreRequest) {
        if self.now < self.cut_until[i] {
            return;
        }
        let result = match &request {
            StoreRequest::Watch { prefixes, after } => {
                let base = self.history.range(..=*after).next_back();
                let base = base.map(|(_, kv)| kv.clone()).unwrap_or_default();
                self.watches.insert((i, id), (prefixes.clone(), base));
                self.dirty = true;
                Ok(StoreReply::Watching)
            }
            StoreRequest::CancelWatch(w) => {
                self.watches.remove(&(i, *w));
                return;
            }
            other => carry_out(&self.store, other),
        };
        self.changed();
        self.replies
            .push((self.now + self.delay, i, Replied { id, result }));
    }

    /// Notes the store's new revision, if it moved, in the history the watches start from.
    fn changed(&mut self) {
        let rev = self.store.revision().unwrap();
        if self.history.contains_key(&rev) {
            return;
        }
        let (rev, kv) = everything(&self.store);
        self.history.insert(rev, kv);
        self.dirty = true;
    }

    /// Delivers to each open watch of a host not paused what changed under its prefixes since
    /// its last delivery. Returns whether anything was delivered.
    fn deliver_watches(&mut self) -> bool {
        if self.now < self.watches_held_until || !std::mem::take(&mut self.dirty) {
            return false;
        }
        let (rev, now) = everything(&self.store);
        let mut deliveries = Vec::new();
        for (&(i, id), (prefixes, last)) in self.watches.iter_mut() {
            if self.now < self.paused_until[i] {
                continue;
            }
            let changes = changes_under(prefixes, last, &now);
            last.clone_from(&now);
            if !changes.is_empty() {
                let event = WatchEvent::Changes {
                    revision: rev,
                    changes,
                };
                deliveries.push((i, WatchDelivery { watch: id, event }));
            }
        }
        let any = !deliveries.is_empty();
        for (i, d) in deliveries {
            self.step(i, HostInput::Watch(d));
        }
        any
    }

    /// Hands out the replies and watch deliveries due now, and those they bring about.
    fn deliver(&mut self) {
        loop {
            let now = self.now;
            let due = self
                .replies
                .iter()
                .position(|&(t, i, _)| t <= now && now >= self.paused_until[i]);
            if let Some(k) = due {
                let (_, i, r) = self.replies.remove(k);
                self.step(i, HostInput::Replied(r));
                continue;
            }
            if !self.deliver_watches() {
                return;
            }
        }
    }

    /// The world at `t`: leases end, replies and watches are delivered, and the hosts are
    /// ticked (each one, or only those whose wake has come).
    fn at(&mut self, t: u64) {
        self.now = t;
        self.store.now.store(t, std::sync::atomic::Ordering::SeqCst);
        if self.store.end_due() {
            self.changed();
        }
        if self.paused_until.contains(&t) || self.watches_held_until == t {
            self.dirty = true;
        }
        self.deliver();
        for i in 0..self.hosts.len() {
            if !self.paused(i) && (self.every_ms || self.wakes[i] <= t) {
                self.step(i, HostInput::Tick);
                self.deliver();
            }
        }
    }

    /// When something next happens: a wake asked for, a reply due, a lease's end, a poke.
    fn next_event(&self) -> u64 {
        let wakes = (0..self.hosts.len())
            .filter(|&i| !self.hosts[i].is_stopped())
            .map(|i| self.wakes[i].max(self.paused_until[i]));
        let replies = self
            .replies
            .iter()
            .map(|&(t, i, _)| t.max(self.paused_until[i]));
        let pokes = self.pokes.range(self.now + 1..).next().copied();
        wakes
            .chain(replies)
            .chain(self.store.next_end())
            .chain(pokes)
            .min()
            .unwrap_or(u64::MAX)
            .max(self.now + 1)
    }

    /// Runs to `until`: every millisecond, or only when something happens.
    fn run(&mut self, until: u64) {
        loop {
            let next = if self.every_ms {
                self.now + 1
            } else {
                self.next_event()
            };
            if next > until {
                self.now = until;
                return;
            }
            self.at(next);
        }
    }

    /// The target host: the leader if `leader` and there is one, else the first other one.
    fn target(&self, leader: bool) -> usize {
        let is = |i: &usize| self.hosts[*i].is_leader() == leader;
        (0..self.hosts.len()).find(is).unwrap_or(0)
    }

    fn happen(&mut self, h: &HostHappening) {
        let now = self.now;
        self.store
            .now
            .store(now, std::sync::atomic::Ordering::SeqCst);
        let node = |b: bool| if b { "b" } else { "a" };
        match *h {
            HostHappening::Declare(n, period) => {
                let spec = crate::controller::reconcile::tests::test_spec(
                    "w",
                    n,
                    ControllerKind::Named,
                    period,
                );
                crate::ops::apply(&self.store, &[spec]).unwrap();
            }
            HostHappening::Undeclare => {
                let _ = crate::ops::delete(&self.store, "w");
            }
            HostHappening::Report(b, n) => {
                if self
                    .store
                    .get(&crate::model::workload_key("w"))
                    .unwrap()
                    .is_none()
                {
                    return self.happened();
                }
                let copies: Vec<(u64, crate::model::Phase)> =
                    (0..n).map(|i| (i, crate::model::Phase::Running)).collect();
                crate::controller::reconcile::tests::report(&self.store, node(b), &copies);
            }
            HostHappening::LoseNode(b) => {
                let key = crate::model::node::node_key(node(b));
                if let Some(e) = self.store.get(&key).unwrap() {
                    let rec = crate::model::decode::<crate::model::node::NodeRecord>(&e).unwrap();
                    self.store.revoke(rec.value.lease).unwrap();
                }
            }
            HostHappening::Cut(leader, ms) => {
                let i = self.target(leader);
                self.cut_until[i] = now + ms;
            }
            HostHappening::Pause(leader, ms) => {
                let i = self.target(leader);
                self.paused_until[i] = self.paused_until[i].max(now + ms);
                self.pokes.insert(self.paused_until[i]);
            }
            HostHappening::LoseWatch(leader) => {
                let i = self.target(leader);
                if !self.paused(i) {
                    let lost: Vec<ReqId> = self
                        .watches
                        .keys()
                        .filter(|(h, _)| *h == i)
                        .map(|&(_, id)| id)
                        .collect();
                    for watch in lost {
                        self.watches.remove(&(i, watch));
                        let event = WatchEvent::Lost("compacted".into());
                        self.step(i, HostInput::Watch(WatchDelivery { watch, event }));
                    }
                }
            }
            HostHappening::Shutdown(leader) => {
                let i = self.target(leader);
                if !self.paused(i) {
                    self.step(i, HostInput::Shutdown);
                }
            }
            HostHappening::Restart => {
                for i in 0..self.hosts.len() {
                    if self.hosts[i].is_stopped() {
                        self.hosts[i] = Self::host(&self.cfgs[i], now, self.every_ms);
                        self.replies.retain(|&(_, h, _)| h != i);
                        self.watches.retain(|&(h, _), _| h != i);
                        self.wakes[i] = now;
                        self.paused_until[i] = now + 1;
                    }
                }
            }
            HostHappening::Delay(ms) => self.delay = ms,
            HostHappening::HoldWatches(ms) => {
                self.watches_held_until = now + ms;
                self.pokes.insert(now + ms);
            }
        }
        self.happened();
    }

    /// After a happening: its changes are delivered a millisecond later.
    fn happened(&mut self) {
        self.changed();
        self.pokes.insert(self.now + 1);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Two controller hosts competing for the lease, stepped only at the times they ask for
    /// ([`HostOutput::Wake`]) and at their replies and watch deliveries, do exactly what they
    /// do stepped every millisecond, at the same milliseconds: every timer that can make a
    /// host act (an election attempt, a standby's look once a TTL, a request's deadline, the
    /// leader's poll, its rounds, its renewals, collections and compactions, its lease's
    /// lapse, a read's wait for the cache) is among its wakes. The histories: elections, and
    /// failovers when a leader is cut off from the store, paused, shut down or loses its
    /// watches; restarts; the workload declared, changed, undeclared (collected), reported;
    /// a node lost; slow watches; replies instant or slow; each host's every output but its
    /// wakes compared. The millisecond clock's hosts take the whole step at every tick
    /// ([`Host::without_quiet_ticks`]): a timer left out of the wakes and of [`Quiet`] alike
    /// would otherwise be late in both runs (the rounds' wake, deleted, was).
    ///
    /// A wake left out shows as an act at a later millisecond: mutant 785 of the mutation
    /// sample deleted the follower's arm of [`Host::next_wake`], so a follower or standby
    /// asked for no wake at its next election attempt and was stepped only at its next reply,
    /// deadline or a poll after its last step (a failover attempt up to a reply's delay late),
    /// and passed every test. This test found the leader's lapse missing from the wakes too
    /// (`a_leader_whose_renewals_go_unanswered_steps_down_when_its_lease_lapses_not_at_its_next_poll`).
    /// The agent's counterpart is
    /// `agent::core::tests::driven_only_at_its_wakes_it_does_what_a_millisecond_clock_does`.
    #[test]
    fn driven_only_at_its_wakes_a_host_does_what_a_millisecond_clock_does(
        ttl_ms in proptest::sample::select(vec![900u64, 1_300, 3_000]),
        poll_ms in proptest::sample::select(vec![25u64, 40, 110]),
        timeout_ms in proptest::sample::select(vec![150u64, 400, 5_000]),
        watch_cache: bool,
        wake_on_change: bool,
        stagger in 0u64..60,
        delay in proptest::sample::select(vec![0u64, 3, 17]),
        schedule in proptest::collection::vec((1u64..700, host_happening()), 1..8),
    ) {
        let cfgs: Vec<HostConfig> = ["c1", "c2"]
            .iter()
            .map(|h| {
                let mut c = cfg(h);
                c.watch_cache = watch_cache;
                c.controller.lease_ttl = Duration::from_millis(ttl_ms);
                c.controller.poll = Duration::from_millis(poll_ms);
                c.controller.event_retention = Duration::from_millis(600);
                c.controller.wake_on_change = wake_on_change;
                c.request_timeout = Duration::from_millis(timeout_ms);
                c
            })
            .collect();
        let run = |every_ms: bool| {
            let mut w = Hosts::new(cfgs.clone(), stagger, delay, every_ms);
            let mut at = 0;
            for (gap, h) in &schedule {
                at += gap;
                w.run(at);
                w.happen(h);
            }
            w.run(at + 3_000);
            w.acts
        };
        let (a, b) = (run(false), run(true));
        let first = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
        proptest::prop_assert!(
            a == b,
            "first difference at {first}: by wakes {:?}, every ms {:?}",
            a.get(first),
            b.get(first)
        );
    }
}
