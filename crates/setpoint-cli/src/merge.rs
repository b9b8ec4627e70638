//! `setpoint merge`: joins the outputs of `setpoint sweep --shard I/N`, given in any order, into
//! exactly the bytes the whole sweep prints ([`setpoint_sim::merge`]).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

/// `setpoint merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' outputs (CSV or JSON, all of one format), in any order.
    #[arg(value_name = "SHARD", required = true)]
    pub files: Vec<PathBuf>,
}

/// Reads every file, merges, and returns the whole sweep's text.
pub fn run(args: &MergeArgs) -> anyhow::Result<String> {
    let inputs = args
        .files
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the shard output {}", path.display()))?;
            Ok((path.display().to_string(), text))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(setpoint_sim::merge::merge(&inputs)?)
}
