//! What an etcd error means to the store: whether a request may be sent again, whether a lease
//! is gone, whether a login was refused, and the error in one line.

use super::*;

/// Whether a failed request may be sent again: surely not applied (no connection was made, or
/// the member had no leader), or any unavailable member when the request is `idempotent`.
pub(super) fn retryable(e: &etcd_client::Error, idempotent: bool) -> bool {
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
pub(super) fn lease_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => s.message().contains("requested lease not found"),
        etcd_client::Error::LeaseKeepAliveError(m) => m.contains("lease not found"),
        _ => false,
    }
}

/// Whether etcd's answer to a login says the user or password is wrong.
pub(super) fn refused_login(text: &str) -> bool {
    text.contains("authentication failed") || text.contains("invalid user ID or password")
}

/// An etcd error in one line: a gRPC status by its message and its root cause (such as
/// "connection refused"), without the client's debug dump.
pub(super) fn describe(e: &etcd_client::Error) -> String {
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
