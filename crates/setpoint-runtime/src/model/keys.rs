//! The keys the store holds: each prefix and how a record's key is built from its name. The
//! table of what each key holds is in the [model](super) documentation.
//!
//! Keys sort as the runtime needs them to: an assignment's number is zero-padded, so a
//! workload's assignments list in creation order.

/// The key prefix of workload declarations.
pub const WORKLOADS: &str = "/workloads/";
/// The key prefix of copy-number counters.
pub const COUNTERS: &str = "/counters/";
/// The key prefix of copy assignments.
pub const ASSIGNMENTS: &str = "/assignments/";
/// The key prefix of the per-node index of assignments: an agent reads only its node's.
pub const PLACEMENTS: &str = "/placements/";
/// The key prefix of node reports.
pub const REPORTS: &str = "/reports/";
/// The key of the leader record.
pub const LEADER: &str = "/leader";

/// The key of a workload's declaration.
pub fn workload_key(name: &str) -> String {
    format!("{WORKLOADS}{name}")
}

/// The key of a workload's copy counter.
pub fn counter_key(name: &str) -> String {
    format!("{COUNTERS}{name}")
}

/// The key of copy `n` of a workload. The number is zero-padded so that key order is creation
/// order.
pub fn assignment_key(workload: &str, n: u64) -> String {
    format!("{ASSIGNMENTS}{workload}/{n:012}")
}

/// The key of copy `n` of `workload` in the index of `node`'s assignments.
pub fn placement_key(node: &str, workload: &str, n: u64) -> String {
    format!("{PLACEMENTS}{node}/{workload}/{n:012}")
}

/// The prefix of `node`'s placements.
pub fn placements_of(node: &str) -> String {
    format!("{PLACEMENTS}{node}/")
}

/// The key of a node's report.
pub fn report_key(node: &str) -> String {
    format!("{REPORTS}{node}")
}

/// The deterministic identity of copy `n` of `workload`, as the copy sees it in
/// `SETPOINT_COPY`.
pub fn copy_name(workload: &str, n: u64) -> String {
    format!("{workload}-{n}")
}

/// The key prefix of node leases.
pub const NODES: &str = "/nodes/";

/// The key of `node`'s lease record.
pub fn node_key(node: &str) -> String {
    format!("{NODES}{node}")
}

/// The key prefix of operators' confirmations that a node is gone ([`Forgotten`](super::node::Forgotten)).
pub const FORGOTTEN: &str = "/forgotten/";

/// The key of `node`'s confirmation record.
pub fn forgotten_key(node: &str) -> String {
    format!("{FORGOTTEN}{node}")
}

/// The key prefix of loop records.
pub const LOOPS: &str = "/loops/";

/// The key of workload `name`'s loop record.
pub fn loop_key(name: &str) -> String {
    format!("{LOOPS}{name}")
}

/// The key prefix of log requests: `setpoint logs` on any host asks the agent of the copy's
/// node for a piece of its log ([`crate::log_requests`]).
pub const LOG_REQUESTS: &str = "/logreq/";

/// The prefix of the log requests addressed to `node`: its agent reads them with its
/// placements.
pub fn log_requests_of(node: &str) -> String {
    format!("{LOG_REQUESTS}{node}/")
}

/// The key of log request `id` (one per `logs` command) addressed to `node`.
pub fn log_request_key(node: &str, id: &str) -> String {
    format!("{LOG_REQUESTS}{node}/{id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignment_keys_sort_in_creation_order() {
        let mut keys = [
            assignment_key("w", 10),
            assignment_key("w", 9),
            assignment_key("w", 100),
        ];
        keys.sort();
        assert_eq!(
            keys,
            [
                assignment_key("w", 9),
                assignment_key("w", 10),
                assignment_key("w", 100)
            ]
        );
        assert_eq!(copy_name("collector", 3), "collector-3");
    }
}
