//! The cluster's members as the store sees them: one client each, a member left out at
//! connect that joins later ([`join_later`]), members passed over for a while after they let an
//! attempt time out ([`SUSPECT_MS`]), and each attempt's share of a call's deadline.

use super::*;

/// The members' clients, as one list that a late member can be added to while calls use the
/// list they took.
pub(super) type Members = Arc<std::sync::RwLock<Arc<Vec<Arc<Member>>>>>;

/// The members in `members` now.
pub(super) fn members_now(members: &Members) -> Arc<Vec<Arc<Member>>> {
    Arc::clone(&members.read().unwrap_or_else(|p| p.into_inner()))
}

/// How long a member left out at connect waits before its first try to join, doubling to
/// [`JOIN_MAX_MS`].
pub(super) const JOIN_FIRST_MS: u64 = 500;
/// The longest wait between two tries of a member left out at connect.
pub(super) const JOIN_MAX_MS: u64 = 5_000;

/// Keeps trying to connect `url`, a member left out when the store connected, and adds it to
/// `members` once it answers a request, so that a process that connected while a member was
/// down, cut off or slow (an agent started inside a partition connects as it heals) does not
/// lose the store for good when a member it did reach dies later (found by the
/// network-namespace test: an agent restarted inside a partition reached one member of three
/// at the heal, and fenced when that member was killed). Ends when the store is dropped (its
/// runtime shuts down).
pub(super) async fn join_later(
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
pub(super) fn member(url: String, client: Client) -> Member {
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
pub(super) struct Member {
    pub(super) url: String,
    /// Until when (wall-clock ms) this member is passed over: it let an attempt time out.
    pub(super) suspect_until: AtomicU64,
    pub(super) client: Client,
    /// The KV and watch clients, with room for big answers (a full read of 10,000 copies is
    /// several MiB; gRPC's default limit is 4 MiB).
    pub(super) kv: KvClient,
    pub(super) watcher: WatchClient,
}

/// The largest message the client sends or accepts: etcd limits a request by its
/// `--max-request-bytes`, and answers (ranges) not at all.
pub(super) const MAX_MESSAGE: usize = 256 << 20;

/// gRPC's status code "cancelled" (a connection closed under a request).
pub(super) const GRPC_CANCELLED: i32 = 1;

/// gRPC's status code "unavailable".
pub(super) const GRPC_UNAVAILABLE: i32 = 14;

/// How long a member that let an attempt time out is passed over while another may answer.
pub(super) const SUSPECT_MS: u64 = 10_000;

/// The deadline of one attempt of a call whose whole deadline is `timeout`, on a cluster of
/// `members`: a third of it with several members (so that a hung one costs a third of the
/// deadline, and the lease renewals, every third of a TTL that is at least the deadline, still
/// land), all of it with one.
pub(super) fn attempt_deadline(timeout: Duration, members: usize) -> Duration {
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
pub(super) fn reachable(urls: Vec<String>, wait: Duration) -> Vec<String> {
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
