//! The runtime's workloads file, as `apply` reads it.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = setpoint_runtime::spec::parse_workloads(text);
    }
});
