//! The HTTP side of the metrics endpoint: `GET /metrics` over HTTP/1.1 (hyper), with
//! a bound on what a scraper can hold.
//!
//! - **Connections**: at most `metrics.max_connections` are served at once; one
//!   more is accepted and closed at once, and counted
//!   (`mptund_metrics_connections_refused_total`).
//! - **Time**: a connection serves one request (no keep-alive). Its head must be in
//!   within [`HEADER_TIMEOUT`], and the whole connection ends at
//!   [`CONNECTION_DEADLINE`] whatever the client does, so a client that trickles
//!   its request or never reads the answer frees its slot.
//! - **Token**: with `metrics.bearer_token_file` set, a request without
//!   `Authorization: Bearer <token>` is answered 401 before anything else
//!   (`mptund_metrics_unauthorized_requests_total`); the token is compared by its
//!   digest, in constant time ([`BearerToken::matches`]).
//!
//! The cap and the token are a [`Policy`] that a reload replaces; the listening
//! address is bound at start.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderMap, ACCEPT, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use tokio::sync::watch;

use super::{family, render_with, to_prometheus_text};
use super::{OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE};
use crate::config::{BearerToken, MetricsConfig};
use crate::daemon::snapshot::{Interfaces, ReportSource};

/// A client that has not sent a complete request head after this long is
/// disconnected: a slow-header (slowloris) client holds a slot no longer.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a connection is served, whatever the client does: one request and
/// its answer. Above Prometheus's default `scrape_timeout` (10 s), so Prometheus
/// gives up first; a client that never reads the answer frees its slot then.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(30);
/// Refused connections are logged at most once in this long (each is counted).
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);
/// The `WWW-Authenticate` challenge of a 401 (RFC 6750 §3).
const BEARER_CHALLENGE: &str = "Bearer realm=\"mptund\"";

/// What the endpoint enforces; a reload replaces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The token every request must carry; `None`: none is asked for.
    pub token: Option<BearerToken>,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Policy {
    pub fn of(config: &MetricsConfig) -> Self {
        Self {
            token: config.bearer_token.clone(),
            max_connections: config.max_connections,
        }
    }
}

/// What the endpoint refused, exported with the daemon's own metrics.
#[derive(Debug, Default)]
struct EndpointCounters {
    refused_connections: AtomicU64,
    unauthorized_requests: AtomicU64,
}

/// The counters as one scrape reads them.
#[derive(Clone, Copy, Debug)]
struct EndpointCounts {
    refused_connections: u64,
    unauthorized_requests: u64,
}

impl EndpointCounters {
    fn snapshot(&self) -> EndpointCounts {
        EndpointCounts {
            refused_connections: self.refused_connections.load(Ordering::Relaxed),
            unauthorized_requests: self.unauthorized_requests.load(Ordering::Relaxed),
        }
    }
}

impl Collector for EndpointCounts {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        family(
            &mut encoder,
            "mptund_metrics_connections_refused",
            "Connections to this endpoint closed at once because metrics.max_connections were being served.",
            None,
            MetricType::Counter,
        )?
        .only_counter(self.refused_connections)?;
        family(
            &mut encoder,
            "mptund_metrics_unauthorized_requests",
            "Requests to this endpoint answered 401: no bearer token, or the wrong one.",
            None,
            MetricType::Counter,
        )?
        .only_counter(self.unauthorized_requests)
    }
}

/// The connections being served, counted against the policy's cap.
#[derive(Clone, Debug, Default)]
struct ConnectionSlots {
    active: Arc<AtomicUsize>,
}

/// One connection's slot, given back when the connection's task ends.
#[derive(Debug)]
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnectionSlots {
    /// A slot for one more connection, or `None` while `max` are served.
    fn try_take(&self, max: usize) -> Option<Slot> {
        self.active
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |active| {
                (active < max).then_some(active + 1)
            })
            .ok()
            .map(|_| Slot(self.active.clone()))
    }

    #[cfg(test)]
    fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }
}

/// Whether `headers` carry the policy's token (always, when there is none). Only
/// the first `Authorization` header counts, as the header is a singleton; the
/// scheme is case-insensitive (RFC 9110 §11.1).
fn authorized(token: Option<&BearerToken>, headers: &HeaderMap) -> bool {
    let Some(token) = token else {
        return true;
    };
    headers
        .get(AUTHORIZATION)
        .and_then(|value| bearer_credentials(value.as_bytes()))
        .is_some_and(|presented| token.matches(presented))
}

/// The credentials of an `Authorization: Bearer <credentials>` value.
fn bearer_credentials(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer ";
    let scheme = value.get(..SCHEME.len())?;
    if !scheme.eq_ignore_ascii_case(SCHEME) {
        return None;
    }
    let credentials = value.get(SCHEME.len()..)?.trim_ascii();
    (!credentials.is_empty()).then_some(credentials)
}

/// What answering a request needs; cloned into every connection.
#[derive(Clone)]
struct Service {
    source: ReportSource,
    interfaces: Interfaces,
    policy: watch::Receiver<Policy>,
    counters: Arc<EndpointCounters>,
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response.headers_mut().insert(CONTENT_TYPE, value);
    }
    response
}

/// Answers one HTTP request: 401 without the token, then `GET /metrics` with a
/// fresh report, 404 elsewhere.
async fn handle(
    request: Request<Incoming>,
    service: Service,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let token = service.policy.borrow().token.clone();
    if !authorized(token.as_ref(), request.headers()) {
        service
            .counters
            .unauthorized_requests
            .fetch_add(1, Ordering::Relaxed);
        let mut response = reply(
            StatusCode::UNAUTHORIZED,
            "text/plain",
            "a bearer token is required (Authorization: Bearer <token>)\n".into(),
        );
        response.headers_mut().insert(
            WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static(BEARER_CHALLENGE),
        );
        return Ok(response);
    }
    if request.uri().path() != "/metrics" {
        return Ok(reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "mptund serves /metrics only\n".into(),
        ));
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return Ok(reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "use GET\n".into(),
        ));
    }
    // Content negotiation: OpenMetrics for whoever asks for it (Prometheus does),
    // the classic text format for everyone else.
    let openmetrics = request
        .headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("application/openmetrics-text"));
    let Some(report) = service.source.report().await else {
        return Ok(reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "the daemon is busy or shutting down\n".into(),
        ));
    };
    let counts = service.counters.snapshot();
    let interfaces = service.interfaces.clone();
    // Encoding a thousand sessions takes milliseconds: off the event loop's thread,
    // which only paid for taking the report.
    let encoded = tokio::task::spawn_blocking(move || {
        let text = render_with(report, &interfaces, Some(Box::new(counts)));
        if openmetrics {
            text
        } else {
            to_prometheus_text(&text)
        }
    })
    .await;
    let content_type = if openmetrics {
        OPENMETRICS_CONTENT_TYPE
    } else {
        PROMETHEUS_CONTENT_TYPE
    };
    Ok(match encoded {
        Ok(text) => reply(StatusCode::OK, content_type, text),
        Err(_) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            "encoding the metrics failed\n".into(),
        ),
    })
}

/// Why a connection ended other than by answering its request.
#[derive(Debug, thiserror::Error)]
enum ConnectionEnded {
    /// The client broke the protocol, went away, or was too slow with its head.
    #[error("{0}")]
    Http(#[from] hyper::Error),
    /// [`CONNECTION_DEADLINE`] passed.
    #[error("still open after {}s, closed", CONNECTION_DEADLINE.as_secs())]
    Deadline,
}

/// Serves one connection: one request, then it closes; at [`CONNECTION_DEADLINE`]
/// it is closed whatever state it is in.
async fn serve_connection<S>(stream: S, service: Service) -> Result<(), ConnectionEnded>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(false);
    let connection = builder.serve_connection(
        hyper_util::rt::TokioIo::new(stream),
        hyper::service::service_fn(move |request| handle(request, service.clone())),
    );
    match tokio::time::timeout(CONNECTION_DEADLINE, connection).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(ConnectionEnded::Deadline),
    }
}

/// Serves connections on `listener` until the runtime ends, under the policy
/// `policy` holds at each accept and request.
pub async fn serve(
    listener: tokio::net::TcpListener,
    source: ReportSource,
    interfaces: Interfaces,
    policy: watch::Receiver<Policy>,
) {
    let counters = Arc::new(EndpointCounters::default());
    let slots = ConnectionSlots::default();
    let mut refusal_logged: Option<Instant> = None;
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let max_connections = policy.borrow().max_connections;
        let Some(slot) = slots.try_take(max_connections) else {
            counters.refused_connections.fetch_add(1, Ordering::Relaxed);
            if refusal_logged.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_INTERVAL) {
                refusal_logged = Some(Instant::now());
                tracing::warn!(%remote, "metrics: connection closed, {max_connections} are served already ([metrics] max_connections); further refusals are counted in mptund_metrics_connections_refused_total");
            }
            drop(stream);
            continue;
        };
        let service = Service {
            source: source.clone(),
            interfaces: interfaces.clone(),
            policy: policy.clone(),
            counters: counters.clone(),
        };
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(error) = serve_connection(stream, service).await {
                tracing::debug!(%remote, %error, "metrics connection ended");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::DropCounters;
    use crate::session::Report;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const TOKEN: &str = "kX9tq2J4Zr0v8bYcW1sM3nP5aL7dE6fH=";

    fn token() -> BearerToken {
        BearerToken::new("metrics.token".into(), TOKEN.as_bytes())
    }

    fn headers(authorization: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = authorization {
            headers.insert(AUTHORIZATION, value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn without_a_token_every_request_is_served() {
        assert!(authorized(None, &headers(None)));
        assert!(authorized(None, &headers(Some("Bearer anything"))));
    }

    #[test]
    fn with_a_token_only_the_token_passes() {
        let token = token();
        let check = |value: Option<&str>| authorized(Some(&token), &headers(value));
        assert!(check(Some(&format!("Bearer {TOKEN}"))));
        assert!(
            check(Some(&format!("bearer {TOKEN}"))),
            "the scheme is case-insensitive"
        );
        assert!(check(Some(&format!("BEARER   {TOKEN} "))));
        assert!(!check(None));
        assert!(!check(Some("Bearer")));
        assert!(!check(Some("Bearer ")));
        assert!(!check(Some(TOKEN)), "no scheme");
        assert!(!check(Some(&format!("Basic {TOKEN}"))));
        assert!(
            !check(Some(&format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]))),
            "a prefix"
        );
        assert!(!check(Some(&format!("Bearer {TOKEN}x"))), "longer");
        assert!(!check(Some(&format!("Bearer {}", TOKEN.to_lowercase()))));
    }

    #[test]
    fn the_cap_refuses_the_connection_past_it_and_frees_a_slot_when_one_ends() {
        let slots = ConnectionSlots::default();
        let held: Vec<Slot> = (0..3).map(|_| slots.try_take(3).unwrap()).collect();
        assert_eq!(slots.active(), 3);
        assert!(slots.try_take(3).is_none());
        assert_eq!(slots.active(), 3, "a refusal takes nothing");
        // A reload that lowers the cap leaves the connections served, refuses more.
        assert!(slots.try_take(2).is_none());
        drop(held);
        assert_eq!(slots.active(), 0);
        let again = slots.try_take(1).unwrap();
        assert!(slots.try_take(1).is_none());
        drop(again);
        assert!(slots.try_take(1).is_some());
    }

    /// A service whose report source answers from a task, and the policy's sender.
    fn service(token: Option<BearerToken>) -> (Service, watch::Sender<Policy>) {
        let (source, mut requests) = ReportSource::channel();
        tokio::spawn(async move {
            while let Some(reply) = requests.recv().await {
                let report = Report::new(
                    "server",
                    Vec::new(),
                    Vec::new(),
                    &DropCounters::default(),
                    3,
                );
                let _ = reply.send(report);
            }
        });
        let (policy_tx, policy) = watch::channel(Policy {
            token,
            max_connections: 4,
        });
        let service = Service {
            source,
            interfaces: Interfaces::default(),
            policy,
            counters: Arc::new(EndpointCounters::default()),
        };
        (service, policy_tx)
    }

    /// Sends `request` over an in-memory connection and returns the whole answer.
    async fn exchange(service: Service, request: &str) -> String {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let served = tokio::spawn(serve_connection(server, service));
        client.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
        served.await.unwrap().unwrap();
        answer
    }

    fn get(authorization: Option<&str>) -> String {
        let header =
            authorization.map_or(String::new(), |value| format!("Authorization: {value}\r\n"));
        format!("GET /metrics HTTP/1.1\r\nHost: mptund\r\n{header}\r\n")
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_request_without_the_token_gets_401_and_is_counted() {
        let (service, policy) = service(Some(token()));
        let answer = exchange(service.clone(), &get(None)).await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        assert!(
            answer.contains("www-authenticate: Bearer realm=\"mptund\""),
            "{answer}"
        );
        assert!(!answer.contains("mptund_sessions"));
        let answer = exchange(service.clone(), &get(Some("Bearer wrong"))).await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        let answer = exchange(service.clone(), &get(Some(&format!("Bearer {TOKEN}")))).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            answer.contains("\nmptund_sessions_established_total 3\n"),
            "{answer}"
        );
        assert!(
            answer.contains("\nmptund_metrics_unauthorized_requests_total 2\n"),
            "{answer}"
        );
        assert!(
            answer.contains("\nmptund_metrics_connections_refused_total 0\n"),
            "{answer}"
        );
        // One request per connection: the answer ends the connection.
        assert!(answer.contains("connection: close"), "{answer}");

        // A reload that takes the token away serves everyone; one that sets it
        // again takes effect at the next request.
        policy.send_replace(Policy {
            token: None,
            max_connections: 4,
        });
        assert!(exchange(service.clone(), &get(None))
            .await
            .starts_with("HTTP/1.1 200"));
        policy.send_replace(Policy {
            token: Some(token()),
            max_connections: 4,
        });
        assert!(exchange(service, &get(None))
            .await
            .starts_with("HTTP/1.1 401"));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_client_that_never_finishes_its_request_is_disconnected() {
        let (service, _policy) = service(None);
        let (mut client, server) = tokio::io::duplex(1024);
        client
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: mp")
            .await
            .unwrap();
        let start = tokio::time::Instant::now();
        let ended = serve_connection(server, service).await;
        let held = start.elapsed();
        assert!(matches!(ended, Err(ConnectionEnded::Http(_))), "{ended:?}");
        assert!(
            held >= HEADER_TIMEOUT && held < CONNECTION_DEADLINE,
            "{held:?}"
        );
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_client_that_never_reads_its_answer_is_disconnected_at_the_deadline() {
        let (service, _policy) = service(None);
        // The answer (kilobytes) does not fit the pipe, and the client never reads.
        let (mut client, server) = tokio::io::duplex(256);
        client.write_all(get(None).as_bytes()).await.unwrap();
        let start = tokio::time::Instant::now();
        let ended = serve_connection(server, service).await;
        assert!(matches!(ended, Err(ConnectionEnded::Deadline)), "{ended:?}");
        assert!(start.elapsed() >= CONNECTION_DEADLINE);
        drop(client);
    }
}
