//! The shared model: what the store holds, key by key, as typed records, a consistent snapshot
//! of it, and the I/O-free rules over them that the controller, the agent and the operations
//! share.
//!
//! | key | value | written by |
//! | --- | --- | --- |
//! | `/workloads/{name}` | [`WorkloadSpec`] | `apply`, `delete` |
//! | `/counters/{name}` | [`Counter`]: the next copy number of the workload | the controller's passes |
//! | `/assignments/{name}/{n:012}` | [`Assignment`]: copy `{name}-{n}` placed on a node | the controller's passes and garbage collection |
//! | `/placements/{node}/{name}/{n:012}` | the same [`Assignment`], indexed by node: what that node's agent reads | written and removed in the same transactions as the assignment |
//! | `/reports/{node}` | [`NodeReport`]: the node's copies and their phases | the node's agent |
//! | `/leader` | [`Leader`], under the leader's lease | the controller holding the lease |
//! | `/loops/{name}` | [`LoopRecord`](loop_record::LoopRecord): backoff and idle reason | the controller's passes, only when it changes |
//! | `/nodes/{node}` | [`NodeRecord`](node::NodeRecord): the node's agent, under its lease | that agent ([`node`]) |
//! | `/logreq/{node}/{id}` | [`LogRequest`](crate::log_requests::LogRequest): a piece of a copy's log asked for by `logs` on any host, then answered in place with the bytes, under the asker's lease | `logs` (the request), the node's agent (the answer) |
//!
//! A workload's *uid* is the `create_revision` of its key: deleting a workload and applying it
//! again gives a new uid, so assignments left by the old one are recognised as orphans.
//!
//! # Layout
//! Imports run one way: `keys` ← `records` (with `backoff`) ← `node`, `loop_record` ←
//! `snapshot` ← `view`, `rollout` ← `loops`.
//! - [`keys`]: every prefix and key builder.
//! - [`records`]: the records, [`encode`] and [`decode`] ([`Stored`]: a value with its
//!   revisions).
//! - [`backoff`]: crash-loop backoff after failed starts: the policy a workload declares and the
//!   state a loop keeps (I/O-free).
//! - [`node`]: node identity and liveness: the node record, operators' confirmations that a node
//!   is gone ([`node::forget`]), the data-directory lock.
//! - [`loop_record`]: a workload loop's record (backoff, idle reason, rollout).
//! - [`trust`]: the checks every record read back from the store passes at its decode (the
//!   rules of `apply` and of the key it sits at); a record that fails is a [`trust::Problem`].
//! - [`snapshot`]: [`Snapshot`], everything a pass or an operation reads at one revision.
//! - [`view`]: the ledger a pass reads ([`WorkloadView`], a [`setpoint_core::LedgerView`]).
//! - [`rollout`]: rolling updates under surge and unavailability budgets (I/O-free).
//! - [`loops`]: the rules of a loop's record: backoff gates, idle reasons, rollout progress.
//!
//! The keys, the records and [`Snapshot`] are re-exported here: `model::Assignment`,
//! `model::LEADER`.

pub mod backoff;
pub mod keys;
pub mod loop_record;
pub mod loops;
pub mod node;
pub mod records;
pub mod rollout;
pub mod snapshot;
pub mod trust;
pub mod view;

pub use keys::{
    assignment_key, copy_name, counter_key, placement_key, placements_of, report_key, workload_key,
    ASSIGNMENTS, COUNTERS, LEADER, PLACEMENTS, REPORTS, WORKLOADS,
};
pub use records::{
    decode, encode, put_assignment, remove_assignment, Assignment, CopyEnv, CopyReport, Counter,
    CutOff, Leader, NodeReport, Phase, Stored, WorkloadSpec,
};
pub use snapshot::Snapshot;
pub use view::WorkloadView;
