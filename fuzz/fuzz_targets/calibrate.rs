//! `setpoint calibrate`'s sources (Prometheus text, `kubectl … -o json` pod and event lists)
//! and its delay-model files, from any bytes: a fit, or one error line naming the file.
#![no_main]
use libfuzzer_sys::fuzz_target;
use setpoint_sim::calibrate::{calibrate_text, model_file, Request};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        for fits in [
            calibrate_text("f", text, &Request::default()).ok(),
            model_file::parse("f", text).ok(),
        ]
        .into_iter()
        .flatten()
        {
            for f in fits {
                assert!(f.cdf.min_ms() <= f.cdf.max_ms());
                let _ = f.cdf.quantile(0.99);
            }
        }
    }
});
