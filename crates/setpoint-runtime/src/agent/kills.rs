//! Kill requests ([`Kills`]): `setpoint kill` writes a request under the node's prefix; the agent
//! SIGKILLs the copy's group (checked by start time) and writes the outcome back.
//!
//! A request names the copy's incarnation, so a kill meant for an earlier copy of a name never
//! reaches a later one. Each request is answered once: while its answer is in flight it is not
//! carried out again.
//!
//! It is separate because it is the one way an operator acts on a copy directly, beside the
//! assignments.

use std::collections::BTreeSet;

use super::messages::{AgentOutput, CopySignal};
use super::outbox::{Outbox, Purpose};
use super::supervisor::Supervisor;
use super::AgentCoreConfig;
use crate::machine::{StoreRequest, StoreResult};
use crate::remote;
use crate::store::{LeaseId, Revision, StoreError};

/// A kill request addressed to this node: key, request, revision, the requester's lease.
pub(super) type Kill = (String, remote::KillRequest, Revision, Option<LeaseId>);

/// The kill requests being answered: see the [module docs](self).
#[derive(Debug, Default)]
pub(super) struct Kills {
    /// Kill requests being answered, by key.
    answering: BTreeSet<String>,
}

impl Kills {
    /// Carries out the kill requests addressed to this node and writes each outcome back for the
    /// `kill` command.
    pub(super) fn carry_out(
        &mut self,
        now: u64,
        kills: Vec<Kill>,
        copies: &mut Supervisor,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) {
        let node = &cfg.node;
        for (key, mut req, rev, lease) in kills {
            if self.answering.contains(&key) {
                continue;
            }
            let outcome = match copies.get(&req.copy) {
                Some(l) if l.record.incarnation == req.incarnation && !l.exited() => {
                    if l.record.pid == 0 && cfg.simulate_copies {
                        // Nothing to signal: it ends at the next tend, a commanded death.
                        copies.kill_simulated(&req.copy, now);
                        format!("killed simulated copy on {node}")
                    } else if l.record.pid == 0 {
                        format!("{} had already ended", req.copy)
                    } else {
                        let pid = l.record.pid;
                        out.push(AgentOutput::Signal {
                            copy: req.copy.clone(),
                            pid,
                            start_ticks: l.record.start_ticks,
                            signal: CopySignal::Kill,
                        });
                        // A commanded death: its report says so, and the controller replaces
                        // it at once rather than backing off.
                        copies.mark_killed(&req.copy);
                        format!("killed pid {pid} on {node}")
                    }
                }
                _ => format!("{} does not run on {node}", req.copy),
            };
            out.log(format!("kill request for {}: {outcome}", req.copy));
            req.outcome = Some(outcome);
            let txn = remote::answer_txn(&key, &req, rev, lease);
            self.answering.insert(key.clone());
            out.send(
                now,
                StoreRequest::Commit(txn),
                Purpose::KillAnswer { key },
                cfg.request_timeout_ms,
            );
        }
    }

    /// After the reply to the answer at `key`.
    pub(super) fn on_answered(&mut self, key: &str, result: &StoreResult, out: &mut Outbox) {
        self.answering.remove(key);
        match result {
            Ok(_) | Err(StoreError::LeaseExpired(_)) => {}
            Err(e) if e.is_conflict() => {}
            Err(e) => out.log(format!("cannot answer a kill request: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{record, supervisor};
    use super::*;
    use crate::model::Phase;

    fn request(copy: &str, incarnation: Revision) -> remote::KillRequest {
        remote::KillRequest {
            copy: copy.into(),
            incarnation,
            requested_ms: 0,
            outcome: None,
        }
    }

    #[test]
    fn a_kill_reaches_only_the_incarnation_it_names_and_each_request_is_answered_once() {
        let cfg = AgentCoreConfig::new("a");
        let mut copies = supervisor(vec![record(0, Phase::Running, 100)]);
        let mut kills = Kills::default();
        let mut out = Outbox::new();
        let asked = vec![
            ("k0".to_owned(), request("w-0", 10), 3, None),
            ("k1".to_owned(), request("w-0", 99), 4, None),
        ];
        kills.carry_out(0, asked.clone(), &mut copies, &cfg, &mut out);
        let outputs = out.drain();
        let signals = outputs
            .iter()
            .filter(|o| {
                matches!(
                    o,
                    AgentOutput::Signal {
                        pid: 100,
                        signal: CopySignal::Kill,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(signals, 1, "{outputs:?}");
        assert!(
            copies.get("w-0").unwrap().record.killed,
            "a commanded death: the report says so, and the controller does not back off"
        );
        let answers: Vec<String> = outputs
            .iter()
            .filter_map(|o| match o {
                AgentOutput::Log(l) => Some(l.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            answers,
            [
                "kill request for w-0: killed pid 100 on a",
                "kill request for w-0: w-0 does not run on a"
            ]
        );
        // Seen again while the answers are in flight: not carried out twice.
        kills.carry_out(1, asked.clone(), &mut copies, &cfg, &mut out);
        assert!(out.drain().is_empty());
        kills.on_answered(
            "k0",
            &Ok(crate::machine::StoreReply::Committed(5)),
            &mut out,
        );
        kills.carry_out(2, asked[..1].to_vec(), &mut copies, &cfg, &mut out);
        assert_eq!(
            out.drain().len(),
            3,
            "answered, it may be carried out again if it is still there"
        );
    }

    /// An answer that meets a conflict (the request was answered before, or is gone) is a
    /// normal end and passes in silence; any other failure is logged. Mutant 556 of the
    /// mutation sample logged the conflicts too.
    #[test]
    fn a_conflicting_answer_passes_in_silence_and_a_failed_one_is_logged() {
        let mut kills = Kills::default();
        let mut out = Outbox::new();
        let conflict = StoreError::Conflict {
            key: "k0".into(),
            expected: 3,
            found: 0,
        };
        kills.answering.insert("k0".into());
        kills.on_answered("k0", &Err(conflict), &mut out);
        assert!(out.drain().is_empty());
        assert!(!kills.answering.contains("k0"), "no longer in flight");
        kills.answering.insert("k1".into());
        let down = StoreError::Unavailable("etcd is down".into());
        kills.on_answered("k1", &Err(down), &mut out);
        assert_eq!(
            out.drain_logs(),
            ["cannot answer a kill request: store unavailable: etcd is down"]
        );
        assert!(kills.answering.is_empty());
    }

    #[test]
    fn a_kill_of_a_simulated_copy_ends_it_by_the_agents_hand_and_signals_nothing() {
        // `--simulate-copies` (the load example): a copy has no process, so its pid is 0. A
        // kill must still end it, as a commanded death, not be answered "had already ended".
        let mut cfg = AgentCoreConfig::new("a");
        cfg.simulate_copies = true;
        let mut copies = supervisor(vec![record(0, Phase::Running, 0)]);
        let mut out = Outbox::new();
        let asked = vec![("k0".to_owned(), request("w-0", 10), 3, None)];
        Kills::default().carry_out(7, asked, &mut copies, &cfg, &mut out);
        let outputs = out.drain();
        assert!(
            !outputs
                .iter()
                .any(|o| matches!(o, AgentOutput::Signal { .. })),
            "{outputs:?}"
        );
        assert!(
            outputs.iter().any(|o| matches!(o,
                AgentOutput::Log(l) if l == "kill request for w-0: killed simulated copy on a")),
            "{outputs:?}"
        );
        assert!(
            copies.get("w-0").unwrap().record.killed,
            "a commanded death"
        );
        // Without simulated copies, a copy with no pid yet has nothing to kill.
        let mut copies = supervisor(vec![record(0, Phase::Running, 0)]);
        let asked = vec![("k0".to_owned(), request("w-0", 10), 3, None)];
        cfg.simulate_copies = false;
        Kills::default().carry_out(8, asked, &mut copies, &cfg, &mut out);
        assert!(out.drain().iter().any(|o| matches!(o,
            AgentOutput::Log(l) if l == "kill request for w-0: w-0 had already ended")));
        assert!(!copies.get("w-0").unwrap().record.killed);
    }
}
