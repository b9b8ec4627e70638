//! `setpoint report`: one self-contained HTML page with the lesson's tables, a run's metrics and
//! prediction, its timeline and the overshoot heatmap around it. The page loads nothing: styles
//! and pictures are inline, and it has no scripts.

use anyhow::Context;
use std::fmt::Write as _;

use clap::Args;
use setpoint_sim::lesson::{lesson_all, lesson_prediction};
use setpoint_sim::limits;
use setpoint_sim::predict::predict;
use setpoint_sim::report as sim_report;
use setpoint_sim::scenario::Scenario;
use setpoint_sim::{simulate, Axis, LessonWorld, Limit};

use crate::plot::{heatmap_of, timeline_of, timeline_of_lab};

/// `setpoint report`: a scenario file or the flags of `setpoint run`, and where to write the page.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The scenario: the flags of `setpoint run`, or a file and the flags that override it,
    /// with every controller and delay model.
    #[command(flatten)]
    pub world: crate::scenario_args::ScenarioArgs,
    /// Where to write the page: FILE.html, or - for standard output.
    #[arg(short = 'o', long, value_name = "FILE.html|-", value_parser = crate::destination::page)]
    pub output: crate::destination::Output,
}

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

const STYLE: &str =
    "body{font-family:sans-serif;max-width:1120px;margin:2em auto;color:#222;line-height:1.45}\
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ddd}\
pre{background:#f6f6f6;padding:.8em;overflow-x:auto;font-size:13px}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .7em;text-align:right}\
th{background:#f0f0f0}.note{color:#555;font-size:.92em}svg{max-width:100%;height:auto}";

/// Writes the report and returns the line to print.
pub fn run(args: &ReportArgs, matches: Option<&clap::ArgMatches>) -> anyhow::Result<String> {
    let matches = matches.context("the report subcommand's matches")?;
    let (label, scenario) = args.world.build(matches)?;
    let page = match scenario.as_lesson() {
        // The lesson's world from flags: the page with its prediction and its heatmap.
        Some(lesson) if args.world.scenario.is_none() => page(&lesson)?,
        _ => lab_page(&scenario, &label, scenario.spec().seed)?,
    };
    args.output.write_page(&page)
}

/// The whole page for `scenario`.
pub fn page(scenario: &LessonWorld) -> anyhow::Result<String> {
    let s = scenario.spec();
    let m = simulate(scenario);
    let p = predict(s);
    let lesson = lesson_prediction(s.desired, s.delay, s.startup, s.period);
    let timeline = timeline_of(scenario)?;
    // Around this run, with a step that keeps each axis short whatever G and U are
    // (docs/limits.md): G = 92403435 draws 91 delays, not 184 million.
    let g_max = (s.delay.saturating_mul(2)).clamp(90, Limit::DELAY.max);
    let u_max = (s.period.saturating_mul(3)).clamp(60, Limit::PERIOD.max);
    let heat_delays = Axis::parse(
        Limit::DELAY,
        &format!("0..={g_max}:{}", limits::report_axis_step(g_max)),
    )?;
    let heat_periods = Axis::parse(
        Limit::PERIOD,
        &format!("1..={u_max}:{}", limits::report_axis_step(u_max)),
    )?;
    let heatmap = heatmap_of(s, &heat_delays, &heat_periods)?;
    let deaths = if s.deaths.is_empty() {
        "none".to_owned()
    } else {
        s.deaths
            .iter()
            .map(|d| format!("{} at second {}", d.count, d.at))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let stable = m
        .stable
        .map_or_else(|| "never".to_owned(), |t| format!("{t} s"));
    let mut h = String::new();
    let _ = writeln!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>setpoint report: G={} U={} B={}</title><style>{STYLE}</style></head><body>",
        s.delay, s.period, s.startup
    );
    let _ = writeln!(
        h,
        "<h1>setpoint report</h1>\n<p>Report delay G = {} s, loop period U = {} s, startup B = {} s, \
desired {} copies, controller <b>{}</b>, deaths: {}, {} s run.</p>",
        s.delay, s.period, s.startup, s.desired, s.controller, esc(&deaths), s.duration
    );
    h.push_str("<h2>This run</h2>\n<table><tr>");
    for k in [
        "rounds",
        "work/round",
        "created",
        "unneeded",
        "delete commands",
        "deleted",
        "overshoot",
        "stable",
        "peak live",
        "copy-seconds above desired",
    ] {
        let _ = write!(h, "<th>{k}</th>");
    }
    let _ = writeln!(
        h,
        "</tr><tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr></table>",
        m.rounds, setpoint_sim::format::js_to_fixed2(m.work_per_round), m.created, m.unneeded, m.delete_commands, m.deleted,
        m.overshoot, stable, m.peak_live, m.copy_seconds_above
    );
    let _ = writeln!(
        h,
        "<p>Blind rounds K = max(1, &lceil;(G+B)/U&rceil;) = {}. The lesson's relation \
desired &times; (&lceil;(G+B)/U&rceil; &minus; 1) predicts an overshoot of <b>{lesson}</b>; the exact \
predictor (docs/relation.md) predicts <b>{}</b> ({}); the simulation measured <b>{}</b>.</p>",
        p.blind_rounds,
        p.overshoot,
        match p.regime {
            setpoint_sim::predict::Regime::Closed => "closed form",
            setpoint_sim::predict::Regime::Walked => "walked through an unsettled stretch",
            setpoint_sim::predict::Regime::Intent => "intent never overshoots",
            setpoint_sim::predict::Regime::NothingDesired => "nothing desired",
        },
        m.overshoot
    );
    let _ = writeln!(
        h,
        "<h2>Timeline</h2>\n<p class=\"note\">Live copies (blue) against what the ledger shows \
(orange, dashed) and desired (green). Ticks on the time axis are rounds; triangles mark rounds \
that created copies, crosses rounds that sent delete commands.</p>\n{}",
        strip_xml_header(&timeline)
    );
    let _ = writeln!(
        h,
        "<h2>Overshoot over report delay and loop period</h2>\n<p class=\"note\">Every cell is a run \
with this page's other settings. The black line is the lesson's boundary U = G + B; the dashed \
blue line is the measured one; dots mark cells where the lesson's relation mispredicts.</p>\n{}",
        strip_xml_header(&heatmap)
    );
    let _ = writeln!(
        h,
        "<h2>The lesson's tables</h2>\n<p class=\"note\">As the lesson printed them, reproduced byte \
for byte by <code>setpoint lesson</code>.</p>\n<pre>{}</pre>",
        esc(&lesson_all())
    );
    let _ = writeln!(
        h,
        "<p class=\"note\">Made by setpoint {}. The run is deterministic: the same settings give \
the same page.</p>\n</body></html>",
        env!("CARGO_PKG_VERSION")
    );
    Ok(h)
}

/// The page for a lab scenario: its per-workload table, one timeline per workload, the heatmap
/// around its first workload in the lesson's world, and the lesson's tables.
pub fn lab_page(scenario: &Scenario, label: &str, seed: u64) -> anyhow::Result<String> {
    let spec = scenario.spec();
    let outcome = setpoint_sim::run(scenario, seed)?;
    let mut h = String::new();
    let _ = writeln!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>setpoint report: {}</title><style>{STYLE}</style></head><body>",
        esc(label)
    );
    let _ = writeln!(
        h,
        "<h1>setpoint report</h1>\n<p>LessonWorld <code>{}</code>: {}.</p>",
        esc(label),
        esc(&sim_report::describe(scenario))
    );
    let _ = writeln!(
        h,
        "<h2>This run</h2>\n<pre>{}</pre>",
        esc(&sim_report::outcome_table(label, scenario, &outcome))
    );
    let predicted = match scenario.as_lesson() {
        Some(lesson) => {
            let p = predict(lesson.spec());
            format!(
                "This scenario is in the lesson's world, where the exact predictor (docs/relation.md) gives an overshoot of <b>{}</b>.",
                p.overshoot
            )
        }
        None => format!(
            "This scenario runs on the general engine ({}); the exact predictor covers the lesson's world only (fixed delay, deaths only, ledger or intent).",
            outcome.engine
        ),
    };
    let _ = writeln!(h, "<p>{predicted}</p>");
    for w in &spec.workloads {
        let svg = timeline_of_lab(scenario, label, Some(&w.name), seed)?;
        let _ = writeln!(
            h,
            "<h2>Timeline: {}</h2>\n<p class=\"note\">Live copies (blue) against what the ledger shows (orange, dashed) and desired (green); red lines are the scenario's events.</p>\n{}",
            esc(&w.name),
            strip_xml_header(&svg)
        );
    }
    let first = &spec.workloads[0];
    let base = setpoint_sim::LessonSpec {
        desired: first.desired,
        startup: first.startup,
        duration: spec.duration,
        controller: setpoint_core::ControllerKind::Ledger,
        ..setpoint_sim::LessonSpec::default()
    };
    let heat = heatmap_of(
        &base,
        &Axis::parse(Limit::DELAY, "0..=90")?,
        &Axis::parse(Limit::PERIOD, "1..=60")?,
    )?;
    let _ = writeln!(
        h,
        "<h2>Overshoot over report delay and loop period</h2>\n<p class=\"note\">The lesson's world around workload {} (desired {}, B = {} s, ledger controller, 2 deaths at second 300): the black line is the lesson's boundary U = G + B, the dashed blue line the measured one; dots mark cells where the lesson's relation mispredicts.</p>\n{}",
        esc(&first.name),
        first.desired,
        first.startup,
        strip_xml_header(&heat)
    );
    let _ = writeln!(
        h,
        "<h2>The lesson's tables</h2>\n<pre>{}</pre>\n<p class=\"note\">Made by setpoint {}{}. The same file and seed give the same page.</p>\n</body></html>",
        esc(&lesson_all()),
        env!("CARGO_PKG_VERSION"),
        outcome.seed.map_or_else(String::new, |s| format!(", seed {s}"))
    );
    Ok(h)
}

/// Plotters' SVG has no XML declaration today; drop one if a later version adds it, since it may
/// not appear inside HTML.
fn strip_xml_header(svg: &str) -> &str {
    match svg.strip_prefix("<?xml") {
        Some(rest) => rest
            .split_once("?>")
            .map_or(svg, |(_, body)| body.trim_start()),
        None => svg,
    }
}
