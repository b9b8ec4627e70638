//! setpoint-core: the I/O-free heart of setpoint's reconciliation loops.
//!
//! A reconciliation pass is a pure function of four things: the desired state, the observed
//! ledger (a view that lags the world), the controller's own memory, and the current time. It
//! returns actions. It owns no clock, does no I/O and spawns nothing, so the same code runs under
//! the deterministic simulator (`setpoint-sim`) on virtual time and, later, under the real runtime
//! against real processes.
//!
//! Actions are phrased as *targets*, never as increments: an [`Action`] says "reach `target`
//! copies, having counted `counted`", and the number of copies to create or delete follows from
//! those two. A pass that is repeated on the same view therefore asks for the same thing again,
//! rather than "one more".
//!
//! # Layout
//! - [`view`]: what a pass may look at: [`LedgerView`], copy identities ([`CopyId`]) and the
//!   [`Batch`]es a pass creates.
//! - [`action`]: what a pass returns: [`Action`].
//! - [`controller`]: the controllers ([`ControllerKind`]) and their memory ([`Controller`]).
//! - [`metrics`]: the lesson's metrics ([`Metrics`]), the per-second series a run leaves
//!   ([`TraceRow`]) and [`metrics_from_series`]: the one definition the lab's engines and the
//!   runtime's measurement of real runs share.
//! - [`expectations`], [`named`], [`gated`]: the three controllers beyond the lesson's two,
//!   each with its memory and its pass.
//! - [`backoff`], [`rollout`]: crash-loop backoff and rolling updates, the rules the runtime and
//!   the lab's general engine both apply.
//!
//! # Example
//! ```
//! use setpoint_core::{Action, Batch, Controller, ControllerKind, CopyId, Desired, LedgerView};
//!
//! /// A ledger that shows 4 copies and nothing in flight.
//! struct Four;
//! impl LedgerView for Four {
//!     fn now(&self) -> u64 { 0 }
//!     fn on_ledger(&self) -> u64 { 4 }
//!     fn in_flight(&self, _batch: Batch) -> u64 { 0 }
//!     fn next_copy(&self) -> CopyId { CopyId(4) }
//!     fn shows(&self, copy: CopyId) -> bool { copy.0 < 4 }
//!     fn oldest_on_ledger(&self, n: u64) -> Vec<CopyId> { (0..n.min(4)).map(CopyId).collect() }
//!     fn in_flight_copies(&self, _batch: Batch) -> Vec<CopyId> { Vec::new() }
//!     fn reported_before(&self) -> u64 { 1 }
//! }
//!
//! let mut controller = Controller::new(ControllerKind::Ledger);
//! let action = controller.pass(Desired { copies: 6 }, &Four);
//! assert_eq!(action, Some(Action::Create {
//!     target: 6,
//!     counted: 4,
//!     batch: Batch { first: CopyId(4), count: 2 },
//! }));
//! ```

pub mod action;
pub mod backoff;
pub mod controller;
pub mod expectations;
#[cfg(test)]
mod fake;
pub mod gated;
pub mod metrics;
pub mod named;
pub mod rollout;
pub mod view;

pub use action::Action;
pub use controller::{Controller, ControllerKind, UnknownController};
pub use expectations::{Expectations, ExpectationsConfig};
pub use gated::Gated;
pub use metrics::{metrics_from_series, Metrics, TraceRow};
pub use named::Named;
pub use view::{Batch, CopyId, Desired, LedgerView, Name, Time};
