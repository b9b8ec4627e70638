//! The store's side: serving a host's request, and sending every watch the changes a commit
//! made.

use setpoint_runtime::machine::{Replied, ReqId, StoreReply, StoreRequest, WatchDelivery};
use setpoint_runtime::model::LEADER;
use setpoint_runtime::store::{Op, WatchEvent};

use super::{DuplicateWatch, World, EPOCH_MS};
use crate::machine::{Input, Role};

impl World<'_> {
    pub(super) fn serve(&mut self, host: usize, id: ReqId, req: StoreRequest, stale: bool) {
        self.note(|| format!("store serves host {host} request {id}: {}", brief(&req)));
        let before = self.store.revision();
        let now = self.now;
        let result = match req {
            StoreRequest::Read { prefixes } => Ok(StoreReply::Read {
                read: self.store.read(&prefixes),
                now_ms: EPOCH_MS + now,
            }),
            StoreRequest::Commit(txn) => {
                let holder = self.store.holder(LEADER);
                let controller = self.slots[host].role == Role::Controller;
                let removals = if controller {
                    self.removals(host, &txn)
                } else {
                    Vec::new()
                };
                let r = self.store.commit(&txn);
                if r.is_ok() && controller {
                    self.check_fence(host, holder, &txn);
                    self.deletes.extend(removals);
                }
                r.map(StoreReply::Committed)
            }
            StoreRequest::Revision => Ok(StoreReply::Revision(self.store.revision())),
            StoreRequest::Grant { ttl } => {
                let lease = self.store.grant(now, ttl.as_millis() as u64, Some(host));
                if !stale {
                    self.lease_lives.insert(lease, self.slots[host].life);
                }
                Ok(StoreReply::Granted(lease))
            }
            StoreRequest::KeepAlive(l) => {
                let kept = self.store.keep_alive(now, l);
                if kept.is_ok() {
                    self.note_late_renewal(host, l);
                    // A restarted agent takes its node's lease over by renewing it.
                    if !stale {
                        self.lease_lives.insert(l, self.slots[host].life);
                    }
                }
                kept.map(|()| StoreReply::KeptAlive)
            }
            StoreRequest::Revoke(l) => {
                self.store.revoke(l);
                Ok(StoreReply::Revoked)
            }
            StoreRequest::Watch { .. } if stale => return,
            StoreRequest::Watch { .. } if self.slots[host].cancelled.contains(&id) => {
                self.reply(
                    host,
                    Input::Replied(Replied {
                        id,
                        result: Ok(StoreReply::Watching),
                    }),
                );
                return;
            }
            StoreRequest::Watch { prefixes, after } => {
                self.reply(
                    host,
                    Input::Replied(Replied {
                        id,
                        result: Ok(StoreReply::Watching),
                    }),
                );
                match self.store.since(after, &prefixes) {
                    Ok(past) => {
                        let open = self
                            .watches
                            .iter()
                            .find(|((h, _), p)| *h == host && **p == prefixes)
                            .map(|((_, w), _)| *w);
                        if let Some(open) = open {
                            self.protocol.duplicate_watches.push(DuplicateWatch {
                                at_ms: now,
                                host,
                                open,
                                new: id,
                                prefixes: prefixes.clone(),
                            });
                        }
                        self.watches.insert((host, id), prefixes);
                        for r in past {
                            self.deliver(host, id, r.revision, r.changes);
                        }
                    }
                    Err(c) => self.reply(
                        host,
                        Input::Watch(WatchDelivery {
                            watch: id,
                            event: WatchEvent::Lost(format!(
                                "required revision {} has been compacted (compacted to {})",
                                after + 1,
                                c.compacted
                            )),
                        }),
                    ),
                }
                self.fan_out(before);
                return;
            }
            StoreRequest::CancelWatch(_) => return,
        };
        if !stale {
            self.reply(host, Input::Replied(Replied { id, result }));
        }
        self.fan_out(before);
    }

    /// Sends every watch the changes after revision `before`.
    pub(super) fn fan_out(&mut self, before: u64) {
        if self.store.revision() == before || self.watches.is_empty() {
            return;
        }
        let mut sends = Vec::new();
        for ((host, id), prefixes) in &self.watches {
            if let Ok(revs) = self.store.since(before, prefixes) {
                for r in revs {
                    sends.push((*host, *id, r));
                }
            }
        }
        for (host, id, r) in sends {
            self.deliver(host, id, r.revision, r.changes);
        }
    }
}

/// A request in a few words, for traces.
fn brief(req: &StoreRequest) -> String {
    match req {
        StoreRequest::Read { prefixes } => format!("read {}", prefixes.join(" ")),
        StoreRequest::Commit(t) => {
            let keys: Vec<&str> = t
                .ops
                .iter()
                .map(|op| match op {
                    Op::Put { key, .. } | Op::Delete { key } => key.as_str(),
                })
                .collect();
            format!("commit {}", keys.join(" "))
        }
        StoreRequest::Revision => "revision".into(),
        StoreRequest::Grant { ttl } => format!("grant {} ms", ttl.as_millis()),
        StoreRequest::KeepAlive(l) => format!("keep-alive {l}"),
        StoreRequest::Revoke(l) => format!("revoke {l}"),
        StoreRequest::Watch { prefixes, after } => {
            format!("watch {} after {after}", prefixes.join(" "))
        }
        StoreRequest::CancelWatch(w) => format!("cancel watch {w}"),
    }
}
