//! The agent's side of its node lease and its fence: the claim and its retries, renewals,
//! what an expired or lost lease stops (its copies, and what an earlier agent here left
//! running), and claiming the name again. The rules are [`crate::agent::lease`]'s.

use super::*;

impl AgentCore {
    // ----- the lease and the fence -----

    /// Sends the claim's next request; a pause that ends after fencing first kills every copy.
    pub(super) fn drive_claim(&mut self, now: u64) {
        if self.lease.end_pause(now) == Some(true) {
            // While fenced, every attempt to claim the name again first makes sure nothing
            // survives.
            self.signal_all(CopySignal::Kill);
        }
        self.lease.drive_claim(now, &self.cfg, &mut self.out);
    }

    pub(super) fn on_claim(&mut self, now: u64, result: StoreResult) {
        match self.lease.on_claim(now, &self.cfg, result, &mut self.out) {
            None => {}
            Some(Claimed::Held {
                lease,
                ttl_ms,
                adopted,
            }) => {
                // The renewals of the lease before were its own condition: this one's start
                // afresh, with no "renewed again" for a failure of the old one.
                self.out.ended("renew", "");
                if self.life.stage == Stage::Claiming {
                    self.out.ended("claim", "");
                    self.out.log(format!(
                        "holds node lease {lease} (ttl {ttl_ms}ms{})",
                        if adopted {
                            ", taken over from the previous agent here"
                        } else {
                            ""
                        }
                    ));
                    self.life.stage = Stage::ReadingState;
                    self.state_read.send(now, lease, &self.cfg, &mut self.out);
                } else if !self.life.leaving() {
                    self.out.ended("rejoin", "");
                    self.out.log(format!("rejoined under lease {lease}"));
                    self.reports.rejoined(now);
                }
            }
            Some(Claimed::Fatal(e)) => self.stop_now(Err(AgentError::Node(e))),
            Some(Claimed::Refused(why)) => {
                self.life.refuse(why);
                self.begin_shutdown(now);
            }
        }
    }

    /// Renews and fences, while the lease is held.
    pub(super) fn keep_lease(&mut self, now: u64) {
        let keep = self.lease.keep(now);
        match keep.fence {
            Some(Fence::Term {
                lease,
                unrenewed_ms,
            }) => {
                // Observations taken before the fence must never reach the ledger, nor reads
                // taken before it be acted on after the rejoin.
                self.reports.clear_queue();
                self.sync.fenced(&mut self.out);
                self.fencings += 1;
                let n = self.signal_all(CopySignal::Term);
                self.out.log(format!(
                    "lease {lease} not renewed for {unrenewed_ms}ms: fenced, stopping {n} copies (SIGTERM); \
                     {} kept running while cut off",
                    self.copies.kept_while_cut_off()
                ));
                self.stop_unread_strays(CopySignal::Term);
            }
            Some(Fence::Kill { lease }) => {
                let n = self.signal_all(CopySignal::Kill);
                self.out.log(format!(
                    "fenced: SIGKILL to {n} copies before the lease can end"
                ));
                self.stop_unread_strays(CopySignal::Kill);
                return self.reclaim(now, lease);
            }
            None => {}
        }
        if keep.renew {
            self.lease.send_renewal(now, &mut self.out);
        }
    }

    /// A fence that comes down after the first claim held but before this agent has read its
    /// state and adopted what an earlier agent here left running: those processes are no
    /// copies of this agent's yet, so `signal_all` does not reach them, and the lease they run
    /// under (the one this agent took over) is the one that ends. They are stopped with the
    /// same signal (chaos finding 14: an agent restarted and cut off 11 ms after it took its
    /// node's lease over fenced "0 copies", and the earlier life's `named` copy ran past the
    /// lease's end).
    pub(super) fn stop_unread_strays(&mut self, signal: CopySignal) {
        if !matches!(self.life.stage, Stage::ReadingState | Stage::Recovering)
            || self.cfg.bug_no_self_fence
        {
            return;
        }
        self.out.log(match signal {
            CopySignal::Term => {
                "its state not read yet: stopping any copy an earlier agent here \
                                 left running that is not kept while cut off (SIGTERM)"
            }
            CopySignal::Kill => {
                "its state not read yet: SIGKILL to any copy an earlier agent \
                                 here left running that is not kept while cut off"
            }
        });
        self.out.push(AgentOutput::StopStrays {
            signal,
            spare_kept: true,
        });
    }

    /// Stops the copies whose `stop_when_cut_off` has passed since the agent was cut off.
    pub(super) fn stop_cut_off(&mut self, now: u64) {
        // Nothing to scan while the next renewal is not overdue: every `stop_when_cut_off`
        // is at least a second after `since`. This runs every step, so an agent of many copies
        // whose renewals succeed does no work here.
        let Some(since) = self
            .lease
            .cut_off_since(self.cfg.lease_ttl_ms)
            .filter(|&since| now >= since)
        else {
            return;
        };
        let n = self.copies.stop_cut_off(now, since, &mut self.out);
        if n > 0 {
            self.out.log(format!(
                "cut off from the store since {since}: stopping {n} copies whose \
                 stop_when_cut_off has passed"
            ));
        }
    }

    /// While the first claim has not succeeded, stops what an earlier agent here left running
    /// by the fence's deadlines from this agent's start ([`NodeLease::strays_due`]).
    pub(super) fn fence_strays(&mut self, now: u64) {
        let Some(signal) = self.lease.strays_due(now, self.cfg.lease_ttl_ms) else {
            return;
        };
        if self.cfg.bug_no_self_fence {
            return;
        }
        self.out.log(match signal {
            CopySignal::Term => format!(
                "no node lease {}ms after this agent started, and an earlier agent's may end \
                 soon: fenced, stopping any copy an earlier agent here left running that is \
                 not kept while cut off (SIGTERM)",
                now.saturating_sub(self.lease.born())
            ),
            CopySignal::Kill => "fenced: SIGKILL to any copy an earlier agent here left running \
                                 that is not kept while cut off, before its lease can end"
                .to_owned(),
        });
        self.out.push(AgentOutput::StopStrays {
            signal,
            spare_kept: true,
        });
    }

    /// Fenced: gives the old lease up and claims the name again under a new one.
    pub(super) fn reclaim(&mut self, now: u64, old: LeaseId) {
        let leaving = self.life.leaving();
        self.lease.reclaim(now, old, leaving);
    }

    /// Signals every copy that has a process; returns how many.
    pub(super) fn signal_all(&mut self, signal: CopySignal) -> usize {
        self.copies
            .signal_all(signal, self.cfg.bug_no_self_fence, &mut self.out)
    }
}
