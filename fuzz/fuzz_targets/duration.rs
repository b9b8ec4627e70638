//! Durations as the runtime's flags and files write them (`500ms`, `3s`, `2m`, ...), and the
//! lab's limited whole numbers.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(d) = setpoint_runtime::parse_duration(text) {
            // What it prints, it reads back.
            let shown = setpoint_runtime::format_duration(d);
            assert!(setpoint_runtime::parse_duration(&shown).is_ok(), "{shown}");
        }
        let _ = setpoint_sim::Limit::DURATION.parse(text);
    }
});
