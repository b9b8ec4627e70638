//! The keys the store holds: each prefix and how a record's key is built from its name. The
//! table of what each key holds is in the [model](super) documentation.
//!
//! Keys sort as the runtime needs them to: an assignment's number is zero-padded, so a
//! workload's assignments list in creation order.

/// A piece of a key: text as it is, or a number in decimal, zero-padded to a width (0: none),
/// as `format!("{n:0width$}")` writes it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Part<'a> {
    Text(&'a str),
    Num(u64, usize),
}
use Part::{Num, Text};

/// The key made of `parts`, byte for byte what `format!` makes of them, without its machinery:
/// a pass builds a few keys for every write, and `format!`'s zero-padded numbers were 3 % of a
/// simulated runtime's run (docs/performance.md).
pub(crate) fn key(parts: &[Part<'_>]) -> String {
    let len = parts
        .iter()
        .map(|p| match p {
            Text(t) => t.len(),
            Num(_, w) => (*w).max(20),
        })
        .sum();
    let mut out = String::with_capacity(len);
    for p in parts {
        match *p {
            Text(t) => out.push_str(t),
            Num(n, width) => {
                let mut digits = [0u8; 20];
                let mut at = digits.len();
                let mut rest = n;
                loop {
                    at -= 1;
                    digits[at] = b'0' + (rest % 10) as u8;
                    rest /= 10;
                    if rest == 0 {
                        break;
                    }
                }
                for _ in digits.len() - at..width {
                    out.push('0');
                }
                out.extend(digits[at..].iter().map(|&d| char::from(d)));
            }
        }
    }
    out
}

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
    [WORKLOADS, name].concat()
}

/// The key of a workload's copy counter.
pub fn counter_key(name: &str) -> String {
    [COUNTERS, name].concat()
}

/// The key of copy `n` of a workload. The number is zero-padded so that key order is creation
/// order.
pub fn assignment_key(workload: &str, n: u64) -> String {
    key(&[Text(ASSIGNMENTS), Text(workload), Text("/"), Num(n, 12)])
}

/// The key of copy `n` of `workload` in the index of `node`'s assignments.
pub fn placement_key(node: &str, workload: &str, n: u64) -> String {
    key(&[
        Text(PLACEMENTS),
        Text(node),
        Text("/"),
        Text(workload),
        Text("/"),
        Num(n, 12),
    ])
}

/// The prefix of `node`'s placements.
pub fn placements_of(node: &str) -> String {
    [PLACEMENTS, node, "/"].concat()
}

/// The key of a node's report.
pub fn report_key(node: &str) -> String {
    [REPORTS, node].concat()
}

/// The deterministic identity of copy `n` of `workload`, as the copy sees it in
/// `SETPOINT_COPY`.
pub fn copy_name(workload: &str, n: u64) -> String {
    key(&[Text(workload), Text("-"), Num(n, 0)])
}

/// The key prefix of node leases.
pub const NODES: &str = "/nodes/";

/// The key of `node`'s lease record.
pub fn node_key(node: &str) -> String {
    [NODES, node].concat()
}

/// The key prefix of operators' confirmations that a node is gone ([`Forgotten`](super::node::Forgotten)).
pub const FORGOTTEN: &str = "/forgotten/";

/// The key of `node`'s confirmation record.
pub fn forgotten_key(node: &str) -> String {
    [FORGOTTEN, node].concat()
}

/// The key prefix of loop records.
pub const LOOPS: &str = "/loops/";

/// The key of workload `name`'s loop record.
pub fn loop_key(name: &str) -> String {
    [LOOPS, name].concat()
}

/// The key prefix of log requests: `setpoint logs` on any host asks the agent of the copy's
/// node for a piece of its log ([`crate::log_requests`]).
pub const LOG_REQUESTS: &str = "/logreq/";

/// The prefix of the log requests addressed to `node`: its agent reads them with its
/// placements.
pub fn log_requests_of(node: &str) -> String {
    [LOG_REQUESTS, node, "/"].concat()
}

/// The key of log request `id` (one per `logs` command) addressed to `node`.
pub fn log_request_key(node: &str, id: &str) -> String {
    [LOG_REQUESTS, node, "/", id].concat()
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

    proptest::proptest! {
        /// Every key builder writes exactly what `format!` writes (the oracle), for any names
        /// and numbers, the widest among them.
        #[test]
        fn keys_are_what_format_makes_of_their_parts(
            a in "[a-z0-9./-]{0,12}",
            b in "\\PC{0,8}",
            n in proptest::prop_oneof![0u64..1_000, proptest::num::u64::ANY],
            w in 0usize..25,
        ) {
            proptest::prop_assert_eq!(key(&[Text(&a), Num(n, w), Text(&b)]), format!("{a}{n:0w$}{b}"));
            proptest::prop_assert_eq!(workload_key(&a), format!("{WORKLOADS}{a}"));
            proptest::prop_assert_eq!(counter_key(&a), format!("{COUNTERS}{a}"));
            proptest::prop_assert_eq!(assignment_key(&a, n), format!("{ASSIGNMENTS}{a}/{n:012}"));
            proptest::prop_assert_eq!(placement_key(&b, &a, n), format!("{PLACEMENTS}{b}/{a}/{n:012}"));
            proptest::prop_assert_eq!(placements_of(&a), format!("{PLACEMENTS}{a}/"));
            proptest::prop_assert_eq!(report_key(&a), format!("{REPORTS}{a}"));
            proptest::prop_assert_eq!(copy_name(&a, n), format!("{a}-{n}"));
            proptest::prop_assert_eq!(node_key(&a), format!("{NODES}{a}"));
            proptest::prop_assert_eq!(forgotten_key(&a), format!("{FORGOTTEN}{a}"));
            proptest::prop_assert_eq!(loop_key(&a), format!("{LOOPS}{a}"));
            proptest::prop_assert_eq!(log_requests_of(&a), format!("{LOG_REQUESTS}{a}/"));
            proptest::prop_assert_eq!(log_request_key(&a, &b), format!("{LOG_REQUESTS}{a}/{b}"));
            proptest::prop_assert_eq!(crate::remote::kills_of(&a), format!("{}{a}/", crate::remote::KILLS));
            proptest::prop_assert_eq!(crate::remote::live_key(&a), format!("{}{a}", crate::remote::LIVE));
        }
    }
}
