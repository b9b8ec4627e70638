//! The simulated processes: finding one on a node, planting an impostor, scheduling an end.

use super::{Ev, ProcRecord, World};
use crate::machine::{Exit, Role};

impl World<'_> {
    /// The live process `pid` started at `ticks` on `host`'s node, by index.
    pub(super) fn node_proc(&self, host: usize, pid: u32, ticks: u64) -> Option<usize> {
        let p = usize::try_from(ticks.checked_sub(1000)?).ok()?;
        let r = self.procs.get(p)?;
        (r.pid == pid && r.host == host && r.end_ms.is_none()).then_some(p)
    }

    /// Plants an impostor of `kind` on `host`'s node, imitating a record of its state file
    /// drawn at random ([`crate::impostors::plant`]); nothing if no record fits.
    pub(super) fn plant(&mut self, host: usize, kind: crate::impostors::Kind) {
        let Role::Agent(node) = &self.slots[host].role else {
            return;
        };
        let p = self.procs.len();
        let planted = crate::impostors::plant(
            kind,
            host,
            node,
            self.slots[host].disk.as_ref(),
            &self.procs,
            (self.now, start_ticks(p)),
            |n| self.rng.uniform(0, n - 1) as usize,
        );
        let Some((proc, impostor)) = planted else {
            self.note(|| format!("host {host}: no record for {} to imitate", kind.name()));
            return;
        };
        self.note(|| {
            format!(
                "host {host}: {} proc {} carries the mark of {} (recorded pid {})",
                kind.name(),
                impostor.pid,
                impostor.copy,
                impostor.of_pid
            )
        });
        self.procs.push(proc);
        // No agent watches it: a stray to the restarted agent, as an earlier life's copies.
        self.strays.insert(p);
        self.impostor_procs.insert(p, self.impostors.planted.len());
        self.impostors.planted.push(impostor);
    }

    /// Schedules process `p` to end at `at` (not before it starts), unless it ends sooner.
    pub(super) fn end_proc(&mut self, p: usize, at: u64, how: Exit) {
        let r = &mut self.procs[p];
        let at = at.max(r.start_at);
        if r.end_ms.is_some() || r.down_ms.is_some_and(|d| d <= at) {
            return;
        }
        r.down_ms = Some(at);
        self.push(at, Ev::ProcDown { proc: p, how });
    }
}

/// The start time in clock ticks of process `p` (by index): later for every later process,
/// and the pid of every copy ([`crate::node`]).
pub(super) fn start_ticks(p: usize) -> u64 {
    1000 + p as u64
}

pub(super) fn r_was_up(r: &ProcRecord) -> bool {
    r.up_ms.is_some()
}
