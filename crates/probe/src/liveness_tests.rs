use super::*;

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

use Liveness::{Active, Down, Probing, Suspect};

/// PTO 100 ms: Suspect after 200 ms of silence, Down after 400 ms.
#[test]
fn full_cycle_with_exact_times() {
    let pto = ms(100);
    assert_eq!(LivenessMonitor::suspect_after(pto), ms(200));
    assert_eq!(LivenessMonitor::down_after(pto), ms(400));
    let t0 = Instant::now();
    let mut live = LivenessMonitor::new();
    assert_eq!(live.state(), Active);
    assert_eq!(live.poll_timeout(pto), None, "nothing sent, no silence");
    live.on_sent(t0);
    live.on_sent(t0 + ms(50)); // silence still counts from the first send
    type Step = (u64, Option<LivenessChange>, Option<u64>);
    #[rustfmt::skip]
    let steps: &[Step] = &[
        // (time ms, transition, next deadline ms)
        (199, None,                    Some(200)),
        (200, Some((Active, Suspect)), Some(400)),
        (399, None,                    Some(400)),
        (400, Some((Suspect, Down)),   None),
        (900, None,                    None),
    ];
    for &(at, change, next) in steps {
        assert_eq!(live.on_timeout(t0 + ms(at), pto), change, "{at} ms");
        assert_eq!(live.poll_timeout(pto), next.map(|n| t0 + ms(n)), "{at} ms");
    }
    assert_eq!(live.start_probing(t0 + ms(1000)), Some((Down, Probing)));
    assert_eq!(live.poll_timeout(pto), Some(t0 + ms(1400)));
    assert_eq!(live.on_heard(t0 + ms(1080), false), Some((Probing, Active)));
    assert_eq!(live.state(), Active);
    assert_eq!(
        live.poll_timeout(pto),
        None,
        "nothing in flight after the answer"
    );
}

#[test]
fn unanswered_probe_goes_back_down() {
    let pto = ms(100);
    let t0 = Instant::now();
    let mut live = LivenessMonitor::new();
    live.on_sent(t0);
    live.on_timeout(t0 + ms(200), pto);
    live.on_timeout(t0 + ms(400), pto);
    assert_eq!(live.start_probing(t0 + ms(500)), Some((Down, Probing)));
    assert_eq!(live.on_timeout(t0 + ms(899), pto), None);
    assert_eq!(live.on_timeout(t0 + ms(900), pto), Some((Probing, Down)));
    assert_eq!(live.start_probing(t0 + ms(950)), Some((Down, Probing)));
}

#[test]
fn heard_while_suspect_returns_to_active_and_restarts_silence() {
    let pto = ms(100);
    let t0 = Instant::now();
    let mut live = LivenessMonitor::new();
    live.on_sent(t0);
    assert_eq!(live.on_timeout(t0 + ms(250), pto), Some((Active, Suspect)));
    assert_eq!(live.on_heard(t0 + ms(300), true), Some((Suspect, Active)));
    // still in flight: silence restarts at 300 ms
    assert_eq!(live.poll_timeout(pto), Some(t0 + ms(500)));
    assert_eq!(
        live.on_heard(t0 + ms(310), true),
        None,
        "no change, no transition"
    );
}

#[test]
fn start_probing_only_from_down() {
    let t0 = Instant::now();
    let mut live = LivenessMonitor::new();
    assert_eq!(live.start_probing(t0), None);
    assert_eq!(live.state(), Active);
}

/// Each row: PTO (ms), Suspect threshold (ms), Down threshold (ms).
#[test]
fn thresholds_table() {
    #[rustfmt::skip]
    let cases: &[(u64, u64, u64)] = &[
        // short paths hit the floors
        (10,   100,  300),
        (45,   100,  300),
        // a 40 ms path with max_ack_delay 25 ms: PTO 66 ms
        (66,   132,  300),
        // a 150 ms path: PTO 176 ms
        (176,  352,  704),
        // no RTT sample yet: 333 + 4 * 166.5 + 25 = 1024 ms
        (1024, 2048, 4096),
    ];
    for &(pto, suspect, down) in cases {
        assert_eq!(
            LivenessMonitor::suspect_after(ms(pto)),
            ms(suspect),
            "pto {pto}"
        );
        assert_eq!(LivenessMonitor::down_after(ms(pto)), ms(down), "pto {pto}");
    }
}
