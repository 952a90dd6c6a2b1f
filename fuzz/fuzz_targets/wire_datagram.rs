//! Every view of a received datagram: the type dispatch, the transport header, both
//! handshake messages and the plaintext metadata. A view that parses must describe
//! bytes that are in the input, and emitting it again must give those bytes back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mptund::wire::{
    self, ControlMeta, DataMeta, HandshakeInit, HandshakeResponse, PacketType, ParityMeta,
    TransportHeader, CONTROL_META_LEN, DATA_META_LEN, HANDSHAKE_INIT_LEN, HANDSHAKE_RESPONSE_LEN,
    PARITY_META_LEN, TRANSPORT_HEADER_LEN,
};

fuzz_target!(|datagram: &[u8]| {
    let dispatched = wire::packet_type(datagram);
    if let Ok(packet_type) = dispatched {
        assert_eq!(u8::from(packet_type), datagram[0]);
    }

    if let Ok(header) = TransportHeader::parse(datagram) {
        assert!(header.packet_type.is_transport());
        assert!(header.path_id <= wire::MAX_PATH_ID);
        let mut emitted = [0u8; TRANSPORT_HEADER_LEN];
        header.emit(&mut emitted);
        assert_eq!(&emitted[..], &datagram[..TRANSPORT_HEADER_LEN]);
        assert_eq!(dispatched, Ok(header.packet_type));
    }

    if let Ok(init) = HandshakeInit::new_checked(datagram) {
        assert_eq!(datagram.len(), HANDSHAKE_INIT_LEN);
        assert!(init.path_id() <= wire::MAX_PATH_ID);
        assert_eq!(
            init.noise_message().len() + init.mac1().len() + init.mac2().len() + 8,
            HANDSHAKE_INIT_LEN
        );
        assert_eq!(init.mac1_input(), &datagram[..init.mac1_input().len()]);
        let mut emitted = [0u8; HANDSHAKE_INIT_LEN];
        HandshakeInit::emit_header(&mut emitted, init.path_id(), init.aead(), init.sender());
        assert_eq!(&emitted[..8], &datagram[..8]);
        assert_eq!(dispatched, Ok(PacketType::HandshakeInit));
    }

    if let Ok(response) = HandshakeResponse::new_checked(datagram) {
        assert_eq!(datagram.len(), HANDSHAKE_RESPONSE_LEN);
        assert!(response.path_id() <= wire::MAX_PATH_ID);
        let mut emitted = [0u8; HANDSHAKE_RESPONSE_LEN];
        HandshakeResponse::emit_header(
            &mut emitted,
            response.path_id(),
            response.aead(),
            response.receiver(),
        );
        assert_eq!(&emitted[..8], &datagram[..8]);
        assert_eq!(&datagram[8..], response.noise_message());
    }

    // The plaintext views, as if the input were an opened payload.
    if let Ok(meta) = DataMeta::parse(datagram) {
        let mut emitted = [0u8; DATA_META_LEN];
        meta.emit(&mut emitted);
        assert_eq!(&emitted[..], &datagram[..DATA_META_LEN]);
    }
    if let Ok(meta) = ControlMeta::parse(datagram) {
        let mut emitted = [0u8; CONTROL_META_LEN];
        meta.emit(&mut emitted);
        assert_eq!(&emitted[..], &datagram[..CONTROL_META_LEN]);
    }
    if let Ok(meta) = ParityMeta::parse(datagram) {
        let mut emitted = [0u8; PARITY_META_LEN];
        meta.emit(&mut emitted);
        assert_eq!(&emitted[..], &datagram[..PARITY_META_LEN]);
    }
});
