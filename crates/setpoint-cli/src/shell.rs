//! `setpoint completions SHELL` and `setpoint man`: shell completion scripts (clap_complete) and
//! the manual page (clap_mangen), both generated from the command line's own definition, so they
//! cannot fall out of step with it.

use std::path::PathBuf;

use anyhow::Context;
use clap::{CommandFactory, Subcommand};
use clap_complete::Shell;

use crate::args::Cli;

/// The shell-integration commands.
#[derive(Debug, Subcommand)]
pub enum ShellCommand {
    /// Print a shell completion script: `setpoint completions bash > /etc/bash_completion.d/setpoint`.
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print the manual page (roff), or write one page per command into a directory.
    Man {
        /// Write setpoint.1 and one setpoint-COMMAND.1 per subcommand into this directory
        /// instead of printing setpoint.1.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
}

/// Runs a shell-integration command and returns what to print.
pub fn execute(command: &ShellCommand) -> anyhow::Result<String> {
    let mut cmd = Cli::command();
    match command {
        ShellCommand::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(*shell, &mut cmd, "setpoint", &mut out);
            String::from_utf8(out).context("the completion script is not UTF-8")
        }
        ShellCommand::Man { out_dir: None } => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut out)
                .context("rendering the manual page")?;
            String::from_utf8(out).context("the manual page is not UTF-8")
        }
        ShellCommand::Man { out_dir: Some(dir) } => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("cannot write manual pages into {}", dir.display()))?;
            Ok(format!("wrote manual pages into {}\n", dir.display()))
        }
    }
}
