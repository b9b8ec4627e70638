//! Number formatting that matches the reference model's JavaScript byte for byte.
//!
//! The lesson's tables use `Number.prototype.toFixed(2)` and `String.prototype.padStart`.
//! `toFixed` picks the nearest two-decimal value and, on an exact tie, the larger one; Rust's
//! `{:.2}` breaks ties to even. The two differ only when the double is exactly halfway, such as
//! 0.125, which `toFixed` prints as "0.13" and Rust as "0.12".

/// Formats a non-negative finite `x` as JavaScript's `x.toFixed(2)` does.
pub fn js_to_fixed2(x: f64) -> String {
    debug_assert!(x.is_finite() && x >= 0.0);
    if is_hundredths_tie(x) {
        // x * 100 is exactly k + 0.5 (exact, since such a value is representable); take k + 1.
        let up = (x * 100.0).ceil() as u64;
        format!("{}.{:02}", up / 100, up % 100)
    } else {
        format!("{x:.2}")
    }
}

/// Whether `x` lies exactly halfway between two multiples of 0.01, that is, whether `200 · x` is
/// an odd integer. With `x = m · 2^e` (m odd), `200 · x = 25 · m · 2^(e + 3)`, which is an odd
/// integer exactly when `e = −3`.
fn is_hundredths_tie(x: f64) -> bool {
    if x == 0.0 || !x.is_finite() {
        return false;
    }
    let bits = x.to_bits();
    let exp_bits = ((bits >> 52) & 0x7ff) as i64;
    let frac = bits & ((1u64 << 52) - 1);
    let (mantissa, exp) = if exp_bits == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), exp_bits - 1075)
    };
    let tz = i64::from(mantissa.trailing_zeros());
    exp + tz == -3
}

/// Right-aligns `s` in `width` columns, as `padStart(width)` does; longer text is kept whole.
pub fn pad(s: impl std::fmt::Display, width: usize) -> String {
    format!("{s:>width$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_halfway_values_round_up_like_javascript() {
        assert_eq!(js_to_fixed2(0.125), "0.13");
        assert_eq!(js_to_fixed2(0.375), "0.38");
        assert_eq!(js_to_fixed2(2.625), "2.63");
        assert_eq!(js_to_fixed2(8.0 / 61.0), "0.13");
    }

    #[test]
    fn values_that_only_look_halfway_round_by_their_true_value() {
        // 1.005 is stored as 1.00499999999999989…, so toFixed(2) gives "1.00".
        assert_eq!(js_to_fixed2(1.005), "1.00");
        assert_eq!(js_to_fixed2(0.615), "0.61");
    }

    #[test]
    fn ordinary_values_match_rust_formatting() {
        assert_eq!(js_to_fixed2(0.0), "0.00");
        assert_eq!(js_to_fixed2(2.75), "2.75");
        assert_eq!(js_to_fixed2(1.9), "1.90");
        assert_eq!(js_to_fixed2(123456.789), "123456.79");
    }

    #[test]
    fn pad_keeps_long_text_whole() {
        assert_eq!(pad(7, 3), "  7");
        assert_eq!(pad(12345, 3), "12345");
    }
}
