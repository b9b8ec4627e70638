//! A model and a schedule written back as a replay file, which parses to the same model.

use std::fmt::Write as _;

use super::{Fault, Model};

impl Model {
    /// This model as a replay file of `seed` with `schedule`: the same settings, the seed, and
    /// the schedule as `[[event]]` tables. Parsing it gives back this model with the schedule.
    pub fn replay_file(&self, seed: u64, schedule: &[Fault], comment: &str) -> String {
        let mut s = String::new();
        for line in comment.lines() {
            let _ = writeln!(s, "# {line}");
        }
        let _ = writeln!(s, "description = {}", toml_str(&self.description));
        let _ = writeln!(s, "seconds = {}", self.duration_ms / 1000);
        let _ = writeln!(s, "settle = {}", self.settle_ms / 1000);
        let _ = writeln!(s, "event_budget = {}", self.event_budget);
        let _ = writeln!(s, "seed = {seed}");
        if schedule.is_empty() {
            s.push_str("event = []  # no fault\n");
        }
        s.push('\n');
        let t = &self.timing;
        let _ = writeln!(
            s,
            "[cluster]\ncontrollers = {}\nagents = {}\nskew_max_ms = {}\nleader_ttl_ms = {}\nnode_ttl_ms = {}\npoll_ms = {}\nsync_ms = {}\nreport_ms = {}\nreport_delay_ms = {}",
            self.controllers, self.agents, self.skew_max_ms, t.leader_ttl_ms, t.node_ttl_ms, t.poll_ms, t.sync_ms, t.report_ms, t.report_delay_ms
        );
        if self.drift_max_ppm > 0 {
            let _ = writeln!(s, "drift_max_ppm = {}", self.drift_max_ppm);
        }
        s.push('\n');
        let _ = writeln!(
            s,
            "[network]\ndelay_ms = {}\njitter_ms = {}\nloss = {}\nslow_ms = {}\n",
            self.net.delay_ms,
            self.net.jitter_ms,
            self.net.loss_ppm as f64 / 1e6,
            self.net.slow_ms
        );
        let _ = writeln!(
            s,
            "[process]\nstart_ms = {}\nterm_exit_ms = {}\n",
            self.start_ms, self.term_exit_ms
        );
        for w in &self.workloads {
            let _ = write!(
                s,
                "[[workload]]\nname = \"{}\"\ncontroller = \"{}\"\ncopies = {}\nperiod_ms = {}\nstartup_ms = {}\ngrace_ms = {}\n",
                w.name, w.controller.name(), w.copies, w.period_ms, w.startup_ms, w.grace_ms
            );
            if let Some(ms) = w.stop_when_cut_off_ms {
                let _ = writeln!(s, "stop_when_cut_off_ms = {ms}");
            }
            let _ = writeln!(s);
        }
        for e in schedule {
            let _ = writeln!(
                s,
                "[[event]]\nat_ms = {}\nkind = \"{}\"\nhost = {}\nduration_ms = {}\n",
                e.at_ms,
                e.kind.name(),
                e.host,
                e.duration_ms
            );
        }
        s
    }
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}
