//! The network between the hosts and the store: requests up a host's link, replies and watch
//! events down it, and the watches a lost event breaks.

use setpoint_runtime::machine::{Replied, ReqId, StoreRequest, WatchDelivery};
use setpoint_runtime::store::{StoreError, WatchEvent};

use super::{Ev, World, WATCH_BREAK_MS};
use crate::machine::Input;
use crate::net::Dir;

impl World<'_> {
    pub(super) fn reply(&mut self, host: usize, input: Input) {
        if self.slots[host].hung > 0 {
            // The hung member owes it; the stream stays open and silent.
            self.slots[host].hung_out.push_back(input);
            return;
        }
        if let Some(at) = self.net.send(&mut self.rng, host, Dir::Down, self.now) {
            let life = self.slots[host].life;
            self.push(
                at,
                Ev::ToHost {
                    host,
                    life,
                    input,
                    local: false,
                },
            );
        } else if let Input::Watch(d) = &input {
            self.break_watch(host, d.watch);
        }
    }

    /// The store went down: every open watch stream breaks.
    pub(super) fn break_every_watch(&mut self) {
        let open: Vec<(usize, ReqId)> = self.watches.keys().copied().collect();
        for (host, watch) in open {
            self.note(|| format!("store down: host {host}'s watch {watch} breaks"));
            self.break_watch(host, watch);
        }
    }

    /// The store is down: `host`'s request is refused, and the host is told a network delay
    /// later (as its client's connection attempt fails). A cancel needs no answer.
    pub(super) fn refuse(&mut self, host: usize, id: ReqId, req: &StoreRequest) {
        if matches!(req, StoreRequest::CancelWatch(_)) {
            return;
        }
        self.note(|| format!("store refuses host {host} request {id}: down"));
        let result = Err(StoreError::Unavailable(
            "connection refused: the store is down".into(),
        ));
        self.reply(host, Input::Replied(Replied { id, result }));
    }

    /// The watch's stream broke: the store forgets it and the host hears `Lost` later.
    fn break_watch(&mut self, host: usize, watch: ReqId) {
        if self.watches.remove(&(host, watch)).is_some() {
            let at = self.now + WATCH_BREAK_MS;
            let life = self.slots[host].life;
            self.push(
                at,
                Ev::ToHost {
                    host,
                    life,
                    input: Input::Watch(WatchDelivery {
                        watch,
                        event: WatchEvent::Lost("the watch stream broke".into()),
                    }),
                    local: true,
                },
            );
        }
    }

    pub(super) fn arrive(&mut self, host: usize, input: Input, local: bool) {
        if !local && !self.net.up(host, Dir::Down) {
            if let Input::Watch(d) = &input {
                self.break_watch(host, d.watch);
            }
            return;
        }
        if let Input::Watch(d) = &input {
            let lost = matches!(d.event, WatchEvent::Lost(_));
            if !lost && !self.watches.contains_key(&(host, d.watch)) {
                return; // cancelled or broken since: the client drops it
            }
        }
        self.step(host, input);
    }

    /// Sends one request up `host`'s link, now.
    pub(super) fn send_up(&mut self, host: usize, id: ReqId, request: StoreRequest) {
        if let Some(at) = self.net.send(&mut self.rng, host, Dir::Up, self.now) {
            self.push(
                at,
                Ev::ToStore {
                    host,
                    life: self.slots[host].life,
                    id,
                    req: request,
                },
            );
        }
    }

    pub(super) fn deliver(
        &mut self,
        host: usize,
        watch: ReqId,
        revision: u64,
        changes: Vec<setpoint_runtime::store::Change>,
    ) {
        self.reply(
            host,
            Input::Watch(WatchDelivery {
                watch,
                event: WatchEvent::Changes { revision, changes },
            }),
        );
    }
}
