//! `setpoint merge` knows every shard of a sweep: each shard's output ends with a trailer that
//! names it (`I/N`) and the grid's cell count, which the merged bytes drop. A missing shard, the
//! last one included, and a shard cut off before its trailer are refused with one line, exit 2.

use std::path::{Path, PathBuf};

use crate::lab_cmd::{ok, refused};

const GRID: [&str; 5] = ["sweep", "-G", "0..=30:10", "-U", "10,20"];

/// Writes shard `i` of `n` of GRID in `format` to `dir`.
fn shard(dir: &Path, format: &str, i: u64, n: u64) -> PathBuf {
    let spec = format!("{i}/{n}");
    let mut args = GRID.to_vec();
    args.extend(["--format", format, "--shard", &spec]);
    let path = dir.join(format!("{format}-{i}-of-{n}"));
    std::fs::write(&path, ok(&args)).unwrap();
    path
}

fn merge(files: &[&PathBuf]) -> Vec<String> {
    let mut args = vec!["merge".to_owned()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    args
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn a_shard_ends_with_a_trailer_that_the_merged_output_drops() {
    let dir = tempfile::tempdir().unwrap();
    for (format, trailer) in [
        ("csv", "# shard 2/3 of 8 cells"),
        ("json", r#"{"shard":"2/3","grid_cells":8}"#),
    ] {
        let mut args = GRID.to_vec();
        args.extend(["--format", format]);
        let whole = ok(&args);
        let files: Vec<PathBuf> = (1..=3).map(|i| shard(dir.path(), format, i, 3)).collect();
        let text = std::fs::read_to_string(&files[1]).unwrap();
        assert_eq!(text.lines().last(), Some(trailer), "{text}");
        assert!(
            !whole.contains("shard"),
            "the unsharded sweep has no trailer"
        );
        let merged = ok(&strs(&merge(&[&files[2], &files[0], &files[1]])));
        assert_eq!(merged, whole, "{format}");
    }
}

#[test]
fn merge_refuses_a_missing_last_shard_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for format in ["csv", "json"] {
        let files: Vec<PathBuf> = (1..=4).map(|i| shard(dir.path(), format, i, 4)).collect();
        let err = refused(&strs(&merge(&[&files[0], &files[1], &files[2]])));
        assert_eq!(
            err,
            "error: shard 4/4 (cells 6 to 7) is missing: no file given holds it; accepted: the output of every shard from 1/4 to 4/4\n"
        );
        let err = refused(&strs(&merge(&[&files[3], &files[0], &files[2]])));
        assert!(err.contains("shard 2/4 (cells 2 to 3) is missing"), "{err}");
    }
}

#[test]
fn merge_refuses_a_cut_off_shard_shards_of_two_cuts_and_an_unsharded_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let a = shard(dir.path(), "csv", 1, 2);
    let b = shard(dir.path(), "csv", 2, 2);
    // Shard 2 stopped before its trailer: its rows alone are not mergeable.
    let text = std::fs::read_to_string(&b).unwrap();
    let cut = dir.path().join("cut");
    std::fs::write(
        &cut,
        text.lines()
            .take(3)
            .map(|l| l.to_owned() + "\n")
            .collect::<String>(),
    )
    .unwrap();
    let err = refused(&strs(&merge(&[&a, &cut])));
    assert!(err.contains("is not a shard trailer"), "{err}");
    // Shard 2 of a cut into 3 does not complete a cut into 2.
    let other = shard(dir.path(), "csv", 2, 3);
    let err = refused(&strs(&merge(&[&a, &other])));
    assert!(
        err.contains("the files are not shards of one sweep"),
        "{err}"
    );
    // The whole sweep's output has no trailer.
    let whole = dir.path().join("whole");
    std::fs::write(&whole, ok(&GRID)).unwrap();
    let err = refused(&strs(&merge(&[&whole])));
    assert!(err.contains("is not a shard trailer"), "{err}");
    // A shard given twice.
    let err = refused(&strs(&merge(&[&a, &b, &a])));
    assert!(err.contains("are both shard 1/2"), "{err}");
}
