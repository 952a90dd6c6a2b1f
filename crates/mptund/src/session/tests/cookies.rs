//! Handshake floods: cookie replies under load, mac2, per-source token buckets, and
//! inits answered a few per wake-up while transport datagrams keep flowing.

use super::*;
use crate::cookie::{Cookie, CookieReplyKey, HandshakeLimits, COOKIE_SECRET_LIFETIME};
use crate::session::server::INITS_PER_WAKE;
use crate::wire::{self, field, CookieReply, PacketType, COOKIE_REPLY_LEN, HANDSHAKE_RESPONSE_LEN};

/// Every init past the first counts as load: the server wants cookies at once.
const ALWAYS_UNDER_LOAD: HandshakeLimits = HandshakeLimits {
    load_threshold_per_s: 0,
    rate_per_source_per_s: 20,
    burst_per_source: 5,
};

/// No cookies and no per-source limit: only the per-wake-up bound is left.
const UNLIMITED: HandshakeLimits = HandshakeLimits {
    load_threshold_per_s: 1_000_000,
    rate_per_source_per_s: 1_000_000,
    burst_per_source: 1_000_000,
};

fn spoofed(index: u32) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V4(Ipv4Addr::from(0xC613_0000 | index)),
        1024 + index as u16,
    )
}

/// The server reads `bytes` from `from` now (and flushes, as after a batch of
/// reads); returns what it sent.
fn server_hears(sim: &mut Sim, from: SocketAddr, bytes: &[u8]) -> Vec<Vec<u8>> {
    sim.capture_server_datagrams();
    sim.inject_to_server_from(from, bytes);
    sent_by_server(sim)
}

/// One wake-up of the server now; returns what it sent.
fn server_wakes(sim: &mut Sim) -> Vec<Vec<u8>> {
    sim.capture_server_datagrams();
    sim.wake_server();
    sent_by_server(sim)
}

/// What the server's socket took since its datagrams were last captured.
fn sent_by_server(sim: &Sim) -> Vec<Vec<u8>> {
    sim.server_datagrams()
        .iter()
        .map(|captured| captured.bytes.clone())
        .collect()
}

fn server_count(sim: &Sim, reason: DropReason) -> u64 {
    sim.server().core().drops().get(reason)
}

fn set_handshake_limits(sim: &mut Sim, limits: HandshakeLimits) {
    sim.server_mut().core_mut().set_handshake_limits(limits);
}

/// A server under test alone: the client's paths are cut, so nothing it sends
/// reaches the server, and the server hears only what a test hands it.
fn server_alone() -> Sim {
    let mut sim = Sim::new(config(&[10], settings(Duration::from_millis(100))));
    sim.cut_path(0, true);
    sim
}

/// The cookie in a reply to `init`, opened as the client would.
fn open_reply(sim: &Sim, reply: &[u8], init: &[u8]) -> Cookie {
    let view = CookieReply::new_checked(reply).unwrap();
    CookieReplyKey::new(&sim.server_public_key())
        .open(view.nonce(), &view.sealed(), &init[field::INIT_MAC1])
        .unwrap()
}

#[test]
fn under_load_an_init_without_mac2_gets_a_cookie_reply_no_larger_and_no_session() {
    let mut sim = server_alone();
    set_handshake_limits(&mut sim, ALWAYS_UNDER_LOAD);
    let init = signed_init(&sim, 1, None);
    let sent = server_hears(&mut sim, client_addr(0), &init);
    assert_eq!(sent.len(), 1, "one cookie reply");
    let reply = &sent[0];
    assert_eq!(wire::packet_type(reply), Ok(PacketType::CookieReply));
    assert_eq!(reply.len(), COOKIE_REPLY_LEN);
    assert!(reply.len() <= init.len());
    let view = CookieReply::new_checked(reply).unwrap();
    assert_eq!(
        view.receiver(),
        SessionId(0xc0c0),
        "addressed to the init's sender"
    );
    assert_eq!(server_count(&sim, DropReason::CookieRequired), 1);
    assert_eq!(sim.server().core().cookie_replies_sent(), 1);
    // Nothing was queued for Diffie-Hellman: no response, no session.
    assert!(server_wakes(&mut sim).is_empty());
    assert_eq!(sim.server().core().session_count(), 0);
    assert_eq!(server_count(&sim, DropReason::HandshakeRejected), 0);
}

#[test]
fn the_client_retries_with_the_cookie_at_once_and_establishes_under_load() {
    let mut sim = Sim::new(config(&[10, 20], settings(Duration::from_millis(100))));
    set_handshake_limits(&mut sim, ALWAYS_UNDER_LOAD);
    sim.capture_client_datagrams();
    // Init, cookie reply, init with mac2, response: two round trips on the 10 ms path.
    sim.run_for(Duration::from_millis(45));
    assert!(
        sim.client().core().is_established(),
        "no session under load"
    );
    let inits: Vec<&Vec<u8>> = sim
        .client_datagrams()
        .iter()
        .map(|captured| &captured.bytes)
        .filter(|bytes| wire::packet_type(bytes) == Ok(PacketType::HandshakeInit))
        .collect();
    assert_eq!(inits.len(), 2);
    assert_eq!(inits[0][field::INIT_MAC2], [0; 16], "no cookie yet");
    assert_ne!(inits[1][field::INIT_MAC2], [0; 16], "mac2 under the cookie");
    assert_eq!(sim.server().core().cookie_replies_sent(), 1);
    assert_eq!(server_count(&sim, DropReason::CookieRequired), 1);
    assert_eq!(
        sim.client()
            .core()
            .drops()
            .get(DropReason::CookieReplyRejected),
        0
    );
    // And the session carries data.
    client_sends(&mut sim, 7, 300);
    sim.run_for(Duration::from_millis(50));
    assert_eq!(tags(sim.server_tun()), vec![7]);
}

#[test]
fn a_cookie_for_another_source_address_does_not_pass() {
    let mut sim = server_alone();
    set_handshake_limits(&mut sim, ALWAYS_UNDER_LOAD);
    let first = signed_init(&sim, 1, None);
    let reply = server_hears(&mut sim, client_addr(0), &first);
    let cookie = open_reply(&sim, &reply[0], &first);

    let with_mac2 = signed_init(&sim, 2, Some(&cookie));
    let other_host = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 9, 9)), 40000);
    let other_port = SocketAddr::new(client_addr(0).ip(), 40001);
    for from in [other_host, other_port] {
        let sent = server_hears(&mut sim, from, &with_mac2);
        assert_eq!(wire::packet_type(&sent[0]), Ok(PacketType::CookieReply));
    }
    assert_eq!(server_count(&sim, DropReason::CookieRequired), 3);
    assert!(server_wakes(&mut sim).is_empty(), "nothing queued");

    // From the address the cookie was made for, the same init is answered.
    assert!(server_hears(&mut sim, client_addr(0), &with_mac2).is_empty());
    let answered = server_wakes(&mut sim);
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].len(), HANDSHAKE_RESPONSE_LEN);
}

#[test]
fn a_cookie_made_with_an_expired_secret_does_not_pass() {
    let mut sim = server_alone();
    set_handshake_limits(&mut sim, ALWAYS_UNDER_LOAD);
    let start = sim.now();
    let first = signed_init(&sim, 1, None);
    let reply = server_hears(&mut sim, client_addr(0), &first);
    let cookie = open_reply(&sim, &reply[0], &first);

    // One rotation later the secret is the previous one and still accepted.
    sim.run_until(start + COOKIE_SECRET_LIFETIME + Duration::from_secs(1));
    let second = signed_init(&sim, 2, Some(&cookie));
    assert!(server_hears(&mut sim, client_addr(0), &second).is_empty());
    assert_eq!(server_wakes(&mut sim).len(), 1, "answered");

    // Two rotations later it is gone.
    sim.run_for(COOKIE_SECRET_LIFETIME);
    let third = signed_init(&sim, 3, Some(&cookie));
    let sent = server_hears(&mut sim, client_addr(0), &third);
    assert_eq!(wire::packet_type(&sent[0]), Ok(PacketType::CookieReply));
    assert_eq!(server_count(&sim, DropReason::CookieRequired), 2);
}

#[test]
fn a_forged_or_unsolicited_cookie_reply_is_refused_by_the_client() {
    let mut sim = Sim::new(config(&[10], settings(Duration::from_millis(100))));
    set_handshake_limits(&mut sim, ALWAYS_UNDER_LOAD);
    sim.capture_client_datagrams();
    // The client's init is out; answer it with a reply sealed for another init.
    sim.run_for(Duration::from_millis(1));
    let other = signed_init(&sim, 1, None);
    let reply_for_other = server_hears(&mut sim, client_addr(0), &other).remove(0);
    let mut forged = reply_for_other.clone();
    // Address it to the client's pending init: the receiver matches, the AAD does not.
    let pending_sender = captured_init(&sim)[field::INIT_SENDER].to_vec();
    forged[field::COOKIE_RECEIVER].copy_from_slice(&pending_sender);
    let rejected = |sim: &Sim| {
        sim.client()
            .core()
            .drops()
            .get(DropReason::CookieReplyRejected)
    };
    sim.inject_to_client(0, &forged);
    sim.inject_to_client(0, &reply_for_other);
    sim.inject_to_client(0, &[0x06, 0, 2, 0, 1]);
    assert_eq!(rejected(&sim), 3);
    // The genuine exchange still completes.
    sim.run_for(Duration::from_millis(100));
    assert!(sim.client().core().is_established());
}

#[test]
fn the_token_bucket_refuses_the_excess_of_one_source() {
    let mut sim = server_alone();
    // Below the load threshold (default 200/s): no cookies, only the bucket (burst 5).
    for timestamp in 1..=10 {
        let init = signed_init(&sim, timestamp, None);
        assert!(server_hears(&mut sim, spoofed(1), &init).is_empty());
    }
    assert_eq!(server_count(&sim, DropReason::HandshakeRateLimited), 5);
    assert_eq!(server_count(&sim, DropReason::CookieRequired), 0);
    // Another source has its own bucket.
    let init = signed_init(&sim, 11, None);
    server_hears(&mut sim, spoofed(2), &init);
    assert_eq!(server_count(&sim, DropReason::HandshakeRateLimited), 5);
    // 50 ms later the first source has one more token (20 per second).
    sim.run_for(Duration::from_millis(50));
    for timestamp in 12..=13 {
        let init = signed_init(&sim, timestamp, None);
        server_hears(&mut sim, spoofed(1), &init);
    }
    assert_eq!(server_count(&sim, DropReason::HandshakeRateLimited), 6);
}

#[test]
fn inits_are_answered_a_few_per_wake_up_while_transport_datagrams_flow() {
    let mut sim = established(&[10], Duration::from_millis(100));
    set_handshake_limits(&mut sim, UNLIMITED);
    let rejected_before = server_count(&sim, DropReason::HandshakeRejected);
    // 40 genuine-looking inits (old timestamps: replays, refused after Diffie-Hellman).
    for index in 0..40 {
        let init = signed_init(&sim, u64::from(index) + 1, None);
        assert!(server_hears(&mut sim, spoofed(index), &init).is_empty());
    }
    assert_eq!(
        sim.server().poll_timeout(),
        Some(sim.now()),
        "the server wants to wake at once"
    );
    server_wakes(&mut sim);
    let per_wake = server_count(&sim, DropReason::HandshakeRejected) - rejected_before;
    assert_eq!(per_wake as usize, INITS_PER_WAKE, "a few inits per wake-up");

    // A data datagram arriving now is handled at once, not behind the queue: it is
    // taken off the path and handed to the server before its next wake-up.
    sim.capture_client_datagrams();
    sim.cut_path(0, true);
    client_sends(&mut sim, 9, 500);
    sim.cut_path(0, false);
    let (path, datagram) = last_data_datagram(&sim);
    sim.inject_to_server(path, &datagram);
    assert_eq!(tags(sim.server_tun()), vec![9]);
    assert_eq!(
        server_count(&sim, DropReason::HandshakeRejected) - rejected_before,
        INITS_PER_WAKE as u64,
        "the rest still waits"
    );

    // The queue drains over the following wake-ups; the session is untouched.
    sim.run_for(Duration::from_millis(10));
    assert_eq!(
        server_count(&sim, DropReason::HandshakeRejected) - rejected_before,
        40
    );
    assert_eq!(sim.server().core().session_count(), 1);
    client_sends(&mut sim, 10, 500);
    sim.run_for(Duration::from_millis(50));
    assert_eq!(tags(sim.server_tun()), vec![9, 10]);
}

#[test]
fn a_full_queue_drops_and_counts_and_half_a_queue_is_load() {
    let mut sim = server_alone();
    set_handshake_limits(&mut sim, UNLIMITED);
    for index in 0..64 {
        let init = signed_init(&sim, u64::from(index) + 1, None);
        assert!(
            server_hears(&mut sim, spoofed(index), &init).is_empty(),
            "queued"
        );
    }
    // Half the queue counts as load whatever the rate: cookies from here on, and
    // only inits with a valid mac2 join the queue until it is full.
    for index in 64..200 {
        let init = signed_init(&sim, u64::from(index) + 1, None);
        let reply = server_hears(&mut sim, spoofed(index), &init);
        assert_eq!(reply.len(), 1, "cookie reply");
        let cookie = open_reply(&sim, &reply[0], &init);
        let with_mac2 = signed_init(&sim, u64::from(index) + 1, Some(&cookie));
        assert!(server_hears(&mut sim, spoofed(index), &with_mac2).is_empty());
    }
    assert_eq!(server_count(&sim, DropReason::CookieRequired), 136);
    assert_eq!(
        server_count(&sim, DropReason::HandshakeQueueFull),
        200 - 128
    );
}

#[test]
fn cookie_replies_go_out_after_the_batchs_acknowledgements() {
    let mut sim = established(&[10], Duration::from_millis(100));
    set_handshake_limits(&mut sim, ALWAYS_UNDER_LOAD);
    // Large enough that two of them make an acknowledgement due at once. Taken off
    // the path, to arrive in one batch with an init.
    sim.capture_client_datagrams();
    sim.cut_path(0, true);
    client_sends(&mut sim, 1, 1000);
    client_sends(&mut sim, 2, 1000);
    let data: Vec<Vec<u8>> = sim
        .client_datagrams()
        .iter()
        .map(|captured| captured.bytes.clone())
        .collect();
    assert_eq!(data.len(), 2);
    sim.run_for(Duration::from_millis(10));
    sim.cut_path(0, false);
    let init = signed_init(&sim, 1, None);
    // One batch of reads: data, an init, data; then the end of the batch.
    sim.capture_server_datagrams();
    sim.inject_batch_to_server([
        (client_addr(0), data[0].as_slice()),
        (spoofed(1), init.as_slice()),
        (client_addr(0), data[1].as_slice()),
    ]);
    let kinds: Vec<_> = sent_by_server(&sim)
        .iter()
        .map(|bytes| wire::packet_type(bytes))
        .collect();
    assert_eq!(
        kinds.last(),
        Some(&Ok(PacketType::CookieReply)),
        "{kinds:?}"
    );
    assert!(
        kinds[..kinds.len() - 1]
            .iter()
            .all(|kind| kind.is_ok_and(|kind| kind.is_transport())),
        "{kinds:?}"
    );
    assert!(kinds.len() >= 2, "the data was acknowledged: {kinds:?}");
}
