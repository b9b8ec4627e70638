//! The event log: what the runtime did and when, kept in the store so that `setpoint measure`
//! can compute the lesson's metrics of a real run after the fact.
//!
//! The log is append-only. Every entry is created only if absent (a compare-and-set with
//! expected revision 0), so a repeated write changes nothing, and nothing ever changes or removes
//! an entry.
//!
//! | key | written by | when |
//! | --- | --- | --- |
//! | `/events/{w}/round/{at_ms:015}-{read:012}` | a pass, in its own transaction | every pass but an idle one that shows what the loop's last round showed, which is left out (at least one every `--round-resync`) ([`RoundEvent`]) |
//! | `/events/{w}/create/{n:012}/{read:012}` | a pass, with the assignment | a copy is created |
//! | `/events/{w}/delete/{n:012}/{inc:012}` | a pass, with the removal | a delete command removes a copy's assignment |
//! | `/events/{w}/start/{n:012}/{inc:012}` | the agent | the copy's process was spawned |
//! | `/events/{w}/ready/{n:012}/{inc:012}` | the agent | the copy became ready (running) |
//! | `/events/{w}/exit/{n:012}/{inc:012}` | the agent | the copy's process was seen to end |
//! | `/events/{w}/seen/{n:012}/{inc:012}` | the agent | a report showing the copy running was written: the ledger shows it from then on |
//! | `/events/{w}/unseen/{n:012}/{inc:012}` | the agent | a report no longer showing it running was written: it left the ledger |
//!
//! `read` is the store revision the pass read, which makes the key unique: two passes that read
//! the same revision cannot both commit a create of the same copy or the same round. `inc` is the
//! copy's incarnation, its assignment's `create_revision`. A create entry is written in the same
//! transaction as the assignment, so the entry's own `create_revision` *is* the incarnation.
//!
//! Write cost: a pass writes one transaction when it acts or what it saw changed; an idle pass
//! that saw what the last one saw writes nothing (its round is counted by `measure` on the
//! loop's grid, [`elided_rounds`]), except once every `--round-resync`. An agent writes at most
//! one transaction per tick, only in ticks where something happened to a copy or a report
//! changed the ledger.

use serde::{Deserialize, Serialize};

use crate::model::decode;
use crate::model::keys::{key, Part::Num, Part::Text};
use crate::store::{Revision, Store, StoreError, Txn};

/// The key prefix of the event log.
pub const EVENTS: &str = "/events/";

/// What happened to a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CopyEventKind {
    /// A pass created it (wrote its assignment).
    Create,
    /// A delete command removed its assignment.
    Delete,
    /// Its agent spawned its process.
    Start,
    /// It became ready: from now on it is live.
    Ready,
    /// Its process was seen to have ended.
    Exit,
    /// A report showing it running was written: the ledger shows it.
    Seen,
    /// A report no longer showing it running was written: it left the ledger.
    Unseen,
}

impl CopyEventKind {
    /// Every kind, in key order of the log.
    pub const ALL: [CopyEventKind; 7] = [
        CopyEventKind::Create,
        CopyEventKind::Delete,
        CopyEventKind::Start,
        CopyEventKind::Ready,
        CopyEventKind::Exit,
        CopyEventKind::Seen,
        CopyEventKind::Unseen,
    ];

    /// The kind's name in keys.
    pub fn name(self) -> &'static str {
        match self {
            CopyEventKind::Create => "create",
            CopyEventKind::Delete => "delete",
            CopyEventKind::Start => "start",
            CopyEventKind::Ready => "ready",
            CopyEventKind::Exit => "exit",
            CopyEventKind::Seen => "seen",
            CopyEventKind::Unseen => "unseen",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// One thing that happened to one copy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyEvent {
    /// When it happened, in store milliseconds (as closely as the writer could see it: an agent
    /// notices an exit or a readiness at its next tick).
    pub at_ms: u64,
    /// The node that runs the copy.
    pub node: String,
    /// The process id, for `start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// For `exit`: whether the copy was being stopped because its assignment was removed (a
    /// delete command). An exit that nobody commanded is a death.
    #[serde(default)]
    pub commanded: bool,
    /// For `exit`: how it ended (`signal 9`, `exit status 0`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub how: Option<String>,
}

/// One pass of a workload's loop.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundEvent {
    /// When the pass read the store, in store milliseconds.
    pub at_ms: u64,
    /// The desired count the pass worked towards.
    pub desired: u64,
    /// Copies on the ledger the pass read.
    pub on_ledger: u64,
    /// Copies in flight (created, not on the ledger yet), whoever created them.
    pub in_flight: u64,
    /// Copies the pass created.
    pub created: u64,
    /// Delete commands the pass sent, including those that reached no assignment.
    pub delete_commands: u64,
    /// The copy numbers the delete commands went to, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commanded: Vec<u64>,
    /// The fencing token of the leader that wrote the round (the `/leader` revision its writes
    /// compare), if it ran under a lease: the log shows which leader wrote what.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<Revision>,
    /// The loop period U in store milliseconds. With it, `measure` counts the idle rounds not
    /// written after this one on the grid `at_ms + k·U` ([`elided_rounds`]); 0 (a log from
    /// before idle rounds were left out) counts only the rounds written.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub period_ms: u64,
    /// Rounds of the grid since the loop's previous round entry that ran no pass or whose pass
    /// wrote no entry because it failed (an overrun skips rounds; a failed pass is a round with
    /// no entry), which `measure` must not count among the idle ones.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub missed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl RoundEvent {
    /// Whether the round did nothing: no creation and no delete command.
    pub fn is_idle(&self) -> bool {
        self.created == 0 && self.delete_commands == 0 && self.commanded.is_empty()
    }

    /// Whether `self` shows the same as `earlier`: the same desired count, ledger and copies in
    /// flight under the same leader and period. An idle round that shows the same as the
    /// loop's last one adds nothing to what `measure` computes, so it need not be written.
    pub fn shows_same(&self, earlier: &RoundEvent) -> bool {
        (
            self.desired,
            self.on_ledger,
            self.in_flight,
            self.fence,
            self.period_ms,
        ) == (
            earlier.desired,
            earlier.on_ledger,
            earlier.in_flight,
            earlier.fence,
            earlier.period_ms,
        )
    }
}

/// The grid times of the idle rounds a loop ran without writing them after `round` (at
/// `at_ms`), up to `next_ms` (the workload's next round entry, exclusive with half a period's
/// tolerance for the read's own delay) or, after the last entry, to `until_ms` inclusive; the
/// last `next_missed` grid points before the next entry ran no pass (its `missed`). Empty for
/// a round without a period. See docs/runtime.md, "Idle rounds".
pub fn elided_rounds(
    round: &RoundEvent,
    next: Option<&RoundEvent>,
    until_ms: u64,
) -> impl Iterator<Item = u64> {
    let u = round.period_ms;
    let at = round.at_ms;
    let (count, missed) = if u == 0 {
        (0, 0)
    } else {
        match next {
            // Grid points k ≥ 1 with at + k·U < next − U/2.
            Some(n) => {
                let bound = n.at_ms.saturating_sub(u / 2);
                let count = bound.saturating_sub(at).saturating_sub(1) / u;
                (count, n.missed.min(count))
            }
            None => (until_ms.saturating_sub(at) / u, 0),
        }
    };
    (1..=count - missed).map(move |k| at + k * u)
}

/// The key of a pass's round entry.
pub fn round_key(workload: &str, at_ms: u64, read: Revision) -> String {
    key(&[
        Text(EVENTS),
        Text(workload),
        Text("/round/"),
        Num(at_ms, 15),
        Text("-"),
        Num(read, 12),
    ])
}

/// The key of a copy's event. `tag` is the incarnation, except for `create`, where it is the
/// revision the pass read (the incarnation is not known before the commit).
pub fn copy_event_key(workload: &str, kind: CopyEventKind, n: u64, tag: Revision) -> String {
    key(&[
        Text(EVENTS),
        Text(workload),
        Text("/"),
        Text(kind.name()),
        Text("/"),
        Num(n, 12),
        Text("/"),
        Num(tag, 12),
    ])
}

/// Adds the creation of `key` with `value`, only if it is absent, to `txn`.
pub fn append(txn: Txn, key: String, value: String) -> Txn {
    txn.expect(key.clone(), 0).put(key, value)
}

/// Takes from the front of `queue` the entries that fit one transaction of a default etcd
/// ([`crate::store::TxnLimits::ETCD_DEFAULT`]) as [`append`]s; the rest wait for the next.
pub fn take_batch(queue: &mut Vec<(String, String)>) -> Vec<(String, String)> {
    let n = crate::store::limits::appends_that_fit(queue, &crate::store::TxnLimits::ETCD_DEFAULT);
    let rest = queue.split_off(n);
    std::mem::replace(queue, rest)
}

/// Commits `entries`, each created only if absent, in one transaction. An entry that exists
/// already is dropped and the rest committed: a repeated write is harmless. Returns how many
/// entries were new.
pub fn append_all(
    store: &dyn Store,
    mut entries: Vec<(String, String)>,
) -> Result<usize, StoreError> {
    loop {
        if entries.is_empty() {
            return Ok(0);
        }
        let txn = entries
            .iter()
            .fold(Txn::new(), |t, (k, v)| append(t, k.clone(), v.clone()));
        match store.commit(&txn) {
            Ok(_) => return Ok(entries.len()),
            Err(StoreError::Conflict {
                key, expected: 0, ..
            }) => {
                entries.retain(|(k, _)| *k != key);
            }
            Err(e) => return Err(e),
        }
    }
}

/// One entry of the log as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Logged {
    /// A pass.
    Round(RoundEvent),
    /// Something that happened to copy `n`.
    Copy {
        /// The kind.
        kind: CopyEventKind,
        /// The copy's number.
        n: u64,
        /// Its incarnation (for `create`, the entry's create revision).
        incarnation: Revision,
        /// What the entry says.
        event: CopyEvent,
    },
}

/// Reads workload `workload`'s log, in key order.
pub fn read_log(store: &dyn Store, workload: &str) -> Result<Vec<Logged>, StoreError> {
    let prefix = format!("{EVENTS}{workload}/");
    let read = store.read(&[&prefix])?;
    let mut out = Vec::with_capacity(read.entries.len());
    for e in &read.entries {
        let rest = &e.key[prefix.len()..];
        let mut parts = rest.split('/');
        let kind = parts.next().unwrap_or_default();
        if kind == "round" {
            out.push(Logged::Round(decode::<RoundEvent>(e)?.value));
            continue;
        }
        let corrupt = || StoreError::Corrupt {
            key: e.key.clone(),
            reason: "not an event key".into(),
        };
        let kind = CopyEventKind::parse(kind).ok_or_else(corrupt)?;
        let n: u64 = parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(corrupt)?;
        let tag: Revision = parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(corrupt)?;
        let incarnation = if kind == CopyEventKind::Create {
            e.create_revision
        } else {
            tag
        };
        out.push(Logged::Copy {
            kind,
            n,
            incarnation,
            event: decode::<CopyEvent>(e)?.value,
        });
    }
    Ok(out)
}

/// The names of the workloads that have a log, in order.
pub fn logged_workloads(store: &dyn Store) -> Result<Vec<String>, StoreError> {
    let read = store.read(&[EVENTS])?;
    let mut names: Vec<String> = read
        .entries
        .iter()
        .filter_map(|e| e.key[EVENTS.len()..].split('/').next().map(str::to_owned))
        .collect();
    names.dedup();
    Ok(names)
}

/// One copy event as `setpoint events` and `describe` show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventRow {
    /// When it happened, in store milliseconds.
    pub at_ms: u64,
    /// How long ago, in milliseconds, at the read.
    pub age_ms: u64,
    /// The workload.
    pub workload: String,
    /// The copy, `{workload}-{n}`.
    pub copy: String,
    /// What happened (`event` in JSON, as in CSV).
    #[serde(rename = "event")]
    pub kind: CopyEventKind,
    /// The node that runs the copy.
    pub node: String,
    /// The process id, for `start`.
    pub pid: Option<u32>,
    /// For `exit`: how it ended, and `(commanded)` when a delete command stopped it.
    pub detail: Option<String>,
}

/// The copy events (not the rounds: a pass writes one every period, idle or not) of every
/// workload that has a log, or of `workload`, at most `since_ms` old if given, oldest first
/// (ties by workload, copy number and kind, so the order is the same on every read).
pub fn rows(
    store: &dyn Store,
    workload: Option<&str>,
    since_ms: Option<u64>,
) -> Result<Vec<EventRow>, StoreError> {
    let now = store.now_ms();
    let names = match workload {
        Some(w) => vec![w.to_owned()],
        None => logged_workloads(store)?,
    };
    let mut out = Vec::new();
    for w in &names {
        for l in read_log(store, w)? {
            let Logged::Copy { kind, n, event, .. } = l else {
                continue;
            };
            let age_ms = now.saturating_sub(event.at_ms);
            if since_ms.is_some_and(|s| age_ms > s) {
                continue;
            }
            let detail = match (&event.how, event.commanded) {
                (Some(h), true) => Some(format!("{h} (commanded)")),
                (Some(h), false) => Some(h.clone()),
                (None, true) => Some("(commanded)".to_owned()),
                (None, false) => None,
            };
            out.push((
                (event.at_ms, w.clone(), n, kind),
                EventRow {
                    at_ms: event.at_ms,
                    age_ms,
                    workload: w.clone(),
                    copy: crate::model::copy_name(w, n),
                    kind,
                    node: event.node,
                    pid: event.pid,
                    detail,
                },
            ));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out.into_iter().map(|(_, r)| r).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::encode;
    use crate::store::MemoryStore;

    proptest::proptest! {
        /// The event keys are what `format!` makes of their parts (the oracle), for any
        /// workload, time, revision and kind.
        #[test]
        fn event_keys_are_what_format_makes_of_their_parts(
            w in "[a-z0-9-]{1,12}",
            at in proptest::prop_oneof![0u64..10_000_000, proptest::num::u64::ANY],
            rev in proptest::num::u64::ANY,
            kind in 0usize..CopyEventKind::ALL.len(),
        ) {
            let kind = CopyEventKind::ALL[kind];
            proptest::prop_assert_eq!(round_key(&w, at, rev), format!("{EVENTS}{w}/round/{at:015}-{rev:012}"));
            proptest::prop_assert_eq!(
                copy_event_key(&w, kind, at, rev),
                format!("{EVENTS}{w}/{}/{at:012}/{rev:012}", kind.name())
            );
        }
    }

    fn ev(at_ms: u64) -> String {
        encode(&CopyEvent {
            at_ms,
            node: "a".into(),
            pid: None,
            commanded: false,
            how: None,
        })
    }

    #[test]
    fn a_repeated_write_is_harmless_and_the_rest_of_the_batch_lands() {
        let store = MemoryStore::new();
        let k1 = copy_event_key("w", CopyEventKind::Start, 1, 7);
        let k2 = copy_event_key("w", CopyEventKind::Ready, 1, 7);
        assert_eq!(append_all(&store, vec![(k1.clone(), ev(10))]).unwrap(), 1);
        // The start again (say, from an agent that restarted), with another time: dropped.
        let n = append_all(&store, vec![(k1.clone(), ev(99)), (k2.clone(), ev(20))]).unwrap();
        assert_eq!(n, 1);
        let log = read_log(&store, "w").unwrap();
        let times: Vec<(CopyEventKind, u64)> = log
            .iter()
            .map(|l| match l {
                Logged::Copy { kind, event, .. } => (*kind, event.at_ms),
                Logged::Round(_) => unreachable!(),
            })
            .collect();
        // In key order: `ready` sorts before `start`.
        assert_eq!(
            times,
            [(CopyEventKind::Ready, 20), (CopyEventKind::Start, 10)]
        );
        assert_eq!(logged_workloads(&store).unwrap(), ["w"]);
    }

    #[test]
    fn a_create_entrys_incarnation_is_its_own_create_revision() {
        let store = MemoryStore::new();
        let key = copy_event_key("w", CopyEventKind::Create, 3, 41);
        let rev = store.commit(&append(Txn::new(), key, ev(5))).unwrap();
        match &read_log(&store, "w").unwrap()[0] {
            Logged::Copy {
                kind,
                n,
                incarnation,
                ..
            } => assert_eq!((*kind, *n, *incarnation), (CopyEventKind::Create, 3, rev)),
            other => panic!("{other:?}"),
        }
    }
}
