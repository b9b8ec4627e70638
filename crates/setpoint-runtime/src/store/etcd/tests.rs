use super::kv::last_write_per_key;
use super::*;
use crate::testing::EtcdCluster;

/// A request a member's death cancels below gRPC is sent to the next member when it may
/// be repeated (a read), never when it may have applied (a write).
#[test]
fn a_connection_closed_under_a_read_is_retried_and_under_a_write_is_not() {
    let closed = || {
        etcd_client::Error::IoError(std::io::Error::other(
            "operation was canceled: connection closed",
        ))
    };
    assert!(retryable(&closed(), true));
    assert!(!retryable(&closed(), false));
    let other = etcd_client::Error::IoError(std::io::Error::other("permission denied"));
    assert!(!retryable(&other, true));
}

fn store(test: &str) -> Option<(EtcdCluster, EtcdStore)> {
    let cluster = EtcdCluster::start_or_skip(test, 1)?;
    let store = cluster.store();
    Some((cluster, store))
}

crate::store::conformance_tests!(store(module_path!()), Duration::from_secs(1));

/// A store of `cluster` whose reads are paged by 7 keys, holding `/p/000` to `/p/299` (written
/// 100 to a transaction: a stock etcd takes at most 128 operations in one).
fn paged_store_of_300(cluster: &EtcdCluster) -> EtcdStore {
    let s = cluster.store().with_page_keys(7);
    for first in (0..300).step_by(100) {
        let mut t = Txn::new();
        for i in first..first + 100 {
            t = t.put(format!("/p/{i:03}"), "0");
        }
        s.commit(&t).unwrap();
    }
    s
}

/// A paged read whose caller has stopped waiting asks for no further page: it fails as
/// unavailable, saying how far it got, instead of paging on through the store for an answer
/// nobody takes; one whose deadline passed before it began sends nothing. A deadline not yet
/// reached reads everything, as `read` does; the namespace passes the deadline on.
#[test]
fn a_paged_read_past_its_callers_deadline_stops_paging() {
    let Some((cluster, _)) = store("a_paged_read_deadline") else {
        return;
    };
    let s = paged_store_of_300(&cluster);
    let far = std::time::Instant::now() + Duration::from_secs(600);
    let whole = s.read_until(&["/p/"], far).unwrap();
    assert_eq!(whole.entries.len(), 300);
    assert_eq!(whole, s.read(&["/p/"]).unwrap());

    // 300 pages of one key are 300 requests: far more than 10 ms on any machine.
    let s = cluster.store().with_page_keys(1);
    let began = std::time::Instant::now();
    let e = s
        .read_until(&["/p/"], began + Duration::from_millis(10))
        .unwrap_err();
    let StoreError::Unavailable(why) = &e else {
        panic!("a read past its deadline is unavailable, not {e:?}");
    };
    let got: usize = why
        .strip_prefix("a read given up after ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the reason says how far it got: {why}"));
    assert!((1..300).contains(&got), "{why}");

    let past = std::time::Instant::now();
    let e = s.read_until(&["/p/"], past).unwrap_err();
    assert!(e.to_string().contains("given up after 0 keys"), "{e}");

    let ns = crate::store::Namespaced::new(Arc::new(cluster.store()), "/p/");
    let r = ns.read_until(&["0"], far).unwrap();
    assert_eq!(r.entries.len(), 100);
    assert_eq!(r.entries[0].key, "000");
    let e = ns.read_until(&["0"], past).unwrap_err();
    assert!(e.to_string().contains("given up after 0 keys"), "{e}");
}

/// A read of more keys than a page is paged at its first page's revision: every key of
/// every prefix once, in order, none newer than the read's revision, while another client
/// rewrites the keys between the pages (without the fixed revision, later pages would
/// show newer values).
#[test]
fn a_paged_read_is_one_revisions_while_writes_go_on() {
    let Some((cluster, _)) = store("a_paged_read") else {
        return;
    };
    let s = paged_store_of_300(&cluster);
    let mut t = Txn::new();
    for i in 0..20 {
        t = t.put(format!("/q/{i:02}"), "0");
    }
    s.commit(&t).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (w, stop) = (cluster.store(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) && i < 3_000 {
                w.commit(&Txn::new().put(format!("/p/{:03}", i % 300), format!("{i}")))
                    .unwrap();
                i += 1;
            }
            i
        })
    };
    let mut newer_seen = false;
    for _ in 0..5 {
        let r = s.read(&["/q/", "/p/"]).unwrap();
        let keys: Vec<&str> = r.entries.iter().map(|e| e.key.as_str()).collect();
        let mut want: Vec<String> = (0..300).map(|i| format!("/p/{i:03}")).collect();
        want.extend((0..20).map(|i| format!("/q/{i:02}")));
        assert_eq!(keys, want, "every key once, in order");
        for e in &r.entries {
            assert!(
                e.mod_revision <= r.revision,
                "{} at {} after {}",
                e.key,
                e.mod_revision,
                r.revision
            );
        }
        newer_seen |= s.revision().unwrap() > r.revision;
    }
    stop.store(true, Ordering::SeqCst);
    let writes = writer.join().unwrap();
    assert!(
        writes > 0 && newer_seen,
        "the writer moved the store during the reads"
    );
}

/// An etcd whose database reached its quota raises the `NOSPACE` alarm and refuses every
/// write: the refusal says so in one line with what frees it, and what is stored can still
/// be read.
#[test]
fn a_full_etcd_is_named_full_with_what_frees_it_and_still_reads() {
    let cfg = crate::testing::EtcdClusterConfig {
        quota_bytes: Some(2 * 1024 * 1024),
        ..crate::testing::EtcdClusterConfig::loopback(1)
    };
    let Some(cluster) = EtcdCluster::start_or_skip_with("a_full_etcd", &cfg) else {
        return;
    };
    let s = cluster.store();
    s.commit(&Txn::new().put("/kept", "1")).unwrap();
    assert_eq!(s.alarm().unwrap(), None, "no alarm before it fills");
    let value = "x".repeat(500_000);
    let mut refused = None;
    // Bounded: 2 MiB of quota takes a few dozen values of 0.5 MB (history included).
    for i in 0..200 {
        if let Err(e) = s.commit(&Txn::new().put(format!("/fill/{}", i % 4), value.clone())) {
            refused = Some(e);
            break;
        }
    }
    let e = refused.expect("a 2 MiB quota refuses writes within 200 values of 0.5 MB");
    let line = e.to_string();
    assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
    assert!(
        line.contains("is full") && line.contains("alarm disarm"),
        "{line}"
    );
    assert_eq!(line.lines().count(), 1, "{line}");
    // The alarm is there to be asked about: `get` and `status` show it.
    let alarm = s.alarm().unwrap().expect("the NOSPACE alarm is raised");
    assert!(
        alarm.contains("is full") && alarm.contains("NOSPACE") && alarm.contains("alarm disarm"),
        "{alarm}"
    );
    let kept = s
        .get("/kept")
        .unwrap()
        .expect("what is stored is still read");
    assert_eq!(kept.value, "1");
}

#[test]
fn a_call_to_a_stopped_server_is_unavailable_within_the_deadline() {
    let Some((mut cluster, _)) = store("a_call_to_a_stopped_server_is_unavailable") else {
        return;
    };
    let timeout = Duration::from_millis(700);
    let s = cluster.store_with(EtcdOptions { timeout });
    s.commit(&Txn::new().put("/a", "1")).unwrap();
    cluster.kill(0);
    for call in ["read", "commit", "revision", "grant", "keep_alive"] {
        let t0 = std::time::Instant::now();
        let r = match call {
            "read" => s.read(&["/"]).map(|_| ()),
            "commit" => s.commit(&Txn::new().put("/a", "2")).map(|_| ()),
            "revision" => s.revision().map(|_| ()),
            "grant" => s.grant(Duration::from_secs(5)).map(|_| ()),
            _ => s.keep_alive(1).map(|_| ()),
        };
        let took = t0.elapsed();
        match r {
            Err(StoreError::Unavailable(m)) => assert!(m.contains(s.endpoints()), "{m}"),
            other => panic!("{call} on a stopped server: {other:?}"),
        }
        assert!(
            took < timeout + Duration::from_millis(600),
            "{call} took {took:?}"
        );
    }
    // Connecting to nothing fails within the deadline too, naming the endpoint.
    let t0 = std::time::Instant::now();
    let err = EtcdStore::connect(&cluster.endpoints(), EtcdOptions { timeout }).unwrap_err();
    assert!(t0.elapsed() < timeout * 2 + Duration::from_millis(600));
    assert!(err.to_string().contains(&cluster.endpoints()[0]), "{err}");
}

/// A member stopped (SIGSTOP) until dropped, then continued.
struct Frozen(u32);

impl Frozen {
    fn new(pid: u32) -> Self {
        let p = rustix::process::Pid::from_raw(pid as i32).unwrap();
        rustix::process::kill_process(p, rustix::process::Signal::STOP).unwrap();
        Self(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let p = rustix::process::Pid::from_raw(self.0 as i32).unwrap();
        let _ = rustix::process::kill_process(p, rustix::process::Signal::CONT);
    }
}

/// Issue 22 item 4: a hung member (stopped, so its sockets accept and nothing answers) is
/// passed over like a dead one. Each call of every kind answers well within the lease
/// deadlines: the node lease renews every third of its TTL, so a call that waits out the
/// whole 3 s deadline on the hung member, once or twice in a row, fences copies.
#[test]
fn a_hung_member_of_three_is_passed_over_well_within_the_deadline() {
    let Some(mut cluster) = EtcdCluster::start_or_skip("a_hung_member_of_three", 3) else {
        return;
    };
    let s = cluster.store();
    let lease = s.grant(Duration::from_secs(10)).unwrap();
    let mut rev = s
        .commit(&Txn::new().expect("/k", 0).put("/k", "0"))
        .unwrap();
    // Every member, leader or not, in turn.
    for member in 0..3 {
        let frozen = Frozen::new(cluster.pid(member).unwrap());
        let mut worst = Duration::ZERO;
        let t = std::time::Instant::now();
        let mut calls = 0;
        while t.elapsed() < Duration::from_secs(8) {
            for call in ["read", "commit", "revision", "keep_alive"] {
                let t0 = std::time::Instant::now();
                let r = match call {
                    "read" => s.read(&["/k"]).map(|_| ()),
                    "commit" => s
                        .commit(&Txn::new().expect("/k", rev).put("/k", "1"))
                        .map(|r| rev = r),
                    "revision" => s.revision().map(|_| ()),
                    _ => s.keep_alive(lease),
                };
                let took = t0.elapsed();
                // Right after the freeze of the leader the others elect a new one: a call
                // may fail "no leader" then, but quickly.
                if let Err(e) = &r {
                    assert!(
                        matches!(e, StoreError::Unavailable(_) | StoreError::Conflict { .. }),
                        "{call} with member {member} hung: {e}"
                    );
                    if let StoreError::Conflict { found, .. } = e {
                        rev = *found;
                    }
                }
                worst = worst.max(took);
                calls += 1;
            }
        }
        drop(frozen);
        // Under the 3 s deadline with room: a call that waited it out would be the bug.
        // The leader's freeze costs one election (etcd's 1 s timeout, then a vote): a call
        // proposed meanwhile waits for the new leader, measured up to 2.0 s on this 2-core
        // machine (a bound of 1.6 s failed 1 run in 4 there).
        assert!(
            worst < Duration::from_millis(2500),
            "with member {member} hung, a call took {worst:?} ({calls} calls)"
        );
        cluster.wait_for_leader(Duration::from_secs(10)).unwrap();
    }
}

/// A member down when the handle connects is left out at first, and joins once it is
/// back: a process started inside a partition or an outage does not keep only the members
/// it happened to reach (found by the network-namespace test).
#[test]
fn a_member_dead_at_connect_joins_the_handle_once_it_is_back() {
    let Some(mut cluster) = EtcdCluster::start_or_skip("a_member_dead_at_connect", 3) else {
        return;
    };
    cluster.kill(2);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let s = loop {
        match cluster.try_store_with(EtcdOptions::default()) {
            Ok(s) => break s,
            Err(e) => {
                assert!(std::time::Instant::now() < deadline, "{e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert_eq!(s.member_urls().len(), 2, "{:?}", s.member_urls());
    cluster.restart(2).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while s.member_urls().len() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            s.member_urls()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let dead_at_connect = cluster.endpoints()[2].clone();
    assert!(
        s.member_urls()
            .iter()
            .any(|u| u.ends_with(&dead_at_connect)),
        "{:?} {dead_at_connect}",
        s.member_urls()
    );
    // And it serves: the two that answered at connect go, one at a time.
    cluster.kill(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while let Err(e) = s.commit(&Txn::new().put("/k", "1")) {
        assert!(std::time::Instant::now() < deadline, "{e}");
    }
}

#[test]
fn three_members_serve_through_the_loss_of_one_and_refuse_without_quorum() {
    let Some(mut cluster) = EtcdCluster::start_or_skip("three_members", 3) else {
        return;
    };
    let s = cluster.store();
    let r = s
        .commit(&Txn::new().expect("/k", 0).put("/k", "1"))
        .unwrap();
    cluster.kill(0);
    // The client balances over every endpoint: one member down, the others answer (after
    // an election if the dead one led).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let r2 = loop {
        match s.commit(&Txn::new().expect("/k", r).put("/k", "2")) {
            Ok(r2) => break r2,
            Err(StoreError::Unavailable(_)) if std::time::Instant::now() < deadline => {}
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(s.get("/k").unwrap().unwrap().mod_revision, r2);
    cluster.kill(1);
    let t0 = std::time::Instant::now();
    match s.commit(&Txn::new().expect("/k", r2).put("/k", "3")) {
        Err(StoreError::Unavailable(m)) => assert!(
            m.contains("no quorum") || m.contains("unreachable or has no quorum"),
            "{m}"
        ),
        other => panic!("a commit without quorum: {other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    cluster.restart(1).unwrap();
    cluster.wait_for_leader(Duration::from_secs(20)).unwrap();
    // The refused write may still land once quorum returns (the surviving leader may have
    // put it in its log): `Unavailable` is for the answer, not the request. It lands whole
    // or not at all, and a redo of the same compare-and-set is then a conflict, never a
    // second write.
    let e = s.get("/k").unwrap().unwrap();
    let landed = match (e.value.as_str(), e.mod_revision) {
        ("2", rev) if rev == r2 => false,
        ("3", rev) if rev > r2 => true,
        other => panic!("neither before nor after the refused write: {other:?}"),
    };
    let redo = s.commit(&Txn::new().expect("/k", r2).put("/k", "3"));
    assert_eq!(redo.is_err(), landed, "{redo:?}");
    if landed {
        assert!(redo.unwrap_err().is_conflict());
    }
    assert_eq!(s.get("/k").unwrap().unwrap().value, "3");
}

#[test]
fn a_stopped_server_started_again_serves_what_was_committed() {
    let Some((mut cluster, s)) = store("a_stopped_server_started_again") else {
        return;
    };
    let r = s
        .commit(&Txn::new().expect("/k", 0).put("/k", "v"))
        .unwrap();
    cluster.kill(0);
    assert!(s.get("/k").is_err());
    cluster.restart(0).unwrap();
    cluster.wait_for_leader(Duration::from_secs(20)).unwrap();
    let e = s.get("/k").unwrap().unwrap();
    assert_eq!((e.value.as_str(), e.mod_revision), ("v", r));
}

#[test]
fn only_the_last_write_of_a_key_is_sent() {
    let t = Txn::new().put("/a", "1").put("/b", "1").delete("/a");
    let kept = last_write_per_key(&t.ops);
    assert_eq!(
        kept,
        [
            &Op::Put {
                key: "/b".into(),
                value: "1".into(),
                lease: None
            },
            &Op::Delete { key: "/a".into() }
        ]
    );
}
