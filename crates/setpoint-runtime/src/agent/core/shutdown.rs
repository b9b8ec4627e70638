//! The end of an agent: a shutdown drains its copies (or, before its state is read, what an
//! earlier agent here left running), writes the last report and events, and gives the node
//! lease up; a store lost for good takes the same way out with an error.

use super::*;

impl AgentCore {
    // ----- the end -----

    pub(super) fn stop_now(&mut self, result: Result<(), AgentError>) {
        self.sync.stop(&mut self.out);
        self.life.stage = Stage::Stopped;
        self.out.forget_all();
        self.out.push(AgentOutput::Stopped(result));
    }

    pub(super) fn lose(&mut self, now: u64, e: StoreError) {
        if self.life.is_lost() {
            return;
        }
        self.out
            .log(format!("{e}: this agent stops its copies and exits"));
        self.life.lose(e);
        self.begin_shutdown(now);
    }

    /// The driver signalled `count` strays: none, in a stop before the state was read, ends the
    /// wait for them at once, without a SIGKILL round. An answer to a fence's round, which
    /// spares kept copies, does not count.
    pub(super) fn on_strays_signalled(&mut self, count: usize, spare_kept: bool) {
        if let Stage::StoppingStrays { none_left, .. } = &mut self.life.stage {
            *none_left |= count == 0 && !spare_kept;
        }
    }

    pub(super) fn begin_shutdown(&mut self, now: u64) {
        match self.life.stage {
            Stage::Draining { .. }
            | Stage::StoppingStrays { .. }
            | Stage::Finishing
            | Stage::Stopped => return,
            Stage::Running => {}
            Stage::Claiming | Stage::ReadingState | Stage::Recovering => {
                // No copy of its own runs yet, but what an earlier agent here left running is
                // not adopted either (its state is not read): a stop leaves nothing running, so
                // those get SIGTERM now and SIGKILL after the default grace, kept-while-cut-off
                // copies too (chaos finding 18: they ran on with no agent).
                self.out.log(format!(
                    "shutting down before its state was read: stopping any copy an earlier \
                     agent here left running (SIGTERM, SIGKILL after {STRAY_GRACE_MS}ms)"
                ));
                self.out.push(AgentOutput::StopStrays {
                    signal: CopySignal::Term,
                    spare_kept: false,
                });
                self.life.stage = Stage::StoppingStrays {
                    kill_at: now + STRAY_GRACE_MS,
                    none_left: false,
                };
                return;
            }
        }
        if !self.life.is_lost() {
            self.out.log("shutting down: stopping copies");
        }
        self.reports.clear_queue();
        let longest = self.copies.stop_all(now, &mut self.out);
        self.life.stage = Stage::Draining {
            deadline: now + longest + SHUTDOWN_SLACK_MS,
        };
    }

    pub(super) fn finish_events(&mut self, now: u64) {
        if !self
            .events
            .finish(now, self.cfg.request_timeout_ms, &mut self.out)
        {
            self.release(now);
        }
    }

    /// Gives the name up last, with nothing left running: the node is lost at once, and the
    /// controller reassigns its names without waiting for the lease to run out.
    pub(super) fn release(&mut self, now: u64) {
        match self.lease.holding() {
            Some(lease) => {
                self.out.send(
                    now,
                    StoreRequest::Revoke(lease),
                    Purpose::Release,
                    self.cfg.request_timeout_ms,
                );
            }
            None => {
                self.lease.release();
                self.out.log("stopped");
                let end = self.life.end();
                self.stop_now(end);
            }
        }
    }
}
