//! The tables of `get` and `status` for people: columns lined up, every cell bounded in width
//! (a missing program's exit text names the agent's whole PATH, and an etcd lease id has 19
//! digits), counts with their nouns in the right number. `--format json` and `csv` carry the
//! whole values.

use std::fmt::Write as _;
use std::time::Duration;

use setpoint_runtime::format_duration;
use setpoint_runtime::ops;

/// The widest a STATE cell of `get` gets, in characters; past it the cell ends in `…`.
pub const STATE_WIDTH: usize = 100;
/// The widest the last exit within a STATE cell gets, in characters.
const EXIT_WIDTH: usize = 48;
/// The widest a name cell (workload, node) gets before it is cut with `…`.
const NAME_WIDTH: usize = 40;

/// `s` cut to at most `max` characters, the last of them `…` when anything was cut.
pub fn bounded(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The STATE column of `get`: the rollout's progress, `BACKOFF` with the last exit, the
/// restarts and the next try while backing off, otherwise the idle reason; `-` if none.
pub fn state_cell(w: &ops::WorkloadStatus) -> String {
    let mut parts = Vec::new();
    if let Some(r) = &w.rollout {
        parts.push(format!(
            "rollout {}{}/{} updated",
            if r.stalled { "STALLED " } else { "" },
            r.updated,
            r.desired
        ));
    }
    let backing: Vec<&ops::BackoffStatus> = w.backoff.iter().filter(|b| b.backing_off).collect();
    if let Some(b) = backing.iter().min_by_key(|b| b.next_try_in_ms) {
        let more = if backing.len() > 1 {
            format!(" (+{})", plural(backing.len() as u64 - 1, "name", "names"))
        } else {
            String::new()
        };
        parts.push(format!(
            "BACKOFF {}: {}, {}, next try in {}{more}",
            b.last_copy,
            bounded(&b.last_exit, EXIT_WIDTH),
            plural(b.restarts, "restart", "restarts"),
            seconds(b.next_try_in_ms)
        ));
    } else if let Some(i) = &w.idle {
        parts.push(format!("idle: {} for {}", i.text, seconds(i.for_ms)));
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        bounded(&parts.join("; "), STATE_WIDTH)
    }
}

pub fn get_table(all: &[ops::WorkloadStatus]) -> String {
    let mut t = format!(
        "{:<20} {:<10} {:>7} {:>7} {:>5} {:>6} {:>8} {:>8} {:>9}  {}\n",
        "WORKLOAD",
        "CONTROLLER",
        "PERIOD",
        "DESIRED",
        "LIVE",
        "LEDGER",
        "CREATING",
        "DELETING",
        "CUT OFF",
        "STATE"
    );
    for w in all {
        let cut_off = match w.stop_when_cut_off_ms {
            Some(ms) => format!("stop {}", format_duration(Duration::from_millis(ms))),
            None => w.cut_off.to_owned(),
        };
        let _ = writeln!(
            t,
            "{:<20} {:<10} {:>7} {:>7} {:>5} {:>6} {:>8} {:>8} {:>9}  {}",
            bounded(&w.name, NAME_WIDTH),
            w.controller,
            format_duration(Duration::from_millis(w.period_ms)),
            w.desired,
            w.live.map_or("-".to_owned(), |l| l.to_string()),
            w.on_ledger,
            w.pending_create,
            w.pending_delete,
            cut_off,
            state_cell(w)
        );
    }
    t
}

/// `1 copy`, `2 copies`: a count with its noun in the right number.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

pub fn status_table(s: &ops::Status) -> String {
    let mut t = match &s.leader {
        Some(l) => format!(
            "leader: {} (for {}, lease ttl {})\n",
            l.holder,
            seconds(l.held_ms),
            format_duration(Duration::from_millis(l.ttl_ms))
        ),
        None => "leader: none\n".to_owned(),
    };
    let _ = writeln!(
        t,
        "workloads: {}, store revision {}",
        s.workloads, s.revision
    );
    let _ = writeln!(
        t,
        "{:<20} {:<5} {:>20} {:>9} {:>12} {:>12} {:>8} {:>8} {:>8} {:>7} {:>8}",
        "NODE",
        "LIVE",
        "LEASE",
        "LEASE TTL",
        "HELD FOR",
        "LAST REPORT",
        "LAG",
        "STARTING",
        "RUNNING",
        "EXITED",
        "ASSIGNED"
    );
    for n in &s.nodes {
        let lease = n.lease.as_ref();
        let _ = writeln!(
            t,
            "{:<20} {:<5} {:>20} {:>9} {:>12} {:>12} {:>8} {:>8} {:>8} {:>7} {:>8}",
            bounded(&n.node, NAME_WIDTH),
            if n.live { "yes" } else { "lost" },
            lease.map_or("-".to_owned(), |l| l.lease.to_string()),
            lease.map_or("-".to_owned(), |l| format_duration(Duration::from_millis(
                l.ttl_ms
            ))),
            lease.map_or("-".to_owned(), |l| seconds(l.held_ms)),
            n.since_report_ms
                .map_or("never".to_owned(), |ms| format!("{} ago", seconds(ms))),
            format!("{}ms", n.report_lag_ms),
            n.starting,
            n.running,
            n.exited,
            n.assigned
        );
    }
    if !s.nodes.is_empty() {
        // Liveness and reports are two things since reports are written on change: an old
        // report on a live node only means that nothing changed there.
        let _ = writeln!(
            t,
            "LIVE is the node lease, renewed every quarter TTL; LAST REPORT is when its agent \
             last wrote news of its copies (at least every --report-resync)"
        );
    }
    if s.forgotten > 0 {
        let _ = writeln!(
            t,
            "{} lost {} confirmed gone with 'node forget' not listed",
            s.forgotten,
            if s.forgotten == 1 { "node" } else { "nodes" }
        );
    }
    for (name, i) in &s.idle {
        let _ = writeln!(
            t,
            "workload {name}: idle, {} for {}",
            i.text,
            seconds(i.for_ms)
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use ops::{BackoffStatus, NodeLeaseStatus, NodeStatus, Status, WorkloadStatus};

    fn workload(exit: &str) -> WorkloadStatus {
        WorkloadStatus {
            name: "ghost".into(),
            controller: "intent".into(),
            period_ms: 1000,
            desired: 1,
            live: Some(0),
            on_ledger: 0,
            pending_create: 0,
            pending_delete: 0,
            copies: Vec::new(),
            idle: None,
            backoff: vec![BackoffStatus {
                key: "ghost".into(),
                backing_off: true,
                failures: 1,
                restarts: 1,
                last_exit: exit.into(),
                last_copy: "ghost-0".into(),
                next_try_in_ms: 10_000,
            }],
            generation: 1,
            updated: 0,
            rollout: None,
            cut_off: "keep",
            stop_when_cut_off_ms: None,
        }
    }

    fn node(name: &str, lease: u64) -> NodeStatus {
        NodeStatus {
            node: name.into(),
            since_report_ms: Some(500),
            report_lag_ms: 0,
            live: true,
            lease: Some(NodeLeaseStatus {
                lease,
                agent_pid: 42,
                host: "h".into(),
                place: "p".into(),
                ttl_ms: 10_000,
                held_ms: 1_000,
            }),
            starting: 0,
            running: 1,
            exited: 0,
            assigned: 1,
        }
    }

    #[test]
    fn a_missing_programs_whole_path_does_not_widen_the_state_cell() {
        let path = "/very/long/dir".repeat(43);
        let exit = format!("failed to start: program 'x' not found on the agent's PATH ({path})");
        assert!(exit.len() > 600);
        let table = get_table(&[workload(&exit)]);
        let row = table.lines().nth(1).unwrap();
        let state = state_cell(&workload(&exit));
        assert!(state.chars().count() <= STATE_WIDTH, "{state}");
        assert!(row.ends_with(&state), "{row}");
        assert!(
            state.starts_with("BACKOFF ghost-0: failed to start: program 'x'"),
            "{state}"
        );
        assert!(state.contains('…'), "{state}");
        // A short exit is shown whole, with the restart in the singular.
        let short = state_cell(&workload("exit status 1"));
        assert_eq!(
            short,
            "BACKOFF ghost-0: exit status 1, 1 restart, next try in 10.0s"
        );
    }

    #[test]
    fn nineteen_digit_lease_ids_keep_the_status_columns_in_line() {
        let s = Status {
            revision: 7,
            leader: None,
            nodes: vec![node("a", 7_587_888_374_555_392_529), node("b", 3)],
            forgotten: 0,
            workloads: 0,
            idle: Default::default(),
            problems: Default::default(),
        };
        let table = status_table(&s);
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(rows.len(), 4, "{table}");
        assert!(rows[3].starts_with("LIVE is the node lease"), "{table}");
        // Every column ends at the same place in the header and in both rows.
        let ends = |l: &str| -> Vec<usize> {
            let b = l.as_bytes();
            (1..=b.len())
                .filter(|&i| i == b.len() || (b[i - 1] != b' ' && b[i] == b' '))
                .collect()
        };
        assert_eq!(ends(rows[1])[2..], ends(rows[2])[2..], "{table}");
        assert_eq!(rows[1].len(), rows[2].len(), "{table}");
    }

    #[test]
    fn counts_take_their_noun_in_the_right_number() {
        assert_eq!(plural(1, "copy", "copies"), "1 copy");
        assert_eq!(plural(0, "copy", "copies"), "0 copies");
        assert_eq!(plural(2, "restart", "restarts"), "2 restarts");
    }
}
