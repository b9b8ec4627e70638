//! Shards: the contiguous part of a grid's cells that one machine runs.

use std::ops::Range;

use super::GridError;

/// Which part of a grid one machine runs: shard `index` (from 0) of `count`. Shard `i` of `n`
/// runs the cells `⌊i·cells/n⌋ ..< ⌊(i+1)·cells/n⌋`, a contiguous run in cell order, so the
/// shards' outputs concatenated in shard order are the whole sweep's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard, from 0.
    pub index: u64,
    /// How many shards the grid is cut into, at least 1.
    pub count: u64,
}

/// The most shards a grid may be cut into.
pub const MAX_SHARDS: u64 = 1_000_000;

impl Shard {
    /// The whole grid.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Parses `I/N` with I from 1 to N, as the command line writes it (shard 1 is the first).
    pub fn parse(text: &str) -> Result<Shard, GridError> {
        let bad = |reason: &str| GridError::BadShard {
            value: text.to_owned(),
            reason: reason.to_owned(),
        };
        let (i, n) = text.trim().split_once('/').ok_or_else(|| bad("no '/'"))?;
        let i: u64 = i
            .trim()
            .parse()
            .map_err(|_| bad("I is not a whole number"))?;
        let n: u64 = n
            .trim()
            .parse()
            .map_err(|_| bad("N is not a whole number"))?;
        if n == 0 || n > MAX_SHARDS {
            return Err(bad("N is out of range"));
        }
        if i == 0 || i > n {
            return Err(bad("I is out of range"));
        }
        Ok(Shard {
            index: i - 1,
            count: n,
        })
    }

    /// The cells of this shard in a grid of `cells` cells.
    pub fn range(&self, cells: u64) -> Range<u64> {
        let at = |k: u64| (u128::from(k) * u128::from(cells) / u128::from(self.count)) as u64;
        at(self.index)..at(self.index + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cut_the_grid_into_contiguous_runs_that_cover_it_once() {
        for cells in [0u64, 1, 7, 100] {
            for count in [1u64, 3, 8] {
                let mut next = 0;
                for index in 0..count {
                    let r = Shard { index, count }.range(cells);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, cells);
            }
        }
        assert_eq!(Shard::parse("2/8").unwrap(), Shard { index: 1, count: 8 });
        for bad in ["0/8", "9/8", "1/0", "x", "1/x"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }
}
