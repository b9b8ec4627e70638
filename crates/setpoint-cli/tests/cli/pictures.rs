//! Pictures and files: `-o` writes the format its extension names (SVG, PNG, HTML), `-` is
//! standard output, and any other extension is refused before any work.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn setpoint_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_setpoint"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the setpoint binary runs")
}

fn ok(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = setpoint_in(dir, args);
    assert!(
        out.status.success(),
        "setpoint {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn scenario(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name)
        .display()
        .to_string()
}

/// The width and height in a PNG's header, after checking its signature.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG signature");
    assert_eq!(&png[12..16], b"IHDR");
    (
        u32::from_be_bytes(png[16..20].try_into().unwrap()),
        u32::from_be_bytes(png[20..24].try_into().unwrap()),
    )
}

fn svg_size(svg: &str) -> (u32, u32) {
    let doc = roxmltree::Document::parse(svg).expect("well-formed SVG");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    (
        root.attribute("width").unwrap().parse().unwrap(),
        root.attribute("height").unwrap().parse().unwrap(),
    )
}

#[test]
fn png_files_are_real_pngs_of_the_svgs_size() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["plot", "timeline", "-G", "60"],
        vec!["plot", "heatmap", "-G", "0..=30:5", "-U", "1..=30"],
    ] {
        let svg = String::from_utf8(ok(dir.path(), &[&args[..], &["-o", "-"]].concat())).unwrap();
        let wrote = ok(dir.path(), &[&args[..], &["-o", "pic.png"]].concat());
        assert_eq!(String::from_utf8(wrote).unwrap(), "wrote pic.png\n");
        let png = std::fs::read(dir.path().join("pic.png")).unwrap();
        assert_eq!(png_size(&png), svg_size(&svg), "{args:?}");
        // Not a blank canvas: a real picture compresses to more than a few hundred bytes.
        assert!(png.len() > 10_000, "{args:?}: {} bytes", png.len());
    }
}

#[test]
fn a_dash_writes_to_stdout_and_creates_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let svg = ok(dir.path(), &["plot", "timeline", "-G", "60", "-o", "-"]);
    let svg = String::from_utf8(svg).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
    assert!(svg.contains("overshoot 24, peak 30, stable at 495 s"));
    let page = ok(dir.path(), &["report", "-G", "20", "-o", "-"]);
    assert!(String::from_utf8(page)
        .unwrap()
        .starts_with("<!DOCTYPE html>"));
    assert!(!dir.path().join("-").exists(), "no file named '-'");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn an_html_picture_is_a_page_around_the_svg() {
    let dir = tempfile::tempdir().unwrap();
    ok(
        dir.path(),
        &["plot", "timeline", "-G", "60", "-o", "run.html"],
    );
    let html = std::fs::read_to_string(dir.path().join("run.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    let svg = &html[html.find("<svg").unwrap()..html.find("</svg>").unwrap() + 6];
    assert_eq!(svg_size(svg), (1100, svg_size(svg).1));
}

#[test]
fn other_extensions_are_refused_with_exit_2_and_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for (args, accepted) in [
        (
            vec!["plot", "timeline", "-G", "60", "-o", "run.pdf"],
            "accepted: FILE.svg, FILE.png, FILE.html, or - for standard output",
        ),
        (
            vec!["plot", "heatmap", "-o", "map"],
            "accepted: FILE.svg, FILE.png, FILE.html, or - for standard output",
        ),
        (
            vec!["plot", "timeline", "-o", "run.svg.gz"],
            "accepted: FILE.svg, FILE.png",
        ),
        (
            vec!["report", "-o", "r.png"],
            "accepted: FILE.html, or - for standard output",
        ),
    ] {
        let out = setpoint_in(dir.path(), &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(accepted), "{args:?}: {err}");
        assert!(err.contains(args[args.len() - 1]), "names the value: {err}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
}

#[test]
fn a_fault_timeline_shades_its_outage_and_stale_view() {
    let dir = tempfile::tempdir().unwrap();
    let svg = ok(
        dir.path(),
        &["plot", "timeline", &scenario("faults.toml"), "-o", "-"],
    );
    let svg = String::from_utf8(svg).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let shade = |fill: &str| {
        doc.descendants()
            .filter(|n| {
                n.has_tag_name("rect")
                    && n.attribute("fill") == Some(fill)
                    && n.attribute("opacity") == Some("0.16")
            })
            .map(|n| n.attribute("width").unwrap().parse::<f64>().unwrap())
            .collect::<Vec<_>>()
    };
    // faults.toml: a 90 s outage at 900 and a 120 s stale view at 1500, in a 3000 s run.
    let (outage, stale) = (shade("#5A5A5A"), shade("#8C50C8"));
    assert_eq!((outage.len(), stale.len()), (1, 1), "{outage:?} {stale:?}");
    assert!((stale[0] / outage[0] - 120.0 / 90.0).abs() < 0.1);
}
