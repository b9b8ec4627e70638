//! The node agent as a state machine without I/O ([`AgentCore`]), in the manner of raft-rs's
//! `RawNode`: it never touches a store, a process, a file or a clock.
//!
//! The driver creates it with [`AgentCore::new`] and calls [`AgentCore::step`]`(now_ms, input)`
//! for every input: a [`AgentInput::Tick`] on a timer (at the latest at the last
//! [`AgentOutput::Wake`]), each store reply, each process start, exit and readiness probe, the
//! recovery findings it was asked for, and shutdown. Each step returns what to do, in order:
//! store requests (each with a [`ReqId`](crate::machine::ReqId), see [`crate::machine`]),
//! process starts, adoptions and signals, readiness probes, state-file writes, log lines, and
//! finally [`AgentOutput::Stopped`]. The tokio driver ([`crate::agent::run_agent`]) carries them
//! out on a real store and real processes; the chaos world carries them out on simulated ones.
//!
//! # How a step runs
//! [`AgentCore`] is composed of parts, each with its own state, in the manner of quinn-proto's
//! `Connection` (streams, packet spaces, timers, paths): the node lease ([`super::lease`]), the
//! copy supervisor ([`super::supervisor`]), sync and its watch cache ([`super::sync`],
//! [`super::watch_cache`]), kill requests ([`super::kills`]), recovery ([`super::recovery`]),
//! reports ([`super::reports`]), the live record ([`super::live`]), the event log
//! ([`super::event_log`]), log tending ([`super::logs`]) and the agent's stage ([`super::life`]).
//! A step routes its input to the part it belongs to (a store reply by the [`Purpose`] its
//! request was sent with), then advances the parts in a fixed order (the claim, the lease and
//! its fence, the copies, the read of the state, then while running: sync, the state file, logs,
//! the live record, reports, events), and gathers their outputs, which all go through one
//! [`Outbox`] in the order the parts acted. What spans parts (a fence signals every copy and
//! drops the queued reports; shutdown stops the copies, writes a last report and the events,
//! then gives the name up) is decided here.
//!
//! Every store request has a deadline ([`AgentCoreConfig::request_timeout_ms`]; a renewal's is
//! the lease's TTL). A reply that does not come in time counts as a failure, and a late reply is
//! ignored.

mod fence;
mod shutdown;

use super::event_log::{EventLog, Written};
use super::kills::Kills;
use super::lease::{Claimed, Fence, NodeLease};
use super::life::{Life, Stage};
use super::live::LiveRecords;
use super::log_serving::LogServing;
use super::logs::LogTending;
use super::outbox::{Outbox, Purpose, Soonest};
use super::recovery::{self, StateRead, StateReadOutcome};
use super::reports::{self, Reports};
use super::supervisor::Supervisor;
use super::sync::{Sync, Synced};
use super::{
    AgentCoreConfig, AgentError, AgentInput, AgentOutput, CopyRecord, CopySignal, Recovery,
};
use crate::machine::{StoreRequest, StoreResult, Wake};
use crate::model::{decode, NodeReport};
use crate::store::{LeaseId, StoreError};

/// How long shutdown waits beyond the longest grace period, in milliseconds.
const SHUTDOWN_SLACK_MS: u64 = 2_000;

/// How long what an earlier agent here left running is given between SIGTERM and SIGKILL when
/// this agent is stopped before it read its state: their own grace is in the state file it has
/// not read, so a workload's default grace ([`crate::spec::DEFAULT_GRACE`], 10 s).
const STRAY_GRACE_MS: u64 = crate::spec::DEFAULT_GRACE.as_millis() as u64;

/// The node agent as a state machine: see [`crate::agent`] and the docs of its parts.
#[derive(Debug)]
pub struct AgentCore {
    cfg: AgentCoreConfig,
    /// The outputs of the step under way and the requests in flight.
    out: Outbox,
    /// The stage of the agent's life, and why it stops.
    life: Life,
    /// The node claim, the lease and the fence's clock.
    lease: NodeLease,
    /// The read of the node's state before recovery.
    state_read: StateRead,
    /// The copies and the state file.
    copies: Supervisor,
    /// When and how the assignments are read, with the watch cache.
    sync: Sync,
    /// Kill requests being answered.
    kills: Kills,
    /// Log requests being served.
    log_serving: LogServing,
    /// Reports: observed, queued, written.
    reports: Reports,
    /// The live record.
    live: LiveRecords,
    /// Event-log entries not written yet.
    events: EventLog,
    /// When the copies' logs are tended.
    logs: LogTending,
    /// How many times the agent fenced itself (SIGTERM to every copy for want of a renewal),
    /// for the driver's metrics.
    fencings: u64,
    /// Until when a tick only moves the log and observation clocks, as the last step left the
    /// agent ([`AgentCore::quiet_tick`]); `None`: a tick takes the whole step.
    quiet_until: Option<u64>,
    /// Whether quiet ticks are answered without the step (a test turns it off to compare).
    quiet_ticks: bool,
    /// How many ticks were answered without the step (for the tests).
    #[cfg(test)]
    quiet_answered: u64,
}

impl AgentCore {
    /// How many times the agent has fenced itself so far (a lease not renewed in time: every
    /// copy stopped before the lease can end). Reading it changes nothing.
    pub fn fencings(&self) -> u64 {
        self.fencings
    }

    /// A machine that starts claiming its node's name at `now_ms`. Step it with
    /// [`AgentInput::Tick`] to get its first requests.
    pub fn new(cfg: AgentCoreConfig, now_ms: u64) -> Self {
        Self {
            out: Outbox::new(),
            life: Life::new(),
            lease: NodeLease::new(now_ms).born_at(cfg.started_ms.unwrap_or(now_ms).min(now_ms)),
            state_read: StateRead::default(),
            copies: Supervisor::new(),
            sync: Sync::new(&cfg, now_ms),
            kills: Kills::default(),
            log_serving: LogServing::default(),
            reports: Reports::new(now_ms),
            live: LiveRecords::default(),
            events: EventLog::default(),
            logs: LogTending::new(now_ms),
            fencings: 0,
            quiet_until: None,
            quiet_ticks: true,
            #[cfg(test)]
            quiet_answered: 0,
            cfg,
        }
    }

    /// Answers quiet ticks with the whole step too ([`AgentCore::quiet_tick`]): what an agent
    /// did before they were answered without it.
    #[cfg(test)]
    fn without_quiet_ticks(mut self) -> Self {
        self.quiet_ticks = false;
        self
    }

    /// Hands the machine, before its first step, what an earlier agent at this place wrote
    /// down from [`AgentOutput::LeaseKept`]: when it last sent a renewal of its node lease that
    /// succeeded. The first claim's fence then stops what that agent left running before its
    /// lease can end at the store, not only by deadlines from this agent's start.
    pub fn inherit_renewal(&mut self, sent_ms: u64) {
        self.lease.inherit(sent_ms);
    }

    /// The configuration.
    pub fn config(&self) -> &AgentCoreConfig {
        &self.cfg
    }

    /// The lease this agent holds now, if it holds one and is not fenced.
    pub fn held_lease(&self) -> Option<LeaseId> {
        self.lease.held()
    }

    /// Whether the agent is fenced: it holds no lease it trusts, so it starts nothing.
    pub fn is_fenced(&self) -> bool {
        self.held_lease().is_none()
    }

    /// Whether the machine is done ([`AgentOutput::Stopped`] was returned).
    pub fn is_stopped(&self) -> bool {
        self.life.is_stopped()
    }

    /// The copies the agent knows, as its state file would record them, by identity.
    pub fn records(&self) -> Vec<CopyRecord> {
        self.copies.records()
    }

    /// How long after observing its copies at `observed_ms` the agent writes the report: the
    /// configured report delay, or the next entry of the jittered schedule when there is one
    /// (each call takes one entry). The one place that decides it.
    pub fn report_delay_ms(&self, observed_ms: u64) -> u64 {
        let _ = observed_ms;
        self.cfg.report_delays.next_ms(self.cfg.report_delay_ms)
    }

    /// Hands the machine one input at `now_ms` (its host clock, never going backwards) and
    /// returns what to do, in order. The last output is a [`AgentOutput::Wake`] unless the
    /// machine has stopped.
    pub fn step(&mut self, now_ms: u64, input: AgentInput) -> Vec<AgentOutput> {
        let mut out = Vec::new();
        self.step_into(now_ms, input, &mut out);
        out
    }

    /// [`Self::step`], appending the outputs to `out`: a driver that steps often keeps one
    /// buffer and spares an allocation a step.
    pub fn step_into(&mut self, now_ms: u64, input: AgentInput, out: &mut Vec<AgentOutput>) {
        if self.life.is_stopped() {
            return;
        }
        if matches!(input, AgentInput::Tick) {
            if let Some(wake) = self.quiet_tick(now_ms) {
                out.push(AgentOutput::Wake(wake));
                return;
            }
        }
        self.quiet_until = None;
        let lent = crate::machine::Lent::lend(self.out.outputs(), out);
        self.step_inner(now_ms, input);
        lent.give_back(self.out.outputs(), out);
    }

    /// A tick at `now_ms` that provably does nothing but move the agent's clocks: before any
    /// time at which a part acts (as the last step left them: a request's deadline, the next
    /// renewal or the fence, a sync or the cache's read, a copy's promotion, probe or SIGKILL,
    /// a `stop_when_cut_off`, a queued report, a live record's or events' retry, the logs when
    /// the driver tends them), where an observation of the copies, if due, is no news. Does
    /// what the step would (the log clock moves on, and an observation due takes its report
    /// delay and sets the next one) and returns the wake the step would ask for, its only
    /// output. `None` if the tick is not such a one: then nothing changed, and it takes the
    /// whole step. Most of a steady agent's ticks are such ones: its observation every report
    /// period, with nothing new, and its log clock.
    ///
    /// [`AgentCore::step_into`] tries it on every tick; a driver that steps often may call it
    /// first, and step with [`AgentInput::Tick`] only if it returns `None`.
    pub fn quiet_tick(&mut self, now_ms: u64) -> Option<Wake> {
        let until = self.quiet_until?;
        let now = now_ms;
        if now >= until || self.life.is_stopped() {
            return None;
        }
        let observe = now >= self.reports.observation_at();
        // Asked first: a yes (news to report) takes the step, which asks it again, in the same
        // state (only the comparison's memory of a yes is kept; it changes no answer).
        if observe
            && self
                .reports
                .worth_observing(now, &mut self.copies, &self.cfg)
        {
            return None;
        }
        // What the step does, in its order ([`AgentCore::advance`]): the log clock (the
        // driver's work is not wanted, or `until` is before it), then the observation.
        let _ = self.logs.due(now);
        if self.reports.observation_due(now, self.cfg.report_every_ms) {
            let _ = self.report_delay_ms(now);
        }
        #[cfg(test)]
        {
            self.quiet_answered += 1;
        }
        Some(Wake(self.next_wake(now)))
    }

    /// After a step at `now`: until when a tick does nothing but what
    /// [`AgentCore::quiet_tick`] does, if the agent runs unfenced under its lease (else a tick
    /// takes the step). Every threshold on the clock a tick applies in [`AgentCore::expire`]
    /// and [`AgentCore::advance`], taken whether or not its work could go out now (a time in
    /// the past, or 0, makes no tick quiet), besides the observation and the log clock when
    /// the driver does not tend logs, which `quiet_tick` moves itself.
    fn tick_quiet_until(&self, now: u64) -> Option<u64> {
        if !self.quiet_ticks
            || !self.life.is_running()
            || self.cfg.simulate_copies
            || self.is_fenced()
        {
            return None;
        }
        let held = self.held_lease()?;
        let mut until = self.lease.quiet_until()?;
        until = until.min(self.out.deadlines().min().unwrap_or(u64::MAX));
        until = until
            .min(self.next_cut_off_time(now).unwrap_or(u64::MAX))
            .min(self.copies.quiet_until())
            .min(self.sync.quiet_until(held))
            .min(self.reports.quiet_until())
            .min(self.live.quiet_until())
            .min(self.events.quiet_until());
        if self.cfg.tend_logs {
            until = until.min(self.logs.next_at());
        }
        Some(until)
    }

    fn step_inner(&mut self, now_ms: u64, input: AgentInput) {
        let now = now_ms;
        match input {
            AgentInput::Tick => {}
            AgentInput::Replied(r) => {
                if let Some(purpose) = self.out.take(r.id) {
                    self.on_result(now, r.id, purpose, r.result);
                }
            }
            AgentInput::WatchDelivery(d) => self.sync.on_watch(now, d, &self.cfg, &mut self.out),
            AgentInput::Started {
                copy,
                pid,
                start_ticks,
            } => {
                let fenced = self.is_fenced() || !self.life.is_running();
                let may_save = self.life.may_save();
                self.copies.on_started(
                    now,
                    &copy,
                    pid,
                    start_ticks,
                    fenced,
                    may_save,
                    &self.cfg,
                    &mut self.out,
                    &mut self.events,
                );
            }
            AgentInput::StartFailed { copy, why } => {
                let may_save = self.life.may_save();
                self.copies.on_start_failed(
                    now,
                    &copy,
                    &why,
                    may_save,
                    &self.cfg,
                    &mut self.out,
                    &mut self.events,
                );
            }
            AgentInput::Exited { copy, how } => {
                let node = &self.cfg.node;
                if self
                    .copies
                    .on_exited(now, &copy, how, node, &mut self.out, &mut self.events)
                {
                    // Its name may be assigned here again, waiting for it to be forgotten.
                    self.sync.want();
                }
            }
            AgentInput::ProbeDone { copy, ok } => self.copies.on_probe_done(now, &copy, ok),
            AgentInput::LogRead { key, read } => {
                self.log_serving
                    .on_read(now, key, read, &self.copies, &self.cfg, &mut self.out)
            }
            AgentInput::Recovered(r) => {
                if self.life.stage == Stage::Recovering {
                    self.on_recovered(now, r);
                }
            }
            AgentInput::Shutdown => self.begin_shutdown(now),
            AgentInput::StraysSignalled { count, spare_kept } => {
                self.on_strays_signalled(count, spare_kept)
            }
        }
        self.expire(now);
        self.advance(now);
        if let Some(sent_ms) = self.lease.renewal_to_record() {
            self.out.push(AgentOutput::LeaseKept { sent_ms });
        }
        if !self.life.is_stopped() {
            let wake = self.next_wake(now);
            self.out.push(AgentOutput::Wake(Wake(wake)));
            self.quiet_until = self.tick_quiet_until(now).filter(|&t| t > now);
        }
    }

    /// Requests past their deadline fail as if the store had said so.
    fn expire(&mut self, now: u64) {
        for (id, deadline) in self.out.late(now) {
            if let Some(purpose) = self.out.take(id) {
                let why = StoreError::Unavailable(format!(
                    "no reply by {deadline}ms (the request's deadline)"
                ));
                self.on_result(now, id, purpose, Err(why));
            }
        }
    }

    /// When the machine must be stepped next: the soonest time any part acts on.
    fn next_wake(&self, now: u64) -> u64 {
        let mut soonest = Soonest::new(now);
        for deadline in self.out.deadlines() {
            soonest.at(deadline);
        }
        self.lease
            .wake_times(now, &mut soonest, self.cfg.lease_ttl_ms);
        // Only what the next step would act on: a timer whose work waits for a reply (a sync
        // or a report in flight) or for a start to answer wakes nobody, or the machine spins.
        if self.life.is_running() && !self.is_fenced() {
            self.sync.wake_times(self.held_lease(), &mut soonest);
            self.reports.wake_times(&mut soonest);
            self.logs.wake_times(&mut soonest);
            self.events.wake_times(now, &mut soonest);
            if self.held_lease().is_some() {
                self.live.wake_times(now, &mut soonest);
            }
        }
        match self.life.stage {
            Stage::Draining { deadline } => soonest.at(deadline),
            Stage::StoppingStrays { kill_at, .. } => soonest.at(kill_at),
            _ => {}
        }
        if let Some(t) = self
            .state_read
            .retry_at()
            .filter(|_| self.life.stage == Stage::ReadingState && self.held_lease().is_some())
        {
            soonest.at(t);
        }
        self.copies
            .wake_times(self.cfg.simulate_copies, &mut soonest);
        if let Some(t) = self.next_cut_off_time(now) {
            soonest.at(t);
        }
        soonest.or_a_second()
    }

    /// When the cut-off rule next acts: while renewals succeed the copies are not scanned, and
    /// the step at `since` (when the next renewal is overdue) finds whether any
    /// `stop_when_cut_off` timer runs; after it, that timer's time.
    fn next_cut_off_time(&self, now: u64) -> Option<u64> {
        match self.lease.cut_off_since(self.cfg.lease_ttl_ms) {
            Some(since) if now < since => Some(since),
            Some(since) => self.copies.next_cut_off_stop(since),
            None => None,
        }
    }

    // ----- routing replies -----

    fn on_result(
        &mut self,
        now: u64,
        id: crate::machine::ReqId,
        purpose: Purpose,
        result: StoreResult,
    ) {
        // A store lost for good (only SQLite says so: its file removed) ends a running agent
        // whichever answer says so, not only the answers whose part acts on it (a sync, a
        // report, the event log): a kill's or a log's answer, the live record, the watch
        // cache, a renewal. Every later request would find it lost too; waiting for one of
        // those only delays the exit. `lose` says it once.
        let lost = match &result {
            Err(e) if e.is_lost() => Some(e.clone()),
            _ => None,
        };
        self.route_result(now, id, purpose, result);
        if let Some(e) = lost.filter(|_| self.life.is_running()) {
            self.lose(now, e);
        }
    }

    fn route_result(
        &mut self,
        now: u64,
        id: crate::machine::ReqId,
        purpose: Purpose,
        result: StoreResult,
    ) {
        match purpose {
            Purpose::Claim => {
                if self.lease.awaits(id) {
                    self.on_claim(now, result);
                }
            }
            Purpose::Renew { lease, sent } => {
                if let Some(expired) =
                    self.lease
                        .on_renewed(now, lease, sent, result, &mut self.out)
                {
                    self.reports.clear_queue();
                    self.sync.fenced(&mut self.out);
                    let n = self.signal_all(CopySignal::Kill);
                    self.out.log(format!(
                        "lease {expired} has expired: fenced, SIGKILL to {n} copies"
                    ));
                    self.reclaim(now, expired);
                }
            }
            // A read of the state that lands after the agent began to stop is not acted on:
            // it would start recovery in the middle of the shutdown.
            Purpose::ReadState { .. } if self.life.stage != Stage::ReadingState => {}
            // Sent under a lease since lost (fenced while it was on its way): never acted on.
            Purpose::ReadState { lease } if self.held_lease() != Some(lease) => {
                self.state_read.void(now)
            }
            Purpose::ReadState { .. } => {
                match self
                    .state_read
                    .on_read(now, result, &self.cfg, &mut self.out)
                {
                    StateReadOutcome::Read(refused) => {
                        self.sync.log_refused(refused, &mut self.out);
                        self.life.stage = Stage::Recovering;
                        self.out.push(AgentOutput::Recover);
                    }
                    StateReadOutcome::Fatal(e) => self.stop_now(Err(e)),
                    StateReadOutcome::Retry => {}
                }
            }
            Purpose::Sync { lease } => {
                let voided = self.sync.replied();
                if voided
                    || !self.life.is_running()
                    || self.held_lease() != Some(lease)
                    || self.lease.fence_due(now)
                {
                    // Read before the fence or the shutdown, or under a lease since lost (the
                    // node may have been lost meanwhile and its names given to other nodes):
                    // never acted on. Nor one answered at the millisecond the fence is due,
                    // which this step's `advance` brings down after the answer is handled.
                    return;
                }
                match self.sync.on_reply(now, result, &mut self.out) {
                    Some(Ok(read)) => self.on_sync_read(now, Synced::Read(read)),
                    Some(Err(e)) => self.lose(now, e),
                    None => {}
                }
            }
            Purpose::Report { report, last } => {
                let written = self.reports.on_written(
                    now,
                    report,
                    last,
                    result,
                    &self.cfg,
                    &mut self.out,
                    &mut self.events,
                );
                match written {
                    Written::Again => {}
                    Written::Lost(e) => self.lose(now, e),
                    Written::Done if last => self.finish_events(now),
                    Written::Done => {}
                }
            }
            Purpose::Live { lease, copies } => {
                let retry = self.cfg.sync_every_ms;
                self.live
                    .on_written(now, lease, copies, result, retry, &mut self.out)
            }
            Purpose::Events { batch, last } => {
                let (timeout, retry) = (self.cfg.request_timeout_ms, self.cfg.sync_every_ms);
                match self.events.on_written(
                    now,
                    batch,
                    last,
                    result,
                    timeout,
                    retry,
                    &mut self.out,
                ) {
                    Written::Again => {}
                    Written::Lost(e) => self.lose(now, e),
                    // The rest of the log, a transaction at a time; then the release.
                    Written::Done if last => self.finish_events(now),
                    Written::Done => {}
                }
            }
            Purpose::KillAnswer { key } => {
                self.sync.saw_own_write(&result);
                self.kills.on_answered(&key, &result, &mut self.out);
            }
            Purpose::LogAnswer { key } => {
                self.sync.saw_own_write(&result);
                self.log_serving.on_answered(&key, &result, &mut self.out);
            }
            Purpose::CacheRead { lease } => {
                self.sync
                    .on_cache_read(now, lease, result, &self.cfg, &mut self.out)
            }
            Purpose::CacheWatch => {
                self.sync
                    .on_cache_watching(now, &result, &self.cfg, &mut self.out)
            }
            Purpose::Release => {
                if let Err(e) = result {
                    self.out.log(format!("cannot give up the node lease: {e}"));
                }
                self.lease.release();
                self.out.log("stopped");
                let end = self.life.end();
                self.stop_now(end);
            }
        }
    }

    // ----- sync -----

    /// Acts on a read of the node's placements and kill requests.
    fn on_sync_read(&mut self, now: u64, synced: Synced) {
        let (revision, parse) = match synced {
            Synced::Read(read) => (
                read.revision,
                self.sync.parse(read, &self.cfg, &mut self.out),
            ),
            Synced::Unchanged(revision) => (revision, self.sync.last()),
        };
        // The newest placement read is news for a report only with reports on change.
        let newest = if self.cfg.report_resync_ms > 0 {
            parse.newest
        } else {
            0
        };
        self.copies.synced_to(revision, newest);
        let may_save = self.life.may_save();
        self.copies.sync(
            &parse.assigned,
            now,
            may_save,
            &self.cfg,
            &mut self.out,
            &mut self.events,
        );
        let (kills, logs) = (parse.kills.clone(), parse.logs.clone());
        self.kills
            .carry_out(now, kills, &mut self.copies, &self.cfg, &mut self.out);
        self.log_serving
            .take(now, logs, &self.copies, &self.cfg, &mut self.out);
    }

    // ----- recovery -----

    /// Rebuilds the copies from what the driver found ([`recovery::rebuild`]), then the first
    /// sync and the first report.
    fn on_recovered(&mut self, now: u64, found: Recovery) {
        let (assigned, last_report) = self.state_read.take();
        let rev = last_report.as_ref().map_or(0, |e| e.mod_revision);
        let before = last_report
            .as_ref()
            .and_then(|e| decode::<NodeReport>(e).ok())
            .map(|s| s.value);
        self.reports
            .resume(rev, before.as_ref(), now, &self.cfg.node, &mut self.events);
        recovery::rebuild(
            now,
            found,
            &assigned,
            before,
            &self.cfg,
            &mut self.copies,
            &mut self.out,
            &mut self.events,
            self.lease.strays_fenced(),
        );
        self.copies.mark_dirty();
        self.life.stage = Stage::Running;
        let may_save = self.life.may_save();
        self.copies.sync(
            &assigned,
            now,
            may_save,
            &self.cfg,
            &mut self.out,
            &mut self.events,
        );
        self.copies.save(&self.cfg, may_save, &mut self.out);
        let first = reports::observe(&self.copies, now, &self.cfg);
        self.reports
            .send(now, first, false, &self.cfg, &mut self.out);
        self.out.log(match self.copies.len() {
            1 => "ready with 1 copy".to_owned(),
            n => format!("ready with {n} copies"),
        });
        self.sync.next_at(now + self.cfg.sync_every_ms);
        self.reports.observe_next_at(now + self.cfg.report_every_ms);
        self.logs = LogTending::new(now);
    }

    // ----- the running loop -----

    fn advance(&mut self, now: u64) {
        if self.life.is_stopped() {
            return;
        }
        self.drive_claim(now);
        self.keep_lease(now);
        // A fence that just came down starts the rejoin in this same step.
        self.drive_claim(now);
        self.fence_strays(now);
        self.stop_cut_off(now);
        if self.life.is_stopped() {
            return;
        }
        if self
            .copies
            .tend(now, &self.cfg, &mut self.out, &mut self.events)
        {
            self.sync.want();
        }
        // Only under a held lease: a fenced agent reads its state again once it rejoins.
        if let Some(lease) = self.held_lease().filter(|_| {
            self.life.stage == Stage::ReadingState
                && self.state_read.retry_at().is_some_and(|t| now >= t)
        }) {
            self.state_read.send(now, lease, &self.cfg, &mut self.out);
        }
        let may_save = self.life.may_save();
        match self.life.stage.clone() {
            Stage::Running if !self.is_fenced() => {
                if let Some(lease) = self.held_lease().filter(|_| !self.sync.in_flight()) {
                    self.sync.drive_cache(now, lease, &self.cfg, &mut self.out);
                    if let Some(synced) = self.sync.drive(now, lease, &self.cfg, &mut self.out) {
                        self.on_sync_read(now, synced);
                    }
                }
                self.copies.save(&self.cfg, may_save, &mut self.out);
                // The clocks advance whether or not the driver wants the work.
                if let Some(sweep) = self.logs.due(now).filter(|_| self.cfg.tend_logs) {
                    let running = self.copies.running();
                    self.out.push(AgentOutput::TendLogs { running, sweep });
                }
                if let Some(lease) = self.held_lease() {
                    self.live
                        .publish(now, lease, &mut self.copies, &self.cfg, &mut self.out);
                }
                if self.reports.observation_due(now, self.cfg.report_every_ms) {
                    // Every observation takes its delay, written or not: a jittered schedule
                    // gives the k-th observation the k-th delay, as the lab's does.
                    let due = now + self.report_delay_ms(now);
                    // Built only if it is news: most observations of a steady node are not.
                    if self
                        .reports
                        .worth_observing(now, &mut self.copies, &self.cfg)
                    {
                        let report = reports::observe(&self.copies, now, &self.cfg);
                        self.reports.enqueue(due, report, &self.cfg);
                    }
                }
                self.reports.send_due(now, &self.cfg, &mut self.out);
                self.events
                    .flush(now, self.cfg.request_timeout_ms, &mut self.out);
            }
            Stage::Running => {
                // Fenced: the copies are being stopped; nothing is read, started or reported.
                self.reports.clear_queue();
                self.copies.save(&self.cfg, may_save, &mut self.out);
            }
            Stage::StoppingStrays { kill_at, none_left } if none_left || now >= kill_at => {
                if !none_left {
                    self.out.push(AgentOutput::StopStrays {
                        signal: CopySignal::Kill,
                        spare_kept: false,
                    });
                }
                if let Some(e) = self.life.take_lost() {
                    return self.stop_now(Err(AgentError::Store(e)));
                }
                self.life.stage = Stage::Finishing;
                self.release(now);
            }
            Stage::Draining { deadline } if self.copies.all_exited() || now >= deadline => {
                self.copies.mark_dirty();
                self.copies.save_now(&self.cfg, may_save, &mut self.out);
                if let Some(e) = self.life.take_lost() {
                    return self.stop_now(Err(AgentError::Store(e)));
                }
                self.life.stage = Stage::Finishing;
                if self.life.is_refused() {
                    // The name is another agent's now, and so are its report and its events:
                    // a last report from this one would hide that agent's copies.
                    return self.release(now);
                }
                let last = reports::observe(&self.copies, now, &self.cfg);
                self.reports.send(now, last, true, &self.cfg, &mut self.out);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
