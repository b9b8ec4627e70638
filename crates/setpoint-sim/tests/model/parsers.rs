//! Every parser of the lab, fed arbitrary text: each answers with a value or its typed error,
//! never a panic. `fuzz/` runs the same parsers under libFuzzer (scripts/fuzz.sh); these keep a
//! cheap version in `cargo test`.

use proptest::prelude::*;
use setpoint_sim::delay::parse_delay_model;
use setpoint_sim::sweep::{parse_controllers, parse_delay_models, Shard};
use setpoint_sim::{parse_deaths, scenario_file, Axis, GridError, Limit, Scenario};

/// Text that looks like a scenario file: known keys and tables with arbitrary values, so the
/// parser's validation is reached, not only TOML's syntax errors.
fn scenario_text() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "period",
        "duration",
        "seed",
        "description",
        "desired",
        "startup",
        "name",
        "kind",
        "at",
        "count",
        "fraction",
        "seconds",
        "model",
        "ttl",
        "burst",
        "workload",
        "min",
        "max",
        "stages",
        "unique_names",
    ]);
    let value = prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:?}")),
        "[a-z:0-9.-]{0,12}".prop_map(|s| format!("{s:?}")),
        Just("true".to_owned()),
        Just("[]".to_owned()),
        Just("[1, 2]".to_owned()),
    ];
    let table = prop::sample::select(vec![
        "",
        "[controller]",
        "[delay]",
        "[[workload]]",
        "[[event]]",
        "[[delay.stages]]",
    ]);
    prop::collection::vec((table, prop::collection::vec((key, value), 0..5)), 0..6).prop_map(
        |blocks| {
            let mut text = String::new();
            for (table, pairs) in blocks {
                text.push_str(table);
                text.push('\n');
                for (k, v) in pairs {
                    text.push_str(&format!("{k} = {v}\n"));
                }
            }
            text
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn scenario_files_of_any_bytes_parse_or_refuse(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(spec) = scenario_file::parse("p.toml", &text) {
            let _ = Scenario::new(spec);
        }
    }

    #[test]
    fn scenario_shaped_files_parse_or_refuse_with_a_located_error(text in scenario_text()) {
        match scenario_file::parse("p.toml", &text) {
            Ok(spec) => {
                let _ = Scenario::new(spec);
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn axes_parse_or_refuse_with_a_grid_error(text in "[0-9.=:,a-z -]{0,24}|\\PC{0,24}") {
        for limit in [Limit::DELAY, Limit::PERIOD, Limit::DESIRED] {
            match Axis::parse(limit, &text) {
                Ok(axis) => prop_assert_eq!(axis.values().take(50).count() as u64, axis.len().min(50)),
                Err(e) => {
                    let e: GridError = e;
                    prop_assert!(!e.to_string().is_empty());
                }
            }
        }
        let _ = parse_controllers(&text);
        let _ = parse_delay_models(&text);
        let _ = Shard::parse(&text);
    }

    #[test]
    fn delay_models_and_deaths_parse_or_refuse(text in "(fixed|uniform|lesson-chain|chain)?[0-9.:,a-z-]{0,24}|\\PC{0,24}") {
        if let Ok(model) = parse_delay_model(&text) {
            prop_assert!(model.mean_ms() <= model.max_ms() as f64 + 1e-9);
        }
        let _ = parse_deaths(&text);
        let _ = Limit::DURATION.parse(&text);
    }
}

/// The shipped measurement samples and model files, which the mutations below start from so
/// that the parsers' deeper checks (bucket order, `+Inf`, timestamps, knots) are reached.
fn calibration_seeds() -> Vec<(&'static str, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/empirical/");
    [
        "report-delay.prom",
        "pods.json",
        "events.json",
        "report-delay.toml",
        "startup.toml",
    ]
    .into_iter()
    .map(|f| (f, std::fs::read_to_string(format!("{dir}{f}")).unwrap()))
    .collect()
}

/// `text` with each edit applied: at a position (a fraction of the length, on a char
/// boundary), delete a run of up to 8 chars, or insert a short string.
fn mutate(text: &str, edits: &[(f64, bool, String)]) -> String {
    let mut t = text.to_owned();
    for (at, delete, s) in edits {
        let mut i = ((t.len() as f64) * at) as usize;
        while i > 0 && !t.is_char_boundary(i) {
            i -= 1;
        }
        if *delete {
            let mut j = (i + s.len().max(1)).min(t.len());
            while j < t.len() && !t.is_char_boundary(j) {
                j += 1;
            }
            t.replace_range(i..j, "");
        } else {
            t.insert_str(i, s);
        }
    }
    t
}

/// A fit that parsed: its CDF is a CDF and its figures are in range.
fn check_fit(f: &setpoint_sim::calibrate::Fit) -> Result<(), TestCaseError> {
    let knots = f.cdf.knots();
    prop_assert!(!knots.is_empty());
    prop_assert!(f.cdf.min_ms() <= f.cdf.max_ms());
    let q = f.cdf.quantile(0.5);
    prop_assert!(q >= f.cdf.min_ms() as f64 - 1e-6 && q <= f.cdf.max_ms() as f64 + 1e-6);
    prop_assert!((0.0..=1.0).contains(&f.ks), "ks {}", f.ks);
    prop_assert!(f.count > 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Issue 20: calibrate's three sources and the delay-model file, from any bytes and from
    /// edited copies of the shipped samples: a fit that is a CDF, or one error line that names
    /// the file.
    #[test]
    fn calibration_sources_and_model_files_fit_or_refuse_in_one_line(
        seed in 0usize..5,
        edits in prop::collection::vec(
            (0.0f64..1.0, any::<bool>(), prop_oneof![
                Just("".to_owned()), Just("\n".to_owned()), Just("-".to_owned()),
                Just("+Inf".to_owned()), Just("1e309".to_owned()), Just("null".to_owned()),
                Just("}".to_owned()), Just("\"".to_owned()), Just("18446744073709551616".to_owned()),
                "[0-9a-zA-Z.:,\"{}\\[\\]=_ -]{1,8}",
            ]),
            0..6,
        ),
        raw in prop::collection::vec(any::<u8>(), 0..200),
        metric in prop::option::of(prop::sample::select(vec![
            "setpoint_report_delay_seconds", "nosuch", "",
        ])),
        kind in prop::option::of(prop::sample::select(
            setpoint_sim::calibrate::DelayKind::ALL.to_vec(),
        )),
    ) {
        use setpoint_sim::calibrate::{calibrate_text, model_file, Request};
        let seeds = calibration_seeds();
        let (name, base) = &seeds[seed];
        let req = Request { metric: metric.map(str::to_owned), kind };
        for text in [mutate(base, &edits), String::from_utf8_lossy(&raw).into_owned()] {
            match calibrate_text(name, &text, &req) {
                Ok(fits) => for f in &fits { check_fit(f)?; },
                Err(e) => {
                    let e = e.to_string();
                    prop_assert!(e.starts_with(name) && !e.contains('\n'), "{e}");
                }
            }
            match model_file::parse(name, &text) {
                Ok(fits) => for f in &fits { check_fit(f)?; },
                Err(e) => {
                    let e = e.to_string();
                    prop_assert!(!e.is_empty() && !e.contains('\n'), "{e}");
                }
            }
            let _ = text.trim().parse::<setpoint_sim::pipeline::Pipeline>();
        }
    }
}

#[test]
fn the_mutation_seeds_themselves_fit() {
    use setpoint_sim::calibrate::{calibrate_text, model_file, Request};
    for (name, text) in calibration_seeds() {
        let fits = if name.ends_with(".toml") {
            model_file::parse(name, &text).unwrap()
        } else {
            calibrate_text(name, &text, &Request::default()).unwrap()
        };
        assert!(!fits.is_empty(), "{name}");
    }
}
