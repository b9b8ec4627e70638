//! The sweep's row writer: a row lists its fields once, in order, and a [`RowSink`] turns them
//! into CSV, JSON or the header, with integers formatted by `itoa` straight into the output
//! buffer and nothing allocated per row but a float's text.
//!
//! Why: writing 1,000,000 rows through `format!` and `serde_json` took about as much CPU as
//! simulating them (perf, issue 12). The bytes are those of the plain path (`Display` for CSV,
//! the derived `Serialize` for JSON); `sweep`'s tests check both on random cells.
//!
//! A row type implements one `visit` that calls the sink once per key; adding a key is one line
//! there, and the header, both formats and their order follow from it.

/// Where a row's fields go, one call per key, in output order.
pub(crate) trait RowSink {
    /// A count or a second.
    fn u64(&mut self, key: &'static str, v: u64);
    /// A signed count.
    fn i128(&mut self, key: &'static str, v: i128);
    /// A ratio: the shortest text that reads back as the same double.
    fn f64(&mut self, key: &'static str, v: f64);
    /// A yes/no column.
    fn bool(&mut self, key: &'static str, v: bool);
    /// A name; the sweep's names hold no comma, quote or control character.
    fn str(&mut self, key: &'static str, v: &str);
    /// No value: empty in CSV, `null` in JSON.
    fn null(&mut self, key: &'static str);

    /// A count that may be absent.
    fn opt_u64(&mut self, key: &'static str, v: Option<u64>) {
        match v {
            Some(v) => self.u64(key, v),
            None => self.null(key),
        }
    }

    /// A signed count that may be absent.
    fn opt_i128(&mut self, key: &'static str, v: Option<i128>) {
        match v {
            Some(v) => self.i128(key, v),
            None => self.null(key),
        }
    }

    /// A yes/no column that may be absent.
    fn opt_bool(&mut self, key: &'static str, v: Option<bool>) {
        match v {
            Some(v) => self.bool(key, v),
            None => self.null(key),
        }
    }
}

/// One CSV line: values separated by commas, appended to `out`. Call [`Csv::end`] after the
/// last field.
pub(crate) struct Csv<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Csv<'a> {
    pub(crate) fn new(out: &'a mut String) -> Self {
        Csv { out, first: true }
    }

    fn sep(&mut self) {
        if !std::mem::take(&mut self.first) {
            self.out.push(',');
        }
    }

    /// Ends the line.
    pub(crate) fn end(self) {
        self.out.push('\n');
    }
}

impl RowSink for Csv<'_> {
    fn u64(&mut self, _: &'static str, v: u64) {
        self.sep();
        self.out.push_str(itoa::Buffer::new().format(v));
    }
    fn i128(&mut self, _: &'static str, v: i128) {
        self.sep();
        self.out.push_str(itoa::Buffer::new().format(v));
    }
    fn f64(&mut self, _: &'static str, v: f64) {
        use std::fmt::Write as _;
        self.sep();
        // Writing into a String cannot fail.
        let _ = write!(self.out, "{v}");
    }
    fn bool(&mut self, _: &'static str, v: bool) {
        self.sep();
        self.out.push_str(if v { "true" } else { "false" });
    }
    fn str(&mut self, _: &'static str, v: &str) {
        self.sep();
        debug_assert!(!v.contains([',', '"', '\n', '\r']), "{v}");
        self.out.push_str(v);
    }
    fn null(&mut self, _: &'static str) {
        self.sep();
    }
}

/// One JSON object on one line, appended to `out`. Call [`Json::end`] after the last field.
pub(crate) struct Json<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Json<'a> {
    pub(crate) fn new(out: &'a mut String) -> Self {
        out.push('{');
        Json { out, first: true }
    }

    fn key(&mut self, key: &'static str) {
        if !std::mem::take(&mut self.first) {
            self.out.push(',');
        }
        // Keys are identifiers: nothing in them needs escaping.
        debug_assert!(key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        self.out.push('"');
        self.out.push_str(key);
        self.out.push_str("\":");
    }

    /// Closes the object and ends the line.
    pub(crate) fn end(self) {
        self.out.push_str("}\n");
    }
}

impl RowSink for Json<'_> {
    fn u64(&mut self, key: &'static str, v: u64) {
        self.key(key);
        // Past 2^53 a double-precision reader would change the digits (docs/output.md).
        let exact = v <= crate::output::MAX_EXACT;
        if !exact {
            self.out.push('"');
        }
        self.out.push_str(itoa::Buffer::new().format(v));
        if !exact {
            self.out.push('"');
        }
    }
    fn i128(&mut self, key: &'static str, v: i128) {
        self.key(key);
        self.out.push_str(itoa::Buffer::new().format(v));
    }
    fn f64(&mut self, key: &'static str, v: f64) {
        self.key(key);
        // The same call as the derived path, so the same digits.
        self.out
            .push_str(&serde_json::to_string(&v).expect("a float serializes"));
    }
    fn bool(&mut self, key: &'static str, v: bool) {
        self.key(key);
        self.out.push_str(if v { "true" } else { "false" });
    }
    fn str(&mut self, key: &'static str, v: &str) {
        self.key(key);
        if v.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
            self.out.push('"');
            self.out.push_str(v);
            self.out.push('"');
        } else {
            self.out
                .push_str(&serde_json::to_string(v).expect("a string serializes"));
        }
    }
    fn null(&mut self, key: &'static str) {
        self.key(key);
        self.out.push_str("null");
    }
}

/// The keys, comma-separated: the CSV header, without a newline.
#[derive(Default)]
pub(crate) struct Header {
    pub(crate) text: String,
}

impl Header {
    fn key(&mut self, key: &'static str) {
        if !self.text.is_empty() {
            self.text.push(',');
        }
        self.text.push_str(key);
    }
}

impl RowSink for Header {
    fn u64(&mut self, key: &'static str, _: u64) {
        self.key(key);
    }
    fn i128(&mut self, key: &'static str, _: i128) {
        self.key(key);
    }
    fn f64(&mut self, key: &'static str, _: f64) {
        self.key(key);
    }
    fn bool(&mut self, key: &'static str, _: bool) {
        self.key(key);
    }
    fn str(&mut self, key: &'static str, _: &str) {
        self.key(key);
    }
    fn null(&mut self, key: &'static str) {
        self.key(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(s: &mut impl RowSink) {
        s.u64("a", 0);
        s.i128("b", -12);
        s.f64("c", 0.1 + 0.2);
        s.opt_bool("d", Some(true));
        s.opt_u64("e", None);
        s.str("f", "fixed:20");
        s.u64("g", u64::MAX);
    }

    #[test]
    fn each_sink_writes_the_plain_formatting() {
        let mut csv = String::new();
        let mut c = Csv::new(&mut csv);
        fields(&mut c);
        c.end();
        assert_eq!(
            csv,
            format!("0,-12,{},true,,fixed:20,{}\n", 0.1 + 0.2, u64::MAX)
        );
        let mut json = String::new();
        let mut j = Json::new(&mut json);
        fields(&mut j);
        j.end();
        let want = serde_json::json!({
            "a": 0, "b": -12, "c": 0.1 + 0.2, "d": true, "e": null, "f": "fixed:20",
            // Past 2^53 − 1 a string, which every double-precision reader keeps exactly.
            "g": u64::MAX.to_string()
        });
        assert_eq!(json, format!("{want}\n"));
        let mut h = Header::default();
        fields(&mut h);
        assert_eq!(h.text, "a,b,c,d,e,f,g");
    }

    #[test]
    fn json_strings_that_need_escaping_are_escaped() {
        let mut json = String::new();
        let mut j = Json::new(&mut json);
        j.str("s", "a\"b\\c\n");
        j.end();
        assert_eq!(json, "{\"s\":\"a\\\"b\\\\c\\n\"}\n");
    }
}
