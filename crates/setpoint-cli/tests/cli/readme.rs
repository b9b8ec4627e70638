//! The README runs as written (issue 23): every command in README.md's code blocks is run with
//! the built binary, in order, in one scratch directory, and its output is compared with the
//! output the README shows.
//!
//! # The convention (for whoever adds a README section)
//! - A fenced block with no language (or `sh`, `shell`, `console`) is a command block. Each line
//!   that starts with `$ ` is a command, run by `bash` with `setpoint` on the PATH (the binary
//!   under test), `HOME` and the working directory in a scratch directory that has the
//!   workspace's `scenarios/` linked in. A line ending in `\` continues on the next one.
//! - The lines right after a command, up to the next command, a `#` comment or a blank line,
//!   are its shown output: stdout (and stderr) must equal them, line by line with trailing
//!   spaces trimmed. Output that contains `…` is a sketch and is not compared. A command whose
//!   shown output starts with `error:` must fail; every other command must succeed.
//! - Markers are HTML comments on the lines right before a block's opening fence (invisible
//!   on GitHub):
//!   - `<!-- readme-test: skip: REASON -->`: the block is not run (commands for several
//!     machines, or the build itself). The reason is printed.
//!   - `<!-- readme-test: slow WORDS: REASON -->`: in the block, the commands that start with
//!     `setpoint WORDS` run only with `CI` or `SETPOINT_README_SLOW` set (they take tens of
//!     seconds in a debug build).
//! - A command block with no `$ ` line and no skip marker fails the test, so a new section is
//!   either run or says why not. Blocks with a language (`toml`) are not commands.
//! - A command that needs a tool the machine lacks (`jq`) is skipped with a printed reason.

use std::path::Path;
use std::process::Command;

/// One command of the README, with what it shows.
#[derive(Debug)]
struct Example {
    line: usize,
    command: String,
    shown: Vec<String>,
}

/// One command block: its commands, and its markers.
#[derive(Debug, Default)]
struct Block {
    line: usize,
    skip: Option<String>,
    slow: Vec<(String, String)>,
    examples: Vec<Example>,
}

fn marker(line: &str) -> Option<&str> {
    line.trim()
        .strip_prefix("<!-- readme-test:")?
        .strip_suffix("-->")
        .map(str::trim)
}

/// The command blocks of a README, in order.
fn blocks(readme: &str) -> Vec<Block> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let start = i;
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].trim_start().starts_with("```"))
            .unwrap_or(lines.len());
        i = end + 1;
        if !matches!(lang.trim(), "" | "sh" | "shell" | "console") {
            continue;
        }
        let mut block = Block {
            line: start + 1,
            ..Block::default()
        };
        for m in lines[..start].iter().rev().map_while(|l| marker(l)) {
            if let Some(reason) = m.strip_prefix("skip:") {
                block.skip = Some(reason.trim().to_owned());
            } else if let Some((words, reason)) =
                m.strip_prefix("slow ").and_then(|r| r.split_once(':'))
            {
                block
                    .slow
                    .push((words.trim().to_owned(), reason.trim().to_owned()));
            } else {
                panic!("README line {}: unknown marker '{m}'", start);
            }
        }
        let body = &lines[start + 1..end];
        let mut k = 0;
        while k < body.len() {
            let Some(first) = body[k].strip_prefix("$ ") else {
                k += 1;
                continue;
            };
            let line = start + 2 + k;
            let mut command = first.to_owned();
            while command.ends_with('\\') && k + 1 < body.len() {
                command.pop();
                k += 1;
                command.push(' ');
                command.push_str(body[k].trim());
            }
            k += 1;
            let mut shown = Vec::new();
            while k < body.len()
                && !body[k].starts_with("$ ")
                && !body[k].starts_with('#')
                && !body[k].trim().is_empty()
            {
                shown.push(body[k].trim_end().to_owned());
                k += 1;
            }
            block.examples.push(Example {
                line,
                command,
                shown,
            });
        }
        out.push(block);
    }
    out
}

fn has(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn every_readme_command_runs_as_written_and_prints_what_it_shows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_setpoint"), bin.join("setpoint")).unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::os::unix::fs::symlink(
        root.join("scenarios").canonicalize().unwrap(),
        work.join("scenarios"),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let slow_ok =
        std::env::var_os("CI").is_some() || std::env::var_os("SETPOINT_README_SLOW").is_some();
    let (mut ran, mut failures) = (0, Vec::new());
    for block in blocks(&readme) {
        if let Some(reason) = &block.skip {
            println!("README line {}: block skipped: {reason}", block.line);
            continue;
        }
        assert!(
            !block.examples.is_empty(),
            "README line {}: a command block with no '$ ' command and no \
             '<!-- readme-test: skip: REASON -->' marker",
            block.line
        );
        for ex in &block.examples {
            let slow = block
                .slow
                .iter()
                .find(|(w, _)| ex.command.starts_with(&format!("setpoint {w}")));
            if let (Some((_, reason)), false) = (slow, slow_ok) {
                println!(
                    "README line {}: skipped without CI or SETPOINT_README_SLOW: {reason}",
                    ex.line
                );
                continue;
            }
            if ex.command.contains("| jq") && !has("jq") {
                println!("README line {}: skipped: jq is not installed", ex.line);
                continue;
            }
            let out = Command::new("bash")
                .args(["-o", "pipefail", "-c", &ex.command])
                .current_dir(&work)
                .env("PATH", &path)
                .env("HOME", dir.path())
                .output()
                .unwrap();
            ran += 1;
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let wants_error = ex.shown.first().is_some_and(|l| l.starts_with("error:"));
            if out.status.success() == wants_error {
                failures.push(format!(
                    "README line {}: `{}` exited {:?}: {}",
                    ex.line,
                    ex.command,
                    out.status.code(),
                    text.lines().take(3).collect::<Vec<_>>().join(" / ")
                ));
                continue;
            }
            let sketch = ex.shown.iter().any(|l| l.contains('…'));
            if ex.shown.is_empty() || sketch {
                continue;
            }
            let got: Vec<&str> = text.lines().map(str::trim_end).collect();
            if got != ex.shown {
                failures.push(format!(
                    "README line {}: `{}` printed\n{}\nbut the README shows\n{}",
                    ex.line,
                    ex.command,
                    got.join("\n"),
                    ex.shown.join("\n")
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(ran >= 20, "only {ran} README commands ran");
    println!("README: {ran} commands ran");
}

#[test]
fn blocks_markers_continuations_and_shown_output_are_read_as_documented() {
    let md = "text\n<!-- readme-test: slow sweep: a minute -->\n```\n# a comment\n$ setpoint run \\\n    -G 60\nline one\nline two\n\n$ setpoint sweep -G 0\n```\n\
              <!-- readme-test: skip: three machines -->\n```\nhost-a$ setpoint up\n```\n```toml\n$ not a command\n```\n";
    let b = blocks(md);
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].slow, [("sweep".to_owned(), "a minute".to_owned())]);
    assert_eq!(b[0].examples[0].command, "setpoint run  -G 60");
    assert_eq!(b[0].examples[0].shown, ["line one", "line two"]);
    assert_eq!(b[0].examples[1].command, "setpoint sweep -G 0");
    assert!(b[0].examples[1].shown.is_empty());
    assert_eq!(b[1].skip.as_deref(), Some("three machines"));
}
