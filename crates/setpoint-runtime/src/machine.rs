//! What the runtime's I/O-free state machines share: the store requests they emit and the
//! replies they are handed.
//!
//! The controller host (`crate::controller::Host`) and the agent (`crate::agent`) are state machines
//! in the manner of raft-rs's `RawNode` and quinn-proto's `Connection`: they never touch a store,
//! a process, a file or a clock. The caller hands them inputs (a tick at a given time, a store
//! reply, a watch event, a process exit) through `step(now_ms, input)`, and they return what to do
//! (store requests, process starts and signals, the next time to be ticked). Two kinds of driver
//! run the same machines:
//! - the tokio drivers ([`crate::controller::run_controller`], [`crate::agent::run_agent`])
//!   carry the requests out on a real [`Store`] and real processes;
//! - the lab's chaos world (crate `setpoint-chaos`) carries them out on a simulated store, a
//!   simulated network and simulated processes, on virtual time, with faults.
//!
//! # Contract
//! - Every store request has a [`ReqId`], unique per machine; its reply comes back as exactly one
//!   [`StoreResult`] with that id (or never, if the request or the reply was lost: a machine
//!   must not wait for a reply forever, it gives up at a deadline of its own and may send a new
//!   request).
//! - Several requests may be outstanding at once; replies may come back in any order.
//! - `now_ms` is the machine's own host clock, in milliseconds. It never goes backwards between
//!   two steps of one machine, but it may differ from the store's clock and from other hosts'
//!   clocks (skew). Lease expiry is decided by the store on the store's clock.
//! - A machine asks to be stepped again at a time with [`Wake`]; the driver may step it earlier
//!   (for another input), never later than it can help.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::store::{LeaseId, Read, Revision, Store, StoreError, Txn, WatchEvent};

/// The identity of one store request of one machine.
pub type ReqId = u64;

/// A request a machine wants carried out on the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreRequest {
    /// [`Store::read`] of these prefixes, at one revision.
    Read {
        /// The prefixes read.
        prefixes: Vec<String>,
    },
    /// [`Store::commit`].
    Commit(Txn),
    /// [`Store::revision`].
    Revision,
    /// [`Store::grant`] of a lease with this time to live.
    Grant {
        /// The lease's time to live.
        ttl: Duration,
    },
    /// [`Store::keep_alive`].
    KeepAlive(LeaseId),
    /// [`Store::revoke`].
    Revoke(LeaseId),
    /// [`Store::watch`] of these prefixes after a revision. Its
    /// events come back as [`WatchDelivery`] inputs carrying this request's id, until the
    /// watch is lost or cancelled.
    Watch {
        /// The prefixes watched.
        prefixes: Vec<String>,
        /// Changes after this revision are delivered.
        after: Revision,
    },
    /// Ends the watch started by the request with this id. No reply.
    CancelWatch(ReqId),
}

/// A successful reply to a [`StoreRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreReply {
    /// The entries read, and the store's clock when it read them (report ages are measured on
    /// it).
    Read {
        /// What was read.
        read: Read,
        /// The store's clock, milliseconds since the Unix epoch (virtual in the lab).
        now_ms: u64,
    },
    /// The revision the commit wrote (or the current one, if it wrote nothing).
    Committed(Revision),
    /// The store's current revision.
    Revision(Revision),
    /// The lease granted.
    Granted(LeaseId),
    /// The lease was extended by its time to live.
    KeptAlive,
    /// The lease is revoked (or had already ended).
    Revoked,
    /// The watch is established; its events follow as [`WatchDelivery`] inputs.
    Watching,
}

/// The outcome of a [`StoreRequest`].
pub type StoreResult = Result<StoreReply, StoreError>;

/// A reply, routed back to the machine that asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replied {
    /// The request's id.
    pub id: ReqId,
    /// Its outcome.
    pub result: StoreResult,
}

/// One event of a watch, routed back to the machine that started it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchDelivery {
    /// The id of the [`StoreRequest::Watch`] request.
    pub watch: ReqId,
    /// What the watch delivers.
    pub event: WatchEvent,
}

/// When a machine wants to be stepped next, on its own clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Wake(pub u64);

/// A machine's outputs of one step, written into its caller's buffer: the machines push onto
/// their own vector (`own`), and a step of `step_into` lends them the caller's (`theirs`,
/// with its capacity) when both are empty, so a driver that keeps one buffer allocates
/// nothing a step. [`Self::lend`] before the step, [`Self::give_back`] after it.
pub(crate) struct Lent(bool);

impl Lent {
    /// Swaps the two vectors when both are empty.
    pub(crate) fn lend<T>(own: &mut Vec<T>, theirs: &mut Vec<T>) -> Lent {
        let swapped = own.is_empty() && theirs.is_empty();
        if swapped {
            std::mem::swap(own, theirs);
        }
        Lent(swapped)
    }

    /// The step's outputs into `theirs`: swapped back if they were lent, else appended.
    pub(crate) fn give_back<T>(self, own: &mut Vec<T>, theirs: &mut Vec<T>) {
        if self.0 {
            std::mem::swap(own, theirs);
        } else {
            theirs.append(own);
        }
    }
}

/// Carries out one store request on `store`, synchronously, as a blocking driver does. A
/// [`StoreRequest::Watch`] or [`StoreRequest::CancelWatch`] is not a one-shot call: the driver
/// follows watches itself, and this answers them with [`StoreError::Unavailable`].
pub fn carry_out(store: &dyn Store, request: &StoreRequest) -> StoreResult {
    carry(store, request, None)
}

/// [`carry_out`] for a machine that gives the request up at `deadline` (its own request
/// timeout from when it sent it): a paged read then stops paging ([`Store::read_until`]), since
/// its answer would only be dropped. The tokio drivers carry every request out this way.
pub fn carry_out_until(
    store: &dyn Store,
    request: &StoreRequest,
    deadline: Instant,
) -> StoreResult {
    carry(store, request, Some(deadline))
}

fn carry(store: &dyn Store, request: &StoreRequest, deadline: Option<Instant>) -> StoreResult {
    Ok(match request {
        StoreRequest::Read { prefixes } => {
            let now_ms = store.now_ms();
            let refs: Vec<&str> = prefixes.iter().map(String::as_str).collect();
            let read = match deadline {
                Some(d) => store.read_until(&refs, d)?,
                None => store.read(&refs)?,
            };
            StoreReply::Read { read, now_ms }
        }
        StoreRequest::Commit(txn) => StoreReply::Committed(store.commit(txn)?),
        StoreRequest::Revision => StoreReply::Revision(store.revision()?),
        StoreRequest::Grant { ttl } => StoreReply::Granted(store.grant(*ttl)?),
        StoreRequest::KeepAlive(lease) => {
            store.keep_alive(*lease)?;
            StoreReply::KeptAlive
        }
        StoreRequest::Revoke(lease) => {
            store.revoke(*lease)?;
            StoreReply::Revoked
        }
        StoreRequest::Watch { .. } | StoreRequest::CancelWatch(_) => {
            return Err(StoreError::Unavailable(
                "a watch is not a one-shot request".into(),
            ))
        }
    })
}

/// What a watch followed by [`follow_watch`] hands its machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Followed {
    /// The reply to the [`StoreRequest::Watch`]: [`StoreReply::Watching`], or why it failed.
    Replied(Replied),
    /// One of its events.
    Delivery(WatchDelivery),
}

/// Follows the watch that request `id` asked for, on the calling (blocking) thread, as both
/// tokio drivers do: the reply, then every event, until the watch is lost, `stop` is set, or
/// `send` returns false (the machine is gone). A store that cannot push changes answers
/// [`StoreError::Unavailable`].
pub fn follow_watch(
    store: &dyn Store,
    id: ReqId,
    prefixes: &[String],
    after: Revision,
    stop: &AtomicBool,
    mut send: impl FnMut(Followed) -> bool,
) {
    let refs: Vec<&str> = prefixes.iter().map(String::as_str).collect();
    let mut watcher = match store.watch(&refs, after) {
        Some(Ok(w)) => w,
        Some(Err(e)) => {
            send(Followed::Replied(Replied { id, result: Err(e) }));
            return;
        }
        None => {
            let e = StoreError::Unavailable("this store does not push changes".into());
            send(Followed::Replied(Replied { id, result: Err(e) }));
            return;
        }
    };
    let watching = Replied {
        id,
        result: Ok(StoreReply::Watching),
    };
    if !send(Followed::Replied(watching)) {
        return;
    }
    while !stop.load(Ordering::SeqCst) {
        let event = watcher.next(Duration::from_millis(100));
        let lost = matches!(event, WatchEvent::Lost(_));
        if event != WatchEvent::Idle
            && !send(Followed::Delivery(WatchDelivery { watch: id, event }))
        {
            return;
        }
        if lost {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Lent;

    #[test]
    fn a_lent_buffer_comes_back_with_the_steps_outputs_and_a_full_one_is_appended_to() {
        // Both empty: the step pushes into the caller's buffer, capacity and all.
        let (mut own, mut theirs) = (Vec::new(), Vec::<u32>::with_capacity(16));
        let lent = Lent::lend(&mut own, &mut theirs);
        assert!(
            own.capacity() >= 16,
            "the step works in the caller's buffer"
        );
        own.extend([1, 2]);
        lent.give_back(&mut own, &mut theirs);
        assert_eq!((own.as_slice(), theirs.as_slice()), (&[][..], &[1, 2][..]));
        // The caller's buffer holds earlier outputs, or the machine holds some: nothing is
        // swapped, and the step's outputs follow what was there, in order.
        let lent = Lent::lend(&mut own, &mut theirs);
        own.push(3);
        lent.give_back(&mut own, &mut theirs);
        assert_eq!(theirs, [1, 2, 3]);
        let (mut own, mut theirs) = (vec![7], Vec::new());
        let lent = Lent::lend(&mut own, &mut theirs);
        own.push(8);
        lent.give_back(&mut own, &mut theirs);
        assert_eq!((own.len(), theirs), (0, vec![7, 8]));
    }
}
