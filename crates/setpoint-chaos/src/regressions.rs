//! Every shrunk schedule that once broke a check is replayed and must pass
//! (`scenarios/chaos/regressions/`), and every open finding (`scenarios/chaos/open/`) still
//! breaks the check it names, so that a fix is noticed and the file moves to `regressions/`.

use std::path::{Path, PathBuf};

use crate::adapt::{make, Bugs};
use crate::check::Check;
use crate::faults::parse;
use crate::machine::Role;
use crate::runner::{run_checked, SeedReport};

fn replay(path: &Path) -> SeedReport {
    let text = std::fs::read_to_string(path).unwrap();
    let model = parse(&path.display().to_string(), &text).unwrap();
    let seed = model.seed.expect("a replay file names its seed");
    let schedule = model
        .schedule
        .clone()
        .expect("a replay file has its schedule");
    let f = |i: usize, r: &Role, now: u64| make(&model, Bugs::default(), seed, i, r, now);
    run_checked(&model, seed, schedule, &f, false).0
}

fn files(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/chaos")
        .join(dir);
    let mut out: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    out.sort();
    out
}

#[test]
fn every_regression_scenario_passes_every_check() {
    let all = files("regressions");
    assert!(!all.is_empty());
    for path in all {
        let r = replay(&path);
        assert!(r.passed(), "{}: {:?}", path.display(), r.violations);
    }
}

#[test]
fn every_open_finding_still_breaks_its_check() {
    for path in files("open") {
        let r = replay(&path);
        assert!(
            r.violations.iter().any(|v| v.check == Check::DoubleRun),
            "{} no longer fails: if it is fixed, move it to scenarios/chaos/regressions/",
            path.display()
        );
    }
}
