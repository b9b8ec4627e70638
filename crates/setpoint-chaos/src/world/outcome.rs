//! What a finished run leaves for the checks, and its recording as the run goes: the trace,
//! `/leader`'s holders, unfenced writes, deleted assignments and the leases of cut-off agents.

use std::collections::BTreeSet;

use setpoint_runtime::machine::ReqId;
use setpoint_runtime::model::LEADER;
use setpoint_runtime::store::{Op, Txn};

use super::World;
use crate::faults::Fault;
use crate::machine::Role;
use crate::store::SimStore;

/// One simulated process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcRecord {
    /// Its pid: no other copy's in the run (a `pid-reuse` impostor, kept apart from the copies
    /// in [`Outcome::impostors`], holds a dead copy's again).
    pub pid: u32,
    /// The host (agent) that started it.
    pub host: usize,
    /// The agent's node.
    pub node: String,
    /// The copy's identity.
    pub copy: String,
    /// The workload.
    pub workload: String,
    /// When it started running, if it did.
    pub up_ms: Option<u64>,
    /// When it ended, if it did.
    pub end_ms: Option<u64>,
    /// When it is scheduled to end.
    pub(crate) down_ms: Option<u64>,
    /// When it is scheduled to start.
    pub(crate) start_at: u64,
    /// The nonce in its environment.
    pub(crate) nonce: String,
    /// A restarted agent adopted it: its end is seen by polling, its status unknown.
    pub(crate) adopted: bool,
}

/// A write committed by a controller that did not hold `/leader` at commit time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnfencedWrite {
    /// When it committed.
    pub at_ms: u64,
    /// The controller host.
    pub host: usize,
    /// The holder of `/leader` then (a host, the operator, or no one).
    pub holder: Option<Option<usize>>,
    /// The first key it wrote.
    pub key: String,
}

/// A controller's commit that removed a copy's assignment (a delete command or garbage
/// collection), with what the store held just before it: the facts the check `needed-delete`
/// judges ([`crate::check`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteRecord {
    /// When it committed, milliseconds.
    pub at_ms: u64,
    /// The controller host.
    pub host: usize,
    /// The workload.
    pub workload: String,
    /// The copy whose assignment was removed.
    pub copy: String,
    /// The node the assignment placed it on.
    pub node: String,
    /// The assignment belonged to the workload's current declaration (its owner uid is the
    /// declaration's create revision): not an orphan of a deleted or redeclared one.
    pub owned: bool,
    /// The node's lease record was in the store: the node was not lost.
    pub node_live: bool,
    /// The workload's desired copies then.
    pub desired: u64,
    /// The workload's owned assignments on live nodes then, as (copy, node), the deleted one
    /// included; the other removals of the same commit, earlier in it, are left out.
    pub owned_copies: Vec<(String, String)>,
    /// The processes the store's reports showed running then, as (node, pid): what any
    /// controller could know of them. A process that ended while its node's report still
    /// shows it running died unseen (chaos finding 16).
    pub shown_running: BTreeSet<(String, u32)>,
}

/// An agent's node lease as the store held it when a fault cut the agent off: the deadline
/// its self-fence must meet, whatever its clock says ([`crate::check`], `late-fence`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CutLease {
    /// The cutting fault, by index in the schedule.
    pub fault: usize,
    /// The agent host cut off.
    pub host: usize,
    /// When its node lease expires at the store, as of the cut's start, milliseconds; later
    /// if a renewal on the wire when the cut began (or held by a stall) reached the store
    /// while the cut lasted.
    pub expires_ms: u64,
    /// The lease.
    pub lease: setpoint_runtime::store::LeaseId,
    /// When the cut ends.
    pub until_ms: u64,
}

/// What the world saw of the hosts' use of the store, as it happened: the facts the checks
/// `repeated-request`, `leaked-watch`, `request-storm`, `needless-step-down`,
/// `needless-node-loss` and `unleased-start` judge ([`crate::check`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Protocol {
    /// Each request whose id the same life of a host had sent before: (when it was sent,
    /// milliseconds; the host; the id). A reply or a watch event to the earlier request would
    /// be taken for one to the later.
    pub repeated_ids: Vec<(u64, usize, ReqId)>,
    /// Each watch the store opened while the same life of the host already had an open watch
    /// of exactly the same prefixes, which the host no longer reads.
    pub duplicate_watches: Vec<DuplicateWatch>,
    /// Each time the lessor revoked, on expiry, the lease that held `/leader`: (when,
    /// milliseconds; the controller host whose lease it was).
    pub leader_expiries: Vec<(u64, usize)>,
    /// Each time the lessor revoked, on expiry, the lease that held a node's key while its
    /// agent's host was the lease's client: (when, milliseconds; the agent host).
    pub node_expiries: Vec<(u64, usize)>,
    /// For each host (by index), the most store requests one life of it sent within
    /// [`BURST_WINDOW_MS`], and when that window ended, milliseconds (`(0, 0)` for a host
    /// that sent none).
    ///
    /// [`BURST_WINDOW_MS`]: super::BURST_WINDOW_MS
    pub busiest: Vec<(u64, u64)>,
    /// Each copy an agent host started while the store did not hold its node's key under an
    /// unexpired lease granted to that life of the host; `unleased-start` judges the `named`
    /// ones.
    pub unleased_starts: Vec<UnleasedStart>,
}

/// A copy started by an agent that did not hold its node's lease at the store ([`Protocol`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnleasedStart {
    /// When, milliseconds.
    pub at_ms: u64,
    /// The agent host.
    pub host: usize,
    /// The copy.
    pub copy: String,
    /// Its workload.
    pub workload: String,
    /// What the store held instead.
    pub why: String,
}

/// A watch opened beside an open one of the same host and prefixes ([`Protocol`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplicateWatch {
    /// When the store opened the new one, milliseconds.
    pub at_ms: u64,
    /// The host.
    pub host: usize,
    /// The watch already open (its request id).
    pub open: ReqId,
    /// The new one.
    pub new: ReqId,
    /// Their prefixes.
    pub prefixes: Vec<String>,
}

/// What a finished run leaves for the checks.
#[derive(Debug)]
pub struct Outcome {
    /// Events handled.
    pub events: u64,
    /// The end time.
    pub end_ms: u64,
    /// Every copy's process (impostors are in `impostors`).
    pub procs: Vec<ProcRecord>,
    /// Commits by controllers that did not hold the leader lease.
    pub unfenced: Vec<UnfencedWrite>,
    /// Every removal of an assignment by a controller's commit, in commit order.
    pub deletes: Vec<DeleteRecord>,
    /// The node leases of agents at the start of each fault that cut them off.
    pub cut_leases: Vec<CutLease>,
    /// The store at the end.
    pub store: SimStore,
    /// The trace, if kept.
    pub trace: Vec<String>,
    /// Who held `/leader` from when, if a trace was kept: each change of holder (a host, the
    /// operator, or no one), in time order, from the first event on.
    pub leaders: Vec<(u64, Option<crate::store::Client>)>,
    /// Request ids, watches and leader lease expiries, as seen by the world.
    pub protocol: Protocol,
    /// The impostors planted (kept apart from `procs`) and the agents' recoveries.
    pub impostors: crate::impostors::Record,
    /// The shutdowns ([`crate::shutdowns`]).
    pub shutdowns: crate::shutdowns::Record,
}

impl World<'_> {
    /// Records a change of `/leader`'s holder (traced runs only: it reads the store per event).
    pub(super) fn note_leader(&mut self) {
        let h = self.store.holder(LEADER);
        if self.leaders.last().map(|l| l.1) != Some(h) {
            self.leaders.push((self.now, h));
        }
    }

    pub(super) fn note(&mut self, line: impl FnOnce() -> String) {
        if self.setup.trace {
            let l = format!("{:>9} {}", self.now, line());
            self.trace.push(l);
        }
    }

    /// The leases that hold an agent's node key under that agent host's own grant, if the
    /// lessor's check now revokes any lease: (lease, agent host).
    pub(super) fn node_leases_expiring(&self) -> Vec<(setpoint_runtime::store::LeaseId, usize)> {
        if !self.store.any_expired(self.now) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (host, slot) in self.slots.iter().enumerate() {
            let Role::Agent(node) = &slot.role else {
                continue;
            };
            let key = setpoint_runtime::model::keys::node_key(node);
            if let Some(lease) = self.store.entry(&key).and_then(|e| e.lease) {
                if self.store.lease_owner(lease) == Some(Some(host)) {
                    out.push((lease, host));
                }
            }
        }
        out
    }

    /// Records the node lease of each agent fault `f` (number `i`) cuts off, as the store
    /// holds it now.
    pub(super) fn note_cut_leases(&mut self, i: usize, f: &Fault) {
        let hosts: Vec<usize> = if f.kind.on_store() {
            (0..self.slots.len()).collect()
        } else {
            vec![f.host]
        };
        for host in hosts {
            let Role::Agent(node) = &self.slots[host].role else {
                continue;
            };
            let key = setpoint_runtime::model::keys::node_key(node);
            let lease = self.store.entry(&key).and_then(|e| e.lease);
            let expiry = lease.and_then(|l| self.store.lease_expiry(l).map(|x| (l, x)));
            if let Some((lease, expires_ms)) = expiry {
                self.cut_leases.push(CutLease {
                    fault: i,
                    host,
                    expires_ms,
                    lease,
                    until_ms: f.at_ms + f.duration_ms,
                });
            }
        }
    }

    /// A renewal of `lease` by `host` that reaches the store while a cut of that host lasts
    /// (it was on the wire when the cut began, or a stall released it): the lease the cut
    /// holds the agent to now ends later, as the store says.
    pub(super) fn note_late_renewal(
        &mut self,
        host: usize,
        lease: setpoint_runtime::store::LeaseId,
    ) {
        let now = self.now;
        let Some(expiry) = self.store.lease_expiry(lease) else {
            return;
        };
        for c in &mut self.cut_leases {
            if c.host == host && c.lease == lease && now < c.until_ms {
                c.expires_ms = c.expires_ms.max(expiry);
            }
        }
    }

    pub(super) fn check_fence(&mut self, host: usize, holder: Option<Option<usize>>, txn: &Txn) {
        // A fenced commit (the usual one) needs no key.
        if holder == Some(Some(host)) {
            return;
        }
        let key = txn.ops.iter().find_map(|op| {
            let k = match op {
                Op::Put { key, .. } | Op::Delete { key } => key,
            };
            (k != LEADER).then(|| k.clone())
        });
        if let Some(key) = key {
            self.note(|| format!("UNFENCED write of {key} by host {host}"));
            self.unfenced.push(UnfencedWrite {
                at_ms: self.now,
                host,
                holder,
                key,
            });
        }
    }
}
