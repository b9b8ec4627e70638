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
