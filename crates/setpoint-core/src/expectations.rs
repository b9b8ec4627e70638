//! `expectations`: the Kubernetes ReplicaSet controller's way of counting its own work.
//!
//! After it writes, the controller records what it expects to observe: the copies it created
//! must reach the ledger, and the copies it sent delete commands to must leave it. Until every
//! expectation is observed, it sits passes out, so it never acts twice on one stale picture.
//! Kubernetes cannot afford to wait forever for an event that may have been lost, so an
//! expectation older than a TTL (five minutes there) counts as satisfied. When the report delay
//! outlives the TTL, the controller then reads a ledger that still lacks its creations and creates
//! them again: the overshoot that Kubernetes' own issue tracker records as extra pods.
//!
//! Observation here reads the ledger: a created copy is observed once it is on the ledger, or
//! once it has died before getting there (it never will); a deleted copy is observed once the
//! ledger no longer shows it. A restart loses the record, as it does in Kubernetes.

use crate::action::Action;
use crate::view::{Batch, CopyId, Desired, LedgerView, Time};

/// The settings of an [`Expectations`] controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpectationsConfig {
    /// Seconds after which an unmet expectation counts as satisfied. Default 300, Kubernetes'
    /// `ExpectationsTimeout`.
    ///
    /// ## Warning
    /// A TTL shorter than the report delay plus the startup time brings back the overshoot the
    /// expectations exist to prevent: the controller stops waiting before its copies can show.
    pub ttl: Time,
    /// The most copies one pass creates or deletes. Default 500, Kubernetes' `BurstReplicas`.
    pub burst: u64,
}

impl Default for ExpectationsConfig {
    fn default() -> Self {
        ExpectationsConfig {
            ttl: 300,
            burst: 500,
        }
    }
}

/// What the controller expects to observe after its last write.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Expectation {
    /// The copies it created, which must reach the ledger.
    created: Option<Batch>,
    /// The copies it sent delete commands to, which must leave the ledger.
    deleted: Vec<CopyId>,
    /// When it wrote.
    set_at: Time,
}

/// The `expectations` controller: settings plus the expectation of its last write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expectations {
    config: ExpectationsConfig,
    pending: Option<Expectation>,
}

impl Expectations {
    /// A controller with the given settings and no expectation.
    pub fn new(config: ExpectationsConfig) -> Self {
        Expectations {
            config,
            pending: None,
        }
    }

    /// The settings.
    pub fn config(&self) -> ExpectationsConfig {
        self.config
    }

    /// Forgets the expectation, as a restart does.
    pub fn restart(&mut self) {
        self.pending = None;
    }

    /// When the outstanding expectation expires, if there is one.
    pub fn wake_at(&self) -> Option<Time> {
        self.pending
            .as_ref()
            .map(|e| e.set_at.saturating_add(self.config.ttl))
    }

    /// One pass: sits out while an expectation is unmet and unexpired; otherwise corrects toward
    /// `desired` from the ledger alone, at most `burst` copies, and records what it expects.
    pub fn pass<V: LedgerView>(&mut self, desired: Desired, view: &V) -> Option<Action> {
        if let Some(e) = &self.pending {
            let unmet_creations = e.created.map_or(0, |b| view.in_flight(b));
            let unmet_deletions = e.deleted.iter().filter(|&&c| view.shows(c)).count() as u64;
            let expired = view.now() >= e.set_at.saturating_add(self.config.ttl);
            if unmet_creations + unmet_deletions > 0 && !expired {
                return None;
            }
            self.pending = None;
        }
        let seen = view.on_ledger();
        let burst = self.config.burst.max(1);
        let target = desired.copies;
        if target > seen {
            let batch = Batch {
                first: view.next_copy(),
                count: (target - seen).min(burst),
            };
            self.pending = Some(Expectation {
                created: Some(batch),
                deleted: Vec::new(),
                set_at: view.now(),
            });
            Some(Action::Create {
                target: seen + batch.count,
                counted: seen,
                batch,
            })
        } else if target < seen {
            let n = (seen - target).min(burst);
            self.pending = Some(Expectation {
                created: None,
                deleted: view.oldest_on_ledger(n),
                set_at: view.now(),
            });
            Some(Action::Delete {
                target: seen - n,
                counted: seen,
            })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::Fake;

    const SIX: Desired = Desired { copies: 6 };

    fn controller(ttl: Time, burst: u64) -> Expectations {
        Expectations::new(ExpectationsConfig { ttl, burst })
    }

    #[test]
    fn sits_out_passes_until_its_creations_are_observed() {
        let mut c = controller(300, 500);
        let first = c.pass(SIX, &Fake::new(0, 0)).unwrap();
        assert_eq!(first.size(), 6);
        let mut v = Fake::new(0, 6);
        v.now = 15;
        v.in_flight.insert(0, 6);
        assert_eq!(c.pass(SIX, &v), None, "expectation unmet: sit out");
        v.in_flight.insert(0, 0);
        v.shown = (0..6).map(CopyId).collect();
        assert_eq!(c.pass(SIX, &v), None, "observed, and nothing to do");
        assert_eq!(c.wake_at(), None);
    }

    #[test]
    fn an_expired_expectation_counts_as_satisfied_and_the_stale_ledger_overshoots() {
        let mut c = controller(30, 500);
        c.pass(SIX, &Fake::new(0, 0)).unwrap();
        assert_eq!(c.wake_at(), Some(30));
        let mut v = Fake::new(0, 6);
        v.in_flight.insert(0, 6);
        v.now = 29;
        assert_eq!(c.pass(SIX, &v), None);
        v.now = 30;
        let again = c.pass(SIX, &v).unwrap();
        assert_eq!(again.size(), 6, "the copies in flight are created again");
    }

    #[test]
    fn burst_limits_one_pass_and_the_target_says_so() {
        let mut c = controller(300, 4);
        let a = c.pass(SIX, &Fake::new(0, 0)).unwrap();
        assert_eq!(
            a,
            Action::Create {
                target: 4,
                counted: 0,
                batch: Batch {
                    first: CopyId(0),
                    count: 4
                }
            }
        );
    }

    #[test]
    fn deletions_wait_until_the_deleted_copies_leave_the_ledger() {
        let mut c = controller(300, 500);
        let a = c.pass(SIX, &Fake::new(8, 8)).unwrap();
        assert_eq!(
            a,
            Action::Delete {
                target: 6,
                counted: 8
            }
        );
        let mut v = Fake::new(8, 8);
        v.now = 15;
        assert_eq!(c.pass(SIX, &v), None, "copies 0 and 1 still shown");
        v.shown.remove(&CopyId(0));
        v.shown.remove(&CopyId(1));
        assert_eq!(c.pass(SIX, &v), None, "observed; the ledger shows six");
    }

    #[test]
    fn a_restart_forgets_the_expectation() {
        let mut c = controller(300, 500);
        c.pass(SIX, &Fake::new(0, 0)).unwrap();
        c.restart();
        let mut v = Fake::new(0, 6);
        v.in_flight.insert(0, 6);
        assert_eq!(c.pass(SIX, &v).unwrap().size(), 6);
    }
}
