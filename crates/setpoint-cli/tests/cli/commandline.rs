//! The command line itself: messages for missing arguments, shell completions, the manual page,
//! and help that names every command and controller.

use std::process::Command;

use crate::lesson::{setpoint, stdout};

/// The top-level subcommands, as `--help` lists them.
fn subcommands() -> Vec<String> {
    let help = stdout(&["--help"]);
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
        .filter(|c| c != "help")
        .collect()
}

#[test]
fn a_missing_argument_is_named_with_the_usage_line() {
    for (args, missing, usage) in [
        (
            vec!["plot", "timeline", "-G", "60"],
            "needs --output <FILE.svg|FILE.png|FILE.html|->",
            "usage: setpoint plot timeline [OPTIONS] --output",
        ),
        (
            vec!["advise"],
            "needs --delay",
            "usage: setpoint advise [OPTIONS] --delay",
        ),
        (
            vec!["apply"],
            "needs --file <FILE>",
            "usage: setpoint apply",
        ),
        (
            vec!["kill", "collector"],
            "needs <COUNT>",
            "usage: setpoint kill [OPTIONS] <WORKLOAD> <COUNT>",
        ),
    ] {
        let out = setpoint(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(missing), "{args:?}: {err}");
        assert!(err.contains(usage), "{args:?}: {err}");
        assert!(!err.contains("were not provided"), "{args:?}: {err}");
        // The help it points to is the command's own.
        let command = usage
            .trim_start_matches("usage: ")
            .split(" [")
            .next()
            .unwrap();
        let command = command.split(" --").next().unwrap();
        assert!(
            err.contains(&format!("(see '{command} --help')")),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn completions_cover_every_command_in_each_shell() {
    let commands = subcommands();
    assert!(commands.len() > 15, "{commands:?}");
    for (shell, marker) in [
        ("bash", "complete -F _setpoint"),
        ("zsh", "#compdef setpoint"),
        ("fish", "complete -c setpoint"),
    ] {
        let script = stdout(&["completions", shell]);
        assert!(script.contains(marker), "{shell}: no '{marker}'");
        for c in &commands {
            assert!(script.contains(c.as_str()), "{shell} misses {c}");
        }
    }
    // The bash script is valid bash, where bash is installed.
    if std::path::Path::new("/bin/bash").exists() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("setpoint.bash");
        std::fs::write(&file, stdout(&["completions", "bash"])).unwrap();
        let check = Command::new("/bin/bash")
            .arg("-n")
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
    let out = setpoint(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[possible values: bash,"));
}

#[test]
fn the_manual_page_is_roff_naming_every_command() {
    let page = stdout(&["man"]);
    assert!(page.contains(".TH setpoint 1"), "{}", &page[..200]);
    assert!(page.contains(".SH NAME") && page.contains(".SH SUBCOMMANDS"));
    for c in subcommands() {
        assert!(
            page.contains(&format!("setpoint\\-{c}(1)")),
            "the page misses {c}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let out = stdout(&["man", "--out-dir", dir.path().to_str().unwrap()]);
    assert!(out.starts_with("wrote manual pages into"));
    for page in ["setpoint.1", "setpoint-run.1", "setpoint-plot-timeline.1"] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        assert!(text.contains(".TH"), "{page}");
    }
}

#[test]
fn top_level_help_says_what_every_command_is_for() {
    let help = stdout(&["--help"]);
    let groups = help
        .split_once("The lab (")
        .expect("the groups paragraph")
        .1;
    assert!(groups.contains("The runtime (real processes"));
    for c in subcommands() {
        let named = groups
            .split(|ch: char| !ch.is_ascii_alphanumeric() && ch != '-')
            .any(|w| w == c);
        assert!(named, "the groups paragraph does not place '{c}'");
    }
}

#[test]
fn run_help_lists_every_controller_with_a_line() {
    let help = stdout(&["run", "--help"]);
    for c in ["ledger", "intent", "expectations", "named", "gated"] {
        assert!(help.contains(&format!("- {c}:")), "run --help misses {c}");
    }
}
