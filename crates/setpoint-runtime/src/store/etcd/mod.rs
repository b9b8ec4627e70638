//! A store on an etcd cluster (v3 API, through the `etcd-client` crate).
//!
//! The [`Store`] trait was drawn from etcd's model, so the mapping is direct:
//! - **revisions** are etcd's own: one counter for the cluster, a key's `create_revision` and
//!   `mod_revision` as etcd keeps them;
//! - **a transaction** is one etcd `Txn`: each [`Compare`](super::Compare) becomes
//!   `mod_revision(key) == r` (etcd compares an absent key as revision 0, which is the trait's
//!   "absent"), the writes are its success branch, and its failure branch reads every compared
//!   key, so a [`StoreError::Conflict`] names the first key that moved and what it is at now,
//!   in the same round trip;
//! - **a read of several prefixes** is one read-only `Txn` of range requests, which etcd serves
//!   at one revision;
//! - **leases** are etcd leases: [`Store::grant`] is `LeaseGrant`, [`Store::keep_alive`] one
//!   `LeaseKeepAlive` exchange, [`Store::revoke`] `LeaseRevoke`. etcd counts lease TTLs in whole
//!   seconds and raises them to its minimum (1.5 election timeouts, rounded up), so a TTL is
//!   rounded up to whole seconds here: a lease never lasts *less* than asked.
//!
//! # Deadlines
//! The trait blocks, while the client is async: the store owns a small tokio runtime and every
//! call runs on it, with the caller waiting on a channel. Every call has a deadline
//! ([`EtcdOptions::timeout`]); the client also asks etcd to *require a leader*, so a member that
//! has lost quorum answers "no leader" at once instead of queueing the request. The handle
//! keeps one client per member and each attempt of a call goes to one member with a deadline of
//! its own (a third of the call's), so a member that hangs is passed over like a dead one
//! (docs/runtime.md, "A member that is down, cut off or hung"). A call that
//! misses its deadline is [`StoreError::Unavailable`]: a lost quorum or an unreachable cluster
//! is an error within a bounded time, never a hang.
//!
//! A commit that fails with `Unavailable` may or may not have been applied (the reply was lost,
//! not necessarily the request). Every setpoint write compares revisions, so redoing it after a
//! fresh read is safe: a write that did land makes the redo a conflict.
//!
//! # What etcd must allow
//! Nothing beyond its defaults. etcd refuses a transaction of more than `--max-txn-ops`
//! operations (128 by default) or larger than `--max-request-bytes` (1.5 MiB); setpoint cuts
//! every large write into transactions within those defaults ([`super::limits`]), so a stock
//! etcd serves it. An etcd run with lower limits refuses some writes: that is
//! [`StoreError::TooBig`], which the pass records where `get` and `status` show it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare as EtcdCompare, CompareOp, ConnectOptions, EventType, GetOptions,
    Identity, KeyValue, KvClient, PutOptions, TlsOptions, Txn as EtcdTxn, TxnOp, TxnOpResponse,
    WatchClient, WatchOptions,
};

use super::{
    prefix_end, wall_ms, Change, Entry, LeaseId, Op, Read, Revision, Store, StoreError, Txn,
    WatchEvent, Watcher,
};

mod errors;
mod kv;
mod members;

use errors::*;
use members::*;

/// How an [`EtcdStore`] talks to its cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtcdOptions {
    /// The deadline of every call: past it, the call fails with [`StoreError::Unavailable`].
    pub timeout: Duration,
}

impl Default for EtcdOptions {
    /// A 3-second deadline: longer than an etcd leader election (1 s by default), shorter than
    /// the controller's default lease (5 s).
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(3),
        }
    }
}

/// How a client reaches an etcd that asks who it is: TLS and a user. The default is plain
/// HTTP without a user.
#[derive(Clone, Default)]
pub struct EtcdAccess {
    /// TLS, if etcd speaks it (`etcd+https://`).
    pub tls: Option<EtcdTls>,
    /// The etcd user and its password. The password is never shown (not even by `Debug`).
    pub user: Option<(String, String)>,
    /// The key prefix the store's keys live under (empty: none). The store reads one key under
    /// it to prove the cluster answers, so that a user whose role grants only that prefix can
    /// run setpoint.
    pub probe_prefix: String,
}

impl std::fmt::Debug for EtcdAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdAccess")
            .field("tls", &self.tls.as_ref().map(|t| t.identity.is_some()))
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("probe_prefix", &self.probe_prefix)
            .finish()
    }
}

/// TLS to etcd: the CA that signed etcd's certificate and, if etcd asks for one
/// (`--client-cert-auth`), this client's certificate and key, all PEM.
#[derive(Clone)]
pub struct EtcdTls {
    /// The CA certificate (PEM).
    pub ca: Vec<u8>,
    /// The client's certificate and key (PEM).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// A store on an etcd cluster.
pub struct EtcdStore {
    /// One client per member, so that a member that hangs is passed over (see "Deadlines").
    /// A member left out at connect (down, hung or slow to log in then) joins when a later try
    /// reaches it ([`join_later`]), so the list only grows.
    members: Members,
    /// The member the next call goes to first: the last one that answered.
    preferred: Arc<AtomicUsize>,
    /// `Some` until drop, which shuts it down without blocking (a drop may happen on an async
    /// thread, where a blocking shutdown would panic).
    rt: Option<tokio::runtime::Runtime>,
    endpoints: String,
    opts: EtcdOptions,
    /// The key read by [`Store::revision`] for its header.
    probe: String,
    /// Keys a read asks for in one request ([`PAGE_KEYS`]; smaller in tests).
    page_keys: i64,
}

/// The keys a read asks for in one request. A read of more is paged: the first request reads
/// every prefix and fixes the revision, later pages read at that revision (so the whole read is
/// still one revision's), each page within the call's deadline. At 100,000 copies one answer of
/// every assignment, placement and report was tens of megabytes, and on a loaded etcd it did
/// not fit the 3 s deadline: the leader's watch cache and `setpoint get` could not read at all
/// (docs/performance-runtime.md). Kubernetes pages its lists the same way (`limit` and
/// `continue` at a fixed resource version).
pub const PAGE_KEYS: i64 = 5_000;

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.endpoints)
            .field("opts", &self.opts)
            .finish()
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl EtcdStore {
    /// Connects to the cluster at `endpoints` (`host:port` or `http://host:port`) and checks
    /// that it answers within the deadline.
    pub fn connect(endpoints: &[String], opts: EtcdOptions) -> Result<Self, StoreError> {
        Self::connect_with(endpoints, opts, &EtcdAccess::default())
    }

    /// Connects to the cluster at `endpoints` (`https://host:port` with TLS) as `access` says,
    /// and checks that it answers within the deadline. A user or password etcd refuses is
    /// [`StoreError::Refused`]: the command must change, waiting does not help.
    pub fn connect_with(
        endpoints: &[String],
        opts: EtcdOptions,
        access: &EtcdAccess,
    ) -> Result<Self, StoreError> {
        let shown = endpoints
            .iter()
            .map(|e| e.strip_prefix("http://").unwrap_or(e))
            .collect::<Vec<_>>()
            .join(",");
        if endpoints.is_empty() {
            return Err(StoreError::Unavailable("no etcd endpoint given".into()));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("setpoint-etcd")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable(format!("starting the etcd client: {e}")))?;
        let urls: Vec<String> = endpoints
            .iter()
            .map(|e| {
                if e.contains("://") {
                    e.clone()
                } else {
                    format!("http://{e}")
                }
            })
            .collect();
        let all_urls = urls.clone();
        let urls = reachable(urls, opts.timeout / 4);
        let mut connect = ConnectOptions::new()
            .with_timeout(opts.timeout)
            .with_connect_timeout(opts.timeout)
            .with_keep_alive(Duration::from_secs(2), opts.timeout)
            .with_require_leader(true);
        if let Some(tls) = &access.tls {
            let mut t = TlsOptions::new().ca_certificate(Certificate::from_pem(&tls.ca));
            if let Some((cert, key)) = &tls.identity {
                t = t.identity(Identity::from_pem(cert, key));
            }
            connect = connect.with_tls(t);
        }
        if let Some((user, password)) = &access.user {
            // etcd's simple tokens expire (5 minutes by default): log in again when one does.
            connect = connect
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        // One client per member, connected side by side. Without a user a client connects
        // lazily, so each is made at once; with one, connecting logs in, which a dead or hung
        // member never answers: such a member is left out (until it joins later), once the
        // others have logged in within an attempt's deadline.
        let wait = opts.timeout;
        let (tx, rx) = mpsc::channel();
        for url in urls.clone() {
            let (tx, connect) = (tx.clone(), connect.clone());
            rt.spawn(async move {
                let c =
                    tokio::time::timeout(wait, Client::connect([url.clone()], Some(connect))).await;
                let _ = tx.send((url, c));
            });
        }
        drop(tx);
        let mut members = Vec::new();
        let mut first_error = None;
        let mut timed_out = 0;
        // Up to the whole deadline for the first member; once one is in, an attempt's deadline
        // more for the others.
        let mut until = std::time::Instant::now() + wait + Duration::from_millis(200);
        while let Ok((url, c)) =
            rx.recv_timeout(until.saturating_duration_since(std::time::Instant::now()))
        {
            match c {
                Ok(Ok(client)) => {
                    if members.is_empty() {
                        until = until.min(
                            std::time::Instant::now() + attempt_deadline(opts.timeout, urls.len()),
                        );
                    }
                    members.push((url, client));
                }
                Ok(Err(e)) => {
                    // A refused login, then a member without a leader, say the most about why
                    // no member is in; a dead member's refusal the least.
                    let rank = |e: &etcd_client::Error| {
                        let text = describe(e);
                        if refused_login(&text) {
                            0
                        } else if text.contains("no leader") {
                            1
                        } else {
                            2
                        }
                    };
                    if first_error.as_ref().is_none_or(|f| rank(&e) < rank(f)) {
                        first_error = Some(e);
                    }
                }
                Err(_) => timed_out += 1,
            }
        }
        if members.is_empty() && timed_out > 0 {
            // A member that does not answer a login within the deadline is hung, cut off, or
            // waiting for a leader (an election, or no quorum): that says more than another's
            // refused connection.
            return Err(StoreError::Unavailable(format!(
                "etcd at {shown}: {timed_out} member(s) did not answer within {wait:?}: \
                 unreachable, or no leader (an election under way, or no quorum)"
            )));
        }
        if members.is_empty() {
            let Some(e) = first_error else {
                return Err(StoreError::Unavailable(format!(
                    "etcd at {shown}: no connection within {wait:?}"
                )));
            };
            let text = describe(&e);
            if let (Some((user, _)), true) = (&access.user, refused_login(&text)) {
                return Err(StoreError::Refused(format!(
                    "etcd at {shown} refused user '{user}' ({text}): check the password in \
                     --etcd-password-file or {}",
                    super::etcd_url::PASSWORD_ENV
                )));
            }
            // With a user, connecting logs in, which needs a leader: say so as a request
            // would ([`EtcdStore::failed`]).
            if text.contains("no leader") {
                return Err(StoreError::Unavailable(format!(
                    "etcd at {shown} has no quorum (no leader): {text}"
                )));
            }
            return Err(StoreError::Unavailable(format!("etcd at {shown}: {text}")));
        }
        // In the order given, so that which member is tried first does not depend on timing.
        members.sort_by_key(|(url, _)| urls.iter().position(|u| u == url));
        let left_out: Vec<String> = all_urls
            .iter()
            .filter(|u| !members.iter().any(|(m, _)| m == *u))
            .cloned()
            .collect();
        let members: Vec<Arc<Member>> = members
            .into_iter()
            .map(|(url, client)| Arc::new(member(url, client)))
            .collect();
        let members: Members = Arc::new(std::sync::RwLock::new(Arc::new(members)));
        let probe = format!("{}{VERSION_PROBE}", access.probe_prefix);
        for url in left_out {
            let members = Arc::clone(&members);
            rt.spawn(join_later(
                url,
                connect.clone(),
                wait,
                members,
                probe.clone(),
            ));
        }
        let store = Self {
            members,
            preferred: Arc::new(AtomicUsize::new(0)),
            rt: Some(rt),
            endpoints: shown,
            opts,
            probe,
            page_keys: PAGE_KEYS,
        };
        // The client connects lazily: one request proves the cluster answers and has a leader.
        store.revision()?;
        Ok(store)
    }

    /// The endpoints, as given, joined by commas.
    pub fn endpoints(&self) -> &str {
        &self.endpoints
    }

    /// The members this handle sends calls to, by URL: those that answered at connect, then
    /// those that joined later.
    pub fn member_urls(&self) -> Vec<String> {
        members_now(&self.members)
            .iter()
            .map(|m| m.url.clone())
            .collect()
    }

    /// The client of the member calls go to first, for what the trait does not cover (tests).
    pub fn client(&self) -> Client {
        self.member().client.clone()
    }

    fn member(&self) -> Arc<Member> {
        let members = members_now(&self.members);
        Arc::clone(&members[self.preferred.load(Ordering::Relaxed) % members.len()])
    }

    /// Runs `f` on the store's runtime and waits for it, at most the deadline. Each attempt
    /// goes to one member, the last that answered first, and has a deadline of its own, a
    /// third of the whole when there are several members ([`attempt_deadline`]): a member that
    /// does not answer within it (hung, or cut off) is passed over for the next, as is one
    /// whose connection was never made or that had no leader. A failure that may have applied
    /// (a commit whose reply was lost) is not sent again, unless `idempotent`; an attempt that
    /// timed out is, to another member: every setpoint write compares revisions, so a write that
    /// did land makes its repeat a conflict, which the caller reads again after.
    fn call<T, F, Fut>(&self, idempotent: bool, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(Client, KvClient) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    {
        let Some(rt) = &self.rt else {
            return Err(StoreError::Unavailable(
                "the etcd client is shut down".into(),
            ));
        };
        let (tx, rx) = mpsc::channel();
        let (members, preferred) = (members_now(&self.members), Arc::clone(&self.preferred));
        let timeout = self.opts.timeout;
        let attempt = attempt_deadline(timeout, members.len());
        let last = Arc::new(Mutex::new(None::<String>));
        let seen = Arc::clone(&last);
        rt.spawn(async move {
            let attempts = async {
                let n = members.len();
                let mut i = preferred.load(Ordering::Relaxed) % n;
                // The members this call has tried since it last tried them all.
                let mut tried = vec![false; n];
                loop {
                    let m = &members[i];
                    tried[i] = true;
                    if tried.iter().all(|t| *t) {
                        tried.iter_mut().for_each(|t| *t = false);
                        tried[i] = true;
                    }
                    // The next member not tried yet that has not let an attempt time out
                    // lately, else the next not tried: while the others elect a leader (and
                    // answer "no leader"), a hung member is not tried again and again, and
                    // every member is tried before any is tried twice.
                    let now = wall_ms();
                    let untried = |j: &usize| !tried[*j];
                    let next = (1..n)
                        .map(|k| (i + k) % n)
                        .filter(untried)
                        .find(|&j| members[j].suspect_until.load(Ordering::Relaxed) <= now)
                        .or_else(|| (1..n).map(|k| (i + k) % n).find(untried))
                        .unwrap_or((i + 1) % n);
                    let say = |why: String| {
                        *seen.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some(format!("{}: {why}", m.url));
                    };
                    match tokio::time::timeout(attempt, f(m.client.clone(), m.kv.clone())).await {
                        Ok(Err(e)) if retryable(&e, idempotent) => {
                            say(describe(&e));
                            preferred.store(next, Ordering::Relaxed);
                            i = next;
                            tokio::time::sleep(Duration::from_millis(25)).await;
                        }
                        Ok(Err(e)) => {
                            // Not sent again; the next call starts at another member.
                            preferred.store(next, Ordering::Relaxed);
                            return Some(Err(e));
                        }
                        Ok(Ok(r)) => {
                            preferred.store(i, Ordering::Relaxed);
                            return Some(Ok(r));
                        }
                        Err(_) => {
                            say(format!("no answer within {attempt:?}"));
                            if n > 1 {
                                m.suspect_until
                                    .store(wall_ms() + SUSPECT_MS, Ordering::Relaxed);
                            }
                            preferred.store(next, Ordering::Relaxed);
                            if !idempotent {
                                // It may have applied: the caller reads again and decides, and
                                // its next call goes to another member. Sent again here, a
                                // write that did land would come back as a conflict with this
                                // caller's own write (a report "changed under this agent").
                                return None;
                            }
                            i = next;
                        }
                    }
                }
            };
            let _ = tx.send(tokio::time::timeout(timeout, attempts).await);
        });
        // The task's own timeout answers first; this one only guards against a stalled runtime.
        match rx.recv_timeout(timeout + Duration::from_millis(500)) {
            Ok(Ok(Some(r))) => r.map_err(|e| self.failed(e)),
            Ok(Ok(None)) => {
                let last = last.lock().unwrap_or_else(|p| p.into_inner()).take();
                Err(StoreError::Unavailable(format!(
                    "etcd at {}: a write got no answer ({}): the member is unreachable or has \
                     no quorum; the write may have applied, and the next call goes to another \
                     member",
                    self.endpoints,
                    last.unwrap_or_default()
                )))
            }
            Ok(Err(_)) | Err(_) => {
                let last = last.lock().unwrap_or_else(|p| p.into_inner()).take();
                Err(self.no_answer(last))
            }
        }
    }

    /// That etcd is full, with `why` (its error, or the alarm raised) and what frees it.
    pub(super) fn full(&self, why: &str) -> String {
        format!(
            "etcd at {} is full: its database reached its quota (--quota-backend-bytes, 2 GiB \
             by default) and it refuses every write ({why}); free it with etcdctl compact, \
             etcdctl defrag and etcdctl alarm disarm",
            self.endpoints
        )
    }

    fn no_answer(&self, last: Option<String>) -> StoreError {
        let last = last.map_or(String::new(), |l| format!(" (last: {l})"));
        StoreError::Unavailable(format!(
            "etcd at {} did not answer within {:?}{last}: it is unreachable or has no quorum",
            self.endpoints, self.opts.timeout
        ))
    }

    fn failed(&self, e: etcd_client::Error) -> StoreError {
        let text = describe(&e);
        if text.contains("Timeout expired") {
            self.no_answer(None)
        } else if text.contains("no leader") {
            StoreError::Unavailable(format!(
                "etcd at {} has no quorum (no leader): {text}",
                self.endpoints
            ))
        } else if text.contains("too many operations in txn") || text.contains("too large") {
            StoreError::TooBig(format!(
                "etcd at {} refused a transaction as too big ({text}): setpoint writes within \
                 a default etcd's limits (128 operations, 1.5 MiB); run etcd with \
                 --max-txn-ops and --max-request-bytes at their defaults or higher",
                self.endpoints
            ))
        } else if text.contains("database space exceeded") {
            StoreError::Unavailable(self.full(&text))
        } else {
            StoreError::Unavailable(format!("etcd at {}: {text}", self.endpoints))
        }
    }
}

/// A key read only for its response header (the cluster's revision).
const VERSION_PROBE: &str = "/setpoint/version";

#[cfg(test)]
mod tests;
