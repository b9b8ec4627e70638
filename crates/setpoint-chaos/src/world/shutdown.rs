//! The world's side of the `shutdown` fault ([`crate::shutdowns`]): asking a host to stop,
//! noting what its node still runs when it has, and starting it again.

use super::{Ev, World};
use crate::machine::Input;
use crate::shutdowns::Next;

impl World<'_> {
    /// Fault `i` asks `host` to shut down, as `systemctl stop` does.
    pub(super) fn shut_down(&mut self, i: usize, host: usize) {
        if self.shutdowns.ask(host, i, self.now) {
            // A paused host gets it when the pause ends, as a stopped process gets a signal
            // when it is continued.
            self.step(host, Input::Shutdown);
        }
    }

    /// `host`'s machine says it has stopped: what its node still runs is noted, and if its
    /// shutdown's time is over it is started again (after this step's outputs).
    pub(super) fn note_stopped(&mut self, host: usize) {
        self.slots[host].stopped = true;
        let left: Vec<(u32, String)> = self
            .procs
            .iter()
            .enumerate()
            .filter(|(p, r)| {
                r.host == host && r.end_ms.is_none() && !self.impostor_procs.contains_key(p)
            })
            .map(|(_, r)| (r.pid, r.copy.clone()))
            .collect();
        if let Some(fault) = self.shutdowns.stopped(host, self.now, left) {
            self.push(self.now, Ev::FaultEnd(fault));
        }
    }

    /// Fault `i`'s time is over (or its stop timeout, or its machine stopped after that):
    /// `host` is started again once it has stopped, or killed and started again at the timeout.
    pub(super) fn shutdown_over(&mut self, i: usize, host: usize) {
        let stopped = self.slots[host].stopped;
        match self.shutdowns.over(host, i, self.now, stopped) {
            Next::Nothing => {}
            Next::WaitUntil(t) => self.push(t, Ev::FaultEnd(i)),
            Next::Restart | Next::KillAndRestart => {
                self.note(|| format!("host {host} is started again"));
                self.restart(host, None);
            }
        }
    }
}
