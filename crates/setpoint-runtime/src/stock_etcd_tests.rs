//! The controller on an etcd as anyone installs it: default limits, 128 operations and 1.5 MiB
//! a transaction ([`crate::store::limits`]). Before, a pass wrote all its creations in one
//! transaction: a stock etcd refused a pass of 43 copies or more, and the controller retried the
//! same refused transaction every period, forever.
//!
//! The copies run nowhere: the nodes are fake (a node lease and no agent), so these tests drive
//! the real controller (its tokio driver and state machine) against a real etcd without
//! processes, and count what it wrote.

use std::sync::Arc;
use std::time::{Duration, Instant};

use setpoint_core::ControllerKind;

use crate::controller::reconcile::tests::test_spec;
use crate::controller::{run_controller, ControllerConfig};
use crate::model::loops::IdleReason;
use crate::model::{placements_of, Snapshot};
use crate::rt::shutdown_pair;
use crate::store::Store;
use crate::testing::EtcdCluster;

/// Declares a fresh `intent` workload of `copies` copies on a default etcd with two fake nodes,
/// runs the controller until it has created them all or `within` has passed, and checks that it
/// created every copy exactly once, each with its node index entry, and no more.
fn a_fresh_workload_is_created_whole(test: &str, copies: u64, within: Duration) {
    let Some(cluster) = EtcdCluster::start_or_skip(test, 1) else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(cluster.store());
    for node in ["n1", "n2"] {
        crate::model::node::fake_node(&*store, node).unwrap();
    }
    crate::ops::apply(
        &*store,
        &[test_spec("w", copies, ControllerKind::Intent, 100)],
    )
    .unwrap();
    let count = || {
        let s = Snapshot::load(&*store).unwrap();
        s.assignments_of("w").count() as u64
    };
    let (created, after) =
        with_controller(&store, ControllerConfig::new("stock-etcd-test"), || {
            let deadline = Instant::now() + within;
            let mut created = count();
            while created < copies && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
                created = count();
            }
            // A few more periods: `intent` counts its copies in flight, so nothing more is created.
            std::thread::sleep(Duration::from_millis(500));
            (created, count())
        });
    assert_eq!(
        created, copies,
        "within {within:?}, on an etcd with its default limits"
    );
    assert_eq!(after, copies, "no copy more than declared");
    let s = Snapshot::load(&*store).unwrap();
    let placed: usize = ["n1", "n2"]
        .iter()
        .map(|n| store.read(&[&placements_of(n)]).unwrap().entries.len())
        .sum();
    assert_eq!(
        placed as u64, copies,
        "every assignment has its index entry"
    );
    let mut numbers: Vec<u64> = s.assignments_of("w").map(|(_, a)| a.value.n).collect();
    numbers.dedup();
    assert_eq!(numbers.len() as u64, copies);
}

/// Runs the real controller (its tokio driver) on `store` with `cfg` while `body` runs, then
/// stops it and waits for it to end (within 10 s).
fn with_controller<T>(
    store: &Arc<dyn Store>,
    cfg: ControllerConfig,
    body: impl FnOnce() -> T,
) -> T {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (trigger, shutdown) = shutdown_pair();
    let controller = rt.spawn(run_controller(Arc::clone(store), cfg, shutdown));
    let out = body();
    trigger.fire();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), controller)
            .await
            .expect("the controller stops")
            .unwrap()
            .unwrap()
    });
    out
}

#[test]
fn forty_three_fresh_copies_start_on_a_stock_etcd() {
    // The case: 40 copies fitted one transaction, 43 did not.
    a_fresh_workload_is_created_whole("forty_three_fresh_copies", 43, Duration::from_secs(10));
}

#[test]
fn ten_thousand_fresh_copies_are_created_on_a_stock_etcd() {
    a_fresh_workload_is_created_whole("ten_thousand_fresh_copies", 10_000, Duration::from_secs(30));
}

#[test]
fn a_write_refused_as_too_big_is_the_reason_get_and_status_show() {
    let store: Arc<dyn Store> = Arc::new(crate::testing::refusing(
        crate::store::MemoryStore::new(),
        20,
    ));
    crate::model::node::fake_node(&*store, "n1").unwrap();
    crate::ops::apply(&*store, &[test_spec("w", 10, ControllerKind::Intent, 100)]).unwrap();
    let loop_revision = || {
        store
            .get(&crate::model::loops::loop_key("w"))
            .unwrap()
            .map(|e| e.mod_revision)
    };
    let (idle, status, rev, rev_later) =
        with_controller(&store, ControllerConfig::new("refusal-test"), || {
            let deadline = Instant::now() + Duration::from_secs(10);
            let idle = loop {
                let w = crate::ops::get(&*store, Some("w")).unwrap().remove(0);
                if let Some(i) = w.idle.filter(|i| i.reason == IdleReason::WriteRefused) {
                    break Some(i);
                }
                if Instant::now() > deadline {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            let status = crate::ops::status(&*store).unwrap();
            // Refused again every period, the record is written once.
            let rev = loop_revision();
            std::thread::sleep(Duration::from_millis(400));
            (idle, status, rev, loop_revision())
        });
    let idle = idle.expect("get shows the refusal as the loop's idle reason");
    assert!(
        idle.text.contains("refused its write as too big")
            && idle.text.contains("too many operations in txn"),
        "{}",
        idle.text
    );
    assert_eq!(status.idle.get("w").map(|i| &i.text), Some(&idle.text));
    assert_eq!(rev, rev_later);
    assert!(crate::ops::get(&*store, Some("w")).unwrap()[0]
        .copies
        .is_empty());
}

/// Chaos finding 16's guard on a real etcd: a delete pass compares the reports (and node
/// records) of the nodes holding the workload's copies at its commit, so a report written
/// between its read and its commit makes it conflict there, for `intent` and `expectations`
/// (the memory store's version: `reconcile::tests`). What is checked here that the memory store
/// cannot show is etcd's own compare of `mod_revision` in a transaction of the pass's shape.
#[test]
fn a_report_written_between_a_delete_passs_read_and_its_commit_conflicts_on_etcd() {
    let Some(cluster) = EtcdCluster::start_or_skip("report_guard_on_etcd", 1) else {
        return;
    };
    let etcd: Arc<dyn Store> = Arc::new(cluster.store());
    for kind in [ControllerKind::Intent, ControllerKind::Expectations] {
        let store =
            crate::store::namespace::Namespaced::new(Arc::clone(&etcd), format!("/{kind:?}"));
        crate::controller::reconcile::tests::report_between_read_and_commit(&store, kind);
    }
}

/// A stock etcd never compacts its history (`--auto-compaction-retention` is off by default):
/// every version of every key stays until its 2 GiB quota refuses every write. The controller
/// compacts it on its schedule ([`crate::controller::HistorySchedule`]), keeping one interval
/// of history, and goes on working after it.
#[test]
fn the_controller_compacts_a_stock_etcds_history_and_works_on() {
    let Some(cluster) = EtcdCluster::start_or_skip("compacts_history", 1) else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(cluster.store());
    crate::model::node::fake_node(&*store, "n1").unwrap();
    let first = store.revision().unwrap();
    for i in 0..20 {
        store
            .commit(&crate::store::Txn::new().put("/scratch/k", format!("{i}")))
            .unwrap();
    }
    let history_from = |after: crate::store::Revision| {
        let mut w = store.watch(&["/scratch/"], after).unwrap().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match w.next(Duration::from_millis(200)) {
                crate::store::WatchEvent::Idle if Instant::now() < deadline => continue,
                e => return e,
            }
        }
    };
    assert!(
        matches!(
            history_from(first),
            crate::store::WatchEvent::Changes { .. }
        ),
        "before: the history is all there"
    );
    let mut cfg = ControllerConfig::new("compaction-test");
    cfg.history_compaction = Duration::from_secs(1);
    let (compacted, created) = with_controller(&store, cfg, || {
        // The first tick reads the revision, the second (a second later) compacts to it.
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut compacted = false;
        while !compacted && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(300));
            compacted = matches!(history_from(first), crate::store::WatchEvent::Lost(_));
        }
        // Declared after the compaction: the controller's own watch and passes still work.
        crate::ops::apply(&*store, &[test_spec("w", 3, ControllerKind::Intent, 100)]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let count = || Snapshot::load(&*store).unwrap().assignments_of("w").count();
        while count() < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        (compacted, count())
    });
    assert!(
        compacted,
        "the history before the controller started is compacted within 15 s"
    );
    assert_eq!(
        created, 3,
        "the workload declared after the compaction is created"
    );
}
