//! `--format`, the same for every command that prints data: `table`, `json` (one object per
//! line; `jsonl` is accepted as another name for it) or `csv`. The records themselves are
//! setpoint-sim's ([`setpoint_sim::output`], `docs/output.md`).

use clap::ValueEnum;
use setpoint_sim::output;

/// Output formats of every data-printing command.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Format {
    /// Columns lined up for people.
    Table,
    /// One JSON object per line (also accepted as `jsonl`).
    #[value(alias = "jsonl")]
    Json,
    /// A header line, then one line per record.
    Csv,
}

impl From<Format> for output::Format {
    fn from(f: Format) -> Self {
        match f {
            Format::Table => output::Format::Table,
            Format::Json => output::Format::Json,
            Format::Csv => output::Format::Csv,
        }
    }
}
