//! The pictures parse as SVG and hold the series they claim, checked against the run they draw.

use setpoint_core::ControllerKind;
use setpoint_plot::{heatmap_svg, timeline_svg, Heatmap, Marker, Timeline};
use setpoint_sim::lesson::{RelationGrid, RelationScan};
use setpoint_sim::{simulate_traced, LessonWorld, TraceRow};

fn trace(delay: u64) -> Vec<TraceRow> {
    let mut rows = Vec::new();
    simulate_traced(
        &LessonWorld::lesson(delay, ControllerKind::Ledger),
        &mut |r| rows.push(*r),
    );
    rows
}

fn timeline(rows: &[TraceRow]) -> String {
    timeline_svg(&Timeline {
        title: "lesson G=60".into(),
        rows,
        period: 15,
        events: &[Marker {
            t: 300,
            label: "2 die".into(),
        }],
    })
    .unwrap()
}

fn texts(doc: &roxmltree::Document) -> Vec<String> {
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or("").trim().to_owned())
        .collect()
}

fn with_stroke<'a>(
    doc: &'a roxmltree::Document,
    colour: &str,
    width: &str,
) -> Vec<roxmltree::Node<'a, 'a>> {
    doc.descendants()
        .filter(|n| {
            n.has_tag_name("polyline")
                && n.attribute("stroke") == Some(colour)
                && n.attribute("stroke-width") == Some(width)
        })
        .collect()
}

#[test]
fn timeline_parses_and_labels_every_series_and_event() {
    let svg = timeline(&trace(60));
    let doc = roxmltree::Document::parse(&svg).expect("the timeline is well-formed SVG");
    let t = texts(&doc);
    for label in [
        "live",
        "seen on the ledger",
        "desired",
        "2 die",
        "lesson G=60",
    ] {
        assert!(
            t.iter().any(|x| x == label),
            "missing text '{label}' in {t:?}"
        );
    }
}

#[test]
fn timeline_live_line_steps_through_every_live_count_of_the_run() {
    let rows = trace(60);
    let svg = timeline(&rows);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    // The live series: the one polyline drawn 3 wide in the live colour (the legend swatch is a
    // two-point path).
    let lines = with_stroke(&doc, "#1F5EC4", "3");
    let line = lines
        .iter()
        .max_by_key(|n| n.attribute("points").unwrap().len())
        .expect("a live line");
    let ys: std::collections::BTreeSet<i64> = line
        .attribute("points")
        .unwrap()
        .split_whitespace()
        .map(|p| p.split(',').nth(1).unwrap().parse::<f64>().unwrap() as i64)
        .collect();
    let lives: std::collections::BTreeSet<u64> = rows.iter().map(|r| r.live).collect();
    assert_eq!(ys.len(), lives.len(), "one level per distinct live count");
}

#[test]
fn timeline_marks_each_round_that_created_copies() {
    let rows = trace(60);
    let svg = timeline(&rows);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let triangles = doc
        .descendants()
        .filter(|n| n.has_tag_name("polygon") && n.attribute("fill") == Some("#279646"))
        .count();
    let creating = rows
        .iter()
        .filter(|r| r.t % 15 == 0 && r.created > 0)
        .count();
    assert_eq!(
        creating, 10,
        "five blind rounds for the ramp and five for the deaths"
    );
    assert_eq!(
        triangles,
        creating + 1,
        "one per creating round, plus the legend's"
    );
}

#[test]
fn heatmap_parses_and_draws_one_cell_per_grid_point_with_both_boundaries() {
    let grid = RelationGrid {
        base: Default::default(),
        delays: (0..=30).step_by(5).collect(),
        periods: (1..=40).collect(),
    };
    let scan = RelationScan::try_run(&grid).unwrap();
    let overshoot: Vec<u64> = scan.cells.iter().map(|c| c.overshoot).collect();
    let wrong: Vec<bool> = scan.cells.iter().map(|c| !c.lesson_match).collect();
    let svg = heatmap_svg(&Heatmap {
        title: "overshoot".into(),
        delays: &grid.delays,
        periods: &grid.periods,
        overshoot: &overshoot,
        startup: 5,
        lesson_wrong: &wrong,
    })
    .unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the heatmap is well-formed SVG");
    let t = texts(&doc);
    assert!(t
        .iter()
        .any(|x| x.starts_with("lesson's boundary U = G + B")));
    assert!(t.iter().any(|x| x.starts_with("measured boundary")));
    // Cells are filled rectangles without a stroke; the legend adds eleven colour swatches and
    // the background one.
    let filled = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("stroke") == Some("none"))
        .count();
    assert!(filled >= grid.delays.len() * grid.periods.len());
    // One dot per mispredicted cell (U <= B/2 here: U = 1, 2), plus the legend's.
    let dots = doc
        .descendants()
        .filter(|n| n.has_tag_name("circle"))
        .count();
    assert_eq!(dots, wrong.iter().filter(|&&w| w).count() + 1);
    assert!(wrong.iter().any(|&w| w));
}
