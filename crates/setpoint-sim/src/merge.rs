//! Joining the outputs of a sharded sweep (`setpoint sweep --shard I/N`) into the bytes of the
//! whole sweep.
//!
//! Every sweep row carries its cell's number (`cell`, the second key). A shard's output ends with
//! one **trailer** line that says which shard it is and how many cells the whole grid has
//! ([`trailer`]): `# shard 2/4 of 1000 cells` in CSV (a comment line, which CSV readers such as
//! pandas skip with `comment='#'`), `{"shard":"2/4","grid_cells":1000}` in JSON. The merge
//! checks every file against its trailer: the cells it holds must be exactly that shard's range
//! ([`crate::sweep::Shard::range`]), all files must name the same N and cell count, no index may
//! come twice, and every index from 1 to N must be there, the last one too. Then it drops the
//! trailers and concatenates the rows in shard order, which are exactly the bytes of the
//! unsharded sweep. The inputs may come in any order.
//!
//! The trailer is written after the last row, so a shard cut off while it ran (no trailer) is
//! refused instead of silently merged short. A shard whose range holds no cell (more shards
//! than cells) is the trailer alone in JSON, or the header and the trailer in CSV.

use thiserror::Error;

use crate::sweep::{Shard, MAX_SHARDS};

/// Why shard outputs could not be merged. Every message names the file.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MergeError {
    /// Nothing to merge.
    #[error(
        "no shard output given: accepted one or more files written by `setpoint sweep --shard I/N`"
    )]
    NoInput,
    /// A file that is not a sweep's output, or a row without a cell number.
    #[error(
        "{file}:{line}: {reason}; accepted: the CSV or JSON output of `setpoint sweep --shard I/N`"
    )]
    NotASweep {
        /// The file as named.
        file: String,
        /// The line, from 1.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A file without the shard trailer: cut off while it was written, or not a shard's output.
    #[error("{file}: its last line is not a shard trailer (`{example}`): the shard did not finish, or the file is not the output of `setpoint sweep --shard I/N`")]
    NoTrailer {
        /// The file as named.
        file: String,
        /// What the trailer looks like in the file's format.
        example: &'static str,
    },
    /// Files of different formats, different CSV headers or different grids: not shards of one
    /// sweep.
    #[error("{file}: {reason}: the files are not shards of one sweep")]
    Mismatch {
        /// The file that differs from the first.
        file: String,
        /// How it differs.
        reason: String,
    },
    /// A shard that no file holds.
    #[error("shard {index}/{count} (cells {range}) is missing: no file given holds it; accepted: the output of every shard from 1/{count} to {count}/{count}")]
    Missing {
        /// The missing shard, from 1.
        index: u64,
        /// How many shards the grid was cut into.
        count: u64,
        /// The cells it would hold, as text.
        range: String,
    },
    /// Two files hold the same shard.
    #[error("{file} and {other} are both shard {index}/{count}: a shard given twice?")]
    Twice {
        /// One file.
        file: String,
        /// The other.
        other: String,
        /// The shard, from 1.
        index: u64,
        /// How many shards.
        count: u64,
    },
}

/// The last line of shard `shard`'s output of a grid of `cells` cells, with its newline: what
/// lets [`merge`] see a missing shard. `csv` picks the CSV form over the JSON one.
pub fn trailer(shard: Shard, cells: u64, csv: bool) -> String {
    let (i, n) = (shard.index + 1, shard.count);
    if csv {
        format!("# shard {i}/{n} of {cells} cells\n")
    } else {
        format!("{{\"shard\":\"{i}/{n}\",\"grid_cells\":{cells}}}\n")
    }
}

/// Reads a trailer line back: (shard, the grid's cells).
fn parse_trailer(line: &str, csv: bool) -> Option<(Shard, u64)> {
    let (shard, cells) = if csv {
        let rest = line.strip_prefix("# shard ")?.strip_suffix(" cells")?;
        rest.split_once(" of ")?
    } else {
        let rest = line.strip_prefix("{\"shard\":\"")?.strip_suffix('}')?;
        rest.split_once("\",\"grid_cells\":")?
    };
    let (i, n) = shard.split_once('/')?;
    let (i, n): (u64, u64) = (i.parse().ok()?, n.parse().ok()?);
    if n == 0 || n > MAX_SHARDS || i == 0 || i > n {
        return None;
    }
    Some((
        Shard {
            index: i - 1,
            count: n,
        },
        cells.parse().ok()?,
    ))
}

/// One parsed shard: its file name, which shard it is, and its rows' text.
struct Part<'a> {
    name: &'a str,
    shard: Shard,
    body: &'a str,
}

/// Merges shard outputs, given as (file name, contents), into the whole sweep's output.
pub fn merge(inputs: &[(String, String)]) -> Result<String, MergeError> {
    let Some((first_name, first_text)) = inputs.first() else {
        return Err(MergeError::NoInput);
    };
    let csv = is_csv(first_text);
    let header = csv.then(|| first_text.lines().next().unwrap_or(""));
    let mut parts: Vec<Part> = Vec::new();
    let mut grid: Option<(u64, u64, &str)> = None;
    for (name, text) in inputs {
        if is_csv(text) != csv {
            return Err(MergeError::Mismatch {
                file: name.clone(),
                reason: format!(
                    "it is {} but {first_name} is {}",
                    format_name(is_csv(text)),
                    format_name(csv)
                ),
            });
        }
        let rows = text.strip_suffix('\n').unwrap_or(text);
        let (rows, last) = match rows.rsplit_once('\n') {
            Some((rows, last)) => (rows, last),
            None => ("", rows),
        };
        let (shard, cells) = parse_trailer(last, csv).ok_or_else(|| MergeError::NoTrailer {
            file: name.clone(),
            example: if csv {
                "# shard I/N of CELLS cells"
            } else {
                "{\"shard\":\"I/N\",\"grid_cells\":CELLS}"
            },
        })?;
        match grid {
            None => grid = Some((shard.count, cells, name)),
            Some((count, total, other)) if (count, total) != (shard.count, cells) => {
                return Err(MergeError::Mismatch {
                    file: name.clone(),
                    reason: format!(
                        "it is a shard of {} of a {cells}-cell grid but {other} of {count} of a {total}-cell grid",
                        shard.count
                    ),
                });
            }
            Some(_) => {}
        }
        let (body, column, skip) = if let Some(h) = header {
            let (head, body) = rows.split_once('\n').unwrap_or((rows, ""));
            if head != h {
                return Err(MergeError::Mismatch {
                    file: name.clone(),
                    reason: format!("its CSV header differs from {first_name}'s"),
                });
            }
            let column =
                h.split(',')
                    .position(|k| k == "cell")
                    .ok_or_else(|| MergeError::NotASweep {
                        file: name.clone(),
                        line: 1,
                        reason: "the header has no 'cell' column".into(),
                    })?;
            (body, Some(column), 1)
        } else {
            (rows, None, 0)
        };
        let expected = shard.range(cells);
        let mut next = expected.start;
        for (k, line) in body.lines().enumerate() {
            let bad = |reason: String| MergeError::NotASweep {
                file: name.clone(),
                line: k + 1 + skip,
                reason,
            };
            let cell = match column {
                Some(c) => line
                    .split(',')
                    .nth(c)
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| bad("no cell number in the 'cell' column".into()))?,
                None => json_cell(line).ok_or_else(|| bad("no \"cell\" number".into()))?,
            };
            if cell != next || cell >= expected.end {
                return Err(bad(format!(
                    "cell {cell} where shard {}/{} of {cells} cells holds cell {next} (cells {})",
                    shard.index + 1,
                    shard.count,
                    range_text(&expected)
                )));
            }
            next += 1;
        }
        if next != expected.end {
            return Err(MergeError::NotASweep {
                file: name.clone(),
                line: body.lines().count() + skip + 1,
                reason: format!(
                    "the rows end at cell {next}, but shard {}/{} holds cells {}",
                    shard.index + 1,
                    shard.count,
                    range_text(&expected)
                ),
            });
        }
        if let Some(p) = parts.iter().find(|p| p.shard == shard) {
            return Err(MergeError::Twice {
                file: p.name.to_owned(),
                other: name.clone(),
                index: shard.index + 1,
                count: shard.count,
            });
        }
        parts.push(Part { name, shard, body });
    }
    let (count, cells, _) = grid.expect("at least one input was read");
    parts.sort_by_key(|p| p.shard.index);
    if let Some(index) =
        (0..count).find(|&i| parts.get(i as usize).map(|p| p.shard.index) != Some(i))
    {
        let missing = Shard { index, count };
        return Err(MergeError::Missing {
            index: index + 1,
            count,
            range: range_text(&missing.range(cells)),
        });
    }
    let mut out = String::with_capacity(inputs.iter().map(|(_, t)| t.len()).sum());
    if let Some(h) = header {
        out.push_str(h);
        out.push('\n');
    }
    for p in &parts {
        if !p.body.is_empty() {
            out.push_str(p.body);
            out.push('\n');
        }
    }
    Ok(out)
}

/// `a to b` of a cell range, or `none` for an empty one.
fn range_text(r: &std::ops::Range<u64>) -> String {
    if r.is_empty() {
        "none".into()
    } else {
        format!("{} to {}", r.start, r.end - 1)
    }
}

fn is_csv(text: &str) -> bool {
    !text.starts_with('{')
}

fn format_name(csv: bool) -> &'static str {
    if csv {
        "CSV"
    } else {
        "JSON"
    }
}

/// The number after the first `"cell":` of a JSON row.
fn json_cell(line: &str) -> Option<u64> {
    let at = line.find("\"cell\":")? + "\"cell\":".len();
    let digits: &str = &line[at..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unsharded sweep's CSV of `cells` cells.
    fn whole(cells: u64) -> String {
        let mut t = String::from("schema,cell,x\n");
        for c in 0..cells {
            t.push_str(&format!("1,{c},{}\n", c * 10));
        }
        t
    }

    /// Shard `i` of `n` (from 1) of that sweep, as `sweep --shard` writes it.
    fn csv(name: &str, i: u64, n: u64, cells: u64) -> (String, String) {
        let shard = Shard::parse(&format!("{i}/{n}")).unwrap();
        let mut t = String::from("schema,cell,x\n");
        for c in shard.range(cells) {
            t.push_str(&format!("1,{c},{}\n", c * 10));
        }
        t.push_str(&trailer(shard, cells, true));
        (name.to_owned(), t)
    }

    #[test]
    fn shards_in_any_order_merge_into_the_whole_sweep() {
        let merged = merge(&[csv("c", 3, 3, 7), csv("a", 1, 3, 7), csv("b", 2, 3, 7)]).unwrap();
        assert_eq!(merged, whole(7));
        // More shards than cells: the empty shards are a header and a trailer, and add nothing.
        let all: Vec<_> = (1..=5)
            .rev()
            .map(|i| csv(&format!("s{i}"), i, 5, 3))
            .collect();
        assert_eq!(merge(&all).unwrap(), whole(3));
    }

    #[test]
    fn a_missing_middle_or_last_shard_and_a_shard_given_twice_are_refused() {
        let err = merge(&[csv("a", 1, 3, 7), csv("c", 3, 3, 7)]).unwrap_err();
        assert_eq!(err.to_string(), "shard 2/3 (cells 2 to 3) is missing: no file given holds it; accepted: the output of every shard from 1/3 to 3/3");
        let err = merge(&[csv("b", 2, 3, 7), csv("a", 1, 3, 7)]).unwrap_err();
        assert_eq!(
            err,
            MergeError::Missing {
                index: 3,
                count: 3,
                range: "4 to 6".into()
            }
        );
        // Even when the missing last shard would have held no cell.
        let err = merge(&[csv("a", 1, 3, 2), csv("b", 2, 3, 2)]).unwrap_err();
        assert!(matches!(err, MergeError::Missing { index: 3, .. }), "{err}");
        let err = merge(&[csv("a", 1, 2, 7), csv("b", 2, 2, 7), csv("b2", 2, 2, 7)]).unwrap_err();
        assert!(matches!(err, MergeError::Twice { index: 2, .. }), "{err}");
    }

    #[test]
    fn shards_of_different_grids_and_a_cut_off_shard_are_refused() {
        let err = merge(&[csv("a", 1, 2, 7), csv("b", 2, 3, 7)]).unwrap_err();
        assert!(matches!(err, MergeError::Mismatch { .. }), "{err}");
        let err = merge(&[csv("a", 1, 2, 7), csv("b", 2, 2, 8)]).unwrap_err();
        assert!(matches!(err, MergeError::Mismatch { .. }), "{err}");
        // The rows of a shard that stopped before its trailer.
        let (name, text) = csv("a", 1, 1, 7);
        let cut = text.lines().take(4).map(|l| format!("{l}\n")).collect();
        let err = merge(&[(name.clone(), cut)]).unwrap_err();
        assert!(matches!(err, MergeError::NoTrailer { .. }), "{err}");
        // A trailer that claims more cells than the file holds.
        let short = text.replace("1,6,60\n", "");
        let err = merge(&[(name, short)]).unwrap_err().to_string();
        assert!(
            err.contains("the rows end at cell 6, but shard 1/1 holds cells 0 to 6"),
            "{err}"
        );
    }

    #[test]
    fn json_rows_merge_and_mixed_formats_are_refused() {
        let row = |c: u64| format!("{{\"schema\":1,\"cell\":{c},\"x\":1}}\n");
        let shard = |i: u64| Shard::parse(&format!("{i}/2")).unwrap();
        let a = (
            "a".to_owned(),
            row(2) + &row(3) + &trailer(shard(2), 4, false),
        );
        let b = (
            "b".to_owned(),
            row(0) + &row(1) + &trailer(shard(1), 4, false),
        );
        assert_eq!(
            merge(&[a.clone(), b]).unwrap(),
            (0..4).map(row).collect::<String>()
        );
        assert!(matches!(
            merge(&[a, csv("c", 1, 2, 4)]),
            Err(MergeError::Mismatch { .. })
        ));
    }

    #[test]
    fn a_file_out_of_cell_order_is_not_a_shard() {
        let bad = (
            "x".to_owned(),
            "schema,cell\n1,0\n1,2\n# shard 1/1 of 3 cells\n".to_owned(),
        );
        let err = merge(&[bad]).unwrap_err().to_string();
        assert_eq!(err, "x:3: cell 2 where shard 1/1 of 3 cells holds cell 1 (cells 0 to 2); accepted: the CSV or JSON output of `setpoint sweep --shard I/N`");
    }

    #[test]
    fn trailers_read_back() {
        for csv in [true, false] {
            let s = Shard::parse("3/8").unwrap();
            let t = trailer(s, 99, csv);
            assert_eq!(parse_trailer(t.trim_end(), csv), Some((s, 99)));
            assert_eq!(parse_trailer(t.trim_end(), !csv), None);
        }
        assert_eq!(parse_trailer("# shard 0/8 of 9 cells", true), None);
        assert_eq!(parse_trailer("# shard 9/8 of 9 cells", true), None);
    }
}
