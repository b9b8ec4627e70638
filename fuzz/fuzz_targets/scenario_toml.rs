//! A scenario file: parsed, then validated into a scenario. Either step may refuse the input
//! with an error; neither may panic, abort or allocate without bound.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(spec) = setpoint_sim::scenario_file::parse("fuzz.toml", text) {
            let _ = setpoint_sim::Scenario::new(spec);
        }
    }
});
