//! Handshake timestamps across client restarts and clock jumps, replays of old
//! inits, and the jitter of handshake retries (`session::handshake_time`).

use super::*;
use crate::session::handshake_time::{FORGET_TIMESTAMP_AFTER, MAX_RETRY_JITTER};
use crate::wire::PacketType;

const SECOND: u64 = 1_000_000_000;
const HOUR: u64 = 3600 * SECOND;
/// The server's session idle timeout in these tests (`testing::server_settings`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(180);

fn handshakes_refused(sim: &Sim) -> u64 {
    sim.server()
        .core()
        .drops()
        .get(DropReason::HandshakeRejected)
}

/// Runs until the server has no session left (its idle timeout, or its keys'
/// reject time, whichever comes first), to the second.
fn run_until_the_server_has_no_session(sim: &mut Sim) {
    let give_up = sim.now() + 2 * IDLE_TIMEOUT;
    while sim.server().core().session_count() > 0 {
        assert!(sim.now() < give_up, "the server's session never ended");
        sim.run_for(Duration::from_secs(1));
    }
}

/// The client as rebooted: same key and paths, nothing of its session, its wall
/// clock reading `wall_ns`. With `stores_timestamps` it stores a ceiling, and
/// starts from the one its last run stored, as the daemon does with a state
/// directory.
fn restart_client(sim: &mut Sim, wall_ns: u64, stores_timestamps: bool) {
    sim.set_client_wall_clock(wall_ns);
    sim.restart_client(stores_timestamps);
}

fn cut_both(sim: &mut Sim, cut: bool) {
    sim.cut_path(0, cut);
    sim.cut_path(1, cut);
}

#[test]
fn a_client_rebooted_with_its_clock_in_the_past_reconnects_after_the_quiet_period() {
    let mut sim = established(&[10, 10], Duration::from_millis(50));
    let wall = sim.client_wall_clock();
    // The router reboots without a real-time clock, and with nothing stored: its
    // clock is an hour behind the timestamp the server remembers.
    restart_client(&mut sim, wall - HOUR, false);
    let start = sim.now();
    // The last run's session lives on at the server until it times out, and the
    // peer's timestamp is kept for the quiet period after it.
    run_until_the_server_has_no_session(&mut sim);
    assert!(
        sim.now() - start >= Duration::from_secs(170),
        "{:?}",
        sim.now() - start
    );
    sim.run_for(FORGET_TIMESTAMP_AFTER - Duration::from_secs(2));
    assert!(!sim.client().core().is_established());
    assert!(
        handshakes_refused(&sim) > 100,
        "{}",
        handshakes_refused(&sim)
    );
    // Then the next init is answered, though its clock is still behind.
    sim.run_for(Duration::from_secs(5));
    assert!(sim.client().core().is_established());
    client_sends(&mut sim, 7, 100);
    sim.run_for(Duration::from_millis(50));
    assert_eq!(tags(sim.server_tun()), [7]);
}

#[test]
fn a_client_that_stores_its_timestamp_reconnects_at_once_after_a_reboot_into_the_past() {
    let mut sim = Sim::new(config(&[10, 10], settings(Duration::from_millis(50))));
    sim.client_mut()
        .core_mut()
        .resume_handshake_timestamps(None);
    sim.run_for(Duration::from_millis(500));
    assert!(sim.client().core().is_established());
    assert!(
        sim.stored_timestamp_ceiling()
            .is_some_and(|ceiling| ceiling > sim.client_wall_clock()),
        "a ceiling above the first init was stored before it went out"
    );
    let wall = sim.client_wall_clock();
    restart_client(&mut sim, wall - HOUR, true);
    // The server still has the last run's session: the new one replaces it as soon
    // as the client uses its keys.
    reconnects_and_delivers(&mut sim, 5);
    assert_eq!(handshakes_refused(&sim), 0);
}

#[test]
fn a_far_future_timestamp_does_not_lock_the_peer_out_for_good() {
    let mut sim = established(&[10, 10], Duration::from_millis(50));
    let wall = sim.client_wall_clock();
    // The client's clock jumps ten years ahead, and a new run handshakes with it.
    restart_client(&mut sim, wall + 10 * 8766 * HOUR, false);
    reconnects_and_delivers(&mut sim, 1);
    // NTP puts the clock right, and the client restarts with nothing stored: the
    // server remembers a timestamp ten years ahead of anything it will send...
    restart_client(&mut sim, wall + 20 * SECOND, false);
    run_until_the_server_has_no_session(&mut sim);
    sim.run_for(FORGET_TIMESTAMP_AFTER - Duration::from_secs(2));
    assert!(!sim.client().core().is_established());
    // ...only until that run's session ended and the quiet period passed.
    sim.run_for(Duration::from_secs(5));
    assert!(sim.client().core().is_established());
    client_sends(&mut sim, 2, 100);
    sim.run_for(Duration::from_millis(50));
    assert_eq!(tags(sim.server_tun()), [1, 2]);
}

#[test]
fn a_replayed_init_is_refused_while_a_session_exists_and_through_the_quiet_period() {
    let mut sim = established_capturing(&[10, 10], settings(Duration::from_millis(50)));
    let init = captured_init(&sim);
    let session = session_id(&sim);
    // Minutes later, through key renewals, the session's peer still refuses it.
    sim.run_for(Duration::from_secs(300));
    arrives_at_server(&mut sim, 1, &init);
    assert_eq!(handshakes_refused(&sim), 1);
    assert_eq!(session_id(&sim), session);

    // The client goes away; its session ends (its keys expire or it idles out).
    cut_both(&mut sim, true);
    run_until_the_server_has_no_session(&mut sim);
    // Within the quiet period the replay is still refused.
    sim.run_for(FORGET_TIMESTAMP_AFTER - Duration::from_secs(2));
    arrives_at_server(&mut sim, 0, &init);
    assert_eq!(handshakes_refused(&sim), 2);

    // After it, the replay is answered, as it would be by a restarted server; the
    // session it starts never takes over: the replayer cannot seal a datagram
    // with its keys (it lacks the client's ephemeral key).
    sim.run_for(Duration::from_secs(2));
    let established = sim.server_report().sessions_established;
    arrives_at_server(&mut sim, 0, &init);
    assert_eq!(handshakes_refused(&sim), 2);
    assert_eq!(
        sim.server().core().session_count(),
        1,
        "an unconfirmed session"
    );
    // Its timestamp is remembered again: the same init once more is refused.
    arrives_at_server(&mut sim, 1, &init);
    assert_eq!(handshakes_refused(&sim), 3);
    sim.run_for(Duration::from_secs(5));
    assert_eq!(sim.server_report().sessions_established, established);

    // The genuine client's newer init replaces the unconfirmed session.
    cut_both(&mut sim, false);
    reconnects_and_delivers(&mut sim, 4);
    assert_eq!(sim.server_report().sessions_established, established + 1);
}

/// When the client sends its inits, from the start of the run, while the server
/// does not answer; `seed` draws the retries' jitter.
fn init_times(seed: u64, inits: usize) -> Vec<Duration> {
    let mut config = config(&[10], settings(Duration::from_millis(50)));
    config.seed = seed;
    let mut sim = Sim::new(config);
    sim.cut_path(0, true);
    sim.capture_client_datagrams();
    let sent = |sim: &Sim| -> Vec<Duration> {
        sim.client_datagrams()
            .iter()
            .filter(|captured| captured.bytes.first() == Some(&(PacketType::HandshakeInit as u8)))
            .map(|captured| captured.at)
            .collect()
    };
    while sent(&sim).len() < inits {
        sim.run_for(Duration::from_secs(10));
    }
    let mut sent = sent(&sim);
    sent.truncate(inits);
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
    // (Their offset is a random walk: with seed 4 it happens to come back to
    // 0.35 ms at the 20th init, with seed 5 it is 479 ms.)
    let other = init_times(5, 20);
    let offsets: Vec<Duration> = sent[..20]
        .iter()
        .zip(&other)
        .map(|(a, b)| a.max(b).saturating_sub(*a.min(b)))
        .collect();
    assert!(
        offsets.last().unwrap() > &Duration::from_millis(100),
        "{offsets:?}"
    );
}
