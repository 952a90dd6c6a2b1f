//! Handshake flood defences, after WireGuard (whitepaper, section 5.3 "Denial of
//! Service Mitigation & Cookies", and its per-source rate limiter).
//!
//! A HandshakeInit that passes mac1 costs the server four X25519 operations; mac1
//! only proves that the sender knows the server's public key, which every client
//! does. So under load the server stops doing that work for senders that have not
//! shown they receive datagrams at their source address:
//!
//! - [`HandshakeLoad`] says when the server is under load: more inits per second
//!   than a configured threshold (this second or the last one).
//! - Under load an init needs a valid **mac2**, a MAC keyed by a **cookie** that only
//!   the owner of the source address can have. An init without one is answered with
//!   a **CookieReply** (52 bytes, smaller than the init, so no amplification) and
//!   dropped before any Diffie-Hellman.
//! - The cookie is `MAC(secret, source IP || port)` ([`CookieSecrets`]); the secret
//!   is random and rotates every [`COOKIE_SECRET_LIFETIME`], and the current and the
//!   previous one are accepted. The server stores nothing per source.
//! - The reply seals the cookie with ChaCha20-Poly1305 under a key every client can
//!   derive from the server's public key ([`CookieReplyKey`]), with the init's mac1 as
//!   associated data: only the sender of that init can use the reply, so an attacker
//!   cannot feed a client cookies for another address.
//! - [`SourceRateLimiter`]: every source address (IPv4 address or IPv6 /64) gets a
//!   token bucket for inits, checked before any Diffie-Hellman, in a table of bounded
//!   size.
//!
//! WireGuard seals the cookie with XChaCha20-Poly1305 and a random 24-byte nonce;
//! ring has no XChaCha, so a random 12-byte nonce is used instead. The key is fixed
//! for the server key's lifetime; at 2^32 replies (a year at 136 replies per second)
//! the chance of a repeated nonce is about 2^-33, and a repeat would only reveal
//! two cookies' XOR and the Poly1305 key of two short replies, not the server key.
//!
//! Everything here is sans-IO: time is a parameter, and the only system call is
//! for randomness (secrets and nonces).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use ring::{digest, hmac};
use thiserror::Error;

use crate::keys::PublicKey;
use crate::wire::{field, HANDSHAKE_INIT_LEN};

/// Length of a cookie and of mac2 (truncated HMAC-SHA256, like mac1).
pub const COOKIE_LEN: usize = 16;
/// Length of mac2.
pub const MAC2_LEN: usize = 16;
/// Length of the random nonce in a CookieReply.
pub const COOKIE_NONCE_LEN: usize = NONCE_LEN;
/// Length of the sealed cookie in a CookieReply: the cookie and its Poly1305 tag.
pub const SEALED_COOKIE_LEN: usize = COOKIE_LEN + 16;
/// Label hashed with the server's public key to form the CookieReply key.
pub const COOKIE_LABEL: &[u8] = b"mptund cookie";
/// How long a cookie secret is used for new cookies (WireGuard's
/// `COOKIE_SECRET_MAX_AGE`, 2 minutes); the previous one is still accepted.
pub const COOKIE_SECRET_LIFETIME: Duration = Duration::from_secs(120);
/// How long a client uses a received cookie: the secret's lifetime minus a margin
/// for the round trip and clock-rate differences, so a cookie is never used after
/// the server stopped accepting it.
pub const COOKIE_CLIENT_LIFETIME: Duration = Duration::from_secs(110);
/// The load detector's window.
const LOAD_WINDOW: Duration = Duration::from_secs(1);
const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// Default `handshake.load_threshold_per_s`: a gateway whose 1,000 clients renew
/// their keys every 2 minutes sees about 8 inits per second; 200 lets all of them
/// reconnect within 5 s after an outage without cookies, and is still a small share
/// of what one core can answer (a few thousand handshakes per second).
pub const DEFAULT_LOAD_THRESHOLD_PER_S: u32 = 200;
/// Default `handshake.rate_per_source_per_s`: WireGuard's `INITIATIONS_PER_SECOND`.
pub const DEFAULT_RATE_PER_SOURCE_PER_S: u32 = 20;
/// Default `handshake.burst_per_source`: WireGuard's `INITIATIONS_BURSTABLE`.
pub const DEFAULT_BURST_PER_SOURCE: u32 = 5;

/// The server's limits on handshake work (`[handshake]` in its configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandshakeLimits {
    /// Past this many inits per second the server answers inits without a valid
    /// mac2 with a cookie reply.
    pub load_threshold_per_s: u32,
    /// Each source's token bucket: inits per second sustained ...
    pub rate_per_source_per_s: u32,
    /// ... and at once.
    pub burst_per_source: u32,
}

impl Default for HandshakeLimits {
    fn default() -> Self {
        Self {
            load_threshold_per_s: DEFAULT_LOAD_THRESHOLD_PER_S,
            rate_per_source_per_s: DEFAULT_RATE_PER_SOURCE_PER_S,
            burst_per_source: DEFAULT_BURST_PER_SOURCE,
        }
    }
}

/// A cookie: proof that its holder receives datagrams at one source address.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Cookie(pub [u8; COOKIE_LEN]);

impl core::fmt::Debug for Cookie {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Cookie(..)")
    }
}

/// Why a CookieReply was refused by the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum CookieError {
    /// The sealed cookie did not authenticate: forged, corrupted, for another
    /// init (the associated data is the init's mac1) or from another server.
    #[error("cookie reply failed to authenticate")]
    Authentication,
}

fn hmac_16(key: &hmac::Key, parts: &[&[u8]]) -> [u8; 16] {
    let mut context = hmac::Context::with_key(key);
    for part in parts {
        context.update(part);
    }
    let mut out = [0u8; 16];
    let tag = context.sign();
    for (slot, byte) in out.iter_mut().zip(tag.as_ref()) {
        *slot = *byte;
    }
    out
}

/// Compares without an early exit, so the time taken does not reveal how many
/// leading bytes matched.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    core::hint::black_box(difference) == 0
}

/// mac2 of an init: HMAC-SHA256 keyed by the cookie over `input` (the init up to
/// mac2), truncated to 16 bytes.
pub fn mac2(cookie: &Cookie, input: &[u8]) -> [u8; MAC2_LEN] {
    hmac_16(&hmac::Key::new(hmac::HMAC_SHA256, &cookie.0), &[input])
}

/// Writes mac2 into an init whose other fields (and mac1) are final.
pub fn write_mac2(cookie: &Cookie, init: &mut [u8; HANDSHAKE_INIT_LEN]) {
    let mac = mac2(cookie, &init[field::INIT_MAC2_INPUT]);
    init[field::INIT_MAC2].copy_from_slice(&mac);
}

/// The server's rotating cookie secrets. A cookie is only recomputed, never stored.
pub struct CookieSecrets {
    rng: SystemRandom,
    current: hmac::Key,
    /// Accepted, never used for new cookies; `None` once it is too old.
    previous: Option<hmac::Key>,
    current_since: Instant,
}

impl core::fmt::Debug for CookieSecrets {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CookieSecrets")
            .field("current_since", &self.current_since)
            .finish_non_exhaustive()
    }
}

impl CookieSecrets {
    pub fn new(now: Instant) -> Self {
        let rng = SystemRandom::new();
        let current = random_secret(&rng);
        Self {
            rng,
            current,
            previous: None,
            current_since: now,
        }
    }

    /// Rotates lazily: a secret is current for [`COOKIE_SECRET_LIFETIME`], then
    /// previous for as long again, then gone.
    fn rotate(&mut self, now: Instant) {
        let age = now.saturating_duration_since(self.current_since);
        if age < COOKIE_SECRET_LIFETIME {
            return;
        }
        let fresh = random_secret(&self.rng);
        let retired = std::mem::replace(&mut self.current, fresh);
        self.previous = (age < 2 * COOKIE_SECRET_LIFETIME).then_some(retired);
        self.current_since = now;
    }

    /// The cookie for `source` under the current secret.
    pub fn cookie_for(&mut self, now: Instant, source: SocketAddr) -> Cookie {
        self.rotate(now);
        cookie_under(&self.current, source)
    }

    /// Whether `mac2` is the MAC of `input` under the cookie of `source`, made with
    /// the current or the previous secret. An all-zero mac2 (a client without a
    /// cookie) is refused without computing anything.
    pub fn verify_mac2(
        &mut self,
        now: Instant,
        source: SocketAddr,
        input: &[u8],
        mac2_field: &[u8],
    ) -> bool {
        if mac2_field.iter().all(|&byte| byte == 0) {
            return false;
        }
        self.rotate(now);
        let under = |secret: &hmac::Key| {
            constant_time_eq(&mac2(&cookie_under(secret, source), input), mac2_field)
        };
        under(&self.current) || self.previous.as_ref().is_some_and(under)
    }

    /// A fresh nonce for a CookieReply.
    pub fn random_nonce(&self) -> [u8; COOKIE_NONCE_LEN] {
        let mut nonce = [0u8; COOKIE_NONCE_LEN];
        // SystemRandom only fails when the OS has no entropy source at all; a
        // zero nonce then is still better than no reply (the key is public-derived,
        // the cookie is the only secret, and it expires within minutes).
        let _ = self.rng.fill(&mut nonce);
        nonce
    }
}

fn random_secret(rng: &SystemRandom) -> hmac::Key {
    // On a failing entropy source the key is random anyway if ring can make one;
    // otherwise the secret is zero-filled and cookies are merely predictable,
    // which costs the flood defence, not confidentiality.
    hmac::Key::generate(hmac::HMAC_SHA256, rng)
        .unwrap_or_else(|_| hmac::Key::new(hmac::HMAC_SHA256, &[0u8; 32]))
}

fn cookie_under(secret: &hmac::Key, source: SocketAddr) -> Cookie {
    let port = source.port().to_be_bytes();
    let cookie = match source.ip() {
        IpAddr::V4(ip) => hmac_16(secret, &[&ip.octets(), &port]),
        IpAddr::V6(ip) => hmac_16(secret, &[&ip.octets(), &port]),
    };
    Cookie(cookie)
}

/// The key that seals cookies in CookieReplies: `SHA-256("mptund cookie" || server
/// public key)`. Both sides derive it; it hides the cookie from observers who do not
/// know the server's key, and the init's mac1 as associated data ties each reply to
/// one init.
pub struct CookieReplyKey {
    key: LessSafeKey,
}

impl core::fmt::Debug for CookieReplyKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CookieReplyKey(..)")
    }
}

impl CookieReplyKey {
    pub fn new(server: &PublicKey) -> Self {
        let mut context = digest::Context::new(&digest::SHA256);
        context.update(COOKIE_LABEL);
        context.update(&server.0);
        let hash = context.finish();
        let key = match UnboundKey::new(&CHACHA20_POLY1305, hash.as_ref()) {
            Ok(unbound) => LessSafeKey::new(unbound),
            Err(_) => unreachable!("SHA-256 gives a 32-byte ChaCha20-Poly1305 key"),
        };
        Self { key }
    }

    /// Seals `cookie` for the sender of the init whose mac1 is `init_mac1`.
    pub fn seal(
        &self,
        nonce: [u8; COOKIE_NONCE_LEN],
        cookie: &Cookie,
        init_mac1: &[u8],
    ) -> [u8; SEALED_COOKIE_LEN] {
        let mut sealed = [0u8; SEALED_COOKIE_LEN];
        let (body, tag_out) = sealed.split_at_mut(COOKIE_LEN);
        body.copy_from_slice(&cookie.0);
        let tag = self.key.seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(init_mac1),
            body,
        );
        match tag {
            Ok(tag) => tag_out.copy_from_slice(tag.as_ref()),
            // ring only refuses inputs longer than ChaCha20's 256 GiB limit.
            Err(_) => unreachable!("a 16-byte cookie is within ChaCha20-Poly1305's limits"),
        }
        sealed
    }

    /// Opens a sealed cookie from a CookieReply answering the init whose mac1 was
    /// `init_mac1`.
    pub fn open(
        &self,
        nonce: [u8; COOKIE_NONCE_LEN],
        sealed: &[u8; SEALED_COOKIE_LEN],
        init_mac1: &[u8],
    ) -> Result<Cookie, CookieError> {
        let mut buffer = *sealed;
        let plain = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(init_mac1),
                &mut buffer,
            )
            .map_err(|_| CookieError::Authentication)?;
        let cookie =
            <[u8; COOKIE_LEN]>::try_from(&plain[..]).map_err(|_| CookieError::Authentication)?;
        Ok(Cookie(cookie))
    }
}

/// A cookie the client received, for the path (source address) it came in on.
#[derive(Clone, Copy, Debug)]
pub struct ReceivedCookie {
    pub cookie: Cookie,
    pub received_at: Instant,
}

impl ReceivedCookie {
    /// The cookie, while the server still accepts it.
    pub fn usable(&self, now: Instant) -> Option<&Cookie> {
        (now.saturating_duration_since(self.received_at) < COOKIE_CLIENT_LIFETIME)
            .then_some(&self.cookie)
    }
}

/// Whether the server is under handshake load: at least `threshold_per_s` inits
/// (that passed mac1) arrived in the current one-second window or the one before,
/// so load lasts at least a second after a flood ends (as in WireGuard).
#[derive(Debug)]
pub struct HandshakeLoad {
    threshold_per_s: u32,
    window_start: Option<Instant>,
    in_window: u32,
    in_previous_window: u32,
}

impl HandshakeLoad {
    pub fn new(threshold_per_s: u32) -> Self {
        Self {
            threshold_per_s,
            window_start: None,
            in_window: 0,
            in_previous_window: 0,
        }
    }

    pub fn set_threshold(&mut self, threshold_per_s: u32) {
        self.threshold_per_s = threshold_per_s;
    }

    fn roll(&mut self, now: Instant) {
        let start = *self.window_start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        if elapsed < LOAD_WINDOW {
            return;
        }
        self.in_previous_window = if elapsed < 2 * LOAD_WINDOW {
            self.in_window
        } else {
            0
        };
        self.in_window = 0;
        self.window_start = Some(now);
    }

    /// Counts one init and says whether the server is now under load.
    pub fn record_init(&mut self, now: Instant) -> bool {
        self.roll(now);
        self.in_window = self.in_window.saturating_add(1);
        self.in_window > self.threshold_per_s || self.in_previous_window > self.threshold_per_s
    }
}

/// Per-source token buckets for inits: `rate_per_s` sustained, `burst` at once. A
/// source is an IPv4 address or an IPv6 /64 (one customer's prefix). The table holds
/// at most `capacity` sources; a bucket that has refilled completely is the same as
/// no bucket and is swept out, and a new source finding the table full of active
/// ones is refused, so a flood from spoofed addresses costs bounded memory.
#[derive(Debug)]
pub struct SourceRateLimiter {
    /// Nanoseconds of refill one init costs.
    cost_nanos: u64,
    /// A full bucket: `burst` inits' worth.
    full_nanos: u64,
    capacity: usize,
    buckets: HashMap<IpAddr, Bucket>,
    last_sweep: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens_nanos: u64,
    last: Instant,
}

/// How often a full table may be swept: a sweep walks the whole table, so a flood
/// of new sources must not trigger one per init.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Why [`SourceRateLimiter::allow`] refused an init.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateLimited {
    /// This source used up its bucket.
    SourceOverRate,
    /// The table is full of active sources; this new one gets no bucket.
    TableFull,
}

impl SourceRateLimiter {
    /// `rate_per_s` and `burst` must be at least 1 (the configuration checks this);
    /// 0 is taken as 1.
    pub fn new(rate_per_s: u32, burst: u32, capacity: usize) -> Self {
        let cost_nanos = NANOS_PER_SECOND / u64::from(rate_per_s.max(1));
        Self {
            cost_nanos,
            full_nanos: cost_nanos.saturating_mul(u64::from(burst.max(1))),
            capacity,
            buckets: HashMap::new(),
            last_sweep: None,
        }
    }

    /// New rate and burst for every source; buckets keep their tokens (capped).
    pub fn set_rate(&mut self, rate_per_s: u32, burst: u32) {
        self.cost_nanos = NANOS_PER_SECOND / u64::from(rate_per_s.max(1));
        self.full_nanos = self.cost_nanos.saturating_mul(u64::from(burst.max(1)));
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Takes one init's token from `source`'s bucket.
    pub fn allow(&mut self, now: Instant, source: IpAddr) -> Result<(), RateLimited> {
        let key = source_key(source);
        if !self.buckets.contains_key(&key) && self.buckets.len() >= self.capacity {
            self.sweep(now);
            if self.buckets.len() >= self.capacity {
                return Err(RateLimited::TableFull);
            }
        }
        let full = self.full_nanos;
        let bucket = self.buckets.entry(key).or_insert(Bucket {
            tokens_nanos: full,
            last: now,
        });
        let refill = now.saturating_duration_since(bucket.last).as_nanos();
        let refill = u64::try_from(refill).unwrap_or(u64::MAX);
        bucket.tokens_nanos = bucket.tokens_nanos.saturating_add(refill).min(full);
        bucket.last = now;
        if bucket.tokens_nanos < self.cost_nanos {
            return Err(RateLimited::SourceOverRate);
        }
        bucket.tokens_nanos -= self.cost_nanos;
        Ok(())
    }

    /// Forgets every bucket that has refilled completely by `now` (at most once a
    /// second: a sweep walks the whole table).
    pub fn sweep(&mut self, now: Instant) {
        if self
            .last_sweep
            .is_some_and(|last| now.saturating_duration_since(last) < SWEEP_INTERVAL)
        {
            return;
        }
        self.last_sweep = Some(now);
        let full = self.full_nanos;
        self.buckets.retain(|_, bucket| {
            let idle = now.saturating_duration_since(bucket.last).as_nanos();
            u128::from(bucket.tokens_nanos) + idle < u128::from(full)
        });
    }
}

/// IPv4 addresses count one by one; IPv6 by /64, since one host usually has a whole
/// /64 to pick source addresses from. An IPv4 client of a dual-stack socket arrives
/// as an IPv4-mapped IPv6 address and counts as its IPv4 address (all of IPv4 is in
/// one /64 of the mapped range).
fn source_key(source: IpAddr) -> IpAddr {
    match source {
        IpAddr::V4(_) => source,
        IpAddr::V6(ip) if ip.to_ipv4_mapped().is_some() => source,
        IpAddr::V6(ip) => {
            let prefix = u128::from(ip) & !((1u128 << 64) - 1);
            IpAddr::V6(prefix.into())
        }
    }
}

#[cfg(test)]
mod tests;
