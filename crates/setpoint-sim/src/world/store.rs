//! The general engine's containers, shaped to how [`crate::world`] reads them (issue 24).
//!
//! The engine used ordered B-tree maps and sets for all of them; callgrind put a third of a
//! Monte Carlo run in their insertions, removals and searches (docs/performance-sweeps.md).
//! What each container is asked for decides its shape:
//! - [`CopySet`]: a set of copy identities (dense, from 0), read in ascending order (the oldest
//!   copies first), by membership and by size: a two-level bitset.
//! - [`EventQueue`]: the time-ordered queue of what happens next, popped in key order, with
//!   removal of a few known entries (a snapshot replaced in flight): a calendar of the next 256
//!   seconds (most delays and startups are shorter) with first-in first-out queues per second,
//!   and a binary heap beyond it; removed entries are skipped when they are reached.
//! - [`Transit`]: how many reports made at each second are on their way, asked only for the
//!   earliest such second. Reports are made at the engine's current time, which never goes
//!   back, so the seconds arrive in order: a deque of counts.
//!
//! Each keeps the order the engine's B-tree gave, so every output stays byte for byte the same
//! (`scripts/engine-same.sh`).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use setpoint_core::Time;

/// A set of copy identities, iterated in ascending order.
#[derive(Debug, Clone, Default)]
pub(crate) struct CopySet {
    /// Bit `id % 64` of word `id / 64` is set when `id` is in the set.
    words: Vec<u64>,
    /// Bit `i % 64` of word `i / 64` is set when `words[i]` is not zero: iteration skips 4,096
    /// absent identities per zero word of this level.
    summary: Vec<u64>,
    len: usize,
}

impl CopySet {
    /// Empties the set, keeping its memory.
    pub(crate) fn clear(&mut self) {
        self.words.clear();
        self.summary.clear();
        self.len = 0;
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn contains(&self, id: u64) -> bool {
        let w = (id / 64) as usize;
        self.words
            .get(w)
            .is_some_and(|&word| word >> (id % 64) & 1 == 1)
    }

    /// Adds `id`; returns whether it was absent.
    #[inline]
    pub(crate) fn insert(&mut self, id: u64) -> bool {
        let w = (id / 64) as usize;
        if w >= self.words.len() {
            self.grow(w);
        }
        let bit = 1u64 << (id % 64);
        if self.words[w] & bit != 0 {
            return false;
        }
        self.words[w] |= bit;
        self.summary[w / 64] |= 1 << (w % 64);
        self.len += 1;
        true
    }

    #[cold]
    fn grow(&mut self, w: usize) {
        self.words.resize(w + 1, 0);
        self.summary.resize(w / 64 + 1, 0);
    }

    /// Removes `id`; returns whether it was present.
    #[inline]
    pub(crate) fn remove(&mut self, id: u64) -> bool {
        let w = (id / 64) as usize;
        let bit = 1u64 << (id % 64);
        match self.words.get_mut(w) {
            Some(word) if *word & bit != 0 => {
                *word &= !bit;
                if *word == 0 {
                    self.summary[w / 64] &= !(1 << (w % 64));
                }
                self.len -= 1;
                true
            }
            _ => false,
        }
    }

    /// Appends the `n` least identities (all of them if fewer) to `out`, in ascending order.
    ///
    /// The loops of [`CopySet::iter`] written out: taking the oldest copies through that
    /// iterator's nested adaptors cost about 44 instructions a copy, a tenth of a Monte Carlo
    /// run of the general engine (callgrind, issue 24 part 4).
    pub(crate) fn first_into(&self, n: usize, out: &mut Vec<u64>) {
        let mut left = n.min(self.len);
        if left == 0 {
            return;
        }
        out.reserve(left);
        for (s, &summary) in self.summary.iter().enumerate() {
            let mut words = summary;
            while words != 0 {
                let w = s * 64 + words.trailing_zeros() as usize;
                words &= words - 1;
                let mut bits = self.words[w];
                while bits != 0 {
                    out.push((w * 64) as u64 + u64::from(bits.trailing_zeros()));
                    left -= 1;
                    if left == 0 {
                        return;
                    }
                    bits &= bits - 1;
                }
            }
        }
    }

    /// Word `w` of the bitset: bit `b` is set when identity `64 w + b` is in the set.
    #[inline]
    pub(crate) fn word(&self, w: usize) -> u64 {
        self.words.get(w).copied().unwrap_or(0)
    }

    /// The first word at or after index `from` with an identity in it, and its index: the
    /// identities in ascending order, 64 at a time.
    #[inline]
    pub(crate) fn next_word(&self, from: usize) -> Option<(usize, u64)> {
        let mut s = from / 64;
        let mut bits = *self.summary.get(s)? & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                let w = s * 64 + bits.trailing_zeros() as usize;
                return Some((w, self.words[w]));
            }
            s += 1;
            bits = *self.summary.get(s)?;
        }
    }

    /// Adds the identities of `mask`, a word at index `w` ([`CopySet::word`]).
    #[inline]
    pub(crate) fn insert_word(&mut self, w: usize, mask: u64) {
        if mask == 0 {
            return;
        }
        if w >= self.words.len() {
            self.grow(w);
        }
        self.len += (mask & !self.words[w]).count_ones() as usize;
        self.words[w] |= mask;
        self.summary[w / 64] |= 1 << (w % 64);
    }

    /// Removes the identities of `mask`, a word at index `w` ([`CopySet::word`]).
    #[inline]
    pub(crate) fn remove_word(&mut self, w: usize, mask: u64) {
        let Some(word) = self.words.get_mut(w) else {
            return;
        };
        self.len -= (*word & mask).count_ones() as usize;
        *word &= !mask;
        if *word == 0 {
            self.summary[w / 64] &= !(1 << (w % 64));
        }
    }

    /// Adds the identities `lo` to `hi − 1`, a word at a time.
    #[inline]
    pub(crate) fn insert_range(&mut self, lo: u64, hi: u64) {
        for (w, mask) in range_words(lo, hi) {
            self.insert_word(w, mask);
        }
    }

    /// The identities in ascending order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.summary
            .iter()
            .enumerate()
            .flat_map(|(s, &bits)| ones(bits).map(move |b| s * 64 + b))
            .flat_map(|w| ones(self.words[w]).map(move |b| (w * 64 + b) as u64))
    }
}

/// The identities `lo` to `hi − 1` as words of a bitset ([`CopySet::word`]): each word's
/// index and the mask of the range's identities in it, in ascending order.
#[inline]
pub(crate) fn range_words(lo: u64, hi: u64) -> impl Iterator<Item = (usize, u64)> {
    let mut id = lo;
    std::iter::from_fn(move || {
        (id < hi).then(|| {
            let w = id / 64;
            let from = id % 64;
            let to = (hi - w * 64).min(64);
            id = (w + 1) * 64;
            (w as usize, (u64::MAX >> (64 - (to - from))) << from)
        })
    })
}

/// The lowest `k` set bits of `bits` (all of them if fewer).
#[inline]
pub(crate) fn lowest_ones(bits: u64, k: usize) -> u64 {
    if bits.count_ones() as usize <= k {
        return bits;
    }
    let mut rest = bits;
    for _ in 0..k {
        rest &= rest - 1;
    }
    bits & !rest
}

/// The positions of the set bits of `bits`, lowest first.
pub(crate) fn ones(mut bits: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (bits != 0).then(|| {
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            b
        })
    })
}

/// A queue key: the second, the class (the order of kinds within a second), and a sequence
/// number that keeps insertion order within both and makes every key unique.
pub(crate) type Key = (Time, u8, u64);

/// One queued entry of the overflow heap; ordered so that the heap's top is the least key.
#[derive(Debug, Clone, Copy)]
struct Entry<E> {
    key: Key,
    ev: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        other.key.cmp(&self.key)
    }
}

/// Seconds the calendar holds ahead of the current one; a power of two.
const SLOTS: usize = 256;
/// Classes of a key (`READY`, `SCRIPTED`, `ARRIVE` in [`crate::world`]).
const CLASSES: usize = 3;

/// A priority queue of events by [`Key`], least first: a calendar of one slot per second for
/// the next [`SLOTS`] seconds, each slot a first-in first-out queue per class, and a binary
/// heap for what lies further ahead.
///
/// Within a second and a class the least key is the earliest pushed, so a slot's queues pop in
/// key order without comparing. An entry of the heap moves into its slot as soon as its second
/// comes inside the calendar, before anything can be pushed there directly (a push goes to the
/// calendar only for a second inside it, and the calendar only moves forward), so within a
/// slot's class the moved entries come first, in key order, as they should.
#[derive(Debug, Clone)]
pub(crate) struct EventQueue<E> {
    /// Slot `at % SLOTS` holds the entries of second `at`, for `base <= at < base + SLOTS`.
    slots: Vec<[Fifo<(u64, E)>; CLASSES]>,
    /// Bit `i % 64` of word `i / 64`: slot `i` holds an entry.
    full: [u64; SLOTS / 64],
    /// The first second the calendar holds.
    base: Time,
    /// Entries at `base + SLOTS` or later.
    later: BinaryHeap<Entry<E>>,
    /// Sequence numbers of entries removed before they were popped, sorted (a snapshot in
    /// flight replaced by a later one: a handful at a time).
    removed: Vec<u64>,
    seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            slots: Vec::new(),
            full: [0; SLOTS / 64],
            base: 0,
            later: BinaryHeap::new(),
            removed: Vec::new(),
            seq: 0,
        }
    }
}

impl<E: Copy> EventQueue<E> {
    /// Empties the queue, keeping its memory; sequence numbers and time start again.
    pub(crate) fn clear(&mut self) {
        // Only full slots hold anything.
        for (w, &bits) in self.full.iter().enumerate() {
            for b in ones(bits) {
                self.slots[w * 64 + b].iter_mut().for_each(Fifo::clear);
            }
        }
        self.full = [0; SLOTS / 64];
        self.base = 0;
        self.later.clear();
        self.removed.clear();
        self.seq = 0;
    }

    fn in_calendar(&self, at: Time) -> bool {
        at < self.base.saturating_add(SLOTS as Time)
    }

    #[inline]
    fn put(&mut self, at: Time, class: u8, seq: u64, ev: E) {
        if self.slots.is_empty() {
            self.slots.resize_with(SLOTS, Default::default);
        }
        let i = (at % SLOTS as Time) as usize;
        self.slots[i][class as usize].push((seq, ev));
        self.full[i / 64] |= 1 << (i % 64);
    }

    /// Queues `ev` at second `at` in `class`, after every entry queued before at the same
    /// second and class. `at` is no earlier than the last second popped. Returns its key.
    #[inline]
    pub(crate) fn push(&mut self, at: Time, class: u8, ev: E) -> Key {
        debug_assert!(at >= self.base && (class as usize) < CLASSES);
        self.seq += 1;
        let key = (at, class, self.seq);
        if self.in_calendar(at) {
            self.put(at, class, self.seq, ev);
        } else {
            self.later.push(Entry { key, ev });
        }
        key
    }

    /// [`EventQueue::push`], first offering `ev` to the last entry not yet popped at the same
    /// second and class: when `absorb(last, &ev)` takes it in (returns `true`), no entry is
    /// added. That entry is the one `ev` would be popped right after, so an entry that stands
    /// for several, dispatched in their order, pops them in the order they had (issue 24, part
    /// 6: copies of one batch start and report in one entry). Only entries that are never
    /// removed may absorb or be absorbed: a merged `ev` has no key of its own.
    #[inline(always)]
    pub(crate) fn push_merged(
        &mut self,
        at: Time,
        class: u8,
        ev: E,
        absorb: impl FnOnce(&mut E, &E) -> bool,
    ) {
        if self.in_calendar(at) && !self.slots.is_empty() {
            let i = (at % SLOTS as Time) as usize;
            if let Some((_, last)) = self.slots[i][class as usize].back_mut() {
                if absorb(last, &ev) {
                    // Counted as a push: the tests measure the work in pushes.
                    self.seq += 1;
                    return;
                }
            }
        }
        self.push(at, class, ev);
    }

    /// How many entries were pushed since the queue was last cleared.
    #[cfg(test)]
    pub(crate) fn pushes(&self) -> u64 {
        self.seq
    }

    /// Takes out the entry queued under `key` before it is popped. The caller holds its event:
    /// the entry is only marked, and skipped when it is reached.
    pub(crate) fn remove(&mut self, key: Key) {
        let i = self.removed.partition_point(|&s| s < key.2);
        self.removed.insert(i, key.2);
    }

    /// Whether `seq` was removed; forgets it if so, as it is being dropped.
    fn take_removed(&mut self, seq: u64) -> bool {
        take_removed(&mut self.removed, seq)
    }

    /// Moves the calendar to start at `t` (no entry lies before it), and the heap's entries that
    /// are now inside it into their slots.
    #[inline]
    fn advance(&mut self, t: Time) {
        // Called on every pop: the common case, a calendar already at `t`, inline.
        if t > self.base {
            self.advance_to(t);
        }
    }

    fn advance_to(&mut self, t: Time) {
        self.base = t;
        while let Some(top) = self.later.peek() {
            if !self.in_calendar(top.key.0) {
                break;
            }
            let Entry { key, ev } = self.later.pop().expect("peeked");
            self.put(key.0, key.1, key.2, ev);
        }
    }

    /// The first full slot at or after `base`, within the calendar: its second.
    fn first_full(&self) -> Option<Time> {
        let start = (self.base % SLOTS as Time) as usize;
        // Slots from `start` to the end of the ring, then from its start: each at most once.
        for k in 0..=SLOTS / 64 {
            let w = (start / 64 + k) % (SLOTS / 64);
            let mut bits = self.full[w];
            if k == 0 {
                bits &= u64::MAX << (start % 64);
            } else if k == SLOTS / 64 {
                bits &= !(u64::MAX << (start % 64));
            }
            if bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                let ahead = (i + SLOTS - start) % SLOTS;
                return Some(self.base + ahead as Time);
            }
        }
        None
    }

    /// Drops removed entries from the front of the slot of second `at`; returns whether an
    /// entry is left there.
    fn settle_slot(&mut self, at: Time) -> bool {
        let i = (at % SLOTS as Time) as usize;
        for c in 0..CLASSES {
            while let Some(&(seq, _)) = self.slots[i][c].front() {
                if !self.take_removed(seq) {
                    return true;
                }
                self.slots[i][c].pop();
            }
        }
        self.full[i / 64] &= !(1 << (i % 64));
        false
    }

    /// The second of the least entry.
    #[inline]
    pub(crate) fn next_time(&mut self) -> Option<Time> {
        // The common case inline: an entry in the calendar and nothing removed.
        if self.removed.is_empty() {
            if let Some(at) = self.first_full() {
                return Some(at);
            }
        }
        self.next_time_slow()
    }

    fn next_time_slow(&mut self) -> Option<Time> {
        loop {
            match self.first_full() {
                Some(at) if self.removed.is_empty() || self.settle_slot(at) => return Some(at),
                Some(_) => continue,
                None => {}
            }
            // Nothing in the calendar: the heap's least, past removed entries.
            loop {
                let (at, seq) = self.later.peek().map(|top| (top.key.0, top.key.2))?;
                if !self.take_removed(seq) {
                    return Some(at);
                }
                self.later.pop();
            }
        }
    }

    /// Whether nothing is queued at second `t` (no earlier than any entry), as far as the
    /// calendar tells without moving: `false` when it cannot tell.
    ///
    /// Within the calendar's seconds a slot holds only its own second's entries, and the heap
    /// only entries beyond the calendar (an entry moves into its slot as the calendar moves
    /// forward, which only [`EventQueue::pop_at`] does): so an empty slot for `t` inside the
    /// calendar means nothing at `t`, removed entries aside (then `pop_at` would find nothing
    /// either).
    #[inline]
    pub(crate) fn surely_none_at(&self, t: Time) -> bool {
        if self.slots.is_empty() {
            return self.later.is_empty();
        }
        if t < self.base || !self.in_calendar(t) {
            return false;
        }
        let i = (t % SLOTS as Time) as usize;
        self.full[i / 64] >> (i % 64) & 1 == 0
    }

    /// Whether the entries at second `t`, the second of the least entry, are all of the last
    /// class (`ARRIVE` in [`crate::world`]), as far as the calendar tells without moving:
    /// `false` when it cannot tell (`t` outside the calendar, or entries removed).
    #[inline]
    pub(crate) fn only_last_class_at(&self, t: Time) -> bool {
        if self.slots.is_empty() || !self.removed.is_empty() || !self.in_calendar(t) {
            return false;
        }
        let i = (t % SLOTS as Time) as usize;
        let slot = &self.slots[i];
        self.full[i / 64] >> (i % 64) & 1 == 1 && slot[..CLASSES - 1].iter().all(Fifo::is_empty)
    }

    /// Pops the least entry if it is due at `t`, which is no earlier than any entry.
    #[inline]
    pub(crate) fn pop_at(&mut self, t: Time) -> Option<E> {
        self.advance(t);
        if self.slots.is_empty() {
            return None;
        }
        let i = (t % SLOTS as Time) as usize;
        if self.full[i / 64] >> (i % 64) & 1 == 0 {
            return None;
        }
        let slot = &mut self.slots[i];
        for c in 0..CLASSES {
            while let Some((seq, ev)) = slot[c].pop() {
                if !take_removed(&mut self.removed, seq) {
                    if slot.iter().all(Fifo::is_empty) {
                        self.full[i / 64] &= !(1 << (i % 64));
                    }
                    return Some(ev);
                }
            }
        }
        self.full[i / 64] &= !(1 << (i % 64));
        None
    }
}

/// Whether `seq` is in `removed` (sorted); forgets it if so, as it is being dropped.
#[inline]
fn take_removed(removed: &mut Vec<u64>, seq: u64) -> bool {
    if removed.is_empty() {
        return false;
    }
    match removed.binary_search(&seq) {
        Ok(i) => {
            removed.remove(i);
            true
        }
        Err(_) => false,
    }
}

/// A first-in first-out queue that is filled and then drained: a `Vec` read from a moving
/// head, emptied when the head reaches its end. A calendar slot's queue is drained within its
/// second (pushes while it drains go behind), so it never holds more than that second's
/// entries; the ring arithmetic of a `VecDeque` on each pop was a tenth of the queue's work
/// (callgrind, issue 24 part 4).
#[derive(Debug, Clone)]
struct Fifo<T> {
    items: Vec<T>,
    head: usize,
}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Fifo {
            items: Vec::new(),
            head: 0,
        }
    }
}

impl<T: Copy> Fifo<T> {
    fn clear(&mut self) {
        self.items.clear();
        self.head = 0;
    }

    fn is_empty(&self) -> bool {
        self.head == self.items.len()
    }

    fn push(&mut self, x: T) {
        self.items.push(x);
    }

    fn front(&self) -> Option<&T> {
        self.items.get(self.head)
    }

    /// The last item not yet popped.
    #[inline]
    fn back_mut(&mut self) -> Option<&mut T> {
        if self.is_empty() {
            None
        } else {
            self.items.last_mut()
        }
    }

    #[inline]
    fn pop(&mut self) -> Option<T> {
        let x = *self.items.get(self.head)?;
        self.head += 1;
        if self.head == self.items.len() {
            self.clear();
        }
        Some(x)
    }
}

/// How many reports made at each second are on their way, the earliest second first.
#[derive(Debug, Clone, Default)]
pub(crate) struct Transit {
    /// `(made, count)` from `head` on, ascending by `made`; counts may be 0 behind a non-zero
    /// first one. Entries before `head` are spent: a `Vec` read from a moving head, as
    /// [`Fifo`], searched as one slice (the `VecDeque` it was searched as two).
    made: Vec<(Time, u64)>,
    head: usize,
}

impl Transit {
    pub(crate) fn clear(&mut self) {
        self.made.clear();
        self.head = 0;
    }

    /// One more report made at `t`, which is no earlier than any report made before.
    #[inline]
    pub(crate) fn send(&mut self, t: Time) {
        self.send_many(t, 1);
    }

    /// `count` more reports made at `t`, which is no earlier than any report made before.
    #[inline]
    pub(crate) fn send_many(&mut self, t: Time, count: u64) {
        match self.made[self.head..].last_mut() {
            Some((at, n)) if *at == t => *n += count,
            _ => {
                debug_assert!(self.made.last().is_none_or(|&(at, _)| at < t));
                self.made.push((t, count));
            }
        }
    }

    /// `count` reports made at `made` arrived.
    #[inline]
    pub(crate) fn arrive(&mut self, made: Time, count: u64) {
        let live = &mut self.made[self.head..];
        // Under one fixed delay reports arrive in the order they were made: the first.
        let i = match live.first() {
            Some(&(at, _)) if at == made => 0,
            _ => live.partition_point(|&(at, _)| at < made),
        };
        if let Some((at, n)) = live.get_mut(i) {
            if *at == made {
                // As `count` arrivals one by one, each taking one while there is one.
                *n = n.saturating_sub(count);
            }
        }
        while self.made.get(self.head).is_some_and(|&(_, n)| n == 0) {
            self.head += 1;
        }
        if self.head == self.made.len() {
            self.clear();
        } else if self.head >= 64 && self.head * 2 >= self.made.len() {
            // Most of it spent: keep what is on its way only.
            self.made.drain(..self.head);
            self.head = 0;
        }
    }

    /// The earliest second at which a report still on its way was made.
    pub(crate) fn earliest(&self) -> Option<Time> {
        self.made.get(self.head).map(|&(at, _)| at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    proptest! {
        /// The bitset answers as the B-tree set it replaced, whatever the operations.
        #[test]
        fn a_copy_set_is_an_ordered_set(ops in prop::collection::vec((any::<bool>(), 0u64..9000), 0..400)) {
            let mut set = CopySet::default();
            let mut model = BTreeSet::new();
            for (add, id) in ops {
                if add {
                    prop_assert_eq!(set.insert(id), model.insert(id));
                } else {
                    prop_assert_eq!(set.remove(id), model.remove(&id));
                }
                prop_assert_eq!(set.len(), model.len());
                prop_assert_eq!(set.contains(id), model.contains(&id));
            }
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            for n in [0, 1, 2, 63, 64, 65, 200, usize::MAX] {
                let mut first = vec![7];
                set.first_into(n, &mut first);
                let want: Vec<u64> = std::iter::once(7).chain(model.iter().copied().take(n)).collect();
                prop_assert_eq!(first, want);
            }
            let copy = set.clone();
            prop_assert_eq!(copy.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            // Word by word, from every start: the same identities in the same order.
            for from in [0, 1, 63, 64, 65, 100, 140, 141] {
                let mut by_words = Vec::new();
                let mut w = from;
                while let Some((i, bits)) = set.next_word(w) {
                    prop_assert!(i >= from && bits != 0);
                    prop_assert_eq!(bits, set.word(i));
                    by_words.extend(ones(bits).map(|b| (i * 64 + b) as u64));
                    w = i + 1;
                }
                let want: Vec<u64> = model.range(from as u64 * 64..).copied().collect();
                prop_assert_eq!(by_words, want);
            }
        }

        /// Adding a word of identities at once is adding each of them.
        #[test]
        fn inserting_a_word_inserts_its_identities(
            ids in prop::collection::vec(0u64..9000, 0..100),
            words in prop::collection::vec((0usize..150, any::<u64>()), 0..20),
        ) {
            let mut set = CopySet::default();
            let mut model = BTreeSet::new();
            for id in ids {
                set.insert(id);
                model.insert(id);
            }
            for (w, mask) in words {
                set.insert_word(w, mask);
                model.extend(ones(mask).map(|b| (w * 64 + b) as u64));
                prop_assert_eq!(set.len(), model.len());
            }
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            let mut first = Vec::new();
            set.first_into(usize::MAX, &mut first);
            prop_assert_eq!(first, model.into_iter().collect::<Vec<_>>());
        }

        /// Ranges and words added and removed at once, against each identity alone.
        #[test]
        fn ranges_and_words_change_the_set_as_their_identities(
            ops in prop::collection::vec((0u8..3, 0u64..5000, 0u64..300, any::<u64>()), 0..60),
        ) {
            let mut set = CopySet::default();
            let mut model = BTreeSet::new();
            for (op, at, n, mask) in ops {
                match op {
                    0 => {
                        set.insert_range(at, at + n);
                        model.extend(at..at + n);
                    }
                    1 => {
                        let w = (at / 64) as usize;
                        set.remove_word(w, mask);
                        for b in ones(mask) {
                            model.remove(&((w * 64 + b) as u64));
                        }
                    }
                    _ => {
                        set.insert(at);
                        model.insert(at);
                    }
                }
                prop_assert_eq!(set.len(), model.len());
            }
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            let mut first = Vec::new();
            set.first_into(usize::MAX, &mut first);
            prop_assert_eq!(first, model.into_iter().collect::<Vec<_>>());
        }

        /// The lowest `k` set bits, against picking them one by one.
        #[test]
        fn lowest_ones_are_the_first_k_set_bits(bits in any::<u64>(), k in 0usize..70) {
            let want = ones(bits).take(k).fold(0u64, |m, b| m | 1 << b);
            prop_assert_eq!(lowest_ones(bits, k), want);
        }

        /// The heap pops in the B-tree map's key order, removed entries left out, also when
        /// entries are pushed while it drains.
        #[test]
        fn the_event_queue_pops_in_key_order(
            ops in prop::collection::vec((0u64..600, 0u8..3, 0u8..5), 1..300),
        ) {
            // Twice over, the second time after `clear`: a thread's next run reuses the queue.
            let mut q = EventQueue::default();
            for _ in 0..2 {
                q.clear();
                let mut model: BTreeMap<Key, u32> = BTreeMap::new();
                let mut keys = Vec::new();
                let mut t = 0;
                for (i, &(dt, class, op)) in ops.iter().enumerate() {
                    match op {
                        0 | 1 => {
                            // Mostly soon, sometimes past the calendar's 256 seconds.
                            let at = t + if op == 0 { dt % 30 } else { dt };
                            let key = q.push(at, class, i as u32);
                            model.insert(key, i as u32);
                            keys.push(key);
                        }
                        2 => {
                            if let Some(key) = keys.pop() {
                                if model.remove(&key).is_some() {
                                    q.remove(key);
                                }
                            }
                        }
                        3 => {
                            // Drain one second, pushing at it while it drains.
                            prop_assert_eq!(q.next_time(), model.keys().next().map(|k| k.0));
                            if let Some(at) = q.next_time() {
                                t = at;
                                let mut pushed = false;
                                while let Some(ev) = q.pop_at(t) {
                                    let (k, v) = model.pop_first().unwrap();
                                    prop_assert_eq!((k.0, v), (t, ev));
                                    if !pushed {
                                        pushed = true;
                                        let key = q.push(t, 0, 10_000 + i as u32);
                                        model.insert(key, 10_000 + i as u32);
                                    }
                                }
                            }
                        }
                        _ => {
                            prop_assert_eq!(q.next_time(), model.keys().next().map(|k| k.0));
                        }
                    }
                }
                while let Some(at) = q.next_time() {
                    let ev = q.pop_at(at).unwrap();
                    let (k, v) = model.pop_first().unwrap();
                    prop_assert_eq!((k.0, v), (at, ev));
                }
                prop_assert!(model.is_empty());
            }
        }

        /// Entries that absorb the next ones pop, expanded, as every entry pushed alone would:
        /// a run of copies `(kind, first, n)` takes in a run of the same kind that starts right
        /// after it, and pushes made while a second drains go behind, as in the engine.
        #[test]
        fn merged_entries_pop_as_the_entries_they_stand_for(ops in prop::collection::vec((0u64..400, 0u8..3, 0u8..4, 1u32..4), 0..300)) {
            // (kind, first copy, copies): kind 3 never merges, as a snapshot's entry.
            type Run = (u8, u64, u32);
            let absorb = |last: &mut Run, next: &Run| {
                let ok = last.0 == next.0 && last.0 != 3 && last.1 + u64::from(last.2) == next.1;
                if ok {
                    last.2 += next.2;
                }
                ok
            };
            let expand = |(kind, first, n): Run| (first..first + u64::from(n)).map(move |id| (kind, id));
            let mut q: EventQueue<Run> = EventQueue::default();
            let mut alone: EventQueue<Run> = EventQueue::default();
            let mut next_id = [0u64; 4];
            let mut t = 0;
            for (i, &(dt, class, kind, n)) in ops.iter().enumerate() {
                if i % 5 == 4 {
                    // Drain the next second on both, pushing one run at it while it drains.
                    prop_assert_eq!(q.next_time(), alone.next_time());
                    let Some(at) = q.next_time() else { continue };
                    t = at;
                    // Both in step: each entry of `q`, expanded, against as many of `alone`.
                    let mut pushed = false;
                    while let Some(run) = q.pop_at(t) {
                        for one in expand(run) {
                            let single = alone.pop_at(t).map(|(kind, id, _)| (kind, id));
                            prop_assert_eq!(Some(one), single);
                        }
                        if !pushed {
                            pushed = true;
                            let k = kind as usize;
                            let run = (kind, next_id[k], n);
                            next_id[k] += u64::from(n);
                            q.push_merged(t, class, run, absorb);
                            for one in expand(run) {
                                alone.push(t, class, (one.0, one.1, 1));
                            }
                        }
                    }
                    prop_assert_eq!(alone.pop_at(t), None);
                } else {
                    // Mostly soon and often at one second, sometimes past the calendar.
                    let at = t + if dt < 300 { dt % 4 } else { dt };
                    let k = kind as usize;
                    // Now and then a gap: the next run is not the one right after.
                    next_id[k] += u64::from(dt % 7 == 0);
                    let run = (kind, next_id[k], n);
                    next_id[k] += u64::from(n);
                    q.push_merged(at, class, run, absorb);
                    for one in expand(run) {
                        alone.push(at, class, (one.0, one.1, 1));
                    }
                }
            }
            let (mut got, mut want) = (Vec::new(), Vec::new());
            while let Some(at) = q.next_time() {
                while let Some(run) = q.pop_at(at) {
                    got.extend(expand(run).map(|x| (at, x)));
                }
            }
            while let Some(at) = alone.next_time() {
                while let Some(run) = alone.pop_at(at) {
                    want.extend(expand(run).map(|x| (at, x)));
                }
            }
            prop_assert_eq!(got, want);
        }

        /// The earliest second with a report on its way, as the B-tree map of counts gave it.
        #[test]
        fn transit_keeps_the_earliest_second(ops in prop::collection::vec((0u64..3, any::<bool>(), 0usize..50), 0..300)) {
            let mut tr = Transit::default();
            let mut model: BTreeMap<Time, u64> = BTreeMap::new();
            let mut sent: Vec<Time> = Vec::new();
            let mut t = 0;
            for (dt, send, pick) in ops {
                if send || sent.is_empty() {
                    t += dt;
                    // Sometimes a batch's reports at once.
                    let count = 1 + (pick % 4 == 0) as usize * 2;
                    tr.send_many(t, count as u64);
                    *model.entry(t).or_insert(0) += count as u64;
                    sent.extend(std::iter::repeat_n(t, count));
                } else {
                    let made = sent.swap_remove(pick % sent.len());
                    // Sometimes every report made at that second at once.
                    let count = if pick % 3 == 0 {
                        let k = sent.iter().filter(|&&m| m == made).count();
                        sent.retain(|&m| m != made);
                        k as u64 + 1
                    } else {
                        1
                    };
                    tr.arrive(made, count);
                    let n = model.get_mut(&made).unwrap();
                    *n -= count;
                    if *n == 0 {
                        model.remove(&made);
                    }
                }
                prop_assert_eq!(tr.earliest(), model.keys().next().copied());
            }
        }
    }
}
