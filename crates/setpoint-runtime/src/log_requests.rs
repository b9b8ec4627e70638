//! A copy's output read through the store, from any host (`setpoint logs COPY --store …`).
//!
//! The log files live on the copy's node ([`crate::logs`]). A `logs` command on another host
//! finds that node from the store ([`node_of`]: the copy's assignment, else the report that
//! lists it, else its last event), takes a lease of its own and writes one request at
//! `/logreq/{node}/{lease}` ([`LogRequest`]): a copy, a byte offset (or a number of last
//! lines) and a size. The agent of that node reads its log requests with its placements, has
//! its driver read that range ([`crate::logs::read_range`]) and writes the bytes back in place
//! ([`LogRequest::answer`]), keeping the asker's lease. The asker reads the answer, then writes
//! its next request over it at the next offset ([`LogReader::fetch`]), and revokes its lease at
//! the end; a command that dies leaves nothing once its lease expires.
//!
//! Why through the store: it already carries etcd's TLS, users and prefix to every host, so
//! reading a log needs no port, certificate or firewall rule of its own, and the agent stays
//! an I/O-free machine (a request is one more record it reads, the read one more effect).
//!
//! # Bounds
//! - A chunk is at most [`MAX_CHUNK`] bytes (64 KiB; hex in the record, so at most 128 KiB of
//!   value, well under etcd's 1.5 MiB request limit).
//! - An agent answers at most [`MAX_SERVING`] requests at once; others wait for a later sync.
//! - Each request is answered once, and the asker sends the next only after reading the
//!   answer, so one `logs` command has at most one chunk in the store at a time, and a
//!   `--follow` that has caught up asks again only every [`FOLLOW_POLL`].
//! - A record that does not decode is skipped and logged once; one that decodes but breaks a
//!   bound ([`LogRequest::check`]) is answered with the reason and never reaches a path.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::events::{CopyEvent, EVENTS};
use crate::model::keys::{log_request_key, log_requests_of, ASSIGNMENTS};
use crate::model::{decode, encode, Assignment, NodeReport, REPORTS};
use crate::store::{Entry, LeaseId, Revision, Store, StoreError, Txn};

/// The largest chunk an agent reads for one request, in bytes.
pub const MAX_CHUNK: u64 = 64 * 1024;
/// The most last lines a request may ask for.
pub const MAX_TAIL: u64 = 1_000_000;
/// How many log requests one agent answers at once.
pub const MAX_SERVING: usize = 4;
/// How long a `--follow` that has read everything waits before it asks again.
pub const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// A request for a piece of a copy's log and, once answered, the piece.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRequest {
    /// The copy, `{workload}-{n}`.
    pub copy: String,
    /// Where to start, in bytes from the start of the log's oldest kept part.
    pub from: u64,
    /// Start at the last `tail` lines instead of at `from`.
    #[serde(default)]
    pub tail: Option<u64>,
    /// The most bytes to answer with, 1 to [`MAX_CHUNK`].
    pub max_bytes: u64,
    /// When it was asked for, in store milliseconds.
    pub requested_ms: u64,
    /// The agent's answer; `None` until answered.
    #[serde(default)]
    pub answer: Option<LogAnswer>,
}

/// An agent's answer to a [`LogRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogAnswer {
    /// Where the bytes start, in bytes from the start of the log's oldest kept part.
    pub from: u64,
    /// The bytes, in lowercase hex (a log need not be UTF-8, and a chunk may cut a character).
    pub hex: String,
    /// The log's length when read, in bytes.
    pub len: u64,
    /// Whether the copy still runs on the node: a follower stops once it does not and every
    /// byte is read.
    pub running: bool,
    /// The copy has no log on the node (never started there, or removed after retention).
    #[serde(default)]
    pub missing: bool,
    /// Why the request was not carried out (a broken bound, a failed read).
    #[serde(default)]
    pub error: Option<String>,
}

impl LogAnswer {
    /// The bytes of the answer; `None` if its hex is damaged.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        unhex(&self.hex)
    }

    /// Where the next chunk starts.
    pub fn next(&self) -> u64 {
        self.from + self.hex.len() as u64 / 2
    }
}

impl LogRequest {
    /// Whether the request keeps to the bounds (see the [module docs](self)), else why not.
    pub fn check(&self) -> Result<(), String> {
        if !crate::logs::valid_copy_name(&self.copy) {
            return Err(format!(
                "'{}' is not a copy name (a-z, 0-9 and '-')",
                self.copy.chars().take(80).collect::<String>()
            ));
        }
        if !(1..=MAX_CHUNK).contains(&self.max_bytes) {
            return Err(format!(
                "max_bytes {} is out of bounds: accepted 1 to {MAX_CHUNK}",
                self.max_bytes
            ));
        }
        if self.tail.is_some_and(|t| t > MAX_TAIL) {
            return Err(format!(
                "tail {} is out of bounds: accepted at most {MAX_TAIL} lines",
                self.tail.unwrap_or_default()
            ));
        }
        Ok(())
    }
}

/// A log request read from the store, as the agent sees it: key, the request (or why it does
/// not decode), `mod_revision` and the asker's lease.
pub type Asked = (
    String,
    Result<LogRequest, String>,
    Revision,
    Option<LeaseId>,
);

/// The requests addressed to `node` not answered yet, from a read of its [`log_requests_of`]
/// prefix. An entry that does not decode is kept, with why, so the agent can log it once.
pub fn pending(entries: &[Entry], node: &str) -> Vec<Asked> {
    let prefix = log_requests_of(node);
    entries
        .iter()
        .filter(|e| e.key.starts_with(&prefix))
        .filter_map(|e| {
            let req = decode::<LogRequest>(e).map(|s| s.value);
            match req {
                Ok(r) if r.answer.is_some() => None,
                Ok(r) => Some((e.key.clone(), Ok(r), e.mod_revision, e.lease)),
                Err(err) => Some((e.key.clone(), Err(err.to_string()), e.mod_revision, e.lease)),
            }
        })
        .collect()
}

/// The transaction that writes `req` with its answer back in place: only if the request is
/// still at `revision`, keeping the asker's lease.
pub fn answer_txn(key: &str, req: &LogRequest, revision: Revision, lease: Option<LeaseId>) -> Txn {
    let txn = Txn::new().expect(key, revision);
    match lease {
        Some(l) => txn.put_leased(key, encode(req), l),
        None => txn.put(key, encode(req)),
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// The bytes of lowercase or uppercase hex; `None` if it is not hex.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|p| {
            let d = |c: u8| (c as char).to_digit(16);
            Some((d(p[0])? * 16 + d(p[1])?) as u8)
        })
        .collect()
}

/// What went wrong reading a log through the store.
#[derive(Debug, thiserror::Error)]
pub enum LogReadError {
    /// No record of the store names the copy: check its name with `setpoint get copies`.
    #[error(
        "no copy '{0}' in the store: accepted a copy as 'setpoint get copies' lists it, e.g. web-3"
    )]
    NoCopy(String),
    /// The copy's node has no live agent, so nobody can read its log files.
    #[error("node {node} has no live agent to serve the log of {copy}; its lease has ended{last}")]
    NoAgent {
        /// The node.
        node: String,
        /// The copy.
        copy: String,
        /// When it was last heard of, in words (may be empty).
        last: String,
    },
    /// The agent did not answer in time.
    #[error("no answer from the agent of node {node} within {waited_ms}ms for the log of {copy} from byte {from}")]
    Timeout {
        /// The node.
        node: String,
        /// The copy.
        copy: String,
        /// The offset asked for.
        from: u64,
        /// How long it waited, in milliseconds.
        waited_ms: u64,
    },
    /// The agent refused the request, with why.
    #[error("the agent of node {node} refused the request: {why}")]
    Refused {
        /// The node.
        node: String,
        /// Why.
        why: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The node that runs (or last ran) `copy`: its assignment, else the report that lists it,
/// else the node of its last event. `None` if the store has no record of it.
pub fn node_of(store: &dyn Store, copy: &str) -> Result<Option<String>, StoreError> {
    let Some((workload, n)) = copy
        .rsplit_once('-')
        .and_then(|(w, n)| Some((w, n.parse::<u64>().ok()?)))
    else {
        return Ok(None);
    };
    let assignments = format!("{ASSIGNMENTS}{workload}/");
    let events = format!("{EVENTS}{workload}/");
    let read = store.read(&[&assignments, REPORTS, &events])?;
    let mut from_report = None;
    let mut from_event: Option<(u64, String)> = None;
    for e in &read.entries {
        if e.key.starts_with(&assignments) {
            if let Ok(a) = decode::<Assignment>(e) {
                if a.value.copy == copy {
                    return Ok(Some(a.value.node));
                }
            }
        } else if e.key.starts_with(REPORTS) {
            if let Ok(r) = decode::<NodeReport>(e) {
                if r.value.copies.iter().any(|c| c.copy == copy) {
                    from_report.get_or_insert(r.value.node);
                }
            }
        } else if e.key.split('/').nth(4) == Some(&format!("{n:012}")[..])
            || e.key.split('/').nth(4) == Some(&n.to_string()[..])
        {
            if let Ok(ev) = decode::<CopyEvent>(e) {
                if from_event
                    .as_ref()
                    .is_none_or(|(at, _)| *at <= ev.value.at_ms)
                {
                    from_event = Some((ev.value.at_ms, ev.value.node));
                }
            }
        }
    }
    Ok(from_report.or(from_event.map(|(_, node)| node)))
}

/// One `logs` command's requests to the agent of the copy's node: see the [module docs](self).
/// Dropping it revokes its lease, which removes its request.
pub struct LogReader<'a> {
    store: &'a dyn Store,
    copy: String,
    node: String,
    key: String,
    lease: LeaseId,
    timeout: Duration,
}

impl<'a> LogReader<'a> {
    /// Finds `copy`'s node and checks that its agent lives; each request is then waited for
    /// up to `timeout`, and the lease lives `timeout` past the last request.
    pub fn open(store: &'a dyn Store, copy: &str, timeout: Duration) -> Result<Self, LogReadError> {
        let node = node_of(store, copy)?.ok_or_else(|| LogReadError::NoCopy(copy.to_owned()))?;
        if store.get(&crate::model::node::node_key(&node))?.is_none() {
            let last = match store.get(&crate::model::report_key(&node))? {
                Some(e) => match decode::<NodeReport>(&e) {
                    Ok(r) => format!(
                        " (its last report was {}s ago)",
                        store.now_ms().saturating_sub(r.value.reported_ms) / 1000
                    ),
                    Err(_) => String::new(),
                },
                None => String::new(),
            };
            return Err(LogReadError::NoAgent {
                node,
                copy: copy.to_owned(),
                last,
            });
        }
        let lease = store.grant(timeout.max(Duration::from_secs(2)) * 2)?;
        Ok(Self {
            store,
            copy: copy.to_owned(),
            key: log_request_key(&node, &format!("{lease:x}")),
            node,
            lease,
            timeout,
        })
    }

    /// The copy's node.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Asks for at most [`MAX_CHUNK`] bytes from `from` (or from the last `tail` lines) and
    /// waits for the answer, polling every 20ms up to the timeout.
    pub fn fetch(&mut self, from: u64, tail: Option<u64>) -> Result<LogAnswer, LogReadError> {
        self.store.keep_alive(self.lease)?;
        let req = LogRequest {
            copy: self.copy.clone(),
            from,
            tail,
            max_bytes: MAX_CHUNK,
            requested_ms: self.store.now_ms(),
            answer: None,
        };
        self.store
            .commit(&Txn::new().put_leased(&self.key, encode(&req), self.lease))?;
        let started = Instant::now();
        loop {
            if let Some(e) = self.store.get(&self.key)? {
                if let Ok(r) = decode::<LogRequest>(&e) {
                    if let Some(a) = r.value.answer {
                        if let Some(why) = a.error {
                            return Err(LogReadError::Refused {
                                node: self.node.clone(),
                                why,
                            });
                        }
                        return Ok(a);
                    }
                }
            }
            if started.elapsed() >= self.timeout {
                // The node may have died meanwhile: say so rather than "no answer".
                if self
                    .store
                    .get(&crate::model::node::node_key(&self.node))?
                    .is_none()
                {
                    return Err(LogReadError::NoAgent {
                        node: self.node.clone(),
                        copy: self.copy.clone(),
                        last: String::new(),
                    });
                }
                return Err(LogReadError::Timeout {
                    node: self.node.clone(),
                    copy: self.copy.clone(),
                    from,
                    waited_ms: self.timeout.as_millis() as u64,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for LogReader<'_> {
    fn drop(&mut self) {
        let _ = self.store.revoke(self.lease);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_every_byte_and_refuses_what_is_not_hex() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&all)).unwrap(), all);
        assert_eq!(hex(b"\x00\xff"), "00ff");
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
    }

    #[test]
    fn a_request_out_of_bounds_says_which_bound() {
        let ok = LogRequest {
            copy: "w-0".into(),
            from: 0,
            tail: None,
            max_bytes: MAX_CHUNK,
            requested_ms: 0,
            answer: None,
        };
        assert_eq!(ok.check(), Ok(()));
        let big = LogRequest {
            max_bytes: MAX_CHUNK + 1,
            ..ok.clone()
        };
        assert!(big.check().unwrap_err().contains("max_bytes 65537"));
        let zero = LogRequest {
            max_bytes: 0,
            ..ok.clone()
        };
        assert!(zero.check().is_err());
        let path = LogRequest {
            copy: "../../etc/passwd".into(),
            ..ok.clone()
        };
        assert!(path.check().unwrap_err().contains("not a copy name"));
        let tail = LogRequest {
            tail: Some(MAX_TAIL + 1),
            ..ok
        };
        assert!(tail.check().is_err());
    }
}
