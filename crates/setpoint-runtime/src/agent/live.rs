//! The live record ([`LiveRecords`]): `/live/{node}`, the copies running and ready now, under the
//! node lease.
//!
//! It is written whenever the set of ready copies changes (or the lease does), at once: `get`
//! reads it, so it carries no emulated report delay. It lives under the node lease, so it goes
//! when the node does.
//!
//! It is separate from the reports because it follows other rules: no delay, no compare-and-set,
//! and only what changed.
//!
//! A write that fails is tried again a sync period later (`sync_every_ms`, as the watch cache's
//! read is), not at the next step: every reply is a step, so a store that refuses at once
//! would otherwise be asked again as fast as it answers (chaos check `request-storm`).

use super::outbox::{Outbox, Purpose, Soonest};
use super::supervisor::{Kept, Supervisor};
use super::AgentCoreConfig;
use crate::machine::{StoreRequest, StoreResult};
use crate::remote::{self, LiveCopy, LiveRecord};
use crate::store::LeaseId;

/// What the live record was last written as: see the [module docs](self).
#[derive(Debug, Default)]
pub(super) struct LiveRecords {
    /// The lease and copies of the last write that succeeded.
    written: Option<(LeaseId, Vec<LiveCopy>)>,
    /// Moves with every successful write: the generation of `written`
    /// ([`Supervisor::still`]).
    written_gen: u64,
    /// A write is in flight.
    in_flight: bool,
    /// The last write failed: the next goes no sooner than this.
    retry_at: Option<u64>,
}

impl LiveRecords {
    /// Writes `/live/{node}` under `lease` if the copies' ready set differs from what was last
    /// written, unless a write is in flight.
    pub(super) fn publish(
        &mut self,
        now: u64,
        lease: LeaseId,
        copies: &mut Supervisor,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) {
        if self.in_flight || self.retry_at.is_some_and(|t| now < t) {
            return;
        }
        self.retry_at = None;
        let gen = self.written_gen;
        if self.written.as_ref().is_some_and(|(l, c)| {
            *l == lease && copies.still(Kept::Live, gen, |s| s.live_set_is(c))
        }) {
            return;
        }
        let live = copies.live_set();
        let record = LiveRecord {
            node: cfg.node.clone(),
            observed_ms: now,
            copies: live.clone(),
        };
        let txn = remote::live_txn(&record, lease);
        self.in_flight = true;
        out.send(
            now,
            StoreRequest::Commit(txn),
            Purpose::Live {
                lease,
                copies: live,
            },
            cfg.request_timeout_ms,
        );
    }

    /// For a tick answered without the step: when [`LiveRecords::publish`] would next look at
    /// the copies (a failed write's retry), `u64::MAX` if not before an input (a write in flight,
    /// or the copies found the same as the record written, which only a step can change).
    pub(super) fn quiet_until(&self) -> u64 {
        match self.retry_at {
            Some(t) if !self.in_flight => t,
            _ => u64::MAX,
        }
    }

    /// When a failed write is to be tried again, if one is waiting (a wait that ended is
    /// over: the step that saw it end tried, or had nothing to write).
    pub(super) fn wake_times(&self, now: u64, soonest: &mut Soonest) {
        if let Some(t) = self.retry_at.filter(|&t| !self.in_flight && t > now) {
            soonest.at(t);
        }
    }

    /// After the reply to the write of `copies` under `lease`; a failure waits `retry_ms`.
    pub(super) fn on_written(
        &mut self,
        now: u64,
        lease: LeaseId,
        copies: Vec<LiveCopy>,
        result: StoreResult,
        retry_ms: u64,
        out: &mut Outbox,
    ) {
        self.in_flight = false;
        self.retry_at = result.is_err().then_some(now + retry_ms);
        match result {
            Ok(_) => {
                out.ended("live", "the live record is written again");
                self.written = Some((lease, copies));
                self.written_gen += 1;
            }
            // The core ends the agent: nothing is retried on a store gone for good.
            Err(e) if e.is_lost() => {}
            Err(e) => {
                out.failed(
                    now,
                    "live",
                    format!("cannot write the live record: {e} (retrying; logged again when it is written)"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{record, supervisor};
    use super::*;
    use crate::model::Phase;

    #[test]
    fn a_failed_write_is_tried_again_a_sync_period_later_not_at_the_next_step() {
        let cfg = AgentCoreConfig::new("a");
        let mut live = LiveRecords::default();
        let mut out = Outbox::new();
        let mut copies = supervisor(vec![record(0, Phase::Running, 100)]);
        // Publishes at `now`; the id of the write sent, if one was.
        let mut try_at = |live: &mut LiveRecords, out: &mut Outbox, now| {
            live.publish(now, 1, &mut copies, &cfg, out);
            out.drain().into_iter().find_map(|o| match o {
                super::super::AgentOutput::Store { id, .. } => Some(id),
                _ => None,
            })
        };
        let refused = || Err(crate::store::StoreError::Unavailable("refused".into()));
        let id = try_at(&mut live, &mut out, 0).expect("the first write goes at once");
        let Some(Purpose::Live { lease, copies: c }) = out.take(id) else {
            panic!("a live write")
        };
        live.on_written(3, lease, c, refused(), 100, &mut out);
        // Every reply is a step: none of the steps before the wait ends sends it again.
        for now in [3, 4, 50, 102] {
            assert_eq!(try_at(&mut live, &mut out, now), None, "at {now}");
        }
        let mut soonest = Soonest::new(4);
        live.wake_times(4, &mut soonest);
        assert_eq!(soonest.or_a_second(), 103, "woken when the wait ends");
        // A wait that ended asks for no wake (or the machine spins at the ended time).
        let mut soonest = Soonest::new(150);
        live.wake_times(150, &mut soonest);
        assert_eq!(soonest.or_a_second(), 1_150);
        let id = try_at(&mut live, &mut out, 103).expect("tried again when the wait ends");
        let Some(Purpose::Live { lease, copies: c }) = out.take(id) else {
            panic!("a live write")
        };
        // In flight, and after a success: no wake for a retry.
        let mut soonest = Soonest::new(104);
        live.wake_times(104, &mut soonest);
        assert_eq!(soonest.or_a_second(), 1_104);
        live.on_written(
            105,
            lease,
            c,
            Ok(crate::machine::StoreReply::Committed(2)),
            100,
            &mut out,
        );
        let mut soonest = Soonest::new(106);
        live.wake_times(106, &mut soonest);
        assert_eq!(soonest.or_a_second(), 1_106);
        assert_eq!(
            try_at(&mut live, &mut out, 106),
            None,
            "written: nothing changed"
        );
    }

    #[test]
    fn the_live_record_is_written_only_when_the_ready_set_or_the_lease_changes() {
        let cfg = AgentCoreConfig::new("a");
        let mut live = LiveRecords::default();
        let mut out = Outbox::new();
        let mut write = |live: &mut LiveRecords, lease, copies: &mut Supervisor| {
            live.publish(0, lease, copies, &cfg, &mut out);
            let ids: Vec<_> = out
                .drain()
                .into_iter()
                .filter_map(|o| match o {
                    super::super::AgentOutput::Store { id, .. } => Some(id),
                    _ => None,
                })
                .collect();
            for id in &ids {
                if let Some(Purpose::Live { lease, copies }) = out.take(*id) {
                    live.on_written(
                        0,
                        lease,
                        copies,
                        Ok(crate::machine::StoreReply::Committed(1)),
                        100,
                        &mut out,
                    );
                }
            }
            ids.len()
        };
        let mut one = supervisor(vec![
            record(0, Phase::Running, 100),
            record(1, Phase::Starting, 101),
        ]);
        assert_eq!(write(&mut live, 1, &mut one), 1);
        assert_eq!(write(&mut live, 1, &mut one), 0, "unchanged");
        assert_eq!(write(&mut live, 2, &mut one), 1, "a new lease");
        assert_eq!(write(&mut live, 2, &mut one), 0, "unchanged again");
        // The same copies, changed in place by the agent's own steps: a yes remembered from
        // before must not hide the change.
        let mut events = crate::agent::event_log::EventLog::default();
        let mut steps = Outbox::new();
        one.tend(5, &cfg, &mut steps, &mut events);
        assert_eq!(write(&mut live, 2, &mut one), 0, "w-1 not ready yet");
        one.tend(20, &cfg, &mut steps, &mut events);
        assert_eq!(write(&mut live, 2, &mut one), 1, "w-1 became ready");
        assert_eq!(write(&mut live, 2, &mut one), 0, "unchanged");
        one.on_exited(
            30,
            "w-0",
            crate::agent::Ended::Code(1),
            "a",
            &mut steps,
            &mut events,
        );
        assert_eq!(write(&mut live, 2, &mut one), 1, "w-0 ended");
        assert_eq!(write(&mut live, 2, &mut one), 0, "unchanged");
        one.begin_stop("w-1", 100, 40, &mut steps);
        assert_eq!(write(&mut live, 2, &mut one), 1, "w-1 stopping");
        // Other copies (the test's; an agent has one set): what they hold is compared afresh.
        let mut two = supervisor(vec![record(1, Phase::Starting, 101)]);
        assert_eq!(write(&mut live, 2, &mut two), 0, "the same (empty) set");
        let mut three = supervisor(vec![record(0, Phase::Running, 100)]);
        assert_eq!(write(&mut live, 2, &mut three), 1, "another set");
    }

    #[test]
    fn a_live_record_that_cannot_be_written_is_logged_once_and_again_when_it_is() {
        let mut live = LiveRecords::default();
        let mut out = Outbox::new();
        let down = || Err(crate::store::StoreError::Unavailable("cut off".into()));
        for (t, result) in [
            (0, down()),
            (100, down()),
            (200, Ok(crate::machine::StoreReply::Committed(2))),
            // Failing again within the hold: logged once it lasted past it.
            (300, down()),
            (29_999, down()),
            (30_000, down()),
            (30_100, down()),
        ] {
            live.on_written(t, 1, Vec::new(), result, 100, &mut out);
        }
        let lines = out.drain_logs();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[1], "the live record is written again");
        assert_eq!(lines[0], lines[2]);
    }
}
