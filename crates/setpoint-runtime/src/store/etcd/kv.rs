//! The [`Store`] trait on etcd: reads in pages at one revision, transactions with their
//! compares, leases, and watches; and the conversions between etcd's key-values and [`Entry`].

use std::time::Instant;

use super::*;

pub(super) fn entry(kv: &KeyValue) -> Result<Entry, StoreError> {
    let key = kv
        .key_str()
        .map_err(|e| StoreError::Corrupt {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            reason: e.to_string(),
        })?
        .to_owned();
    let value = kv
        .value_str()
        .map_err(|e| StoreError::Corrupt {
            key: key.clone(),
            reason: e.to_string(),
        })?
        .to_owned();
    Ok(Entry {
        key,
        value,
        create_revision: kv.create_revision() as Revision,
        mod_revision: kv.mod_revision() as Revision,
        lease: (kv.lease() != 0).then_some(kv.lease() as LeaseId),
    })
}

pub(super) fn header_revision(h: Option<&etcd_client::ResponseHeader>) -> Revision {
    h.map_or(0, |h| h.revision() as Revision)
}

/// etcd refuses a transaction that writes one key twice; the trait applies writes in order, so
/// only the last write of each key matters.
pub(super) fn last_write_per_key(ops: &[Op]) -> Vec<&Op> {
    let key = |op: &Op| match op {
        Op::Put { key, .. } | Op::Delete { key } => key.clone(),
    };
    let mut out: Vec<&Op> = Vec::with_capacity(ops.len());
    let mut seen = std::collections::BTreeSet::new();
    for op in ops.iter().rev() {
        if seen.insert(key(op)) {
            out.push(op);
        }
    }
    out.reverse();
    out
}

impl EtcdStore {
    /// This store with reads paged by `n` keys: for tests of paging with few keys.
    #[cfg(test)]
    pub(crate) fn with_page_keys(mut self, n: i64) -> Self {
        self.page_keys = n;
        self
    }
}

/// Fails a read whose caller has stopped waiting (its `deadline` has passed), with the keys read
/// so far.
fn given_up(deadline: Option<Instant>, keys: usize) -> Result<(), StoreError> {
    match deadline {
        Some(d) if Instant::now() >= d => Err(StoreError::Unavailable(format!(
            "a read given up after {keys} keys: its caller stopped waiting"
        ))),
        _ => Ok(()),
    }
}

impl EtcdStore {
    /// One read-only transaction of every prefix's first page ([`PAGE_KEYS`] keys each), then
    /// the rest of each prefix page by page at the first answer's revision; no page is asked
    /// for once `deadline` has passed.
    fn read_paged(&self, prefixes: &[&str], deadline: Option<Instant>) -> Result<Read, StoreError> {
        given_up(deadline, 0)?;
        let limit = self.page_keys;
        let gets: Vec<TxnOp> = prefixes
            .iter()
            .map(|p| {
                let range = GetOptions::new()
                    .with_range(prefix_end(p))
                    .with_limit(limit);
                TxnOp::get(*p, Some(range))
            })
            .collect();
        let resp = self.call(true, move |_, mut kv| {
            let gets = gets.clone();
            async move { kv.txn(EtcdTxn::new().and_then(gets)).await }
        })?;
        let revision = header_revision(resp.header());
        let mut entries = Vec::new();
        let mut unfinished = Vec::new();
        for (r, p) in resp.op_responses().iter().zip(prefixes) {
            if let TxnOpResponse::Get(g) = r {
                for kv in g.kvs() {
                    entries.push(entry(kv)?);
                }
                if let (true, Some(last)) = (g.more(), g.kvs().last()) {
                    unfinished.push((last.key().to_vec(), prefix_end(p)));
                }
            }
        }
        for (mut last, end) in unfinished {
            // Bounded: each page ends past the last key of the one before, and the range is
            // finite at a fixed revision.
            loop {
                given_up(deadline, entries.len())?;
                let mut from = std::mem::take(&mut last);
                from.push(0);
                let range = GetOptions::new()
                    .with_range(end.as_str())
                    .with_limit(limit)
                    .with_revision(revision as i64);
                let page = self.call(true, move |_, mut kv| {
                    let (from, range) = (from.clone(), range.clone());
                    async move { kv.get(from, Some(range)).await }
                })?;
                for kv in page.kvs() {
                    entries.push(entry(kv)?);
                }
                match (page.more(), page.kvs().last()) {
                    (true, Some(kv)) => last = kv.key().to_vec(),
                    _ => break,
                }
            }
        }
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        entries.dedup_by(|a, b| a.key == b.key);
        Ok(Read { revision, entries })
    }
}

impl Store for EtcdStore {
    fn read(&self, prefixes: &[&str]) -> Result<Read, StoreError> {
        self.read_paged(prefixes, None)
    }

    fn read_until(&self, prefixes: &[&str], deadline: Instant) -> Result<Read, StoreError> {
        self.read_paged(prefixes, Some(deadline))
    }

    fn commit(&self, txn: &Txn) -> Result<Revision, StoreError> {
        let compares: Vec<EtcdCompare> = txn
            .compares
            .iter()
            .map(|c| {
                EtcdCompare::mod_revision(c.key.as_str(), CompareOp::Equal, c.mod_revision as i64)
            })
            .collect();
        let writes: Vec<TxnOp> = last_write_per_key(&txn.ops)
            .into_iter()
            .map(|op| match op {
                Op::Put { key, value, lease } => TxnOp::put(
                    key.as_str(),
                    value.as_str(),
                    lease.map(|l| PutOptions::new().with_lease(l as i64)),
                ),
                Op::Delete { key } => TxnOp::delete(key.as_str(), None),
            })
            .collect();
        let reads: Vec<TxnOp> = txn
            .compares
            .iter()
            .map(|c| TxnOp::get(c.key.as_str(), None))
            .collect();
        let request = EtcdTxn::new()
            .when(compares)
            .and_then(writes)
            .or_else(reads);
        let resp = match self.call(false, move |_, mut kv| {
            let request = request.clone();
            async move { kv.txn(request).await }
        }) {
            Ok(r) => r,
            Err(e) => {
                // etcd names no lease when a put's lease is gone: name the first one written.
                let leased = txn.ops.iter().find_map(|op| match op {
                    Op::Put { lease: Some(l), .. } => Some(*l),
                    _ => None,
                });
                return match (leased, &e) {
                    (Some(l), StoreError::Unavailable(m))
                        if m.contains("requested lease not found") =>
                    {
                        Err(StoreError::LeaseExpired(l))
                    }
                    _ => Err(e),
                };
            }
        };
        if resp.succeeded() {
            return Ok(header_revision(resp.header()));
        }
        for (c, r) in txn.compares.iter().zip(resp.op_responses()) {
            let found = match r {
                TxnOpResponse::Get(g) => g
                    .kvs()
                    .first()
                    .map_or(0, |kv| kv.mod_revision() as Revision),
                _ => 0,
            };
            if found != c.mod_revision {
                return Err(StoreError::Conflict {
                    key: c.key.clone(),
                    expected: c.mod_revision,
                    found,
                });
            }
        }
        Err(StoreError::Unavailable(format!(
            "etcd at {}: a transaction failed its comparisons, yet every compared key matches",
            self.endpoints
        )))
    }

    /// etcd's raised alarms (`etcdctl alarm list`): `NOSPACE` and `CORRUPT` each refuse every
    /// write until an operator disarms them.
    fn alarm(&self) -> Result<Option<String>, StoreError> {
        use etcd_client::{AlarmAction, AlarmType};
        let resp = self.call(true, move |mut c, _| async move {
            c.alarm(AlarmAction::Get, AlarmType::None, None).await
        })?;
        let raised: std::collections::BTreeSet<AlarmType> =
            resp.alarms().iter().map(|a| a.alarm()).collect();
        Ok(if raised.contains(&AlarmType::Nospace) {
            Some(self.full("alarm NOSPACE raised"))
        } else if raised.contains(&AlarmType::Corrupt) {
            Some(format!(
                "etcd at {} raised the CORRUPT alarm: a member's data differs from the others' \
                 and it refuses every write; see etcd's log, restore the member, then etcdctl \
                 alarm disarm",
                self.endpoints
            ))
        } else {
            None
        })
    }

    fn revision(&self) -> Result<Revision, StoreError> {
        let probe = self.probe.clone();
        let resp = self.call(true, move |mut c, _| {
            let probe = probe.clone();
            async move {
                c.get(probe.as_str(), Some(GetOptions::new().with_count_only()))
                    .await
            }
        })?;
        Ok(header_revision(resp.header()))
    }

    fn grant(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        let secs = ttl.as_millis().div_ceil(1000).max(1) as i64;
        let resp = self.call(false, move |mut c, _| async move {
            c.lease_grant(secs, None).await
        })?;
        if !resp.error().is_empty() {
            return Err(StoreError::Unavailable(format!(
                "etcd at {} refused a lease: {}",
                self.endpoints,
                resp.error()
            )));
        }
        Ok(resp.id() as LeaseId)
    }

    fn keep_alive(&self, lease: LeaseId) -> Result<(), StoreError> {
        // The first answer of the stream is the answer to this keep-alive: a TTL of 0
        // (reported as "lease not found") means the lease is gone.
        let alive = self.call(true, move |mut c, _| async move {
            match c.lease_keep_alive(lease as i64).await {
                Ok(_) => Ok(true),
                Err(e) if lease_not_found(&e) => Ok(false),
                Err(e) => Err(e),
            }
        })?;
        if alive {
            Ok(())
        } else {
            Err(StoreError::LeaseExpired(lease))
        }
    }

    fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.call(true, move |mut c, _| async move {
            match c.lease_revoke(lease as i64).await {
                Ok(_) => Ok(()),
                Err(e) if lease_not_found(&e) => Ok(()),
                Err(e) => Err(e),
            }
        })
    }

    /// etcd's MVCC compaction (not physical: the call returns once the compaction is ordered).
    fn compact_history(&self, before: Revision) -> Result<(), StoreError> {
        let Ok(before) = i64::try_from(before) else {
            return Ok(());
        };
        if before <= 1 {
            return Ok(());
        }
        self.call(true, move |mut c, _| async move {
            match c.compact(before, None).await {
                Ok(_) => Ok(()),
                // Another controller, or an earlier call whose answer was lost, got there first.
                Err(e) if describe(&e).contains("required revision has been compacted") => Ok(()),
                Err(e) => Err(e),
            }
        })
    }

    fn now_ms(&self) -> u64 {
        wall_ms()
    }

    fn watches(&self) -> bool {
        true
    }

    /// One etcd watch over the range that spans every prefix (so that all the changes of one
    /// revision arrive in one response, as etcd never splits a revision), filtered to the
    /// prefixes here.
    fn watch(
        &self,
        prefixes: &[&str],
        after: Revision,
    ) -> Option<Result<Box<dyn Watcher>, StoreError>> {
        let rt = self.rt.as_ref()?;
        let prefixes: Vec<String> = prefixes.iter().map(|p| (*p).to_owned()).collect();
        let start = prefixes.iter().min()?.clone();
        let end = prefixes.iter().map(|p| prefix_end(p)).max()?;
        let (tx, rx) = mpsc::channel();
        let mut client = self.member().watcher.clone();
        let timeout = self.opts.timeout;
        let task = rt.spawn(async move {
            let opts = WatchOptions::new()
                .with_range(end)
                .with_start_revision(after as i64 + 1);
            let mut stream = match tokio::time::timeout(timeout, client.watch(start, Some(opts)))
                .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    let _ = tx.send(WatchEvent::Lost(format!("cannot watch: {}", describe(&e))));
                    return;
                }
                Err(_) => {
                    let _ = tx.send(WatchEvent::Lost(format!("no watch within {timeout:?}")));
                    return;
                }
            };
            loop {
                let event = match stream.message().await {
                    Ok(Some(resp)) if resp.compact_revision() > 0 => WatchEvent::Lost(format!(
                        "the history after revision {after} was compacted (to {})",
                        resp.compact_revision()
                    )),
                    Ok(Some(resp)) if resp.canceled() => WatchEvent::Lost(format!(
                        "etcd cancelled the watch: {}",
                        resp.cancel_reason()
                    )),
                    Ok(Some(resp)) if resp.events().is_empty() => continue,
                    Ok(Some(resp)) => {
                        let mut changes = Vec::with_capacity(resp.events().len());
                        for ev in resp.events() {
                            let Some(kv) = ev.kv() else { continue };
                            let Ok(key) = kv.key_str() else { continue };
                            if !prefixes.iter().any(|p| key.starts_with(p.as_str())) {
                                continue;
                            }
                            let entry = match ev.event_type() {
                                EventType::Delete => None,
                                EventType::Put => match entry(kv) {
                                    Ok(e) => Some(e),
                                    Err(err) => {
                                        let _ = tx.send(WatchEvent::Lost(err.to_string()));
                                        return;
                                    }
                                },
                            };
                            changes.push(Change {
                                key: key.to_owned(),
                                entry,
                            });
                        }
                        WatchEvent::Changes {
                            revision: header_revision(resp.header()),
                            changes,
                        }
                    }
                    Ok(None) => WatchEvent::Lost("the watch stream ended".into()),
                    Err(e) => WatchEvent::Lost(format!("the watch broke: {}", describe(&e))),
                };
                let lost = matches!(event, WatchEvent::Lost(_));
                if tx.send(event).is_err() || lost {
                    return;
                }
            }
        });
        Some(Ok(Box::new(EtcdWatcher { rx, task })))
    }
}

/// The receiving end of a watch running on the store's runtime; dropping it ends the watch.
pub(super) struct EtcdWatcher {
    pub(super) rx: mpsc::Receiver<WatchEvent>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl Watcher for EtcdWatcher {
    fn next(&mut self, wait: Duration) -> WatchEvent {
        match self.rx.recv_timeout(wait) {
            Ok(e) => e,
            Err(mpsc::RecvTimeoutError::Timeout) => WatchEvent::Idle,
            Err(mpsc::RecvTimeoutError::Disconnected) => WatchEvent::Lost("the watch ended".into()),
        }
    }
}

impl Drop for EtcdWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}
