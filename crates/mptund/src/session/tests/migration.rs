//! Path migration: a path moves to a new address only after the peer answers a
//! challenge there, an unvalidated address gets at most three times what it sent,
//! and a migrated path starts with fresh congestion and RTT state.

use super::*;
use crate::session::migration::{AMPLIFICATION_FACTOR, CHALLENGE_WIRE_LEN, MAX_CHALLENGES};
use crate::session::send::PING_WIRE_COST;
use crate::wire::PacketType;

/// Someone else's address on the server's network.
const VICTIM: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 200, 7)), 40999);

/// Path 0's NAT mapping after a rebinding.
fn rebound() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 1, 2)), 50123)
}

impl Net {
    /// Delivers `bytes` to the server now as if sent from `from`.
    fn deliver_to_server_from(&mut self, from: SocketAddr, bytes: &[u8]) {
        let received = Received {
            socket: 0,
            from,
            local_ip: Some(SERVER_ADDR.ip()),
        };
        let packet = self.server.pool().take_copy(bytes).unwrap();
        self.server
            .handle_datagram(self.now, received, packet, &mut self.out);
        self.server.flush_acks(self.now, &mut self.out);
        self.transmit(false);
        self.collect();
    }

    pub(super) fn sent_to(&self, address: SocketAddr) -> usize {
        self.sent_elsewhere
            .iter()
            .filter(|(to, _)| *to == address)
            .map(|(_, len)| len)
            .sum()
    }

    fn server_drops(&self, reason: DropReason) -> u64 {
        self.server.drops().get(reason)
    }

    /// The client's last datagram of `packet_type` on path `path` while every path
    /// is cut (they stay cut): authentic, never seen by the server, and newer than
    /// anything it has seen.
    fn unseen_datagram(&mut self, path: usize, packet_type: PacketType) -> Vec<u8> {
        self.cut = vec![true; self.delays.len()];
        self.captured.clear();
        self.run_for(Duration::from_millis(1000));
        self.captured
            .iter()
            .rev()
            .find(|(socket, bytes)| *socket == path && bytes[0] == packet_type as u8)
            .map(|(_, bytes)| bytes.clone())
            .unwrap()
    }

    /// Server data on every path, so that the paths have RTT samples (their probe
    /// timeouts pace the challenges).
    fn warm_up(&mut self) {
        for tag in 0..10 {
            self.server_sends(tag, CLIENT_INNER);
        }
        self.run_for(Duration::from_millis(100));
        assert!(self
            .server_paths()
            .iter()
            .all(|path| path.srtt_ms.is_some()));
    }
}

#[test]
fn a_rebound_path_moves_only_after_the_client_answers_the_challenge() {
    let mut net = Net::established(&[10, 10], Duration::from_millis(50));
    net.client_addrs[0] = rebound();
    for tag in 0..4 {
        net.client_sends(tag, 200);
    }
    // The first datagram from the new address is there, the response is not yet.
    net.run_for(Duration::from_millis(15));
    let path = &net.server_paths()[0];
    assert_eq!(path.remote, Some(client_addr(0).to_string()));
    assert_eq!(path.validating, Some(rebound().to_string()));
    assert_eq!(net.sent_to(rebound()), 0, "not reachable as path 0 yet");

    net.run_for(Duration::from_millis(20));
    let path = &net.server_paths()[0];
    assert_eq!(path.remote, Some(rebound().to_string()));
    assert_eq!(path.validating, None);
    assert_eq!(
        (path.validations_started, path.validations_succeeded),
        (1, 1)
    );
    assert_eq!(net.server_drops(DropReason::PathValidationFailed), 0);
    // Traffic both ways goes on, path 0 included.
    let sent_before = net.server_paths()[0].sent_packets;
    for tag in 10..20 {
        net.server_sends(tag, CLIENT_INNER);
        net.client_sends(tag, 200);
    }
    net.run_for(Duration::from_millis(200));
    assert_eq!(net.client_received.len(), 10);
    assert_eq!(net.server_received.len(), 14);
    assert!(net.server_paths()[0].sent_packets > sent_before);
}

#[test]
fn a_datagram_from_a_new_address_that_is_not_the_newest_starts_no_validation() {
    let mut net = Net::established(&[10, 10], Duration::from_millis(50));
    // Path 0 cut for a moment: a datagram of it never arrives, later ones do.
    net.cut[0] = true;
    net.captured.clear();
    for tag in 1..=2 {
        net.client_sends(tag, 200);
    }
    net.cut[0] = false;
    let older = net
        .captured
        .iter()
        .find(|(socket, bytes)| *socket == 0 && bytes[0] == PacketType::Data as u8)
        .map(|(_, bytes)| bytes.clone())
        .unwrap();
    for tag in 3..=6 {
        net.client_sends(tag, 200);
    }
    net.run_for(Duration::from_millis(20));

    // Authentic and never seen, but older than what path 0 brought since.
    net.deliver_to_server_from(VICTIM, &older);
    assert_eq!(net.server_drops(DropReason::UnvalidatedPath), 1);
    assert_eq!(net.server_drops(DropReason::Replayed), 0);
    assert_eq!(net.sent_to(VICTIM), 0);
    let path = &net.server_paths()[0];
    assert_eq!(path.remote, Some(client_addr(0).to_string()));
    assert_eq!(
        (path.validating.as_deref(), path.validations_started),
        (None, 0)
    );
    // Its content was genuine: it is delivered.
    net.run_for(Duration::from_millis(100));
    let tags: Vec<u32> = net.server_received.iter().map(|p| tag_of(p)).collect();
    assert_eq!(tags, [1, 2, 3, 4, 5, 6]);
}

#[test]
fn an_unvalidated_address_gets_at_most_three_times_what_it_sent_and_the_path_stays() {
    let mut net = Net::established(&[10, 10], Duration::from_millis(50));
    net.warm_up();
    // A small datagram (a ping) leaves room for two challenges only.
    let ping = net.unseen_datagram(0, PacketType::Control);
    let budget = AMPLIFICATION_FACTOR as usize * ping.len();
    let affordable = budget / CHALLENGE_WIRE_LEN;
    assert!(
        affordable < MAX_CHALLENGES,
        "the test needs a binding budget"
    );

    net.deliver_to_server_from(VICTIM, &ping);
    assert_eq!(
        net.sent_to(VICTIM),
        CHALLENGE_WIRE_LEN,
        "one challenge at once"
    );
    assert_eq!(net.server_paths()[0].validating, Some(VICTIM.to_string()));
    net.run_for(Duration::from_secs(5));

    assert_eq!(net.sent_to(VICTIM), affordable * CHALLENGE_WIRE_LEN);
    assert!(net.sent_to(VICTIM) <= budget);
    // The challenges it could not afford, then the abandoned validation.
    assert_eq!(
        net.server_drops(DropReason::UnvalidatedPath),
        (MAX_CHALLENGES - affordable) as u64
    );
    assert_eq!(net.server_drops(DropReason::PathValidationFailed), 1);
    let path = &net.server_paths()[0];
    assert_eq!(path.remote, Some(client_addr(0).to_string()));
    assert_eq!(path.validating, None);
    assert_eq!(
        (path.validations_started, path.validations_succeeded),
        (1, 0)
    );
    // The real client is still reached at its old address.
    net.cut = vec![false; 2];
    net.run_for(Duration::from_secs(1));
    net.client_received.clear();
    net.server_sends(100, CLIENT_INNER);
    net.server_sends(101, CLIENT_INNER);
    net.run_for(Duration::from_millis(100));
    let tags: Vec<u32> = net.client_received.iter().map(|p| tag_of(p)).collect();
    assert_eq!(tags, [100, 101]);
}

#[test]
fn more_bytes_from_the_candidate_let_a_withheld_challenge_go() {
    let mut net = Net::established(&[10, 10], Duration::from_millis(50));
    net.warm_up();
    let ping = net.unseen_datagram(0, PacketType::Control);
    net.deliver_to_server_from(VICTIM, &ping);
    let affordable = AMPLIFICATION_FACTOR as usize * ping.len() / CHALLENGE_WIRE_LEN;
    // Run until a challenge has been withheld.
    while net.server_drops(DropReason::UnvalidatedPath) == 0 {
        net.run_for(Duration::from_millis(50));
    }
    assert_eq!(net.sent_to(VICTIM), affordable * CHALLENGE_WIRE_LEN);
    // The next fresh datagram from there pays for it.
    let more = net.unseen_datagram(0, PacketType::Control);
    net.deliver_to_server_from(VICTIM, &more);
    assert_eq!(net.sent_to(VICTIM), (affordable + 1) * CHALLENGE_WIRE_LEN);
    let sent = net.sent_to(VICTIM);
    assert!(sent <= AMPLIFICATION_FACTOR as usize * (ping.len() + more.len()));
}

#[test]
fn a_lost_challenge_is_sent_again() {
    let mut net = Net::established(&[10, 10], Duration::from_millis(50));
    net.client_addrs[0] = rebound();
    // The only datagram to the new address before validation is the challenge.
    net.lose_to_client[0] = 1;
    for tag in 0..4 {
        net.client_sends(tag, 200);
    }
    net.run_for(Duration::from_millis(40));
    assert_eq!(net.lose_to_client[0], 0, "the first challenge was lost");
    let path = &net.server_paths()[0];
    assert_eq!(path.remote, Some(client_addr(0).to_string()));
    assert_eq!(path.validating, Some(rebound().to_string()));

    net.run_for(Duration::from_secs(2));
    let path = &net.server_paths()[0];
    assert_eq!(path.remote, Some(rebound().to_string()));
    assert_eq!(
        (path.validations_started, path.validations_succeeded),
        (1, 1)
    );
    assert_eq!(net.server_received.len(), 4);
}

#[test]
fn congestion_and_rtt_state_start_afresh_on_migration_and_in_flight_data_is_resent() {
    let mut net = Net::established(&[10, 10], Duration::from_millis(100));
    let fresh = net.server_paths()[0].clone();
    assert!(
        fresh.srtt_ms.is_some(),
        "the server measures a path once the keys are confirmed"
    );
    for round in 0..20 {
        for tag in 0..20 {
            net.server_sends_sized(round * 20 + tag, 1200);
        }
        net.run_for(Duration::from_millis(20));
    }
    net.run_for(Duration::from_millis(100));
    let warm = net.server_paths()[0].clone();
    assert!(warm.srtt_ms.is_some());
    assert!(warm.cwnd_bytes > fresh.cwnd_bytes, "{warm:?}");
    net.client_received.clear();

    // The NAT rebinds while the server has data in flight to the old mapping.
    net.client_addrs[0] = rebound();
    for tag in 1000..1040 {
        net.server_sends(tag, CLIENT_INNER);
    }
    assert!(net.server_paths()[0].bytes_in_flight > 0);
    net.client_sends(1, 200);
    net.client_sends(2, 200);
    let mut migrated = None;
    for _ in 0..100 {
        net.run_for(Duration::from_millis(1));
        let path = net.server_paths()[0].clone();
        if path.validations_succeeded == 1 {
            migrated = Some(path);
            break;
        }
    }
    let migrated = migrated.expect("the path migrated");
    assert_eq!(migrated.remote, Some(rebound().to_string()));
    assert_eq!(migrated.srtt_ms, None);
    assert_eq!(migrated.min_rtt_ms, None);
    assert_eq!(migrated.cwnd_bytes, fresh.cwnd_bytes);
    // Nothing of the old address's data: only the ping that measures the new one.
    let ip_and_udp = 20 + 8;
    assert_eq!(
        migrated.bytes_in_flight,
        (PING_WIRE_COST - ip_and_udp) as u64
    );
    // What went to the old mapping reached the client anyway, re-sent.
    net.run_for(Duration::from_millis(300));
    let mut tags: Vec<u32> = net.client_received.iter().map(|p| tag_of(p)).collect();
    tags.sort_unstable();
    tags.dedup();
    assert_eq!(tags, (1000..1040).collect::<Vec<_>>());
}

#[test]
fn a_newer_datagram_from_the_validated_address_abandons_a_validation() {
    let mut net = Net::established(&[10, 10], Duration::from_millis(50));
    let ping = net.unseen_datagram(0, PacketType::Control);
    // An attacker's copy comes first; the client, still at its address, goes on.
    net.deliver_to_server_from(VICTIM, &ping);
    assert_eq!(net.server_paths()[0].validating, Some(VICTIM.to_string()));
    net.cut = vec![false; 2];
    net.run_for(Duration::from_millis(600));
    let path = &net.server_paths()[0];
    assert_eq!(path.validating, None);
    assert_eq!(path.remote, Some(client_addr(0).to_string()));
    assert_eq!(net.server_drops(DropReason::PathValidationFailed), 1);
    assert!(net.sent_to(VICTIM) <= AMPLIFICATION_FACTOR as usize * ping.len());
}

#[test]
fn a_rebinding_on_a_path_slower_than_the_others_migrates_under_load() {
    // Path 1's datagrams are always overtaken by path 0's later ones: never the
    // session's newest while both carry data, but the newest on their own path.
    let mut net = Net::established(&[5, 40], Duration::from_millis(100));
    // Path 1's first address was validated when the path opened.
    let opened = &net.server_paths()[1];
    let before = (opened.validations_started, opened.validations_succeeded);
    assert_eq!(before, (1, 1));
    net.client_addrs[1] = rebound();
    for round in 0..100u32 {
        for tag in 0..4 {
            net.client_sends(round * 4 + tag, 1000);
        }
        net.run_for(Duration::from_millis(2));
    }
    let path = &net.server_paths()[1];
    assert_eq!(path.remote, Some(rebound().to_string()));
    assert_eq!(
        (path.validations_started, path.validations_succeeded),
        (before.0 + 1, before.1 + 1)
    );
    net.run_for(Duration::from_millis(300));
    assert_eq!(net.server_received.len(), 400);
}

#[test]
fn a_rebinding_after_a_key_renewal_migrates_although_the_new_counters_start_at_zero() {
    let settings = SessionSettings {
        key_lifetime: crate::crypto::KeyLifetime {
            rekey_after_time: Duration::from_secs(2),
            reject_after_time: Duration::from_secs(3),
            ..crate::crypto::KeyLifetime::default()
        },
        ..settings(Duration::from_millis(100))
    };
    let mut net = Net::established_with(&[10, 10], settings);
    // Many datagrams under the first keys: their counters exceed what the renewed
    // keys start with.
    let mut tag = 0;
    while net.server.report(net.now).sessions[0].key_renewals == 0 {
        net.client_sends(tag, 200);
        net.run_for(Duration::from_millis(2));
        tag += 1;
    }
    net.run_for(Duration::from_millis(100));
    net.client_addrs[0] = rebound();
    for _ in 0..20 {
        net.client_sends(tag, 200);
        net.run_for(Duration::from_millis(2));
        tag += 1;
    }
    net.run_for(Duration::from_millis(100));
    let path = &net.server_paths()[0];
    assert_eq!(path.remote, Some(rebound().to_string()));
    assert_eq!(
        (path.validations_started, path.validations_succeeded),
        (1, 1)
    );
    assert_eq!(net.server_received.len(), tag as usize);
}
