//! The live record ([`LiveRecords`]): `/live/{node}`, the copies running and ready now, under the
//! node lease.
//!
//! It is written whenever the set of ready copies changes (or the lease does), at once: `get`
//! reads it, so it carries no emulated report delay. It lives under the node lease, so it goes
//! when the node does.
//!
//! It is separate from the reports because it follows other rules: no delay, no compare-and-set,
//! and only what changed.

use super::outbox::{Outbox, Purpose};
use super::supervisor::Supervisor;
use super::AgentCoreConfig;
use crate::machine::{StoreRequest, StoreResult};
use crate::remote::{self, LiveCopy, LiveRecord};
use crate::store::LeaseId;

/// What the live record was last written as: see the [module docs](self).
#[derive(Debug, Default)]
pub(super) struct LiveRecords {
    /// The lease and copies of the last write that succeeded.
    written: Option<(LeaseId, Vec<LiveCopy>)>,
    /// A write is in flight.
    in_flight: bool,
}

impl LiveRecords {
    /// Writes `/live/{node}` under `lease` if the copies' ready set differs from what was last
    /// written, unless a write is in flight.
    pub(super) fn publish(
        &mut self,
        now: u64,
        lease: LeaseId,
        copies: &Supervisor,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) {
        if self.in_flight {
            return;
        }
        if self
            .written
            .as_ref()
            .is_some_and(|(l, c)| *l == lease && copies.live_set_is(c))
        {
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

    /// After the reply to the write of `copies` under `lease`.
    pub(super) fn on_written(
        &mut self,
        now: u64,
        lease: LeaseId,
        copies: Vec<LiveCopy>,
        result: StoreResult,
        out: &mut Outbox,
    ) {
        self.in_flight = false;
        match result {
            Ok(_) => {
                out.ended("live", "the live record is written again");
                self.written = Some((lease, copies));
            }
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
    fn the_live_record_is_written_only_when_the_ready_set_or_the_lease_changes() {
        let cfg = AgentCoreConfig::new("a");
        let mut live = LiveRecords::default();
        let mut out = Outbox::new();
        let mut write = |live: &mut LiveRecords, lease, copies: &Supervisor| {
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
                        &mut out,
                    );
                }
            }
            ids.len()
        };
        let one = supervisor(vec![
            record(0, Phase::Running, 100),
            record(1, Phase::Starting, 101),
        ]);
        assert_eq!(write(&mut live, 1, &one), 1);
        assert_eq!(write(&mut live, 1, &one), 0, "unchanged");
        assert_eq!(write(&mut live, 2, &one), 1, "a new lease");
        let two = supervisor(vec![
            record(0, Phase::Running, 100),
            record(1, Phase::Running, 101),
        ]);
        assert_eq!(write(&mut live, 2, &two), 1, "w-1 became ready");
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
            live.on_written(t, 1, Vec::new(), result, &mut out);
        }
        let lines: Vec<String> = out
            .drain()
            .into_iter()
            .filter_map(|o| match o {
                super::super::AgentOutput::Log(l) => Some(l),
                _ => None,
            })
            .collect();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[1], "the live record is written again");
        assert_eq!(lines[0], lines[2]);
    }
}
