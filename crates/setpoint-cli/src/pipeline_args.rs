//! `--pipeline`, `--nodes` and `--report-every`: the report pipeline of every lab command that
//! models report delays (`run`, `plot`, `report`, `sweep`, `advise`, `experiment`), as clap
//! types over [`setpoint_sim::pipeline::PipelineSpec`].

use clap::Args;
use setpoint_sim::pipeline::{Pipeline, PipelineSpec, MAX_NODES};

/// The report pipeline's flags; each left out keeps the scenario's (a file's, else the
/// default: per-report, one node).
#[derive(Debug, Clone, Default, Args)]
pub struct PipelineArgs {
    /// How reports travel to the ledger: per-report (each its own delay, reports overtake each
    /// other; the lesson's world), in-order (no earlier than the node's previous report;
    /// setpoint's agent), snapshot (in order, a newer report replaces the node's one in
    /// flight), per-copy (no earlier than the copy's previous report; the kubelet)
    /// [default: per-report].
    #[arg(long, value_name = "MODE", value_parser = pipeline)]
    pub pipeline: Option<Pipeline>,
    /// How many nodes the copies run on, placed round robin in creation order (in-order and
    /// snapshot pipelines are per node) [default: 1].
    #[arg(long, value_name = "N", value_parser = nodes)]
    pub nodes: Option<u32>,
    /// With --pipeline in-order: a node sends a snapshot every SECONDS (to the millisecond),
    /// each with its own delay, instead of one report per copy event (setpoint's agent: 0.5)
    /// [default: 0, per event].
    #[arg(long, value_name = "SECONDS", value_parser = report_every)]
    pub report_every: Option<u64>,
}

impl PipelineArgs {
    /// `spec` with the flags given on top; checked by the scenario's validation. A --pipeline
    /// other than in-order drops a snapshot period that only in-order takes (a file's, say),
    /// unless --report-every is given too.
    pub fn apply(&self, mut spec: PipelineSpec) -> PipelineSpec {
        if let Some(mode) = self.pipeline {
            spec.mode = mode;
            if mode != Pipeline::InOrder {
                spec.report_every_ms = 0;
            }
        }
        if let Some(nodes) = self.nodes {
            spec.nodes = nodes;
        }
        if let Some(ms) = self.report_every {
            spec.report_every_ms = ms;
        }
        spec
    }

    /// Whether any flag was given.
    pub fn any(&self) -> bool {
        self.pipeline.is_some() || self.nodes.is_some() || self.report_every.is_some()
    }
}

fn pipeline(s: &str) -> Result<Pipeline, String> {
    s.parse()
        .map_err(|e: setpoint_sim::pipeline::UnknownPipeline| e.to_string())
}

fn nodes(s: &str) -> Result<u32, String> {
    s.parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_NODES).contains(n))
        .ok_or_else(|| format!("'{s}' is not accepted: a whole number of nodes, 1 to {MAX_NODES}"))
}

fn report_every(s: &str) -> Result<u64, String> {
    let max = setpoint_sim::pipeline::MAX_REPORT_EVERY_MS;
    let bad = || {
        format!(
            "'{s}' is not accepted: seconds to the millisecond, 0 to {}",
            max / 1000
        )
    };
    let f: f64 = s.parse().map_err(|_| bad())?;
    let ms = (f * 1000.0).round();
    if !f.is_finite() || f < 0.0 || (f * 1000.0 - ms).abs() > 1e-6 || ms > max as f64 {
        return Err(bad());
    }
    Ok(ms as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_refuse_with_what_is_accepted() {
        assert_eq!(pipeline("in-order"), Ok(Pipeline::InOrder));
        assert!(pipeline("fifo")
            .unwrap_err()
            .contains("accepted are per-report"));
        assert_eq!(nodes("3"), Ok(3));
        assert!(nodes("0").unwrap_err().contains("1 to 100000"));
        assert_eq!(report_every("0.5"), Ok(500));
        assert!(report_every("0.0001").is_err());
        assert!(report_every("-1").is_err());
        assert!(report_every("3601").is_err());
    }

    #[test]
    fn only_given_flags_change_the_spec() {
        let base = PipelineSpec {
            mode: Pipeline::Snapshot,
            nodes: 4,
            report_every_ms: 0,
        };
        assert_eq!(PipelineArgs::default().apply(base), base);
        let a = PipelineArgs {
            nodes: Some(2),
            ..PipelineArgs::default()
        };
        assert_eq!(a.apply(base).nodes, 2);
        assert_eq!(a.apply(base).mode, Pipeline::Snapshot);
        // Leaving in-order drops its snapshot period.
        let agent = PipelineSpec {
            mode: Pipeline::InOrder,
            nodes: 1,
            report_every_ms: 500,
        };
        let per_report = PipelineArgs {
            pipeline: Some(Pipeline::PerReport),
            ..PipelineArgs::default()
        };
        assert_eq!(per_report.apply(agent), PipelineSpec::default());
    }
}
