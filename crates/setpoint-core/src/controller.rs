//! The controllers, and the memory each keeps between passes.
//!
//! - `ledger` trusts the ledger alone. It is correct on a fresh ledger and overshoots on a stale
//!   one, because copies it created are invisible until their start is reported, so it sees the
//!   same shortfall again on every blind pass.
//! - `intent` also counts its own work in flight: the copies it created that have not reached the
//!   ledger yet. That one record removes the overshoot the lesson measures, at the price of
//!   memory that a restart loses.
//! - `expectations` ([`crate::expectations`]) follows Kubernetes' ReplicaSet controller: it sits
//!   out passes until its last writes are observed, or until they expire.
//! - `named` ([`crate::named`]) gives copies deterministic names, so a repeated creation is a
//!   no-op where copies run and a restart cannot duplicate anything.
//! - `gated` ([`crate::gated`]) reads its own writes: it skips passes until the ledger has caught
//!   up with its last write.
//!
//! `docs/controllers.md` compares them.
use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

use crate::action::Action;
use crate::expectations::{Expectations, ExpectationsConfig};
use crate::gated::Gated;
use crate::named::Named;
use crate::view::{Batch, Desired, LedgerView, Time};

/// The closed set of controllers setpoint provides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ControllerKind {
    /// Looks only at the ledger.
    Ledger,
    /// Looks at the ledger plus its own pending creations.
    Intent,
    /// Kubernetes ReplicaSet style: waits for its expected creations and deletions to be
    /// observed, or to expire after a TTL.
    Expectations,
    /// Deterministic names `0 … n − 1`: creates only names neither on the ledger nor commanded.
    Named,
    /// Read-your-writes: skips passes until the ledger has caught up with its last write.
    Gated,
}

impl ControllerKind {
    /// Every controller, in a fixed order.
    pub const ALL: [ControllerKind; 5] = [
        ControllerKind::Ledger,
        ControllerKind::Intent,
        ControllerKind::Expectations,
        ControllerKind::Named,
        ControllerKind::Gated,
    ];

    /// The lesson's two controllers (CA24), in the order of its tables.
    pub const LESSON: [ControllerKind; 2] = [ControllerKind::Ledger, ControllerKind::Intent];

    /// The name used on the command line and in outputs.
    pub fn name(self) -> &'static str {
        match self {
            ControllerKind::Ledger => "ledger",
            ControllerKind::Intent => "intent",
            ControllerKind::Expectations => "expectations",
            ControllerKind::Named => "named",
            ControllerKind::Gated => "gated",
        }
    }

    /// The lesson's description, as its tables print it; a description in the same style for
    /// the controllers the lesson does not have.
    pub fn lesson_title(self) -> &'static str {
        match self {
            ControllerKind::Ledger => "ledger only",
            ControllerKind::Intent => "ledger + its own pending actions",
            ControllerKind::Expectations => "ledger + expectations that expire after a TTL",
            ControllerKind::Named => "ledger + deterministic names",
            ControllerKind::Gated => "ledger, read after its own last write",
        }
    }

    /// Whether the controller is one of the lesson's two ([`Self::LESSON`]).
    pub fn is_lesson(self) -> bool {
        Self::LESSON.contains(&self)
    }
}

impl fmt::Display for ControllerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A controller name that setpoint does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown controller '{0}': accepted are ledger, intent, expectations, named, gated")]
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

/// A controller together with its settings and its memory between passes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Controller {
    /// See [`ControllerKind::Ledger`]. It remembers nothing.
    Ledger,
    /// See [`ControllerKind::Intent`].
    Intent {
        /// The batches this controller created that may still be in flight, oldest first.
        batches: VecDeque<Batch>,
    },
    /// See [`ControllerKind::Expectations`].
    Expectations(Expectations),
    /// See [`ControllerKind::Named`].
    Named(Named),
    /// See [`ControllerKind::Gated`].
    Gated(Gated),
}

impl Controller {
    /// A controller of the given kind with its default settings and empty memory.
    pub fn new(kind: ControllerKind) -> Self {
        match kind {
            ControllerKind::Ledger => Controller::Ledger,
            ControllerKind::Intent => Controller::Intent {
                batches: VecDeque::new(),
            },
            ControllerKind::Expectations => {
                Controller::Expectations(Expectations::new(ExpectationsConfig::default()))
            }
            ControllerKind::Named => Controller::Named(Named::default()),
            ControllerKind::Gated => Controller::Gated(Gated::default()),
        }
    }

    /// Which controller this is.
    pub fn kind(&self) -> ControllerKind {
        match self {
            Controller::Ledger => ControllerKind::Ledger,
            Controller::Intent { .. } => ControllerKind::Intent,
            Controller::Expectations(_) => ControllerKind::Expectations,
            Controller::Named(_) => ControllerKind::Named,
            Controller::Gated(_) => ControllerKind::Gated,
        }
    }

    /// Loses everything held in memory, as a process restart does. Settings survive: they come
    /// from configuration, not memory.
    pub fn restart(&mut self) {
        match self {
            Controller::Ledger => {}
            Controller::Intent { batches } => batches.clear(),
            Controller::Expectations(e) => e.restart(),
            Controller::Named(n) => n.restart(),
            Controller::Gated(g) => g.restart(),
        }
    }

    /// The earliest time at which a pass could decide differently although the view has not
    /// changed; `None` when only a change of the view can change its decision. A driver may
    /// skip the passes before it on an unchanged view, after a pass that returned nothing.
    pub fn wake_at(&self) -> Option<Time> {
        match self {
            Controller::Expectations(e) => e.wake_at(),
            _ => None,
        }
    }

    /// One reconciliation pass: compares `desired` with what `view` shows (plus whatever the
    /// controller remembers of its own work) and returns the correction, or `None` when there is
    /// nothing to do or the controller sits this pass out.
    pub fn pass<V: LedgerView>(&mut self, desired: Desired, view: &V) -> Option<Action> {
        match self {
            Controller::Ledger | Controller::Intent { .. } => {}
            Controller::Expectations(e) => return e.pass(desired, view),
            Controller::Named(n) => return n.pass(desired, view),
            Controller::Gated(g) => return g.pass(desired, view),
        }
        let counted = view.on_ledger() + self.pending(view);
        let action = toward(desired.copies, counted, view);
        if let (Controller::Intent { batches }, Some(Action::Create { batch, .. })) =
            (self, &action)
        {
            batches.push_back(*batch);
        }
        action
    }

    /// The controller's own work in flight, as far as it remembers it. Batches with nothing in
    /// flight are forgotten: by the view's promise they never come back.
    fn pending<V: LedgerView>(&mut self, view: &V) -> u64 {
        match self {
            Controller::Intent { batches } => {
                let mut pending = 0;
                batches.retain(|&b| {
                    let n = view.in_flight(b);
                    pending += n;
                    n > 0
                });
                pending
            }
            _ => 0,
        }
    }
}

/// The plain correction from `counted` toward `target`: create the shortfall, or send one delete
/// command per surplus copy.
pub(crate) fn toward<V: LedgerView>(target: u64, counted: u64, view: &V) -> Option<Action> {
    if target > counted {
        Some(Action::Create {
            target,
            counted,
            batch: Batch {
                first: view.next_copy(),
                count: target - counted,
            },
        })
    } else if target < counted {
        Some(Action::Delete { target, counted })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::Fake;
    use crate::view::CopyId;

    fn view(ledger: u64, next: u64) -> Fake {
        Fake::new(ledger, next)
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
            other => unreachable!("{other:?}"),
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
            "unknown controller 'pid': accepted are ledger, intent, expectations, named, gated"
        );
    }
}
