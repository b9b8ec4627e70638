//! What the agent's life is at ([`Life`]): claiming, reading its state, recovering, running,
//! draining at shutdown, finishing, stopped; and why it ends.
//!
//! It is separate so that the rules that hang on the stage (the state file is written only while
//! the agent runs or drains; a fence while leaving does not rejoin; what [`AgentOutput::Stopped`]
//! says) are written once.
//!
//! [`AgentOutput::Stopped`]: super::AgentOutput::Stopped

use super::AgentError;
use crate::store::StoreError;

/// The stages of an agent's life, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// The first claim is under way.
    Claiming,
    /// Held: reading the assignments and the last report, before asking for recovery.
    ReadingState,
    /// Waiting for the driver's [`AgentInput::Recovered`](super::AgentInput::Recovered).
    Recovering,
    /// Running.
    Running,
    /// Shutting down: waiting for copies to stop, until the deadline.
    Draining { deadline: u64 },
    /// Shutting down before its state was read: what an earlier agent here left running got
    /// SIGTERM; SIGKILL goes at `kill_at`, then the agent stops (chaos finding 18).
    StoppingStrays {
        /// When the SIGKILL round goes.
        kill_at: u64,
        /// The driver found none to signal ([`AgentInput::StraysSignalled`](super::AgentInput)):
        /// nothing to wait for.
        none_left: bool,
    },
    /// The last report, the last events, then the revoke.
    Finishing,
    /// Done.
    Stopped,
}

/// The agent's stage, and why it must stop once it must.
#[derive(Debug)]
pub(super) struct Life {
    /// Where it is.
    pub(super) stage: Stage,
    /// The store is gone for good: the agent stops its copies and exits with this.
    lost: Option<StoreError>,
    /// Another agent took the name while this one was fenced: it exits with this.
    refusal: Option<String>,
}

impl Life {
    /// At the first claim.
    pub(super) fn new() -> Self {
        Self {
            stage: Stage::Claiming,
            lost: None,
            refusal: None,
        }
    }

    /// Whether the agent runs (claimed, recovered, not shutting down).
    pub(super) fn is_running(&self) -> bool {
        self.stage == Stage::Running
    }

    /// Whether the agent has stopped.
    pub(super) fn is_stopped(&self) -> bool {
        self.stage == Stage::Stopped
    }

    /// Whether the state file may be written: only while the agent runs or drains (before, it
    /// has not read it; after, its last write is done).
    pub(super) fn may_save(&self) -> bool {
        matches!(self.stage, Stage::Running | Stage::Draining { .. })
    }

    /// Whether the agent is on its way out (a lost lease is not claimed again).
    pub(super) fn leaving(&self) -> bool {
        matches!(
            self.stage,
            Stage::Draining { .. } | Stage::StoppingStrays { .. } | Stage::Finishing
        )
    }

    /// Records that the store is gone for good; false if it was already recorded.
    pub(super) fn lose(&mut self, e: StoreError) -> bool {
        if self.lost.is_some() {
            return false;
        }
        self.lost = Some(e);
        true
    }

    /// Whether the store was lost for good.
    pub(super) fn is_lost(&self) -> bool {
        self.lost.is_some()
    }

    /// The store's loss, taken once.
    pub(super) fn take_lost(&mut self) -> Option<StoreError> {
        self.lost.take()
    }

    /// Records that another agent holds the name now.
    pub(super) fn refuse(&mut self, why: String) {
        self.refusal = Some(why);
    }

    /// Whether another agent holds the name now.
    pub(super) fn is_refused(&self) -> bool {
        self.refusal.is_some()
    }

    /// How the agent ends after giving the name up: replaced, or fine.
    pub(super) fn end(&mut self) -> Result<(), AgentError> {
        match self.refusal.take() {
            Some(why) => Err(AgentError::Replaced(why)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_is_written_only_while_running_or_draining() {
        let mut life = Life::new();
        let mut may = Vec::new();
        for stage in [
            Stage::Claiming,
            Stage::ReadingState,
            Stage::Recovering,
            Stage::Running,
            Stage::Draining { deadline: 5 },
            Stage::Finishing,
            Stage::Stopped,
        ] {
            life.stage = stage;
            may.push((life.may_save(), life.leaving()));
        }
        assert_eq!(
            may,
            [
                (false, false),
                (false, false),
                (false, false),
                (true, false),
                (true, true),
                (false, true),
                (false, false),
            ]
        );
    }

    #[test]
    fn a_refusal_ends_the_agent_as_replaced_once_and_a_loss_is_kept_once() {
        let mut life = Life::new();
        assert!(life.end().is_ok());
        life.refuse("taken".into());
        assert!(life.is_refused());
        assert!(matches!(life.end(), Err(AgentError::Replaced(w)) if w == "taken"));
        assert!(life.end().is_ok(), "taken once");
        assert!(life.lose(StoreError::Unavailable("a".into())));
        assert!(!life.lose(StoreError::Unavailable("b".into())));
        assert!(matches!(life.take_lost(), Some(StoreError::Unavailable(w)) if w == "a"));
        assert!(!life.is_lost());
    }
}
