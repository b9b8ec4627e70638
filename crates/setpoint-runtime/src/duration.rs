//! Durations with units: `150ms`, `15s`, `2m`, `1h`, so experiments can run at compressed time.

use std::time::Duration;

/// A duration that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration '{text}': {reason} (write a number and a unit: 150ms, 15s, 2m or 1h)")]
pub struct DurationError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// The longest duration accepted: about 31 years, far beyond any loop period, and small enough
/// that a deadline computed from it never overflows.
const MAX_MS: u64 = 1_000_000_000_000;

/// Reads a duration written as a whole number followed by a unit: `ms`, `s`, `m` or `h`.
///
/// A bare `0` is accepted, since zero needs no unit. Fractions (`1.5s`) are refused: write
/// `1500ms`.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let err = |reason| DurationError {
        text: text.to_owned(),
        reason,
    };
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(err("it does not start with a whole number"));
    }
    let (number, unit) = s.split_at(digits);
    let number: u64 = number.parse().map_err(|_| err("the number is too large"))?;
    let scale = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => return Err(err("the unit is missing")),
        _ => return Err(err("the unit is not one of ms, s, m, h")),
    };
    match number.checked_mul(scale) {
        Some(ms) if ms <= MAX_MS => Ok(Duration::from_millis(ms)),
        _ => Err(err("it is longer than the 31 years accepted")),
    }
}

/// Prints a duration in the largest unit that keeps it whole: `1500ms`, `15s`, `2m`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0".to_owned()
    } else if ms % 3_600_000 == 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms % 60_000 == 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1_000 == 0 {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_scale_to_milliseconds() {
        assert_eq!(parse_duration("150ms"), Ok(Duration::from_millis(150)));
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn missing_or_unknown_units_and_fractions_are_refused_with_a_reason() {
        for bad in ["15", "1.5s", "s", "-1s", "3d", "", "99999999999999999999s"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.to_string().contains("150ms, 15s"), "{e}");
        }
    }

    #[test]
    fn formatting_reads_back_as_the_same_duration() {
        for ms in [0u64, 1, 150, 1000, 1500, 60_000, 90_000, 3_600_000] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }
}
