//! Log requests ([`LogServing`]): `setpoint logs` on any host asks for a piece of a copy's log
//! through the store ([`crate::log_requests`]); the driver reads it
//! ([`AgentOutput::ReadLog`]) and the agent writes it back in place.
//!
//! Bounded: at most [`MAX_SERVING`] requests at once (others wait for a later sync), each
//! answered once, each at most its `max_bytes` (itself at most 64 KiB). A record that does not
//! decode is skipped and logged once; one out of bounds is answered with why and never reaches
//! a path.

use std::collections::{BTreeMap, BTreeSet};

use super::messages::AgentOutput;
use super::outbox::{Outbox, Purpose};
use super::supervisor::Supervisor;
use super::AgentCoreConfig;
use crate::log_requests::{self, Asked, LogAnswer, LogRequest, MAX_SERVING};
use crate::machine::{StoreRequest, StoreResult};
use crate::store::{LeaseId, Revision, StoreError};

/// A request being served: read by the driver, then answered.
#[derive(Debug)]
struct Serving {
    req: LogRequest,
    revision: Revision,
    lease: Option<LeaseId>,
}

/// The log requests being served: see the [module docs](self).
#[derive(Debug, Default)]
pub(super) struct LogServing {
    /// By key.
    serving: BTreeMap<String, Serving>,
    /// Keys (with the revision) of records refused, so each is logged once.
    refused: BTreeSet<(String, Revision)>,
}

impl LogServing {
    /// Takes the new requests of a sync, up to the cap.
    pub(super) fn take(
        &mut self,
        now: u64,
        asked: Vec<Asked>,
        copies: &Supervisor,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) {
        for (key, req, revision, lease) in asked {
            if self.serving.contains_key(&key) {
                continue;
            }
            let req = match req {
                Ok(r) => r,
                Err(why) => {
                    if self.refused.insert((key.clone(), revision)) {
                        out.log(format!("skipped the log request at {key}: {why}"));
                    }
                    continue;
                }
            };
            if let Err(why) = req.check() {
                if self.refused.insert((key.clone(), revision)) {
                    out.log(format!("refused the log request at {key}: {why}"));
                }
                let answer = LogAnswer {
                    from: req.from,
                    hex: String::new(),
                    len: 0,
                    running: false,
                    missing: false,
                    error: Some(why),
                };
                self.serving.insert(
                    key.clone(),
                    Serving {
                        req,
                        revision,
                        lease,
                    },
                );
                self.answer(now, key, answer, copies, cfg, out);
                continue;
            }
            if self.serving.len() >= MAX_SERVING {
                continue;
            }
            out.push(AgentOutput::ReadLog {
                key: key.clone(),
                copy: req.copy.clone(),
                from: req.from,
                tail: req.tail,
                max_bytes: req.max_bytes,
            });
            self.serving.insert(
                key,
                Serving {
                    req,
                    revision,
                    lease,
                },
            );
        }
        // Forget refusals of records that are gone (bounded by what is asked now).
        if self.refused.len() > 4 * MAX_SERVING {
            self.refused.clear();
        }
    }

    /// The driver read the range asked for at `key`: write it back.
    pub(super) fn on_read(
        &mut self,
        now: u64,
        key: String,
        read: Result<Option<crate::logs::Range>, String>,
        copies: &Supervisor,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) {
        let Some(s) = self.serving.get(&key) else {
            return;
        };
        let running = copies.get(&s.req.copy).is_some_and(|l| !l.exited());
        let answer = match read {
            Ok(Some(r)) => LogAnswer {
                from: r.from,
                hex: log_requests::hex(&r.bytes),
                len: r.len,
                running,
                missing: false,
                error: None,
            },
            Ok(None) => LogAnswer {
                from: 0,
                hex: String::new(),
                len: 0,
                running,
                missing: true,
                error: None,
            },
            Err(why) => LogAnswer {
                from: s.req.from,
                hex: String::new(),
                len: 0,
                running,
                missing: false,
                error: Some(format!("cannot read the log of {}: {why}", s.req.copy)),
            },
        };
        self.answer(now, key, answer, copies, cfg, out);
    }

    fn answer(
        &mut self,
        now: u64,
        key: String,
        answer: LogAnswer,
        _copies: &Supervisor,
        cfg: &AgentCoreConfig,
        out: &mut Outbox,
    ) {
        let Some(s) = self.serving.get_mut(&key) else {
            return;
        };
        s.req.answer = Some(answer);
        let txn = log_requests::answer_txn(&key, &s.req, s.revision, s.lease);
        out.send(
            now,
            StoreRequest::Commit(txn),
            Purpose::LogAnswer { key },
            cfg.request_timeout_ms,
        );
    }

    /// After the reply to the answer at `key`.
    pub(super) fn on_answered(&mut self, key: &str, result: &StoreResult, out: &mut Outbox) {
        self.serving.remove(key);
        match result {
            Ok(_) | Err(StoreError::LeaseExpired(_)) => {}
            // The asker asked again or gave up meanwhile.
            Err(e) if e.is_conflict() => {}
            Err(e) => out.log(format!("cannot answer a log request: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{record, supervisor};
    use super::*;
    use crate::model::{encode, Phase};
    use crate::store::Entry;

    fn request(copy: &str, max_bytes: u64) -> LogRequest {
        LogRequest {
            copy: copy.into(),
            from: 0,
            tail: None,
            max_bytes,
            requested_ms: 0,
            answer: None,
        }
    }

    fn entry(key: &str, value: String, rev: Revision) -> Entry {
        Entry {
            key: key.into(),
            value,
            create_revision: rev,
            mod_revision: rev,
            lease: Some(7),
        }
    }

    fn answered(outputs: &[AgentOutput]) -> Vec<LogRequest> {
        outputs
            .iter()
            .filter_map(|o| match o {
                AgentOutput::Store {
                    request: StoreRequest::Commit(txn),
                    ..
                } => Some(txn),
                _ => None,
            })
            .flat_map(|t| t.ops.iter())
            .filter_map(|op| match op {
                crate::store::Op::Put { value, .. } => serde_json::from_str(value).ok(),
                crate::store::Op::Delete { .. } => None,
            })
            .collect()
    }

    #[test]
    fn requests_are_read_then_answered_once_bounded_and_malformed_ones_never_read() {
        let cfg = AgentCoreConfig::new("a");
        let copies = supervisor(vec![record(0, Phase::Running, 100)]);
        let p = crate::model::keys::log_requests_of("a");
        let mut entries = vec![
            entry(&format!("{p}bad"), "{not json".into(), 3),
            entry(&format!("{p}big"), encode(&request("w-0", 1 << 20)), 4),
            entry(&format!("{p}path"), encode(&request("../x", 10)), 5),
        ];
        for i in 0..6 {
            entries.push(entry(
                &format!("{p}ok{i}"),
                encode(&request("w-0", 10)),
                10 + i,
            ));
        }
        let asked = log_requests::pending(&entries, "a");
        assert_eq!(asked.len(), 9);
        let mut serving = LogServing::default();
        let mut out = Outbox::new();
        serving.take(0, asked.clone(), &copies, &cfg, &mut out);
        let outputs = out.drain();
        let reads: Vec<&String> = outputs
            .iter()
            .filter_map(|o| match o {
                AgentOutput::ReadLog { key, .. } => Some(key),
                _ => None,
            })
            .collect();
        // The two out of bounds are answered with why at once and take no read; the cap of
        // reads at once counts them (they are in flight too).
        assert_eq!(reads.len(), MAX_SERVING - 2, "{outputs:?}");
        let refusals = answered(&outputs);
        assert_eq!(refusals.len(), 2);
        assert!(refusals
            .iter()
            .all(|r| r.answer.as_ref().unwrap().error.is_some()));
        let logged: Vec<String> = outputs
            .iter()
            .filter_map(|o| match o {
                AgentOutput::Log(l) => Some(l.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(logged.len(), 3, "{logged:?}");
        assert!(logged[0].contains("skipped the log request at /logreq/a/bad"));
        // Seen again while in flight: nothing new, and the bad record is not logged again.
        serving.take(1, asked.clone(), &copies, &cfg, &mut out);
        assert!(out.drain().is_empty());
        // A read comes back: it is written in place as hex, with the copy running.
        let key = reads[0].clone();
        let range = crate::logs::Range {
            from: 0,
            bytes: b"hi\n".to_vec(),
            len: 3,
        };
        serving.on_read(2, key.clone(), Ok(Some(range)), &copies, &cfg, &mut out);
        let a = answered(&out.drain());
        let got = a[0].answer.as_ref().unwrap();
        assert_eq!(
            (got.bytes().unwrap(), got.running, got.next()),
            (b"hi\n".to_vec(), true, 3)
        );
        serving.on_answered(
            &key,
            &Ok(crate::machine::StoreReply::Committed(20)),
            &mut out,
        );
        // One slot is free: one more read.
        serving.take(3, asked, &copies, &cfg, &mut out);
        let more = out
            .drain()
            .iter()
            .filter(|o| matches!(o, AgentOutput::ReadLog { .. }))
            .count();
        assert_eq!(more, 1);
    }

    #[test]
    fn an_answer_the_store_failed_is_logged_and_one_the_asker_overtook_is_not() {
        let mut serving = LogServing::default();
        let mut out = Outbox::new();
        let logged = Outbox::drain_logs;
        // The asker asked again or gave up meanwhile: nothing to say.
        let overtaken = Err(StoreError::Conflict {
            key: "/logreq/a/x".into(),
            expected: 3,
            found: 4,
        });
        serving.on_answered("/logreq/a/x", &overtaken, &mut out);
        assert!(logged(&mut out).is_empty());
        // The store failed: the operator is told the answer did not go out.
        let failed = Err(StoreError::Unavailable("connection refused".into()));
        serving.on_answered("/logreq/a/y", &failed, &mut out);
        assert_eq!(
            logged(&mut out),
            ["cannot answer a log request: store unavailable: connection refused"]
        );
    }
}
