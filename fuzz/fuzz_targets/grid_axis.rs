//! The grid and axis parsers of sweep, relation and plot heatmap: an axis of numbers (with the
//! first byte choosing which setting's limits apply), a list of controllers, a list of delay
//! models, a shard, and a deaths list.
#![no_main]
use libfuzzer_sys::fuzz_target;
use setpoint_sim::Limit;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let limit = [Limit::DELAY, Limit::PERIOD, Limit::DESIRED, Limit::STARTUP, Limit::DURATION]
        [usize::from(which) % 5];
    if let Ok(axis) = setpoint_sim::Axis::parse(limit, text) {
        // Walking the axis must agree with its length, without allocating it.
        let n = axis.len();
        let walked = axis.values().take(1000).count() as u64;
        assert_eq!(walked, n.min(1000));
    }
    let _ = setpoint_sim::sweep::parse_controllers(text);
    let _ = setpoint_sim::sweep::parse_delay_models(text);
    let _ = setpoint_sim::sweep::Shard::parse(text);
    let _ = setpoint_sim::parse_deaths(text);
});
