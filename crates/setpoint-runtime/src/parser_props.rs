//! The runtime's parsers fed arbitrary text: the workloads file `apply` reads and durations.
//! Each answers with a value or its typed error, never a panic. `fuzz/` runs the same parsers
//! under libFuzzer (scripts/fuzz.sh).

use proptest::prelude::*;

use crate::duration::{format_duration, parse_duration, DurationError};
use crate::spec::{parse_workloads, SpecError};

/// Text shaped like a workloads file, so validation is reached, not only TOML syntax errors.
fn workloads_text() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "name",
        "desired",
        "command",
        "args",
        "startup",
        "period",
        "controller",
        "env",
        "report_delay",
        "ttl",
        "burst",
    ]);
    let value = prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        "[a-z0-9 ./_-]{0,12}".prop_map(|s| format!("{s:?}")),
        Just("[\"sleep\", \"1\"]".to_owned()),
        Just("[]".to_owned()),
        Just("{ A = \"b\" }".to_owned()),
        Just("\"\\u0000\"".to_owned()),
    ];
    prop::collection::vec(prop::collection::vec((key, value), 0..6), 0..4).prop_map(|blocks| {
        let mut text = String::new();
        for pairs in blocks {
            text.push_str("[[workload]]\n");
            for (k, v) in pairs {
                text.push_str(&format!("{k} = {v}\n"));
            }
        }
        text
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn workloads_files_of_any_bytes_parse_or_refuse(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        let _: Result<_, SpecError> = parse_workloads(&text);
    }

    #[test]
    fn workloads_shaped_files_parse_or_refuse(text in workloads_text()) {
        match parse_workloads(&text) {
            Ok(specs) => prop_assert!(!specs.is_empty()),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn durations_parse_or_refuse_and_print_back(text in "[0-9]{0,25}(ms|s|m|h|d|us)?|\\PC{0,12}") {
        let parsed: Result<_, DurationError> = parse_duration(&text);
        if let Ok(d) = parsed {
            prop_assert_eq!(parse_duration(&format_duration(d)).ok(), Some(d));
        }
    }
}
