//! Failpoints: named places where a test can make the process die, to prove that a crash there
//! loses nothing.
//!
//! In builds with debug assertions (what `cargo test` builds), [`hit`] reads the environment
//! variable `SETPOINT_FAILPOINTS` once: a `;`-separated list of `NAME=ACTION[@N]`. `ACTION` is
//! `sigkill` (the process sends itself SIGKILL: no destructor, no flush, as a crash) or `off`;
//! `@N` fires on the N-th hit of that failpoint only (default: the first). In release builds
//! [`hit`] is an empty inline function and the variable is never read.
//!
//! | failpoint | where |
//! | --- | --- |
//! | `pass-before-commit` | a pass has planned its transaction and not written it |
//! | `pass-after-commit` | a pass's transaction has committed; nothing after it ran |
//! | `gc-before-commit`, `gc-after-commit` | the same around garbage collection's write |
//! | `agent-after-spawn` | an agent has spawned a copy's process and not recorded it anywhere |
//! | `agent-after-record` | the copy is in the agent's state file, not yet in any report |
//! | `agent-after-report` | a report has been written |

/// Every failpoint, by name.
pub const ALL: [&str; 7] = [
    "pass-before-commit",
    "pass-after-commit",
    "gc-before-commit",
    "gc-after-commit",
    "agent-after-spawn",
    "agent-after-record",
    "agent-after-report",
];

/// The environment variable that arms failpoints.
pub const ENV: &str = "SETPOINT_FAILPOINTS";

/// Passes failpoint `name`: in a debug build, does what `SETPOINT_FAILPOINTS` asks for it.
#[inline(always)]
pub fn hit(name: &'static str) {
    #[cfg(debug_assertions)]
    armed::hit(name);
    #[cfg(not(debug_assertions))]
    let _ = name;
}

#[cfg(debug_assertions)]
mod armed {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, OnceLock};

    /// Per failpoint: the hit that fires (1-based) and how many hits so far.
    type Table = Mutex<BTreeMap<String, (Option<u64>, u64)>>;

    fn table() -> &'static Table {
        static TABLE: OnceLock<Table> = OnceLock::new();
        TABLE.get_or_init(|| Mutex::new(parse(&std::env::var(super::ENV).unwrap_or_default())))
    }

    pub(super) fn parse(text: &str) -> BTreeMap<String, (Option<u64>, u64)> {
        let mut out = BTreeMap::new();
        for item in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((name, action)) = item.split_once('=') else {
                continue;
            };
            let (action, nth) = match action.split_once('@') {
                Some((a, n)) => (a, n.parse().unwrap_or(1)),
                None => (action, 1),
            };
            let fire = (action == "sigkill").then_some(nth);
            out.insert(name.trim().to_owned(), (fire, 0));
        }
        out
    }

    pub(super) fn hit(name: &str) {
        let fire = {
            let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
            match t.get_mut(name) {
                Some((fire, hits)) => {
                    *hits += 1;
                    *fire == Some(*hits)
                }
                None => false,
            }
        };
        if fire {
            crate::rt::log("failpoint", format!("{name}: SIGKILL"));
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::KILL,
            );
            // SIGKILL cannot be caught; this only waits for it to land.
            loop {
                std::thread::park();
            }
        }
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    #[test]
    fn a_spec_names_the_action_and_the_hit_that_fires() {
        let t = super::armed::parse("pass-after-commit=sigkill@3; agent-after-spawn=sigkill;x=off");
        assert_eq!(t["pass-after-commit"], (Some(3), 0));
        assert_eq!(t["agent-after-spawn"], (Some(1), 0));
        assert_eq!(t["x"], (None, 0));
    }
}
