//! Handshake timestamps across client restarts and clock jumps, replays of old
//! inits, and the jitter of handshake retries (`session::handshake_time`).

use super::*;
use crate::session::handshake_time::{seeded_random, FORGET_TIMESTAMP_AFTER, MAX_RETRY_JITTER};
use crate::wire::PacketType;

const SECOND: u64 = 1_000_000_000;
const HOUR: u64 = 3600 * SECOND;
/// The server's session idle timeout in these tests (`testing::server_settings`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(180);

impl Net {
    /// The client as rebooted: same key and paths, nothing of its session, its wall
    /// clock reading `wall_ns`. With `stores_timestamps` it stores a ceiling, and
    /// starts from the one its last run stored, as the daemon does with a state
    /// directory.
    fn restart_client(&mut self, wall_ns: u64, stores_timestamps: bool) {
        self.wall.store(wall_ns, Ordering::Relaxed);
        let wall = self.wall.clone();
        let settings = super::super::testing::client_settings(
            self.client_key.clone(),
            self.server_key.public_key(),
            SERVER_ADDR,
            self.delays.len(),
            settings(Duration::from_millis(50)),
        );
        let mut client = ClientCore::new(
            self.now,
            Box::new(move || wall.load(Ordering::Relaxed)),
            settings,
            pool(),
        )
        .with_random_source(seeded_random(2));
        if stores_timestamps {
            client.resume_handshake_timestamps(self.stored_ceiling);
        }
        for index in 0..self.delays.len() {
            client.set_socket_open(self.now, index, true, &mut Vec::new());
        }
        self.client = client;
        // What was on its way to the old run is lost with it.
        self.wire.retain(|datagram| datagram.to_server);
    }

    fn handshakes_refused(&self) -> u64 {
        self.server.drops().get(DropReason::HandshakeRejected)
    }

    /// Runs until the server has no session left (its idle timeout, or its keys'
    /// reject time, whichever comes first), to the second.
    fn run_until_the_server_has_no_session(&mut self) {
        let give_up = self.now + 2 * IDLE_TIMEOUT;
        while self.server.session_count() > 0 {
            assert!(self.now < give_up, "the server's session never ended");
            self.run_for(Duration::from_secs(1));
        }
    }
}

fn received_tags(net: &Net) -> Vec<u32> {
    net.server_received
        .iter()
        .map(|packet| tag_of(packet))
        .collect()
}

#[test]
fn a_client_rebooted_with_its_clock_in_the_past_reconnects_after_the_quiet_period() {
    let mut net = Net::established(&[10, 10], Duration::from_millis(50));
    let wall = net.wall.load(Ordering::Relaxed);
    // The router reboots without a real-time clock, and with nothing stored: its
    // clock is an hour behind the timestamp the server remembers.
    net.restart_client(wall - HOUR, false);
    let start = net.now;
    // The last run's session lives on at the server until it times out, and the
    // peer's timestamp is kept for the quiet period after it.
    net.run_until_the_server_has_no_session();
    assert!(
        net.now - start >= Duration::from_secs(170),
        "{:?}",
        net.now - start
    );
    net.run_for(FORGET_TIMESTAMP_AFTER - Duration::from_secs(2));
    assert!(!net.client.is_established());
    assert!(
        net.handshakes_refused() > 100,
        "{}",
        net.handshakes_refused()
    );
    // Then the next init is answered, though its clock is still behind.
    net.run_for(Duration::from_secs(5));
    assert!(net.client.is_established());
    net.client_sends(7, 100);
    net.run_for(Duration::from_millis(50));
    assert_eq!(received_tags(&net), [7]);
}

#[test]
fn a_client_that_stores_its_timestamp_reconnects_at_once_after_a_reboot_into_the_past() {
    let mut net = Net::with_settings(&[10, 10], settings(Duration::from_millis(50)));
    net.client.resume_handshake_timestamps(None);
    net.run_for(Duration::from_millis(500));
    assert!(net.client.is_established());
    assert!(
        net.stored_ceiling
            .is_some_and(|ceiling| ceiling > net.wall.load(Ordering::Relaxed)),
        "a ceiling above the first init was stored before it went out"
    );
    let wall = net.wall.load(Ordering::Relaxed);
    net.restart_client(wall - HOUR, true);
    // The server still has the last run's session: the new one replaces it as soon
    // as the client uses its keys.
    net.reconnects_and_delivers(5);
    assert_eq!(net.handshakes_refused(), 0);
}

#[test]
fn a_far_future_timestamp_does_not_lock_the_peer_out_for_good() {
    let mut net = Net::established(&[10, 10], Duration::from_millis(50));
    let wall = net.wall.load(Ordering::Relaxed);
    // The client's clock jumps ten years ahead, and a new run handshakes with it.
    net.restart_client(wall + 10 * 8766 * HOUR, false);
    net.reconnects_and_delivers(1);
    // NTP puts the clock right, and the client restarts with nothing stored: the
    // server remembers a timestamp ten years ahead of anything it will send...
    net.restart_client(wall + 20 * SECOND, false);
    net.run_until_the_server_has_no_session();
    net.run_for(FORGET_TIMESTAMP_AFTER - Duration::from_secs(2));
    assert!(!net.client.is_established());
    // ...only until that run's session ended and the quiet period passed.
    net.run_for(Duration::from_secs(5));
    assert!(net.client.is_established());
    net.client_sends(2, 100);
    net.run_for(Duration::from_millis(50));
    assert_eq!(received_tags(&net), [1, 2]);
}

#[test]
fn a_replayed_init_is_refused_while_a_session_exists_and_through_the_quiet_period() {
    let mut net = Net::established(&[10, 10], Duration::from_millis(50));
    let init = net.captured_init().to_vec();
    let session = net.session_id();
    // Minutes later, through key renewals, the session's peer still refuses it.
    net.run_for(Duration::from_secs(300));
    net.inject_to_server(1, init.clone());
    assert_eq!(net.handshakes_refused(), 1);
    assert_eq!(net.session_id(), session);

    // The client goes away; its session ends (its keys expire or it idles out).
    net.cut = vec![true, true];
    net.run_until_the_server_has_no_session();
    // Within the quiet period the replay is still refused.
    net.run_for(FORGET_TIMESTAMP_AFTER - Duration::from_secs(2));
    net.inject_to_server(0, init.clone());
    assert_eq!(net.handshakes_refused(), 2);

    // After it, the replay is answered, as it would be by a restarted server; the
    // session it starts never takes over: the replayer cannot seal a datagram
    // with its keys (it lacks the client's ephemeral key).
    net.run_for(Duration::from_secs(2));
    let established = net.server.report(net.now).sessions_established;
    net.inject_to_server(0, init.clone());
    assert_eq!(net.handshakes_refused(), 2);
    assert_eq!(net.server.session_count(), 1, "an unconfirmed session");
    // Its timestamp is remembered again: the same init once more is refused.
    net.inject_to_server(1, init);
    assert_eq!(net.handshakes_refused(), 3);
    net.run_for(Duration::from_secs(5));
    assert_eq!(net.server.report(net.now).sessions_established, established);

    // The genuine client's newer init replaces the unconfirmed session.
    net.cut = vec![false, false];
    net.reconnects_and_delivers(4);
    assert_eq!(
        net.server.report(net.now).sessions_established,
        established + 1
    );
}

/// The times the client sends its inits while the server does not answer.
fn init_times(seed: u64, inits: usize) -> Vec<Instant> {
    let start = Instant::now();
    let settings = super::super::testing::client_settings(
        PrivateKey::generate(),
        PrivateKey::generate().public_key(),
        SERVER_ADDR,
        1,
        settings(Duration::from_millis(50)),
    );
    let mut client = ClientCore::new(start, Box::new(|| 1_700_000_000 * SECOND), settings, pool())
        .with_random_source(seeded_random(seed));
    let mut out = Vec::new();
    client.set_socket_open(start, 0, true, &mut out);
    let mut sent = Vec::new();
    while sent.len() < inits {
        let at = client.poll_timeout().expect("a handshake is due");
        client.handle_timeout(at, &mut out);
        for outgoing in out.drain(..) {
            if outgoing.packet.bytes().first() == Some(&(PacketType::HandshakeInit as u8)) {
                sent.push(at);
            }
            client.pool().recycle(outgoing.packet);
        }
    }
    sent
}

#[test]
fn handshake_retries_are_spread_over_a_third_of_a_second_after_the_retry_interval() {
    let retry = Duration::from_secs(1);
    let sent = init_times(3, 200);
    let waits: Vec<Duration> = sent.windows(2).map(|pair| pair[1] - pair[0]).collect();
    assert!(
        waits
            .iter()
            .all(|&wait| wait >= retry && wait < retry + MAX_RETRY_JITTER),
        "{waits:?}"
    );
    // Spread over the whole range, not bunched: every third of it is used.
    let jitter_ms: Vec<u128> = waits
        .iter()
        .map(|wait| (*wait - retry).as_millis())
        .collect();
    for (low, high) in [(0, 111), (111, 222), (222, 333)] {
        let count = jitter_ms
            .iter()
            .filter(|&&ms| (low..high).contains(&ms))
            .count();
        assert!(
            count > 40,
            "{count} of {} in {low}..{high} ms",
            jitter_ms.len()
        );
    }
    // Two clients that start together drift apart instead of retrying in step.
    let other = init_times(4, 20);
    let offsets: Vec<Duration> = sent[..20]
        .iter()
        .zip(&other)
        .map(|(a, b)| a.max(b).duration_since(*a.min(b)))
        .collect();
    assert!(
        offsets.last().unwrap() > &Duration::from_millis(100),
        "{offsets:?}"
    );
}
