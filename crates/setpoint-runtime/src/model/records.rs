//! The records the store holds, as typed values: what `apply` declares ([`WorkloadSpec`], with
//! its environment, backoff and rollout settings), what passes write ([`Counter`],
//! [`Assignment`]), what agents report ([`NodeReport`]), the leader record ([`Leader`]); and how
//! each is encoded ([`encode`], JSON) and decoded with its revisions ([`decode`], [`Stored`]).

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use setpoint_core::rollout::{Amount, Budget};
use setpoint_core::ControllerKind;

use super::backoff::BackoffPolicy;
use super::keys::placement_key;
use crate::store::{Entry, Revision, StoreError, Txn};

/// A copy's environment beyond setpoint's own variables: what the workload declares. Copies
/// inherit nothing else from the agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyEnv {
    /// Variables set to these values (`env = { NAME = "value" }`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    /// Variables copied from the agent's own environment, if it has them
    /// (`env_passthrough = ["NAME"]`): the explicit opt-in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passthrough: Vec<String>,
}

impl CopyEnv {
    /// Whether it declares nothing.
    pub fn is_empty(&self) -> bool {
        self.vars.is_empty() && self.passthrough.is_empty()
    }
}

/// The default progress deadline: ten minutes, as Kubernetes' `progressDeadlineSeconds`.
pub const DEFAULT_PROGRESS_DEADLINE_MS: u64 = 600_000;

/// A workload's rollout settings (`rollout = { max_surge = "25%", max_unavailable = "25%",
/// progress_deadline = "10m" }`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutPolicy {
    /// Copies above `desired` a rollout may run.
    pub max_surge: Amount,
    /// Copies below `desired` a rollout may leave unavailable.
    pub max_unavailable: Amount,
    /// A rollout that makes no progress for this long (milliseconds) is stalled and stops.
    pub progress_deadline_ms: u64,
}

impl Default for RolloutPolicy {
    fn default() -> Self {
        Self {
            max_surge: Amount::Percent(25),
            max_unavailable: Amount::Percent(25),
            progress_deadline_ms: DEFAULT_PROGRESS_DEADLINE_MS,
        }
    }
}

impl RolloutPolicy {
    /// The budgets for `desired` copies. If both round to 0, one copy may be unavailable (as
    /// Kubernetes does), or the rollout could never move.
    pub fn budget(&self, desired: u64) -> Budget {
        Budget::new(self.max_surge, self.max_unavailable, desired)
    }
}

/// Adds the creation of assignment `a` at `key` to `txn`, only if `key` is absent, with its
/// entry in the node index. Both keys get the same revision, so the index entry's
/// `create_revision` is the assignment's incarnation.
pub fn put_assignment(txn: Txn, key: &str, a: &Assignment) -> Txn {
    let value = encode(a);
    txn.expect(key, 0)
        .put(key, value.clone())
        .put(placement_key(&a.node, &a.workload, a.n), value)
}

/// Adds the removal of assignment `a` at `key`, only if it is unchanged, and of its entry in
/// the node index, to `txn`.
pub fn remove_assignment(txn: Txn, key: &str, a: &Stored<Assignment>) -> Txn {
    txn.expect(key, a.mod_revision)
        .delete(key)
        .delete(placement_key(&a.value.node, &a.value.workload, a.value.n))
}

/// What an agent does with a copy while it is cut off from the store (its node lease not
/// renewed), copied into each assignment at its creation ([`WorkloadSpec::cut_off`]).
///
/// Only `named` copies need the fence: a cut-off node's `named` names are held, and the fence
/// stops them before the node lease can end, so that a name never runs twice. A counted
/// controller's replacements get new names, so a copy kept running on a cut-off node is
/// overshoot, not a second copy of one identity, and stopping it buys nothing: the kubelet and
/// Nomad's client keep their work running too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CutOff {
    /// Stopped by the self-fence (SIGTERM at 3/4 of the node lease from the last renewal,
    /// SIGKILL at 9/10). The default, also for assignments written before this field.
    #[default]
    Fence,
    /// Kept running; stopped (SIGTERM, then SIGKILL after its grace) once the agent has not
    /// renewed its node lease for this many milliseconds.
    After(u64),
    /// Kept running until the agent is back; then its assignment decides.
    Keep,
}

impl CutOff {
    /// Whether this is [`CutOff::Fence`].
    pub fn is_fence(&self) -> bool {
        *self == CutOff::Fence
    }
}

/// A declared workload: what to run and how many copies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// The workload's name: lowercase letters, digits and `-`, starting with a letter.
    pub name: String,
    /// The program and its arguments, run once per copy.
    pub command: Vec<String>,
    /// How many copies should run.
    pub copies: u64,
    /// The controller whose passes keep the copies, by name.
    #[serde(with = "kind_name")]
    pub controller: ControllerKind,
    /// The loop period U, in milliseconds.
    pub period_ms: u64,
    /// The startup time B, in milliseconds: a copy counts as running this long after it
    /// started, unless a readiness command is given.
    pub startup_ms: u64,
    /// A command that exits 0 once the copy is ready; replaces the startup time.
    pub readiness: Option<Vec<String>>,
    /// How long a copy may take to stop after SIGTERM before it gets SIGKILL, in milliseconds.
    pub grace_ms: u64,
    /// The copies' environment beyond setpoint's own variables (`env`, `env_passthrough`).
    #[serde(default, skip_serializing_if = "CopyEnv::is_empty")]
    pub env: CopyEnv,
    /// Crash-loop backoff after failed starts ([`crate::model::backoff`]); the kubelet's defaults.
    #[serde(default)]
    pub backoff: BackoffPolicy,
    /// Rolling-update budgets and deadline ([`crate::model::rollout`]).
    #[serde(default)]
    pub rollout: RolloutPolicy,
    /// Whether a copy that ends by itself is replaced ([`crate::model::backoff::Restart`]).
    #[serde(
        default,
        skip_serializing_if = "crate::model::backoff::Restart::is_always"
    )]
    pub restart: crate::model::backoff::Restart,
    /// For counted controllers: stop a copy once its agent has been cut off from the store
    /// this long (`stop_when_cut_off = "30s"`, as Nomad's `stop_after_client_disconnect`);
    /// none keeps it running until the agent is back. `named` copies are always fenced
    /// ([`CutOff`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_when_cut_off_ms: Option<u64>,
    /// Bumped by `apply` when what a copy runs (command, readiness) changes; set by `apply`, not
    /// by the workloads file.
    #[serde(default)]
    pub generation: u64,
}

mod kind_name {
    use serde::{Deserialize, Deserializer, Serializer};
    use setpoint_core::ControllerKind;

    pub fn serialize<S: Serializer>(k: &ControllerKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(k.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ControllerKind, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// The next copy number of a workload. It only grows, and it survives the workload's deletion,
/// so an identity is never given twice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    /// The number the next created copy gets.
    pub next: u64,
}

/// One copy placed on one node. Written once by a pass, never changed, removed when the copy
/// should stop (a delete command, or garbage collection).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// The copy's identity, `{workload}-{n}`.
    pub copy: String,
    /// The owning workload's name.
    pub workload: String,
    /// The owner link: the owning workload's uid (its key's create revision).
    pub owner_uid: Revision,
    /// The copy's number within its workload, in creation order.
    pub n: u64,
    /// The node that runs it.
    pub node: String,
    /// The program and its arguments, copied from the declaration at creation.
    pub command: Vec<String>,
    /// Startup time B, in milliseconds.
    pub startup_ms: u64,
    /// The readiness command, if any.
    pub readiness: Option<Vec<String>>,
    /// SIGTERM-to-SIGKILL grace period, in milliseconds.
    pub grace_ms: u64,
    /// When the pass created it, in store milliseconds.
    pub created_ms: u64,
    /// The copy's environment beyond setpoint's own variables, copied from the declaration.
    #[serde(default, skip_serializing_if = "CopyEnv::is_empty")]
    pub env: CopyEnv,
    /// The declaration's generation it was created from ([`crate::model::rollout`]).
    #[serde(default)]
    pub generation: u64,
    /// What its agent does with it while cut off from the store.
    #[serde(default, skip_serializing_if = "CutOff::is_fence")]
    pub cut_off: CutOff,
    /// Its agent writes its report every R while it holds this assignment, changed or not,
    /// instead of only on change (and every `report_resync`): a `gated` controller waits until
    /// the ledger shows every change of its copies up to its last write, which only a node
    /// that reports every R can show (`WorkloadView::reported_before`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub heartbeat: bool,
}

impl WorkloadSpec {
    /// What its copies' agents do with them while cut off ([`CutOff`]): `named` ones are
    /// fenced; others are kept, or stopped after `stop_when_cut_off_ms`.
    pub fn cut_off(&self) -> CutOff {
        match (self.controller, self.stop_when_cut_off_ms) {
            (ControllerKind::Named, _) => CutOff::Fence,
            (_, Some(ms)) => CutOff::After(ms),
            (_, None) => CutOff::Keep,
        }
    }
}

/// A copy's phase as its agent reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The process runs but is not ready yet.
    Starting,
    /// The process is ready: this is what the ledger counts.
    Running,
    /// The process has ended.
    Exited,
}

/// One copy in a node report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyReport {
    /// The copy's identity.
    pub copy: String,
    /// The owning workload.
    pub workload: String,
    /// The owning workload's uid.
    pub owner_uid: Revision,
    /// The copy's number.
    pub n: u64,
    /// The `create_revision` of the assignment the copy runs: it tells this copy from an
    /// earlier one of the same name (a name can be assigned again after its copy is gone).
    #[serde(default)]
    pub incarnation: Revision,
    /// Its phase when observed.
    pub phase: Phase,
    /// The process id, which is also its process group id.
    pub pid: u32,
    /// The process's start time in clock ticks since boot (`/proc/PID/stat` field 22), which
    /// tells this process from a later one that reuses its pid.
    pub start_ticks: u64,
    /// When it was started, in store milliseconds.
    pub started_ms: u64,
    /// When it became ready.
    pub ready_ms: Option<u64>,
    /// When it was seen to have ended.
    pub exited_ms: Option<u64>,
    /// How it ended (`exit status 0`, `signal 9`, …).
    pub exit: Option<String>,
    /// Whether the agent is stopping it (its assignment is gone).
    pub stopping: bool,
    /// Whether setpoint ended it on purpose (a kill request, the agent's fence, its shutdown):
    /// a commanded death, replaced at once rather than counted for backoff.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub killed: bool,
}

/// What one node's agent last reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReport {
    /// The node's name.
    pub node: String,
    /// When the copies were observed, in store milliseconds.
    pub observed_ms: u64,
    /// When the report was written; later than `observed_ms` by the emulated reporting delay.
    pub reported_ms: u64,
    /// The agent's process id.
    pub agent_pid: u32,
    /// Every copy the agent knows, ordered by identity.
    pub copies: Vec<CopyReport>,
    /// The store revision of the newest read of its placements the agent had acted on when it
    /// observed (0: none yet, or an agent from before this field): an assignment written after
    /// it may have been started since, unseen by this report.
    #[serde(default)]
    pub synced_revision: Revision,
}

/// The record of the controller that holds the leader lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leader {
    /// Who holds it: `{hostname-ish}/{pid}/{nonce}`.
    pub holder: String,
    /// When it was acquired, in store milliseconds.
    pub acquired_ms: u64,
    /// The lease's time to live, in milliseconds.
    pub ttl_ms: u64,
}

/// A decoded value with its revisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored<T> {
    /// The value.
    pub value: T,
    /// The revision that created the key.
    pub create_revision: Revision,
    /// The revision that last wrote it: what a compare-and-set compares.
    pub mod_revision: Revision,
}

/// Decodes one entry's JSON value.
pub fn decode<T: DeserializeOwned>(e: &Entry) -> Result<Stored<T>, StoreError> {
    let value = serde_json::from_str(&e.value).map_err(|err| StoreError::Corrupt {
        key: e.key.clone(),
        reason: err.to_string(),
    })?;
    Ok(Stored {
        value,
        create_revision: e.create_revision,
        mod_revision: e.mod_revision,
    })
}

/// Encodes a value as JSON.
pub fn encode<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("setpoint's records always serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_spec_round_trips_through_json_with_its_controller_by_name() {
        let w = WorkloadSpec {
            name: "collector".into(),
            command: vec!["sleep".into(), "60".into()],
            copies: 6,
            controller: ControllerKind::Intent,
            period_ms: 15_000,
            startup_ms: 5_000,
            readiness: None,
            grace_ms: 2_000,
            env: CopyEnv::default(),
            backoff: Default::default(),
            rollout: Default::default(),
            restart: Default::default(),
            generation: 0,
            stop_when_cut_off_ms: None,
        };
        let text = encode(&w);
        assert!(text.contains(r#""controller":"intent""#), "{text}");
        let back: WorkloadSpec = serde_json::from_str(&text).unwrap();
        assert_eq!(back, w);
    }
}
