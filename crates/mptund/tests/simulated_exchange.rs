//! The simulator from outside the crate (`cargo test -p mptund --features sim`):
//! a client and a server exchange inner packets over two emulated paths.
#![cfg(feature = "sim")]

use std::time::Duration;

use mptund::session::testing::session_settings;
use mptund::sim::{tag_of, tcp_packet, PathConfig, Sim, SimConfig, CLIENT_INNER, SERVER_INNER};
use mptund_sched::SchedulerChoice;

#[test]
fn inner_packets_cross_both_ways_over_two_paths() {
    let session = session_settings(
        SchedulerChoice::EarliestArrival(Default::default()),
        Duration::from_millis(100),
        1400,
    );
    let paths = vec![PathConfig::delay_ms(10), PathConfig::delay_ms(25)];
    let mut sim = Sim::established(SimConfig::new(session, paths));
    for tag in 0..20 {
        sim.client_sends(&tcp_packet(CLIENT_INNER, SERVER_INNER, 1, tag, 500));
        sim.server_sends(&tcp_packet(SERVER_INNER, CLIENT_INNER, 2, tag, 500));
        sim.run_for(Duration::from_millis(2));
    }
    sim.run_for(Duration::from_millis(300));
    let tags = |deliveries: &[mptund::sim::Delivery]| -> Vec<u32> {
        deliveries.iter().filter_map(|d| tag_of(&d.bytes)).collect()
    };
    let expected: Vec<u32> = (0..20).collect();
    assert_eq!(tags(sim.server_tun()), expected);
    assert_eq!(tags(sim.client_tun()), expected);
}
