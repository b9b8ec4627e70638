//! The `/metrics` endpoint: HTTP/1 on the tokio runtime the daemon already runs (hyper), one
//! path, `GET /metrics`; anything else is 404. [`bind`] opens the listener before the daemon
//! starts, so that an address in use or one that does not parse is refused at once.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};

use super::Metrics;
use crate::rt::Shutdown;

/// The content type of the exposition: OpenMetrics text, which Prometheus reads.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A `--metrics-addr` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MetricsAddrError {
    /// It does not parse.
    #[error("--metrics-addr '{0}' is not an address: accepted PORT (on 127.0.0.1), IP:PORT or [IPv6]:PORT")]
    Syntax(String),
    /// It parses but cannot be bound.
    #[error("--metrics-addr {addr}: cannot listen there: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// `--metrics-addr`: `PORT` (on 127.0.0.1, the default host: metrics are for this machine
/// unless asked otherwise), `IP:PORT` or `[IPv6]:PORT`.
pub fn parse_addr(s: &str) -> Result<SocketAddr, MetricsAddrError> {
    let t = s.trim();
    if let Ok(port) = t.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    t.parse::<SocketAddr>()
        .map_err(|_| MetricsAddrError::Syntax(s.to_owned()))
}

/// Listens on `addr` (a standard listener, made non-blocking for tokio).
pub fn bind(addr: SocketAddr) -> Result<std::net::TcpListener, MetricsAddrError> {
    let l = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|source| MetricsAddrError::Bind { addr, source })?;
    Ok(l)
}

/// Serves `metrics` on `listener` until `shutdown` fires. Each connection is served on a task
/// of its own; a connection that fails is dropped and the endpoint carries on.
pub async fn serve(
    listener: std::net::TcpListener,
    metrics: Arc<Metrics>,
    mut shutdown: Shutdown,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    loop {
        let stream = tokio::select! {
            _ = shutdown.wait() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                // Out of file descriptors, a reset before accept: the next one may do.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let metrics = Arc::clone(&metrics);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let metrics = Arc::clone(&metrics);
                async move { Ok::<_, Infallible>(answer(&req, &metrics)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The answer to one request.
fn answer<B>(req: &Request<B>, metrics: &Metrics) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => (StatusCode::OK, CONTENT_TYPE, metrics.encode()),
        (&Method::GET, _) => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: the one path is /metrics\n".to_owned(),
        ),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "accepted GET /metrics\n".to_owned(),
        ),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(ctype),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_a_port_on_localhost_or_an_ip_with_a_port() {
        assert_eq!(parse_addr("9100").unwrap().to_string(), "127.0.0.1:9100");
        assert_eq!(parse_addr("0.0.0.0:9").unwrap().to_string(), "0.0.0.0:9");
        assert_eq!(parse_addr("[::1]:9").unwrap().to_string(), "[::1]:9");
        for bad in ["localhost:9", "9100000", "x", ""] {
            let e = parse_addr(bad).unwrap_err().to_string();
            assert!(e.contains("accepted PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_address_in_use_is_refused_in_words() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = bind(held.local_addr().unwrap()).unwrap_err().to_string();
        assert!(e.contains("cannot listen there"), "{e}");
    }

    #[tokio::test]
    async fn get_metrics_answers_the_exposition_and_other_paths_404() {
        use std::io::{Read, Write};
        let l = bind(parse_addr("127.0.0.1:0").unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        let m = Metrics::new();
        m.agent.announce("n1");
        let (stop, shutdown) = crate::rt::shutdown_pair();
        let server = tokio::spawn(serve(l, m, shutdown));
        let get = move |path: &'static str| {
            tokio::task::spawn_blocking(move || {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                write!(
                    s,
                    "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                )
                .unwrap();
                let mut text = String::new();
                s.read_to_string(&mut text).unwrap();
                text
            })
        };
        let ok = get("/metrics").await.unwrap();
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(
            ok.contains("setpoint_agent_starts_total{node=\"n1\"} 0"),
            "{ok}"
        );
        assert!(ok.trim_end().ends_with("# EOF"), "{ok}");
        let missing = get("/").await.unwrap();
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        stop.fire();
        server.await.unwrap().unwrap();
    }
}
