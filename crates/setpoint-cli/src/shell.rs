//! `setpoint completions SHELL` and `setpoint man`: shell completion scripts (clap_complete) and
//! the manual page (clap_mangen), both generated from the command line's own definition, so they
//! cannot fall out of step with it.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use clap_complete::Shell;

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

/// Runs a shell-integration command on `cmd`, the whole command line's definition
/// (`Cli::command()`), and returns what to print. It is handed in, not built here, so that this
/// subcommand does not import the command line that lists it.
pub fn execute(command: &ShellCommand, mut cmd: clap::Command) -> anyhow::Result<String> {
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
