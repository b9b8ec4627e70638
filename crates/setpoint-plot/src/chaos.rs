//! One chaos run: live processes of a workload per node over time, stacked, against desired;
//! above it one lane per host with its faults, a lane for who holds `/leader`, a lane for the
//! faults that strike no host, and a red marker at the first violation.
//!
//! The lanes share the chart's time axis, so a reader sees at a glance which fault came before
//! the stack rose above desired (a double run) or fell below it. The picture is drawn from plain
//! numbers: this crate does not know the chaos world, the CLI hands it what the world recorded.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::legend::{self, Entry, Swatch};
use crate::png::text_width;
use crate::{draw_err, PlotError};

/// Live processes of the drawn workload on one node, as a step function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSeries {
    /// The node's name.
    pub node: String,
    /// `(t_ms, count)`: from `t_ms` on, `count` processes are alive, in time order.
    pub steps: Vec<(u64, u64)>,
}

/// A fault: a span on its host's lane, or an instant (`from_ms == to_ms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultBar {
    /// The host lane it is drawn on (an index into [`ChaosTimeline::hosts`]), or `None` for the
    /// lane of faults that strike no host (a crash, the store's, the operator's).
    pub host: Option<usize>,
    /// When it starts, milliseconds.
    pub from_ms: u64,
    /// When it ends, milliseconds (equal to `from_ms` for an instant).
    pub to_ms: u64,
    /// Its kind, as fault files name it.
    pub label: String,
}

/// What a chaos timeline shows.
#[derive(Debug, Clone)]
pub struct ChaosTimeline<'a> {
    /// The title over the chart.
    pub title: String,
    /// The run's length, milliseconds.
    pub duration_ms: u64,
    /// The workload's desired copies.
    pub desired: u64,
    /// The hosts' lane names, in host order (such as `controller-0`, `node-1`).
    pub hosts: &'a [String],
    /// Live processes per node, stacked bottom to top in this order.
    pub nodes: &'a [NodeSeries],
    /// The faults.
    pub faults: &'a [FaultBar],
    /// Who holds `/leader` from when: `(t_ms, Some(host))`, or `None` for no controller.
    pub leaders: &'a [(u64, Option<usize>)],
    /// The first violation: when, and the check's name.
    pub violation: Option<(u64, String)>,
}

const DESIRED: RGBColor = RGBColor(39, 150, 70);
const VIOLATION: RGBColor = RGBColor(210, 20, 30);
const FAULT: RGBColor = RGBColor(120, 120, 120);
const INSTANT: RGBColor = RGBColor(150, 60, 20);
/// One colour per node, and per leader.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 94, 196),
    RGBColor(230, 126, 34),
    RGBColor(142, 68, 173),
    RGBColor(22, 160, 133),
    RGBColor(192, 57, 43),
    RGBColor(127, 140, 141),
    RGBColor(241, 196, 15),
    RGBColor(52, 73, 94),
];

const WIDTH: u32 = crate::timeline::WIDTH;
const MARGIN: i32 = 14;
const Y_LABELS: i32 = 96;
const X_LABELS: i32 = 42;
const TITLE: i32 = 36;
const CHART: i32 = 380;
const LANE: i32 = 20;
const LABEL_SIZE: f64 = 12.0;

/// The counts of every node at each moment any of them changes: `(t_ms, counts)`.
fn stack(nodes: &[NodeSeries]) -> Vec<(u64, Vec<u64>)> {
    let mut times: Vec<u64> = nodes
        .iter()
        .flat_map(|n| n.steps.iter().map(|s| s.0))
        .collect();
    times.push(0);
    times.sort_unstable();
    times.dedup();
    times
        .into_iter()
        .map(|t| {
            let counts = nodes
                .iter()
                .map(|n| {
                    n.steps
                        .iter()
                        .take_while(|s| s.0 <= t)
                        .last()
                        .map_or(0, |s| s.1)
                })
                .collect();
            (t, counts)
        })
        .collect()
}

/// The outline of a step function through `(t_ms, value)` points to `end_ms`, in seconds.
fn step_points(points: &[(u64, u64)], end_ms: u64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut last: Option<u64> = None;
    for &(t, v) in points {
        let x = t as f64 / 1000.0;
        if let Some(prev) = last {
            out.push((x, prev as f64));
        }
        out.push((x, v as f64));
        last = Some(v);
    }
    if let Some(v) = last {
        out.push((end_ms as f64 / 1000.0, v as f64));
    }
    out
}

/// Draws `t` as an SVG document.
pub fn chaos_svg(t: &ChaosTimeline) -> Result<String, PlotError> {
    if t.duration_ms == 0 {
        return Err(PlotError::Empty("the run has no time"));
    }
    let x_end = t.duration_ms as f64 / 1000.0;
    let stacked = stack(t.nodes);
    let peak = stacked
        .iter()
        .map(|(_, c)| c.iter().sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(t.desired)
        .max(1);
    let y_end = (peak as f64 * 1.15).max(peak as f64 + 1.0);

    // Stretches where more processes live than desired: (from_ms, to_ms, total).
    let over: Vec<(u64, u64, u64)> = stacked
        .iter()
        .enumerate()
        .filter_map(|(i, (at, c))| {
            let total: u64 = c.iter().sum();
            let to = stacked.get(i + 1).map_or(t.duration_ms, |n| n.0);
            (total > t.desired).then_some((*at, to, total))
        })
        .collect();
    // Lanes, top to bottom: the leader, each host, then the faults that strike no host.
    let lanes = 1 + t.hosts.len() + 1;
    let lanes_h = lanes as i32 * LANE + 8;

    let mut entries = Vec::new();
    for (i, n) in t.nodes.iter().enumerate() {
        entries.push(Entry {
            swatch: Swatch::Shade(PALETTE[i % PALETTE.len()], 0.75),
            label: format!("live on {}", n.node),
        });
    }
    entries.push(Entry {
        swatch: Swatch::Line(DESIRED, 3, true),
        label: "desired".into(),
    });
    if !over.is_empty() {
        entries.push(Entry {
            swatch: Swatch::Shade(VIOLATION, 0.55),
            label: "above desired".into(),
        });
    }
    entries.push(Entry {
        swatch: Swatch::Shade(FAULT, 0.5),
        label: "lasting fault (shaded over the chart too)".into(),
    });
    entries.push(Entry {
        swatch: Swatch::Tick(INSTANT),
        label: "instant fault".into(),
    });
    if t.violation.is_some() {
        entries.push(Entry {
            swatch: Swatch::Line(VIOLATION, 2, false),
            label: "first violation".into(),
        });
    }
    let left_px = MARGIN + Y_LABELS;
    let legend_h = legend::height(&entries, WIDTH as i32, left_px);
    let height = TITLE + lanes_h + CHART + legend_h;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let title_colour = if t.violation.is_some() {
            VIOLATION
        } else {
            BLACK
        };
        root.draw(&Text::new(
            t.title.clone(),
            (WIDTH as i32 / 2, TITLE / 2 + 2),
            ("sans-serif", 18)
                .into_font()
                .color(&title_colour)
                .pos(Pos::new(HPos::Center, VPos::Center)),
        ))
        .map_err(draw_err)?;
        let (upper, strip) = root.split_vertically(TITLE + lanes_h + CHART);
        let mut chart = ChartBuilder::on(&upper)
            .margin(MARGIN)
            .margin_top(TITLE + lanes_h)
            .margin_bottom(4)
            .x_label_area_size(X_LABELS)
            .y_label_area_size(Y_LABELS)
            .build_cartesian_2d(0f64..x_end, 0f64..y_end)
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .x_label_formatter(&crate::whole)
            .y_label_formatter(&crate::whole)
            .x_desc("second")
            .y_desc("live processes")
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(draw_err)?;
        let (plot_x, plot_y) = chart.plotting_area().get_pixel_range();
        let span_ms = t.duration_ms as f64;
        let px = |ms: u64| {
            plot_x.start
                + ((ms.min(t.duration_ms) as f64 / span_ms) * f64::from(plot_x.end - plot_x.start))
                    .round() as i32
        };

        // Lasting faults shaded over the chart, under the stack.
        chart
            .draw_series(t.faults.iter().filter(|f| f.to_ms > f.from_ms).map(|f| {
                Rectangle::new(
                    [
                        (f.from_ms as f64 / 1000.0, 0.0),
                        ((f.to_ms.min(t.duration_ms)) as f64 / 1000.0, y_end),
                    ],
                    FAULT.mix(0.10).filled(),
                )
            }))
            .map_err(draw_err)?;

        // The stack: node i's band lies between the sums of nodes below it and through it.
        for i in (0..t.nodes.len()).rev() {
            let top: Vec<(u64, u64)> = stacked
                .iter()
                .map(|(at, c)| (*at, c[..=i].iter().sum()))
                .collect();
            let colour = PALETTE[i % PALETTE.len()];
            let mut outline = step_points(&top, t.duration_ms);
            outline.push((x_end, 0.0));
            outline.push((0.0, 0.0));
            chart
                .draw_series(std::iter::once(Polygon::new(
                    outline,
                    colour.mix(0.75).filled(),
                )))
                .map_err(draw_err)?;
        }
        // Above desired (a double run, or copies not yet stopped): red, at least 3 px wide so
        // that a second-long excess on a ten-minute run still shows.
        let min_ms = (t.duration_ms * 3).div_ceil((plot_x.end - plot_x.start).max(1) as u64);
        chart
            .draw_series(over.iter().map(|&(from, to, total)| {
                Rectangle::new(
                    [
                        (from as f64 / 1000.0, t.desired as f64),
                        (to.max(from + min_ms) as f64 / 1000.0, total as f64),
                    ],
                    VIOLATION.mix(0.55).filled(),
                )
            }))
            .map_err(draw_err)?;
        chart
            .draw_series(DashedLineSeries::new(
                vec![(0.0, t.desired as f64), (x_end, t.desired as f64)],
                9,
                5,
                DESIRED.stroke_width(3),
            ))
            .map_err(draw_err)?;

        // Instants through the chart.
        for f in t.faults.iter().filter(|f| f.to_ms == f.from_ms) {
            let x = f.from_ms as f64 / 1000.0;
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, 0.0), (x, y_end)],
                    INSTANT.mix(0.45).stroke_width(1),
                )))
                .map_err(draw_err)?;
        }

        // Lanes.
        let lane_top = TITLE + 4;
        let lane_y = |k: usize| lane_top + k as i32 * LANE;
        let (x_left, x_right) = (px(0), px(t.duration_ms));
        let mut names = vec!["/leader".to_owned()];
        names.extend(t.hosts.iter().cloned());
        names.push("store, procs".to_owned());
        for (k, name) in names.iter().enumerate() {
            let y = lane_y(k);
            if k % 2 == 0 {
                root.draw(&Rectangle::new(
                    [(x_left, y), (x_right, y + LANE)],
                    RGBColor(245, 245, 245).filled(),
                ))
                .map_err(draw_err)?;
            }
            root.draw(&Text::new(
                name.clone(),
                (x_left - 6, y + LANE / 2),
                ("sans-serif", LABEL_SIZE)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(draw_err)?;
        }
        // The leader lane: one coloured bar per holder, named by its host.
        for (i, &(from, holder)) in t.leaders.iter().enumerate() {
            let to = t.leaders.get(i + 1).map_or(t.duration_ms, |n| n.0);
            let (a, b) = (px(from), px(to.min(t.duration_ms)));
            let y = lane_y(0);
            let (colour, name) = match holder {
                Some(h) => (
                    PALETTE[(h + 4) % PALETTE.len()],
                    t.hosts.get(h).cloned().unwrap_or_default(),
                ),
                None => (WHITE, String::new()),
            };
            if holder.is_some() {
                root.draw(&Rectangle::new(
                    [(a, y + 3), (b.max(a + 1), y + LANE - 3)],
                    colour.mix(0.55).filled(),
                ))
                .map_err(draw_err)?;
            }
            if f64::from(b - a) > text_width(&name, LABEL_SIZE) + 6.0 {
                root.draw(&Text::new(
                    name,
                    (a + 3, y + LANE / 2),
                    ("sans-serif", LABEL_SIZE)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Left, VPos::Center)),
                ))
                .map_err(draw_err)?;
            }
        }
        // Faults on their lanes. Each label starts at its fault; one that would run into the
        // label before it on its lane joins that label ("partition + restart").
        let mut labels: Vec<Vec<(i32, String)>> = vec![Vec::new(); names.len()];
        let mut faults: Vec<&FaultBar> = t.faults.iter().collect();
        faults.sort_by_key(|f| (f.from_ms, f.to_ms));
        for f in faults {
            let k = f.host.map_or(names.len() - 1, |h| 1 + h);
            let y = lane_y(k);
            let (a, b) = (px(f.from_ms), px(f.to_ms.min(t.duration_ms)));
            if f.to_ms > f.from_ms {
                root.draw(&Rectangle::new(
                    [(a, y + 3), (b.max(a + 2), y + LANE - 3)],
                    FAULT.mix(0.5).filled(),
                ))
                .map_err(draw_err)?;
            } else {
                root.draw(&PathElement::new(
                    vec![(a, y + 2), (a, y + LANE - 2)],
                    INSTANT.stroke_width(2),
                ))
                .map_err(draw_err)?;
            }
            let at = a + 4;
            match labels[k].last_mut() {
                Some((x, text)) if *x + text_width(text, LABEL_SIZE).ceil() as i32 + 4 >= at => {
                    text.push_str(" + ");
                    text.push_str(&f.label);
                    let _ = x;
                }
                _ => labels[k].push((at, f.label.clone())),
            }
        }
        for (k, lane) in labels.into_iter().enumerate() {
            for (x, text) in lane {
                let w = text_width(&text, LABEL_SIZE).ceil() as i32;
                // Near the right edge the label ends at its fault instead.
                let (x, pos) = if x + w > x_right + MARGIN {
                    (x - 8, HPos::Right)
                } else {
                    (x, HPos::Left)
                };
                root.draw(&Text::new(
                    text,
                    (x, lane_y(k) + LANE / 2),
                    ("sans-serif", LABEL_SIZE)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(pos, VPos::Center)),
                ))
                .map_err(draw_err)?;
            }
        }

        // The first violation: a red line through lanes and chart, a marker at the top.
        if let Some((at, check)) = &t.violation {
            let x = px(*at);
            root.draw(&PathElement::new(
                vec![(x, lane_top), (x, plot_y.end)],
                VIOLATION.stroke_width(2),
            ))
            .map_err(draw_err)?;
            root.draw(&TriangleMarker::new(
                (x, plot_y.start + 8),
                7,
                VIOLATION.filled(),
            ))
            .map_err(draw_err)?;
            let label = format!("{check} at {:.3} s", *at as f64 / 1000.0);
            let w = text_width(&label, LABEL_SIZE).ceil() as i32;
            let (pos, lx) = if x + 10 + w < x_right {
                (HPos::Left, x + 10)
            } else {
                (HPos::Right, x - 10)
            };
            root.draw(&Text::new(
                label,
                (lx, plot_y.start + 10),
                ("sans-serif", LABEL_SIZE + 1.0)
                    .into_font()
                    .color(&VIOLATION)
                    .pos(Pos::new(pos, VPos::Center)),
            ))
            .map_err(draw_err)?;
        }
        legend::draw(&strip, &entries, left_px)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(node: &str, steps: &[(u64, u64)]) -> NodeSeries {
        NodeSeries {
            node: node.into(),
            steps: steps.to_vec(),
        }
    }

    #[test]
    fn the_stack_holds_every_nodes_count_at_every_change_of_any() {
        let s = stack(&[
            series("a", &[(1000, 2), (5000, 1)]),
            series("b", &[(3000, 1)]),
        ]);
        assert_eq!(
            s,
            vec![
                (0, vec![0, 0]),
                (1000, vec![2, 0]),
                (3000, vec![2, 1]),
                (5000, vec![1, 1]),
            ]
        );
    }

    #[test]
    fn step_points_jump_at_each_change_and_run_to_the_end() {
        assert_eq!(
            step_points(&[(0, 0), (2000, 3)], 4000),
            vec![(0.0, 0.0), (2.0, 0.0), (2.0, 3.0), (4.0, 3.0)]
        );
    }

    fn picture(violation: Option<(u64, String)>) -> String {
        let hosts = ["controller-0".to_owned(), "node-1".to_owned()];
        let nodes = [series("node-1", &[(500, 3), (9000, 4)])];
        let faults = [
            FaultBar {
                host: Some(1),
                from_ms: 2000,
                to_ms: 6000,
                label: "pause".into(),
            },
            FaultBar {
                host: None,
                from_ms: 7000,
                to_ms: 7000,
                label: "leader-change".into(),
            },
        ];
        chaos_svg(&ChaosTimeline {
            title: "t".into(),
            duration_ms: 10_000,
            desired: 3,
            hosts: &hosts,
            nodes: &nodes,
            faults: &faults,
            leaders: &[(0, None), (100, Some(0))],
            violation,
        })
        .unwrap()
    }

    #[test]
    fn a_picture_names_its_lanes_faults_and_the_first_violation() {
        let svg = picture(Some((9000, "double-run".into())));
        for text in [
            "/leader",
            "controller-0",
            "node-1",
            "pause",
            "leader-change",
            "double-run at 9.000 s",
            "live on node-1",
            "first violation",
            "above desired",
        ] {
            assert!(svg.contains(text), "{text} is drawn");
        }
        let clean = picture(None);
        assert!(!clean.contains("first violation"));
        assert!(!clean.contains("double-run"));
        let calm = chaos_svg(&ChaosTimeline {
            title: "t".into(),
            duration_ms: 10_000,
            desired: 4,
            hosts: &[],
            nodes: &[series("node-1", &[(500, 4)])],
            faults: &[],
            leaders: &[],
            violation: None,
        })
        .unwrap();
        assert!(!calm.contains("above desired"), "4 of 4 is not above");
    }

    #[test]
    fn a_run_without_time_is_refused() {
        let t = ChaosTimeline {
            title: "x".into(),
            duration_ms: 0,
            desired: 1,
            hosts: &[],
            nodes: &[],
            faults: &[],
            leaders: &[],
            violation: None,
        };
        assert!(matches!(chaos_svg(&t), Err(PlotError::Empty(_))));
    }
}
