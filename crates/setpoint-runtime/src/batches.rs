//! A pass's writes as the transactions that carry them, committed one after the other.
//!
//! A pass that creates or removes many copies writes more than one transaction of a default
//! etcd takes ([`crate::store::TxnLimits::ETCD_DEFAULT`]: 128 operations, 1.5 MiB). [`crate::controller::reconcile::Plan`]
//! marks each copy's writes as a part, and [`Plan::writes`](crate::controller::reconcile::Plan::writes)
//! cuts the pass into transactions that fit, each copy whole in one of them; a pass that fits
//! is one transaction, exactly as before. The first transaction carries the counter, the loop
//! record and the round event; every later one repeats the declaration's revision and the
//! leader's fencing token, so a deposed leader or a changed declaration stops the rest.
//!
//! As the ReplicaSet's slow start does after a failed create, a pass stops at the first
//! transaction that fails: what landed stays and counts (the report forgets the rest), and the
//! next pass reads again and decides afresh. The controller's memory needs no repair: a copy
//! whose assignment was never written is not in flight, so it is neither waited for nor
//! counted.

use std::collections::VecDeque;

use crate::controller::reconcile::PassReport;
use crate::store::Txn;

/// The transactions of one pass, in commit order, with the copies each concerns.
#[derive(Debug, Default)]
pub struct Writes {
    /// The transactions not sent yet, each with its copies.
    queue: VecDeque<(Txn, Vec<String>)>,
    /// The copies of the transaction sent and not yet answered.
    sent: Vec<String>,
    /// How many transactions the pass has in all.
    total: usize,
    /// How many have committed.
    landed: usize,
    /// The copies of those that committed.
    done: Vec<String>,
}

impl Writes {
    /// The transactions `pieces`, in commit order, each with the copies it concerns.
    pub fn new(pieces: Vec<(Txn, Vec<String>)>) -> Self {
        Writes {
            total: pieces.len(),
            queue: pieces.into(),
            sent: Vec::new(),
            landed: 0,
            done: Vec::new(),
        }
    }

    /// The next transaction to commit, or `None` when all have committed. A pass that writes
    /// nothing has one empty transaction, which need not be sent.
    pub fn next_txn(&mut self) -> Option<Txn> {
        let (txn, copies) = self.queue.pop_front()?;
        self.sent = copies;
        Some(txn)
    }

    /// The last transaction [`Writes::next_txn`] gave committed.
    pub fn committed(&mut self) {
        self.done.append(&mut self.sent);
        self.landed += 1;
    }

    /// The copies of the transactions that committed, in order.
    pub fn done(&self) -> &[String] {
        &self.done
    }

    /// How many transactions have committed.
    pub fn landed(&self) -> usize {
        self.landed
    }

    /// How many transactions the pass has in all.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The last transaction sent failed with `error` after others had committed: `report`
    /// forgets the copies of it and of every one not sent, and says why the pass stopped.
    pub fn stop(&mut self, report: &mut PassReport, error: &dyn std::fmt::Display) {
        let mut unlanded = std::mem::take(&mut self.sent);
        for (_, copies) in self.queue.drain(..) {
            unlanded.extend(copies);
        }
        report.without(&unlanded);
        report.stopped = Some(format!(
            "wrote {} of its {} transactions, then: {error}; the next pass goes on",
            self.landed, self.total
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_forgets_the_copies_that_did_not_land() {
        let t = || Txn::new().put("/k", "v");
        let mut w = Writes::new(vec![
            (t(), vec!["w-0".into(), "w-1".into()]),
            (t(), vec!["w-2".into()]),
            (t(), vec!["w-3".into()]),
        ]);
        let mut report = PassReport {
            created: vec!["w-0".into(), "w-1".into(), "w-2".into(), "w-3".into()],
            collected: vec!["w-3".into()],
            ..PassReport::default()
        };
        assert!(w.next_txn().is_some());
        w.committed();
        assert!(w.next_txn().is_some());
        w.stop(&mut report, &"conflict");
        assert_eq!(report.created, ["w-0", "w-1"]);
        assert!(report.collected.is_empty());
        assert_eq!((w.landed(), w.total()), (1, 3));
        assert!(report
            .stopped
            .unwrap()
            .contains("wrote 1 of its 3 transactions"));
        assert!(w.next_txn().is_none());
    }
}
