//! Delay-model specs (`fixed:S`, `uniform:MIN:MAX`, `lesson-chain`, chains of stages): parsed,
//! then drawn from a few times.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(model) = setpoint_sim::delay::parse_delay_model(text) {
            let _ = (model.max_ms(), model.mean_ms(), model.is_random());
        }
    }
});
