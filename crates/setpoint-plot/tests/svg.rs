//! The pictures parse as SVG and hold the series they claim, checked against the run they draw.

use setpoint_core::ControllerKind;
use setpoint_plot::{
    heatmap_svg, svg_to_png, timeline_svg, Heatmap, Marker, Scale, Span, SpanKind, Timeline,
};
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
        spans: &[],
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

/// The heatmap of the lesson's world over these delays and periods: the grid, which cells the
/// lesson's relation mispredicts, and the SVG.
fn heatmap(delays: Vec<u64>, periods: Vec<u64>) -> (RelationGrid, Vec<bool>, String) {
    let grid = RelationGrid {
        base: Default::default(),
        delays,
        periods,
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
        row_labels: &[],
        scale: "overshoot",
        kind: Scale::Overshoot,
    })
    .unwrap();
    (grid, wrong, svg)
}

#[test]
fn heatmap_rows_can_be_named_delay_models_without_the_lessons_boundary() {
    let labels: Vec<String> = ["fixed:20", "uniform:0:40", "lesson-chain"]
        .map(String::from)
        .to_vec();
    let draw = |labels: &[String]| {
        heatmap_svg(&Heatmap {
            title: "p_overshoot".into(),
            delays: &[0, 1, 2],
            periods: &[10, 20, 30],
            overshoot: &[50, 0, 0, 90, 40, 0, 100, 70, 0],
            startup: 5,
            lesson_wrong: &[],
            row_labels: labels,
            scale: "p_overshoot (%)",
            kind: Scale::Overshoot,
        })
    };
    let svg = draw(&labels).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(str::trim))
        .collect();
    for l in &labels {
        assert_eq!(
            texts.iter().filter(|t| *t == l).count(),
            1,
            "{l}: {texts:?}"
        );
    }
    assert!(texts.contains(&"report-delay model"), "{texts:?}");
    assert!(
        texts.contains(&"p_overshoot (%)"),
        "the scale names its key: {texts:?}"
    );
    assert!(!texts.iter().any(|t| t.contains("U = G + B")), "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("measured boundary")));
    // One name per row, or none.
    assert!(draw(&labels[..2]).is_err());
}

#[test]
fn heatmap_parses_and_draws_one_cell_per_grid_point_with_both_boundaries() {
    let (grid, wrong, svg) = heatmap((0..=30).step_by(5).collect(), (1..=40).collect());
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

/// A flat run: `desired` copies live from second 0 to `last`.
fn flat(last: u64, desired: u64) -> Vec<TraceRow> {
    (0..=last)
        .map(|t| TraceRow {
            t,
            desired,
            live: desired,
            seen: desired,
            pending: 0,
            created: 0,
            delete_commands: 0,
            deleted: 0,
            died: 0,
        })
        .collect()
}

/// Of some polylines, the one that spans the most pixels from left to right: the data's line,
/// not the legend's short sample.
fn widest<'a, 'b>(lines: &'b [roxmltree::Node<'a, 'a>]) -> &'b roxmltree::Node<'a, 'a> {
    let extent = |n: &roxmltree::Node| {
        let xs: Vec<f64> = n
            .attribute("points")
            .unwrap()
            .split_whitespace()
            .map(|p| p.split(',').next().unwrap().parse().unwrap())
            .collect();
        let lo = xs.iter().copied().fold(f64::MAX, f64::min);
        let hi = xs.iter().copied().fold(f64::MIN, f64::max);
        ((hi - lo) * 1000.0) as i64
    };
    lines.iter().max_by_key(|n| extent(n)).expect("a line")
}

fn number(n: &roxmltree::Node, attr: &str) -> f64 {
    n.attribute(attr).unwrap().parse().unwrap()
}

#[test]
fn outages_and_stale_views_are_shaded_spans_as_wide_as_they_last() {
    let rows = flat(2999, 6);
    let spans = [
        Span {
            from: 900,
            to: 990,
            kind: SpanKind::Outage,
        },
        Span {
            from: 1500,
            to: 1620,
            kind: SpanKind::Stale,
        },
    ];
    let svg = timeline_svg(&Timeline {
        title: "spans".into(),
        rows: &rows,
        period: 15,
        events: &[],
        spans: &spans,
    })
    .unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    // The data's frame: the live line runs from the first to the last second.
    let live = with_stroke(&doc, "#1F5EC4", "3");
    let line = widest(&live);
    let xs: Vec<f64> = line
        .attribute("points")
        .unwrap()
        .split_whitespace()
        .map(|p| p.split(',').next().unwrap().parse().unwrap())
        .collect();
    let (x0, x1) = (xs[0], xs[xs.len() - 1]);
    let px_per_second = (x1 - x0) / 3000.0;
    for (colour, span, legend) in [
        ("#5A5A5A", spans[0], "outage: no report reaches the ledger"),
        ("#8C50C8", spans[1], "stale view: passes read an old ledger"),
    ] {
        let shades: Vec<_> = doc
            .descendants()
            .filter(|n| {
                n.has_tag_name("rect")
                    && n.attribute("fill") == Some(colour)
                    && n.attribute("opacity") == Some("0.16")
            })
            .collect();
        assert_eq!(shades.len(), 1, "one shaded span of {colour}");
        let x = number(&shades[0], "x");
        let w = number(&shades[0], "width");
        let want_x = x0 + span.from as f64 * px_per_second;
        let want_w = (span.to - span.from) as f64 * px_per_second;
        assert!(
            (x - want_x).abs() <= 1.5,
            "span starts at {x}, want {want_x}"
        );
        assert!((w - want_w).abs() <= 1.5, "span is {w} wide, want {want_w}");
        // Shaded behind the lines: the span comes before the live line in paint order.
        let order = |n: &roxmltree::Node| doc.descendants().position(|d| d == *n).unwrap();
        assert!(order(&shades[0]) < order(line));
        assert!(texts(&doc).iter().any(|t| t == legend), "legend {legend}");
    }
}

/// The font database the PNGs use, to measure text as it is drawn.
fn font_options() -> resvg::usvg::Options<'static> {
    let mut opt = resvg::usvg::Options::default();
    opt.fontdb_mut()
        .load_font_data(dejavu::sans::regular().to_vec());
    opt.fontdb_mut().set_sans_serif_family("DejaVu Sans");
    opt
}

/// The drawn bounding box (left, top, right, bottom) of every text node, by its text.
fn text_boxes(svg: &str) -> Vec<(String, [f32; 4])> {
    let tree = resvg::usvg::Tree::from_str(svg, &font_options()).unwrap();
    let mut out = Vec::new();
    fn walk(g: &resvg::usvg::Group, out: &mut Vec<(String, [f32; 4])>) {
        for n in g.children() {
            match n {
                resvg::usvg::Node::Group(g) => walk(g, out),
                resvg::usvg::Node::Text(t) => {
                    let b = t.abs_bounding_box();
                    let text: String = t.chunks().iter().map(|c| c.text()).collect();
                    out.push((
                        text.trim().to_owned(),
                        [b.left(), b.top(), b.right(), b.bottom()],
                    ));
                }
                _ => {}
            }
        }
    }
    walk(tree.root(), &mut out);
    out
}

#[test]
fn event_labels_close_in_time_never_overlap_and_sit_above_the_data() {
    let rows = flat(3000, 6);
    // Six events within 25 seconds (a pixel or two apart), labels of every length; four more
    // 60 seconds apart that fit between them; and one at the very end.
    let mut events: Vec<Marker> = (0..6)
        .map(|k| Marker {
            t: 1000 + 5 * k,
            label: format!("event {k}{}", "x".repeat(k as usize * 2)),
        })
        .collect();
    events.extend((0..4).map(|k| Marker {
        t: 1500 + 60 * k,
        label: format!("outage {} s", 100 * k),
    }));
    events.push(Marker {
        t: 2999,
        label: "at the very end of the run".into(),
    });
    let svg = timeline_svg(&Timeline {
        title: "labels".into(),
        rows: &rows,
        period: 15,
        events: &events,
        spans: &[],
    })
    .unwrap();
    let boxes: Vec<_> = text_boxes(&svg)
        .into_iter()
        .filter(|(t, _)| events.iter().any(|e| e.label == *t))
        .collect();
    assert_eq!(boxes.len(), events.len(), "every label is drawn: {boxes:?}");
    for (i, (ta, a)) in boxes.iter().enumerate() {
        for (tb, b) in &boxes[i + 1..] {
            let apart = a[2] <= b[0] || b[2] <= a[0] || a[3] <= b[1] || b[3] <= a[1];
            assert!(apart, "'{ta}' {a:?} overlaps '{tb}' {b:?}");
        }
        assert!(a[2] <= 1100.0, "'{ta}' runs off the picture: {a:?}");
    }
    // Above the data: every label ends above the top of the live line.
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let live_top = with_stroke(&doc, "#1F5EC4", "3")
        .iter()
        .flat_map(|n| {
            n.attribute("points")
                .unwrap()
                .split_whitespace()
                .map(|p| p.split(',').nth(1).unwrap().parse::<f32>().unwrap())
                .collect::<Vec<_>>()
        })
        .fold(f32::MAX, f32::min);
    for (t, b) in &boxes {
        assert!(
            b[3] < live_top,
            "'{t}' {b:?} reaches into the data (top {live_top})"
        );
    }
}

#[test]
fn labels_without_room_are_left_out_and_counted() {
    let rows = flat(900, 6);
    let events: Vec<Marker> = (0..20)
        .map(|k| Marker {
            t: 300,
            label: format!("death {k}"),
        })
        .collect();
    let svg = timeline_svg(&Timeline {
        title: "crowd".into(),
        rows: &rows,
        period: 15,
        events: &events,
        spans: &[],
    })
    .unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let t = texts(&doc);
    let shown = t.iter().filter(|x| x.starts_with("death ")).count();
    assert_eq!(shown, setpoint_plot::timeline::MAX_LABEL_ROWS);
    let note = format!("({} event labels left out: no room)", 20 - shown);
    assert!(t.contains(&note), "{t:?}");
}

#[test]
fn the_desired_line_shows_on_both_sides_of_the_live_line_where_they_agree() {
    let rows = trace(60);
    let svg = timeline(&rows);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let desired = with_stroke(&doc, "#279646", "9");
    let desired = widest(&desired);
    let live = with_stroke(&doc, "#1F5EC4", "3");
    let live = widest(&live);
    let order = |n: &roxmltree::Node| doc.descendants().position(|d| d == *n).unwrap();
    assert!(order(desired) < order(live), "desired is drawn under live");
    // The run ends with live = desired = 6 from second 495: look at the PNG in the middle of
    // that stretch, on the line and 4 px above and below it.
    let points: Vec<(f64, f64)> = live
        .attribute("points")
        .unwrap()
        .split_whitespace()
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect();
    let (a, b) = (points[points.len() - 2], points[points.len() - 1]);
    assert_eq!(a.1, b.1, "the last stretch is flat");
    let png = svg_to_png(&svg).unwrap();
    let pixmap = resvg::tiny_skia::Pixmap::decode_png(&png).unwrap();
    let x = ((a.0 + b.0) / 2.0) as u32;
    let y = b.1 as u32;
    let on = pixmap.pixel(x, y).unwrap();
    assert!(on.blue() > 150 && on.red() < 100, "live is on top: {on:?}");
    for y in [y - 4, y + 4] {
        let c = pixmap.pixel(x, y).unwrap();
        assert!(
            c.red() < 235 && c.green() > c.red() + 15 && c.green() > c.blue() + 10,
            "desired shows at ({x}, {y}): {c:?}"
        );
    }
}

#[test]
fn a_timeline_png_has_the_pngs_signature_and_the_svgs_size() {
    let svg = timeline(&trace(60));
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let root = doc.root_element();
    let (w, h): (u32, u32) = (
        root.attribute("width").unwrap().parse().unwrap(),
        root.attribute("height").unwrap().parse().unwrap(),
    );
    let png = svg_to_png(&svg).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&png[12..16], b"IHDR");
    assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), w);
    assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), h);
    assert_eq!(w, 1100);
}

#[test]
fn heatmap_legends_sit_outside_the_cells() {
    let (grid, _, svg) = heatmap(
        (0..=90).step_by(10).collect(),
        (1..=60).step_by(3).collect(),
    );
    // The cells: every stroke-less rectangle inside the chart's column, except the background.
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let rects: Vec<[f64; 4]> = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("stroke") == Some("none"))
        .map(|n| {
            let (x, y) = (number(&n, "x"), number(&n, "y"));
            [x, y, x + number(&n, "width"), y + number(&n, "height")]
        })
        .filter(|r| r[2] - r[0] < 900.0)
        .collect();
    let cells: Vec<&[f64; 4]> = rects.iter().filter(|r| r[0] < 870.0).collect();
    let scale: Vec<&[f64; 4]> = rects.iter().filter(|r| r[0] >= 870.0).collect();
    assert!(cells.len() >= grid.delays.len() * grid.periods.len());
    assert_eq!(scale.len(), 11, "eleven colour swatches");
    let right = cells.iter().map(|r| r[2]).fold(0.0, f64::max);
    let bottom = cells.iter().map(|r| r[3]).fold(0.0, f64::max);
    assert!(
        scale.iter().all(|r| r[0] >= right),
        "the scale is right of the cells"
    );
    let boxes = text_boxes(&svg);
    for label in [
        "lesson's relation mispredicts this cell",
        "lesson's boundary U = G + B (B = 5)",
        "measured boundary (overshoot 0 to its right)",
    ] {
        let (_, b) = boxes
            .iter()
            .find(|(t, _)| t == label)
            .unwrap_or_else(|| panic!("no legend '{label}'"));
        assert!(
            f64::from(b[1]) > bottom,
            "'{label}' {b:?} is drawn over the cells (bottom {bottom})"
        );
    }
}
