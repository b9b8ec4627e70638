//! The agent's share of the event log ([`EventLog`]): the copy events it has not written yet, and
//! their writes, one transaction per flush.
//!
//! Each entry is created only if absent ([`crate::events::append`]), so a repeat is harmless: a
//! batch refused because one entry exists already is sent again without it. A batch that fails
//! otherwise goes back in front of the queue, and is tried again a sync period later, not at
//! the next step (every reply is a step: a store that refuses at once would otherwise be asked
//! again as fast as it answers, chaos check `request-storm`).
//!
//! It is separate because three parts queue events (the supervisor's starts, readiness and
//! exits; recovery's exits; the reports' ledger changes) and one rule writes them.

use super::outbox::{Outbox, Purpose, Soonest};
use super::CopyRecord;
use crate::events::{self, CopyEvent, CopyEventKind};
use crate::machine::{StoreRequest, StoreResult};
use crate::model::encode;
use crate::store::{StoreError, Txn};

/// What came of a batch's write.
#[derive(Debug)]
pub(super) enum Written {
    /// Part of it existed already: the rest went out again.
    Again,
    /// The store is gone for good (and this was not the last batch): the agent must stop.
    Lost(StoreError),
    /// Written, or given up on (logged; kept for the next flush unless it was the last).
    Done,
}

/// The event-log entries not written yet: see the [module docs](self).
#[derive(Debug, Default)]
pub(super) struct EventLog {
    /// Entries not written yet (key, value), oldest first.
    pending: Vec<(String, String)>,
    /// A batch is being written.
    in_flight: bool,
    /// The last batch failed: the next goes no sooner than this.
    retry_at: Option<u64>,
}

impl EventLog {
    /// Queues the event `kind` of copy `r` at `at_ms` on `node`.
    pub(super) fn copy_event(
        &mut self,
        kind: CopyEventKind,
        r: &CopyRecord,
        at_ms: u64,
        node: &str,
    ) {
        let event = CopyEvent {
            at_ms,
            node: node.to_owned(),
            pid: (kind == CopyEventKind::Start).then_some(r.pid),
            commanded: kind == CopyEventKind::Exit && r.stopping,
            how: if kind == CopyEventKind::Exit {
                r.exit.clone()
            } else {
                None
            },
        };
        let key =
            events::copy_event_key(&r.assignment.workload, kind, r.assignment.n, r.incarnation);
        self.pending.push((key, encode(&event)));
    }

    /// Queues an entry made elsewhere.
    pub(super) fn push(&mut self, key: String, value: String) {
        self.pending.push((key, value));
    }

    /// Drops every entry not written yet.
    pub(super) fn clear(&mut self) {
        self.pending.clear();
    }

    /// Writes what is queued, unless a batch is in flight or a failed one's wait runs.
    pub(super) fn flush(&mut self, now: u64, timeout_ms: u64, out: &mut Outbox) {
        if self.retry_at.is_some_and(|t| now >= t) {
            self.retry_at = None;
        }
        if !self.pending.is_empty() && !self.in_flight && self.retry_at.is_none() {
            let batch = events::take_batch(&mut self.pending);
            self.send(now, batch, false, timeout_ms, out);
        }
    }

    /// The last flush, at shutdown. Returns false if there was nothing to write (the caller
    /// goes on at once).
    pub(super) fn finish(&mut self, now: u64, timeout_ms: u64, out: &mut Outbox) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        let batch = events::take_batch(&mut self.pending);
        self.send(now, batch, true, timeout_ms, out);
        true
    }

    fn send(
        &mut self,
        now: u64,
        batch: Vec<(String, String)>,
        last: bool,
        timeout_ms: u64,
        out: &mut Outbox,
    ) {
        let txn = batch.iter().fold(Txn::new(), |t, (k, v)| {
            events::append(t, k.clone(), v.clone())
        });
        self.in_flight = true;
        out.send(
            now,
            StoreRequest::Commit(txn),
            Purpose::Events { batch, last },
            timeout_ms,
        );
    }

    /// For a tick answered without the step: when [`EventLog::flush`] would act (a retry's
    /// wait ends; 0: entries wait and nothing holds them back), `u64::MAX` if not before an
    /// input.
    pub(super) fn quiet_until(&self) -> u64 {
        match self.retry_at {
            Some(t) => t,
            None if !self.pending.is_empty() && !self.in_flight => 0,
            None => u64::MAX,
        }
    }

    /// When a failed batch is to be tried again, if one is waiting (a wait that ended is
    /// over: the step that saw it end tried).
    pub(super) fn wake_times(&self, now: u64, soonest: &mut Soonest) {
        if let Some(t) = self
            .retry_at
            .filter(|&t| !self.in_flight && !self.pending.is_empty() && t > now)
        {
            soonest.at(t);
        }
    }

    /// After the reply to the write of `batch`; a failure waits `retry_ms` before the next.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_written(
        &mut self,
        now: u64,
        mut batch: Vec<(String, String)>,
        last: bool,
        result: StoreResult,
        timeout_ms: u64,
        retry_ms: u64,
        out: &mut Outbox,
    ) -> Written {
        self.in_flight = false;
        self.retry_at = None;
        if result.is_ok() {
            out.ended("events", "the event log is written again");
        }
        match result {
            Ok(_) => {}
            Err(StoreError::Conflict {
                key, expected: 0, ..
            }) => {
                // Written before (a repeat): drop it, write the rest.
                batch.retain(|(k, _)| *k != key);
                if !batch.is_empty() {
                    self.send(now, batch, last, timeout_ms, out);
                    return Written::Again;
                }
            }
            Err(e) if e.is_lost() && !last => return Written::Lost(e),
            Err(e) => {
                if last {
                    out.log(format!("cannot write the event log: {e}"));
                } else {
                    out.failed(
                        now,
                        "events",
                        format!("cannot write the event log: {e} (retrying; logged again when it is written)"),
                    );
                }
                if !last {
                    batch.append(&mut self.pending);
                    self.pending = batch;
                    self.retry_at = Some(now + retry_ms);
                } else {
                    self.pending.clear();
                }
            }
        }
        Written::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::carry_out;
    use crate::model::Assignment;
    use crate::rules::CopyEnv;
    use crate::store::MemoryStore;

    fn record(n: u64) -> CopyRecord {
        CopyRecord {
            assignment: Assignment {
                copy: format!("w-{n}"),
                workload: "w".into(),
                owner_uid: 1,
                n,
                node: "a".into(),
                command: vec!["true".into()],
                startup_ms: 0,
                readiness: None,
                grace_ms: 0,
                created_ms: 0,
                env: CopyEnv::default(),
                generation: 0,
                cut_off: Default::default(),
                heartbeat: false,
            },
            incarnation: 5,
            pid: 42,
            start_ticks: 0,
            started_ms: 0,
            phase: crate::model::Phase::Running,
            ready_ms: None,
            exited_ms: None,
            exit: None,
            stopping: false,
            killed: false,
            nonce: String::new(),
        }
    }

    /// Carries the one store request in `out` out on `store`: (batch, last, result).
    fn carry(store: &MemoryStore, out: &mut Outbox) -> (Vec<(String, String)>, bool, StoreResult) {
        let mut outputs = out.drain();
        assert_eq!(outputs.len(), 1, "{outputs:?}");
        let Some(super::super::AgentOutput::Store { id, request }) = outputs.pop() else {
            panic!("not a store request");
        };
        let Some(Purpose::Events { batch, last }) = out.take(id) else {
            panic!("not an event write");
        };
        (batch, last, carry_out(store, &request))
    }

    /// An `exit` says `commanded` exactly when its copy was being stopped (a delete command):
    /// any other exit is a death, in `setpoint events` and in the lab's measurements. Only a
    /// `start` gives the pid and only an `exit` how it ended.
    #[test]
    fn an_exit_is_commanded_exactly_when_its_copy_was_being_stopped() {
        for kind in CopyEventKind::ALL {
            for stopping in [false, true] {
                let mut r = record(3);
                r.stopping = stopping;
                r.exit = Some("signal 15".into());
                let mut log = EventLog::default();
                log.copy_event(kind, &r, 10, "a");
                let want = CopyEvent {
                    at_ms: 10,
                    node: "a".into(),
                    pid: (kind == CopyEventKind::Start).then_some(42),
                    commanded: kind == CopyEventKind::Exit && stopping,
                    how: (kind == CopyEventKind::Exit).then(|| "signal 15".into()),
                };
                assert_eq!(
                    log.pending,
                    [(events::copy_event_key("w", kind, 3, 5), encode(&want))],
                    "{kind:?}, stopping: {stopping}"
                );
            }
        }
    }

    /// At shutdown what is queued goes out as the last batch (the caller gives the node lease
    /// up once it is written); with nothing queued the caller goes on at once.
    #[test]
    fn the_last_flush_writes_what_is_queued_as_the_last_batch() {
        let store = MemoryStore::new();
        let mut log = EventLog::default();
        let mut out = Outbox::new();
        let mut r = record(0);
        r.exit = Some("signal 9".into());
        log.copy_event(CopyEventKind::Exit, &r, 10, "a");
        assert!(log.finish(10, 100, &mut out), "something to write");
        let (batch, last, result) = carry(&store, &mut out);
        assert!(last);
        assert_eq!(batch.len(), 1);
        assert!(matches!(
            log.on_written(11, batch, last, result, 100, 100, &mut out),
            Written::Done
        ));
        let logged = events::read_log(&store, "w").unwrap();
        assert!(
            matches!(&logged[..], [events::Logged::Copy { kind: CopyEventKind::Exit, event, .. }] if !event.commanded),
            "{logged:?}"
        );
        let _ = out.drain();
        assert!(!log.finish(12, 100, &mut out), "nothing left");
        assert!(out.drain().is_empty(), "nothing sent");
    }

    #[test]
    fn a_batch_with_an_entry_written_before_is_sent_again_without_it() {
        let store = MemoryStore::new();
        let mut log = EventLog::default();
        let mut out = Outbox::new();
        log.copy_event(CopyEventKind::Start, &record(0), 10, "a");
        log.flush(10, 100, &mut out);
        let (batch, last, result) = carry(&store, &mut out);
        assert!(matches!(
            log.on_written(10, batch, last, result, 100, 100, &mut out),
            Written::Done
        ));
        // The same start again, with another copy's: the repeat is dropped, the other written.
        log.copy_event(CopyEventKind::Start, &record(0), 10, "a");
        log.copy_event(CopyEventKind::Start, &record(1), 20, "a");
        log.flush(20, 100, &mut out);
        log.flush(20, 100, &mut out);
        let (batch, last, result) = carry(&store, &mut out);
        assert_eq!(batch.len(), 2, "one batch in flight at a time");
        assert!(matches!(
            log.on_written(20, batch, last, result, 100, 100, &mut out),
            Written::Again
        ));
        let (batch, last, result) = carry(&store, &mut out);
        assert_eq!(batch.len(), 1);
        assert!(result.is_ok(), "{result:?}");
        assert!(matches!(
            log.on_written(20, batch, last, result, 100, 100, &mut out),
            Written::Done
        ));
        assert_eq!(events::read_log(&store, "w").unwrap().len(), 2);
        assert!(
            !log.finish(30, 100, &mut out),
            "nothing left for the last flush"
        );
    }

    #[test]
    fn a_write_that_finds_the_store_lost_for_good_ends_the_agent_and_is_not_retried() {
        let mut log = EventLog::default();
        let mut out = Outbox::new();
        log.copy_event(CopyEventKind::Start, &record(0), 10, "a");
        log.flush(10, 100, &mut out);
        let _ = out.drain();
        let gone = StoreError::Lost("the database file is gone".into());
        let batch = vec![("first".to_owned(), "x".to_owned())];
        let w = log.on_written(
            20,
            batch.clone(),
            false,
            Err(gone.clone()),
            100,
            100,
            &mut out,
        );
        assert!(matches!(&w, Written::Lost(e) if *e == gone), "{w:?}");
        let outputs = out.drain();
        assert!(outputs.is_empty(), "nothing to retry: {outputs:?}");
        // The agent's last flush (while it stops) only logs what became of it.
        let w = log.on_written(30, batch, true, Err(gone), 100, 100, &mut out);
        assert!(matches!(w, Written::Done), "{w:?}");
    }

    #[test]
    fn a_failed_batch_is_tried_again_a_sync_period_later_not_at_the_next_step() {
        let store = MemoryStore::new();
        let mut log = EventLog::default();
        let mut out = Outbox::new();
        log.copy_event(CopyEventKind::Start, &record(0), 10, "a");
        log.flush(10, 100, &mut out);
        let (batch, last, _) = carry(&store, &mut out);
        let refused = Err(StoreError::Unavailable("refused".into()));
        log.on_written(12, batch, last, refused, 100, 250, &mut out);
        // Every reply is a step: no flush before the wait ends sends it again.
        for now in [12, 13, 200, 261] {
            log.flush(now, 100, &mut out);
            let sent = out
                .drain()
                .into_iter()
                .filter(|o| matches!(o, super::super::AgentOutput::Store { .. }));
            assert_eq!(sent.count(), 0, "at {now}");
        }
        let mut soonest = Soonest::new(13);
        log.wake_times(13, &mut soonest);
        assert_eq!(soonest.or_a_second(), 262, "woken when the wait ends");
        // A wait that ended asks for no wake, even where no flush has run since (a fenced
        // agent flushes nothing): or the machine spins at the ended time.
        let mut soonest = Soonest::new(300);
        log.wake_times(300, &mut soonest);
        assert_eq!(soonest.or_a_second(), 1_300);
        log.flush(262, 100, &mut out);
        let (batch, last, result) = carry(&store, &mut out);
        // In flight: no wake for a retry; written: none either, and the next goes at once.
        let mut soonest = Soonest::new(263);
        log.wake_times(263, &mut soonest);
        assert_eq!(soonest.or_a_second(), 1_263);
        log.on_written(264, batch, last, result, 100, 250, &mut out);
        log.copy_event(CopyEventKind::Start, &record(1), 265, "a");
        log.flush(265, 100, &mut out);
        let (batch, _, _) = carry(&store, &mut out);
        assert_eq!(batch.len(), 1);
    }

    #[test]
    fn a_failed_batch_goes_back_in_front_of_what_was_queued_since_unless_it_was_the_last() {
        let mut log = EventLog::default();
        let mut out = Outbox::new();
        log.copy_event(CopyEventKind::Start, &record(1), 20, "a");
        let batch = vec![("first".to_owned(), "x".to_owned())];
        let failed = || Err(StoreError::Unavailable("slow".into()));
        let w = log.on_written(20, batch.clone(), false, failed(), 100, 100, &mut out);
        assert!(matches!(w, Written::Done));
        assert_eq!(log.pending.len(), 2);
        assert_eq!(log.pending[0].0, "first");
        log.clear();
        let w = log.on_written(20, batch, true, failed(), 100, 100, &mut out);
        assert!(matches!(w, Written::Done));
        assert!(log.pending.is_empty(), "the last batch is not kept");
    }
}
