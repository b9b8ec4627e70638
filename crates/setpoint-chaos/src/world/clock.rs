//! The hosts' clocks: virtual time read through a host's skew and drift, and back.

use super::EPOCH_MS;

/// A host's clock at virtual time `now`: [`EPOCH_MS`] plus `now`, its skew `offset` and its
/// drift of `drift_ppm` millionths of `now` (rounded down). Never goes backwards for a drift
/// above −1,000,000 ppm.
pub fn host_clock(offset: u64, drift_ppm: i64, now: u64) -> u64 {
    if drift_ppm == 0 {
        return EPOCH_MS + offset + now;
    }
    // In 64 bits when the product fits (always, for runs of under 292 years at ±1,000,000
    // ppm): a 128-bit division is a call into the compiler's runtime, on every step.
    let drift = match i64::try_from(now)
        .ok()
        .and_then(|n| n.checked_mul(drift_ppm))
    {
        Some(p) => i128::from(p.div_euclid(1_000_000)),
        None => (i128::from(now) * i128::from(drift_ppm)).div_euclid(1_000_000),
    };
    (i128::from(EPOCH_MS + offset + now) + drift) as u64
}

/// The earliest virtual time, not before `now`, at which that host's clock reads at least `t`
/// (when a wake the host asked for at `t` on its own clock is due).
pub fn virtual_at(offset: u64, drift_ppm: i64, t: u64, now: u64) -> u64 {
    let d = t.saturating_sub(EPOCH_MS + offset);
    if drift_ppm == 0 {
        // The clock reads `EPOCH_MS + offset + v`: `d` is the first time it reads `t`.
        return d.max(now);
    }
    let first = i64::try_from(d)
        .ok()
        .and_then(|d| d.checked_mul(1_000_000))
        .zip(drift_ppm.checked_add(1_000_000));
    let mut v = match first {
        Some((p, q)) => (p / q) as u64,
        None => (i128::from(d) * 1_000_000 / (1_000_000 + i128::from(drift_ppm))) as u64,
    };
    while host_clock(offset, drift_ppm, v) < t {
        v += 1;
    }
    while v > 0 && host_clock(offset, drift_ppm, v - 1) >= t {
        v -= 1;
    }
    v.max(now)
}
