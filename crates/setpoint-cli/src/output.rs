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

/// `value` (a struct or map that serializes to a JSON object) as one line of JSON with
/// `schema` as its first key, as every record has it (`docs/output.md`): for the commands whose
/// JSON is one nested object (`advise`, `relation`, `get`, `status`, `measure`, `experiment`).
pub fn json_with_schema<T: serde::Serialize>(value: &T) -> serde_json::Result<String> {
    let body = serde_json::to_string(value)?;
    let rest = body.strip_prefix('{').unwrap_or(&body);
    let sep = if rest == "}" { "" } else { "," };
    Ok(format!("{{\"schema\":{}{sep}{rest}\n", output::SCHEMA))
}
