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
use crate::view::{Batch, CopyId, Desired, LedgerView, Time};

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
        /// The batches this controller created that may still be in flight, oldest first, each
        /// with the time of the pass that created it.
        batches: VecDeque<(Batch, Time)>,
        /// The next copy at this controller's first pass since it started (or restarted):
        /// copies numbered below it were made before, by an earlier life or leader, and it never
        /// counted them in flight ([`Controller::delete_targets`]).
        first: Option<CopyId>,
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
                first: None,
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
            Controller::Intent { batches, first } => {
                batches.clear();
                *first = None;
            }
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
    #[inline]
    pub fn pass<V: LedgerView>(&mut self, desired: Desired, view: &V) -> Option<Action> {
        match self {
            // `ledger`'s pass is one comparison. Inlined into a driver's loop it costs a few
            // instructions, where the call built the action in memory for the caller to read
            // back (callgrind, issue 24: the call was a tenth of the lab's million-cell sweep).
            // The controllers with memory stay one call.
            Controller::Ledger => toward(desired.copies, view.on_ledger(), view),
            _ => self.pass_remembering(desired, view),
        }
    }

    /// [`Self::pass`] of the controllers that remember their own work between passes.
    #[inline(never)]
    fn pass_remembering<V: LedgerView>(&mut self, desired: Desired, view: &V) -> Option<Action> {
        match self {
            Controller::Ledger | Controller::Intent { .. } => {}
            Controller::Expectations(e) => return e.pass(desired, view),
            Controller::Named(n) => return n.pass(desired, view),
            Controller::Gated(g) => return g.pass(desired, view),
        }
        let counted = view.on_ledger() + self.pending(view);
        let action = toward(desired.copies, counted, view);
        if let Controller::Intent { batches, first } = self {
            first.get_or_insert_with(|| view.next_copy());
            if let Some(Action::Create { batch, .. }) = &action {
                batches.push_back((*batch, view.now()));
            }
        }
        action
    }

    /// Where `n` delete commands go, after a pass that returned [`Action::Delete`].
    ///
    /// CA25: to the oldest copies the ledger shows, and so for every controller but `intent`.
    /// `intent` alone also counts copies the ledger does not show, its own creations in flight,
    /// and its order is:
    /// 1. the ledger's copies already commanded to stop ([`LedgerView::commanded`]), oldest
    ///    first: a surplus already commanded away is commanded again where it was, so a repeat
    ///    is harmless, as CA25's repeats are;
    /// 2. the ledger's copies made since its first pass whose word predates its newest batch in
    ///    flight ([`LedgerView::seen_at`] at or before the batch's creation; all of them when
    ///    nothing is in flight), oldest first (CA25). It counted each in flight until the ledger
    ///    showed it, so a surplus among them comes from a stale ledger: one may have died
    ///    unseen, which is what a batch replaced, and a command to a dead copy is harmless;
    /// 3. its creations in flight, newest first, those the reports show started
    ///    ([`LedgerView::started`]) last: a process that is up is closer to running than one
    ///    not started, which may sit on a node cut off (chaos finding 16, restarts-during-
    ///    partitions seed 29,399: of four replacements, the newest two were deleted, one
    ///    up on a node that had just rejoined, while two on a cut-off node were not started);
    /// 4. the other copies the ledger shows, oldest first: its own seen running since its
    ///    newest batch was made, and those made before its first pass (an earlier life's or an
    ///    earlier leader's), which it never counted in flight. Their appearance is what made
    ///    the surplus: its batches were made without them.
    ///
    /// Where the lesson reaches this is CA25: there `intent` never restarts, every copy is its
    /// own, and its ledger is one age, so a surplus meets group 2 first, the oldest copies.
    /// The other groups matter after a restart or a leader change while the ledger is stale:
    /// the new `intent` counts the copies its predecessor made and the ledger does not show yet
    /// as missing, and makes them again (the overshoot the lab predicts for a restart in the
    /// blind window). When the old copies reappear, the surplus is the replacements that have
    /// not started, not the copies that run (chaos finding 13: a leader change in a store
    /// outage; CA25 deleted all four running copies there, two passes apart). Kubernetes'
    /// ReplicaSet ranks its victims the same way: pending before running.
    pub fn delete_targets<V: LedgerView>(&self, view: &V, n: u64) -> Vec<CopyId> {
        let Controller::Intent { batches, first } = self else {
            return view.oldest_on_ledger(n);
        };
        let first = first.unwrap_or(CopyId(0));
        let newest = batches.back().map(|&(_, at)| at);
        let shown = view.oldest_on_ledger(view.on_ledger());
        let (commanded, rest): (Vec<CopyId>, Vec<CopyId>) =
            shown.into_iter().partition(|&c| view.commanded(c));
        let (stale, others): (Vec<CopyId>, Vec<CopyId>) = rest
            .into_iter()
            .partition(|&c| c >= first && newest.is_none_or(|t| view.seen_at(c) <= t));
        let (started, not_started): (Vec<CopyId>, Vec<CopyId>) = batches
            .iter()
            .rev()
            .flat_map(|&(batch, _)| view.in_flight_copies(batch))
            .partition(|&c| view.started(c));
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        commanded
            .into_iter()
            .chain(stale)
            .chain(not_started)
            .chain(started)
            .chain(others)
            .take(n)
            .collect()
    }

    /// The controller's own work in flight, as far as it remembers it. Batches with nothing in
    /// flight are forgotten: by the view's promise they never come back.
    fn pending<V: LedgerView>(&mut self, view: &V) -> u64 {
        match self {
            Controller::Intent { batches, .. } => {
                let mut pending = 0;
                batches.retain(|&(b, _)| {
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
#[inline]
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
            Controller::Intent { batches, .. } => assert!(batches.is_empty()),
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
    fn a_new_intent_sends_delete_commands_to_its_work_in_flight_before_earlier_copies() {
        // Chaos finding 13: copies 0 … 3 run, made by an earlier leader, and the ledger does
        // not show them; a new intent creates 4 more (copies 4 … 7). The ledger then shows 2
        // of the old ones again: counted 2 + 4 in flight.
        let mut c = Controller::new(ControllerKind::Intent);
        let mut v = view(0, 4);
        v.shown.clear();
        assert_eq!(c.pass(Desired { copies: 4 }, &v).unwrap().size(), 4);
        let mut v = view(2, 8);
        v.in_flight.insert(4, 4);
        let a = c.pass(Desired { copies: 4 }, &v).unwrap();
        assert_eq!(a.size(), 2);
        assert_eq!(
            c.delete_targets(&v, a.size()),
            vec![CopyId(7), CopyId(6)],
            "the replacements not yet started go, not the copies that run"
        );
        // More commands than copies in flight: the rest go to the oldest on the ledger.
        assert_eq!(
            c.delete_targets(&v, 5),
            vec![CopyId(7), CopyId(6), CopyId(5), CopyId(4), CopyId(0)]
        );
        // A copy already commanded to stop takes the first command again.
        v.commanded.insert(CopyId(1));
        assert_eq!(c.delete_targets(&v, 2), vec![CopyId(1), CopyId(7)]);
        v.commanded.clear();
        // Copies in flight the reports show started go after those not started (finding 16).
        v.started.extend([CopyId(7), CopyId(5)]);
        assert_eq!(
            c.delete_targets(&v, 5),
            vec![CopyId(6), CopyId(4), CopyId(7), CopyId(5), CopyId(0)]
        );
    }

    #[test]
    fn intent_sends_delete_commands_to_its_own_copies_on_the_ledger_first_as_ca25() {
        // The lesson's case: a copy of its own died before the ledger showed its start; intent
        // replaced it, and the ledger now shows its start (not its death). The command goes to
        // it, where it is harmless, not to the replacement in flight.
        let mut c = Controller::new(ControllerKind::Intent);
        assert_eq!(
            c.pass(Desired { copies: 1 }, &view(0, 0)).unwrap().size(),
            1
        );
        let mut dead = view(0, 1);
        dead.in_flight.insert(0, 0);
        assert_eq!(c.pass(Desired { copies: 1 }, &dead).unwrap().size(), 1);
        let mut v = view(1, 2);
        v.in_flight.insert(1, 1);
        let a = c.pass(Desired { copies: 1 }, &v).unwrap();
        assert_eq!(c.delete_targets(&v, a.size()), vec![CopyId(0)]);
        // Had the ledger seen copy 0 running after the replacement was made, the replacement
        // would be the surplus.
        v.reported_before = 1;
        assert_eq!(c.delete_targets(&v, a.size()), vec![CopyId(1)]);
    }

    #[test]
    fn other_controllers_and_a_restarted_intent_send_delete_commands_by_ca25() {
        let mut v = view(9, 20);
        v.in_flight.insert(10, 3);
        let ledger = Controller::new(ControllerKind::Ledger);
        assert_eq!(
            ledger.delete_targets(&v, 3),
            vec![CopyId(0), CopyId(1), CopyId(2)]
        );
        let mut intent = Controller::new(ControllerKind::Intent);
        intent.pass(Desired { copies: 12 }, &view(9, 10));
        intent.restart();
        assert_eq!(intent.delete_targets(&v, 2), vec![CopyId(0), CopyId(1)]);
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
