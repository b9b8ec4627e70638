//! From measurements to a CDF, and the fit's error against them.
//!
//! **Samples** (`n` delays, sorted): the fit is the quantile table at probabilities `k / Q`,
//! `k = 0 ..= Q`, `Q = min(100, n − 1)`, where the quantile at `p` is the sample of rank
//! `round(p · (n − 1))` (from 0), linear between. Up to 101 samples every sample is a knot.
//! One sample is a point mass. The error is the exact Kolmogorov–Smirnov distance to the
//! samples' step CDF, checked on both sides of every sample (between samples both CDFs are
//! monotone, so the largest gap lies at one).
//!
//! **Histograms** (cumulative counts `C_i` at bounds `b_i`, total `N`): the fit runs through
//! `(0, 0)` and every `(b_i, C_i / N)`, so it is uniform inside each bucket and its KS distance
//! to the data at the bounds, the only points where the data define the CDF, is 0 up to
//! rounding. What lies above the last finite bound (the `+Inf` bucket's share) is spread
//! uniformly from that bound to an upper end chosen so that the fit's mean matches `_sum / N`:
//! `hi = 2 · tail_mean − b_last`, where `tail_mean` is `_sum` less the bucket midpoints' share,
//! over the tail's count. Without `_sum`, or when that estimate falls at or below `b_last`, the
//! upper end is one more bucket's width above `b_last` (twice `b_last` for a single bound).

use super::MIN_SAMPLES;
use crate::delay::{Millis, MAX_DELAY_MS};
use crate::empirical::{Empirical, Knot, CDF_ONE, MAX_KNOTS};

/// The most quantile intervals a sample fit has: knots at every percentile.
pub const QUANTILE_STEPS: usize = 100;

/// The 95 % Dvoretzky–Kiefer–Wolfowitz band for `n` samples: `√(ln(2/0.05) / 2n)`.
pub fn band95(n: u64) -> f64 {
    if n == 0 {
        return 1.0;
    }
    ((2.0f64 / 0.05).ln() / (2.0 * n as f64)).sqrt()
}

fn cum(p: f64) -> u64 {
    ((p * CDF_ONE as f64).round() as u64).min(CDF_ONE)
}

/// What a fit gives: the CDF, the measured CDF it came from, and its KS distance to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    /// The fitted distribution.
    pub cdf: Empirical,
    /// The measured CDF, `(ms, probability)`.
    pub measured: Vec<(Millis, f64)>,
    /// The KS distance between the two, where the data define it.
    pub ks: f64,
    /// A histogram's largest bucket probability.
    pub bucket_mass: Option<f64>,
    /// What the fit assumed, one sentence each.
    pub notes: Vec<String>,
}

/// Fits `samples` (milliseconds, any order, at least one) by the module's rule; `label` names
/// the result in outputs.
pub fn fit_samples(mut samples: Vec<Millis>, label: &str) -> Result<Fitted, String> {
    if samples.is_empty() {
        return Err("no samples".into());
    }
    samples.sort_unstable();
    let n = samples.len();
    if samples[n - 1] > MAX_DELAY_MS {
        return Err(format!(
            "a delay of {} ms is above the accepted {MAX_DELAY_MS} ms",
            samples[n - 1]
        ));
    }
    let knots: Vec<Knot> = if n == 1 {
        vec![
            Knot {
                ms: samples[0],
                cum: 0,
            },
            Knot {
                ms: samples[0],
                cum: CDF_ONE,
            },
        ]
    } else {
        let q = QUANTILE_STEPS.min(n - 1);
        (0..=q)
            .map(|k| {
                // Integer rank rounding: round(k (n − 1) / q), halves up.
                let rank = (2 * k * (n - 1) + q) / (2 * q);
                Knot {
                    ms: samples[rank],
                    cum: (k as u64 * CDF_ONE) / q as u64,
                }
            })
            .collect()
    };
    let cdf = Empirical::new(knots, label)?;
    // The step CDF at each distinct value: (value, share below it, share at or below it).
    let mut steps: Vec<(Millis, f64, f64)> = Vec::new();
    let mut i = 0;
    while i < n {
        let x = samples[i];
        let j = i + samples[i..].partition_point(|&s| s == x);
        steps.push((x, i as f64 / n as f64, j as f64 / n as f64));
        i = j;
    }
    let ks = steps
        .iter()
        .map(|&(x, below, at)| {
            let x = x as f64;
            (cdf.cdf_below(x) - below)
                .abs()
                .max((cdf.cdf(x) - at).abs())
        })
        .fold(0.0, f64::max);
    let stride = steps.len().div_ceil(MAX_KNOTS);
    let mut measured: Vec<(Millis, f64)> = steps
        .iter()
        .step_by(stride)
        .map(|&(x, _, at)| (x, at))
        .collect();
    let last = steps[steps.len() - 1];
    if measured.last().map(|m| m.0) != Some(last.0) {
        measured.push((last.0, last.2));
    }
    let mut notes = Vec::new();
    if (n as u64) < MIN_SAMPLES {
        notes.push(format!(
            "only {n} samples, fewer than {MIN_SAMPLES}: the true distribution may lie up to {:.2} from this fit",
            band95(n as u64)
        ));
    }
    Ok(Fitted {
        cdf,
        measured,
        ks,
        bucket_mass: None,
        notes,
    })
}

/// One histogram: cumulative counts at finite upper bounds (milliseconds, ascending), the
/// total (the `+Inf` bucket) and the sum of the observations, in milliseconds, if known.
#[derive(Debug, Clone, PartialEq)]
pub struct Buckets {
    /// `(upper bound in ms, cumulative count)`, bounds ascending, counts non-decreasing.
    pub bounds: Vec<(f64, f64)>,
    /// The total count: the `+Inf` bucket.
    pub total: f64,
    /// The sum of all observations, in milliseconds (`_sum`), if the scrape has it.
    pub sum_ms: Option<f64>,
}

/// Fits a histogram by the module's rule. `total` must be above 0 and at least every count.
pub fn fit_buckets(b: &Buckets, label: &str) -> Result<Fitted, String> {
    if b.total <= 0.0 {
        return Err("no samples".into());
    }
    let ms = |x: f64| -> Millis { x.round().clamp(0.0, MAX_DELAY_MS as f64) as Millis };
    let mut knots = vec![Knot { ms: 0, cum: 0 }];
    let mut measured = Vec::new();
    let (mut prev_b, mut prev_c, mut mass, mut mid_sum) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let mut widths = Vec::new();
    for &(bound, count) in &b.bounds {
        knots.push(Knot {
            ms: ms(bound),
            cum: cum(count / b.total),
        });
        measured.push((ms(bound), count / b.total));
        mass = mass.max((count - prev_c) / b.total);
        mid_sum += (count - prev_c) * (prev_b + bound) / 2.0;
        widths.push(bound - prev_b);
        prev_b = bound;
        prev_c = count;
    }
    let mut notes = Vec::new();
    let tail = b.total - prev_c;
    if tail > 0.0 {
        mass = mass.max(tail / b.total);
        let width = match widths.len() {
            0 => 1000.0,
            1 => prev_b.max(1000.0),
            k => widths[k - 1].max(1.0),
        };
        let from_sum = b
            .sum_ms
            .map(|s| 2.0 * ((s - mid_sum) / tail) - prev_b)
            .filter(|&hi| hi > prev_b);
        let (hi, how) = match from_sum {
            Some(hi) => (hi, "so that the fit's mean matches _sum"),
            None => (prev_b + width, "one more bucket's width (no usable _sum)"),
        };
        let hi = ms(hi).max(ms(prev_b));
        notes.push(format!(
            "{tail} of {} observations lie above the last finite bound ({} ms); the fit spreads them uniformly up to {hi} ms, {how}",
            b.total,
            ms(prev_b)
        ));
        knots.push(Knot {
            ms: hi,
            cum: CDF_ONE,
        });
    } else if let Some(last) = knots.last_mut() {
        last.cum = CDF_ONE;
    }
    let cdf = Empirical::new(knots, label)?;
    let ks = measured
        .iter()
        .map(|&(x, p)| (cdf.cdf(x as f64) - p).abs())
        .fold(0.0, f64::max);
    if (b.total as u64) < MIN_SAMPLES {
        notes.push(format!(
            "only {} observations, fewer than {MIN_SAMPLES}: the true distribution may lie up to {:.2} from this fit",
            b.total,
            band95(b.total as u64)
        ));
    }
    Ok(Fitted {
        cdf,
        measured,
        ks,
        bucket_mass: Some(mass),
        notes,
    })
}

/// The Kolmogorov–Smirnov distance between two distributions, at every knot of either (both
/// are linear between their own knots, so the largest gap lies at one, or just below one).
pub fn ks_between(a: &Empirical, b: &Empirical) -> f64 {
    a.knots()
        .iter()
        .chain(b.knots())
        .map(|k| {
            let x = k.ms as f64;
            (a.cdf(x) - b.cdf(x))
                .abs()
                .max((a.cdf_below(x) - b.cdf_below(x)).abs())
        })
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delay::{DelayModel, WorldRng};

    /// The slow, obvious oracle: the step CDF's largest gap to `cdf`, checked on a 1 ms grid.
    fn ks_on_grid(samples: &[Millis], cdf: &Empirical) -> f64 {
        let hi = *samples.iter().max().unwrap() + 2;
        (0..=hi)
            .map(|x| {
                let at = samples.iter().filter(|&&s| s <= x).count() as f64 / samples.len() as f64;
                (cdf.cdf(x as f64) - at).abs()
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn a_sample_fit_has_the_ks_distance_a_grid_search_finds() {
        let model = DelayModel::Uniform { min: 50, max: 900 };
        for (seed, n) in [(1, 7), (2, 40), (3, 101), (4, 500)] {
            let mut rng = WorldRng::new(seed);
            let xs: Vec<Millis> = (0..n).map(|_| model.sample(&mut rng)).collect();
            let f = fit_samples(xs.clone(), "t").unwrap();
            let grid = ks_on_grid(&xs, &f.cdf);
            // The grid sees right limits only; the exact value can be larger, never smaller.
            assert!(f.ks + 1e-12 >= grid, "n {n}: {} < {grid}", f.ks);
            assert!(
                f.ks <= grid + 1.0 / n as f64 + 1e-12,
                "n {n}: {} vs {grid}",
                f.ks
            );
        }
    }

    #[test]
    fn up_to_101_samples_every_sample_is_a_knot() {
        let xs: Vec<Millis> = (0..50).map(|i| i * 10).collect();
        let f = fit_samples(xs.clone(), "t").unwrap();
        let ms: Vec<Millis> = f.cdf.knots().iter().map(|k| k.ms).collect();
        assert_eq!(ms, xs);
        assert!(f.notes.is_empty());
        let f = fit_samples(vec![5; 10], "t").unwrap();
        assert_eq!((f.cdf.min_ms(), f.cdf.max_ms()), (5, 5));
        assert!(f.notes[0].contains("fewer than 30"), "{:?}", f.notes);
    }

    #[test]
    fn a_histogram_fit_passes_through_every_bucket() {
        let b = Buckets {
            bounds: vec![(1000.0, 10.0), (2000.0, 30.0), (5000.0, 40.0)],
            total: 40.0,
            sum_ms: None,
        };
        let f = fit_buckets(&b, "h").unwrap();
        assert!(f.ks < 1e-9);
        assert_eq!(f.cdf.cdf(1500.0), 0.5);
        assert_eq!(f.bucket_mass, Some(0.5));
        assert_eq!(f.cdf.max_ms(), 5000);
        assert!(f.notes.is_empty());
    }

    #[test]
    fn the_tail_above_the_last_bound_reaches_as_far_as_the_sum_says() {
        // 10 at ≤ 1 s (midpoint 0.5 s), 10 above; sum 10·0.5 + 10·3 s: the tail's mean is 3 s,
        // so it spreads from 1 s to 5 s.
        let b = Buckets {
            bounds: vec![(1000.0, 10.0)],
            total: 20.0,
            sum_ms: Some(35_000.0),
        };
        let f = fit_buckets(&b, "h").unwrap();
        assert_eq!(f.cdf.max_ms(), 5000);
        assert!((f.cdf.mean_ms() - 1750.0).abs() < 1e-6);
        // No sum: one more bucket's width (the bound itself, for one bound).
        let f = fit_buckets(&Buckets { sum_ms: None, ..b }, "h").unwrap();
        assert_eq!(f.cdf.max_ms(), 2000);
        assert!(f.notes[0].contains("above the last finite bound"));
    }

    #[test]
    fn two_distributions_ks_is_their_largest_gap() {
        let a = Empirical::new(
            vec![
                Knot { ms: 0, cum: 0 },
                Knot {
                    ms: 1000,
                    cum: CDF_ONE,
                },
            ],
            "a",
        )
        .unwrap();
        let b = Empirical::new(
            vec![
                Knot { ms: 500, cum: 0 },
                Knot {
                    ms: 1500,
                    cum: CDF_ONE,
                },
            ],
            "b",
        )
        .unwrap();
        assert!((ks_between(&a, &b) - 0.5).abs() < 1e-12);
        assert_eq!(ks_between(&a, &a), 0.0);
    }
}
