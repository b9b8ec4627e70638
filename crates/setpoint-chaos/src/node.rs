//! Each simulated node's disk and process table: what the agent's tokio driver finds after a
//! restart in its state file and in `/proc`.
//!
//! The world keeps, per agent host, the last state file the agent asked to write
//! (`Output::SaveState`) and, per process, the environment a real copy carries (its identity,
//! the agent's mark, its nonce). A restarted agent's `Recover` is answered from them by the
//! runtime's own rule ([`setpoint_runtime::agent::recovery_from`]), as the real driver answers
//! it from the file and `/proc`: a process is proven the agent's own by its pid, its start time
//! and its nonce. Every simulated process runs as [`OWN_UID`], the agent's user.
//!
//! A process's start time is `1000 +` its index among the run's processes: later for every
//! later process. A copy's pid is the same number, so a copy's pid and start time are equal; an
//! impostor planted at a dead copy's pid ([`crate::impostors`]) keeps the pid and starts later.

use setpoint_runtime::agent::{recovery_from, NodeState, Recovery};
use setpoint_runtime::process::Marked;

/// The user every simulated agent and process runs as.
pub const OWN_UID: u32 = 1000;

/// A copy's start time in clock ticks: its pid, which no other copy of the run holds (only an
/// impostor reuses a pid, and it starts later), so a pid and start time name one process as on
/// a real node.
pub fn start_ticks(pid: u32) -> u64 {
    u64::from(pid)
}

/// One live process on a node, as `/proc` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// Its pid.
    pub pid: u32,
    /// Its start time in clock ticks.
    pub start_ticks: u64,
    /// The identity in its `SETPOINT_COPY`.
    pub copy: String,
    /// The nonce in its `SETPOINT_NONCE`.
    pub nonce: String,
}

/// A simulated process as `find_marked` shows a real one.
pub fn marked(pid: u32, start_ticks: u64, copy: &str, nonce: &str) -> Marked {
    Marked {
        pid,
        start_ticks,
        copy: copy.to_owned(),
        nonce: Some(nonce.to_owned()),
        uid: OWN_UID,
    }
}

/// What a restarted agent finds: the state file `saved` (none if it was never written or is
/// lost) and the node's live processes `live`, every one carrying the agent's mark.
pub fn recovery(saved: Option<&NodeState>, live: &[Seen]) -> Recovery {
    let marked = live
        .iter()
        .map(|p| marked(p.pid, p.start_ticks, &p.copy, &p.nonce))
        .collect();
    let proves_own = |pid: u32, ticks: u64, nonce: &str| {
        !nonce.is_empty()
            && live
                .iter()
                .any(|p| p.pid == pid && p.start_ticks == ticks && p.nonce == nonce)
    };
    recovery_from(saved.cloned(), marked, OWN_UID, proves_own)
}
