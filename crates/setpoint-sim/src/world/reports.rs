//! Copies that finish starting and reports on their way to the ledger: fixed delays, random
//! ones, and the pipelines of snapshots (`Flight`) that carry them.

use super::*;

impl Engine<'_> {
    /// The reports of snapshot `f` that reach the ledger at `t`, in their order: those whose
    /// workload's outages hold the snapshot's delivery to `t`.
    // Not inlined into the drain: see `Engine::scripted`.
    #[inline(never)]
    pub(super) fn land(&mut self, f: usize, t: Time) {
        let reports = std::mem::take(&mut self.flights[f].reports);
        let at = self.flights[f].at;
        for &(ev, _) in &reports {
            if let Ev::Arrive {
                w,
                id,
                n,
                end,
                made,
            } = ev
            {
                if self.works[w].hold(at) == t {
                    self.arrive(w, id, n, end, made);
                }
            }
        }
        let flight = &mut self.flights[f];
        flight.reports = reports;
        flight.keys.retain(|key| key.0 != t);
        if flight.keys.is_empty() {
            self.free_flight(f);
        }
    }

    /// Frees snapshot `f`, every report of it delivered (or the run over): it is no longer in
    /// flight, and the tests' log learns where its reports went.
    pub(super) fn free_flight(&mut self, f: usize) {
        let flight = &mut self.flights[f];
        if let Some(log) = self.log.as_mut() {
            let last = flight.reports.len().saturating_sub(1);
            for (k, &(_, i)) in flight.reports.iter().enumerate() {
                log[i].at = flight.at;
                // Every report but the last was made before a later snapshot replaced its own.
                log[i].replaced = k < last;
            }
        }
        flight.reports.clear();
        flight.works.clear();
        flight.keys.clear();
        let node = flight.node;
        if self.nodes[node].flight == Some(f) {
            self.nodes[node].flight = None;
        }
        self.free_flights.push(f);
    }

    /// Copies `first` to `first + n − 1` of workload `w` finish starting at `t`, in that order.
    pub(super) fn ready(&mut self, w: usize, first: u64, n: u32, t: Time) {
        let end = first + u64::from(n);
        if self.fixed_report.is_none() || self.log.is_some() {
            for id in first..end {
                if self.start(w, id) {
                    self.report(w, id, false, t);
                }
            }
            return;
        }
        // Under a delay that draws nothing, the reports of consecutive copies travel in one
        // entry: the queue ends as it would after one report each (`Ev::absorb`).
        if self.spec.controller.kind != ControllerKind::Named {
            // No names to count: each run of copies not dead starts in one step, and joins the
            // live set a word at a time; a start changes nothing a report reads, so the runs'
            // reports go in the same order as when each copy started alone (issue 24, part 7).
            let mut id = first;
            while id < end {
                let Work { copies, live, .. } = &mut self.works[w];
                let mut k = 0;
                for rec in &mut copies[id as usize..end as usize] {
                    debug_assert!(rec.name.is_none());
                    if rec.dead {
                        break;
                    }
                    rec.started = true;
                    k += 1;
                }
                live.insert_range(id, id + k);
                self.report_fixed(w, id, k, false, t);
                id += k + 1;
            }
            return;
        }
        let mut run = first;
        for id in first..end {
            if !self.start(w, id) {
                self.report_fixed(w, run, id - run, false, t);
                run = id + 1;
            }
        }
        self.report_fixed(w, run, end - run, false, t);
    }

    /// Copy `id` of workload `w` starts running, unless it is dead; returns whether it started.
    #[inline]
    pub(super) fn start(&mut self, w: usize, id: u64) -> bool {
        let work = &mut self.works[w];
        let rec = &mut work.copies[id as usize];
        if rec.dead {
            return false;
        }
        rec.started = true;
        work.live.insert(id);
        if let Some(name) = rec.name {
            let n = work.live_names.entry(name).or_insert(0);
            if *n > 0 {
                work.tally.duplicates += 1;
            }
            *n += 1;
        }
        true
    }

    /// [`Engine::report`] of the starts (or ends) of copies `first` to `first + n − 1` made at
    /// `t`, under a delay that draws nothing and with no log: one queue entry for all of them.
    pub(super) fn report_fixed(&mut self, w: usize, first: u64, n: u64, end: bool, t: Time) {
        let (Some(seconds), Ok(count)) = (self.fixed_report, u32::try_from(n)) else {
            for id in first..first + n {
                self.report(w, id, end, t);
            }
            return;
        };
        if count == 0 {
            return;
        }
        self.in_transit.send_many(t, n);
        let due = t.saturating_add(seconds);
        let arrival = self.works[w].hold(due);
        let ev = Ev::Arrive {
            w,
            id: first,
            n: count,
            end,
            made: t,
        };
        self.queue.push_merged(arrival, ARRIVE, ev, Ev::absorb);
    }

    /// Sends the report of copy `id` starting (or ending) at `t` on its way to the ledger.
    pub(super) fn report(&mut self, w: usize, id: u64, end: bool, t: Time) {
        self.in_transit.send(t);
        let ev = Ev::Arrive {
            w,
            id,
            n: 1,
            end,
            made: t,
        };
        if let Some(seconds) = self.fixed_report {
            // The same as below without the draw's dispatch, and no outage to search most often.
            let due = t.saturating_add(seconds);
            let work = &self.works[w];
            let arrival = if work.outages.is_empty() {
                due
            } else {
                work.hold(due)
            };
            self.queue.push_merged(arrival, ARRIVE, ev, Ev::absorb);
            self.note(ev, 0, due, due);
        } else if self.spec.pipeline.is_per_report() {
            let delay = self.spec.delay.sample(&mut self.rng);
            let due = t.saturating_add(whole_seconds(delay));
            let arrival = self.works[w].hold(due);
            self.queue.push_merged(arrival, ARRIVE, ev, Ev::absorb);
            self.note(ev, 0, due, due);
        } else {
            self.report_piped(w, id, t, ev);
        }
    }

    /// Keeps report `ev` in the tests' log, when kept; returns its index there.
    #[inline]
    pub(super) fn note(&mut self, ev: Ev, node: u32, due: Time, at: Time) -> usize {
        let (
            Some(log),
            Ev::Arrive {
                w, id, end, made, ..
            },
        ) = (self.log.as_mut(), ev)
        else {
            return 0;
        };
        log.push(ReportLog {
            w,
            id,
            end,
            node,
            made,
            due,
            at,
            replaced: false,
        });
        log.len() - 1
    }

    /// [`Engine::report`] under a pipeline other than per-report: the delivery of the report
    /// `ev` of copy `id` made at `t` follows the mode's rule (`crate::pipeline`); an outage then
    /// holds it at the ledger.
    pub(super) fn report_piped(&mut self, w: usize, id: u64, t: Time, ev: Ev) {
        use crate::pipeline::Pipeline;
        let pipe = self.spec.pipeline;
        let node = self.works[w].copies[id as usize].node;
        let n = node as usize;
        if pipe.report_every_ms > 0 {
            let (delay, rng) = (&self.spec.delay, &mut self.rng);
            let at = self.nodes[n]
                .periodic
                .send(t, pipe.report_every_ms, delay.max_ms(), |_| {
                    delay.sample(rng)
                });
            let arrival = self.works[w].hold(at);
            self.queue.push_merged(arrival, ARRIVE, ev, Ev::absorb);
            self.note(ev, node, at, at);
            return;
        }
        let due = t.saturating_add(whole_seconds(self.spec.delay.sample(&mut self.rng)));
        let at = match pipe.mode {
            Pipeline::PerReport | Pipeline::InOrder => self.nodes[n].lane.send(due),
            Pipeline::PerCopy => self.works[w].lanes[id as usize].send(due),
            Pipeline::Snapshot => {
                let sent = self.nodes[n].snapshot.send(t, due);
                let i = self.note(ev, node, due, sent.at);
                let f = match self.nodes[n].flight {
                    Some(f) if sent.replaced => {
                        // The reports of the snapshot in flight travel with this one, in their
                        // order, before it: its queue entries go.
                        for key in std::mem::take(&mut self.flights[f].keys) {
                            self.queue.remove(key);
                        }
                        f
                    }
                    _ => {
                        let f = self.free_flights.pop().unwrap_or_else(|| {
                            self.flights.push(Flight::default());
                            self.flights.len() - 1
                        });
                        self.flights[f].node = n;
                        self.nodes[n].flight = Some(f);
                        f
                    }
                };
                let flight = &mut self.flights[f];
                flight.reports.push((ev, i));
                flight.at = sent.at;
                if !flight.works.contains(&w) {
                    flight.works.push(w);
                }
                // One queue entry for each second its reports reach the ledger at.
                let mut keys = std::mem::take(&mut self.flights[f].keys);
                for k in 0..self.flights[f].works.len() {
                    let arrival = self.works[self.flights[f].works[k]].hold(sent.at);
                    if !keys.iter().any(|key| key.0 == arrival) {
                        keys.push(self.push(arrival, ARRIVE, Ev::Flight { f }));
                    }
                }
                self.flights[f].keys = keys;
                return;
            }
        };
        let arrival = self.works[w].hold(at);
        self.queue.push_merged(arrival, ARRIVE, ev, Ev::absorb);
        self.note(ev, node, due, at);
    }

    /// The reports of copies `first` to `first + n − 1` of workload `w`, made at `made`, reach
    /// the ledger, in that order.
    #[inline]
    pub(super) fn arrive(&mut self, w: usize, first: u64, n: u32, end: bool, made: Time) {
        self.in_transit.arrive(made, u64::from(n));
        let work = &mut self.works[w];
        if self.spec.controller.kind != ControllerKind::Named {
            // No names to count: the ledger changes a word at a time (issue 24, part 7). The
            // reports of an entry are all starts or all ends, of distinct copies, so their order
            // within a word does not matter.
            let Work { shown, ended, .. } = &mut *work;
            if n == 1 {
                // One report an entry, as under a random delay: no word to build.
                if end {
                    ended.insert(first);
                    shown.remove(first);
                } else if !ended.contains(first) {
                    shown.insert(first);
                }
            } else {
                for (i, mask) in range_words(first, first + u64::from(n)) {
                    if end {
                        ended.insert_word(i, mask);
                        shown.remove_word(i, mask);
                    } else {
                        shown.insert_word(i, mask & !ended.word(i));
                    }
                }
            }
        } else {
            for id in first..first + u64::from(n) {
                let name = work.copies[id as usize].name;
                if end {
                    work.ended.insert(id);
                    if work.shown.remove(id) {
                        if let Some(name) = name {
                            decrement(&mut work.shown_names, name);
                        }
                    }
                } else if !work.ended.contains(id) {
                    work.shown.insert(id);
                    if let Some(name) = name {
                        *work.shown_names.entry(name).or_insert(0) += 1;
                    }
                }
            }
        }
        work.dirty = true;
        // A gated pass reads how far the whole ledger has caught up, which any report moves.
        if self.spec.controller.kind == ControllerKind::Gated {
            for other in &mut self.works {
                other.dirty = true;
            }
        }
    }
}
