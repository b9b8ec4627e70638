//! The controllers, and the memory each keeps between passes.
//!
//! - `ledger` trusts the ledger alone. It is correct on a fresh ledger and overshoots on a stale
//!   one, because copies it created are invisible until their start is reported, so it sees the
//!   same shortfall again on every blind pass.
//! - `intent` also counts its own work in flight: the copies it created that have not reached the
//!   ledger yet. That one record removes the overshoot the lesson measures, at the price of
//!   memory that a restart loses.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use crate::action::Action;
use crate::view::{Batch, Desired, LedgerView};

/// The closed set of controllers setpoint provides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ControllerKind {
    /// Looks only at the ledger.
    Ledger,
    /// Looks at the ledger plus its own pending creations.
    Intent,
}

impl ControllerKind {
    /// Every controller, in a fixed order.
    pub const ALL: [ControllerKind; 2] = [ControllerKind::Ledger, ControllerKind::Intent];

    /// The name used on the command line and in outputs.
    pub fn name(self) -> &'static str {
        match self {
            ControllerKind::Ledger => "ledger",
            ControllerKind::Intent => "intent",
        }
    }

    /// The lesson's description, as its tables print it.
    pub fn lesson_title(self) -> &'static str {
        match self {
            ControllerKind::Ledger => "ledger only",
            ControllerKind::Intent => "ledger + its own pending actions",
        }
    }
}

impl fmt::Display for ControllerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A controller name that setpoint does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown controller '{0}': accepted are ledger, intent")]
pub struct UnknownController(pub String);

impl FromStr for ControllerKind {
    type Err = UnknownController;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ControllerKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownController(s.to_owned()))
    }
}

/// A controller together with its memory between passes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Controller {
    /// See [`ControllerKind::Ledger`]. It remembers nothing.
    Ledger,
    /// See [`ControllerKind::Intent`].
    Intent {
        /// The batches this controller created that may still be in flight, oldest first.
        batches: VecDeque<Batch>,
    },
}

impl Controller {
    /// A controller of the given kind with empty memory.
    pub fn new(kind: ControllerKind) -> Self {
        match kind {
            ControllerKind::Ledger => Controller::Ledger,
            ControllerKind::Intent => Controller::Intent {
                batches: VecDeque::new(),
            },
        }
    }

    /// Which controller this is.
    pub fn kind(&self) -> ControllerKind {
        match self {
            Controller::Ledger => ControllerKind::Ledger,
            Controller::Intent { .. } => ControllerKind::Intent,
        }
    }

    /// Loses everything held in memory, as a process restart does.
    pub fn restart(&mut self) {
        *self = Controller::new(self.kind());
    }

    /// One reconciliation pass: compares `desired` with what `view` shows (plus, for `intent`,
    /// its own work in flight) and returns the correction, or `None` when the two agree.
    pub fn pass<V: LedgerView>(&mut self, desired: Desired, view: &V) -> Option<Action> {
        let counted = view.on_ledger() + self.pending(view);
        let target = desired.copies;
        if target > counted {
            let batch = Batch {
                first: view.next_copy(),
                count: target - counted,
            };
            if let Controller::Intent { batches } = self {
                batches.push_back(batch);
            }
            Some(Action::Create {
                target,
                counted,
                batch,
            })
        } else if target < counted {
            Some(Action::Delete { target, counted })
        } else {
            None
        }
    }

    /// The controller's own work in flight, as far as it remembers it. Batches with nothing in
    /// flight are forgotten: by the view's promise they never come back.
    fn pending<V: LedgerView>(&mut self, view: &V) -> u64 {
        match self {
            Controller::Ledger => 0,
            Controller::Intent { batches } => {
                let mut pending = 0;
                batches.retain(|&b| {
                    let n = view.in_flight(b);
                    pending += n;
                    n > 0
                });
                pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::CopyId;
    use std::collections::BTreeMap;

    /// A hand-set view: `ledger` copies shown, and per batch start the copies in flight.
    struct Fixed {
        ledger: u64,
        in_flight: BTreeMap<u64, u64>,
        next: u64,
    }

    impl LedgerView for Fixed {
        fn now(&self) -> u64 {
            0
        }
        fn on_ledger(&self) -> u64 {
            self.ledger
        }
        fn in_flight(&self, batch: Batch) -> u64 {
            self.in_flight.get(&batch.first.0).copied().unwrap_or(0)
        }
        fn next_copy(&self) -> CopyId {
            CopyId(self.next)
        }
    }

    fn view(ledger: u64, next: u64) -> Fixed {
        Fixed {
            ledger,
            in_flight: BTreeMap::new(),
            next,
        }
    }

    #[test]
    fn ledger_controller_creates_the_shortfall_as_a_target() {
        let mut c = Controller::new(ControllerKind::Ledger);
        let a = c.pass(Desired { copies: 6 }, &view(4, 10));
        assert_eq!(
            a,
            Some(Action::Create {
                target: 6,
                counted: 4,
                batch: Batch {
                    first: CopyId(10),
                    count: 2
                }
            })
        );
        assert_eq!(a.unwrap().size(), 2);
    }

    #[test]
    fn ledger_controller_repeats_the_same_creation_on_a_stale_view() {
        let mut c = Controller::new(ControllerKind::Ledger);
        let first = c.pass(Desired { copies: 6 }, &view(4, 6)).unwrap();
        let second = c.pass(Desired { copies: 6 }, &view(4, 8)).unwrap();
        assert_eq!(first.size(), 2);
        assert_eq!(
            second.size(),
            2,
            "a ledger-only pass cannot see its own creations"
        );
    }

    #[test]
    fn intent_controller_counts_its_batch_in_flight_and_waits() {
        let mut c = Controller::new(ControllerKind::Intent);
        assert_eq!(
            c.pass(Desired { copies: 6 }, &view(4, 6)).unwrap().size(),
            2
        );
        let mut v = view(4, 8);
        v.in_flight.insert(6, 2);
        assert_eq!(c.pass(Desired { copies: 6 }, &v), None);
    }

    #[test]
    fn intent_controller_forgets_batches_with_nothing_in_flight() {
        let mut c = Controller::new(ControllerKind::Intent);
        c.pass(Desired { copies: 6 }, &view(4, 6));
        let mut v = view(6, 8);
        v.in_flight.insert(6, 0);
        assert_eq!(c.pass(Desired { copies: 6 }, &v), None);
        match &c {
            Controller::Intent { batches } => assert!(batches.is_empty()),
            Controller::Ledger => unreachable!(),
        }
    }

    #[test]
    fn intent_controller_loses_its_record_on_restart_and_overshoots() {
        let mut c = Controller::new(ControllerKind::Intent);
        c.pass(Desired { copies: 6 }, &view(4, 6));
        c.restart();
        let mut v = view(4, 8);
        v.in_flight.insert(6, 2);
        assert_eq!(c.pass(Desired { copies: 6 }, &v).unwrap().size(), 2);
    }

    #[test]
    fn surplus_becomes_delete_commands_toward_the_target() {
        let mut c = Controller::new(ControllerKind::Ledger);
        let a = c.pass(Desired { copies: 6 }, &view(9, 20)).unwrap();
        assert_eq!(
            a,
            Action::Delete {
                target: 6,
                counted: 9
            }
        );
        assert_eq!(a.size(), 3);
    }

    #[test]
    fn controller_names_parse_and_print_round_trip() {
        for k in ControllerKind::ALL {
            assert_eq!(k.name().parse::<ControllerKind>(), Ok(k));
        }
        let err = "pid".parse::<ControllerKind>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown controller 'pid': accepted are ledger, intent"
        );
    }
}
