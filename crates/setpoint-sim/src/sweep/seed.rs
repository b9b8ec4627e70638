//! A cell's seed, and the canonical names of its delay and startup that the seed hashes and the
//! rows print.

use serde::{Serialize, Serializer};
use setpoint_core::ControllerKind;

use super::Cell;
use crate::delay::{seconds, DelayModel};
use crate::output::Value;

/// The first seed of a cell: a hash (SplitMix64 steps) of the base seed and the cell's
/// coordinates, by value, never by position, so a cell has the same seeds whether it is swept
/// alone or in any grid, on any number of threads or shards. The delay enters as the FNV-1a hash
/// of its canonical text ([`model_text`]), so `-G 20` and `--delay-model fixed:20` give the same
/// seeds. The startup enters as its seconds, or, for a cell with a startup model, as the FNV-1a
/// hash of the model's canonical text ([`StartupName`]). Run `i` of the cell uses
/// `cell_seed + i`, wrapping.
pub fn cell_seed(base: u64, cell: &Cell, model: &ModelName<'_>, startup: &StartupName<'_>) -> u64 {
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let controller = ControllerKind::ALL
        .iter()
        .position(|&k| k == cell.controller)
        .unwrap_or(0) as u64;
    [
        cell.desired,
        cell.period,
        model.fnv(),
        match startup {
            StartupName::Seconds(b) => *b,
            StartupName::Model(t) => ModelName::Text(t).fnv(),
        },
        cell.ttl,
        cell.burst,
        controller,
    ]
    .into_iter()
    .fold(mix(base), |h, x| mix(h ^ x))
}

/// A cell's delay model by its canonical text ([`model_text`]), without allocating for the
/// delay axis's fixed seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelName<'a> {
    /// `fixed:S`, whole seconds.
    Fixed(u64),
    /// Any other model's text.
    Text(&'a str),
}

impl ModelName<'_> {
    /// FNV-1a of the text.
    fn fnv(&self) -> u64 {
        let step = |h: u64, b: u8| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        let basis = 0xcbf2_9ce4_8422_2325u64;
        match self {
            ModelName::Text(t) => t.bytes().fold(basis, step),
            ModelName::Fixed(g) => {
                let mut digits = [0u8; 20];
                let mut n = *g;
                let mut k = digits.len();
                loop {
                    k -= 1;
                    digits[k] = b'0' + (n % 10) as u8;
                    n /= 10;
                    if n == 0 {
                        break;
                    }
                }
                digits[k..]
                    .iter()
                    .fold(b"fixed:".iter().fold(basis, |h, &b| step(h, b)), |h, &b| {
                        step(h, b)
                    })
            }
        }
    }
}

impl std::fmt::Display for ModelName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelName::Fixed(g) => write!(f, "fixed:{g}"),
            ModelName::Text(t) => f.write_str(t),
        }
    }
}

impl Serialize for ModelName<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A cell's startup as its row writes it: whole seconds (`-B`), or a startup model's canonical
/// text ([`model_text`]; `--startup-model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartupName<'a> {
    /// Every copy takes this many seconds to start.
    Seconds(u64),
    /// Each copy's startup is drawn from the model of this text.
    Model(&'a str),
}

impl std::fmt::Display for StartupName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartupName::Seconds(b) => write!(f, "{b}"),
            StartupName::Model(t) => f.write_str(t),
        }
    }
}

impl Serialize for StartupName<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StartupName::Seconds(b) => s.serialize_u64(*b),
            StartupName::Model(t) => s.serialize_str(t),
        }
    }
}

impl From<StartupName<'_>> for Value {
    fn from(v: StartupName<'_>) -> Value {
        match v {
            StartupName::Seconds(b) => Value::U64(b),
            StartupName::Model(t) => Value::Str(t.to_owned()),
        }
    }
}

/// The canonical text of a delay model on a sweep's axis: `fixed:S`, `uniform:MIN:MAX` (seconds
/// to the millisecond) or `lesson-chain`; another chain by its description.
pub fn model_text(model: &DelayModel) -> String {
    match model {
        DelayModel::Fixed(d) => format!("fixed:{}", seconds(*d)),
        DelayModel::Uniform { min, max } => format!("uniform:{}:{}", seconds(*min), seconds(*max)),
        DelayModel::Empirical(e) => format!("empirical:{}", e.label()),
        chain if *chain == DelayModel::lesson_chain() => "lesson-chain".into(),
        chain => chain.describe(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lesson_world::Limit;
    use crate::sweep::testing::{axis, grid, startup_grid};
    use crate::sweep::{parse_delay_models, Axis, CellDelay, Grid, GridSpec};
    use setpoint_core::ControllerKind::{Intent, Ledger};

    fn seeds_of(g: &Grid) -> Vec<(Cell, u64)> {
        (0..g.cells())
            .map(|i| (g.cell(i), g.row(i).unwrap().seed))
            .collect()
    }

    #[test]
    fn a_cells_seed_depends_on_its_coordinates_not_its_place_in_the_grid() {
        let models = parse_delay_models("fixed:20,lesson-chain,uniform:0:30").unwrap();
        let big = Grid::new(GridSpec {
            desired: axis(Limit::DESIRED, "3,6"),
            delay_models: models.clone(),
            controller: vec![Ledger, ControllerKind::Named],
            seed: 9,
            ..GridSpec::default()
        })
        .unwrap();
        for (cell, seed) in seeds_of(&big) {
            let k = match cell.delay_of {
                CellDelay::Model(k) => k,
                CellDelay::Seconds(_) => unreachable!(),
            };
            let alone = Grid::new(GridSpec {
                desired: Axis::single(cell.desired),
                delay_models: vec![models[k].clone()],
                controller: vec![cell.controller],
                seed: 9,
                ..GridSpec::default()
            })
            .unwrap();
            assert_eq!(seeds_of(&alone)[0].1, seed, "{cell:?}");
        }
        // The fixed axis and the model axis name the same delay alike.
        let by_axis = grid("20", "15", "5");
        let by_model = Grid::new(GridSpec {
            delay_models: vec![DelayModel::fixed_seconds(20)],
            controller: vec![Ledger, Intent],
            ..GridSpec::default()
        })
        .unwrap();
        assert_eq!(seeds_of(&by_axis)[0].1, seeds_of(&by_model)[0].1);
        let other_base = Grid::new(GridSpec {
            seed: 10,
            ..by_axis.spec().clone()
        })
        .unwrap();
        assert_ne!(seeds_of(&by_axis)[0].1, seeds_of(&other_base)[0].1);
    }

    #[test]
    fn a_startup_model_cells_seed_is_its_own_wherever_it_is_swept() {
        let big = startup_grid("uniform:1:9,fixed:3", 4);
        let alone = startup_grid("fixed:3", 4);
        let in_big: Vec<u64> = (0..big.cells())
            .filter(|&i| big.row(i).unwrap().startup == StartupName::Model("fixed:3"))
            .map(|i| big.row(i).unwrap().seed)
            .collect();
        let by_itself: Vec<u64> = (0..alone.cells())
            .map(|i| alone.row(i).unwrap().seed)
            .collect();
        assert_eq!(in_big, by_itself);
        let all: std::collections::BTreeSet<u64> =
            (0..big.cells()).map(|i| big.row(i).unwrap().seed).collect();
        assert_eq!(all.len() as u64, big.cells(), "no two cells share a seed");
        let other_base = startup_grid("fixed:3", 5);
        assert_ne!(other_base.row(0).unwrap().seed, by_itself[0]);
    }
}
