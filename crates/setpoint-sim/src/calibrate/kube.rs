//! Kubernetes lists, as `kubectl get pods -o json` and `kubectl get events -o json` print them.
//!
//! **Pod lists** give the startup time: `metadata.creationTimestamp` to the `lastTransitionTime`
//! of the `Ready` condition, for every pod whose `Ready` is `True`. A pod that is not `Ready`
//! yet is left out (it has no startup time yet), and so is a pod with a container restart
//! (`restartCount > 0`), whose `Ready` time is that of its last restart, not its start. Beside
//! the startup time the list gives its stages, each from the pods that carry both conditions:
//! `scheduling` (creation to `PodScheduled`), `initialization` (`PodScheduled` to
//! `Initialized`), `containers` (`Initialized` to `ContainersReady`) and `readiness`
//! (`ContainersReady` to `Ready`). The timestamps have whole seconds, so every delay is too.
//!
//! **Event lists** give the startup time as the events see it: for each pod
//! (`involvedObject.kind` `Pod`, by namespace and name), from its `Scheduled` event to its last
//! container's first `Started` event (the latest `Started` event). That leaves out the time
//! before scheduling and readiness probes, so it is shorter than a pod list's startup time. An
//! event's time is its `eventTime`, else its `firstTimestamp`, else `metadata.creationTimestamp`.
//! Pods without both events are left out (the apiserver keeps events an hour by default).
//!
//! A list has no report delay: its timestamps are those the apiserver recorded, so the
//! kubelet's report delay is inside them. `--as` accepts `startup` only.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{CalibrateError, DelayKind, Fit, Request, Source};

/// Milliseconds since the Unix epoch of an RFC 3339 time (`2024-05-01T12:00:03Z`,
/// `…T12:00:03.250+02:00`); `None` if it is not one.
pub fn parse_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut ms = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let frac = format!("{:0<3}", &s[start..i.min(start + 3)]);
        ms = frac.parse().ok()?;
    }
    let offset_min = match s.get(i..)? {
        "Z" | "z" => 0,
        tz if tz.len() == 6
            && matches!(tz.as_bytes()[0], b'+' | b'-')
            && tz.as_bytes()[3] == b':' =>
        {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            let sign = if tz.starts_with('-') { -1 } else { 1 };
            sign * (oh * 60 + om)
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + h * 3600 + mi * 60 + sec - offset_min * 60) * 1000) + ms)
}

fn kind_of(item: &Value) -> Option<&'static str> {
    match item.get("kind").and_then(Value::as_str) {
        Some("Pod") => Some("Pod"),
        Some("Event") => Some("Event"),
        Some(_) => None,
        None if item.get("involvedObject").is_some() => Some("Event"),
        None if item.get("status").is_some() => Some("Pod"),
        None => None,
    }
}

/// Reads a pod or event list and fits what it holds.
pub fn calibrate(file: &str, text: &str, req: &Request) -> Result<Vec<Fit>, CalibrateError> {
    let root: Value = serde_json::from_str(text).map_err(|e| {
        CalibrateError::bad(
            file,
            format!("line {}", e.line()),
            format!("not JSON ({e}): accepted the output of kubectl get pods|events -o json"),
        )
    })?;
    let items: Vec<&Value> = match root.get("items").and_then(Value::as_array) {
        Some(items) => items.iter().collect(),
        None if kind_of(&root).is_some() && root.get("kind").is_some() => vec![&root],
        None => {
            return Err(CalibrateError::bad(
                file,
                "items",
                "no items array: accepted a list from kubectl get pods -o json or kubectl get events -o json",
            ))
        }
    };
    if let Some(kind) = req.kind.filter(|&k| k != DelayKind::Startup) {
        return Err(CalibrateError::unusable(
            file,
            format!("a Kubernetes list holds no {kind} delay (its times are the apiserver's, so the kubelet's report delay is inside them); accepted --as startup"),
        ));
    }
    let kinds: Vec<Option<&str>> = items.iter().map(|i| kind_of(i)).collect();
    if items.is_empty() {
        return Err(CalibrateError::unusable(
            file,
            "the list has no items: accepted a list with at least one pod or event",
        ));
    }
    if let Some(i) = kinds.iter().position(|k| k.is_none()) {
        return Err(CalibrateError::bad(
            file,
            format!("items[{i}].kind"),
            "neither a Pod nor an Event: accepted a list of pods or a list of events",
        ));
    }
    if kinds.iter().all(|k| *k == Some("Pod")) {
        pods(file, &items)
    } else if kinds.iter().all(|k| *k == Some("Event")) {
        events(file, &items).map(|f| vec![f])
    } else {
        Err(CalibrateError::unusable(file, "the list mixes pods and events: accepted a list of pods or a list of events, one per file"))
    }
}

fn time_at(file: &str, v: &Value, field: &str) -> Result<i64, CalibrateError> {
    let s = v.as_str().ok_or_else(|| {
        CalibrateError::bad(
            file,
            field,
            "missing: accepted an RFC 3339 time such as 2024-05-01T12:00:03Z",
        )
    })?;
    parse_time(s).ok_or_else(|| {
        CalibrateError::bad(
            file,
            field,
            format!("'{s}' is not an RFC 3339 time: accepted such as 2024-05-01T12:00:03Z"),
        )
    })
}

fn delay_of(file: &str, from: i64, to: i64, field: &str) -> Result<u64, CalibrateError> {
    u64::try_from(to - from).map_err(|_| {
        CalibrateError::bad(
            file,
            field,
            format!(
                "lies {} ms before the time it is measured from: accepted times in order",
                from - to
            ),
        )
    })
}

const STAGES: [(DelayKind, &str, &str); 5] = [
    (DelayKind::Startup, "", "Ready"),
    (DelayKind::Scheduling, "", "PodScheduled"),
    (DelayKind::Initialization, "PodScheduled", "Initialized"),
    (DelayKind::Containers, "Initialized", "ContainersReady"),
    (DelayKind::Readiness, "ContainersReady", "Ready"),
];

fn pods(file: &str, items: &[&Value]) -> Result<Vec<Fit>, CalibrateError> {
    let mut samples: BTreeMap<DelayKind, Vec<u64>> = BTreeMap::new();
    let (mut not_ready, mut restarted) = (0, 0);
    for (i, pod) in items.iter().enumerate() {
        let conditions = pod.pointer("/status/conditions").and_then(Value::as_array);
        let cond = |t: &str| {
            conditions.and_then(|cs| {
                cs.iter()
                    .enumerate()
                    .find(|(_, c)| c.get("type").and_then(Value::as_str) == Some(t))
            })
        };
        let ready =
            cond("Ready").filter(|(_, c)| c.get("status").and_then(Value::as_str) == Some("True"));
        if ready.is_none() {
            not_ready += 1;
            continue;
        }
        let restarts: u64 = pod
            .pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .map_or(0, |cs| {
                cs.iter()
                    .filter_map(|c| c.get("restartCount")?.as_u64())
                    .sum()
            });
        if restarts > 0 {
            restarted += 1;
            continue;
        }
        let created_field = format!("items[{i}].metadata.creationTimestamp");
        let created = time_at(
            file,
            pod.pointer("/metadata/creationTimestamp")
                .unwrap_or(&Value::Null),
            &created_field,
        )?;
        let at = |t: &str| -> Result<Option<(i64, String)>, CalibrateError> {
            if t.is_empty() {
                return Ok(Some((created, created_field.clone())));
            }
            match cond(t) {
                None => Ok(None),
                Some((j, c)) => {
                    let field =
                        format!("items[{i}].status.conditions[{j}].lastTransitionTime ({t})");
                    Ok(Some((
                        time_at(
                            file,
                            c.get("lastTransitionTime").unwrap_or(&Value::Null),
                            &field,
                        )?,
                        field,
                    )))
                }
            }
        };
        for (kind, from, to) in STAGES {
            if let (Some((a, _)), Some((b, field))) = (at(from)?, at(to)?) {
                let d = delay_of(file, a, b, &field);
                match (kind, d) {
                    (_, Ok(d)) => samples.entry(kind).or_default().push(d),
                    (DelayKind::Startup, Err(e)) => return Err(e),
                    // A stage whose ends are out of order (a condition set again later) is left
                    // out; the startup time is what the lab needs.
                    (_, Err(_)) => {}
                }
            }
        }
    }
    if !samples.contains_key(&DelayKind::Startup) {
        return Err(CalibrateError::unusable(
            file,
            format!("no pod gives a startup time ({} pods, {not_ready} not Ready, {restarted} restarted): accepted pods whose Ready condition is True, with no container restart", items.len()),
        ));
    }
    let mut notes = Vec::new();
    if not_ready + restarted > 0 {
        notes.push(format!(
            "{not_ready} pods not Ready and {restarted} with container restarts are left out"
        ));
    }
    samples
        .into_iter()
        .map(|(kind, xs)| {
            // The pods left out are said once, on the startup time.
            let notes = if kind == DelayKind::Startup {
                notes.clone()
            } else {
                Vec::new()
            };
            Fit::from_samples(file, Source::PodList, kind, xs, notes)
        })
        .collect()
}

fn events(file: &str, items: &[&Value]) -> Result<Fit, CalibrateError> {
    // Per pod: the Scheduled time and the latest Started time.
    let mut pods: BTreeMap<(String, String), (Option<i64>, Option<i64>)> = BTreeMap::new();
    for (i, e) in items.iter().enumerate() {
        if e.pointer("/involvedObject/kind").and_then(Value::as_str) != Some("Pod") {
            continue;
        }
        let reason = e.get("reason").and_then(Value::as_str).unwrap_or("");
        if reason != "Scheduled" && reason != "Started" {
            continue;
        }
        let name = |k: &str| {
            e.pointer(&format!("/involvedObject/{k}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let (field, v) = [
            ("eventTime", e.get("eventTime")),
            ("firstTimestamp", e.get("firstTimestamp")),
            (
                "metadata.creationTimestamp",
                e.pointer("/metadata/creationTimestamp"),
            ),
        ]
        .into_iter()
        .find(|(_, v)| v.is_some_and(|v| !v.is_null()))
        .map(|(f, v)| (format!("items[{i}].{f}"), v.cloned()))
        .unwrap_or_else(|| (format!("items[{i}].firstTimestamp"), None));
        let t = time_at(file, v.as_ref().unwrap_or(&Value::Null), &field)?;
        let entry = pods.entry((name("namespace"), name("name"))).or_default();
        if reason == "Scheduled" {
            entry.0 = Some(entry.0.map_or(t, |s: i64| s.min(t)));
        } else {
            entry.1 = Some(entry.1.map_or(t, |s: i64| s.max(t)));
        }
    }
    let mut xs = Vec::new();
    for ((ns, name), times) in &pods {
        if let (Some(s), Some(t)) = *times {
            xs.push(delay_of(
                file,
                s,
                t,
                &format!("the Started event of pod {ns}/{name}"),
            )?);
        }
    }
    if xs.is_empty() {
        return Err(CalibrateError::unusable(
            file,
            format!("no pod has both a Scheduled and a Started event ({} pods with either): accepted kubectl get events -o json covering pods' scheduling and start", pods.len()),
        ));
    }
    let left = pods.len() - xs.len();
    let mut notes = vec!["startup from the Scheduled event to the last container's Started event: shorter than creation to Ready".to_owned()];
    if left > 0 {
        notes.push(format!("{left} pods without both events are left out"));
    }
    Fit::from_samples(file, Source::EventList, DelayKind::Startup, xs, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, created: &str, conds: &[(&str, &str)], restarts: u64) -> String {
        let cs: Vec<String> = conds
            .iter()
            .map(|(t, at)| {
                format!("{{\"type\":\"{t}\",\"status\":\"True\",\"lastTransitionTime\":\"{at}\"}}")
            })
            .collect();
        format!(
            "{{\"kind\":\"Pod\",\"metadata\":{{\"name\":\"{name}\",\"creationTimestamp\":\"{created}\"}},\"status\":{{\"conditions\":[{}],\"containerStatuses\":[{{\"restartCount\":{restarts}}}]}}}}",
            cs.join(",")
        )
    }

    fn list(items: &[String]) -> String {
        format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":[{}]}}",
            items.join(",")
        )
    }

    fn err(text: &str, kind: Option<DelayKind>) -> String {
        calibrate("p.json", text, &Request { metric: None, kind })
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn rfc3339_times_read_as_milliseconds_since_the_epoch() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_time("2024-05-01T12:00:03Z"), Some(1_714_564_803_000));
        assert_eq!(
            parse_time("2024-05-01T12:00:03.25Z"),
            Some(1_714_564_803_250)
        );
        assert_eq!(
            parse_time("2024-05-01T14:00:03.123456+02:00"),
            Some(1_714_564_803_123)
        );
        for bad in [
            "2024-05-01",
            "2024-13-01T00:00:00Z",
            "2024-05-01T12:00:03",
            "yesterday at noon!!",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_pod_list_gives_creation_to_ready_and_its_stages() {
        let t = |s: u32| format!("2024-05-01T12:00:{s:02}Z");
        let items = [
            pod(
                "a",
                &t(0),
                &[
                    ("PodScheduled", &t(1)),
                    ("Initialized", &t(2)),
                    ("ContainersReady", &t(5)),
                    ("Ready", &t(5)),
                ],
                0,
            ),
            pod("b", &t(0), &[("PodScheduled", &t(0)), ("Ready", &t(9))], 0),
            pod("restarted", &t(0), &[("Ready", &t(50))], 2),
            pod("pending", &t(0), &[("PodScheduled", &t(1))], 0),
        ];
        let fits = calibrate("p.json", &list(&items), &Request::default()).unwrap();
        let startup = fits.iter().find(|f| f.delay == DelayKind::Startup).unwrap();
        assert_eq!(startup.count, 2);
        assert_eq!((startup.cdf.min_ms(), startup.cdf.max_ms()), (5000, 9000));
        assert!(startup.notes[0].contains("1 pods not Ready and 1 with container restarts"));
        let sched = fits
            .iter()
            .find(|f| f.delay == DelayKind::Scheduling)
            .unwrap();
        assert_eq!((sched.count, sched.cdf.max_ms()), (2, 1000));
        let init = fits
            .iter()
            .find(|f| f.delay == DelayKind::Initialization)
            .unwrap();
        assert_eq!((init.count, init.cdf.max_ms()), (1, 1000));
    }

    #[test]
    fn a_pod_list_without_the_timestamps_needed_names_the_field() {
        let no_created = list(&["{\"kind\":\"Pod\",\"metadata\":{},\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"lastTransitionTime\":\"2024-05-01T12:00:05Z\"}]}}".into()]);
        let e = err(&no_created, None);
        assert!(
            e.contains("items[0].metadata.creationTimestamp: missing: accepted an RFC 3339 time"),
            "{e}"
        );
        let no_ready_time = list(&["{\"kind\":\"Pod\",\"metadata\":{\"creationTimestamp\":\"2024-05-01T12:00:00Z\"},\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}".into()]);
        let e = err(&no_ready_time, None);
        assert!(
            e.contains("items[0].status.conditions[0].lastTransitionTime (Ready): missing"),
            "{e}"
        );
        let bad_time = list(&[pod("a", "noon", &[("Ready", "2024-05-01T12:00:05Z")], 0)]);
        assert!(err(&bad_time, None).contains("'noon' is not an RFC 3339 time"));
        let backwards = list(&[pod(
            "a",
            "2024-05-01T12:00:09Z",
            &[("Ready", "2024-05-01T12:00:05Z")],
            0,
        )]);
        assert!(err(&backwards, None).contains("lies 4000 ms before"));
        let none_ready = list(&[pod(
            "a",
            "2024-05-01T12:00:00Z",
            &[("PodScheduled", "2024-05-01T12:00:05Z")],
            0,
        )]);
        assert!(err(&none_ready, None)
            .contains("no pod gives a startup time (1 pods, 1 not Ready, 0 restarted)"));
    }

    #[test]
    fn one_pod_as_kubectl_get_pod_name_prints_it_is_a_list_of_one() {
        let one = pod(
            "a",
            "2024-05-01T12:00:00Z",
            &[("Ready", "2024-05-01T12:00:07Z")],
            0,
        );
        let fits = calibrate("p.json", &one, &Request::default()).unwrap();
        assert_eq!((fits[0].count, fits[0].cdf.max_ms()), (1, 7000));
        assert!(fits[0].few_samples());
    }

    #[test]
    fn lists_that_are_not_pods_or_events_are_refused() {
        assert!(err("{\"kind\":\"List\",\"items\":[]}", None).contains("no items"));
        assert!(err("{\"kind\":\"List\"}", None).contains("items: no items array"));
        assert!(err("{\"items\":[{\"kind\":\"Node\"}]}", None)
            .contains("items[0].kind: neither a Pod nor an Event"));
        assert!(err("{\"items\": [", None).contains("p.json: line 1: not JSON"));
        let p = list(&[pod(
            "a",
            "2024-05-01T12:00:00Z",
            &[("Ready", "2024-05-01T12:00:05Z")],
            0,
        )]);
        assert!(err(&p, Some(DelayKind::ReportDelay)).contains("holds no report-delay delay"));
        let mixed = format!(
            "{{\"items\":[{},{{\"kind\":\"Event\"}}]}}",
            pod("a", "2024-05-01T12:00:00Z", &[], 0)
        );
        assert!(err(&mixed, None).contains("mixes pods and events"));
    }

    fn event(pod: &str, reason: &str, field: &str, at: &str) -> String {
        format!("{{\"kind\":\"Event\",\"reason\":\"{reason}\",\"involvedObject\":{{\"kind\":\"Pod\",\"namespace\":\"d\",\"name\":\"{pod}\"}},\"{field}\":\"{at}\"}}")
    }

    #[test]
    fn an_event_list_gives_scheduled_to_the_last_started() {
        let items = [
            event("a", "Scheduled", "eventTime", "2024-05-01T12:00:00.500000Z"),
            event("a", "Pulled", "firstTimestamp", "2024-05-01T12:00:01Z"),
            event("a", "Started", "firstTimestamp", "2024-05-01T12:00:03Z"),
            event("a", "Started", "firstTimestamp", "2024-05-01T12:00:04Z"),
            event("b", "Scheduled", "eventTime", "2024-05-01T12:00:00.000000Z"),
            event("b", "Started", "firstTimestamp", "2024-05-01T12:00:02Z"),
            event("c", "Started", "firstTimestamp", "2024-05-01T12:00:02Z"),
        ];
        let fits = calibrate("e.json", &list(&items), &Request::default()).unwrap();
        assert_eq!(fits.len(), 1);
        let f = &fits[0];
        assert_eq!(
            (f.source, f.delay, f.count),
            (Source::EventList, DelayKind::Startup, 2)
        );
        assert_eq!((f.cdf.min_ms(), f.cdf.max_ms()), (2000, 3500));
        assert!(f
            .notes
            .iter()
            .any(|n| n.contains("1 pods without both events")));
        let only_started = list(&[event(
            "c",
            "Started",
            "firstTimestamp",
            "2024-05-01T12:00:02Z",
        )]);
        let e = calibrate("e.json", &only_started, &Request::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no pod has both a Scheduled and a Started event"),
            "{e}"
        );
        let backwards = list(&[
            event("a", "Scheduled", "eventTime", "2024-05-01T12:00:05.000000Z"),
            event("a", "Started", "firstTimestamp", "2024-05-01T12:00:02Z"),
        ]);
        let e = calibrate("e.json", &backwards, &Request::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the Started event of pod d/a: lies 3000 ms before"),
            "{e}"
        );
        let untimed = list(&["{\"kind\":\"Event\",\"reason\":\"Started\",\"involvedObject\":{\"kind\":\"Pod\",\"name\":\"x\"}}".into()]);
        let e = calibrate("e.json", &untimed, &Request::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("items[0].firstTimestamp: missing"), "{e}");
    }
}
