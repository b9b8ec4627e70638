//! Report-delay models, and the world's one random number generator.
//!
//! A report is the news that a copy started or ended, on its way from the node to the ledger.
//! Its delay is drawn when the report is made, separately for every report, so two copies can
//! reach the ledger in the opposite order of their start. Delays are kept in milliseconds; the
//! ledger applies reports at whole seconds, so a report made at second `s` with a delay of `d`
//! milliseconds is on the ledger from second `s + ⌈d / 1000⌉` on.
//!
//! # The lesson's chain
//! [`DelayModel::lesson_chain`] is a four-stage reporting chain calibrated to the figures the
//! lesson quotes from its previous measurement: mean 13.53 s, worst case 26.36 s. Each stage is
//! uniform over whole milliseconds `[min, max]`, so its mean is `(min + max) / 2` and its worst
//! case is `max`; the chain's mean and worst case are the sums. Three stages take values that
//! describe their mechanism, and the last stage is solved from the two targets:
//!
//! | stage | min (s) | max (s) | mean (s) | why |
//! | --- | --- | --- | --- | --- |
//! | node report period | 0 | 10 | 5 | a node reports every 10 s; a change waits for the next report |
//! | batching | 0 | 5 | 2.5 | the collector forwards a batch every 5 s |
//! | transport | 0.5 | 4.5 | 2.5 | network and queueing |
//! | ledger write | 0.2 | 6.86 | 3.53 | what remains: `13.53 − 10 = 3.53` mean, `26.36 − 19.5 = 6.86` worst |
//!
//! "Worst" is the largest delay the chain can produce (the sum of the stages' maxima), not the
//! largest of some number of samples: a bound that holds for every report, which is what the
//! lesson's boundary `U ≥ G + B` needs. Samples come close to it only rarely, since all four
//! stages must be near their maxima at once.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use crate::calibrate::DelayKind;
use crate::empirical::Empirical;

/// Milliseconds of delay.
pub type Millis = u64;

/// The world's random number generator: ChaCha8, whose output for a given seed is fixed by its
/// specification, so a seed names the same run on every machine and every version.
#[derive(Debug, Clone)]
pub struct WorldRng(ChaCha8Rng);

impl WorldRng {
    /// The generator for `seed`.
    pub fn new(seed: u64) -> Self {
        WorldRng(ChaCha8Rng::seed_from_u64(seed))
    }

    /// A uniform draw from `lo ..= hi`, by rejection, so that no value is favoured. It consumes
    /// nothing when `lo == hi`.
    #[inline(always)]
    pub fn uniform(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi);
        if lo == hi {
            return lo;
        }
        // `range` wraps to 0 for the whole of u64.
        let range = (hi - lo).wrapping_add(1);
        let x = self.0.next_u64();
        if range == 0 {
            return x;
        }
        // Drawing below 2^64 − rem, rem = 2^64 mod range < range, makes every residue equally
        // likely. A draw below 2^64 − range is below that bound whatever rem is, so the
        // division that finds rem is needed only in the rare draw above it (perf, issue 24:
        // the same draws as before, with one division instead of three). This common case is
        // inlined into the callers; a draw's call and frame were a third of its instructions
        // (callgrind, issue 24 part 4).
        if x <= u64::MAX - range {
            return lo + x % range;
        }
        self.uniform_rare(lo, range, x)
    }

    /// [`WorldRng::uniform`] after a first draw `x` above `2^64 − range`: accepted if below
    /// `2^64 − rem`, otherwise drawn again, as the loop always did.
    #[cold]
    #[inline(never)]
    fn uniform_rare(&mut self, lo: u64, range: u64, mut x: u64) -> u64 {
        loop {
            let rem = range.wrapping_neg() % range;
            if rem == 0 || x <= u64::MAX - rem {
                return lo + x % range;
            }
            x = self.0.next_u64();
            if x <= u64::MAX - range {
                return lo + x % range;
            }
        }
    }
}

/// One stage of a reporting chain: a delay uniform over whole milliseconds `min ..= max`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// What the stage is, for outputs.
    pub name: String,
    /// The shortest delay of the stage, in milliseconds.
    pub min: Millis,
    /// The longest delay of the stage, in milliseconds.
    pub max: Millis,
}

/// How long a report takes to reach the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DelayModel {
    /// Every report takes the same time, in milliseconds: the lesson's G.
    Fixed(Millis),
    /// Each report takes a delay uniform over whole milliseconds `min ..= max`.
    Uniform {
        /// The shortest delay, in milliseconds.
        min: Millis,
        /// The longest delay, in milliseconds.
        max: Millis,
    },
    /// Each report passes every stage in turn; its delay is the sum of one draw per stage.
    Chain(Vec<Stage>),
    /// Each report's delay is drawn from a measured distribution (`setpoint calibrate`'s model
    /// file), by inverse-CDF sampling: [`crate::empirical`] gives the rule.
    Empirical(std::sync::Arc<Empirical>),
}

/// The longest delay a model accepts, in milliseconds: the same bound as any time setting.
pub const MAX_DELAY_MS: Millis = crate::lesson_world::MAX_SECONDS * 1000;

/// The most stages a chain may have.
pub const MAX_STAGES: usize = 64;

impl DelayModel {
    /// The lesson's delay: every report takes `seconds`.
    pub fn fixed_seconds(seconds: u64) -> Self {
        DelayModel::Fixed(seconds.saturating_mul(1000))
    }

    /// The four-stage chain calibrated to the lesson's measurement (mean 13.53 s, worst 26.36 s);
    /// the module documentation gives the calibration.
    pub fn lesson_chain() -> Self {
        let stage = |name: &str, min, max| Stage {
            name: name.to_owned(),
            min,
            max,
        };
        DelayModel::Chain(vec![
            stage("node report period", 0, 10_000),
            stage("batching", 0, 5_000),
            stage("transport", 500, 4_500),
            stage("ledger write", 200, 6_860),
        ])
    }

    /// Whether drawing a delay uses the random number generator.
    pub fn is_random(&self) -> bool {
        match self {
            DelayModel::Fixed(_) => false,
            DelayModel::Uniform { min, max } => min != max,
            DelayModel::Chain(stages) => stages.iter().any(|s| s.min != s.max),
            DelayModel::Empirical(e) => e.min_ms() != e.max_ms(),
        }
    }

    /// The shortest delay the model can produce, in milliseconds.
    pub fn min_ms(&self) -> Millis {
        match self {
            DelayModel::Fixed(d) => *d,
            DelayModel::Uniform { min, .. } => *min,
            DelayModel::Chain(stages) => stages.iter().map(|s| s.min).sum(),
            DelayModel::Empirical(e) => e.min_ms(),
        }
    }

    /// The longest delay the model can produce, in milliseconds: its worst case.
    pub fn max_ms(&self) -> Millis {
        match self {
            DelayModel::Fixed(d) => *d,
            DelayModel::Uniform { max, .. } => *max,
            DelayModel::Chain(stages) => stages.iter().map(|s| s.max).sum(),
            DelayModel::Empirical(e) => e.max_ms(),
        }
    }

    /// The mean delay, in milliseconds.
    pub fn mean_ms(&self) -> f64 {
        if let DelayModel::Empirical(e) = self {
            return e.mean_ms();
        }
        (match self {
            DelayModel::Fixed(d) => *d as f64 * 2.0,
            DelayModel::Uniform { min, max } => (min + max) as f64,
            DelayModel::Chain(stages) => stages.iter().map(|s| (s.min + s.max) as f64).sum(),
            DelayModel::Empirical(_) => unreachable!("returned above"),
        }) / 2.0
    }

    /// Draws one report's delay, in milliseconds.
    #[inline]
    pub fn sample(&self, rng: &mut WorldRng) -> Millis {
        match self {
            DelayModel::Fixed(d) => *d,
            DelayModel::Uniform { min, max } => rng.uniform(*min, *max),
            DelayModel::Chain(stages) => stages.iter().map(|s| rng.uniform(s.min, s.max)).sum(),
            DelayModel::Empirical(e) => e.sample(rng),
        }
    }

    /// The delay in whole seconds when every report takes the same whole number of seconds:
    /// the case the lesson's engine handles.
    pub fn fixed_whole_seconds(&self) -> Option<u64> {
        match self {
            DelayModel::Fixed(d) if d % 1000 == 0 => Some(d / 1000),
            _ => None,
        }
    }

    /// A one-line description for outputs, such as `fixed 20 s` or
    /// `chain of 4 stages, mean 13.53 s, worst 26.36 s`.
    pub fn describe(&self) -> String {
        match self {
            DelayModel::Fixed(d) => format!("fixed {} s", seconds(*d)),
            DelayModel::Uniform { min, max } => {
                format!("uniform {} to {} s", seconds(*min), seconds(*max))
            }
            DelayModel::Chain(stages) => format!(
                "chain of {} stages, mean {} s, worst {} s",
                stages.len(),
                seconds_f(self.mean_ms()),
                seconds(self.max_ms())
            ),
            DelayModel::Empirical(e) => format!(
                "empirical {}, median {} s, mean {} s, worst {} s",
                e.label(),
                seconds_f(e.quantile(0.5)),
                seconds_f(e.mean_ms()),
                seconds(e.max_ms())
            ),
        }
    }
}

/// Parses a report-delay model as the command line writes it: `fixed:S`, `uniform:MIN:MAX`,
/// `lesson-chain`, with seconds whole or to the millisecond (`fixed:0.5`), or `empirical:FILE`,
/// the `report-delay` model of a `setpoint calibrate` model file.
pub fn parse_delay_model(text: &str) -> Result<DelayModel, String> {
    parse_model(text, DelayKind::ReportDelay)
}

/// Parses a startup-time model: the syntax of [`parse_delay_model`], where `empirical:FILE`
/// takes the file's `startup` model.
pub fn parse_startup_model(text: &str) -> Result<DelayModel, String> {
    parse_model(text, DelayKind::Startup)
}

/// Parses a model of the given kind of delay; `empirical:FILE` reads the file's model of that
/// kind.
pub fn parse_model(text: &str, kind: DelayKind) -> Result<DelayModel, String> {
    if let Some(path) = text.trim().strip_prefix("empirical:") {
        let e = crate::calibrate::model_file::load_kind(std::path::Path::new(path), kind)
            .map_err(|e| e.to_string())?;
        return Ok(DelayModel::Empirical(std::sync::Arc::new(e)));
    }
    let accepted = "accepted: fixed:S, uniform:MIN:MAX, lesson-chain (in seconds to the millisecond) or empirical:FILE";
    let secs = |s: &str| -> Result<Millis, String> {
        let s = s.trim();
        let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
        let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(frac) || frac.len() > 3 {
            return Err(format!(
                "'{s}' is not a number of seconds to the millisecond"
            ));
        }
        let ms = whole
            .parse::<u64>()
            .ok()
            .and_then(|w| w.checked_mul(1000))
            .and_then(|w| w.checked_add(format!("{frac:0<3}").parse::<u64>().unwrap_or(0)))
            .filter(|&ms| ms <= MAX_DELAY_MS)
            .ok_or_else(|| {
                format!(
                    "'{s}' is out of range: accepted 0 to {} seconds",
                    MAX_DELAY_MS / 1000
                )
            })?;
        Ok(ms)
    };
    let parts: Vec<&str> = text.trim().split(':').collect();
    let model = match parts.as_slice() {
        ["lesson-chain"] => DelayModel::lesson_chain(),
        ["fixed", s] => DelayModel::Fixed(secs(s).map_err(|e| format!("{e}; {accepted}"))?),
        ["uniform", lo, hi] => {
            let (min, max) = (
                secs(lo).map_err(|e| format!("{e}; {accepted}"))?,
                secs(hi).map_err(|e| format!("{e}; {accepted}"))?,
            );
            if min > max {
                return Err(format!("uniform min {lo} is above max {hi}; {accepted}"));
            }
            DelayModel::Uniform { min, max }
        }
        _ => return Err(format!("unknown delay model '{text}'; {accepted}")),
    };
    Ok(model)
}

/// Milliseconds as seconds, with no trailing zeros: 20000 → "20", 26360 → "26.36".
pub fn seconds(ms: Millis) -> String {
    if ms % 1000 == 0 {
        (ms / 1000).to_string()
    } else {
        let s = format!("{}.{:03}", ms / 1000, ms % 1000);
        s.trim_end_matches('0').to_owned()
    }
}

fn seconds_f(ms: f64) -> String {
    let s = format!("{:.3}", ms / 1000.0);
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The whole seconds after which a report with `ms` of delay is on the ledger: `⌈ms / 1000⌉`.
pub fn whole_seconds(ms: Millis) -> u64 {
    ms.div_ceil(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lesson_chain_has_the_lessons_mean_and_worst_case() {
        let chain = DelayModel::lesson_chain();
        assert_eq!(chain.mean_ms(), 13_530.0);
        assert_eq!(chain.max_ms(), 26_360);
        assert_eq!(
            chain.describe(),
            "chain of 4 stages, mean 13.53 s, worst 26.36 s"
        );
    }

    #[test]
    fn lesson_chain_samples_average_near_its_mean_and_never_exceed_its_worst() {
        let chain = DelayModel::lesson_chain();
        let mut rng = WorldRng::new(7);
        let n = 200_000;
        let (mut sum, mut max) = (0u64, 0u64);
        for _ in 0..n {
            let d = chain.sample(&mut rng);
            sum += d;
            max = max.max(d);
        }
        let mean = sum as f64 / n as f64;
        assert!((mean - 13_530.0).abs() < 30.0, "mean {mean}");
        assert!(max <= 26_360);
        assert!(max > 24_000, "max {max}");
    }

    /// The draws of the rejection sampler as it was written before issue 24 (three divisions a
    /// draw): the faster one must draw the same values from the same seeds.
    fn uniform_before(rng: &mut ChaCha8Rng, lo: u64, hi: u64) -> u64 {
        if lo == hi {
            return lo;
        }
        let range = hi - lo;
        if range == u64::MAX {
            return rng.next_u64();
        }
        let range = range + 1;
        let rem = (u64::MAX % range).wrapping_add(1) % range;
        loop {
            let x = rng.next_u64();
            if rem == 0 || x <= u64::MAX - rem {
                return lo + x % range;
            }
        }
    }

    #[test]
    fn uniform_draws_what_it_drew_before() {
        // Ranges just above a power of two reject about half of all draws: the rare path runs.
        let ranges = [
            (0, 1),
            (10, 13),
            (0, 999),
            (5000, 30_000),
            (0, (1 << 63) + 1),
            (7, u64::MAX - 3),
            (0, u64::MAX),
            (4, 4),
        ];
        for seed in 0..20 {
            let mut new = WorldRng::new(seed);
            let mut old = ChaCha8Rng::seed_from_u64(seed);
            for _ in 0..500 {
                for &(lo, hi) in &ranges {
                    assert_eq!(new.uniform(lo, hi), uniform_before(&mut old, lo, hi));
                }
            }
        }
    }

    #[test]
    fn uniform_draws_cover_both_ends_and_nothing_outside() {
        let mut rng = WorldRng::new(1);
        let mut seen = [0u32; 4];
        for _ in 0..4000 {
            let x = rng.uniform(10, 13);
            seen[(x - 10) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800), "{seen:?}");
    }

    #[test]
    fn the_same_seed_draws_the_same_delays() {
        let chain = DelayModel::lesson_chain();
        let (mut a, mut b) = (WorldRng::new(42), WorldRng::new(42));
        let xs: Vec<_> = (0..100).map(|_| chain.sample(&mut a)).collect();
        let ys: Vec<_> = (0..100).map(|_| chain.sample(&mut b)).collect();
        assert_eq!(xs, ys);
        let mut c = WorldRng::new(43);
        let zs: Vec<_> = (0..100).map(|_| chain.sample(&mut c)).collect();
        assert_ne!(xs, zs);
    }

    #[test]
    fn delay_models_parse_from_the_command_line() {
        assert_eq!(parse_delay_model("fixed:20"), Ok(DelayModel::Fixed(20_000)));
        assert_eq!(parse_delay_model("fixed:0.5"), Ok(DelayModel::Fixed(500)));
        assert_eq!(
            parse_delay_model("uniform:5:30.25"),
            Ok(DelayModel::Uniform {
                min: 5000,
                max: 30_250
            })
        );
        assert_eq!(
            parse_delay_model("lesson-chain"),
            Ok(DelayModel::lesson_chain())
        );
        for bad in [
            "fixed",
            "fixed:-1",
            "fixed:1.0001",
            "uniform:9:3",
            "gamma:1",
            "fixed:1e3",
        ] {
            assert!(parse_delay_model(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn seconds_print_without_trailing_zeros() {
        assert_eq!(seconds(20_000), "20");
        assert_eq!(seconds(26_360), "26.36");
        assert_eq!(seconds(500), "0.5");
        assert_eq!(whole_seconds(13_001), 14);
        assert_eq!(whole_seconds(13_000), 13);
    }
}
