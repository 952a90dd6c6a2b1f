//! Loss processes applied to packets as they arrive at a link.

use crate::rng::SeededRng;

/// Parameters of the two-state Gilbert-Elliott burst-loss model
/// (Gilbert 1960, Elliott 1963), evaluated once per packet.
///
/// The channel is either Good or Bad; before each packet it moves Good->Bad
/// with probability `p_good_to_bad` and Bad->Good with `p_bad_to_good`, then the
/// packet is lost with the loss probability of the state it is in. The mean
/// burst (Bad-state sojourn) is `1 / p_bad_to_good` packets, and the stationary
/// share of Bad is `p / (p + r)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GilbertElliottConfig {
    pub p_good_to_bad: f64,
    pub p_bad_to_good: f64,
    pub loss_in_good: f64,
    pub loss_in_bad: f64,
}

impl GilbertElliottConfig {
    /// Long-run loss rate the model produces.
    pub fn expected_loss_rate(&self) -> f64 {
        let denominator = self.p_good_to_bad + self.p_bad_to_good;
        if denominator == 0.0 {
            return self.loss_in_good;
        }
        let share_bad = self.p_good_to_bad / denominator;
        share_bad * self.loss_in_bad + (1.0 - share_bad) * self.loss_in_good
    }
}

/// Running state of a Gilbert-Elliott channel.
#[derive(Debug, Clone)]
pub struct GilbertElliott {
    config: GilbertElliottConfig,
    in_bad_state: bool,
}

impl GilbertElliott {
    pub fn new(config: GilbertElliottConfig) -> Self {
        Self {
            config,
            in_bad_state: false,
        }
    }

    /// Steps the channel for one packet and says whether it is lost.
    pub fn next_packet_lost(&mut self, rng: &mut SeededRng) -> bool {
        let switch_probability = if self.in_bad_state {
            self.config.p_bad_to_good
        } else {
            self.config.p_good_to_bad
        };
        if rng.chance(switch_probability) {
            self.in_bad_state = !self.in_bad_state;
        }
        let loss = if self.in_bad_state {
            self.config.loss_in_bad
        } else {
            self.config.loss_in_good
        };
        rng.chance(loss)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_loss_matches_stationary_rate_and_is_bursty() {
        let config = GilbertElliottConfig {
            p_good_to_bad: 0.01,
            p_bad_to_good: 0.2,
            loss_in_good: 0.0,
            loss_in_bad: 1.0,
        };
        let mut channel = GilbertElliott::new(config);
        let mut rng = SeededRng::new(3);
        let outcomes: Vec<bool> = (0..200_000)
            .map(|_| channel.next_packet_lost(&mut rng))
            .collect();
        let lost = outcomes.iter().filter(|&&l| l).count() as f64 / outcomes.len() as f64;
        let expected = config.expected_loss_rate();
        assert!(
            (lost - expected).abs() < 0.006,
            "loss {lost} vs expected {expected}"
        );
        // Mean burst length should be near 1 / p_bad_to_good = 5 packets,
        // far above the ~1.05 of independent loss at the same rate.
        let bursts = outcomes.windows(2).filter(|w| !w[0] && w[1]).count() as f64;
        let mean_burst = outcomes.iter().filter(|&&l| l).count() as f64 / bursts;
        assert!((4.0..6.0).contains(&mean_burst), "mean burst {mean_burst}");
    }
}
