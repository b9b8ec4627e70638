//! The runtime's own machines behind the world's [`Machine`] interface: the controller host
//! ([`Host`]) and the node agent ([`AgentCore`]), configured from a fault model.
//!
//! What the adapters answer themselves, because the simulated node has nothing behind it:
//! the agent's `TendLogs` (there are no logs to rotate) and `Probe` (the simulated workloads
//! have no readiness command; answered ready). Everything else goes to the world, which keeps
//! each node's state file and process table ([`crate::node`]): `SaveState` writes the file,
//! `Recover` is answered from the file and the node's live processes, `Adopt` and
//! `StopForeign` act on them.

use std::time::Duration;

use setpoint_runtime::agent::{
    AgentCore, AgentCoreConfig, AgentInput, AgentOutput, CopySignal, Ended, Nonces,
};
use setpoint_runtime::controller::{ControllerConfig, Host, HostConfig, HostInput, HostOutput};

use crate::faults::Model;
use crate::machine::{Exit, Input, Machine, Output, Role};

/// Injected bugs, for the checker's own tests: each turns on the machines' test-only switch
/// of that name. Nothing in the CLI or in a file sets them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bugs {
    /// `HostConfig::bug_fencing_off`.
    pub fencing_off: bool,
    /// `HostConfig::bug_gc_ignores_owner_uid`.
    pub gc_ignores_owner_uid: bool,
    /// `AgentCoreConfig::bug_no_self_fence`.
    pub no_self_fence: bool,
}

/// A controller host, and the buffer its steps' outputs go through.
pub struct HostMachine(pub Host, Vec<HostOutput>);

impl HostMachine {
    /// The machine of `host`.
    pub fn new(host: Host) -> Self {
        HostMachine(host, Vec::new())
    }
}

impl Machine for HostMachine {
    fn step(&mut self, now_ms: u64, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        self.step_into(now_ms, input, &mut out);
        out
    }

    fn step_into(&mut self, now_ms: u64, input: Input, out: &mut Vec<Output>) {
        let input = match input {
            Input::Tick => HostInput::Tick,
            Input::Replied(r) => HostInput::Replied(r),
            Input::Watch(w) => HostInput::Watch(w),
            Input::Shutdown => HostInput::Shutdown,
            Input::Started { .. }
            | Input::Exited { .. }
            | Input::Recovered(_)
            | Input::StraysSignalled { .. } => return,
        };
        self.0.step_into(now_ms, input, &mut self.1);
        // A plain loop: `extend` over the mapped drain cost about a hundred instructions a step
        // for the one or two outputs most steps have.
        out.reserve(self.1.len());
        for o in self.1.drain(..) {
            out.push(match o {
                HostOutput::Request { id, request, .. } => Output::Request { id, request },
                // Formatted only if the world keeps a trace.
                HostOutput::Log { who, line } => Output::Log {
                    who: Some(who),
                    line,
                },
                HostOutput::Wake(w) => Output::Wake(w.0),
                HostOutput::Stopped(_) => Output::Stopped,
            });
        }
    }

    fn quiet_tick(&mut self, now_ms: u64) -> Option<u64> {
        self.0.quiet_tick(now_ms).map(|w| w.0)
    }
}

/// A node agent, and the buffer its steps' outputs go through.
pub struct AgentMachine(pub AgentCore, Vec<AgentOutput>);

impl AgentMachine {
    /// The machine of `agent`.
    pub fn new(agent: AgentCore) -> Self {
        AgentMachine(agent, Vec::new())
    }

    fn map(&mut self, now_ms: u64, input: AgentInput, out: &mut Vec<Output>) {
        // What the adapter answers itself is handed back, last first; most steps need none,
        // so the first input is not put in the (then unallocated) stack.
        let mut pending = Vec::new();
        let mut first = Some(input);
        while let Some(input) = first.take().or_else(|| pending.pop()) {
            let mut outputs = std::mem::take(&mut self.1);
            self.0.step_into(now_ms, input, &mut outputs);
            for o in outputs.drain(..) {
                match o {
                    AgentOutput::Store { id, request } => out.push(Output::Request { id, request }),
                    AgentOutput::Wake(w) => out.push(Output::Wake(w.0)),
                    AgentOutput::Start {
                        copy,
                        assignment,
                        nonce,
                    } => out.push(Output::Start {
                        copy,
                        workload: assignment.workload,
                        nonce,
                    }),
                    AgentOutput::Signal { copy, signal, .. } => out.push(Output::Signal {
                        copy,
                        kill: matches!(signal, CopySignal::Kill),
                    }),
                    AgentOutput::Recover => out.push(Output::Recover),
                    AgentOutput::SaveState(state) => out.push(Output::SaveState(state)),
                    AgentOutput::LeaseKept { sent_ms } => out.push(Output::LeaseKept { sent_ms }),
                    AgentOutput::Adopt {
                        copy,
                        pid,
                        start_ticks,
                    } => out.push(Output::Adopt {
                        copy,
                        pid,
                        start_ticks,
                    }),
                    AgentOutput::StopForeign {
                        pid,
                        start_ticks,
                        grace_ms,
                    } => out.push(Output::StopForeign {
                        pid,
                        start_ticks,
                        grace_ms,
                    }),
                    AgentOutput::StopStrays { signal, spare_kept } => {
                        out.push(Output::StopStrays {
                            kill: matches!(signal, CopySignal::Kill),
                            spare_kept,
                        })
                    }
                    AgentOutput::Probe { copy, .. } => {
                        pending.push(AgentInput::ProbeDone { copy, ok: true })
                    }
                    AgentOutput::Log(line) => out.push(Output::Log { who: None, line }),
                    AgentOutput::Stopped(end) => {
                        if let Err(e) = end {
                            out.push(Output::Log {
                                who: None,
                                line: format!("stopped: {e}"),
                            });
                        }
                        out.push(Output::Stopped)
                    }
                    AgentOutput::TendLogs { .. } => {}
                    // The chaos world keeps no log files: a request is answered as "no log".
                    AgentOutput::ReadLog { key, .. } => pending.push(AgentInput::LogRead {
                        key,
                        read: Ok(None),
                    }),
                }
            }
            self.1 = outputs;
        }
    }
}

impl Machine for AgentMachine {
    fn inherit_lease(&mut self, renewal_sent_ms: u64) {
        self.0.inherit_renewal(renewal_sent_ms);
    }

    fn quiet_tick(&mut self, now_ms: u64) -> Option<u64> {
        self.0.quiet_tick(now_ms).map(|w| w.0)
    }

    fn step(&mut self, now_ms: u64, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        self.step_into(now_ms, input, &mut out);
        out
    }

    fn step_into(&mut self, now_ms: u64, input: Input, out: &mut Vec<Output>) {
        let input = match input {
            Input::Tick => AgentInput::Tick,
            Input::Replied(r) => AgentInput::Replied(r),
            Input::Watch(w) => AgentInput::WatchDelivery(w),
            Input::Shutdown => AgentInput::Shutdown,
            Input::Recovered(r) => AgentInput::Recovered(r),
            Input::StraysSignalled { count, spare_kept } => {
                AgentInput::StraysSignalled { count, spare_kept }
            }
            Input::Started { copy, pid } => AgentInput::Started {
                copy,
                pid,
                start_ticks: crate::node::start_ticks(pid),
            },
            Input::Exited { copy, how, .. } => AgentInput::Exited {
                copy,
                how: match how {
                    Exit::Code(c) => Ended::Code(c),
                    Exit::Signal(s) => Ended::Signal(s),
                    Exit::Unknown => Ended::Unknown,
                },
            },
        };
        self.map(now_ms, input, out);
    }
}

/// The machine of host `index` with `role` for a run of `model` with `seed`, at `now_ms`.
pub fn make(
    model: &Model,
    bugs: Bugs,
    seed: u64,
    index: usize,
    role: &Role,
    now_ms: u64,
) -> Box<dyn Machine> {
    let t = &model.timing;
    match role {
        Role::Controller => {
            let mut c = ControllerConfig::new(format!("controller-{index}"));
            c.lease_ttl = Duration::from_millis(t.leader_ttl_ms);
            c.poll = Duration::from_millis(t.poll_ms);
            let mut cfg = HostConfig::new(c);
            // The simulated store pushes changes, as etcd does: the host keeps its watch
            // cache, as `run_controller` does on etcd.
            cfg.watch_cache = true;
            cfg.bug_fencing_off = bugs.fencing_off;
            cfg.bug_gc_ignores_owner_uid = bugs.gc_ignores_owner_uid;
            Box::new(HostMachine::new(Host::new(cfg, now_ms)))
        }
        Role::Agent(node) => {
            let mut cfg = AgentCoreConfig::new(node.clone());
            cfg.agent_pid = 100 + index as u32;
            cfg.lease_ttl_ms = t.node_ttl_ms;
            cfg.sync_every_ms = t.sync_ms;
            // The simulated store pushes changes, as etcd does: the agent keeps its watch
            // cache, as `run_agent` does on etcd.
            cfg.watch_cache = true;
            // The world keeps no log files and ignores `TendLogs`.
            cfg.tend_logs = false;
            cfg.report_every_ms = t.report_ms;
            cfg.report_delay_ms = t.report_delay_ms;
            // A restarted agent (a later `now_ms`) draws nonces no earlier life of the node
            // drew, as a real agent's random ones are; nonces never reach the store.
            cfg.nonces = Nonces::Counter(
                seed.wrapping_mul(64).wrapping_add(index as u64) ^ now_ms.rotate_left(24),
            );
            cfg.bug_no_self_fence = bugs.no_self_fence;
            Box::new(AgentMachine::new(AgentCore::new(cfg, now_ms)))
        }
    }
}
