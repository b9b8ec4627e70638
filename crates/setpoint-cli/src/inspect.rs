//! The commands that look into a running cluster: `get copies`, `describe`, `events`, and
//! `--watch` on `get` and `status`. They only read the store (`docs/runtime.md`, "Seeing into
//! a cluster").

use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::Value as Json;

use crate::output::Format;
use crate::runtime::{BadInput, StoreArgs};
use crate::runtime_table::{bounded, plural, state_cell};
use setpoint_runtime::copies::CopyRow;
use setpoint_runtime::events::EventRow;
use setpoint_runtime::ops::{self, OpError};
use setpoint_runtime::{format_duration, parse_duration, Store};

/// The widest a LAST EXIT or DETAIL cell gets, in characters.
const EXIT_WIDTH: usize = 60;
/// The widest a name cell gets.
const NAME_WIDTH: usize = 40;
/// How many of a workload's events `describe` shows, the latest.
const DESCRIBE_EVENTS: usize = 20;

/// `--watch` and its period, for `get` and `status`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Keep reading the store and print the output again each time it changes (ages and
    /// clocks aside), until Ctrl-C.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// How often --watch reads the store.
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = watch_every, requires = "watch")]
    pub watch_every: Duration,
    /// Tests: stop --watch after this many printed outputs.
    #[arg(long, hide = true, value_name = "N", requires = "watch")]
    pub watch_max: Option<u64>,
}

fn watch_every(s: &str) -> Result<Duration, String> {
    match parse_duration(s).map_err(|e| e.to_string())? {
        d if d < Duration::from_millis(50) => Err("too short: accepted at least 50ms".into()),
        d => Ok(d),
    }
}

/// The keys whose values move with the clock alone: `--watch` leaves them out when it compares
/// two reads, so that it prints on a change of state, not on every tick.
const CLOCK_KEYS: &[&str] = &[
    "age_ms",
    "for_ms",
    "held_ms",
    "next_try_in_ms",
    "since_report_ms",
    "report_lag_ms",
    "revision",
];

fn without_clocks(v: &mut Json) {
    match v {
        Json::Object(m) => {
            m.retain(|k, _| !CLOCK_KEYS.contains(&k.as_str()));
            m.values_mut().for_each(without_clocks);
        }
        Json::Array(a) => a.iter_mut().for_each(without_clocks),
        _ => {}
    }
}

/// Runs `view` once, or with `--watch` every period, printing its text each time the data
/// (without its clocks) differs from the last print. A view that fails ends the watch with
/// its error. Returns what is left to print.
pub fn watch(
    w: &WatchArgs,
    mut view: impl FnMut() -> anyhow::Result<(Json, String)>,
) -> anyhow::Result<String> {
    if !w.watch {
        return Ok(view()?.1);
    }
    let clear = std::io::stdout().is_terminal();
    let mut last: Option<Json> = None;
    let mut printed = 0u64;
    loop {
        let started = Instant::now();
        let (mut data, text) = view()?;
        without_clocks(&mut data);
        if last.as_ref() != Some(&data) {
            let mut out = std::io::stdout().lock();
            if clear {
                // Redraw in place, as `watch` does; a pipe gets each output after the last.
                write!(out, "\x1b[H\x1b[2J")?;
            }
            out.write_all(text.as_bytes()).and_then(|()| out.flush())?;
            last = Some(data);
            printed += 1;
            if w.watch_max.is_some_and(|m| printed >= m) {
                return Ok(String::new());
            }
        }
        std::thread::sleep(w.watch_every.saturating_sub(started.elapsed()));
    }
}

/// `setpoint describe`.
#[derive(Debug, Args)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The workload.
    #[arg(value_name = "WORKLOAD")]
    pub workload: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

/// `setpoint events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this workload's events.
    #[arg(value_name = "WORKLOAD")]
    pub workload: Option<String>,
    /// Only events at most this old (`30s`, `5m`).
    #[arg(long, value_name = "DURATION", value_parser = since)]
    pub since: Option<Duration>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

fn since(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// `get copies [WORKLOAD]`: its data for `--watch` and its text in `format`.
pub fn copies_view(
    store: &dyn Store,
    workload: Option<&str>,
    format: Format,
) -> anyhow::Result<(Json, String)> {
    let rows = setpoint_runtime::copies::copies(store, workload)?;
    let data = serde_json::to_value(&rows)?;
    let text = match format {
        Format::Json => crate::output::json_with_schema(&serde_json::json!({ "copies": rows }))?,
        Format::Table => copies_table(&rows),
        Format::Csv => crate::records::csv(&copy_records(&rows), COPY_KEYS),
    };
    Ok((data, text))
}

/// The keys of a `get copies` row.
pub const COPY_KEYS: &[&str] = &[
    "schema",
    "workload",
    "copy",
    "n",
    "node",
    "pid",
    "state",
    "age_ms",
    "restarts",
    "last_exit",
    "assigned",
];

fn copy_records(rows: &[CopyRow]) -> Vec<setpoint_sim::output::Record> {
    rows.iter()
        .map(|c| {
            let mut r = setpoint_sim::output::Record::new();
            r.push("workload", c.workload.as_str());
            r.push("copy", c.copy.as_str());
            r.push("n", c.n);
            r.push("node", c.node.clone());
            r.push("pid", c.pid.map(u64::from));
            r.push("state", c.state.word());
            r.push("age_ms", c.age_ms);
            r.push("restarts", c.restarts);
            r.push("last_exit", c.last_exit.clone());
            r.push("assigned", c.assigned);
            r
        })
        .collect()
}

/// An age as kubectl shows one: `45s`, `3m12s`, `2h5m`, `3d4h`.
pub fn age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// The table of `get copies`.
pub fn copies_table(rows: &[CopyRow]) -> String {
    let mut t = format!(
        "{:<24} {:<12} {:>8} {:<13} {:>7} {:>8}  {}\n",
        "COPY", "NODE", "PID", "STATE", "AGE", "RESTARTS", "LAST EXIT"
    );
    for c in rows {
        let _ = writeln!(
            t,
            "{:<24} {:<12} {:>8} {:<13} {:>7} {:>8}  {}",
            bounded(&c.copy, NAME_WIDTH),
            bounded(c.node.as_deref().unwrap_or("-"), NAME_WIDTH),
            dash(c.pid),
            c.state.word(),
            dash(c.age_ms.map(age)),
            c.restarts,
            bounded(c.last_exit.as_deref().unwrap_or("-"), EXIT_WIDTH)
        );
    }
    t
}

/// The table of `events`.
pub fn events_table(rows: &[EventRow]) -> String {
    let mut t = format!(
        "{:>7} {:<24} {:<7} {:<12} {:>8}  {}\n",
        "AGE", "COPY", "EVENT", "NODE", "PID", "DETAIL"
    );
    for e in rows {
        let _ = writeln!(
            t,
            "{:>7} {:<24} {:<7} {:<12} {:>8}  {}",
            age(e.age_ms),
            bounded(&e.copy, NAME_WIDTH),
            e.kind.name(),
            bounded(&e.node, NAME_WIDTH),
            dash(e.pid),
            bounded(e.detail.as_deref().unwrap_or("-"), EXIT_WIDTH)
        );
    }
    t
}

/// The keys of an `events` row.
pub const EVENT_KEYS: &[&str] = &[
    "schema", "at_ms", "age_ms", "workload", "copy", "event", "node", "pid", "detail",
];

fn event_records(rows: &[EventRow]) -> Vec<setpoint_sim::output::Record> {
    rows.iter()
        .map(|e| {
            let mut r = setpoint_sim::output::Record::new();
            r.push("at_ms", e.at_ms);
            r.push("age_ms", e.age_ms);
            r.push("workload", e.workload.as_str());
            r.push("copy", e.copy.as_str());
            r.push("event", e.kind.name());
            r.push("node", e.node.as_str());
            r.push("pid", e.pid.map(u64::from));
            r.push("detail", e.detail.clone());
            r
        })
        .collect()
}

/// `setpoint events`.
pub fn events(a: &EventsArgs, store: &dyn Store) -> anyhow::Result<String> {
    if let Some(w) = &a.workload {
        let declared = store
            .get(&setpoint_runtime::model::workload_key(w))?
            .is_some();
        let logged = setpoint_runtime::events::logged_workloads(store)?.contains(w);
        if !declared && !logged {
            return Err(OpError::NotFound(w.clone()).into());
        }
    }
    let since = a.since.map(|d| d.as_millis() as u64);
    let rows = setpoint_runtime::events::rows(store, a.workload.as_deref(), since)?;
    Ok(match a.format {
        Format::Json => crate::output::json_with_schema(&serde_json::json!({ "events": rows }))?,
        Format::Table => events_table(&rows),
        Format::Csv => crate::records::csv(&event_records(&rows), EVENT_KEYS),
    })
}

/// `setpoint describe`.
pub fn describe(a: &DescribeArgs, store: &dyn Store) -> anyhow::Result<String> {
    let status = ops::get(store, Some(&a.workload))?
        .pop()
        .ok_or_else(|| OpError::NotFound(a.workload.clone()))?;
    let spec = setpoint_runtime::model::rollout::stored_spec(
        &store.read(&[setpoint_runtime::model::WORKLOADS])?,
        &a.workload,
    )
    .ok_or_else(|| OpError::NotFound(a.workload.clone()))?;
    let copies = setpoint_runtime::copies::copies(store, Some(&a.workload))?;
    let mut events = setpoint_runtime::events::rows(store, Some(&a.workload), None)?;
    let skip = events.len().saturating_sub(DESCRIBE_EVENTS);
    events.drain(..skip);
    if a.format == Format::Csv {
        return Err(BadInput(
            "describe has no --format csv (its parts have different columns): accepted table \
             or json; 'get copies --format csv' and 'events --format csv' give its rows"
                .into(),
        )
        .into());
    }
    if a.format == Format::Json {
        return Ok(crate::output::json_with_schema(&serde_json::json!({
            "workload": status,
            "spec": spec,
            "copies": copies,
            "events": events,
        }))?);
    }
    let mut t = String::new();
    writeln!(t, "Name:        {}", status.name)?;
    writeln!(t, "Controller:  {}", status.controller)?;
    writeln!(
        t,
        "Period:      {}",
        format_duration(Duration::from_millis(status.period_ms))
    )?;
    writeln!(t, "Command:     {}", bounded(&spec.command.join(" "), 100))?;
    writeln!(t, "Generation:  {}", status.generation)?;
    writeln!(
        t,
        "Copies:      {} desired, {} live, {} on the ledger, {} creating, {} deleting",
        status.desired,
        dash(status.live),
        status.on_ledger,
        status.pending_create,
        status.pending_delete
    )?;
    match &status.rollout {
        Some(r) => writeln!(
            t,
            "Rollout:     generation {}: {}/{} updated, {} old{}, for {}",
            r.generation,
            r.updated,
            r.desired,
            r.old,
            if r.stalled { ", STALLED" } else { "" },
            age(r.for_ms)
        )?,
        None => writeln!(t, "Rollout:     none")?,
    }
    match &status.idle {
        Some(i) => writeln!(t, "Idle:        {} for {}", i.text, age(i.for_ms))?,
        None => writeln!(t, "Idle:        no")?,
    }
    if status.backoff.is_empty() {
        writeln!(t, "Backoff:     none")?;
    }
    for b in &status.backoff {
        writeln!(
            t,
            "Backoff:     {}: {}, {} in a row, {}, last {} ({}){}",
            b.key,
            if b.backing_off {
                "backing off"
            } else {
                "not holding back"
            },
            plural(u64::from(b.failures), "failure", "failures"),
            plural(b.restarts, "restart", "restarts"),
            b.last_copy,
            bounded(&b.last_exit, EXIT_WIDTH),
            if b.backing_off {
                format!(", next try in {}", age(b.next_try_in_ms))
            } else {
                String::new()
            }
        )?;
    }
    writeln!(t, "State:       {}", state_cell(&status))?;
    writeln!(t, "\nCopies:")?;
    t.push_str(&indent(&copies_table(&copies)));
    writeln!(
        t,
        "\nEvents ({}):",
        if skip > 0 {
            format!(
                "the last {DESCRIBE_EVENTS}; 'setpoint events {}' has all",
                a.workload
            )
        } else {
            plural(events.len() as u64, "event", "events")
        }
    )?;
    t.push_str(&indent(&events_table(&events)));
    Ok(t)
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use setpoint_runtime::copies::CopyState;

    fn row(copy: &str, exit: Option<&str>) -> CopyRow {
        CopyRow {
            workload: "w".into(),
            copy: copy.into(),
            n: 0,
            node: Some("node-1".into()),
            pid: Some(4242),
            state: CopyState::CrashLooping,
            age_ms: Some(192_500),
            restarts: 3,
            last_exit: exit.map(str::to_owned),
            assigned: true,
        }
    }

    #[test]
    fn ages_read_as_kubectl_writes_them() {
        let got: Vec<String> = [0, 59_999, 60_000, 192_500, 3_600_000, 7_500_000, 90_000_000]
            .into_iter()
            .map(age)
            .collect();
        assert_eq!(got, ["0s", "59s", "1m0s", "3m12s", "1h0m", "2h5m", "1d1h"]);
    }

    #[test]
    fn the_copies_table_lines_up_and_bounds_a_long_exit_and_name() {
        let long_exit = format!(
            "failed to start: program 'x' not found on {}",
            "/p".repeat(300)
        );
        let long_name = "c".repeat(90);
        let t = copies_table(&[row("w-0", None), row(&long_name, Some(&long_exit))]);
        insta::assert_snapshot!(t.lines().take(2).collect::<Vec<_>>().join("\n"), @r"
        COPY                     NODE              PID STATE             AGE RESTARTS  LAST EXIT
        w-0                      node-1           4242 crash-looping   3m12s        3  -
        ");
        let last = t.lines().nth(2).unwrap();
        assert!(last.chars().count() < 24 + 40 + 60 + 60, "{last}");
        assert!(last.ends_with('…') && last.contains(&format!("{}…", "c".repeat(39))));
    }

    #[test]
    fn watch_compares_without_the_values_that_move_with_the_clock() {
        let mut a = serde_json::json!({"revision": 5, "copies": [{"age_ms": 1, "pid": 7}]});
        let mut b = serde_json::json!({"revision": 9, "copies": [{"age_ms": 2, "pid": 7}]});
        let mut c = serde_json::json!({"revision": 9, "copies": [{"age_ms": 2, "pid": 8}]});
        for v in [&mut a, &mut b, &mut c] {
            without_clocks(v);
        }
        assert_eq!(a, b);
        assert_ne!(b, c);
    }
}
