//! Sweeps beyond one machine: the Kubernetes Indexed Job manifest and the Slurm array script in
//! `docs/distributed/` are run as their schedulers would run them (one shell per index, with
//! `JOB_COMPLETION_INDEX` or `SLURM_ARRAY_TASK_ID` set and `setpoint` on PATH), and their shards,
//! merged in a scrambled order, must be the unsharded sweep byte for byte. No cluster is needed:
//! what the scheduler adds (placement, retries, the shared volume) does not touch the bytes.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::harness::BIN;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A directory with `setpoint` in it, to put first on PATH.
fn bin_dir(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(BIN, bin.join("setpoint")).unwrap();
    bin
}

fn path_with(bin: &Path) -> String {
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn setpoint(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The `setpoint sweep …` line of a script, without its `--shard` and redirection: the
/// unsharded sweep the shards must add up to.
fn whole_sweep(script: &str) -> Vec<String> {
    let line = script
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("setpoint sweep "))
        .expect("the script runs setpoint sweep");
    let args = line.split(" --shard ").next().unwrap();
    args.split_whitespace().skip(1).map(String::from).collect()
}

/// Merges `files` in reverse order (any order must do) and checks the bytes.
fn check_merge(files: &[PathBuf], whole: &[String]) {
    let mut args: Vec<String> = vec!["merge".into()];
    args.extend(files.iter().rev().map(|f| f.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let whole: Vec<&str> = whole.iter().map(String::as_str).collect();
    let expected = setpoint(&whole);
    assert!(expected.lines().count() > 10, "a real grid: {expected}");
    assert_eq!(setpoint(&args), expected);
}

#[test]
fn the_kubernetes_manifest_runs_shards_that_merge_into_the_whole_sweep() {
    let manifest = std::fs::read_to_string(repo().join("docs/distributed/sweep-job.yaml")).unwrap();
    let field = |key: &str| -> String {
        let line = manifest
            .lines()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap_or_else(|| panic!("{key} in the manifest"));
        line.split_once(':')
            .unwrap()
            .1
            .split('#')
            .next()
            .unwrap()
            .trim()
            .to_owned()
    };
    assert_eq!(field("completionMode"), "Indexed");
    let completions: u64 = field("completions").parse().unwrap();
    // The container's shell script: the block scalar under `args:`.
    let start = manifest.find("- |\n").expect("args: - | block") + 4;
    let body: String = manifest[start..]
        .lines()
        .take_while(|l| l.starts_with("              "))
        .map(|l| format!("{}\n", l.trim_start()))
        .collect();
    let shards = manifest
        .lines()
        .skip_while(|l| !l.contains("name: SHARDS"))
        .nth(1)
        .and_then(|l| l.split('"').nth(1))
        .expect("SHARDS value");
    assert_eq!(shards, completions.to_string(), "one pod per shard");

    let dir = tempfile::tempdir().unwrap();
    let bin = bin_dir(dir.path());
    let out = dir.path().join("results");
    std::fs::create_dir_all(&out).unwrap();
    let mut files = Vec::new();
    for index in 0..completions {
        let status = Command::new("sh")
            .args(["-c", &body])
            .env("PATH", path_with(&bin))
            .env("JOB_COMPLETION_INDEX", index.to_string())
            .env("SHARDS", shards)
            .env("OUT", &out)
            .status()
            .unwrap();
        assert!(status.success(), "pod {index}");
        files.push(out.join(format!("shard-{index}.csv")));
    }
    check_merge(&files, &whole_sweep(&body));
}

#[test]
fn the_slurm_array_script_runs_shards_that_merge_into_the_whole_sweep() {
    let script_path = repo().join("docs/distributed/sweep-array.sh");
    let script = std::fs::read_to_string(&script_path).unwrap();
    let array = script
        .lines()
        .find_map(|l| l.strip_prefix("#SBATCH --array="))
        .expect("#SBATCH --array");
    let (first, last) = array.split_once('-').unwrap();
    let (first, last): (u64, u64) = (first.parse().unwrap(), last.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let bin = bin_dir(dir.path());
    let out = dir.path().join("results");
    let mut files = Vec::new();
    for task in first..=last {
        let status = Command::new("sh")
            .arg(&script_path)
            .env("PATH", path_with(&bin))
            .env("SLURM_ARRAY_TASK_ID", task.to_string())
            .env("OUT", &out)
            .status()
            .unwrap();
        assert!(status.success(), "task {task}");
        files.push(out.join(format!("shard-{task}.csv")));
    }
    check_merge(&files, &whole_sweep(&script));
}
