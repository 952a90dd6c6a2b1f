//! What one handshake init costs the server on each of its paths: the cookie reply
//! it sends under load (mac1, then the cookie for the source and its sealing), the
//! check of a valid mac2, and the full Noise answer (four X25519 operations) that
//! the cookies spare it. The ratio is why a flood of spoofed inits is cheap to
//! turn away.
//!
//! `cargo bench -p mptund --bench handshake_flood`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use mptund::cookie::{self, CookieReplyKey, CookieSecrets};
use mptund::handshake::{self, InitFields, Responder};
use mptund::keys::PrivateKey;
use mptund::wire::{
    field, CookieReply, HandshakeInit, SessionId, COOKIE_REPLY_LEN, HANDSHAKE_INIT_LEN,
    HANDSHAKE_RESPONSE_LEN,
};

const SOURCE: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 19, 1, 2)), 40000);

fn init(client: &PrivateKey, server: &PrivateKey) -> [u8; HANDSHAKE_INIT_LEN] {
    let mut init = [0u8; HANDSHAKE_INIT_LEN];
    let fields = InitFields {
        sender: SessionId(7),
        path_id: 0,
        unix_time_nanos: 1,
        renews: None,
        aead: mptund::crypto::Aead::ChaCha20Poly1305,
    };
    handshake::initiate(client, &server.public_key(), fields, &mut init).unwrap();
    init
}

fn bench(c: &mut Criterion) {
    let client = PrivateKey::generate();
    let server = PrivateKey::generate();
    let responder = Responder::new(&server);
    let reply_key = CookieReplyKey::new(&server.public_key());
    let now = Instant::now();
    let mut secrets = CookieSecrets::new(now);
    let plain = init(&client, &server);
    let mut with_mac2 = plain;
    cookie::write_mac2(&secrets.cookie_for(now, SOURCE), &mut with_mac2);

    let mut group = c.benchmark_group("handshake_init");
    group.bench_function("cookie_reply", |b| {
        let mut reply = [0u8; COOKIE_REPLY_LEN];
        b.iter(|| {
            let bytes = black_box(&plain[..]);
            assert!(responder.verify_mac(bytes));
            let view = HandshakeInit::new_checked(bytes).unwrap();
            assert!(!secrets.verify_mac2(now, SOURCE, view.mac2_input(), view.mac2()));
            let cookie = secrets.cookie_for(now, SOURCE);
            let nonce = secrets.random_nonce();
            let sealed = reply_key.seal(nonce, &cookie, view.mac1());
            CookieReply::emit(&mut reply, view.path_id(), view.sender(), &nonce, &sealed);
            black_box(&reply);
        })
    });
    group.bench_function("valid_mac2", |b| {
        b.iter(|| {
            let bytes = black_box(&with_mac2[..]);
            assert!(responder.verify_mac(bytes));
            let mac2_input = &bytes[field::INIT_MAC2_INPUT];
            assert!(secrets.verify_mac2(now, SOURCE, mac2_input, &bytes[field::INIT_MAC2]));
        })
    });
    group.bench_function("noise_answer", |b| {
        let mut response = [0u8; HANDSHAKE_RESPONSE_LEN];
        b.iter(|| {
            let accepted = responder.accept(black_box(&plain[..])).unwrap();
            black_box(accepted.respond(SessionId(9), &mut response).unwrap());
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
