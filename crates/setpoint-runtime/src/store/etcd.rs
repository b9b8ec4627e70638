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

/// The members' clients, as one list that a late member can be added to while calls use the
/// list they took.
type Members = Arc<std::sync::RwLock<Arc<Vec<Arc<Member>>>>>;

/// The members in `members` now.
fn members_now(members: &Members) -> Arc<Vec<Arc<Member>>> {
    Arc::clone(&members.read().unwrap_or_else(|p| p.into_inner()))
}

/// How long a member left out at connect waits before its first try to join, doubling to
/// [`JOIN_MAX_MS`].
const JOIN_FIRST_MS: u64 = 500;
/// The longest wait between two tries of a member left out at connect.
const JOIN_MAX_MS: u64 = 5_000;

/// Keeps trying to connect `url`, a member left out when the store connected, and adds it to
/// `members` once it answers a request, so that a process that connected while a member was
/// down, cut off or slow (an agent started inside a partition connects as it heals) does not
/// lose the store for good when a member it did reach dies later (found by the
/// network-namespace test: an agent restarted inside a partition reached one member of three
/// at the heal, and fenced when that member was killed). Ends when the store is dropped (its
/// runtime shuts down).
async fn join_later(
    url: String,
    connect: ConnectOptions,
    wait: Duration,
    members: Members,
    probe: String,
) {
    let mut pause = JOIN_FIRST_MS;
    loop {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        pause = (pause * 2).min(JOIN_MAX_MS);
        let Ok(Ok(client)) =
            tokio::time::timeout(wait, Client::connect([url.clone()], Some(connect.clone()))).await
        else {
            continue;
        };
        let m = member(url.clone(), client);
        // Connecting without a user is lazy: one request proves the member answers.
        let mut kv = m.kv.clone();
        if !matches!(
            tokio::time::timeout(wait, kv.get(probe.as_str(), None)).await,
            Ok(Ok(_))
        ) {
            continue;
        }
        let mut list = members.write().unwrap_or_else(|p| p.into_inner());
        let mut grown: Vec<Arc<Member>> = list.iter().cloned().collect();
        grown.push(Arc::new(m));
        *list = Arc::new(grown);
        return;
    }
}

/// The client of the member at `url`.
fn member(url: String, client: Client) -> Member {
    Member {
        kv: client
            .kv_client()
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE),
        watcher: client.watch_client().max_decoding_message_size(MAX_MESSAGE),
        url,
        suspect_until: AtomicU64::new(0),
        client,
    }
}

/// The client of one member.
struct Member {
    url: String,
    /// Until when (wall-clock ms) this member is passed over: it let an attempt time out.
    suspect_until: AtomicU64,
    client: Client,
    /// The KV and watch clients, with room for big answers (a full read of 10,000 copies is
    /// several MiB; gRPC's default limit is 4 MiB).
    kv: KvClient,
    watcher: WatchClient,
}

/// The largest message the client sends or accepts: etcd limits a request by its
/// `--max-request-bytes`, and answers (ranges) not at all.
const MAX_MESSAGE: usize = 256 << 20;

/// gRPC's status code "cancelled" (a connection closed under a request).
const GRPC_CANCELLED: i32 = 1;

/// gRPC's status code "unavailable".
const GRPC_UNAVAILABLE: i32 = 14;

/// How long a member that let an attempt time out is passed over while another may answer.
const SUSPECT_MS: u64 = 10_000;

/// The deadline of one attempt of a call whose whole deadline is `timeout`, on a cluster of
/// `members`: a third of it with several members (so that a hung one costs a third of the
/// deadline, and the lease renewals, every third of a TTL that is at least the deadline, still
/// land), all of it with one.
fn attempt_deadline(timeout: Duration, members: usize) -> Duration {
    if members > 1 {
        (timeout / 3).max(Duration::from_millis(300)).min(timeout)
    } else {
        timeout
    }
}

/// The endpoints that accept a TCP connection within `wait` (at most 500 ms each), or all of
/// them if none does (the client then says why). The client's balancer keeps sending requests to
/// a member that refuses connections (found by the network-namespace test: with a user and TLS,
/// every open met the dead member of three, 20 times in a row), so a member that is down when a
/// process connects is left out until it answers again ([`join_later`]); see docs/runtime.md, "A member that is
/// down, cut off or hung".
fn reachable(urls: Vec<String>, wait: Duration) -> Vec<String> {
    use std::net::{TcpStream, ToSocketAddrs};
    let wait = wait.clamp(Duration::from_millis(50), Duration::from_millis(500));
    let up: Vec<String> = urls
        .iter()
        .filter(|u| {
            let hostport = u.split_once("://").map_or(u.as_str(), |(_, rest)| rest);
            let hostport = hostport.split('/').next().unwrap_or(hostport);
            hostport
                .to_socket_addrs()
                .is_ok_and(|mut addrs| addrs.any(|a| TcpStream::connect_timeout(&a, wait).is_ok()))
        })
        .cloned()
        .collect();
    if up.is_empty() {
        urls
    } else {
        up
    }
}

/// Whether a failed request may be sent again: surely not applied (no connection was made, or
/// the member had no leader), or any unavailable member when the request is `idempotent`.
fn retryable(e: &etcd_client::Error, idempotent: bool) -> bool {
    let text = describe(e);
    let etcd_client::Error::GRpcStatus(s) = e else {
        // A member that dies under a request can also fail it below gRPC (hyper's "operation
        // was canceled: connection closed", seen in a CI rehearsal of the three-member test):
        // a read goes to the next member as for a cancelled status.
        return idempotent
            && (text.contains("connection closed") || text.contains("operation was canceled"));
    };
    text.contains("tcp connect error")
        || text.contains("no leader")
        || (idempotent
            && (s.code() as i32 == GRPC_UNAVAILABLE
                || s.code() as i32 == GRPC_CANCELLED
                || text.contains("connection closed")))
}

/// Whether an etcd error says that a lease does not exist (expired or revoked).
fn lease_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => s.message().contains("requested lease not found"),
        etcd_client::Error::LeaseKeepAliveError(m) => m.contains("lease not found"),
        _ => false,
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
            StoreError::Unavailable(format!(
                "etcd at {} is full: its database reached its quota (--quota-backend-bytes, \
                 2 GiB by default) and it refuses every write ({text}); free it with etcdctl \
                 compact, etcdctl defrag and etcdctl alarm disarm",
                self.endpoints
            ))
        } else {
            StoreError::Unavailable(format!("etcd at {}: {text}", self.endpoints))
        }
    }
}

/// Whether etcd's answer to a login says the user or password is wrong.
fn refused_login(text: &str) -> bool {
    text.contains("authentication failed") || text.contains("invalid user ID or password")
}

/// An etcd error in one line: a gRPC status by its message and its root cause (such as
/// "connection refused"), without the client's debug dump.
fn describe(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            let mut root: Option<&dyn std::error::Error> = std::error::Error::source(s);
            let mut deepest = None;
            while let Some(cause) = root {
                deepest = Some(cause.to_string());
                root = cause.source();
            }
            match deepest {
                Some(d) => format!("{}: {d}", s.message()),
                None => s.message().to_owned(),
            }
        }
        other => other.to_string(),
    }
}

fn entry(kv: &KeyValue) -> Result<Entry, StoreError> {
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

fn header_revision(h: Option<&etcd_client::ResponseHeader>) -> Revision {
    h.map_or(0, |h| h.revision() as Revision)
}

/// etcd refuses a transaction that writes one key twice; the trait applies writes in order, so
/// only the last write of each key matters.
fn last_write_per_key(ops: &[Op]) -> Vec<&Op> {
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

impl Store for EtcdStore {
    /// One read-only transaction of every prefix's first page ([`PAGE_KEYS`] keys each), then
    /// the rest of each prefix page by page at the first answer's revision.
    fn read(&self, prefixes: &[&str]) -> Result<Read, StoreError> {
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
struct EtcdWatcher {
    rx: mpsc::Receiver<WatchEvent>,
    task: tokio::task::JoinHandle<()>,
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

/// A key read only for its response header (the cluster's revision).
const VERSION_PROBE: &str = "/setpoint/version";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::EtcdCluster;

    /// A request a member's death cancels below gRPC is sent to the next member when it may
    /// be repeated (a read), never when it may have applied (a write).
    #[test]
    fn a_connection_closed_under_a_read_is_retried_and_under_a_write_is_not() {
        let closed = || {
            etcd_client::Error::IoError(std::io::Error::other(
                "operation was canceled: connection closed",
            ))
        };
        assert!(retryable(&closed(), true));
        assert!(!retryable(&closed(), false));
        let other = etcd_client::Error::IoError(std::io::Error::other("permission denied"));
        assert!(!retryable(&other, true));
    }

    fn store(test: &str) -> Option<(EtcdCluster, EtcdStore)> {
        let cluster = EtcdCluster::start_or_skip(test, 1)?;
        let store = cluster.store();
        Some((cluster, store))
    }

    crate::store::conformance_tests!(store(module_path!()), Duration::from_secs(1));

    /// A read of more keys than a page is paged at its first page's revision: every key of
    /// every prefix once, in order, none newer than the read's revision, while another client
    /// rewrites the keys between the pages (without the fixed revision, later pages would
    /// show newer values).
    #[test]
    fn a_paged_read_is_one_revisions_while_writes_go_on() {
        let Some((cluster, _)) = store("a_paged_read") else {
            return;
        };
        let s = cluster.store().with_page_keys(7);
        for first in (0..300).step_by(100) {
            let mut t = Txn::new();
            for i in first..first + 100 {
                t = t.put(format!("/p/{i:03}"), "0");
            }
            s.commit(&t).unwrap();
        }
        let mut t = Txn::new();
        for i in 0..20 {
            t = t.put(format!("/q/{i:02}"), "0");
        }
        s.commit(&t).unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (w, stop) = (cluster.store(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) && i < 3_000 {
                    w.commit(&Txn::new().put(format!("/p/{:03}", i % 300), format!("{i}")))
                        .unwrap();
                    i += 1;
                }
                i
            })
        };
        let mut newer_seen = false;
        for _ in 0..5 {
            let r = s.read(&["/q/", "/p/"]).unwrap();
            let keys: Vec<&str> = r.entries.iter().map(|e| e.key.as_str()).collect();
            let mut want: Vec<String> = (0..300).map(|i| format!("/p/{i:03}")).collect();
            want.extend((0..20).map(|i| format!("/q/{i:02}")));
            assert_eq!(keys, want, "every key once, in order");
            for e in &r.entries {
                assert!(
                    e.mod_revision <= r.revision,
                    "{} at {} after {}",
                    e.key,
                    e.mod_revision,
                    r.revision
                );
            }
            newer_seen |= s.revision().unwrap() > r.revision;
        }
        stop.store(true, Ordering::SeqCst);
        let writes = writer.join().unwrap();
        assert!(
            writes > 0 && newer_seen,
            "the writer moved the store during the reads"
        );
    }

    /// An etcd whose database reached its quota raises the `NOSPACE` alarm and refuses every
    /// write: the refusal says so in one line with what frees it, and what is stored can still
    /// be read.
    #[test]
    fn a_full_etcd_is_named_full_with_what_frees_it_and_still_reads() {
        let cfg = crate::testing::EtcdClusterConfig {
            quota_bytes: Some(2 * 1024 * 1024),
            ..crate::testing::EtcdClusterConfig::loopback(1)
        };
        let Some(cluster) = EtcdCluster::start_or_skip_with("a_full_etcd", &cfg) else {
            return;
        };
        let s = cluster.store();
        s.commit(&Txn::new().put("/kept", "1")).unwrap();
        let value = "x".repeat(500_000);
        let mut refused = None;
        // Bounded: 2 MiB of quota takes a few dozen values of 0.5 MB (history included).
        for i in 0..200 {
            if let Err(e) = s.commit(&Txn::new().put(format!("/fill/{}", i % 4), value.clone())) {
                refused = Some(e);
                break;
            }
        }
        let e = refused.expect("a 2 MiB quota refuses writes within 200 values of 0.5 MB");
        let line = e.to_string();
        assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
        assert!(
            line.contains("is full") && line.contains("alarm disarm"),
            "{line}"
        );
        assert_eq!(line.lines().count(), 1, "{line}");
        let kept = s
            .get("/kept")
            .unwrap()
            .expect("what is stored is still read");
        assert_eq!(kept.value, "1");
    }

    #[test]
    fn a_call_to_a_stopped_server_is_unavailable_within_the_deadline() {
        let Some((mut cluster, _)) = store("a_call_to_a_stopped_server_is_unavailable") else {
            return;
        };
        let timeout = Duration::from_millis(700);
        let s = cluster.store_with(EtcdOptions { timeout });
        s.commit(&Txn::new().put("/a", "1")).unwrap();
        cluster.kill(0);
        for call in ["read", "commit", "revision", "grant", "keep_alive"] {
            let t0 = std::time::Instant::now();
            let r = match call {
                "read" => s.read(&["/"]).map(|_| ()),
                "commit" => s.commit(&Txn::new().put("/a", "2")).map(|_| ()),
                "revision" => s.revision().map(|_| ()),
                "grant" => s.grant(Duration::from_secs(5)).map(|_| ()),
                _ => s.keep_alive(1).map(|_| ()),
            };
            let took = t0.elapsed();
            match r {
                Err(StoreError::Unavailable(m)) => assert!(m.contains(s.endpoints()), "{m}"),
                other => panic!("{call} on a stopped server: {other:?}"),
            }
            assert!(
                took < timeout + Duration::from_millis(600),
                "{call} took {took:?}"
            );
        }
        // Connecting to nothing fails within the deadline too, naming the endpoint.
        let t0 = std::time::Instant::now();
        let err = EtcdStore::connect(&cluster.endpoints(), EtcdOptions { timeout }).unwrap_err();
        assert!(t0.elapsed() < timeout * 2 + Duration::from_millis(600));
        assert!(err.to_string().contains(&cluster.endpoints()[0]), "{err}");
    }

    /// A member stopped (SIGSTOP) until dropped, then continued.
    struct Frozen(u32);

    impl Frozen {
        fn new(pid: u32) -> Self {
            let p = rustix::process::Pid::from_raw(pid as i32).unwrap();
            rustix::process::kill_process(p, rustix::process::Signal::STOP).unwrap();
            Self(pid)
        }
    }

    impl Drop for Frozen {
        fn drop(&mut self) {
            let p = rustix::process::Pid::from_raw(self.0 as i32).unwrap();
            let _ = rustix::process::kill_process(p, rustix::process::Signal::CONT);
        }
    }

    /// Issue 22 item 4: a hung member (stopped, so its sockets accept and nothing answers) is
    /// passed over like a dead one. Each call of every kind answers well within the lease
    /// deadlines: the node lease renews every third of its TTL, so a call that waits out the
    /// whole 3 s deadline on the hung member, once or twice in a row, fences copies.
    #[test]
    fn a_hung_member_of_three_is_passed_over_well_within_the_deadline() {
        let Some(mut cluster) = EtcdCluster::start_or_skip("a_hung_member_of_three", 3) else {
            return;
        };
        let s = cluster.store();
        let lease = s.grant(Duration::from_secs(10)).unwrap();
        let mut rev = s
            .commit(&Txn::new().expect("/k", 0).put("/k", "0"))
            .unwrap();
        // Every member, leader or not, in turn.
        for member in 0..3 {
            let frozen = Frozen::new(cluster.pid(member).unwrap());
            let mut worst = Duration::ZERO;
            let t = std::time::Instant::now();
            let mut calls = 0;
            while t.elapsed() < Duration::from_secs(8) {
                for call in ["read", "commit", "revision", "keep_alive"] {
                    let t0 = std::time::Instant::now();
                    let r = match call {
                        "read" => s.read(&["/k"]).map(|_| ()),
                        "commit" => s
                            .commit(&Txn::new().expect("/k", rev).put("/k", "1"))
                            .map(|r| rev = r),
                        "revision" => s.revision().map(|_| ()),
                        _ => s.keep_alive(lease),
                    };
                    let took = t0.elapsed();
                    // Right after the freeze of the leader the others elect a new one: a call
                    // may fail "no leader" then, but quickly.
                    if let Err(e) = &r {
                        assert!(
                            matches!(e, StoreError::Unavailable(_) | StoreError::Conflict { .. }),
                            "{call} with member {member} hung: {e}"
                        );
                        if let StoreError::Conflict { found, .. } = e {
                            rev = *found;
                        }
                    }
                    worst = worst.max(took);
                    calls += 1;
                }
            }
            drop(frozen);
            // Under the 3 s deadline with room: a call that waited it out would be the bug.
            // The leader's freeze costs one election (etcd's 1 s timeout, then a vote): a call
            // proposed meanwhile waits for the new leader, measured up to 2.0 s on this 2-core
            // machine (a bound of 1.6 s failed 1 run in 4 there).
            assert!(
                worst < Duration::from_millis(2500),
                "with member {member} hung, a call took {worst:?} ({calls} calls)"
            );
            cluster.wait_for_leader(Duration::from_secs(10)).unwrap();
        }
    }

    /// A member down when the handle connects is left out at first, and joins once it is
    /// back: a process started inside a partition or an outage does not keep only the members
    /// it happened to reach (found by the network-namespace test).
    #[test]
    fn a_member_dead_at_connect_joins_the_handle_once_it_is_back() {
        let Some(mut cluster) = EtcdCluster::start_or_skip("a_member_dead_at_connect", 3) else {
            return;
        };
        cluster.kill(2);
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let s = loop {
            match cluster.try_store_with(EtcdOptions::default()) {
                Ok(s) => break s,
                Err(e) => {
                    assert!(std::time::Instant::now() < deadline, "{e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        };
        assert_eq!(s.member_urls().len(), 2, "{:?}", s.member_urls());
        cluster.restart(2).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while s.member_urls().len() < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                s.member_urls()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let dead_at_connect = cluster.endpoints()[2].clone();
        assert!(
            s.member_urls()
                .iter()
                .any(|u| u.ends_with(&dead_at_connect)),
            "{:?} {dead_at_connect}",
            s.member_urls()
        );
        // And it serves: the two that answered at connect go, one at a time.
        cluster.kill(0);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while let Err(e) = s.commit(&Txn::new().put("/k", "1")) {
            assert!(std::time::Instant::now() < deadline, "{e}");
        }
    }

    #[test]
    fn three_members_serve_through_the_loss_of_one_and_refuse_without_quorum() {
        let Some(mut cluster) = EtcdCluster::start_or_skip("three_members", 3) else {
            return;
        };
        let s = cluster.store();
        let r = s
            .commit(&Txn::new().expect("/k", 0).put("/k", "1"))
            .unwrap();
        cluster.kill(0);
        // The client balances over every endpoint: one member down, the others answer (after
        // an election if the dead one led).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let r2 = loop {
            match s.commit(&Txn::new().expect("/k", r).put("/k", "2")) {
                Ok(r2) => break r2,
                Err(StoreError::Unavailable(_)) if std::time::Instant::now() < deadline => {}
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(s.get("/k").unwrap().unwrap().mod_revision, r2);
        cluster.kill(1);
        let t0 = std::time::Instant::now();
        match s.commit(&Txn::new().expect("/k", r2).put("/k", "3")) {
            Err(StoreError::Unavailable(m)) => assert!(
                m.contains("no quorum") || m.contains("unreachable or has no quorum"),
                "{m}"
            ),
            other => panic!("a commit without quorum: {other:?}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        cluster.restart(1).unwrap();
        cluster.wait_for_leader(Duration::from_secs(20)).unwrap();
        // The refused write may still land once quorum returns (the surviving leader may have
        // put it in its log): `Unavailable` is for the answer, not the request. It lands whole
        // or not at all, and a redo of the same compare-and-set is then a conflict, never a
        // second write.
        let e = s.get("/k").unwrap().unwrap();
        let landed = match (e.value.as_str(), e.mod_revision) {
            ("2", rev) if rev == r2 => false,
            ("3", rev) if rev > r2 => true,
            other => panic!("neither before nor after the refused write: {other:?}"),
        };
        let redo = s.commit(&Txn::new().expect("/k", r2).put("/k", "3"));
        assert_eq!(redo.is_err(), landed, "{redo:?}");
        if landed {
            assert!(redo.unwrap_err().is_conflict());
        }
        assert_eq!(s.get("/k").unwrap().unwrap().value, "3");
    }

    #[test]
    fn a_stopped_server_started_again_serves_what_was_committed() {
        let Some((mut cluster, s)) = store("a_stopped_server_started_again") else {
            return;
        };
        let r = s
            .commit(&Txn::new().expect("/k", 0).put("/k", "v"))
            .unwrap();
        cluster.kill(0);
        assert!(s.get("/k").is_err());
        cluster.restart(0).unwrap();
        cluster.wait_for_leader(Duration::from_secs(20)).unwrap();
        let e = s.get("/k").unwrap().unwrap();
        assert_eq!((e.value.as_str(), e.mod_revision), ("v", r));
    }

    #[test]
    fn only_the_last_write_of_a_key_is_sent() {
        let t = Txn::new().put("/a", "1").put("/b", "1").delete("/a");
        let kept = last_write_per_key(&t.ops);
        assert_eq!(
            kept,
            [
                &Op::Put {
                    key: "/b".into(),
                    value: "1".into(),
                    lease: None
                },
                &Op::Delete { key: "/a".into() }
            ]
        );
    }
}
