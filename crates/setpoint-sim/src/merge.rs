//! Joining the outputs of a sharded sweep (`setpoint sweep --shard I/N`) into the bytes of the
//! whole sweep.
//!
//! Every sweep row carries its cell's number (`cell`, the second key). Each shard is a run of
//! consecutive cells in order, so the merge puts the shards in the order of their first cell
//! and concatenates them, after checking that together they hold every cell from 0 to the last
//! exactly once: no gap, no overlap, no shard given twice, one format and one CSV header. The
//! inputs may come in any order. A shard whose range held no cell (more shards than cells) is
//! an empty JSON file or a bare CSV header, and adds nothing.
//!
//! What the merge cannot see is a missing *last* shard: the rows do not say how many cells the
//! grid has. Pass every shard (a Kubernetes Indexed Job's or Slurm array's outputs all land in
//! one directory; `docs/distributed.md`).

use thiserror::Error;

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
    /// Files of different formats, or CSV files with different headers: not shards of one sweep.
    #[error("{file}: {reason}: the files are not shards of one sweep")]
    Mismatch {
        /// The file that differs from the first.
        file: String,
        /// How it differs.
        reason: String,
    },
    /// Cells missing between two shards, or before the first.
    #[error("cells {from} to {to} are missing: no file holds them (a shard not given?)")]
    Gap {
        /// The first missing cell.
        from: u64,
        /// The last missing cell.
        to: u64,
    },
    /// Two files hold the same cell.
    #[error("{file} and {other} both hold cell {cell}: a shard given twice?")]
    Overlap {
        /// One file.
        file: String,
        /// The other.
        other: String,
        /// The first cell both hold.
        cell: u64,
    },
}

/// One parsed shard: its file name, the cell range it holds, and its rows' text.
struct Part<'a> {
    name: &'a str,
    first: u64,
    last: u64,
    body: &'a str,
}

/// Merges shard outputs, given as (file name, contents), into the whole sweep's output.
pub fn merge(inputs: &[(String, String)]) -> Result<String, MergeError> {
    let Some((first_name, first_text)) = inputs.first() else {
        return Err(MergeError::NoInput);
    };
    let csv = is_csv(first_text);
    let header = csv.then(|| first_text.lines().next().unwrap_or(""));
    let mut parts = Vec::new();
    for (name, text) in inputs {
        if text.is_empty() && !csv {
            continue;
        }
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
        let (body, column, skip) = if let Some(h) = header {
            let (head, body) = text.split_once('\n').unwrap_or((text, ""));
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
            (text.as_str(), None, 0)
        };
        let mut range: Option<(u64, u64)> = None;
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
            range = match range {
                None => Some((cell, cell)),
                Some((a, b)) if cell == b + 1 => Some((a, cell)),
                Some((_, b)) => {
                    return Err(bad(format!(
                        "cell {cell} follows cell {b}: a shard holds consecutive cells"
                    )))
                }
            };
        }
        if let Some((first, last)) = range {
            parts.push(Part {
                name,
                first,
                last,
                body,
            });
        }
    }
    parts.sort_by_key(|p| p.first);
    let mut out = String::with_capacity(inputs.iter().map(|(_, t)| t.len()).sum());
    if let Some(h) = header {
        out.push_str(h);
        out.push('\n');
    }
    let mut next = 0u64;
    for (i, p) in parts.iter().enumerate() {
        if p.first > next {
            return Err(MergeError::Gap {
                from: next,
                to: p.first - 1,
            });
        }
        if p.first < next {
            return Err(MergeError::Overlap {
                file: p.name.to_owned(),
                other: parts[i - 1].name.to_owned(),
                cell: p.first,
            });
        }
        out.push_str(p.body);
        if !p.body.ends_with('\n') {
            out.push('\n');
        }
        next = p.last + 1;
    }
    Ok(out)
}

fn is_csv(text: &str) -> bool {
    !text.is_empty() && !text.starts_with('{')
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

    fn csv(name: &str, cells: std::ops::Range<u64>) -> (String, String) {
        let mut t = String::from("schema,cell,x\n");
        for c in cells {
            t.push_str(&format!("1,{c},{}\n", c * 10));
        }
        (name.to_owned(), t)
    }

    #[test]
    fn shards_in_any_order_merge_into_cell_order() {
        let whole = csv("all", 0..7).1;
        let merged = merge(&[csv("c", 5..7), csv("a", 0..2), csv("b", 2..5)]).unwrap();
        assert_eq!(merged, whole);
    }

    #[test]
    fn a_missing_middle_shard_and_a_shard_given_twice_are_refused() {
        let err = merge(&[csv("a", 0..2), csv("c", 5..7)]).unwrap_err();
        assert_eq!(err, MergeError::Gap { from: 2, to: 4 });
        let err = merge(&[csv("a", 0..2), csv("b", 2..5), csv("b2", 2..5)]).unwrap_err();
        assert!(matches!(err, MergeError::Overlap { cell: 2, .. }), "{err}");
    }

    #[test]
    fn json_rows_merge_and_mixed_formats_are_refused() {
        let row = |c: u64| format!("{{\"schema\":1,\"cell\":{c},\"x\":1}}\n");
        let a = ("a".to_owned(), row(2) + &row(3));
        let b = ("b".to_owned(), row(0) + &row(1));
        assert_eq!(
            merge(&[a.clone(), b]).unwrap(),
            (0..4).map(row).collect::<String>()
        );
        assert!(matches!(
            merge(&[a, csv("c", 0..2)]),
            Err(MergeError::Mismatch { .. })
        ));
    }

    #[test]
    fn a_file_out_of_cell_order_is_not_a_shard() {
        let bad = ("x".to_owned(), "schema,cell\n1,0\n1,2\n".to_owned());
        let err = merge(&[bad]).unwrap_err().to_string();
        assert_eq!(err, "x:3: cell 2 follows cell 0: a shard holds consecutive cells; accepted: the CSV or JSON output of `setpoint sweep --shard I/N`");
    }
}
