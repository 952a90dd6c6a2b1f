//! A delay- and rate-based controller for cellular uplinks whose modems buffer seconds of
//! data: the window follows the path's bandwidth-delay product as BBR estimates it
//! (draft-cardwell-iccrg-bbr-congestion-control-00, "BBR Congestion Control", §3–§4),
//! and a queuing-delay guard shrinks it whenever a standing queue forms, as delay-based
//! controllers with a target delay do (LEDBAT, RFC 6817 §2.2 and §4.2; Copa, Arun and
//! Balakrishnan, NSDI 2018, §2).
//!
//! # Model (BBR draft §3, §4.1)
//!
//! - `max_rate`: the largest delivery rate sample of the last 10 round trips (BBR's
//!   BtlBw max filter). A sample taken while application-limited only counts when it
//!   raises the estimate (BBR §4.1.1). Rounds in which every acknowledgement was
//!   application-limited do not age the filter, as Linux BBR's windowed max only
//!   expires on an accepted sample: an inner flow that pauses (a BBR flow's ProbeRTT,
//!   200 ms every 10 s; a video stream between segments) must find the path's rate
//!   where it left it, not the rate of its own pause. But a packet that waited in a
//!   queue standing above target (`Controller::queue_standing`, and its own delay) was
//!   limited by the bottleneck, not the sender, and its sample counts: without that, a
//!   path that never fills its window keeps a token bucket's burst as its rate.
//! - `min_rtt`: the smallest RTT sample of the last 10 s (BBR's RTprop filter). There is
//!   no ProbeRTT state: the delay guard below keeps the queue short, so fresh samples
//!   near the propagation delay keep coming.
//! - BDP = `max_rate × pipe RTT`, the pipe RTT being the larger of `min_rtt` plus the
//!   measured jitter (at most 30 ms) and the smoothed RTT less the forward queuing
//!   delay. A path's acknowledgements may return over a slower path or wait for the
//!   receiver's ack delay, and a loaded jittery link holds every packet near the top of
//!   its jitter; a window sized on the fastest acknowledgement ever seen then cannot
//!   carry the rate (see `pipe_rtt`).
//! - A round trip ends when a packet sent after the previous round's end is
//!   acknowledged (BBR §4.1.1, counted with send times instead of delivered bytes).
//! - Queuing delay: `AckSignals::queuing_delay`, or `srtt − min_rtt` when that is `None`.
//!   Its target is max(5 ms, min(15 ms, min_rtt / 2), min_rtt / 4):
//!   - min_rtt / 4 is the queue one 1.25× probing round adds, so bandwidth probing
//!     alone does not trip the guard;
//!   - 15 ms is what a loaded radio or satellite link's jitter lifts the delay by. Such
//!     a link delays each packet by a random few milliseconds but keeps their order, so
//!     under load every packet waits for the slowest one ahead of it, and the delay
//!     sits near the jitter's top while nothing queues (about 10 ms for ±6 ms of
//!     jitter). With CoDel's 5 ms alone the window stopped growing there, and a LEO-like
//!     path ran at 11–27 of its 40 Mbit/s;
//!   - but never more than half the min RTT, half a buffer of one BDP: a 30 Mbit/s path
//!     with a 16 ms RTT and a 64 KiB buffer (17 ms) that was let fill to 15 ms lost a
//!     third of its goodput to overflows;
//!   - and at least CoDel's TARGET (RFC 8289), 5 ms;
//!   - once the path's jitter is measured (`crate::owd`: the spread of the delays of
//!     packets sent into the idle path), at least that jitter, up to 30 ms, plus
//!     CoDel's 5 ms. A Wi-Fi hotspot with ±10 ms of jitter and a 10 ms min RTT sat
//!     15-20 ms above its base under load with nothing queued, against a 5 ms target:
//!     the guard fired every round, every random loss counted as congestion, and the
//!     path carried 2 of its 12 Mbit/s. Measured, the jitter needs no cap by the min
//!     RTT: a 64 KiB buffer behind a 16 ms RTT with ±1 ms of jitter keeps its 8 ms.
//!
//!   Rounds are judged on the smallest sample of the round (CoDel's standing-queue
//!   idea), so one delayed acknowledgement does not count as a queue.
//!
//! # States
//!
//! ```text
//!   Startup --(rate grew < 25% for 3 rounds | round queue > target | congestive loss)--> Drain
//!   Drain   --(a round whose queue is <= target)--> Cruise
//!   Drain, Cruise --(target raised above the queue that ended Startup)--> Startup
//!   any     --(persistent congestion)--> Startup, window = minimum, rate model reset
//! ```
//!
//! - **Startup** (BBR §4.3.2): the window grows by the bytes acknowledged (doubling per
//!   round trip) up to 2/ln 2 × BDP, paced at 2/ln 2 × `max_rate` (see "Startup
//!   pacing" below). It ends with BBR's full-bandwidth test
//!   (§4.3.2), or early when a round's queuing delay exceeds the target (the idea of
//!   HyStart++'s delay-increase exit, RFC 9406 §4.2), or on a congestion event.
//! - **Startup resumes** when it ended on a round's queue alone and the target has
//!   since risen above that queue, with no congestive loss in between: the exit was
//!   premature. A path's jitter is measured from packets sent into it while idle, so on
//!   a fresh session it may come seconds after Startup; until then a jittery link's
//!   delay under load looks like a queue. A Wi-Fi path with ±10 ms of jitter and a
//!   12 ms min RTT left Startup at a 6 ms target with 16 kB in flight and stayed at its
//!   least window for 7 s of a 12 s flow; once measured, the jitter raised the target,
//!   but Cruise's probing grows a window 25 % per eight round trips.
//! - **Drain** (BBR §4.3.3): the window is 1 × BDP, so what Startup queued drains while
//!   the sender waits; pacing gain 1.
//! - **Cruise** (BBR §4.3.4, ProbeBW): the window grows by the bytes acknowledged up to
//!   2 × BDP, and not at all while the latest queuing delay sample is above target. The
//!   pacing gain cycles 1.25, 0.75, 1, 1, 1, 1, 1, 1 per round trip (probe, drain the
//!   probe's queue, cruise), and stays at 1 while the guard is active.
//! - **Probing on** (Cruise): when the round that brings a probe's acknowledgements
//!   back (the one after the probing round) has no standing queue and delivered 9/8 of
//!   the rate the filter's other rounds hold, the probe found a path that now carries
//!   more (a modem in a better cell): the next round probes again at 1.25 instead of
//!   cycling on, so the rate is found a quarter more per two round trips, not per
//!   eight. BBRv2's ProbeBW_UP likewise keeps probing while it finds bandwidth. A probe
//!   that builds a queue, or delivers no more, ends it. Only that round counts: the
//!   others' samples wander with jitter and the receiver's bursts of acknowledgements.
//!
//! # Reactions
//!
//! - **Delay guard**: at the end of each round trip in Cruise whose smallest queuing
//!   delay was above target, the window is multiplied by 0.95: a multiplicative decrease
//!   once per round drains a modem queue that a stale (too high) rate estimate let build,
//!   for example after the radio's rate dropped.
//! - **Loss** (one call per congestion event) is congestion only when the path shows it:
//!   the queuing delay is above target when the loss is detected (a buffer that
//!   overflowed had filled first: TCP Veno's backlog test, Fu and Liew, IEEE JSAC 21(2),
//!   2003, §II), or the loss rate, smoothed over rounds, exceeds 2 % (BBRv2's
//!   `BBRLossThresh`, draft-cardwell-iccrg-bbr-congestion-control-02 §4.5.10.2: a buffer
//!   smaller than the queue target overflows without a delay signal, and then loses far
//!   more than a radio's residual 0.1–1 %). Then the window becomes max(BDP, 0.7 ×
//!   window), once per round trip (losses of packets sent before the last reduction are
//!   ignored, like RFC 9002 §7.3.2's recovery period), and Startup ends. Any other loss
//!   is the radio's: the window stays and the tunnel re-sends the packet.
//! - **Loss in Startup** counts by rate only once the round has lost six datagrams
//!   (BBR's `BBRStartupFullLossCnt`, draft-ietf-ccwg-bbr-06 §5.3.1.3, which counts
//!   discontiguous lost ranges). Startup's first rounds are 10 to a few tens of
//!   datagrams, so two random losses there read as 5 % or more: a path with 2 % radio
//!   loss left Startup at 1.5 of its 10 Mbit/s and took four to five seconds of
//!   Cruise's probing to reach its rate (`benches/schedulers/REPORT.md`). A buffer
//!   that overflows in Startup loses a doubling round's excess at once, far more than
//!   six datagrams.
//! - **Application-limited** acknowledgements never grow the window and never lower the
//!   rate estimate; they do not count towards the full-bandwidth test. (Linux BBR grows
//!   its Startup window on them; here that measured worse: eight deep-buffered
//!   modems, inner cubic, 32.6 against 35.0 Mbit/s, means of three runs.)
//! - **Startup pacing** is at least the initial window per min_rtt: a starting inner
//!   flow's first delivery rates measure the flow, not the path. Linux BBR's floor is
//!   2/ln 2 times higher; that paced uplinks slower than it at several times their
//!   rate, and one inner cubic flow over eight LTE uplinks fell from 18 to 11 Mbit/s in
//!   most runs (`benches/schedulers/REPORT.md`).
//!
//! - **Send quantum** (after BBR draft-02 §4.6.3 and §4.6.4.2, "BBRQuantizationBudget"):
//!   no window target (Startup's cap, Drain's and Cruise's) is below 3 × the send
//!   quantum, 1 ms of `max_rate` within [2 packets, 64 KiB]. On a path whose RTT is
//!   tens of microseconds (an unshaped LAN or veth) the BDP is a packet or two, less
//!   than one batch the daemon reads from its TUN or its socket; without this floor the
//!   window sat at its 4-packet minimum (184 Mbit/s where CUBIC carried 1.3 Gbit/s).
//!   BBR adds the budget to the target; as a floor it leaves every path whose BDP
//!   exceeds 3 ms of its rate as it was (measured: adding it made four one-BDP modems
//!   land more often in a lower equilibrium, 35 against 38 Mbit/s).
//!
//! The caller must feed `AckSignals::delivery_rate` (bytes per second, one sample per
//! acknowledgement, as draft-cheng-iccrg-delivery-rate-estimation computes it); without
//! rate samples there is no BDP and the window is capped only by the delay guard.

use std::time::{Duration, Instant};

use super::{bytes_in, send_quantum, AckSignals, Controller};
use crate::rtt::RttEstimator;

/// What a loaded link's measured `jitter` lifts every packet's delay by, at most
/// [`MEASURED_JITTER_CAP`]; zero while unmeasured.
fn measured_jitter_lift(jitter: Option<Duration>) -> Duration {
    jitter.map_or(Duration::ZERO, |jitter| jitter.min(MEASURED_JITTER_CAP))
}

/// The standing queue a path with this minimum RTT and measured `jitter` may keep:
/// max(5 ms, min(15 ms, min RTT / 2), min RTT / 4, min(jitter, 30 ms) + 5 ms) (see
/// "Model" above). A loss with less queue than this is not the buffer's.
pub fn queuing_delay_target(min_rtt: Option<Duration>, jitter: Option<Duration>) -> Duration {
    let measured_jitter_floor = measured_jitter_lift(jitter) + CODEL_TARGET;
    let Some(min_rtt) = min_rtt else {
        return CODEL_TARGET.max(measured_jitter_floor);
    };
    let jitter_floor = JITTER_LIFT.min(min_rtt / JITTER_LIFT_RTT_DIVISOR);
    CODEL_TARGET
        .max(jitter_floor)
        .max(min_rtt / QUEUE_TARGET_RTT_DIVISOR)
        .max(measured_jitter_floor)
}

/// A gain as an exact fraction, so windows and rates are integer arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Gain {
    numerator: u64,
    denominator: u64,
}

impl Gain {
    const fn new(numerator: u64, denominator: u64) -> Self {
        Self {
            numerator,
            denominator,
        }
    }

    fn apply(self, value: u64) -> u64 {
        let scaled = u128::from(value) * u128::from(self.numerator) / u128::from(self.denominator);
        u64::try_from(scaled).unwrap_or(u64::MAX)
    }
}

/// BBR draft §4.3.2: BBRHighGain = 2/ln(2) ≈ 2.885, the smallest gain that lets the
/// sending rate double each round trip; Startup's pacing gain and window cap.
const STARTUP_GAIN: Gain = Gain::new(2885, 1000);
/// BBR draft §4.2.3: cwnd_gain = 2, room for delayed and aggregated acknowledgements
/// (cellular links aggregate heavily).
const CWND_GAIN: Gain = Gain::new(2, 1);
/// Drain keeps exactly one BDP in flight (the window-based form of BBR §4.3.3).
const DRAIN_CWND_GAIN: Gain = Gain::new(1, 1);
const UNIT_GAIN: Gain = Gain::new(1, 1);
/// BBR draft §4.3.4: the ProbeBW pacing gain cycle, from its probing round.
const PROBE_BW_GAINS: [Gain; 8] = [
    Gain::new(5, 4),
    Gain::new(3, 4),
    UNIT_GAIN,
    UNIT_GAIN,
    UNIT_GAIN,
    UNIT_GAIN,
    UNIT_GAIN,
    UNIT_GAIN,
];
/// Where in `PROBE_BW_GAINS` the probing round (gain 1.25) is.
const PROBING_ROUND: usize = 0;
/// The send quantum (BBR draft-02 §4.6.3, `super::send_quantum`) counts here as at
/// least two packets.
const SEND_QUANTUM_MIN_PACKETS: u64 = 2;
/// BBR draft-02 §4.6.4.2: room for 3 send quanta, here as the least window target.
const QUANTIZATION_BUDGET_QUANTA: u64 = 3;
/// BBR draft §4.1.1: BtlBwFilterLen = 10 round trips.
const RATE_FILTER_ROUNDS: usize = 10;
/// A round that delivered this much more than the rate filter's other rounds found
/// more bandwidth: half of what one 1.25× probing round can show.
const RATE_FOUND_GROWTH: Gain = Gain::new(9, 8);
/// BBR draft §4.1.2: RTpropFilterLen = 10 s.
const MIN_RTT_FILTER: Duration = Duration::from_secs(10);
/// BBR draft §4.3.2: the pipe is full when the rate grew by less than 25% ...
const FULL_BANDWIDTH_GROWTH: Gain = Gain::new(5, 4);
/// ... for three rounds in a row.
const FULL_BANDWIDTH_ROUNDS: u32 = 3;
/// BBR draft §4.2.3: BBRMinPipeCwnd = 4 packets.
const MINIMUM_WINDOW_PACKETS: u64 = 4;
/// CoDel's TARGET (RFC 8289): 5 ms of standing queue is acceptable.
const CODEL_TARGET: Duration = Duration::from_millis(5);
/// The delay a loaded link's jitter adds without a queue (see "Model" above) ...
const JITTER_LIFT: Duration = Duration::from_millis(15);
/// ... taken up to half the min RTT: half a buffer of one BDP.
const JITTER_LIFT_RTT_DIVISOR: u32 = 2;
/// The most measured jitter the target and the pipe RTT allow for: a larger spread of
/// idle delays is a radio waking from its idle state or a route change, not jitter
/// under load.
const MEASURED_JITTER_CAP: Duration = Duration::from_millis(30);
/// One 1.25× probing round queues a quarter of a BDP: min_rtt / 4 of delay.
const QUEUE_TARGET_RTT_DIVISOR: u32 = 4;
/// Per-round multiplicative decrease while the queue is above target: about fourteen
/// such rounds halve the window. With 0.85 the slower of three one-BDP paths ran below
/// their rate: a path's acknowledgements come back over other paths, so its rounds
/// outlast its min RTT, probing overshoots the target and the guard fires in the steady
/// state (LTE and cell-edge links at 87 % and 81 % of capacity where kernel MPTCP kept
/// 96 %). Same-run A/Bs and the failover benchmark: `benches/schedulers/REPORT.md`.
const DELAY_BACKOFF: Gain = Gain::new(95, 100);
/// RFC 9438 §4.6: β_cubic = 0.7, the loss reduction, floored at the BDP here.
const LOSS_BACKOFF: Gain = Gain::new(7, 10);
/// BBRv2's BBRLossThresh (draft-cardwell-iccrg-bbr-congestion-control-02 §4.5.10.2): a
/// loss rate above 2 % is congestion whatever the delay says. In parts per million.
const CONGESTIVE_LOSS_RATE_PPM: u64 = 20_000;
/// BBR's BBRStartupFullLossCnt (draft-ietf-ccwg-bbr-06 §5.3.1.3): in Startup, the loss
/// rate counts once a round has lost this many datagrams.
const STARTUP_FULL_LOSS_DATAGRAMS: u64 = 6;
/// The loss rate is smoothed over rounds with RFC 6298's α = 1/8, so that one unlucky
/// round of a small window (one loss in 20 packets is 5 %) is not taken for congestion.
const LOSS_RATE_SMOOTHING: u64 = 8;

/// What a finished round trip showed.
#[derive(Clone, Copy, Debug)]
struct FinishedRound {
    /// The smallest queuing delay of the round: its standing queue.
    min_queuing_delay: Option<Duration>,
    /// Whether any acknowledgement was application-limited.
    app_limited: bool,
    /// The largest delivery rate sample of the round, bytes per second.
    max_rate: u64,
    /// The largest of the rate filter's other rounds.
    earlier_max_rate: u64,
}

impl FinishedRound {
    /// Whether the round delivered at least [`RATE_FOUND_GROWTH`] × the rate of the
    /// filter's other rounds: the path carries more than the filter knew (see "Probing
    /// on" in the module doc). An application-limited sample only enters the filter when
    /// it raises it, so it counts as well.
    fn found_more_rate(&self) -> bool {
        self.earlier_max_rate > 0 && self.max_rate >= RATE_FOUND_GROWTH.apply(self.earlier_max_rate)
    }
}

/// Where the controller is in its state machine (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelayRateState {
    Startup,
    Drain,
    Cruise,
}

#[derive(Clone, Debug)]
pub struct DelayRate {
    max_datagram_size: u64,
    window: u64,
    state: DelayRateState,
    /// Round trips counted so far.
    round: u64,
    /// When the current round began: acknowledging a packet sent at or after it ends it.
    round_start: Option<Instant>,
    /// Rounds that had an acknowledgement which was not application-limited: the
    /// rate filter's clock.
    rate_round: u64,
    /// Largest delivery rate sample per round, indexed by `rate_round % RATE_FILTER_ROUNDS`.
    rate_by_round: [u64; RATE_FILTER_ROUNDS],
    /// Smallest queuing delay seen in the current round.
    round_min_queuing_delay: Option<Duration>,
    /// Whether any acknowledgement of the current round was application-limited.
    round_app_limited: bool,
    /// Whether any acknowledgement of the current round was not application-limited:
    /// the network, not the sender, set its rate.
    round_network_limited: bool,
    min_rtt: Option<Duration>,
    min_rtt_stamp: Option<Instant>,
    /// The smoothed RTT less the latest forward queuing delay: how long an
    /// acknowledgement takes while nothing queues, including the receiver's delay and a
    /// way back over a slower path (see `pipe_rtt`).
    unqueued_rtt: Option<Duration>,
    /// Full-bandwidth test state (BBR §4.3.2).
    full_bandwidth: u64,
    rounds_without_growth: u32,
    /// Whether the last finished round had its queue above target.
    guard_active: bool,
    /// The round queue that ended Startup, when that queue alone ended it: while no
    /// loss has counted as congestion since, a target raised above it (a jitter
    /// measured later) shows the exit was premature, and Startup resumes.
    delay_exit_queue: Option<Duration>,
    cycle_index: usize,
    /// When the window was last reduced for a loss.
    last_reduction: Option<Instant>,
    /// The latest queuing delay sample, for judging a loss.
    latest_queuing_delay: Option<Duration>,
    /// The path's measured jitter, as the latest acknowledgement reported it.
    jitter: Option<Duration>,
    /// Bytes acknowledged and declared lost in the current round.
    round_acked_bytes: u64,
    round_lost_bytes: u64,
    /// The share of bytes lost per round, smoothed over rounds, in parts per million.
    smoothed_loss_rate_ppm: u64,
}

impl DelayRate {
    pub fn new(max_datagram_size: u64) -> Self {
        let max_datagram_size = max_datagram_size.max(1);
        Self {
            max_datagram_size,
            window: initial_window(max_datagram_size),
            state: DelayRateState::Startup,
            round: 0,
            round_start: None,
            rate_round: 0,
            rate_by_round: [0; RATE_FILTER_ROUNDS],
            round_min_queuing_delay: None,
            round_app_limited: false,
            round_network_limited: false,
            min_rtt: None,
            min_rtt_stamp: None,
            unqueued_rtt: None,
            full_bandwidth: 0,
            rounds_without_growth: 0,
            guard_active: false,
            delay_exit_queue: None,
            cycle_index: 0,
            last_reduction: None,
            latest_queuing_delay: None,
            jitter: None,
            round_acked_bytes: 0,
            round_lost_bytes: 0,
            smoothed_loss_rate_ppm: 0,
        }
    }

    pub fn state(&self) -> DelayRateState {
        self.state
    }

    /// Round trips counted so far.
    pub fn round(&self) -> u64 {
        self.round
    }

    /// The largest delivery rate of the last 10 round trips that were not wholly
    /// application-limited, bytes per second.
    pub fn max_delivery_rate(&self) -> u64 {
        self.rate_by_round.iter().copied().max().unwrap_or(0)
    }

    /// The minimum RTT of the last 10 s.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// Bandwidth-delay product in bytes, once a rate and an RTT sample exist: the
    /// rate over the pipe's round trip (`pipe_rtt`).
    pub fn bdp(&self) -> Option<u64> {
        let rate = self.max_delivery_rate();
        let pipe_rtt = self.pipe_rtt()?;
        (rate > 0).then(|| bytes_in(rate, pipe_rtt))
    }

    /// The round trip the window must cover at the path's rate: the min RTT plus the
    /// measured jitter, or longer when acknowledgements typically take longer than the
    /// fastest one did without a queue. A path's acknowledgements may come back over
    /// another, slower path, or wait for the receiver's delay; on a 7 ms path whose
    /// acknowledgements took 20 ms, a window of 2 × rate × min RTT delivered less than
    /// the rate, each round's lower rate sample shrank the window further, and the path
    /// sat at its least window (3 Mbit/s of 40) for the rest of the flow. A loaded
    /// jittery link does the same: in order, each packet waits for the slowest ahead of
    /// it, so the delay sits near the jitter's top. A Wi-Fi hotspot with ±10 ms of
    /// jitter behind a 12 ms min RTT carried 3-6 of its 12 Mbit/s; the forward queuing
    /// delay counts that lift as queue, so the smoothed RTT less it did not show it.
    fn pipe_rtt(&self) -> Option<Duration> {
        let min_rtt = self.min_rtt?;
        let loaded = min_rtt + measured_jitter_lift(self.jitter);
        Some(self.unqueued_rtt.map_or(loaded, |rtt| rtt.max(loaded)))
    }

    /// The initial window spread over the minimum RTT, bytes per second; 0 before an
    /// RTT sample. Startup never paces below this: the first delivery rates of a
    /// starting inner flow measure the flow, not the path, and pacing at them queued
    /// the flow's next, doubled round behind the pacer. (Linux BBR's floor has its
    /// Startup gain on top; see the module docs for why this one does not.)
    fn initial_window_rate(&self) -> u64 {
        let Some(min_rtt) = self.min_rtt.filter(|rtt| !rtt.is_zero()) else {
            return 0;
        };
        let window = u128::from(initial_window(self.max_datagram_size));
        u64::try_from(window * 1_000_000_000 / min_rtt.as_nanos()).unwrap_or(u64::MAX)
    }

    /// The queuing delay above which the guard acts (see `queuing_delay_target`).
    pub fn queuing_delay_target(&self) -> Duration {
        queuing_delay_target(self.min_rtt, self.jitter)
    }

    /// The loss rate the controller judges losses by, in parts per million: the smoothed
    /// rate, or the current round's once it is worse and has lost more than one packet.
    pub fn loss_rate_ppm(&self) -> u64 {
        let round_rate = loss_rate_ppm(self.round_lost_bytes, self.round_acked_bytes);
        if self.round_lost_bytes > self.max_datagram_size {
            self.smoothed_loss_rate_ppm.max(round_rate)
        } else {
            self.smoothed_loss_rate_ppm
        }
    }

    /// Whether a loss detected now is congestion (see "Loss" and "Loss in Startup" in
    /// the module doc).
    fn loss_is_congestive(&self) -> bool {
        let queue_high = self
            .latest_queuing_delay
            .is_some_and(|delay| delay > self.queuing_delay_target());
        queue_high || (self.loss_rate_ppm() > CONGESTIVE_LOSS_RATE_PPM && self.enough_losses())
    }

    /// Whether the round lost enough datagrams for the loss rate to count: six in
    /// Startup (see "Loss in Startup"), any in the other states.
    fn enough_losses(&self) -> bool {
        self.state != DelayRateState::Startup
            || self.round_lost_bytes.div_ceil(self.max_datagram_size) >= STARTUP_FULL_LOSS_DATAGRAMS
    }

    /// BBR draft-02 §4.6.4.2: room for the bursts in which the sender hands data to
    /// the path and the receiver acknowledges it, 3 × the send quantum (§4.6.3).
    fn quantization_budget(&self) -> u64 {
        QUANTIZATION_BUDGET_QUANTA
            * send_quantum(self.max_delivery_rate())
                .max(SEND_QUANTUM_MIN_PACKETS * self.max_datagram_size)
    }

    /// `gain` × BDP, at least the quantization budget, once a BDP exists.
    fn window_target(&self, gain: Gain) -> Option<u64> {
        let bdp = self.bdp()?;
        Some(gain.apply(bdp).max(self.quantization_budget()))
    }

    fn minimum_window(&self) -> u64 {
        MINIMUM_WINDOW_PACKETS * self.max_datagram_size
    }

    fn update_min_rtt(&mut self, now: Instant, rtt: &RttEstimator) {
        let Some(sample) = rtt.latest() else {
            return;
        };
        let expired = self
            .min_rtt_stamp
            .is_some_and(|stamp| now.saturating_duration_since(stamp) > MIN_RTT_FILTER);
        if expired || self.min_rtt.is_none_or(|min_rtt| sample <= min_rtt) {
            self.min_rtt = Some(sample);
            self.min_rtt_stamp = Some(now);
        }
    }

    fn queuing_delay_sample(&self, rtt: &RttEstimator, signals: &AckSignals) -> Option<Duration> {
        signals.queuing_delay.or_else(|| {
            let smoothed = rtt.smoothed()?;
            Some(smoothed.saturating_sub(self.min_rtt?))
        })
    }

    fn record_rate(&mut self, signals: &AckSignals) {
        let Some(sample) = signals.delivery_rate else {
            return;
        };
        // BBR §4.1.1: an application-limited sample only counts if it is larger.
        if signals.app_limited && sample <= self.max_delivery_rate() {
            return;
        }
        let slot = self.rate_slot();
        self.rate_by_round[slot] = self.rate_by_round[slot].max(sample);
    }

    /// Starts round `self.round + 1`; returns what the finished round showed.
    fn start_round(&mut self, now: Instant) -> FinishedRound {
        let finished_slot = self.rate_slot();
        let finished = FinishedRound {
            min_queuing_delay: self.round_min_queuing_delay.take(),
            app_limited: std::mem::replace(&mut self.round_app_limited, false),
            max_rate: self.rate_by_round[finished_slot],
            earlier_max_rate: self
                .rate_by_round
                .iter()
                .enumerate()
                .filter(|&(slot, _)| slot != finished_slot)
                .map(|(_, &rate)| rate)
                .max()
                .unwrap_or(0),
        };
        let round_rate = loss_rate_ppm(
            std::mem::take(&mut self.round_lost_bytes),
            std::mem::take(&mut self.round_acked_bytes),
        );
        self.smoothed_loss_rate_ppm = self.smoothed_loss_rate_ppm
            - self.smoothed_loss_rate_ppm / LOSS_RATE_SMOOTHING
            + round_rate / LOSS_RATE_SMOOTHING;
        self.round += 1;
        self.round_start = Some(now);
        if std::mem::replace(&mut self.round_network_limited, false) {
            self.rate_round += 1;
            let slot = self.rate_slot();
            self.rate_by_round[slot] = 0;
        }
        finished
    }

    /// The rate filter's slot for the current rate round.
    fn rate_slot(&self) -> usize {
        (self.rate_round as usize) % RATE_FILTER_ROUNDS
    }

    fn on_round_end(&mut self, finished: &FinishedRound) {
        let queuing_delay = finished.min_queuing_delay;
        let queue_high = queuing_delay.is_some_and(|delay| delay > self.queuing_delay_target());
        match self.state {
            DelayRateState::Startup => {
                if queue_high {
                    self.state = DelayRateState::Drain;
                    self.delay_exit_queue = queuing_delay;
                } else if !finished.app_limited && self.full_bandwidth_reached() {
                    self.state = DelayRateState::Drain;
                }
            }
            DelayRateState::Drain => {
                if !queue_high {
                    self.state = DelayRateState::Cruise;
                    self.cycle_index = PROBING_ROUND;
                }
            }
            DelayRateState::Cruise => {
                if queue_high {
                    self.window = DELAY_BACKOFF.apply(self.window).max(self.minimum_window());
                }
                // The probing round's packets are acknowledged in the round after it.
                let probe_acknowledged = self.cycle_index == PROBING_ROUND + 1;
                self.cycle_index =
                    if probe_acknowledged && !queue_high && finished.found_more_rate() {
                        PROBING_ROUND
                    } else {
                        (self.cycle_index + 1) % PROBE_BW_GAINS.len()
                    };
            }
        }
        self.guard_active = queue_high;
    }

    /// Back to Startup when the queue that ended it is now within target (see
    /// "Startup resumes" in the module doc). The rate model stays; the
    /// full-bandwidth test starts over.
    fn resume_startup_after_a_premature_exit(&mut self) {
        if self
            .delay_exit_queue
            .is_some_and(|queue| queue <= self.queuing_delay_target())
        {
            self.delay_exit_queue = None;
            self.state = DelayRateState::Startup;
            self.rounds_without_growth = 0;
        }
    }

    /// BBR §4.3.2, run once per non-application-limited round in Startup.
    fn full_bandwidth_reached(&mut self) -> bool {
        let rate = self.max_delivery_rate();
        if rate == 0 {
            return false;
        }
        if rate >= FULL_BANDWIDTH_GROWTH.apply(self.full_bandwidth) {
            self.full_bandwidth = rate;
            self.rounds_without_growth = 0;
            return false;
        }
        self.rounds_without_growth += 1;
        self.rounds_without_growth >= FULL_BANDWIDTH_ROUNDS
    }

    fn update_window(&mut self, bytes: u64, queuing_delay: Option<Duration>, app_limited: bool) {
        match self.state {
            DelayRateState::Startup => {
                // BBR §4.2.3: grow while below the Startup gain × BDP, never shrink.
                let below_cap = self
                    .window_target(STARTUP_GAIN)
                    .is_none_or(|cap| self.window < cap);
                if !app_limited && below_cap {
                    self.window = self.window.saturating_add(bytes);
                }
            }
            DelayRateState::Drain => {
                if let Some(target) = self.window_target(DRAIN_CWND_GAIN) {
                    self.window = target;
                }
            }
            DelayRateState::Cruise => {
                let queue_high =
                    queuing_delay.is_some_and(|delay| delay > self.queuing_delay_target());
                if !app_limited && !queue_high {
                    self.window = self.window.saturating_add(bytes);
                }
                if let Some(cap) = self.window_target(CWND_GAIN) {
                    self.window = self.window.min(cap);
                }
            }
        }
        self.window = self.window.max(self.minimum_window());
    }
}

/// `lost` of `lost + acked` bytes in parts per million; zero when nothing was sent.
fn loss_rate_ppm(lost: u64, acked: u64) -> u64 {
    let total = u128::from(lost) + u128::from(acked);
    if total == 0 {
        return 0;
    }
    u64::try_from(u128::from(lost) * 1_000_000 / total).unwrap_or(u64::MAX)
}

/// RFC 9002's initial window (`super::initial_window`), raised to the 4-packet
/// minimum for jumbo datagrams.
fn initial_window(max_datagram_size: u64) -> u64 {
    super::initial_window(max_datagram_size).max(MINIMUM_WINDOW_PACKETS * max_datagram_size)
}

impl Controller for DelayRate {
    fn name(&self) -> &'static str {
        "delay-rate"
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        rtt: &RttEstimator,
        signals: &AckSignals,
    ) {
        self.update_min_rtt(now, rtt);
        self.jitter = signals.jitter.or(self.jitter);
        self.resume_startup_after_a_premature_exit();
        let queuing_delay = self.queuing_delay_sample(rtt, signals);
        let round_ended = match self.round_start {
            Some(start) => sent >= start,
            // The first acknowledgement opens round 0; it ends with the first packet
            // sent after it.
            None => {
                self.round_start = Some(now);
                false
            }
        };
        let finished = round_ended.then(|| self.start_round(now));
        self.round_acked_bytes = self.round_acked_bytes.saturating_add(bytes);
        self.latest_queuing_delay = queuing_delay;
        if let (Some(smoothed), Some(queue)) = (rtt.smoothed(), signals.queuing_delay) {
            self.unqueued_rtt = Some(smoothed.saturating_sub(queue));
        }
        self.record_rate(signals);
        if let Some(delay) = queuing_delay {
            self.round_min_queuing_delay = Some(
                self.round_min_queuing_delay
                    .map_or(delay, |min| min.min(delay)),
            );
        }
        self.round_app_limited |= signals.app_limited;
        self.round_network_limited |= !signals.app_limited;
        if let Some(finished) = finished {
            self.on_round_end(&finished);
        }
        self.update_window(bytes, queuing_delay, signals.app_limited);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        persistent: bool,
        lost_bytes: u64,
    ) {
        if persistent {
            // The path was out for several RTOs (a cellular handover, a dead modem): its
            // rate model is stale. Keep min_rtt, restart the search from the minimum.
            *self = Self {
                min_rtt: self.min_rtt,
                min_rtt_stamp: self.min_rtt_stamp,
                ..Self::new(self.max_datagram_size)
            };
            self.window = self.minimum_window();
            self.last_reduction = Some(now);
            return;
        }
        self.round_lost_bytes = self.round_lost_bytes.saturating_add(lost_bytes);
        if !self.loss_is_congestive() || self.last_reduction.is_some_and(|last| sent <= last) {
            return;
        }
        self.last_reduction = Some(now);
        self.delay_exit_queue = None;
        let reduced = LOSS_BACKOFF.apply(self.window);
        self.window = self
            .bdp()
            .map_or(reduced, |bdp| reduced.max(bdp))
            .min(self.window)
            .max(self.minimum_window());
        if self.state == DelayRateState::Startup {
            self.state = DelayRateState::Drain;
        }
    }

    fn in_slow_start(&self) -> bool {
        self.state == DelayRateState::Startup
    }

    fn phase(&self) -> &'static str {
        match self.state {
            DelayRateState::Startup => "startup",
            DelayRateState::Drain => "drain",
            DelayRateState::Cruise => "cruise",
        }
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn initial_window(&self) -> u64 {
        initial_window(self.max_datagram_size)
    }

    fn pacing_rate(&self) -> Option<u64> {
        let measured = self.max_delivery_rate();
        let (gain, floor) = match self.state {
            DelayRateState::Startup => (STARTUP_GAIN, self.initial_window_rate()),
            DelayRateState::Drain => (UNIT_GAIN, 0),
            DelayRateState::Cruise if self.guard_active => (UNIT_GAIN, 0),
            DelayRateState::Cruise => (PROBE_BW_GAINS[self.cycle_index], 0),
        };
        let rate = gain.apply(measured).max(floor);
        (rate > 0).then_some(rate)
    }

    fn bottleneck_rate(&self) -> Option<u64> {
        Some(self.max_delivery_rate()).filter(|&rate| rate > 0)
    }

    fn queuing_delay_target(&self) -> Option<Duration> {
        Some(DelayRate::queuing_delay_target(self))
    }

    fn queue_standing(&self) -> bool {
        self.guard_active
    }
}

#[cfg(test)]
#[path = "delay_rate_tests.rs"]
mod tests;
