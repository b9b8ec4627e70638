//! Every record the controller reads back from the store, as any client with write access could
//! have written it (issue 25): arbitrary entries at each key prefix, raw bytes or a valid record
//! with bytes spliced in, are decoded and checked into a snapshot ([`Snapshot::from_read`]), a
//! pass is planned for each workload it accepts and a garbage collection for the whole. Nothing
//! panics, every problem names a key that was read, a snapshot reusing the last one equals one
//! decoded afresh, and a lease-less node or leader is never accepted.
#![no_main]
use libfuzzer_sys::fuzz_target;
use setpoint_core::Controller;
use setpoint_runtime::controller::reconcile::{plan_gc, plan_pass, PassSettings};
use setpoint_runtime::model::Snapshot;
use setpoint_runtime::store::{Entry, Read};

/// The key shapes, with a name from the input.
fn key(kind: u8, name: &str) -> String {
    match kind % 10 {
        0 => format!("/workloads/{name}"),
        1 => format!("/counters/{name}"),
        2 => format!("/assignments/{name}/000000000000"),
        3 => format!("/placements/n1/{name}/000000000000"),
        4 => format!("/reports/{name}"),
        5 => "/leader".to_owned(),
        6 => format!("/nodes/{name}"),
        7 => format!("/loops/{name}"),
        8 => format!("/forgotten/{name}"),
        _ => format!("/{name}"),
    }
}

/// A valid record of each key shape, for the fuzzer to edit.
fn template(kind: u8, name: &str) -> String {
    let a = format!(
        r#"{{"copy":"{name}-0","workload":"{name}","owner_uid":1,"n":0,"node":"n1","command":["sleep","60"],"startup_ms":0,"readiness":null,"grace_ms":0,"created_ms":0}}"#
    );
    match kind % 10 {
        0 => format!(
            r#"{{"name":"{name}","command":["sleep","60"],"copies":2,"controller":"intent","period_ms":100,"startup_ms":0,"readiness":null,"grace_ms":0}}"#
        ),
        1 => r#"{"next":3}"#.to_owned(),
        2 | 3 => a,
        4 => format!(
            r#"{{"node":"{name}","observed_ms":0,"reported_ms":0,"agent_pid":1,"synced_revision":1,"copies":[{{"copy":"w-0","workload":"w","owner_uid":1,"n":0,"incarnation":1,"phase":"running","pid":1,"start_ticks":0,"started_ms":0,"ready_ms":null,"exited_ms":null,"exit":null,"stopping":false}}]}}"#
        ),
        5 => r#"{"holder":"h","acquired_ms":0,"ttl_ms":1000}"#.to_owned(),
        6 => format!(
            r#"{{"node":"{name}","host":"h","place":"p","agent_pid":1,"acquired_ms":0,"ttl_ms":1000,"report_every_ms":100,"lease":7}}"#
        ),
        7 => r#"{"uid":1}"#.to_owned(),
        8 => format!(r#"{{"node":"{name}","revision":1,"forgotten_ms":0}}"#),
        _ => String::new(),
    }
}

/// Entries from `data`: chunks split at 0xff; in each, byte 0 picks the key shape (bit 7: under
/// a lease), byte 1 the name, byte 2 the revisions, byte 3 whether the value is raw bytes or the
/// template with the rest spliced in at a position.
fn entries(data: &[u8]) -> Vec<Entry> {
    let names = ["w", "good", "evil", "n1", "n2", "a-b", "x"];
    let mut out: Vec<Entry> = Vec::new();
    for chunk in data.split(|b| *b == 0xff).take(64) {
        let [kind, name, rev, how, rest @ ..] = chunk else {
            continue;
        };
        let name = names[*name as usize % names.len()];
        let key = key(*kind, name);
        let rest = String::from_utf8_lossy(rest);
        let value = if how % 2 == 0 {
            rest.into_owned()
        } else {
            let mut t = template(*kind, name);
            let mut at = (*how as usize / 2) % (t.len() + 1);
            while !t.is_char_boundary(at) {
                at -= 1;
            }
            t.replace_range(at..(at + (*rev as usize % 4)).min(t.len()), &rest);
            t
        };
        let create = 1 + u64::from(rev % 16);
        out.retain(|e| e.key != key);
        out.push(Entry {
            key,
            value,
            create_revision: create,
            mod_revision: create + u64::from(rev / 16),
            lease: (kind & 0x80 != 0).then_some(7),
        });
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

fuzz_target!(|data: &[u8]| {
    let read = Read {
        revision: 64,
        entries: entries(data),
    };
    let Ok(s) = Snapshot::from_read(&read, 1_000) else {
        return;
    };
    for k in s.problems.keys() {
        assert!(read.entries.iter().any(|e| &e.key == k), "problem of an unread key {k}");
    }
    for e in &read.entries {
        if e.lease.is_none() && (e.key == "/leader" || e.key.starts_with("/nodes/")) {
            assert!(s.problems.contains_key(&e.key) || e.key == "/nodes/");
        }
    }
    assert!(s.leader.is_none() || read.entries.iter().any(|e| e.key == "/leader" && e.lease.is_some()));
    let again = Snapshot::from_read_reusing(&read, 1_000, Some(s.clone())).unwrap();
    assert_eq!(format!("{s:?}"), format!("{again:?}"));
    let settings = PassSettings {
        fence: None,
        max_attempts: 1,
    };
    for (name, w) in &s.workloads {
        let mut c = Controller::new(w.value.controller);
        let _ = plan_pass(&s, name, &mut c, &settings);
    }
    let _ = plan_gc(&s, None, false);
});
