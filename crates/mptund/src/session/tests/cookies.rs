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

impl Net {
    /// Hands the server one datagram from `from` at `now`; returns what it sent.
    fn server_hears(&mut self, now: Instant, from: SocketAddr, bytes: &[u8]) -> Vec<Vec<u8>> {
        let received = Received {
            socket: 0,
            from,
            local_ip: Some(SERVER_ADDR.ip()),
        };
        let packet = self.server.pool().take_copy(bytes).unwrap();
        let mut out = Vec::new();
        self.server.handle_datagram(now, received, packet, &mut out);
        // As the daemon does after every batch of reads; cookie replies go out here.
        self.server.flush_acks(now, &mut out);
        self.sent_by_server(out)
    }

    /// One wake-up of the server; returns what it sent.
    fn server_wakes(&mut self, now: Instant) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        self.server.handle_timeout(now, &mut out);
        self.sent_by_server(out)
    }

    fn sent_by_server(&mut self, mut out: Vec<Outgoing>) -> Vec<Vec<u8>> {
        seal_all(&mut self.server, self.now, &mut out);
        out.into_iter()
            .map(|outgoing| {
                let bytes = outgoing.packet.bytes().to_vec();
                self.server.pool().recycle(outgoing.packet);
                bytes
            })
            .collect()
    }

    fn server_count(&self, reason: DropReason) -> u64 {
        self.server.drops().get(reason)
    }
}

fn tags_of(received: &[Vec<u8>]) -> Vec<u32> {
    received.iter().map(|packet| tag_of(packet)).collect()
}

/// The cookie in a reply to `init`, opened as the client would.
fn open_reply(net: &Net, reply: &[u8], init: &[u8]) -> Cookie {
    let view = CookieReply::new_checked(reply).unwrap();
    CookieReplyKey::new(&net.server_key.public_key())
        .open(view.nonce(), &view.sealed(), &init[field::INIT_MAC1])
        .unwrap()
}

#[test]
fn under_load_an_init_without_mac2_gets_a_cookie_reply_no_larger_and_no_session() {
    let mut net = Net::new(&[10], Duration::from_millis(100));
    net.server.set_handshake_limits(ALWAYS_UNDER_LOAD);
    let now = net.now;
    let init = net.signed_init(1, None);
    let sent = net.server_hears(now, client_addr(0), &init);
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
    assert_eq!(net.server_count(DropReason::CookieRequired), 1);
    assert_eq!(net.server.cookie_replies_sent(), 1);
    // Nothing was queued for Diffie-Hellman: no response, no session.
    assert!(net.server_wakes(now).is_empty());
    assert_eq!(net.server.session_count(), 0);
    assert_eq!(net.server_count(DropReason::HandshakeRejected), 0);
}

#[test]
fn the_client_retries_with_the_cookie_at_once_and_establishes_under_load() {
    let mut net = Net::new(&[10, 20], Duration::from_millis(100));
    net.server.set_handshake_limits(ALWAYS_UNDER_LOAD);
    // Init, cookie reply, init with mac2, response: two round trips on the 10 ms path.
    net.run_for(Duration::from_millis(45));
    assert!(net.client.is_established(), "no session under load");
    let inits: Vec<&Vec<u8>> = net
        .captured
        .iter()
        .map(|(_, bytes)| bytes)
        .filter(|bytes| wire::packet_type(bytes) == Ok(PacketType::HandshakeInit))
        .collect();
    assert_eq!(inits.len(), 2);
    assert_eq!(inits[0][field::INIT_MAC2], [0; 16], "no cookie yet");
    assert_ne!(inits[1][field::INIT_MAC2], [0; 16], "mac2 under the cookie");
    assert_eq!(net.server.cookie_replies_sent(), 1);
    assert_eq!(net.server_count(DropReason::CookieRequired), 1);
    assert_eq!(net.client.drops().get(DropReason::CookieReplyRejected), 0);
    // And the session carries data.
    net.client_sends(7, 300);
    net.run_for(Duration::from_millis(50));
    assert_eq!(tags_of(&net.server_received), vec![7]);
}

#[test]
fn a_cookie_for_another_source_address_does_not_pass() {
    let mut net = Net::new(&[10], Duration::from_millis(100));
    net.server.set_handshake_limits(ALWAYS_UNDER_LOAD);
    let now = net.now;
    let first = net.signed_init(1, None);
    let reply = net.server_hears(now, client_addr(0), &first);
    let cookie = open_reply(&net, &reply[0], &first);

    let with_mac2 = net.signed_init(2, Some(&cookie));
    let other_host = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 9, 9)), 40000);
    let other_port = SocketAddr::new(client_addr(0).ip(), 40001);
    for from in [other_host, other_port] {
        let sent = net.server_hears(now, from, &with_mac2);
        assert_eq!(wire::packet_type(&sent[0]), Ok(PacketType::CookieReply));
    }
    assert_eq!(net.server_count(DropReason::CookieRequired), 3);
    assert!(net.server_wakes(now).is_empty(), "nothing queued");

    // From the address the cookie was made for, the same init is answered.
    assert!(net.server_hears(now, client_addr(0), &with_mac2).is_empty());
    let answered = net.server_wakes(now);
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].len(), HANDSHAKE_RESPONSE_LEN);
}

#[test]
fn a_cookie_made_with_an_expired_secret_does_not_pass() {
    let mut net = Net::new(&[10], Duration::from_millis(100));
    net.server.set_handshake_limits(ALWAYS_UNDER_LOAD);
    let start = net.now;
    let first = net.signed_init(1, None);
    let reply = net.server_hears(start, client_addr(0), &first);
    let cookie = open_reply(&net, &reply[0], &first);

    // One rotation later the secret is the previous one and still accepted.
    let rotated = start + COOKIE_SECRET_LIFETIME + Duration::from_secs(1);
    let second = net.signed_init(2, Some(&cookie));
    assert!(net
        .server_hears(rotated, client_addr(0), &second)
        .is_empty());
    assert_eq!(net.server_wakes(rotated).len(), 1, "answered");

    // Two rotations later it is gone.
    let expired = rotated + COOKIE_SECRET_LIFETIME;
    let third = net.signed_init(3, Some(&cookie));
    let sent = net.server_hears(expired, client_addr(0), &third);
    assert_eq!(wire::packet_type(&sent[0]), Ok(PacketType::CookieReply));
    assert_eq!(net.server_count(DropReason::CookieRequired), 2);
}

#[test]
fn a_forged_or_unsolicited_cookie_reply_is_refused_by_the_client() {
    let mut net = Net::new(&[10], Duration::from_millis(100));
    net.server.set_handshake_limits(ALWAYS_UNDER_LOAD);
    // The client's init is out; answer it with a reply sealed for another init.
    net.run_for(Duration::from_millis(1));
    let now = net.now;
    let other = net.signed_init(1, None);
    let reply_for_other = net.server_hears(now, client_addr(0), &other).remove(0);
    let mut forged = reply_for_other.clone();
    // Address it to the client's pending init: the receiver matches, the AAD does not.
    let pending_sender = net
        .captured
        .iter()
        .find(|(_, bytes)| wire::packet_type(bytes) == Ok(PacketType::HandshakeInit))
        .map(|(_, bytes)| bytes[field::INIT_SENDER].to_vec())
        .unwrap();
    forged[field::COOKIE_RECEIVER].copy_from_slice(&pending_sender);
    let rejected = |net: &Net| net.client.drops().get(DropReason::CookieReplyRejected);
    let inject = |net: &mut Net, bytes: Vec<u8>| {
        net.wire.push(InFlight {
            arrives: net.now,
            to_server: false,
            path: 0,
            bytes,
        });
    };
    inject(&mut net, forged);
    inject(&mut net, reply_for_other);
    inject(&mut net, vec![0x06, 0, 2, 0, 1]);
    net.run_for(Duration::ZERO);
    assert_eq!(rejected(&net), 3);
    // The genuine exchange still completes.
    net.run_for(Duration::from_millis(100));
    assert!(net.client.is_established());
}

#[test]
fn the_token_bucket_refuses_the_excess_of_one_source() {
    let mut net = Net::new(&[10], Duration::from_millis(100));
    let now = net.now;
    // Below the load threshold (default 200/s): no cookies, only the bucket (burst 5).
    for timestamp in 1..=10 {
        let init = net.signed_init(timestamp, None);
        assert!(net.server_hears(now, spoofed(1), &init).is_empty());
    }
    assert_eq!(net.server_count(DropReason::HandshakeRateLimited), 5);
    assert_eq!(net.server_count(DropReason::CookieRequired), 0);
    // Another source has its own bucket.
    let init = net.signed_init(11, None);
    net.server_hears(now, spoofed(2), &init);
    assert_eq!(net.server_count(DropReason::HandshakeRateLimited), 5);
    // 50 ms later the first source has one more token (20 per second).
    let later = now + Duration::from_millis(50);
    for timestamp in 12..=13 {
        let init = net.signed_init(timestamp, None);
        net.server_hears(later, spoofed(1), &init);
    }
    assert_eq!(net.server_count(DropReason::HandshakeRateLimited), 6);
}

#[test]
fn inits_are_answered_a_few_per_wake_up_while_transport_datagrams_flow() {
    let mut net = Net::established(&[10], Duration::from_millis(100));
    net.server.set_handshake_limits(UNLIMITED);
    let now = net.now;
    let rejected_before = net.server_count(DropReason::HandshakeRejected);
    // 40 genuine-looking inits (old timestamps: replays, refused after Diffie-Hellman).
    for index in 0..40 {
        let init = net.signed_init(u64::from(index) + 1, None);
        assert!(net.server_hears(now, spoofed(index), &init).is_empty());
    }
    assert_eq!(
        net.server.poll_timeout(),
        Some(now),
        "the server wants to wake at once"
    );
    net.server_wakes(now);
    let per_wake = net.server_count(DropReason::HandshakeRejected) - rejected_before;
    assert_eq!(per_wake as usize, INITS_PER_WAKE, "a few inits per wake-up");

    // A data datagram arriving now is handled at once, not behind the queue.
    net.client_sends(9, 500);
    let datagram = net.wire.pop().unwrap();
    net.now = datagram.arrives;
    net.deliver(datagram);
    assert_eq!(tags_of(&net.server_received), vec![9]);
    assert_eq!(
        net.server_count(DropReason::HandshakeRejected) - rejected_before,
        INITS_PER_WAKE as u64,
        "the rest still waits"
    );

    // The queue drains over the following wake-ups; the session is untouched.
    net.run_for(Duration::from_millis(10));
    assert_eq!(
        net.server_count(DropReason::HandshakeRejected) - rejected_before,
        40
    );
    assert_eq!(net.server.session_count(), 1);
    net.client_sends(10, 500);
    net.run_for(Duration::from_millis(50));
    assert_eq!(tags_of(&net.server_received), vec![9, 10]);
}

#[test]
fn a_full_queue_drops_and_counts_and_half_a_queue_is_load() {
    let mut net = Net::new(&[10], Duration::from_millis(100));
    net.server.set_handshake_limits(UNLIMITED);
    let now = net.now;
    for index in 0..64 {
        let init = net.signed_init(u64::from(index) + 1, None);
        assert!(
            net.server_hears(now, spoofed(index), &init).is_empty(),
            "queued"
        );
    }
    // Half the queue counts as load whatever the rate: cookies from here on, and
    // only inits with a valid mac2 join the queue until it is full.
    for index in 64..200 {
        let init = net.signed_init(u64::from(index) + 1, None);
        let reply = net.server_hears(now, spoofed(index), &init);
        assert_eq!(reply.len(), 1, "cookie reply");
        let cookie = open_reply(&net, &reply[0], &init);
        let with_mac2 = net.signed_init(u64::from(index) + 1, Some(&cookie));
        assert!(net.server_hears(now, spoofed(index), &with_mac2).is_empty());
    }
    assert_eq!(net.server_count(DropReason::CookieRequired), 136);
    assert_eq!(net.server_count(DropReason::HandshakeQueueFull), 200 - 128);
}

#[test]
fn cookie_replies_go_out_after_the_batchs_acknowledgements() {
    let mut net = Net::established(&[10], Duration::from_millis(100));
    net.server.set_handshake_limits(ALWAYS_UNDER_LOAD);
    // Large enough that two of them make an acknowledgement due at once.
    net.client_sends(1, 1000);
    net.client_sends(2, 1000);
    let data: Vec<Vec<u8>> = net.wire.drain(..).map(|datagram| datagram.bytes).collect();
    assert_eq!(data.len(), 2);
    let now = net.now + Duration::from_millis(10);
    let init = net.signed_init(1, None);
    // One batch of reads: data, an init, data; then the end of the batch.
    let mut out = Vec::new();
    for (from, bytes) in [
        (client_addr(0), &data[0]),
        (spoofed(1), &init),
        (client_addr(0), &data[1]),
    ] {
        let received = Received {
            socket: 0,
            from,
            local_ip: Some(SERVER_ADDR.ip()),
        };
        let packet = net.server.pool().take_copy(bytes).unwrap();
        net.server.handle_datagram(now, received, packet, &mut out);
    }
    net.server.flush_acks(now, &mut out);
    let sent = net.sent_by_server(out);
    let kinds: Vec<_> = sent.iter().map(|bytes| wire::packet_type(bytes)).collect();
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
