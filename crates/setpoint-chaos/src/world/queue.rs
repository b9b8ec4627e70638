//! The event queue's order, kept cheaply: items come out in (time, sequence) order, the sequence
//! being the order they were put in, as a binary heap of (time, sequence) would give them.
//!
//! Most items are due within a second (a leader's poll every 100 ms, an agent's observation
//! every second, the network's few milliseconds), and a heap sifts each of them through its
//! levels twice. Here an item due within [`WINDOW`] milliseconds of the last time taken out
//! goes to that millisecond's list, in the order put in (the sequence), and a bitmap finds the
//! next millisecond with an item. Anything else (a fault's start, a renewal or a sync seconds
//! away, an item due before the last time taken out) waits in a heap of (time, sequence), and
//! moves to its list, in heap order, as soon as its millisecond comes within the window: before
//! any item can be put in that list directly, so each list stays in sequence order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// How many milliseconds the lists cover, from the last time taken out.
pub(super) const WINDOW: u64 = 1 << 10;

const NONE: u32 = u32::MAX;

/// A queue of `T`, in (time, sequence) order: see the [module docs](self). `T` is small and
/// plain (a wake, or the slot of a larger event), so it is copied in and out of its node.
pub(super) struct Queue<T: Copy> {
    /// The next sequence number.
    seq: u64,
    /// The lists cover `base .. base + WINDOW`: `base` is the last time taken out from them.
    base: u64,
    /// Each millisecond's list, by `time % WINDOW`: its first and last node, or [`NONE`].
    heads: Vec<u32>,
    tails: Vec<u32>,
    /// Which lists hold an item.
    bits: Vec<u64>,
    /// The lists' nodes, and the free ones.
    nodes: Vec<Node<T>>,
    free: u32,
    /// Items outside the window, in (time, sequence) order.
    far: BinaryHeap<Far<T>>,
}

struct Node<T> {
    at: u64,
    item: T,
    next: u32,
}

struct Far<T> {
    at: u64,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Far<T> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<T> Eq for Far<T> {}
impl<T> PartialOrd for Far<T> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Far<T> {
    // Reversed: BinaryHeap is a max-heap and the earliest item must come out first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

impl<T: Copy> Default for Queue<T> {
    fn default() -> Self {
        Self {
            seq: 0,
            base: 0,
            heads: vec![NONE; WINDOW as usize],
            tails: vec![NONE; WINDOW as usize],
            bits: vec![0; (WINDOW / 64) as usize],
            nodes: Vec::new(),
            free: NONE,
            far: BinaryHeap::new(),
        }
    }
}

impl<T: Copy> Queue<T> {
    /// Puts `item` in, due at `at`: it comes out after every item due earlier, and after every
    /// item due at `at` put in before it.
    #[inline]
    pub(super) fn push(&mut self, at: u64, item: T) {
        self.seq += 1;
        if at >= self.base && at - self.base < WINDOW {
            self.link(at, item);
        } else {
            self.far.push(Far {
                at,
                seq: self.seq,
                item,
            });
        }
    }

    /// Takes out the earliest item, with its time.
    #[inline]
    pub(super) fn pop(&mut self) -> Option<(u64, T)> {
        // An item of the heap due before `base` comes first (the lists hold nothing before it).
        if self.far.peek().is_some_and(|f| f.at < self.base) {
            return self.far.pop().map(|f| (f.at, f.item));
        }
        match self.first_list() {
            Some(i) => {
                let (at, item) = self.unlink(i);
                self.advance(at);
                Some((at, item))
            }
            None => {
                // The lists are empty: the heap's first item is the earliest.
                let f = self.far.pop()?;
                self.advance(f.at);
                Some((f.at, f.item))
            }
        }
    }

    /// Moves the window to start at `at` (at or after `base`), and the heap's items now in it
    /// to their lists, in (time, sequence) order.
    fn advance(&mut self, at: u64) {
        self.base = at;
        while self
            .far
            .peek()
            .is_some_and(|f| f.at >= self.base && f.at - self.base < WINDOW)
        {
            let f = self.far.pop().expect("peeked");
            self.link(f.at, f.item);
        }
    }

    /// Appends `item`, due at `at` within the window, to its list.
    #[inline]
    fn link(&mut self, at: u64, item: T) {
        let node = Node {
            at,
            item,
            next: NONE,
        };
        let n = if self.free == NONE {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        } else {
            let n = self.free;
            self.free = self.nodes[n as usize].next;
            self.nodes[n as usize] = node;
            n
        };
        let i = (at % WINDOW) as usize;
        match self.tails[i] {
            NONE => {
                self.heads[i] = n;
                self.bits[i / 64] |= 1 << (i % 64);
            }
            t => self.nodes[t as usize].next = n,
        }
        self.tails[i] = n;
    }

    /// Takes out the first item of list `i`.
    #[inline]
    fn unlink(&mut self, i: usize) -> (u64, T) {
        let n = self.heads[i];
        let node = &mut self.nodes[n as usize];
        let (at, item, next) = (node.at, node.item, node.next);
        node.next = self.free;
        self.free = n;
        self.heads[i] = next;
        if next == NONE {
            self.tails[i] = NONE;
            self.bits[i / 64] &= !(1 << (i % 64));
        }
        (at, item)
    }

    /// The list of the earliest item in the window, if any: the first non-empty list from
    /// `base`'s, going round.
    #[inline]
    fn first_list(&self) -> Option<usize> {
        let words = self.bits.len();
        let start = (self.base % WINDOW) as usize;
        let (w0, b0) = (start / 64, start % 64);
        // The first word from `start`'s bit, then the words after it round to the first word
        // again (its bits before `start`, the window's latest milliseconds).
        let first = self.bits[w0] & (u64::MAX << b0);
        if first != 0 {
            return Some(w0 * 64 + first.trailing_zeros() as usize);
        }
        for k in 1..=words {
            let w = (w0 + k) % words;
            let mut word = self.bits[w];
            if w == w0 {
                word &= !(u64::MAX << b0);
            }
            if word != 0 {
                return Some(w * 64 + word.trailing_zeros() as usize);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The queue against the binary heap of (time, sequence) it replaces: random pushes (due
    /// now, within the window, beyond it, or before the last time taken out) and pops, the same
    /// items out in the same order. Linking the heap's items into the lists before their
    /// millisecond is in the window, or after an item put in directly, puts one out of order,
    /// and this fails.
    #[test]
    fn it_gives_the_items_in_the_order_of_a_heap_of_time_and_sequence() {
        #[derive(Clone, Debug)]
        enum Op {
            /// Pushes an item due this long after the last time taken out (negative: before).
            Push(i64),
            Pop,
        }
        let delay = prop_oneof![
            Just(0i64),
            0i64..8,
            0i64..(2 * WINDOW as i64),
            (WINDOW as i64 - 3)..(WINDOW as i64 + 3),
            0i64..(20 * WINDOW as i64),
            -5i64..0,
        ];
        let op = prop_oneof![
            3 => delay.prop_map(Op::Push),
            2 => Just(Op::Pop),
        ];
        proptest!(ProptestConfig::with_cases(512), |(ops in proptest::collection::vec(op, 1..400))| {
            let mut queue = Queue::default();
            let mut heap = BinaryHeap::new();
            let (mut seq, mut now, mut id) = (0u64, 0u64, 0u64);
            for op in ops.into_iter().chain(std::iter::repeat_n(Op::Pop, 400)) {
                match op {
                    Op::Push(d) => {
                        let at = now.saturating_add_signed(d);
                        seq += 1;
                        id += 1;
                        queue.push(at, id);
                        heap.push(Far { at, seq, item: id });
                    }
                    Op::Pop => {
                        let want = heap.pop().map(|f| (f.at, f.item));
                        prop_assert_eq!(queue.pop(), want);
                        if let Some((at, _)) = want {
                            now = at;
                        }
                    }
                }
            }
        });
    }
}
