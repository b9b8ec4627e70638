//! Empirical delay distributions: a measured CDF, drawn from by inverse-CDF sampling.
//!
//! An [`Empirical`] distribution is a list of knots `(ms, cum)`: `cum` is the probability that a
//! delay is at most `ms`, in billionths ([`CDF_ONE`] is probability 1). Between two knots the CDF
//! is linear, so the distribution is uniform inside each segment; two knots at the same `ms`
//! make a jump (a share of delays exactly at `ms`). `docs/model.md` ("Empirical delay models")
//! defines it with an example.
//!
//! **Sampling** is integer arithmetic on the world's seeded generator, so a seed names the same
//! draws on every machine: draw `u` uniform over `0 ..= CDF_ONE − 1`, find the segment
//! `cum[i] ≤ u < cum[i+1]`, and return `ms[i] + ⌊(ms[i+1] − ms[i]) · (u − cum[i]) /
//! (cum[i+1] − cum[i])⌋`. One draw of the generator per sample.

use crate::delay::{Millis, WorldRng, MAX_DELAY_MS};

/// Probability 1, in the billionths that [`Knot::cum`] counts.
pub const CDF_ONE: u64 = 1_000_000_000;

/// The most knots a distribution may have.
pub const MAX_KNOTS: usize = 10_000;

/// One knot of a piecewise-linear CDF.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Knot {
    /// The delay, in milliseconds.
    pub ms: Millis,
    /// The probability that a delay is at most `ms`, in billionths of 1.
    pub cum: u64,
}

/// A measured delay distribution, validated: at least two knots, both coordinates
/// non-decreasing, the first at probability 0 and the last at probability 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Empirical {
    knots: Vec<Knot>,
    label: String,
}

impl Empirical {
    /// The distribution through `knots`, named `label` in outputs (the model file as given).
    /// The error says which knot is wrong and what is accepted.
    pub fn new(knots: Vec<Knot>, label: impl Into<String>) -> Result<Self, String> {
        if knots.len() < 2 || knots.len() > MAX_KNOTS {
            return Err(format!("{} knots: accepted 2 to {MAX_KNOTS}", knots.len()));
        }
        if knots[0].cum != 0 {
            return Err("the first knot's probability must be 0".into());
        }
        if knots[knots.len() - 1].cum != CDF_ONE {
            return Err("the last knot's probability must be 1".into());
        }
        for (i, w) in knots.windows(2).enumerate() {
            if w[1].ms < w[0].ms || w[1].cum < w[0].cum {
                return Err(format!(
                    "knot {} goes back (from {} ms at {} to {} ms at {}): accepted delays and probabilities that never decrease",
                    i + 2,
                    w[0].ms,
                    w[0].cum as f64 / CDF_ONE as f64,
                    w[1].ms,
                    w[1].cum as f64 / CDF_ONE as f64
                ));
            }
        }
        if knots[knots.len() - 1].ms > MAX_DELAY_MS {
            return Err(format!(
                "the largest delay {} ms is above the accepted {MAX_DELAY_MS} ms",
                knots[knots.len() - 1].ms
            ));
        }
        Ok(Empirical {
            knots,
            label: label.into(),
        })
    }

    /// The knots, in order.
    pub fn knots(&self) -> &[Knot] {
        &self.knots
    }

    /// The name outputs give it: the model file as named on the command line.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The smallest delay it can draw, in milliseconds: where the first segment with any
    /// probability begins.
    pub fn min_ms(&self) -> Millis {
        let first = self.knots.partition_point(|k| k.cum == 0);
        self.knots[first.saturating_sub(1)].ms
    }

    /// The largest delay it can draw, in milliseconds: where the CDF first reaches 1.
    pub fn max_ms(&self) -> Millis {
        let i = self.knots.partition_point(|k| k.cum < CDF_ONE);
        self.knots[i.min(self.knots.len() - 1)].ms
    }

    /// The mean delay, in milliseconds: each segment's probability times its midpoint.
    pub fn mean_ms(&self) -> f64 {
        self.knots
            .windows(2)
            .map(|w| (w[1].cum - w[0].cum) as f64 / CDF_ONE as f64 * (w[0].ms + w[1].ms) as f64)
            .sum::<f64>()
            / 2.0
    }

    /// The CDF at `x` milliseconds (right-continuous): the probability of a delay at most `x`.
    pub fn cdf(&self, x: f64) -> f64 {
        let k = &self.knots;
        // The last knot at or below x; past it the CDF is flat or rises linearly to the next.
        let i = k.partition_point(|k| (k.ms as f64) <= x);
        if i == 0 {
            return 0.0;
        }
        if i == k.len() {
            return 1.0;
        }
        let (a, b) = (k[i - 1], k[i]);
        let f = (x - a.ms as f64) / (b.ms - a.ms) as f64;
        (a.cum as f64 + f * (b.cum - a.cum) as f64) / CDF_ONE as f64
    }

    /// The CDF just below `x` milliseconds: the probability of a delay under `x`.
    pub fn cdf_below(&self, x: f64) -> f64 {
        let k = &self.knots;
        let i = k.partition_point(|k| (k.ms as f64) < x);
        if i == 0 {
            return 0.0;
        }
        if i == k.len() {
            return 1.0;
        }
        let (a, b) = (k[i - 1], k[i]);
        let f = (x - a.ms as f64) / (b.ms - a.ms) as f64;
        (a.cum as f64 + f * (b.cum - a.cum) as f64) / CDF_ONE as f64
    }

    /// The delay at probability `p` (0 to 1), in milliseconds: the inverse CDF, linear inside a
    /// segment, the lowest such delay at a jump.
    pub fn quantile(&self, p: f64) -> f64 {
        let u = (p.clamp(0.0, 1.0) * CDF_ONE as f64).round() as u64;
        if u >= CDF_ONE {
            return self.max_ms() as f64;
        }
        let i = self.knots.partition_point(|k| k.cum <= u);
        let (a, b) = (self.knots[i - 1], self.knots[i]);
        a.ms as f64 + (b.ms - a.ms) as f64 * (u - a.cum) as f64 / (b.cum - a.cum) as f64
    }

    /// Draws one delay, in milliseconds, by the module's rule.
    pub fn sample(&self, rng: &mut WorldRng) -> Millis {
        self.at(rng.uniform(0, CDF_ONE - 1))
    }

    /// The delay a uniform draw `u` (`0 ..= CDF_ONE − 1`) maps to: the module's rule.
    pub fn at(&self, u: u64) -> Millis {
        let u = u.min(CDF_ONE - 1);
        // cum[0] = 0 ≤ u < CDF_ONE = cum[last], so i is in 1 ..= last.
        let i = self.knots.partition_point(|k| k.cum <= u);
        let (a, b) = (self.knots[i - 1], self.knots[i]);
        let span = u128::from(b.ms - a.ms) * u128::from(u - a.cum) / u128::from(b.cum - a.cum);
        a.ms + span as Millis
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knots(points: &[(Millis, u64)]) -> Vec<Knot> {
        points.iter().map(|&(ms, cum)| Knot { ms, cum }).collect()
    }

    #[test]
    fn a_two_knot_distribution_is_uniform_between_them() {
        let e = Empirical::new(knots(&[(5000, 0), (30_000, CDF_ONE)]), "u").unwrap();
        assert_eq!((e.min_ms(), e.max_ms()), (5000, 30_000));
        assert_eq!(e.mean_ms(), 17_500.0);
        assert_eq!(e.cdf(17_500.0), 0.5);
        assert_eq!(e.quantile(0.2), 10_000.0);
        let mut rng = WorldRng::new(3);
        let n = 100_000;
        let xs: Vec<Millis> = (0..n).map(|_| e.sample(&mut rng)).collect();
        assert!(xs.iter().all(|&x| (5000..30_000).contains(&x)));
        let below = xs.iter().filter(|&&x| x < 10_000).count() as f64 / n as f64;
        assert!((below - 0.2).abs() < 0.01, "{below}");
    }

    #[test]
    fn a_jump_draws_its_share_exactly_at_its_delay() {
        // 30 % exactly at 2 s, the rest uniform from 2 to 4 s.
        let e = Empirical::new(
            knots(&[(2000, 0), (2000, 300_000_000), (4000, CDF_ONE)]),
            "j",
        )
        .unwrap();
        assert_eq!(e.cdf(2000.0), 0.3);
        assert_eq!(e.cdf_below(2000.0), 0.0);
        assert_eq!(e.quantile(0.1), 2000.0);
        let mut rng = WorldRng::new(9);
        let n = 50_000;
        let at = (0..n).filter(|_| e.sample(&mut rng) == 2000).count() as f64 / n as f64;
        assert!((at - 0.3).abs() < 0.01, "{at}");
    }

    #[test]
    fn the_documented_example_maps_draws_as_docs_model_md_says() {
        // docs/model.md, "Empirical models": 30 % exactly at 2 s, the rest uniform to 4 s.
        let e = Empirical::new(
            knots(&[(2000, 0), (2000, 300_000_000), (4000, CDF_ONE)]),
            "x",
        )
        .unwrap();
        assert_eq!(e.at(150_000_000), 2000);
        assert_eq!(e.at(650_000_000), 3000);
        assert_eq!(e.at(0), 2000);
        assert_eq!(e.at(CDF_ONE - 1), 3999);
        assert!((e.mean_ms() - 2700.0).abs() < 1e-9);
        assert_eq!(e.max_ms(), 4000);
    }

    #[test]
    fn min_and_max_skip_the_flat_ends() {
        let e = Empirical::new(
            knots(&[(0, 0), (1000, 0), (2000, CDF_ONE), (9000, CDF_ONE)]),
            "f",
        )
        .unwrap();
        assert_eq!((e.min_ms(), e.max_ms()), (1000, 2000));
        let mut rng = WorldRng::new(1);
        assert!((0..1000)
            .map(|_| e.sample(&mut rng))
            .all(|x| (1000..=2000).contains(&x)));
    }

    #[test]
    fn knots_that_go_back_or_miss_an_end_are_refused() {
        for (bad, why) in [
            (knots(&[(0, 0)]), "knots"),
            (knots(&[(0, 1), (5, CDF_ONE)]), "first"),
            (knots(&[(0, 0), (5, 7)]), "last"),
            (knots(&[(0, 0), (5, 600), (4, CDF_ONE)]), "knot 3 goes back"),
            (knots(&[(0, 0), (5, 600), (6, 500), (7, CDF_ONE)]), "knot 3"),
            (knots(&[(0, 0), (MAX_DELAY_MS + 1, CDF_ONE)]), "above"),
        ] {
            let e = Empirical::new(bad, "x").unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_delays() {
        let e = Empirical::new(knots(&[(0, 0), (700, 400_000_000), (9000, CDF_ONE)]), "s").unwrap();
        let draw = |seed| {
            let mut rng = WorldRng::new(seed);
            (0..50).map(|_| e.sample(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(4), draw(4));
        assert_ne!(draw(4), draw(5));
    }

    proptest::proptest! {
        /// A draw is the CDF's inverse: the share below it is at most u, the share up to one
        /// millisecond past it at least u; and a larger u never draws a smaller delay.
        #[test]
        fn a_draw_inverts_the_cdf_and_never_goes_back(
            steps in proptest::collection::vec((0u64..5000, 0u64..1000), 1..12),
            us in proptest::collection::vec(0u64..CDF_ONE, 1..40),
        ) {
            // Knots from increments: some of zero width (jumps), some of zero weight (flats).
            let total: u64 = steps.iter().map(|s| s.1).sum::<u64>().max(1);
            let (mut ms, mut w) = (100u64, 0u64);
            let mut ks = vec![Knot { ms, cum: 0 }];
            for &(dx, dw) in &steps {
                ms += dx;
                w += dw;
                ks.push(Knot { ms, cum: (w * CDF_ONE) / total });
            }
            ks.last_mut().unwrap().cum = CDF_ONE;
            let e = Empirical::new(ks, "p").unwrap();
            let mut sorted = us.clone();
            sorted.sort_unstable();
            let mut last = 0;
            for &u in &sorted {
                let x = e.at(u);
                let p = u as f64 / CDF_ONE as f64;
                proptest::prop_assert!(e.cdf_below(x as f64) <= p + 1e-9, "u {u} x {x}");
                proptest::prop_assert!(e.cdf(x as f64 + 1.0) + 1e-9 >= p, "u {u} x {x}");
                proptest::prop_assert!((e.min_ms()..=e.max_ms()).contains(&x));
                proptest::prop_assert!(x >= last);
                last = x;
            }
        }
    }
}
