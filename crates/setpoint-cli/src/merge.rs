//! `setpoint merge`: joins the outputs of `setpoint sweep --shard I/N`, given in any order, into
//! exactly the bytes the whole sweep prints ([`setpoint_sim::merge`]).

use std::path::PathBuf;

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
            // A shard file that is not there is the user's mistake (exit 2), as for `apply -f`.
            let text = std::fs::read_to_string(path).map_err(|e| {
                crate::BadInput(format!(
                    "cannot read the shard output {}: {e}",
                    path.display()
                ))
            })?;
            Ok((path.display().to_string(), text))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(setpoint_sim::merge::merge(&inputs)?)
}
