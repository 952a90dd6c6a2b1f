//! Copies of what a slower path still carries, sent on a faster path that would idle.

use super::*;

/// Earliest-arrival with late copies on or off, a 200 ms hold.
fn copying(on: bool) -> SessionSettings {
    let mut session = super::super::testing::session_settings(
        "earliest-arrival",
        Duration::from_millis(200),
        MTU,
    );
    session.copy_late_packets = on;
    session
}

/// A burst of 40 packets larger than the fast path's first window, from the server,
/// then nothing: how many of them the client has by `within` after the burst, and the
/// net for more checks.
fn burst_then_quiet(delays_ms: &[u64], on: bool, within: Duration) -> (usize, Net) {
    let mut net = Net::established_with(delays_ms, copying(on));
    net.run_for(Duration::from_secs(1));
    for tag in 0..40 {
        net.server_sends_sized(tag, 1200);
    }
    net.run_for(within);
    let arrived = net.client_received.len();
    (arrived, net)
}

#[test]
fn an_idle_fast_path_carries_copies_of_what_the_slow_path_still_carries() {
    // 5 ms and 60 ms one way: the burst spills past the fast path's window onto the
    // slow one. The fast path's window opens about 10 ms later, with nothing new to
    // send; without copies the stream waits for the slow path.
    let within = Duration::from_millis(45);
    let (without, _) = burst_then_quiet(&[5, 60], false, within);
    let (with, mut net) = burst_then_quiet(&[5, 60], true, within);
    assert!(
        without < 40,
        "the slow path's share arrived within {within:?} without copies"
    );
    assert_eq!(with, 40, "all 40 within {within:?} with copies");
    let copies = net.server.report(net.now).sessions[0].late_copies;
    assert!(copies > 0);
    // The originals arrive later and are dropped as duplicates: each packet once, in
    // order, and nothing skipped.
    net.run_for(Duration::from_millis(500));
    let tags: Vec<u32> = net.client_received.iter().map(|p| tag_of(p)).collect();
    assert_eq!(tags, (0..40).collect::<Vec<_>>());
    let reorder = &net.client.report(net.now).sessions[0].reorder;
    assert_eq!((reorder.gaps_skipped, reorder.released_late), (0, 0));
    let carried = net.server_sent_data_packets();
    assert_eq!(carried.iter().sum::<u64>(), 40 + copies, "{carried:?}");
}

#[test]
fn paths_of_equal_delay_get_no_copies() {
    // Nothing arrives earlier on the other path: a copy would only cost its bytes.
    let (_, mut net) = burst_then_quiet(&[20, 20], true, Duration::from_millis(500));
    assert_eq!(net.server.report(net.now).sessions[0].late_copies, 0);
    let carried = net.server_sent_data_packets();
    assert!(carried.iter().all(|&packets| packets > 0), "{carried:?}");
}
