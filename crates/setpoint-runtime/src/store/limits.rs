//! What one transaction may hold, and how a large write is cut into transactions that fit.
//!
//! etcd refuses a transaction with more than `--max-txn-ops` comparisons, or writes, or
//! failure-branch reads (128 by default), and a request larger than `--max-request-bytes`
//! (1.5 MiB by default). setpoint writes within a *default* etcd's limits on every store
//! ([`TxnLimits::ETCD_DEFAULT`]), so that the same pass commits the same transactions on SQLite,
//! in the chaos lab and on an etcd as anyone installs it.
//!
//! A writer that may write more marks the parts of its transaction that must commit together
//! ([`Part`], e.g. one copy's assignment, its node index entry and its event) and [`split`]s it:
//! a transaction that fits is left exactly as it is (one commit, as before); one that does not
//! becomes several, committed one after the other. Like the ReplicaSet's slow start, the writer
//! stops at the first that fails and leaves the rest to its next pass.

use std::ops::Range;

use super::{Op, Txn};

/// The most a transaction may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnLimits {
    /// The most comparisons, or writes, in one transaction (etcd's `--max-txn-ops`; etcd counts
    /// the failure branch too, which reads every compared key).
    pub max_ops: usize,
    /// The largest request, in bytes (etcd's `--max-request-bytes`).
    pub max_bytes: usize,
}

impl TxnLimits {
    /// A default etcd's: 128 operations and 1.5 MiB.
    pub const ETCD_DEFAULT: TxnLimits = TxnLimits {
        max_ops: 128,
        max_bytes: 1536 * 1024,
    };

    /// The room [`split`] leaves under `max_bytes` for what [`request_bytes`] does not count
    /// exactly (etcd's own wrapping of the request).
    const MARGIN_BYTES: usize = 64 * 1024;

    /// Whether `txn` fits.
    pub fn fits(&self, txn: &Txn) -> bool {
        txn_ops(txn) <= self.max_ops && request_bytes(txn) <= self.byte_budget()
    }

    fn byte_budget(&self) -> usize {
        self.max_bytes
            .saturating_sub(Self::MARGIN_BYTES)
            .max(self.max_bytes / 2)
    }
}

impl Default for TxnLimits {
    /// [`TxnLimits::ETCD_DEFAULT`].
    fn default() -> Self {
        Self::ETCD_DEFAULT
    }
}

/// How many operations etcd counts in `txn`: the most of its comparisons, its writes and its
/// failure-branch reads (one per comparison).
pub fn txn_ops(txn: &Txn) -> usize {
    txn.compares.len().max(txn.ops.len())
}

/// Per comparison, write or read: the protobuf tags, lengths and varints around its key and
/// value, rounded up (a revision or lease id is at most 10 bytes as a varint).
const PER_ITEM_BYTES: usize = 32;

/// An upper bound of `txn`'s size as an etcd request: its keys and values, each comparison
/// twice (it is read back in the failure branch), plus a fixed overhead per item.
pub fn request_bytes(txn: &Txn) -> usize {
    let compares: usize = txn
        .compares
        .iter()
        .map(|c| 2 * (c.key.len() + PER_ITEM_BYTES))
        .sum();
    let ops: usize = txn.ops.iter().map(op_bytes).sum();
    compares + ops + PER_ITEM_BYTES
}

fn op_bytes(op: &Op) -> usize {
    match op {
        Op::Put { key, value, .. } => key.len() + value.len() + PER_ITEM_BYTES,
        Op::Delete { key } => key.len() + PER_ITEM_BYTES,
    }
}

/// How many of `entries`, from the first, fit one transaction that creates each only if absent
/// (one comparison and one write each, as [`crate::events::append`] writes them); at least one
/// when there is one, so that a write too big alone is refused by the store, which says why.
pub fn appends_that_fit(entries: &[(String, String)], limits: &TxnLimits) -> usize {
    let budget = limits.byte_budget();
    let mut bytes = PER_ITEM_BYTES;
    let mut n = 0;
    for (key, value) in entries {
        bytes += 3 * key.len() + value.len() + 3 * PER_ITEM_BYTES;
        if n > 0 && (n + 1 > limits.max_ops || bytes > budget) {
            break;
        }
        n += 1;
    }
    n
}

/// Where [`Part::since`] starts measuring: how many comparisons and writes a transaction had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    compares: usize,
    ops: usize,
}

impl Mark {
    /// The end of `txn` as it is now.
    pub fn at(txn: &Txn) -> Self {
        Mark {
            compares: txn.compares.len(),
            ops: txn.ops.len(),
        }
    }
}

/// Comparisons and writes of a transaction that must commit together, by their positions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The positions of its comparisons in the transaction's `compares`.
    pub compares: Range<usize>,
    /// The positions of its writes in the transaction's `ops`.
    pub ops: Range<usize>,
}

impl Part {
    /// What `txn` gained since `mark`.
    pub fn since(mark: Mark, txn: &Txn) -> Self {
        Part {
            compares: mark.compares..txn.compares.len(),
            ops: mark.ops..txn.ops.len(),
        }
    }
}

/// One transaction of a split write, with the parts it carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The transaction.
    pub txn: Txn,
    /// The indices, in the `parts` given to [`split`], of the parts it carries.
    pub parts: Range<usize>,
}

/// Cuts `txn` into transactions that each fit `limits`, keeping every part whole and in order.
///
/// A transaction that fits comes back as it is, alone. Otherwise the first piece holds all that
/// is in no part (the comparisons that guard the whole write, counters, records) and as many
/// parts as fit; each later piece repeats the first `guards` comparisons (those that every
/// piece must check, such as a leader's fencing token) and holds the next parts that fit.
/// Comparisons and writes keep their order within each piece. A part too big for a
/// transaction of its own still gets one, so that the store refuses it and says why.
///
/// Parts must not overlap each other or the first `guards` comparisons.
pub fn split(txn: &Txn, guards: usize, parts: &[Part], limits: &TxnLimits) -> Vec<Piece> {
    if limits.fits(txn) || parts.is_empty() {
        return vec![Piece {
            txn: txn.clone(),
            parts: 0..parts.len(),
        }];
    }
    let mut in_part_c = vec![false; txn.compares.len()];
    let mut in_part_o = vec![false; txn.ops.len()];
    for p in parts {
        in_part_c[p.compares.clone()].fill(true);
        in_part_o[p.ops.clone()].fill(true);
    }
    let head_c: Vec<usize> = (0..txn.compares.len()).filter(|&i| !in_part_c[i]).collect();
    let head_o: Vec<usize> = (0..txn.ops.len()).filter(|&i| !in_part_o[i]).collect();
    let guard_c: Vec<usize> = (0..guards.min(txn.compares.len())).collect();
    let budget = limits.byte_budget();
    let size = |cs: &[usize], os: &[usize]| -> usize {
        cs.iter()
            .map(|&i| 2 * (txn.compares[i].key.len() + PER_ITEM_BYTES))
            .sum::<usize>()
            + os.iter().map(|&i| op_bytes(&txn.ops[i])).sum::<usize>()
    };
    let mut pieces = Vec::new();
    let (mut cs, mut os) = (head_c.clone(), head_o.clone());
    let mut bytes = size(&cs, &os) + PER_ITEM_BYTES;
    let mut first_part = 0;
    for (i, p) in parts.iter().enumerate() {
        let (pc, po) = (p.compares.len(), p.ops.len());
        let pb = p
            .compares
            .clone()
            .map(|i| 2 * (txn.compares[i].key.len() + PER_ITEM_BYTES))
            .chain(p.ops.clone().map(|i| op_bytes(&txn.ops[i])))
            .sum::<usize>();
        let fits = (cs.len() + pc).max(os.len() + po) <= limits.max_ops && bytes + pb <= budget;
        if !fits && i > first_part {
            pieces.push(piece(txn, &cs, &os, first_part..i));
            cs.clone_from(&guard_c);
            os.clear();
            bytes = size(&cs, &os) + PER_ITEM_BYTES;
            first_part = i;
        }
        cs.extend(p.compares.clone());
        os.extend(p.ops.clone());
        bytes += pb;
    }
    pieces.push(piece(txn, &cs, &os, first_part..parts.len()));
    pieces
}

/// The transaction of `txn`'s comparisons `cs` and writes `os`, in their original order.
fn piece(txn: &Txn, cs: &[usize], os: &[usize], parts: Range<usize>) -> Piece {
    let (mut cs, mut os) = (cs.to_vec(), os.to_vec());
    cs.sort_unstable();
    os.sort_unstable();
    Piece {
        txn: Txn {
            compares: cs.iter().map(|&i| txn.compares[i].clone()).collect(),
            ops: os.iter().map(|&i| txn.ops[i].clone()).collect(),
        },
        parts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A write of a guard, a head record and `n` parts of (1 comparison, `w` writes) each.
    fn write(n: usize, w: usize, value: usize) -> (Txn, Vec<Part>) {
        let mut txn = Txn::new()
            .expect("/workloads/w", 7)
            .expect("/leader", 3)
            .expect("/counters/w", 2)
            .put("/counters/w", "9");
        let mut parts = Vec::new();
        for i in 0..n {
            let m = Mark::at(&txn);
            txn = txn.expect(format!("/a/{i}"), 0);
            for j in 0..w {
                txn = txn.put(format!("/a/{i}/{j}"), "x".repeat(value));
            }
            parts.push(Part::since(m, &txn));
        }
        txn = txn.put("/loops/w", "{}");
        (txn, parts)
    }

    #[test]
    fn a_transaction_that_fits_is_left_as_it_is() {
        let (txn, parts) = write(40, 3, 10);
        assert!(TxnLimits::ETCD_DEFAULT.fits(&txn));
        let pieces = split(&txn, 2, &parts, &TxnLimits::ETCD_DEFAULT);
        assert_eq!(pieces, [Piece { txn, parts: 0..40 }]);
    }

    #[test]
    fn forty_three_copies_of_three_writes_need_two_transactions() {
        // The case: 43 copies, an assignment, a placement and an event each, are 129
        // writes and more, over a default etcd's 128.
        let (txn, parts) = write(43, 3, 10);
        assert!(!TxnLimits::ETCD_DEFAULT.fits(&txn));
        let pieces = split(&txn, 2, &parts, &TxnLimits::ETCD_DEFAULT);
        assert_eq!(pieces.len(), 2);
        // The head writes 2 (counter and loop record), each part 3: 42 parts make 128.
        assert_eq!(pieces[0].parts, 0..42);
        assert_eq!(pieces[0].txn.ops.len(), 128);
        assert_eq!(pieces[1].parts, 42..43);
        // The head goes first; the later piece repeats only the guards.
        assert_eq!(pieces[0].txn.compares[2].key, "/counters/w");
        assert_eq!(
            pieces[1]
                .txn
                .compares
                .iter()
                .map(|c| c.key.as_str())
                .collect::<Vec<_>>(),
            ["/workloads/w", "/leader", "/a/42"]
        );
        assert_eq!(
            pieces[0].txn.ops.last().unwrap(),
            &Op::Put {
                key: "/loops/w".into(),
                value: "{}".into(),
                lease: None
            }
        );
    }

    #[test]
    fn appends_that_fit_count_operations_and_bytes() {
        let entries = |n: usize, value: usize| -> Vec<(String, String)> {
            (0..n)
                .map(|i| (format!("/events/{i}"), "x".repeat(value)))
                .collect()
        };
        let l = TxnLimits::ETCD_DEFAULT;
        assert_eq!(appends_that_fit(&entries(0, 1), &l), 0);
        assert_eq!(appends_that_fit(&entries(100, 10), &l), 100);
        assert_eq!(appends_that_fit(&entries(300, 10), &l), 128);
        let big = entries(10, 500 * 1024);
        let n = appends_that_fit(&big, &l);
        assert_eq!(n, 2);
        let txn = big[..n].iter().fold(Txn::new(), |t, (k, v)| {
            t.expect(k.clone(), 0).put(k.clone(), v.clone())
        });
        assert!(l.fits(&txn));
        assert_eq!(appends_that_fit(&entries(3, 2 << 20), &l), 1);
    }

    #[test]
    fn big_values_split_by_bytes() {
        let (txn, parts) = write(10, 1, 400 * 1024);
        let pieces = split(&txn, 2, &parts, &TxnLimits::ETCD_DEFAULT);
        assert_eq!(
            pieces.len(),
            4,
            "{:?}",
            pieces.iter().map(|p| &p.parts).collect::<Vec<_>>()
        );
        assert!(pieces.iter().all(|p| TxnLimits::ETCD_DEFAULT.fits(&p.txn)));
    }

    #[test]
    fn a_part_too_big_alone_gets_a_transaction_of_its_own() {
        let (txn, parts) = write(3, 1, 2 << 20);
        let pieces = split(&txn, 2, &parts, &TxnLimits::ETCD_DEFAULT);
        assert_eq!(pieces.len(), 3);
        assert!(pieces.iter().all(|p| p.parts.len() == 1));
    }

    proptest! {
        /// Over random writes and limits: every piece fits unless it carries one part only,
        /// every part lands whole in exactly one piece, in order, and the pieces together
        /// write exactly what the whole did, the head once.
        #[test]
        fn pieces_fit_and_together_write_the_whole(
            n in 0usize..200,
            w in 1usize..5,
            value in 0usize..5000,
            max_ops in 8usize..200,
            max_kib in 130usize..2048,
        ) {
            let limits = TxnLimits { max_ops, max_bytes: max_kib * 1024 };
            let (txn, parts) = write(n, w, value);
            let pieces = split(&txn, 2, &parts, &limits);
            let mut next = 0;
            let mut ops = Vec::new();
            for p in &pieces {
                prop_assert_eq!(p.parts.start, next);
                next = p.parts.end;
                prop_assert!(limits.fits(&p.txn) || p.parts.len() <= 1);
                if pieces.len() > 1 {
                    prop_assert_eq!(&p.txn.compares[0].key, "/workloads/w");
                    prop_assert_eq!(&p.txn.compares[1].key, "/leader");
                }
                ops.extend(p.txn.ops.iter().cloned());
            }
            prop_assert_eq!(next, parts.len());
            let mut want = txn.ops.clone();
            want.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
            ops.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
            prop_assert_eq!(ops, want);
        }
    }
}
