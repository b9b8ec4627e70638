//! A model file as TOML reads it, before any value is checked, and the errors that name where
//! in the text a bad value stands.

use std::ops::Range;

use serde::Deserialize;
use setpoint_sim::scenario_file::locate;
use toml::{Spanned, Value};

use super::{FaultKind, ModelError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    pub(super) description: Option<String>,
    pub(super) seconds: Option<Spanned<i64>>,
    pub(super) settle: Option<Spanned<i64>>,
    pub(super) event_budget: Option<Spanned<i64>>,
    pub(super) seed: Option<Spanned<i64>>,
    pub(super) swarm: Option<bool>,
    pub(super) cluster: Option<RawCluster>,
    pub(super) network: Option<RawNetwork>,
    pub(super) process: Option<RawProcess>,
    #[serde(default)]
    pub(super) workload: Vec<RawWorkload>,
    #[serde(default)]
    pub(super) fault: Vec<RawFault>,
    pub(super) event: Option<Spanned<Vec<RawEvent>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    pub(super) controllers: Option<Spanned<i64>>,
    pub(super) agents: Option<Spanned<i64>>,
    pub(super) skew_max_ms: Option<Spanned<i64>>,
    pub(super) leader_ttl_ms: Option<Spanned<i64>>,
    pub(super) node_ttl_ms: Option<Spanned<i64>>,
    pub(super) poll_ms: Option<Spanned<i64>>,
    pub(super) sync_ms: Option<Spanned<i64>>,
    pub(super) report_ms: Option<Spanned<i64>>,
    pub(super) report_delay_ms: Option<Spanned<i64>>,
    pub(super) drift_max_ppm: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNetwork {
    pub(super) delay_ms: Option<Spanned<i64>>,
    pub(super) jitter_ms: Option<Spanned<i64>>,
    pub(super) loss: Option<Spanned<Value>>,
    pub(super) slow_ms: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProcess {
    pub(super) start_ms: Option<Spanned<i64>>,
    pub(super) term_exit_ms: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWorkload {
    pub(super) name: Spanned<String>,
    pub(super) controller: Option<Spanned<String>>,
    pub(super) copies: Spanned<i64>,
    pub(super) period_ms: Option<Spanned<i64>>,
    pub(super) startup_ms: Option<Spanned<i64>>,
    pub(super) grace_ms: Option<Spanned<i64>>,
    pub(super) stop_when_cut_off_ms: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFault {
    pub(super) kind: Spanned<String>,
    pub(super) count: Spanned<i64>,
    pub(super) target: Option<Spanned<String>>,
    pub(super) min_ms: Option<Spanned<i64>>,
    pub(super) max_ms: Option<Spanned<i64>>,
    pub(super) during: Option<Spanned<String>>,
    pub(super) after: Option<Spanned<String>>,
    pub(super) within_ms: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEvent {
    pub(super) at_ms: Spanned<i64>,
    pub(super) kind: Spanned<String>,
    pub(super) host: Option<Spanned<i64>>,
    pub(super) duration_ms: Option<Spanned<i64>>,
}

pub(super) struct Located<'a> {
    pub(super) label: &'a str,
    pub(super) text: &'a str,
}

impl Located<'_> {
    pub(super) fn at(
        &self,
        span: Range<usize>,
        key: Option<&str>,
        message: impl Into<String>,
    ) -> ModelError {
        let (line, found) = locate(self.text, span.start);
        ModelError::File {
            path: self.label.to_owned(),
            line,
            key: key.map_or(found, str::to_owned),
            message: message.into(),
        }
    }

    pub(super) fn int(
        &self,
        v: &Spanned<i64>,
        key: &str,
        lo: i64,
        hi: i64,
    ) -> Result<u64, ModelError> {
        let x = *v.get_ref();
        if x < lo || x > hi {
            return Err(self.at(
                v.span(),
                Some(key),
                format!("{x} is out of range: accepted {lo} to {hi}"),
            ));
        }
        Ok(x as u64)
    }

    pub(super) fn opt(
        &self,
        v: &Option<Spanned<i64>>,
        key: &str,
        lo: i64,
        hi: i64,
        default: u64,
    ) -> Result<u64, ModelError> {
        v.as_ref().map_or(Ok(default), |v| self.int(v, key, lo, hi))
    }

    pub(super) fn kind(&self, v: &Spanned<String>, key: &str) -> Result<FaultKind, ModelError> {
        FaultKind::ALL
            .iter()
            .find(|(_, n)| n == v.get_ref())
            .map(|(k, _)| *k)
            .ok_or_else(|| {
                let names: Vec<&str> = FaultKind::ALL.iter().map(|(_, n)| *n).collect();
                self.at(
                    v.span(),
                    Some(key),
                    format!(
                        "unknown fault kind '{}': accepted {}",
                        v.get_ref(),
                        names.join(", ")
                    ),
                )
            })
    }
}
