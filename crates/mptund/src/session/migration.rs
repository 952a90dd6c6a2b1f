//! Path migration only after validation, as RFC 9000 sections 8.2 and 9 do it for
//! QUIC: an authenticated datagram from a new address on a path proves only that
//! someone holds a copy of it, not that the peer receives there.
//!
//! - Only an authenticated datagram whose nonce counter is the highest its path has
//!   accepted (section 9.3: "the highest-numbered non-probing packet"; per path, as
//!   multipath QUIC numbers packets per path) makes the new address a *candidate*;
//!   a delayed datagram, or a copy of one, is counted as `unvalidated_path`. The
//!   session-wide highest would not do: on a path slower than another, datagrams
//!   are overtaken by the other path's later ones and are never the session's
//!   newest while both carry traffic, so a rebinding there would wait for the
//!   traffic to pause.
//! - The candidate gets a PathChallenge with 8 unpredictable bytes (section 8.2.1);
//!   the path moves only when the peer echoes them in a PathResponse, which it can
//!   only seal if the challenge reached it. Until then the path keeps sending to its
//!   validated address.
//! - Anti-amplification (section 8.1): an unvalidated address is sent at most
//!   [`AMPLIFICATION_FACTOR`] times the bytes authenticated datagrams brought from
//!   it; a challenge that would exceed that waits for more bytes from the candidate.
//! - Challenges are repeated with a backoff from the path's probe timeout and the
//!   validation is abandoned after [`MAX_CHALLENGES`] (section 8.2.4), counted as
//!   `path_validation_failed`, as is one the validated address overtakes with a newer
//!   datagram (section 9.3.3: an attacker's copy that arrived first).
//! - Once validated the path starts afresh (section 9.4): new congestion controller,
//!   RTT and loss state; what was in flight to the old address is re-sent at once on
//!   the other paths, as when a path goes down.
//!
//! Only the server learns addresses; the client's paths are its own sockets. Both
//! answer challenges.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use super::keyring::{KeySlot, Opened};
use super::{Received, Session, SessionPath};
use crate::buffers::BufferPool;
use crate::counters::{DropCounters, DropReason};
use crate::wire::{
    self, Frame, SessionId, TransportHeader, CONTROL_META_LEN, PATH_TOKEN_LEN, TAG_LEN,
    TRANSPORT_HEADER_LEN,
};

/// RFC 9000 section 8.1: at most three times the bytes received from an address
/// that is not validated.
pub const AMPLIFICATION_FACTOR: u64 = 3;

/// Challenges sent before a validation is abandoned. RFC 9000 section 8.2.4 leaves
/// the count open and recommends giving up after three probe timeouts; three
/// challenges at doubling intervals from the path's probe timeout span seven (a
/// slower new address, or a lost challenge, still gets its answer in).
pub const MAX_CHALLENGES: usize = 3;

/// The UDP payload of a Control datagram carrying one PathChallenge.
pub const CHALLENGE_WIRE_LEN: usize =
    TRANSPORT_HEADER_LEN + CONTROL_META_LEN + 3 + PATH_TOKEN_LEN + TAG_LEN;
/// The same for one PathResponse.
pub const RESPONSE_WIRE_LEN: usize = CHALLENGE_WIRE_LEN;

type Token = [u8; PATH_TOKEN_LEN];

/// A path's candidate address while it is being validated.
#[derive(Debug)]
pub struct Validation {
    pub candidate: SocketAddr,
    /// The local address the candidate reached us at, the source of challenges.
    local_ip: Option<IpAddr>,
    /// Every token sent so far; a response to any of them validates.
    tokens: [Token; MAX_CHALLENGES],
    attempts: usize,
    /// An attempt came due while the budget had no room: the challenge goes out
    /// as soon as the candidate sends more.
    pending: bool,
    /// Bytes of authenticated datagrams from the candidate on this path.
    received_bytes: u64,
    /// Bytes sent to the candidate.
    sent_bytes: u64,
    retry_interval: Duration,
    /// The next attempt, or when the last one times out.
    next_attempt: Instant,
}

impl Validation {
    fn new(
        now: Instant,
        candidate: SocketAddr,
        local_ip: Option<IpAddr>,
        retry_interval: Duration,
    ) -> Self {
        Self {
            candidate,
            local_ip,
            tokens: [[0; PATH_TOKEN_LEN]; MAX_CHALLENGES],
            attempts: 0,
            pending: false,
            received_bytes: 0,
            sent_bytes: 0,
            retry_interval,
            next_attempt: now,
        }
    }

    /// Whether `len` more bytes to the candidate stay within the budget.
    pub fn budget_allows(&self, len: usize) -> bool {
        self.sent_bytes.saturating_add(len as u64)
            <= self.received_bytes.saturating_mul(AMPLIFICATION_FACTOR)
    }

    pub fn sent_bytes(&self) -> u64 {
        self.sent_bytes
    }

    pub fn received_bytes(&self) -> u64 {
        self.received_bytes
    }

    fn matches(&self, token: &Token) -> bool {
        self.tokens
            .iter()
            .take(self.attempts)
            .any(|sent| sent == token)
    }

    /// When the timer next has something to do for this validation.
    pub fn poll_timeout(&self) -> Instant {
        self.next_attempt
    }

    /// Starts the next attempt slot: a challenge is due now; the one after it (or the
    /// abandonment) after a doubled interval.
    fn begin_attempt(&mut self, now: Instant) {
        let backoff = 1u32 << self.attempts.min(16);
        self.attempts += 1;
        self.next_attempt = now + self.retry_interval.saturating_mul(backoff);
        self.pending = true;
    }
}

/// The highest nonce counter a path has authenticated, and the keys it was under
/// (every key pair has its own counter).
#[derive(Clone, Copy, Debug)]
pub struct NewestCounter {
    keys: SessionId,
    counter: u64,
}

/// Records an authenticated datagram's counter on `path`; returns whether it is the
/// highest the path has seen. Datagrams under the previous keys never are; the first
/// under renewed keys always is.
fn is_newest_on_path(path: &mut SessionPath, header: &TransportHeader, opened: &Opened) -> bool {
    if opened.slot == KeySlot::Previous {
        return false;
    }
    let newest = path
        .newest_counter
        .is_none_or(|seen| seen.keys != header.receiver || header.counter > seen.counter);
    if newest {
        path.newest_counter = Some(NewestCounter {
            keys: header.receiver,
            counter: header.counter,
        });
    }
    newest
}

impl Session {
    /// Server: path `index` just authenticated (`opened`) a datagram of `wire_len`
    /// bytes with `header` from `received.from`. Starts or feeds a validation when
    /// the address is new, a new path's first address included: until the peer
    /// answers a challenge there, the path carries nothing but the challenges and
    /// their answers, within the amplification budget (RFC 9000 section 9).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_peer_address(
        &mut self,
        now: Instant,
        index: usize,
        received: &Received,
        wire_len: usize,
        header: &TransportHeader,
        opened: &Opened,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        let session = self.local_id.0;
        let Some(path) = self.paths.get_mut(index) else {
            return;
        };
        let newest = is_newest_on_path(path, header, opened);
        if path.remote == Some(received.from) {
            if newest {
                if let Some(abandoned) = path.validation.take() {
                    drops.record(
                        now,
                        DropReason::PathValidationFailed,
                        &format_args!(
                            "path {} validating {}: a newer datagram came from its address {}",
                            path.name, abandoned.candidate, received.from
                        ),
                    );
                }
            }
            return;
        }
        let validated = path
            .remote
            .map_or("no address yet".to_owned(), |address| address.to_string());
        match &mut path.validation {
            Some(validation) if validation.candidate == received.from => {
                validation.received_bytes += wire_len as u64;
                if !validation.pending {
                    return;
                }
            }
            _ if newest => {
                let retry_interval = path.probe.pto_base();
                let replaced = path.validation.replace(Validation::new(
                    now,
                    received.from,
                    received.local_ip,
                    retry_interval,
                ));
                if let Some(replaced) = replaced {
                    drops.record(
                        now,
                        DropReason::PathValidationFailed,
                        &format_args!(
                            "path {} validating {}: the peer moved on to {}",
                            path.name, replaced.candidate, received.from
                        ),
                    );
                }
                path.validations_started += 1;
                tracing::info!(session, path = %path.name, from = %received.from, %validated, "validating a new address");
                if let Some(validation) = &mut path.validation {
                    validation.received_bytes = wire_len as u64;
                    validation.begin_attempt(now);
                }
            }
            _ => {
                return drops.record(
                    now,
                    DropReason::UnvalidatedPath,
                    &format_args!(
                        "path {}: a datagram from {} is not the path's newest; the path stays at {validated}",
                        path.name, received.from
                    ),
                );
            }
        }
        self.send_challenge(now, index, pool, drops);
    }

    /// Sends the challenge that is due on path `index`, if the budget allows.
    fn send_challenge(
        &mut self,
        now: Instant,
        index: usize,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        let Some(validation) = self
            .paths
            .get_mut(index)
            .and_then(|path| path.validation.as_mut())
        else {
            return;
        };
        if !validation.pending {
            return;
        }
        if !validation.budget_allows(CHALLENGE_WIRE_LEN) {
            return drops.record(
                now,
                DropReason::UnvalidatedPath,
                &format_args!(
                    "challenge to {} withheld: {} bytes sent for {} received",
                    validation.candidate, validation.sent_bytes, validation.received_bytes
                ),
            );
        }
        let mut token = [0u8; PATH_TOKEN_LEN];
        if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut token).is_err() {
            return tracing::error!("no randomness for a path challenge");
        }
        let candidate = (validation.candidate, validation.local_ip);
        let write = |_: &mut Self, buf: &mut [u8]| {
            wire::write_frame(buf, &Frame::PathChallenge { token }).unwrap_or(0)
        };
        let Some(outgoing) = self.control_to(index, candidate, false, pool, write) else {
            return;
        };
        let len = outgoing.wire_len() as u64;
        if let Some(validation) = self
            .paths
            .get_mut(index)
            .and_then(|path| path.validation.as_mut())
        {
            let slot = validation.attempts.checked_sub(1);
            if let Some(slot) = slot.and_then(|slot| validation.tokens.get_mut(slot)) {
                *slot = token;
            }
            validation.sent_bytes += len;
            validation.pending = false;
        }
        self.outbox.push(outgoing);
    }

    /// Repeats due challenges and abandons validations that ran out of attempts.
    pub(super) fn handle_validation_timeouts(
        &mut self,
        now: Instant,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        for index in 0..self.paths.len() {
            let Some(path) = self.paths.get_mut(index) else {
                continue;
            };
            let Some(validation) = &mut path.validation else {
                continue;
            };
            if now < validation.next_attempt {
                continue;
            }
            if validation.attempts >= MAX_CHALLENGES {
                let candidate = validation.candidate;
                path.validation = None;
                drops.record(
                    now,
                    DropReason::PathValidationFailed,
                    &format_args!(
                        "path {}: {candidate} never answered its challenges; the path stays at {}",
                        path.name,
                        path.remote
                            .map_or("no address".to_owned(), |a| a.to_string())
                    ),
                );
                continue;
            }
            validation.begin_attempt(now);
            self.send_challenge(now, index, pool, drops);
        }
    }

    /// Either side: answers the newest challenge each path received since the last
    /// time, one PathResponse per path, back on that path. A path with no validated
    /// address answers its candidate within the amplification budget; otherwise the
    /// answer is withheld and counted.
    pub(super) fn send_path_responses(&mut self, pool: &mut BufferPool) {
        for index in 0..self.paths.len() {
            let Some(path) = self.paths.get_mut(index) else {
                continue;
            };
            let Some(token) = path.pending_response.take() else {
                continue;
            };
            let destination = match (path.remote, &path.validation) {
                (Some(remote), _) => (remote, path.local_ip),
                (None, Some(validation)) if validation.budget_allows(RESPONSE_WIRE_LEN) => {
                    (validation.candidate, validation.local_ip)
                }
                _ => {
                    path.responses_withheld += 1;
                    continue;
                }
            };
            let write = |_: &mut Self, buf: &mut [u8]| {
                wire::write_frame(buf, &Frame::PathResponse { token }).unwrap_or(0)
            };
            let Some(outgoing) = self.control_to(index, destination, false, pool, write) else {
                continue;
            };
            if let Some(path) = self.paths.get_mut(index) {
                if path.remote.is_none() {
                    if let Some(validation) = &mut path.validation {
                        validation.sent_bytes += outgoing.wire_len() as u64;
                    }
                }
            }
            self.outbox.push(outgoing);
        }
    }

    /// A PathResponse on path `index`: if it echoes one of the tokens sent to the
    /// candidate, the candidate is validated and becomes the path's address. As in
    /// RFC 9000 section 8.2.2 the response may arrive from any address: only a
    /// holder of the keys who received the challenge can seal it.
    pub(super) fn on_path_response(
        &mut self,
        now: Instant,
        index: usize,
        token: &Token,
        pool: &mut BufferPool,
        drops: &mut DropCounters,
    ) {
        let Some(path) = self.paths.get_mut(index) else {
            return;
        };
        // A late answer to an abandoned or finished validation changes nothing.
        if !path
            .validation
            .as_ref()
            .is_some_and(|validation| validation.matches(token))
        {
            return;
        }
        let Some(validation) = path.validation.take() else {
            return;
        };
        // What is in flight went to the old address; the fresh probe must not wait
        // for it, and in a NAT rebinding it is lost.
        self.reinject_everything_in_flight(now, index, pool, drops);
        let session = self.local_id.0;
        let settings = &self.settings;
        let Some(path) = self.paths.get_mut(index) else {
            return;
        };
        tracing::info!(session, path = %path.name, from = ?path.remote, to = %validation.candidate, "path moved to a validated address");
        path.migrate(now, validation.candidate, validation.local_ip, settings);
        path.validations_succeeded += 1;
    }
}
