//! `setpoint plot heatmap --delay-model LIST`: delay models as the rows of a heatmap, coloured
//! by the same numbers `setpoint sweep --delay-model LIST` prints.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::lab_cmd::{ok, run};

const MODELS: &str = "fixed:20,uniform:0:40,lesson-chain";
const GRID: [&str; 10] = [
    "--delay-model",
    MODELS,
    "-U",
    "10..=50:10",
    "--controller",
    "ledger",
    "--runs",
    "12",
    "--seed",
    "3",
];

#[test]
fn model_rows_are_named_and_their_grey_cells_are_the_sweeps_zero_cells() {
    let mut plot = vec!["plot", "heatmap"];
    plot.extend(GRID);
    plot.extend(["--colour", "p_overshoot", "-o", "-"]);
    let svg = ok(&plot);
    let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(str::trim))
        .collect();
    for m in MODELS.split(',') {
        assert!(texts.contains(&m), "row {m}: {texts:?}");
    }
    assert!(!texts.iter().any(|t| t.contains("U = G + B")), "{texts:?}");
    // Grey cells of the chart (left of the colour scale), counted by row from the bottom.
    let mut grey: BTreeMap<i64, usize> = BTreeMap::new();
    for n in doc.descendants().filter(|n| n.has_tag_name("rect")) {
        let x: i64 = n
            .attribute("x")
            .and_then(|v| v.parse().ok())
            .unwrap_or(i64::MAX);
        if n.attribute("fill") == Some("#EEEEEE") && x < 860 {
            let y: i64 = n.attribute("y").unwrap().parse().unwrap();
            *grey.entry(-y).or_default() += 1;
        }
    }
    let mut sweep = vec!["sweep"];
    sweep.extend(GRID);
    sweep.extend(["--format", "json"]);
    let mut zeros: BTreeMap<String, usize> = BTreeMap::new();
    for line in ok(&sweep).lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        let model = row["delay_model"].as_str().unwrap().to_owned();
        let n = zeros.entry(model).or_default();
        *n += usize::from(row["p_overshoot"].as_f64() == Some(0.0));
    }
    // Rows from the bottom in the order given.
    let by_row: Vec<usize> = MODELS.split(',').map(|m| zeros[m]).collect();
    let drawn: Vec<usize> = grey.values().copied().collect();
    assert_eq!(
        drawn.iter().sum::<usize>(),
        by_row.iter().sum::<usize>(),
        "{grey:?} vs {zeros:?}"
    );
    assert_eq!(
        drawn,
        by_row.into_iter().filter(|&n| n > 0).collect::<Vec<_>>()
    );
    assert!(
        zeros["fixed:20"] >= 3,
        "fixed:20 never overshoots from U = 25: {zeros:?}"
    );
}

#[test]
fn the_model_list_is_checked_before_any_work() {
    for (args, says) in [
        (
            &["--delay-model", "fixed:20,bogus"][..],
            "unknown delay model 'bogus'",
        ),
        (
            &["--delay-model", "fixed:20", "-G", "10"],
            "cannot be used with",
        ),
    ] {
        let mut a = vec!["plot", "heatmap"];
        a.extend(args);
        a.extend(["-o", "/tmp/spc-lab12-never.svg"]);
        let out = run(&a);
        assert_eq!(out.status.code(), Some(2), "{a:?}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(says), "{err}");
        assert!(err.contains("--delay-model"), "{err}");
    }
    assert!(!std::path::Path::new("/tmp/spc-lab12-never.svg").exists());
}

/// `plot heatmap FILE.toml` takes what `sweep FILE.toml` takes: the file's settings where no
/// flag is typed, the typed flags on top. The picture is the one the same settings typed as
/// flags draw, byte for byte.
#[test]
fn a_heatmap_from_a_scenario_file_is_the_one_its_settings_draw_as_flags() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/uniform-jitter.toml"
    );
    let common = ["-U", "10..=50:20", "--controller", "ledger", "--runs", "8"];
    let mut from_file = vec!["plot", "heatmap", file];
    from_file.extend(common);
    from_file.extend(["--colour", "p_overshoot", "-o", "-"]);
    let mut flags = vec![
        "plot",
        "heatmap",
        "--delay-model",
        "uniform:5:30",
        "--desired",
        "6",
    ];
    flags.extend([
        "-B",
        "5",
        "--duration",
        "900",
        "--deaths",
        "300:2",
        "--seed",
        "1",
    ]);
    flags.extend(common);
    flags.extend(["--colour", "p_overshoot", "-o", "-"]);
    let svg = ok(&from_file);
    assert!(
        svg.contains("uniform:5:30"),
        "the file's delay model is the row"
    );
    assert_eq!(svg, ok(&flags));
    // A flag the controller does not take is refused, not ignored.
    let out = run(&[
        "plot",
        "heatmap",
        "--ttl",
        "100",
        "-o",
        "/tmp/spc-lab-ops-never.svg",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--ttl applies only to controller 'expectations'"));
}
