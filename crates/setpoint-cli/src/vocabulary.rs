//! The command line's one vocabulary (issue 23): one flag name per concept across every
//! command, listed in [`VOCABULARY`](self::VOCABULARY) and in `docs/cli.md`. Older spellings stay as hidden
//! aliases, so scripts keep working while `--help`, completions and the manual show one name. A
//! test walks every subcommand's clap definition and fails on a second spelling.

/// Each concept's one long flag, its short flag if it has one, and the spellings that may only
/// be hidden aliases of it.
#[cfg(test)]
pub const VOCABULARY: &[(&str, Option<char>, &[&str])] = &[
    // Report delay G: one value or a grid, in seconds.
    ("delay", Some('G'), &["delays"]),
    // Loop period U: one value or a grid (a list, a range, a stepped range), in seconds.
    ("period", Some('U'), &["periods"]),
    // Startup time B.
    ("startup", Some('B'), &["startups"]),
    // The controller, or a list of them.
    ("controller", None, &["controllers"]),
    // Report-delay models.
    ("delay-model", None, &["delay-models"]),
    // Startup-time models.
    ("startup-model", None, &["startup-models"]),
    // How many seeded runs (Monte Carlo runs, chaos seeds S .. S+N-1).
    ("runs", None, &["seeds"]),
    // A file written: -o FILE, `-` for stdout.
    ("output", Some('o'), &["out", "out-file"]),
    // A directory written.
    ("out-dir", None, &["output-dir", "outdir"]),
    // Work in parallel: threads or cells at once.
    ("jobs", Some('j'), &["threads"]),
    // table, json or csv.
    ("format", None, &["fmt"]),
];

#[cfg(test)]
mod tests {
    use super::VOCABULARY;
    use clap::{CommandFactory, Parser};

    /// Every argument of every (sub)command, with the command's path.
    fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Arg)>) {
        for a in cmd.get_arguments() {
            out.push((path.to_owned(), a.clone()));
        }
        for s in cmd.get_subcommands() {
            walk(s, &format!("{path} {}", s.get_name()), out);
        }
    }

    fn all() -> Vec<(String, clap::Arg)> {
        let mut out = Vec::new();
        walk(&crate::args::Cli::command(), "setpoint", &mut out);
        out
    }

    #[test]
    fn every_command_spells_each_concept_one_way() {
        let mut wrong = Vec::new();
        for (path, a) in all() {
            let long = a.get_long().unwrap_or_default();
            let visible = a.get_visible_aliases().unwrap_or_default();
            for &(name, short, others) in VOCABULARY {
                if others.contains(&long) {
                    wrong.push(format!("{path}: --{long} is spelled --{name}"));
                }
                for v in &visible {
                    if others.contains(v) || (*v == name && long != name) {
                        wrong.push(format!("{path}: --{long} shows the alias --{v}"));
                    }
                }
                if let Some(s) = short {
                    if a.get_short() == Some(s) && long != name {
                        wrong.push(format!("{path}: -{s} is --{long}, not --{name}"));
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn the_check_finds_a_second_spelling() {
        let cmd = clap::Command::new("t").arg(clap::Arg::new("d").long("delays"));
        let mut out = Vec::new();
        walk(&cmd, "t", &mut out);
        let (_, a) = &out[0];
        assert!(VOCABULARY
            .iter()
            .any(|(_, _, others)| others.contains(&a.get_long().unwrap())));
    }

    #[test]
    fn the_old_spellings_still_parse_where_they_were_taken() {
        for args in [
            &[
                "chaos",
                "m.toml",
                "--seeds",
                "3",
                "--threads",
                "2",
                "--out",
                "d",
            ][..],
            &[
                "experiment",
                "lesson",
                "--delays",
                "0,5",
                "--controllers",
                "intent",
            ],
            &["relation", "--delays", "0,10", "--periods", "5,10"],
            &[
                "plot",
                "heatmap",
                "--delays",
                "0..=9",
                "--periods",
                "1..=5",
                "-o",
                "x.svg",
            ],
            &["advise", "-G", "20", "--periods", "5..=60:5"],
        ] {
            let argv = std::iter::once("setpoint").chain(args.iter().copied());
            if let Err(e) = crate::args::Cli::try_parse_from(argv) {
                panic!("{args:?}: {e}");
            }
        }
    }
}
