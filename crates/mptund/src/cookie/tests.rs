use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;

use super::*;
use crate::keys::PrivateKey;

const SOURCE: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 1, 2)), 40000);
const INPUT: &[u8] = b"the init up to mac2, any bytes will do here";
const MAC1: [u8; 16] = [7; 16];

fn server_public() -> PublicKey {
    PrivateKey::generate().public_key()
}

#[test]
fn mac2_under_the_cookie_of_the_source_passes() {
    let now = Instant::now();
    let mut secrets = CookieSecrets::new(now);
    let cookie = secrets.cookie_for(now, SOURCE);
    assert!(secrets.verify_mac2(now, SOURCE, INPUT, &mac2(&cookie, INPUT)));
}

#[test]
fn a_cookie_for_another_address_or_port_does_not_pass() {
    let now = Instant::now();
    let mut secrets = CookieSecrets::new(now);
    let cookie = secrets.cookie_for(now, SOURCE);
    let mac = mac2(&cookie, INPUT);
    let other_ip = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 1, 3)), 40000);
    let other_port = SocketAddr::new(SOURCE.ip(), 40001);
    assert!(!secrets.verify_mac2(now, other_ip, INPUT, &mac));
    assert!(!secrets.verify_mac2(now, other_port, INPUT, &mac));
}

#[test]
fn mac2_over_other_bytes_or_zero_does_not_pass() {
    let now = Instant::now();
    let mut secrets = CookieSecrets::new(now);
    let cookie = secrets.cookie_for(now, SOURCE);
    assert!(!secrets.verify_mac2(now, SOURCE, b"another init", &mac2(&cookie, INPUT)));
    assert!(!secrets.verify_mac2(now, SOURCE, INPUT, &[0; MAC2_LEN]));
    assert!(!secrets.verify_mac2(now, SOURCE, INPUT, &[]));
}

#[test]
fn previous_secret_passes_an_expired_one_does_not() {
    let start = Instant::now();
    let mut secrets = CookieSecrets::new(start);
    let cookie = secrets.cookie_for(start, SOURCE);
    let mac = mac2(&cookie, INPUT);
    // One rotation later the secret is the previous one: still accepted.
    let later = start + COOKIE_SECRET_LIFETIME + Duration::from_secs(1);
    assert!(secrets.verify_mac2(later, SOURCE, INPUT, &mac));
    assert_ne!(secrets.cookie_for(later, SOURCE), cookie, "rotated");
    // A second rotation retires it.
    let expired = later + COOKIE_SECRET_LIFETIME;
    assert!(!secrets.verify_mac2(expired, SOURCE, INPUT, &mac));
}

#[test]
fn a_secret_unused_for_two_lifetimes_is_not_kept_as_previous() {
    let start = Instant::now();
    let mut secrets = CookieSecrets::new(start);
    let mac = mac2(&secrets.cookie_for(start, SOURCE), INPUT);
    let expired = start + 2 * COOKIE_SECRET_LIFETIME;
    assert!(!secrets.verify_mac2(expired, SOURCE, INPUT, &mac));
}

#[test]
fn cookie_reply_opens_only_with_the_inits_mac1_and_the_servers_key() {
    let now = Instant::now();
    let server = server_public();
    let key = CookieReplyKey::new(&server);
    let mut secrets = CookieSecrets::new(now);
    let cookie = secrets.cookie_for(now, SOURCE);
    let nonce = secrets.random_nonce();
    let sealed = key.seal(nonce, &cookie, &MAC1);
    assert_eq!(
        CookieReplyKey::new(&server).open(nonce, &sealed, &MAC1),
        Ok(cookie)
    );
    assert_eq!(
        key.open(nonce, &sealed, &[8; 16]),
        Err(CookieError::Authentication),
        "another init's mac1"
    );
    assert_eq!(
        CookieReplyKey::new(&server_public()).open(nonce, &sealed, &MAC1),
        Err(CookieError::Authentication),
        "another server"
    );
    let mut flipped = sealed;
    flipped[0] ^= 1;
    assert_eq!(
        key.open(nonce, &flipped, &MAC1),
        Err(CookieError::Authentication)
    );
    let mut other_nonce = nonce;
    other_nonce[0] ^= 1;
    assert_eq!(
        key.open(other_nonce, &sealed, &MAC1),
        Err(CookieError::Authentication)
    );
}

#[test]
fn nonces_differ_between_replies() {
    let secrets = CookieSecrets::new(Instant::now());
    assert_ne!(secrets.random_nonce(), secrets.random_nonce());
}

#[test]
fn a_received_cookie_is_used_for_less_than_the_secrets_lifetime() {
    let now = Instant::now();
    let received = ReceivedCookie {
        cookie: Cookie([1; COOKIE_LEN]),
        received_at: now,
    };
    assert!(received.usable(now).is_some());
    assert!(received
        .usable(now + COOKIE_CLIENT_LIFETIME - Duration::from_millis(1))
        .is_some());
    assert!(received.usable(now + COOKIE_CLIENT_LIFETIME).is_none());
    assert!(COOKIE_CLIENT_LIFETIME < COOKIE_SECRET_LIFETIME);
}

#[test]
fn load_starts_past_the_threshold_and_lasts_a_second_longer() {
    let start = Instant::now();
    let mut load = HandshakeLoad::new(10);
    let results: Vec<bool> = (0..11).map(|_| load.record_init(start)).collect();
    assert!(results[..10].iter().all(|under| !under));
    assert!(
        results[10],
        "the eleventh init in a second is past the threshold"
    );
    // The next window still remembers the flood.
    assert!(load.record_init(start + Duration::from_millis(1500)));
    // Two quiet windows later the load is gone.
    assert!(!load.record_init(start + Duration::from_millis(3600)));
}

#[test]
fn load_spread_below_the_threshold_is_no_load() {
    let start = Instant::now();
    let mut load = HandshakeLoad::new(10);
    for step in 0..100u32 {
        // 9 per second.
        let now = start + Duration::from_millis(u64::from(step) * 111);
        assert!(!load.record_init(now), "init {step}");
    }
}

#[test]
fn token_bucket_allows_the_burst_then_the_rate() {
    let start = Instant::now();
    let mut limiter = SourceRateLimiter::new(20, 5, 16);
    let ip = SOURCE.ip();
    for _ in 0..5 {
        assert_eq!(limiter.allow(start, ip), Ok(()));
    }
    assert_eq!(limiter.allow(start, ip), Err(RateLimited::SourceOverRate));
    // 20 per second: one token every 50 ms.
    let later = start + Duration::from_millis(49);
    assert_eq!(limiter.allow(later, ip), Err(RateLimited::SourceOverRate));
    let later = start + Duration::from_millis(50);
    assert_eq!(limiter.allow(later, ip), Ok(()));
    assert_eq!(limiter.allow(later, ip), Err(RateLimited::SourceOverRate));
    // Another source has its own bucket.
    let other = IpAddr::V4(Ipv4Addr::new(198, 18, 9, 9));
    assert_eq!(limiter.allow(later, other), Ok(()));
}

#[test]
fn token_bucket_refuses_the_excess_of_a_steady_flood() {
    let start = Instant::now();
    let mut limiter = SourceRateLimiter::new(20, 5, 16);
    // 1000 inits over one second from one source: the burst plus the rate pass.
    let allowed = (0..1000u64)
        .filter(|i| {
            let now = start + Duration::from_millis(*i);
            limiter.allow(now, SOURCE.ip()).is_ok()
        })
        .count();
    assert!((24..=26).contains(&allowed), "{allowed} allowed");
}

#[test]
fn ipv6_sources_share_a_bucket_per_64() {
    let start = Instant::now();
    let mut limiter = SourceRateLimiter::new(20, 2, 16);
    let a: Ipv6Addr = "2001:db8:1:2::1".parse().unwrap();
    let b: Ipv6Addr = "2001:db8:1:2:ffff::9".parse().unwrap();
    let c: Ipv6Addr = "2001:db8:1:3::1".parse().unwrap();
    assert_eq!(limiter.allow(start, a.into()), Ok(()));
    assert_eq!(limiter.allow(start, b.into()), Ok(()));
    assert_eq!(
        limiter.allow(start, a.into()),
        Err(RateLimited::SourceOverRate)
    );
    assert_eq!(limiter.allow(start, c.into()), Ok(()));
}

#[test]
fn ipv4_mapped_sources_of_a_dual_stack_socket_count_one_by_one() {
    let start = Instant::now();
    let mut limiter = SourceRateLimiter::new(20, 1, 16);
    let a: Ipv6Addr = "::ffff:198.18.1.2".parse().unwrap();
    let b: Ipv6Addr = "::ffff:198.18.1.3".parse().unwrap();
    assert_eq!(limiter.allow(start, a.into()), Ok(()));
    assert_eq!(limiter.allow(start, b.into()), Ok(()));
    assert_eq!(
        limiter.allow(start, a.into()),
        Err(RateLimited::SourceOverRate)
    );
}

#[test]
fn the_bucket_table_stays_bounded_under_spoofed_sources() {
    let start = Instant::now();
    let mut limiter = SourceRateLimiter::new(20, 5, 100);
    let mut refused = 0;
    for i in 0..10_000u32 {
        let ip = IpAddr::V4(Ipv4Addr::from(0xC612_0000 | i));
        if limiter.allow(start, ip) == Err(RateLimited::TableFull) {
            refused += 1;
        }
        assert!(limiter.len() <= 100);
    }
    assert_eq!(refused, 9_900);
    // Once the buckets have refilled they are swept (at most once a second), and new
    // sources get room.
    let later = start + Duration::from_secs(1);
    let newcomer = IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1));
    assert_eq!(limiter.allow(later, newcomer), Ok(()));
    assert_eq!(limiter.len(), 1);
}

#[test]
fn a_partly_used_bucket_is_not_swept() {
    let start = Instant::now();
    let mut limiter = SourceRateLimiter::new(20, 5, 1);
    assert_eq!(limiter.allow(start, SOURCE.ip()), Ok(()));
    // 10 ms later one token is still missing: the bucket is kept, the table is full.
    let other = IpAddr::V4(Ipv4Addr::new(198, 18, 9, 9));
    let soon = start + Duration::from_millis(10);
    assert_eq!(limiter.allow(soon, other), Err(RateLimited::TableFull));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    /// Opening arbitrary bytes as a cookie reply never panics and never succeeds
    /// by chance.
    #[test]
    fn opening_arbitrary_sealed_cookies_fails(
        nonce in any::<[u8; COOKIE_NONCE_LEN]>(),
        sealed in any::<[u8; SEALED_COOKIE_LEN]>(),
        mac1 in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let key = CookieReplyKey::new(&PublicKey([3; 32]));
        prop_assert_eq!(key.open(nonce, &sealed, &mac1), Err(CookieError::Authentication));
    }

    /// Arbitrary mac2 fields and inputs never panic and never pass.
    #[test]
    fn arbitrary_mac2_fields_fail(
        input in proptest::collection::vec(any::<u8>(), 0..200),
        field in proptest::collection::vec(any::<u8>(), 0..40),
        port in any::<u16>(),
    ) {
        let now = Instant::now();
        let mut secrets = CookieSecrets::new(now);
        let source = SocketAddr::new(SOURCE.ip(), port);
        prop_assert!(!secrets.verify_mac2(now, source, &input, &field));
    }

    /// The bucket never allows more than the burst plus the rate over the time span,
    /// whatever the arrival pattern.
    #[test]
    fn bucket_never_exceeds_burst_plus_rate(gaps_ms in proptest::collection::vec(0u64..200, 1..300)) {
        let start = Instant::now();
        let mut limiter = SourceRateLimiter::new(20, 5, 4);
        let mut now = start;
        let mut allowed = 0u64;
        for gap in gaps_ms {
            now += Duration::from_millis(gap);
            if limiter.allow(now, SOURCE.ip()).is_ok() {
                allowed += 1;
            }
        }
        let span_ms = now.duration_since(start).as_millis() as u64;
        prop_assert!(allowed <= 5 + span_ms / 50, "{} allowed in {} ms", allowed, span_ms);
    }
}

#[test]
fn a_network_bucket_is_shared_by_every_address_of_the_network() {
    let start = Instant::now();
    let mut limiter = SourceRateLimiter::new(80, 20, 16).per_network();
    // 256 addresses of one /24 get the network's burst between them.
    let admitted = (0..=255u8)
        .filter(|&host| {
            let ip = IpAddr::V4(Ipv4Addr::new(198, 18, 201, host));
            limiter.allow(start, ip).is_ok()
        })
        .count();
    assert_eq!(admitted, 20);
    // So do the /64s of one IPv6 /48.
    let mut limiter = SourceRateLimiter::new(80, 20, 16).per_network();
    let admitted = (0..256u128)
        .filter(|&subnet| {
            let ip = (0x2001_0db8_0001_0000_u128 << 64) | (subnet << 64) | 1;
            limiter.allow(start, IpAddr::V6(ip.into())).is_ok()
        })
        .count();
    assert_eq!(admitted, 20);
    // Another network has its own.
    let other = IpAddr::V4(Ipv4Addr::new(198, 18, 202, 1));
    assert_eq!(limiter.allow(start, other), Ok(()));
}
