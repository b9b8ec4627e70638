//! The world's unit tests.

use super::*;

#[test]
fn a_drifting_clock_never_goes_back_and_a_wake_is_due_when_it_reads_the_time_asked() {
    for drift in [-200_000, -137, 0, 1, 999, 200_000] {
        let mut last = 0;
        for now in (0..5_000).chain(599_990..600_010) {
            let c = host_clock(250, drift, now);
            assert!(c >= last, "drift {drift} at {now}");
            last = c;
            let at = virtual_at(250, drift, c, 0);
            assert!(
                host_clock(250, drift, at) >= c && at <= now,
                "{drift} {now}"
            );
            assert!(
                at == 0 || host_clock(250, drift, at - 1) < c,
                "{drift} {now}"
            );
        }
    }
    // 20 % slow: ten minutes of virtual time read as eight on the host.
    assert_eq!(host_clock(0, -200_000, 600_000), EPOCH_MS + 480_000);
    assert_eq!(virtual_at(0, -200_000, EPOCH_MS + 480_000, 0), 600_000);
    assert_eq!(virtual_at(0, 0, EPOCH_MS + 5, 9), 9, "never in the past");
}
