//! What the operator servers (metrics, control socket) read from the event loop: a
//! fresh report on request, and which interface each path is bound to. A leaf of its
//! own, so that the servers and the loop's operations share it without importing
//! each other.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::session::Report;

/// Requests waiting for the loop at once; more are refused (HTTP 503) rather than
/// queued, so a scraping storm cannot grow memory.
const PENDING_REQUESTS: usize = 64;
/// A request the loop has not answered in this long is given up (the loop is stuck or
/// shutting down).
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks the event loop for a fresh report; cheap to clone, one per server task.
#[derive(Clone)]
pub struct ReportSource {
    requests: mpsc::Sender<oneshot::Sender<Report>>,
}

impl ReportSource {
    /// A source and the loop's end of it, which takes at most [`PENDING_REQUESTS`]
    /// requests at once.
    pub fn channel() -> (Self, mpsc::Receiver<oneshot::Sender<Report>>) {
        let (requests, pending) = mpsc::channel(PENDING_REQUESTS);
        (Self { requests }, pending)
    }

    /// A report taken by the loop now; `None` when the loop is busy with too many
    /// requests, does not answer in time, or has ended.
    pub async fn report(&self) -> Option<Report> {
        let (reply, answer) = oneshot::channel();
        self.requests.try_send(reply).ok()?;
        tokio::time::timeout(REPLY_TIMEOUT, answer).await.ok()?.ok()
    }
}

/// Path name to interface name, for the `interface` label; shared with the event
/// loop, which replaces it when a reload changes the paths.
#[derive(Clone, Debug, Default)]
pub struct Interfaces(Arc<std::sync::RwLock<HashMap<String, String>>>);

impl Interfaces {
    pub fn new(by_path: HashMap<String, String>) -> Self {
        Self(Arc::new(std::sync::RwLock::new(by_path)))
    }

    /// The interface of path `name`, if it is bound to one.
    pub fn get(&self, name: &str) -> Option<String> {
        let by_path = self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        by_path.get(name).cloned()
    }

    pub fn replace(&self, by_path: HashMap<String, String>) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = by_path;
    }
}
