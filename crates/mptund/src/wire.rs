//! Checked views of the mptund wire format.
//!
//! Every datagram starts with the same four bytes (type, path id, version, and
//! the AEAD in handshakes, reserved elsewhere). Transport datagrams (Data and
//! Control) then carry a receiver session id and a nonce counter, the AEAD
//! ciphertext and a 16-byte tag; the two handshake messages have fixed sizes. `docs/PROTOCOL.md` at the repository
//! root draws every layout; the named ranges in [`field`] are the single source
//! of truth for the offsets used here.
//!
//! The style follows smoltcp's `wire` module: parsing checks every length
//! before touching a byte and returns a typed [`WireError`] instead of
//! panicking, emitting writes into fixed-size caller buffers, and nothing here
//! allocates. All integers are big-endian.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use core::fmt;
use core::ops::Range;
use thiserror::Error;

/// Length of the transport header (Data and Control): common 4 bytes,
/// receiver session id, nonce counter.
pub const TRANSPORT_HEADER_LEN: usize = 16;
/// Length of the metadata that precedes the inner IP packet in a Data plaintext.
pub const DATA_META_LEN: usize = 12;
/// Length of the Poly1305 authentication tag that ends every transport datagram.
pub const TAG_LEN: usize = 16;
/// Length of the metadata that precedes the frames in a Control plaintext.
pub const CONTROL_META_LEN: usize = 8;
/// Length of the metadata that precedes the XOR payload in a Parity plaintext: as
/// long as a Data datagram's, so a parity over full-sized inner packets fits the path.
pub const PARITY_META_LEN: usize = 12;
/// How many path packet numbers one parity block spans: the member bitmap's width.
pub const PARITY_SPAN: u32 = 32;
/// Bytes a Data datagram adds to the inner IP packet (header + meta + tag),
/// not counting the outer UDP (8) and IP (20 for IPv4, 40 for IPv6) headers.
pub const DATA_OVERHEAD: usize = TRANSPORT_HEADER_LEN + DATA_META_LEN + TAG_LEN;
/// Exact length of a HandshakeInit datagram.
pub const HANDSHAKE_INIT_LEN: usize = 148;
/// Exact length of a HandshakeResponse datagram.
pub const HANDSHAKE_RESPONSE_LEN: usize = 60;
/// Exact length of a CookieReply datagram: never more than the init it answers.
pub const COOKIE_REPLY_LEN: usize = 52;
/// Shortest well-formed transport datagram: a header and a tag around an
/// empty plaintext.
pub const MIN_TRANSPORT_LEN: usize = TRANSPORT_HEADER_LEN + TAG_LEN;
/// Protocol version carried in byte 2 of both handshake messages.
pub const HANDSHAKE_VERSION: u8 = 2;
/// Version byte of transport datagrams (the session's version was fixed by
/// the handshake, so transport datagrams carry 0).
pub const TRANSPORT_VERSION: u8 = 0;
/// Length of a control frame's header: type (1) and body length (2).
pub const FRAME_HEADER_LEN: usize = 3;
/// Highest path id on the wire: a session tracks its paths in a 64-bit set, so
/// a datagram or frame naming a higher id is malformed.
pub const MAX_PATH_ID: u8 = mptund_sched::PathId::MAX_IN_SET;

const _: () = assert!(DATA_OVERHEAD == 44);
const _: () = assert!(PARITY_META_LEN == DATA_META_LEN);

/// Byte offsets of every field, as named ranges.
pub mod field {
    use core::ops::Range;

    /// Packet type (all datagrams).
    pub const TYPE: usize = 0;
    /// Path id chosen by the client for the uplink (all datagrams).
    pub const PATH_ID: usize = 1;
    /// Protocol version (all datagrams).
    pub const VERSION: usize = 2;
    /// Handshake init and response: the transport AEAD ([`super::Aead`]); reserved, must be
    /// zero, in every other datagram.
    pub const RESERVED: usize = 3;
    /// The four common bytes.
    pub const COMMON: Range<usize> = 0..4;

    /// Transport: session id chosen by the receiver of the datagram.
    pub const TRANSPORT_RECEIVER: Range<usize> = 4..8;
    /// Transport: per-direction nonce counter.
    pub const TRANSPORT_COUNTER: Range<usize> = 8..16;

    /// Data plaintext: per-path packet number.
    pub const DATA_PATH_PN: Range<usize> = 0..4;
    /// Data plaintext: sender timestamp, microseconds since session start.
    pub const DATA_TX_TIME: Range<usize> = 4..8;
    /// Data plaintext: session-wide sequence number.
    pub const DATA_SEQ: Range<usize> = 8..12;

    /// Parity plaintext: path packet number of the first member.
    pub const PARITY_FIRST_PN: Range<usize> = 0..4;
    /// Parity plaintext: member bitmap, bit i for path packet number first + i.
    pub const PARITY_MEMBERS: Range<usize> = 4..8;
    /// Parity plaintext: XOR of the members' session sequence numbers.
    pub const PARITY_SEQ_XOR: Range<usize> = 8..12;

    /// Control plaintext: per-path packet number.
    pub const CONTROL_PATH_PN: Range<usize> = 0..4;
    /// Control plaintext: sender timestamp, microseconds since session start.
    pub const CONTROL_TX_TIME: Range<usize> = 4..8;

    /// HandshakeInit: the client's (sender's) session id.
    pub const INIT_SENDER: Range<usize> = 4..8;
    /// HandshakeInit: the clear bytes bound into the Noise prologue (type, path id,
    /// version, AEAD, sender session id), so rewriting any of them fails Noise.
    pub const INIT_PROLOGUE: Range<usize> = 0..8;
    /// HandshakeInit: Noise IK message 1.
    pub const INIT_NOISE: Range<usize> = 8..116;
    /// HandshakeInit: the bytes mac1 covers.
    pub const INIT_MAC1_INPUT: Range<usize> = 0..116;
    /// HandshakeInit: mac1.
    pub const INIT_MAC1: Range<usize> = 116..132;
    /// HandshakeInit: the bytes mac2 covers.
    pub const INIT_MAC2_INPUT: Range<usize> = 0..132;
    /// HandshakeInit: mac2, zero unless the client holds a cookie from the server.
    pub const INIT_MAC2: Range<usize> = 132..148;

    /// HandshakeResponse: the client's session id (receiver of this message).
    pub const RESPONSE_RECEIVER: Range<usize> = 4..8;
    /// HandshakeResponse: Noise IK message 2; its payload is the server's session id.
    pub const RESPONSE_NOISE: Range<usize> = 8..60;

    /// CookieReply: the client's session id from the init it answers.
    pub const COOKIE_RECEIVER: Range<usize> = 4..8;
    /// CookieReply: the random AEAD nonce.
    pub const COOKIE_NONCE: Range<usize> = 8..20;
    /// CookieReply: the sealed cookie and its Poly1305 tag.
    pub const COOKIE_SEALED: Range<usize> = 20..52;
}

/// Errors from parsing or emitting wire structures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireError {
    /// The input is shorter than the structure being parsed.
    #[error("truncated: need at least {needed} bytes, got {got}")]
    Truncated {
        /// Minimum length of the structure.
        needed: usize,
        /// Length of the input.
        got: usize,
    },
    /// A fixed-size message (handshake) does not have its exact size.
    #[error("wrong length: expected exactly {expected} bytes, got {got}")]
    WrongLength {
        /// The message's fixed length.
        expected: usize,
        /// Length of the input.
        got: usize,
    },
    /// The type byte is not a known packet type.
    #[error("unknown packet type {0:#04x}")]
    UnknownType(u8),
    /// The type byte is valid but not the one this parser expects.
    #[error("unexpected packet type {got:?}, expected {expected}")]
    UnexpectedType {
        /// What the parser handles.
        expected: &'static str,
        /// What the datagram says it is.
        got: PacketType,
    },
    /// The version byte does not match this implementation.
    #[error("unsupported version {got}, expected {expected}")]
    BadVersion {
        /// Version this implementation speaks for this packet type.
        expected: u8,
        /// Version in the datagram.
        got: u8,
    },
    /// The reserved byte is not zero.
    #[error("reserved byte is {0:#04x}, must be 0")]
    BadReserved(u8),
    /// A handshake names a transport AEAD this implementation does not know.
    #[error("unknown transport AEAD {0:#04x}")]
    UnknownAead(u8),
    /// A path id above [`MAX_PATH_ID`].
    #[error("path id {0} is above the highest, {MAX_PATH_ID}")]
    PathIdOutOfRange(u8),
    /// A control frame's header or body runs past the end of the plaintext.
    #[error("control frame truncated: needs {needed} bytes, {got} left")]
    FrameTruncated {
        /// Bytes the frame claims to need.
        needed: usize,
        /// Bytes left in the plaintext.
        got: usize,
    },
    /// A known control frame's body is shorter than its fixed fields.
    #[error("control frame type {frame_type:#04x} body is {got} bytes, needs {needed}")]
    FrameBodyTooShort {
        /// Frame type.
        frame_type: u8,
        /// Minimum body length for this type.
        needed: usize,
        /// Body length in the frame header.
        got: usize,
    },
    /// A frame body to write is longer than the 16-bit length field allows.
    #[error("control frame body of {0} bytes exceeds 65535")]
    FrameTooLong(usize),
    /// The output buffer is too small for what is being written.
    #[error("output buffer too small: need {needed} bytes, have {got}")]
    BufferTooSmall {
        /// Bytes the write needs.
        needed: usize,
        /// Bytes available.
        got: usize,
    },
}

/// The packet type in byte 0 of every datagram.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketType {
    /// Client to server, first handshake message (128 bytes).
    HandshakeInit = 0x01,
    /// Server to client, second handshake message (60 bytes).
    HandshakeResponse = 0x02,
    /// Transport datagram carrying an inner IP packet.
    Data = 0x03,
    /// Transport datagram carrying control frames.
    Control = 0x04,
    /// Transport datagram carrying control frames (piggybacked acknowledgements) and
    /// then an inner IP packet.
    DataWithFrames = 0x05,
    /// Server to client, instead of a HandshakeResponse while the server is under
    /// load: a cookie for the init's source address (52 bytes).
    CookieReply = 0x06,
    /// Transport datagram carrying the XOR of a block of the path's data datagrams
    /// (forward error correction on lossy paths).
    Parity = 0x07,
}

impl PacketType {
    /// Whether this is a transport type (Data, Control or Parity).
    pub fn is_transport(self) -> bool {
        matches!(
            self,
            PacketType::Data
                | PacketType::Control
                | PacketType::DataWithFrames
                | PacketType::Parity
        )
    }

    /// Whether the datagram carries an inner packet.
    pub fn carries_data(self) -> bool {
        matches!(self, PacketType::Data | PacketType::DataWithFrames)
    }
}

impl TryFrom<u8> for PacketType {
    type Error = WireError;

    fn try_from(byte: u8) -> Result<Self, WireError> {
        match byte {
            0x01 => Ok(PacketType::HandshakeInit),
            0x02 => Ok(PacketType::HandshakeResponse),
            0x03 => Ok(PacketType::Data),
            0x04 => Ok(PacketType::Control),
            0x05 => Ok(PacketType::DataWithFrames),
            0x06 => Ok(PacketType::CookieReply),
            0x07 => Ok(PacketType::Parity),
            other => Err(WireError::UnknownType(other)),
        }
    }
}

impl From<PacketType> for u8 {
    fn from(packet_type: PacketType) -> u8 {
        packet_type as u8
    }
}

/// A session id: chosen by each side for itself at handshake time, and put by
/// the other side in every datagram it sends, so that datagrams are tied to a
/// session rather than to a source address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u32);

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}", self.0)
    }
}

/// Reads a field whose presence the caller checked; a range the bytes do not
/// hold reads as zero instead of panicking.
fn read_u32(bytes: &[u8], range: core::ops::Range<usize>) -> u32 {
    bytes
        .get(range)
        .and_then(|word| word.try_into().ok())
        .map_or(0, u32::from_be_bytes)
}

/// As [`read_u32`].
fn read_u64(bytes: &[u8], range: core::ops::Range<usize>) -> u64 {
    bytes
        .get(range)
        .and_then(|word| word.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// The four common bytes: type, path id, version, reserved.
fn common(datagram: &[u8]) -> Result<[u8; 4], WireError> {
    datagram
        .first_chunk::<4>()
        .copied()
        .ok_or(WireError::Truncated {
            needed: field::COMMON.end,
            got: datagram.len(),
        })
}

fn check_len(bytes: &[u8], needed: usize) -> Result<(), WireError> {
    if bytes.len() < needed {
        return Err(WireError::Truncated {
            needed,
            got: bytes.len(),
        });
    }
    Ok(())
}

/// Reads the packet type of a datagram, checking that the four common bytes
/// are present. This is the first dispatch step for every received datagram.
pub fn packet_type(datagram: &[u8]) -> Result<PacketType, WireError> {
    let [packet_type, ..] = common(datagram)?;
    PacketType::try_from(packet_type)
}

/// The transport AEAD of a session, named by the client in its HandshakeInit (byte
/// 3, bound by the Noise prologue) and echoed in the response. Both have 32-byte
/// keys, 12-byte nonces and 16-byte tags, so the envelope is the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Aead {
    /// ChaCha20-Poly1305 (RFC 8439): fast everywhere, the only choice of CPUs
    /// without AES instructions.
    ChaCha20Poly1305 = 0,
    /// AES-256-GCM: about 2.7 times ChaCha20-Poly1305's speed on CPUs with AES
    /// and carry-less multiplication instructions (`benches/datapath/REPORT.md`).
    Aes256Gcm = 1,
}

impl TryFrom<u8> for Aead {
    type Error = WireError;

    fn try_from(value: u8) -> Result<Self, WireError> {
        match value {
            0 => Ok(Aead::ChaCha20Poly1305),
            1 => Ok(Aead::Aes256Gcm),
            other => Err(WireError::UnknownAead(other)),
        }
    }
}

/// Checks the version, reserved and path id bytes of a datagram whose length was
/// checked.
fn check_common(datagram: &[u8], expected: u8) -> Result<(), WireError> {
    let [_, path_id, version, reserved] = common(datagram)?;
    check_version(version, expected)?;
    if reserved != 0 {
        return Err(WireError::BadReserved(reserved));
    }
    check_path_id(path_id)?;
    Ok(())
}

fn check_version(version: u8, expected: u8) -> Result<(), WireError> {
    if version != expected {
        return Err(WireError::BadVersion {
            expected,
            got: version,
        });
    }
    Ok(())
}

fn check_path_id(path_id: u8) -> Result<u8, WireError> {
    if path_id > MAX_PATH_ID {
        return Err(WireError::PathIdOutOfRange(path_id));
    }
    Ok(path_id)
}

fn emit_common(out: &mut [u8], packet_type: PacketType, path_id: u8, version: u8) {
    emit_common_with(out, packet_type, path_id, version, 0);
}

fn emit_common_with(
    out: &mut [u8],
    packet_type: PacketType,
    path_id: u8,
    version: u8,
    aead_or_zero: u8,
) {
    if let Some(common) = out.first_chunk_mut::<4>() {
        *common = [packet_type.into(), path_id, version, aead_or_zero];
    }
}

/// The 16-byte header of Data and Control datagrams. It is the AEAD's
/// associated data, so every field is authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportHeader {
    /// [`PacketType::Data`] or [`PacketType::Control`].
    pub packet_type: PacketType,
    /// Path id of the uplink, chosen by the client.
    pub path_id: u8,
    /// The session id chosen by the side that receives this datagram.
    pub receiver: SessionId,
    /// Nonce counter, unique per direction per session, shared by all paths.
    pub counter: u64,
}

impl TransportHeader {
    /// Parses the header at the start of `datagram` (which may be the whole
    /// datagram or just its first 16 bytes). Checks the type is a transport
    /// type, the version is 0, the reserved byte is 0 and the path id is at most
    /// [`MAX_PATH_ID`]. Does not check that
    /// a tag follows; opening the datagram does.
    pub fn parse(datagram: &[u8]) -> Result<Self, WireError> {
        check_len(datagram, TRANSPORT_HEADER_LEN)?;
        let [packet_type, path_id, ..] = common(datagram)?;
        let packet_type = PacketType::try_from(packet_type)?;
        if !packet_type.is_transport() {
            return Err(WireError::UnexpectedType {
                expected: "Data or Control",
                got: packet_type,
            });
        }
        check_common(datagram, TRANSPORT_VERSION)?;
        Ok(TransportHeader {
            packet_type,
            path_id,
            receiver: SessionId(read_u32(datagram, field::TRANSPORT_RECEIVER)),
            counter: read_u64(datagram, field::TRANSPORT_COUNTER),
        })
    }

    /// Writes the header (version 0, reserved 0).
    pub fn emit(&self, out: &mut [u8; TRANSPORT_HEADER_LEN]) {
        emit_common(out, self.packet_type, self.path_id, TRANSPORT_VERSION);
        out[field::TRANSPORT_RECEIVER].copy_from_slice(&self.receiver.0.to_be_bytes());
        out[field::TRANSPORT_COUNTER].copy_from_slice(&self.counter.to_be_bytes());
    }
}

/// The metadata at the start of a Data plaintext, before the inner IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataMeta {
    /// Per-path packet number (wraps).
    pub path_pn: u32,
    /// Sender timestamp in microseconds since the sender's session start (wraps).
    pub tx_time_us: u32,
    /// Session-wide sequence number (wraps).
    pub seq: u32,
}

impl DataMeta {
    /// Parses the metadata at the start of a Data plaintext; the inner packet
    /// is `plaintext[DATA_META_LEN..]`.
    pub fn parse(plaintext: &[u8]) -> Result<Self, WireError> {
        check_len(plaintext, DATA_META_LEN)?;
        Ok(DataMeta {
            path_pn: read_u32(plaintext, field::DATA_PATH_PN),
            tx_time_us: read_u32(plaintext, field::DATA_TX_TIME),
            seq: read_u32(plaintext, field::DATA_SEQ),
        })
    }

    /// Writes the metadata.
    pub fn emit(&self, out: &mut [u8; DATA_META_LEN]) {
        out[field::DATA_PATH_PN].copy_from_slice(&self.path_pn.to_be_bytes());
        out[field::DATA_TX_TIME].copy_from_slice(&self.tx_time_us.to_be_bytes());
        out[field::DATA_SEQ].copy_from_slice(&self.seq.to_be_bytes());
    }
}

/// The metadata at the start of a Parity plaintext, before the XOR of the members'
/// inner packets (zero-padded to the longest). A parity takes no packet number of its
/// own: it is not acknowledged, only used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParityMeta {
    /// Path packet number of bit 0 of `members`.
    pub first_pn: u32,
    /// Bit `i` set: path packet number `first_pn + i` (wrapping) is a member.
    pub members: u32,
    /// XOR of the members' session sequence numbers.
    pub seq_xor: u32,
}

impl ParityMeta {
    /// Parses the metadata at the start of a Parity plaintext; the XOR payload is
    /// `plaintext[PARITY_META_LEN..]`.
    pub fn parse(plaintext: &[u8]) -> Result<Self, WireError> {
        check_len(plaintext, PARITY_META_LEN)?;
        Ok(ParityMeta {
            first_pn: read_u32(plaintext, field::PARITY_FIRST_PN),
            members: read_u32(plaintext, field::PARITY_MEMBERS),
            seq_xor: read_u32(plaintext, field::PARITY_SEQ_XOR),
        })
    }

    /// Writes the metadata.
    pub fn emit(&self, out: &mut [u8; PARITY_META_LEN]) {
        out[field::PARITY_FIRST_PN].copy_from_slice(&self.first_pn.to_be_bytes());
        out[field::PARITY_MEMBERS].copy_from_slice(&self.members.to_be_bytes());
        out[field::PARITY_SEQ_XOR].copy_from_slice(&self.seq_xor.to_be_bytes());
    }
}

/// The metadata at the start of a Control plaintext, before the frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlMeta {
    /// Per-path packet number (wraps); Control datagrams count on their path
    /// like Data datagrams do.
    pub path_pn: u32,
    /// Sender timestamp in microseconds since the sender's session start (wraps).
    pub tx_time_us: u32,
}

impl ControlMeta {
    /// Parses the metadata at the start of a Control plaintext; the frames are
    /// `plaintext[CONTROL_META_LEN..]`.
    pub fn parse(plaintext: &[u8]) -> Result<Self, WireError> {
        check_len(plaintext, CONTROL_META_LEN)?;
        Ok(ControlMeta {
            path_pn: read_u32(plaintext, field::CONTROL_PATH_PN),
            tx_time_us: read_u32(plaintext, field::CONTROL_TX_TIME),
        })
    }

    /// Writes the metadata.
    pub fn emit(&self, out: &mut [u8; CONTROL_META_LEN]) {
        out[field::CONTROL_PATH_PN].copy_from_slice(&self.path_pn.to_be_bytes());
        out[field::CONTROL_TX_TIME].copy_from_slice(&self.tx_time_us.to_be_bytes());
    }
}

/// Control frame type codes.
pub mod frame_type {
    /// [`super::Frame::Ping`].
    pub const PING: u8 = 0x01;
    /// [`super::Frame::Pong`].
    pub const PONG: u8 = 0x02;
    /// [`super::Frame::Close`].
    pub const CLOSE: u8 = 0x03;
    /// [`super::Frame::Ack`].
    pub const ACK: u8 = 0x04;
    /// [`super::Frame::GaveUp`].
    pub const GAVE_UP: u8 = 0x05;
    /// [`super::Frame::PathChallenge`].
    pub const PATH_CHALLENGE: u8 = 0x06;
    /// [`super::Frame::PathResponse`].
    pub const PATH_RESPONSE: u8 = 0x07;
}

/// Body of a PathChallenge or PathResponse frame: the 8 unpredictable bytes the
/// challenger chose (RFC 9000 section 19.17).
pub const PATH_TOKEN_LEN: usize = 8;

/// Body of a GaveUp frame: first sequence number u32, count u16.
pub const GAVE_UP_BODY_LEN: usize = 6;

/// Fixed part of an Ack frame body: path id, ack delay, one-way-delay sample.
pub const ACK_FIXED_LEN: usize = 9;
/// One acknowledged range in an Ack frame: first and last packet number.
pub const ACK_RANGE_LEN: usize = 8;
/// Length of the frames-length field that precedes the frames in a
/// DataWithFrames plaintext.
pub const PIGGYBACK_LEN_FIELD: usize = 2;

/// The acknowledged packet-number ranges of an Ack frame, read in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckRangesView<'a> {
    bytes: &'a [u8],
}

impl<'a> AckRangesView<'a> {
    /// `(first, last)` inclusive ranges of path packet numbers, newest first.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u32)> + 'a {
        self.bytes
            .chunks_exact(ACK_RANGE_LEN)
            .map(|range| (read_u32(range, 0..4), read_u32(range, 4..8)))
    }

    pub fn len(&self) -> usize {
        self.bytes.len() / ACK_RANGE_LEN
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Body length of a Ping frame written by this implementation.
pub const PING_BODY_LEN: usize = 4;
/// Body length of a Pong frame written by this implementation.
pub const PONG_BODY_LEN: usize = 8;

/// One control frame: `type u8, len u16, body[len]`.
///
/// Known frames may carry a longer body than their fields need (a later
/// version may append fields); the extra bytes are ignored when parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Asks the peer to answer with a Pong on the same path.
    Ping {
        /// Identifies the ping; echoed in the Pong.
        ping_id: u32,
    },
    /// Answers a Ping.
    Pong {
        /// The Ping's `ping_id`.
        ping_id: u32,
        /// The `tx_time_us` of the Control datagram that carried the Ping.
        echoed_tx_time_us: u32,
    },
    /// The peer is going away; the session can be torn down.
    Close,
    /// Which path packet numbers of one path arrived: drives that path's loss
    /// detection, RTT, one-way-delay and rate estimation at the sender.
    Ack {
        /// The path whose packets are acknowledged (any path may carry it).
        path_id: u8,
        /// How long the largest acknowledged packet waited at the receiver, in µs.
        ack_delay_us: u32,
        /// Receiver's µs clock at the arrival of the largest acknowledged packet
        /// minus that packet's sender timestamp, wrapping: a one-way delay with an
        /// unknown but constant clock offset.
        largest_owd_raw_us: u32,
        /// The acknowledged ranges, newest first.
        ranges: AckRangesView<'a>,
    },
    /// The sender lost these session sequence numbers and has no path left to send
    /// them again: the receiver stops waiting for them.
    GaveUp {
        /// The first sequence number given up.
        first_seq: u32,
        /// How many consecutive sequence numbers from `first_seq` (wrapping).
        count: u16,
    },
    /// Asks the peer to echo `token` in a PathResponse on the same path: proves
    /// the peer receives at the address this was sent to (RFC 9000 section 8.2).
    PathChallenge {
        /// Unpredictable bytes chosen by the challenger.
        token: [u8; PATH_TOKEN_LEN],
    },
    /// Answers a PathChallenge.
    PathResponse {
        /// The challenge's token.
        token: [u8; PATH_TOKEN_LEN],
    },
    /// A frame type this implementation does not know; skipped by length.
    Unknown {
        /// The frame's type byte.
        frame_type: u8,
        /// The frame's body.
        body: &'a [u8],
    },
}

impl<'a> Frame<'a> {
    fn parse_body(frame_type: u8, body: &'a [u8]) -> Result<Self, WireError> {
        let too_short = |needed: usize| WireError::FrameBodyTooShort {
            frame_type,
            needed,
            got: body.len(),
        };
        match frame_type {
            frame_type::PING => {
                if body.len() < PING_BODY_LEN {
                    return Err(too_short(PING_BODY_LEN));
                }
                Ok(Frame::Ping {
                    ping_id: read_u32(body, 0..4),
                })
            }
            frame_type::PONG => {
                if body.len() < PONG_BODY_LEN {
                    return Err(too_short(PONG_BODY_LEN));
                }
                Ok(Frame::Pong {
                    ping_id: read_u32(body, 0..4),
                    echoed_tx_time_us: read_u32(body, 4..8),
                })
            }
            frame_type::CLOSE => Ok(Frame::Close),
            frame_type::ACK => {
                if body.len() < ACK_FIXED_LEN + ACK_RANGE_LEN {
                    return Err(too_short(ACK_FIXED_LEN + ACK_RANGE_LEN));
                }
                let ranges = body.get(ACK_FIXED_LEN..).unwrap_or_default();
                if ranges.len() % ACK_RANGE_LEN != 0 {
                    return Err(too_short(
                        ACK_FIXED_LEN + ranges.len().next_multiple_of(ACK_RANGE_LEN),
                    ));
                }
                let Some((&path_id, _)) = body.split_first() else {
                    return Err(too_short(ACK_FIXED_LEN + ACK_RANGE_LEN));
                };
                Ok(Frame::Ack {
                    path_id: check_path_id(path_id)?,
                    ack_delay_us: read_u32(body, 1..5),
                    largest_owd_raw_us: read_u32(body, 5..9),
                    ranges: AckRangesView { bytes: ranges },
                })
            }
            frame_type::GAVE_UP => {
                if body.len() < GAVE_UP_BODY_LEN {
                    return Err(too_short(GAVE_UP_BODY_LEN));
                }
                let Some(&[a, b, c, d, e, f]) = body.first_chunk::<GAVE_UP_BODY_LEN>() else {
                    return Err(too_short(GAVE_UP_BODY_LEN));
                };
                Ok(Frame::GaveUp {
                    first_seq: u32::from_be_bytes([a, b, c, d]),
                    count: u16::from_be_bytes([e, f]),
                })
            }
            frame_type::PATH_CHALLENGE | frame_type::PATH_RESPONSE => {
                let token = body
                    .get(..PATH_TOKEN_LEN)
                    .and_then(|token| <[u8; PATH_TOKEN_LEN]>::try_from(token).ok())
                    .ok_or_else(|| too_short(PATH_TOKEN_LEN))?;
                Ok(if frame_type == frame_type::PATH_CHALLENGE {
                    Frame::PathChallenge { token }
                } else {
                    Frame::PathResponse { token }
                })
            }
            _ => Ok(Frame::Unknown { frame_type, body }),
        }
    }

    /// Number of bytes [`write_frame`] writes for this frame.
    pub fn encoded_len(&self) -> usize {
        FRAME_HEADER_LEN
            + match self {
                Frame::Ping { .. } => PING_BODY_LEN,
                Frame::Pong { .. } => PONG_BODY_LEN,
                Frame::Close => 0,
                Frame::Ack { ranges, .. } => ACK_FIXED_LEN + ranges.bytes.len(),
                Frame::GaveUp { .. } => GAVE_UP_BODY_LEN,
                Frame::PathChallenge { .. } | Frame::PathResponse { .. } => PATH_TOKEN_LEN,
                Frame::Unknown { body, .. } => body.len(),
            }
    }
}

/// Iterator over the frames of a Control plaintext, see [`frames`].
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let result = self.next_frame();
        self.failed = result.is_err();
        Some(result)
    }
}

impl<'a> Frames<'a> {
    fn next_frame(&mut self) -> Result<Frame<'a>, WireError> {
        let rest = self.rest;
        let Some((&[frame_type, len_high, len_low], after_header)) =
            rest.split_first_chunk::<FRAME_HEADER_LEN>()
        else {
            return Err(WireError::FrameTruncated {
                needed: FRAME_HEADER_LEN,
                got: rest.len(),
            });
        };
        let body_len = usize::from(u16::from_be_bytes([len_high, len_low]));
        if after_header.len() < body_len {
            return Err(WireError::FrameTruncated {
                needed: body_len,
                got: after_header.len(),
            });
        }
        let (body, rest) = after_header.split_at(body_len);
        self.rest = rest;
        Frame::parse_body(frame_type, body)
    }
}

/// Iterates over the frames in `body` (a Control plaintext after its
/// [`ControlMeta`]). Yields each frame in order; on the first malformed frame
/// it yields one error and then stops. Does not allocate.
pub fn frames(body: &[u8]) -> impl Iterator<Item = Result<Frame<'_>, WireError>> {
    Frames {
        rest: body,
        failed: false,
    }
}

/// Writes `frame` at the start of `out` and returns the number of bytes written.
#[allow(
    clippy::indexing_slicing,
    reason = "writes only after checking that `out` holds what it writes"
)]
pub fn write_frame(out: &mut [u8], frame: &Frame) -> Result<usize, WireError> {
    let needed = frame.encoded_len();
    let body_len = needed - FRAME_HEADER_LEN;
    let Ok(body_len_u16) = u16::try_from(body_len) else {
        return Err(WireError::FrameTooLong(body_len));
    };
    if out.len() < needed {
        return Err(WireError::BufferTooSmall {
            needed,
            got: out.len(),
        });
    }
    let (header, rest) = out.split_at_mut(FRAME_HEADER_LEN);
    let body = &mut rest[..body_len];
    header[0] = match frame {
        Frame::Ping { .. } => frame_type::PING,
        Frame::Pong { .. } => frame_type::PONG,
        Frame::Close => frame_type::CLOSE,
        Frame::Ack { .. } => frame_type::ACK,
        Frame::GaveUp { .. } => frame_type::GAVE_UP,
        Frame::PathChallenge { .. } => frame_type::PATH_CHALLENGE,
        Frame::PathResponse { .. } => frame_type::PATH_RESPONSE,
        Frame::Unknown { frame_type, .. } => *frame_type,
    };
    header[1..3].copy_from_slice(&body_len_u16.to_be_bytes());
    match frame {
        Frame::Ping { ping_id } => body.copy_from_slice(&ping_id.to_be_bytes()),
        Frame::Pong {
            ping_id,
            echoed_tx_time_us,
        } => {
            body[0..4].copy_from_slice(&ping_id.to_be_bytes());
            body[4..8].copy_from_slice(&echoed_tx_time_us.to_be_bytes());
        }
        Frame::Close => {}
        Frame::Ack {
            path_id,
            ack_delay_us,
            largest_owd_raw_us,
            ranges,
        } => {
            body[0] = *path_id;
            body[1..5].copy_from_slice(&ack_delay_us.to_be_bytes());
            body[5..9].copy_from_slice(&largest_owd_raw_us.to_be_bytes());
            body[ACK_FIXED_LEN..].copy_from_slice(ranges.bytes);
        }
        Frame::GaveUp { first_seq, count } => {
            body[0..4].copy_from_slice(&first_seq.to_be_bytes());
            body[4..6].copy_from_slice(&count.to_be_bytes());
        }
        Frame::PathChallenge { token } | Frame::PathResponse { token } => {
            body.copy_from_slice(token)
        }
        Frame::Unknown { body: src, .. } => body.copy_from_slice(src),
    }
    Ok(needed)
}

/// Writes an Ack frame for `path_id` with the given `(first, last)` ranges (newest
/// first) at the start of `out`; returns the bytes written. Writes as many ranges
/// as fit and at least one, or fails with `BufferTooSmall`.
#[allow(
    clippy::indexing_slicing,
    reason = "writes only after checking that `out` holds what it writes"
)]
pub fn write_ack_frame(
    out: &mut [u8],
    path_id: u8,
    ack_delay_us: u32,
    largest_owd_raw_us: u32,
    ranges: impl Iterator<Item = (u32, u32)>,
) -> Result<usize, WireError> {
    let minimum = FRAME_HEADER_LEN + ACK_FIXED_LEN + ACK_RANGE_LEN;
    if out.len() < minimum {
        return Err(WireError::BufferTooSmall {
            needed: minimum,
            got: out.len(),
        });
    }
    let room = (out.len() - FRAME_HEADER_LEN - ACK_FIXED_LEN) / ACK_RANGE_LEN;
    let mut written = FRAME_HEADER_LEN + ACK_FIXED_LEN;
    for (first, last) in ranges.take(room.min(usize::from(u8::MAX))) {
        out[written..written + 4].copy_from_slice(&first.to_be_bytes());
        out[written + 4..written + 8].copy_from_slice(&last.to_be_bytes());
        written += ACK_RANGE_LEN;
    }
    if written == FRAME_HEADER_LEN + ACK_FIXED_LEN {
        return Err(WireError::FrameBodyTooShort {
            frame_type: frame_type::ACK,
            needed: ACK_RANGE_LEN,
            got: 0,
        });
    }
    let body_len = (written - FRAME_HEADER_LEN) as u16;
    out[0] = frame_type::ACK;
    out[1..3].copy_from_slice(&body_len.to_be_bytes());
    out[3] = path_id;
    out[4..8].copy_from_slice(&ack_delay_us.to_be_bytes());
    out[8..12].copy_from_slice(&largest_owd_raw_us.to_be_bytes());
    Ok(written)
}

/// Where the parts of a transport datagram (Data, DataWithFrames, Control or Parity)
/// lie, so that code building one names its parts and never computes an offset:
/// header, metadata, the piggybacked frames with their length field (DataWithFrames
/// only), the payload (inner packet, control frames or parity) and the tag. The AEAD
/// seals everything from the metadata to the payload's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransportLayout {
    meta_len: usize,
    /// Piggybacked frames, zero for none (then there is no length field either).
    frames_len: usize,
    payload_len: usize,
}

impl TransportLayout {
    /// A Data datagram around an inner packet of `inner_len` bytes, with `frames_len`
    /// bytes of piggybacked frames (a DataWithFrames datagram if not zero).
    pub const fn data(frames_len: usize, inner_len: usize) -> Self {
        Self {
            meta_len: DATA_META_LEN,
            frames_len,
            payload_len: inner_len,
        }
    }

    /// A Control datagram holding `frames_len` bytes of frames.
    pub const fn control(frames_len: usize) -> Self {
        Self {
            meta_len: CONTROL_META_LEN,
            frames_len: 0,
            payload_len: frames_len,
        }
    }

    /// A Parity datagram around `payload_len` bytes of parity.
    pub const fn parity(payload_len: usize) -> Self {
        Self {
            meta_len: PARITY_META_LEN,
            frames_len: 0,
            payload_len,
        }
    }

    /// The packet type of a data datagram with this layout.
    pub const fn data_type(&self) -> PacketType {
        if self.frames_len > 0 {
            PacketType::DataWithFrames
        } else {
            PacketType::Data
        }
    }

    pub const fn header(&self) -> Range<usize> {
        0..TRANSPORT_HEADER_LEN
    }

    pub const fn meta(&self) -> Range<usize> {
        let start = self.header().end;
        start..start + self.meta_len
    }

    /// The piggybacked frames' length field; empty without frames.
    pub const fn frames_len_field(&self) -> Range<usize> {
        let start = self.meta().end;
        let len = if self.frames_len > 0 {
            PIGGYBACK_LEN_FIELD
        } else {
            0
        };
        start..start + len
    }

    pub const fn frames(&self) -> Range<usize> {
        let start = self.frames_len_field().end;
        start..start + self.frames_len
    }

    pub const fn payload(&self) -> Range<usize> {
        let start = self.frames().end;
        start..start + self.payload_len
    }

    /// What the AEAD seals: metadata, frames and payload.
    pub const fn sealed(&self) -> Range<usize> {
        self.meta().start..self.payload().end
    }

    pub const fn tag(&self) -> Range<usize> {
        let start = self.payload().end;
        start..start + TAG_LEN
    }

    /// The whole datagram's length.
    pub const fn datagram_len(&self) -> usize {
        self.tag().end
    }

    /// The piggybacked frames' length as its field carries it.
    pub fn frames_len_bytes(&self) -> [u8; PIGGYBACK_LEN_FIELD] {
        (self.frames_len.min(usize::from(u16::MAX)) as u16).to_be_bytes()
    }
}

/// Splits a DataWithFrames plaintext after its [`DataMeta`] into the frames and
/// the inner packet.
pub fn split_piggybacked(after_meta: &[u8]) -> Result<(&[u8], &[u8]), WireError> {
    let Some((&frames_len, rest)) = after_meta.split_first_chunk::<PIGGYBACK_LEN_FIELD>() else {
        return Err(WireError::Truncated {
            needed: PIGGYBACK_LEN_FIELD,
            got: after_meta.len(),
        });
    };
    let frames_len = usize::from(u16::from_be_bytes(frames_len));
    if rest.len() < frames_len {
        return Err(WireError::Truncated {
            needed: frames_len,
            got: rest.len(),
        });
    }
    Ok(rest.split_at(frames_len))
}

/// Checks a fixed-size handshake message's length, type, version and reserved byte.
fn check_handshake(
    datagram: &[u8],
    expected_len: usize,
    expected_type: PacketType,
    expected_name: &'static str,
) -> Result<(), WireError> {
    check_handshake_len_and_type(datagram, expected_len, expected_type, expected_name)?;
    check_common(datagram, HANDSHAKE_VERSION)
}

/// Checks an init's or response's length, type, version, AEAD and path id.
fn check_handshake_with_aead(
    datagram: &[u8],
    expected_len: usize,
    expected_type: PacketType,
    expected_name: &'static str,
) -> Result<Aead, WireError> {
    check_handshake_len_and_type(datagram, expected_len, expected_type, expected_name)?;
    let [_, path_id, version, aead] = common(datagram)?;
    check_version(version, HANDSHAKE_VERSION)?;
    let aead = Aead::try_from(aead)?;
    check_path_id(path_id)?;
    Ok(aead)
}

fn check_handshake_len_and_type(
    datagram: &[u8],
    expected_len: usize,
    expected_type: PacketType,
    expected_name: &'static str,
) -> Result<(), WireError> {
    let packet_type = packet_type(datagram)?;
    if packet_type != expected_type {
        return Err(WireError::UnexpectedType {
            expected: expected_name,
            got: packet_type,
        });
    }
    if datagram.len() != expected_len {
        return Err(WireError::WrongLength {
            expected: expected_len,
            got: datagram.len(),
        });
    }
    Ok(())
}

/// A checked view of a HandshakeInit datagram (exactly 148 bytes).
#[derive(Debug, Clone, Copy)]
pub struct HandshakeInit<'a> {
    bytes: &'a [u8; HANDSHAKE_INIT_LEN],
    aead: Aead,
}

impl<'a> HandshakeInit<'a> {
    /// Checks length (exactly [`HANDSHAKE_INIT_LEN`]), type, version, AEAD and
    /// path id. Says nothing about authenticity: check mac1 next.
    pub fn new_checked(datagram: &'a [u8]) -> Result<Self, WireError> {
        let aead = check_handshake_with_aead(
            datagram,
            HANDSHAKE_INIT_LEN,
            PacketType::HandshakeInit,
            "HandshakeInit",
        )?;
        let bytes = datagram.try_into().map_err(|_| WireError::WrongLength {
            expected: HANDSHAKE_INIT_LEN,
            got: datagram.len(),
        })?;
        Ok(HandshakeInit { bytes, aead })
    }

    /// The transport AEAD the client asks for.
    pub fn aead(&self) -> Aead {
        self.aead
    }

    /// Path id the client sent this init on.
    pub fn path_id(&self) -> u8 {
        self.bytes[field::PATH_ID]
    }

    /// The client's session id.
    pub fn sender(&self) -> SessionId {
        SessionId(read_u32(self.bytes, field::INIT_SENDER))
    }

    /// Noise IK message 1.
    pub fn noise_message(&self) -> &'a [u8] {
        &self.bytes[field::INIT_NOISE]
    }

    /// The clear header bytes that the Noise prologue binds.
    pub fn prologue_bytes(&self) -> &'a [u8] {
        &self.bytes[field::INIT_PROLOGUE]
    }

    /// The bytes mac1 is computed over.
    pub fn mac1_input(&self) -> &'a [u8] {
        &self.bytes[field::INIT_MAC1_INPUT]
    }

    /// The mac1 field.
    pub fn mac1(&self) -> &'a [u8] {
        &self.bytes[field::INIT_MAC1]
    }

    /// The bytes mac2 is computed over.
    pub fn mac2_input(&self) -> &'a [u8] {
        &self.bytes[field::INIT_MAC2_INPUT]
    }

    /// The mac2 field (zero when the client has no cookie).
    pub fn mac2(&self) -> &'a [u8] {
        &self.bytes[field::INIT_MAC2]
    }

    /// Writes the common bytes and the sender id of an init; the Noise message
    /// and mac1 are written by the handshake.
    pub fn emit_header(
        out: &mut [u8; HANDSHAKE_INIT_LEN],
        path_id: u8,
        aead: Aead,
        sender: SessionId,
    ) {
        emit_common_with(
            out,
            PacketType::HandshakeInit,
            path_id,
            HANDSHAKE_VERSION,
            aead as u8,
        );
        out[field::INIT_SENDER].copy_from_slice(&sender.0.to_be_bytes());
    }
}

/// A checked view of a HandshakeResponse datagram (exactly 60 bytes).
#[derive(Debug, Clone, Copy)]
pub struct HandshakeResponse<'a> {
    bytes: &'a [u8; HANDSHAKE_RESPONSE_LEN],
    aead: Aead,
}

impl<'a> HandshakeResponse<'a> {
    /// Checks length (exactly [`HANDSHAKE_RESPONSE_LEN`]), type, version, AEAD
    /// and path id.
    pub fn new_checked(datagram: &'a [u8]) -> Result<Self, WireError> {
        let aead = check_handshake_with_aead(
            datagram,
            HANDSHAKE_RESPONSE_LEN,
            PacketType::HandshakeResponse,
            "HandshakeResponse",
        )?;
        let bytes = datagram.try_into().map_err(|_| WireError::WrongLength {
            expected: HANDSHAKE_RESPONSE_LEN,
            got: datagram.len(),
        })?;
        Ok(HandshakeResponse { bytes, aead })
    }

    /// The transport AEAD, echoed from the init.
    pub fn aead(&self) -> Aead {
        self.aead
    }

    /// Path id, echoed from the init this responds to.
    pub fn path_id(&self) -> u8 {
        self.bytes[field::PATH_ID]
    }

    /// The client's session id (the receiver of this message).
    pub fn receiver(&self) -> SessionId {
        SessionId(read_u32(self.bytes, field::RESPONSE_RECEIVER))
    }

    /// Noise IK message 2.
    pub fn noise_message(&self) -> &'a [u8] {
        &self.bytes[field::RESPONSE_NOISE]
    }

    /// Writes the common bytes and the receiver's session id of a response; the
    /// Noise message, which carries the server's session id, is written by the
    /// handshake.
    pub fn emit_header(
        out: &mut [u8; HANDSHAKE_RESPONSE_LEN],
        path_id: u8,
        aead: Aead,
        receiver: SessionId,
    ) {
        emit_common_with(
            out,
            PacketType::HandshakeResponse,
            path_id,
            HANDSHAKE_VERSION,
            aead as u8,
        );
        out[field::RESPONSE_RECEIVER].copy_from_slice(&receiver.0.to_be_bytes());
    }
}

/// A checked view of a CookieReply datagram (exactly [`COOKIE_REPLY_LEN`] bytes).
#[derive(Debug, Clone, Copy)]
pub struct CookieReply<'a> {
    /// A fixed-size array: every field below is a constant range inside it.
    bytes: &'a [u8; COOKIE_REPLY_LEN],
}

impl<'a> CookieReply<'a> {
    /// Checks length, type, version, reserved byte and path id. Says nothing about
    /// authenticity: the sealed cookie must open under the init's mac1.
    pub fn new_checked(datagram: &'a [u8]) -> Result<Self, WireError> {
        check_handshake(
            datagram,
            COOKIE_REPLY_LEN,
            PacketType::CookieReply,
            "CookieReply",
        )?;
        let bytes = datagram.try_into().map_err(|_| WireError::WrongLength {
            expected: COOKIE_REPLY_LEN,
            got: datagram.len(),
        })?;
        Ok(CookieReply { bytes })
    }

    /// Path id, echoed from the init this answers.
    pub fn path_id(&self) -> u8 {
        self.bytes[field::PATH_ID]
    }

    /// The client's session id from the init this answers.
    pub fn receiver(&self) -> SessionId {
        SessionId(read_u32(self.bytes, field::COOKIE_RECEIVER))
    }

    /// The AEAD nonce.
    pub fn nonce(&self) -> [u8; 12] {
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&self.bytes[field::COOKIE_NONCE]);
        nonce
    }

    /// The sealed cookie with its tag.
    pub fn sealed(&self) -> [u8; 32] {
        let mut sealed = [0u8; 32];
        sealed.copy_from_slice(&self.bytes[field::COOKIE_SEALED]);
        sealed
    }

    /// Writes a whole CookieReply.
    pub fn emit(
        out: &mut [u8; COOKIE_REPLY_LEN],
        path_id: u8,
        receiver: SessionId,
        nonce: &[u8; 12],
        sealed: &[u8; 32],
    ) {
        emit_common(out, PacketType::CookieReply, path_id, HANDSHAKE_VERSION);
        out[field::COOKIE_RECEIVER].copy_from_slice(&receiver.0.to_be_bytes());
        out[field::COOKIE_NONCE].copy_from_slice(nonce);
        out[field::COOKIE_SEALED].copy_from_slice(sealed);
    }
}

const _: () = assert!(field::COOKIE_SEALED.end == COOKIE_REPLY_LEN);
const _: () = assert!(COOKIE_REPLY_LEN <= HANDSHAKE_INIT_LEN);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DATA_HEADER: [u8; 16] = [
        0x03, 0x07, 0x00, 0x00, // type Data, path 7, version 0, reserved
        0xde, 0xad, 0xbe, 0xef, // receiver session id
        0x00, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, // counter
    ];

    #[test]
    fn overhead_constants() {
        assert_eq!(DATA_OVERHEAD, 44);
        assert_eq!(MIN_TRANSPORT_LEN, 32);
        assert_eq!(field::INIT_MAC2.end, HANDSHAKE_INIT_LEN);
        assert_eq!(field::INIT_MAC1.end, field::INIT_MAC2.start);
        assert_eq!(field::RESPONSE_NOISE.end, HANDSHAKE_RESPONSE_LEN);
    }

    #[test]
    fn packet_type_dispatch() {
        assert_eq!(packet_type(&[1, 0, 1, 0]), Ok(PacketType::HandshakeInit));
        assert_eq!(
            packet_type(&[2, 0, 1, 0]),
            Ok(PacketType::HandshakeResponse)
        );
        assert_eq!(packet_type(&DATA_HEADER), Ok(PacketType::Data));
        assert_eq!(packet_type(&[4, 0, 0, 0, 9]), Ok(PacketType::Control));
        assert_eq!(packet_type(&[5, 0, 0, 0]), Ok(PacketType::DataWithFrames));
        assert_eq!(packet_type(&[6, 0, 2, 0]), Ok(PacketType::CookieReply));
        assert_eq!(packet_type(&[7, 0, 0, 0]), Ok(PacketType::Parity));
        assert_eq!(packet_type(&[8, 0, 0, 0]), Err(WireError::UnknownType(8)));
        assert_eq!(packet_type(&[0, 0, 0, 0]), Err(WireError::UnknownType(0)));
        assert_eq!(
            packet_type(&[3, 0, 0]),
            Err(WireError::Truncated { needed: 4, got: 3 })
        );
        assert_eq!(
            packet_type(&[]),
            Err(WireError::Truncated { needed: 4, got: 0 })
        );
    }

    #[test]
    fn transport_header_emit_exact_bytes() {
        let header = TransportHeader {
            packet_type: PacketType::Data,
            path_id: 7,
            receiver: SessionId(0xdead_beef),
            counter: 0x0001_0203_0405,
        };
        let mut out = [0xffu8; 16];
        header.emit(&mut out);
        assert_eq!(out, DATA_HEADER);
    }

    #[test]
    fn transport_header_parse_exact_bytes() {
        let header = TransportHeader::parse(&DATA_HEADER).unwrap();
        assert_eq!(header.packet_type, PacketType::Data);
        assert_eq!(header.path_id, 7);
        assert_eq!(header.receiver, SessionId(0xdead_beef));
        assert_eq!(header.counter, 0x0001_0203_0405);

        let control = [
            0x04, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0xaa, 0xbb, // trailing ciphertext is ignored
        ];
        let header = TransportHeader::parse(&control).unwrap();
        assert_eq!(header.packet_type, PacketType::Control);
        assert_eq!(header.path_id, MAX_PATH_ID);
        assert_eq!(header.receiver, SessionId(1));
        assert_eq!(header.counter, u64::MAX);
    }

    #[test]
    fn transport_header_rejects() {
        for len in 0..16 {
            assert_eq!(
                TransportHeader::parse(&DATA_HEADER[..len]),
                Err(WireError::Truncated {
                    needed: 16,
                    got: len
                })
            );
        }
        let mut bad = DATA_HEADER;
        bad[0] = 0x01;
        assert_eq!(
            TransportHeader::parse(&bad),
            Err(WireError::UnexpectedType {
                expected: "Data or Control",
                got: PacketType::HandshakeInit
            })
        );
        bad[0] = 0x09;
        assert_eq!(TransportHeader::parse(&bad), Err(WireError::UnknownType(9)));
        let mut bad = DATA_HEADER;
        bad[2] = 1;
        assert_eq!(
            TransportHeader::parse(&bad),
            Err(WireError::BadVersion {
                expected: 0,
                got: 1
            })
        );
        let mut bad = DATA_HEADER;
        bad[3] = 0x80;
        assert_eq!(
            TransportHeader::parse(&bad),
            Err(WireError::BadReserved(0x80))
        );
        for path_id in [64, 200, 255] {
            let mut bad = DATA_HEADER;
            bad[1] = path_id;
            assert_eq!(
                TransportHeader::parse(&bad),
                Err(WireError::PathIdOutOfRange(path_id))
            );
        }
    }

    #[test]
    fn data_meta_exact_bytes() {
        let bytes = [
            0x00, 0x00, 0x00, 0x2a, // path pn 42
            0x00, 0x0f, 0x42, 0x40, // tx time 1_000_000 us
            0xff, 0xff, 0xff, 0xfe, // seq
            0x45, // start of the inner packet, ignored
        ];
        let meta = DataMeta::parse(&bytes).unwrap();
        assert_eq!(
            meta,
            DataMeta {
                path_pn: 42,
                tx_time_us: 1_000_000,
                seq: 0xffff_fffe
            }
        );
        let mut out = [0u8; DATA_META_LEN];
        meta.emit(&mut out);
        assert_eq!(out[..], bytes[..12]);
        assert_eq!(
            DataMeta::parse(&bytes[..11]),
            Err(WireError::Truncated {
                needed: 12,
                got: 11
            })
        );
    }

    #[test]
    fn parity_meta_exact_bytes() {
        let bytes = [
            0xff, 0xff, 0xff, 0xff, // first member's path pn
            0x80, 0x00, 0x00, 0x03, // members: first, first + 1, first + 31
            0x12, 0x34, 0x56, 0x78, // seq xor
            0x45, // start of the payload, ignored
        ];
        let meta = ParityMeta::parse(&bytes).unwrap();
        assert_eq!(
            meta,
            ParityMeta {
                first_pn: u32::MAX,
                members: 0x8000_0003,
                seq_xor: 0x1234_5678
            }
        );
        let mut out = [0u8; PARITY_META_LEN];
        meta.emit(&mut out);
        assert_eq!(out[..], bytes[..12]);
        assert!(ParityMeta::parse(&bytes[..11]).is_err());
        assert!(PacketType::Parity.is_transport() && !PacketType::Parity.carries_data());
    }

    #[test]
    fn control_meta_exact_bytes() {
        let bytes = [0x01, 0x02, 0x03, 0x04, 0x80, 0x00, 0x00, 0x01];
        let meta = ControlMeta::parse(&bytes).unwrap();
        assert_eq!(
            meta,
            ControlMeta {
                path_pn: 0x0102_0304,
                tx_time_us: 0x8000_0001
            }
        );
        let mut out = [0u8; CONTROL_META_LEN];
        meta.emit(&mut out);
        assert_eq!(out, bytes);
        assert_eq!(
            ControlMeta::parse(&bytes[..7]),
            Err(WireError::Truncated { needed: 8, got: 7 })
        );
    }

    /// Ping 0x11223344, an unknown frame 0x7f with body [9, 9], Pong, Close.
    const FRAMES: [u8; 31] = [
        0x01, 0x00, 0x04, 0x11, 0x22, 0x33, 0x44, // Ping
        0x7f, 0x00, 0x02, 0x09, 0x09, // Unknown
        0x02, 0x00, 0x08, 0x11, 0x22, 0x33, 0x44, 0x00, 0x00, 0x01, 0x00, // Pong
        0x03, 0x00, 0x00, // Close
        0x01, 0x00, 0x05, 0xaa, 0xbb, // truncated Ping (claims 5, has 2)
    ];

    #[test]
    fn frames_parse_exact_bytes() {
        let mut iter = frames(&FRAMES);
        assert_eq!(
            iter.next(),
            Some(Ok(Frame::Ping {
                ping_id: 0x1122_3344
            }))
        );
        assert_eq!(
            iter.next(),
            Some(Ok(Frame::Unknown {
                frame_type: 0x7f,
                body: &[9, 9]
            }))
        );
        assert_eq!(
            iter.next(),
            Some(Ok(Frame::Pong {
                ping_id: 0x1122_3344,
                echoed_tx_time_us: 256
            }))
        );
        assert_eq!(iter.next(), Some(Ok(Frame::Close)));
        assert_eq!(
            iter.next(),
            Some(Err(WireError::FrameTruncated { needed: 5, got: 2 }))
        );
        assert_eq!(iter.next(), None);
        assert_eq!(frames(&[]).count(), 0);
    }

    #[test]
    fn frames_write_exact_bytes() {
        let mut out = [0u8; 26];
        let mut at = 0;
        for frame in [
            Frame::Ping {
                ping_id: 0x1122_3344,
            },
            Frame::Unknown {
                frame_type: 0x7f,
                body: &[9, 9],
            },
            Frame::Pong {
                ping_id: 0x1122_3344,
                echoed_tx_time_us: 256,
            },
            Frame::Close,
        ] {
            at += write_frame(&mut out[at..], &frame).unwrap();
        }
        assert_eq!(at, 26);
        assert_eq!(out[..], FRAMES[..26]);
    }

    /// An Ack for path 2: ack delay 0x100 µs, OWD sample 0x01020304, two ranges
    /// (10..=12 newest, then 5..=7).
    const ACK_FRAME: [u8; 28] = [
        0x04, 0x00, 0x19, // type, body length 25
        0x02, 0x00, 0x00, 0x01, 0x00, 0x01, 0x02, 0x03, 0x04, // path, delay, owd
        0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x0c, // 10..=12
        0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x07, // 5..=7
    ];

    #[test]
    fn ack_frame_exact_bytes() {
        let mut out = [0u8; 64];
        let len = write_ack_frame(
            &mut out,
            2,
            0x100,
            0x0102_0304,
            [(10, 12), (5, 7)].into_iter(),
        )
        .unwrap();
        assert_eq!(out[..len], ACK_FRAME);
        let parsed: Vec<_> = frames(&ACK_FRAME).collect();
        let Ok(Frame::Ack {
            path_id,
            ack_delay_us,
            largest_owd_raw_us,
            ranges,
        }) = parsed[0]
        else {
            panic!("not an ack: {parsed:?}");
        };
        assert_eq!(
            (path_id, ack_delay_us, largest_owd_raw_us),
            (2, 0x100, 0x0102_0304)
        );
        assert_eq!(ranges.iter().collect::<Vec<_>>(), [(10, 12), (5, 7)]);
        // Re-encoding a parsed frame gives the same bytes.
        let mut again = [0u8; 28];
        write_frame(&mut again, &parsed[0].unwrap()).unwrap();
        assert_eq!(again, ACK_FRAME);
    }

    #[test]
    fn ack_frame_writes_what_fits_and_rejects_bad_bodies() {
        let mut small = [0u8; 3 + 9 + 8 + 7];
        let len = write_ack_frame(&mut small, 0, 0, 0, [(3, 4), (1, 1)].into_iter()).unwrap();
        assert_eq!(len, 20, "only the newest range fits");
        assert!(write_ack_frame(&mut small[..19], 0, 0, 0, [(1, 1)].into_iter()).is_err());
        assert!(write_ack_frame(&mut [0u8; 64], 0, 0, 0, std::iter::empty()).is_err());
        // No range, or a range cut short, is malformed.
        let mut no_range = ACK_FRAME[..12].to_vec();
        no_range[2] = 9;
        assert!(frames(&no_range).next().unwrap().is_err());
        let mut cut = ACK_FRAME[..24].to_vec();
        cut[2] = 21;
        assert!(frames(&cut).next().unwrap().is_err());
        let mut far_path = ACK_FRAME;
        far_path[3] = 64;
        assert_eq!(
            frames(&far_path).next(),
            Some(Err(WireError::PathIdOutOfRange(64)))
        );
    }

    #[test]
    fn piggybacked_frames_split_from_the_inner_packet() {
        let plaintext = [0x00, 0x03, 0x03, 0x00, 0x00, 0x45, 0x00];
        let (frames_part, inner) = split_piggybacked(&plaintext).unwrap();
        assert_eq!(frames_part, [0x03, 0x00, 0x00]);
        assert_eq!(inner, [0x45, 0x00]);
        assert!(split_piggybacked(&[0x00]).is_err());
        assert!(split_piggybacked(&[0x00, 0x05, 0x03]).is_err());
        assert_eq!(PacketType::try_from(0x05), Ok(PacketType::DataWithFrames));
        assert!(
            PacketType::DataWithFrames.carries_data() && PacketType::DataWithFrames.is_transport()
        );
    }

    #[test]
    fn frames_longer_bodies_are_forward_compatible() {
        // A Ping with 2 extra bytes and a Close with 1: the extras are skipped.
        let bytes = [1, 0, 6, 0, 0, 0, 5, 0xee, 0xee, 3, 0, 1, 0xee];
        let parsed: Vec<_> = frames(&bytes).collect();
        assert_eq!(
            parsed,
            vec![Ok(Frame::Ping { ping_id: 5 }), Ok(Frame::Close)]
        );
    }

    #[test]
    fn path_frames_parse_and_write_exact_bytes() {
        let bytes = [
            6, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8, // PathChallenge
            7, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0xee, // PathResponse, one extra byte
        ];
        let parsed: Vec<_> = frames(&bytes).collect();
        assert_eq!(
            parsed,
            vec![
                Ok(Frame::PathChallenge {
                    token: [1, 2, 3, 4, 5, 6, 7, 8]
                }),
                Ok(Frame::PathResponse {
                    token: [8, 7, 6, 5, 4, 3, 2, 1]
                }),
            ]
        );
        let mut out = [0u8; 11];
        let frame = Frame::PathChallenge {
            token: [1, 2, 3, 4, 5, 6, 7, 8],
        };
        assert_eq!(write_frame(&mut out, &frame), Ok(11));
        assert_eq!(out, bytes[..11]);
        // A token shorter than 8 bytes is refused, not padded.
        assert_eq!(
            frames(&[7, 0, 7, 1, 2, 3, 4, 5, 6, 7]).next(),
            Some(Err(WireError::FrameBodyTooShort {
                frame_type: 7,
                needed: 8,
                got: 7
            }))
        );
    }

    #[test]
    fn frames_reject_short_bodies_and_headers() {
        let short_pong = [2, 0, 4, 0, 0, 0, 1];
        assert_eq!(
            frames(&short_pong).next(),
            Some(Err(WireError::FrameBodyTooShort {
                frame_type: 2,
                needed: 8,
                got: 4
            }))
        );
        let short_ping = [1, 0, 0];
        assert_eq!(
            frames(&short_ping).next(),
            Some(Err(WireError::FrameBodyTooShort {
                frame_type: 1,
                needed: 4,
                got: 0
            }))
        );
        assert_eq!(
            frames(&[3, 0]).collect::<Vec<_>>(),
            vec![Err(WireError::FrameTruncated { needed: 3, got: 2 })]
        );
        // An error stops the iteration even if bytes follow.
        let bad_then_good = [2, 0, 0, 3, 0, 0];
        assert_eq!(frames(&bad_then_good).count(), 1);
    }

    #[test]
    fn gave_up_frame_against_literal_bytes() {
        // Sequence numbers 0xFFFF_FFFE, 0xFFFF_FFFF, 0 and 1 given up (wrapping).
        const GAVE_UP: [u8; 9] = [0x05, 0x00, 0x06, 0xFF, 0xFF, 0xFF, 0xFE, 0x00, 0x04];
        let frame = Frame::GaveUp {
            first_seq: 0xFFFF_FFFE,
            count: 4,
        };
        let mut out = [0u8; 9];
        assert_eq!(write_frame(&mut out, &frame), Ok(9));
        assert_eq!(out, GAVE_UP);
        let parsed: Vec<_> = frames(&GAVE_UP).collect();
        assert_eq!(parsed, [Ok(frame)]);
        assert!(matches!(
            frames(&[0x05, 0x00, 0x05, 0, 0, 0, 1, 0]).next(),
            Some(Err(WireError::FrameBodyTooShort {
                frame_type: 0x05,
                needed: 6,
                got: 5
            }))
        ));
    }

    #[test]
    fn write_frame_checks_room_and_length() {
        let mut out = [0u8; 6];
        assert_eq!(
            write_frame(&mut out, &Frame::Ping { ping_id: 1 }),
            Err(WireError::BufferTooSmall { needed: 7, got: 6 })
        );
        assert_eq!(write_frame(&mut out, &Frame::Close), Ok(3));
        let big = [0u8; 65_536];
        let mut big_out = vec![0u8; 70_000];
        assert_eq!(
            write_frame(
                &mut big_out,
                &Frame::Unknown {
                    frame_type: 9,
                    body: &big
                }
            ),
            Err(WireError::FrameTooLong(65_536))
        );
        assert_eq!(
            write_frame(
                &mut big_out,
                &Frame::Unknown {
                    frame_type: 9,
                    body: &big[..65_535]
                }
            ),
            Ok(65_538)
        );
    }

    fn init_bytes() -> [u8; HANDSHAKE_INIT_LEN] {
        let mut bytes = [0u8; HANDSHAKE_INIT_LEN];
        bytes[..8].copy_from_slice(&[0x01, 0x02, 0x02, 0x00, 0x0a, 0x0b, 0x0c, 0x0d]);
        for (i, byte) in bytes[8..].iter_mut().enumerate() {
            *byte = i as u8;
        }
        bytes
    }

    #[test]
    fn handshake_init_view() {
        let bytes = init_bytes();
        let view = HandshakeInit::new_checked(&bytes).unwrap();
        assert_eq!(view.path_id(), 2);
        assert_eq!(view.sender(), SessionId(0x0a0b_0c0d));
        assert_eq!(view.noise_message().len(), 108);
        assert_eq!(view.noise_message()[0], 0);
        assert_eq!(view.prologue_bytes(), &bytes[..8]);
        assert_eq!(view.mac1_input(), &bytes[..116]);
        assert_eq!(view.mac1()[0], 108);
        assert_eq!(view.mac1().len(), 16);

        assert_eq!(view.aead(), Aead::ChaCha20Poly1305);

        let mut out = [0u8; HANDSHAKE_INIT_LEN];
        HandshakeInit::emit_header(&mut out, 2, Aead::ChaCha20Poly1305, SessionId(0x0a0b_0c0d));
        assert_eq!(out[..8], bytes[..8]);

        let mut aes = bytes;
        aes[3] = 1;
        assert_eq!(
            HandshakeInit::new_checked(&aes).unwrap().aead(),
            Aead::Aes256Gcm
        );
        HandshakeInit::emit_header(&mut out, 2, Aead::Aes256Gcm, SessionId(0x0a0b_0c0d));
        assert_eq!(out[..8], aes[..8]);
    }

    #[test]
    fn handshake_init_rejects() {
        let bytes = init_bytes();
        assert_eq!(
            HandshakeInit::new_checked(&bytes[..147]).unwrap_err(),
            WireError::WrongLength {
                expected: 148,
                got: 147
            }
        );
        let mut long = [0u8; 149];
        long[..148].copy_from_slice(&bytes);
        assert!(HandshakeInit::new_checked(&long).is_err());
        let mut bad = bytes;
        bad[0] = 2;
        assert!(matches!(
            HandshakeInit::new_checked(&bad),
            Err(WireError::UnexpectedType { .. })
        ));
        let mut bad = bytes;
        bad[2] = 0;
        assert_eq!(
            HandshakeInit::new_checked(&bad).unwrap_err(),
            WireError::BadVersion {
                expected: 2,
                got: 0
            }
        );
        for unknown in [2, 0x80, 0xff] {
            let mut bad = bytes;
            bad[3] = unknown;
            assert_eq!(
                HandshakeInit::new_checked(&bad).unwrap_err(),
                WireError::UnknownAead(unknown)
            );
        }
        assert!(HandshakeInit::new_checked(&bytes[..2]).is_err());
        for path_id in [64, 200, 255] {
            let mut bad = bytes;
            bad[1] = path_id;
            assert_eq!(
                HandshakeInit::new_checked(&bad).unwrap_err(),
                WireError::PathIdOutOfRange(path_id)
            );
        }
    }

    #[test]
    fn handshake_response_view() {
        let mut bytes = [0u8; HANDSHAKE_RESPONSE_LEN];
        bytes[..8].copy_from_slice(&[
            0x02, 0x05, 0x02, 0x00, // common
            0x0a, 0x0b, 0x0c, 0x0d, // receiver (client)
        ]);
        bytes[8] = 0x77;
        let view = HandshakeResponse::new_checked(&bytes).unwrap();
        assert_eq!(view.path_id(), 5);
        assert_eq!(view.receiver(), SessionId(0x0a0b_0c0d));
        assert_eq!(view.noise_message().len(), 52);
        assert_eq!(view.noise_message()[0], 0x77);

        let mut out = [0u8; HANDSHAKE_RESPONSE_LEN];
        HandshakeResponse::emit_header(&mut out, 5, Aead::ChaCha20Poly1305, SessionId(0x0a0b_0c0d));
        assert_eq!(out[..8], bytes[..8]);

        assert!(HandshakeResponse::new_checked(&bytes[..59]).is_err());
        assert_eq!(view.aead(), Aead::ChaCha20Poly1305);
        let mut aes = bytes;
        aes[3] = 1;
        assert_eq!(
            HandshakeResponse::new_checked(&aes).unwrap().aead(),
            Aead::Aes256Gcm
        );
        let mut bad = bytes;
        bad[3] = 2;
        assert_eq!(
            HandshakeResponse::new_checked(&bad).unwrap_err(),
            WireError::UnknownAead(2)
        );
        bad = bytes;
        bad[0] = 3;
        assert!(HandshakeResponse::new_checked(&bad).is_err());
    }

    const COOKIE_REPLY: [u8; COOKIE_REPLY_LEN] = [
        0x06, 0x03, 0x02, 0x00, // type CookieReply, path 3, version 2, reserved
        0x0a, 0x0b, 0x0c, 0x0d, // receiver (the client's id from the init)
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, // nonce
        20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, // sealed cookie
        36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, // tag
    ];

    #[test]
    fn cookie_reply_view_and_emit_exact_bytes() {
        let view = CookieReply::new_checked(&COOKIE_REPLY).unwrap();
        assert_eq!(view.path_id(), 3);
        assert_eq!(view.receiver(), SessionId(0x0a0b_0c0d));
        assert_eq!(view.nonce(), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(view.sealed()[0], 20);
        assert_eq!(view.sealed()[31], 51);
        let mut out = [0u8; COOKIE_REPLY_LEN];
        CookieReply::emit(
            &mut out,
            3,
            SessionId(0x0a0b_0c0d),
            &view.nonce(),
            &view.sealed(),
        );
        assert_eq!(out, COOKIE_REPLY);
    }

    #[test]
    fn cookie_reply_rejects() {
        for len in [0, 3, 51, 53] {
            let mut bytes = vec![0u8; len];
            bytes[..len.min(52)].copy_from_slice(&COOKIE_REPLY[..len.min(52)]);
            assert!(CookieReply::new_checked(&bytes).is_err(), "length {len}");
        }
        let mut bad = COOKIE_REPLY;
        bad[2] = 1;
        assert_eq!(
            CookieReply::new_checked(&bad).unwrap_err(),
            WireError::BadVersion {
                expected: 2,
                got: 1
            }
        );
        let mut bad = COOKIE_REPLY;
        bad[3] = 1;
        assert_eq!(
            CookieReply::new_checked(&bad).unwrap_err(),
            WireError::BadReserved(1)
        );
        let mut bad = COOKIE_REPLY;
        bad[1] = 64;
        assert_eq!(
            CookieReply::new_checked(&bad).unwrap_err(),
            WireError::PathIdOutOfRange(64)
        );
        let mut bad = COOKIE_REPLY;
        bad[0] = 2;
        assert!(CookieReply::new_checked(&bad).is_err());
    }

    proptest! {
        /// Any 52 bytes with a valid header parse, and nothing else does.
        #[test]
        fn cookie_reply_parses_only_well_formed(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let well_formed = bytes.len() == COOKIE_REPLY_LEN
                && bytes[0] == 0x06
                && bytes[1] <= MAX_PATH_ID
                && bytes[2] == HANDSHAKE_VERSION
                && bytes[3] == 0;
            prop_assert_eq!(CookieReply::new_checked(&bytes).is_ok(), well_formed);
        }

        #[test]
        fn cookie_reply_round_trip(path_id in 0..=MAX_PATH_ID, receiver in any::<u32>(),
                                   nonce in any::<[u8; 12]>(), sealed in any::<[u8; 32]>()) {
            let mut out = [0u8; COOKIE_REPLY_LEN];
            CookieReply::emit(&mut out, path_id, SessionId(receiver), &nonce, &sealed);
            let view = CookieReply::new_checked(&out).unwrap();
            prop_assert_eq!(view.path_id(), path_id);
            prop_assert_eq!(view.receiver(), SessionId(receiver));
            prop_assert_eq!(view.nonce(), nonce);
            prop_assert_eq!(view.sealed(), sealed);
        }
    }

    proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = packet_type(&bytes);
            let _ = TransportHeader::parse(&bytes);
            let _ = DataMeta::parse(&bytes);
            let _ = ControlMeta::parse(&bytes);
            let _ = ParityMeta::parse(&bytes);
            let _ = HandshakeInit::new_checked(&bytes);
            let _ = HandshakeResponse::new_checked(&bytes);
            if let Ok(reply) = CookieReply::new_checked(&bytes) {
                let _ = (reply.path_id(), reply.receiver(), reply.nonce(), reply.sealed());
            }
            for frame in frames(&bytes) {
                let _ = frame;
            }
        }

        #[test]
        fn frames_round_trip(ping_id in any::<u32>(), echo in any::<u32>(),
                             unknown_type in 8u8.., body in proptest::collection::vec(any::<u8>(), 0..40),
                             count in any::<u16>(), challenge in any::<[u8; 8]>(),
                             response in any::<[u8; 8]>()) {
            let written = [
                Frame::Ping { ping_id },
                Frame::PathChallenge { token: challenge },
                Frame::GaveUp { first_seq: echo, count },
                Frame::Pong { ping_id, echoed_tx_time_us: echo },
                Frame::Unknown { frame_type: unknown_type, body: &body },
                Frame::PathResponse { token: response },
                Frame::Close,
            ];
            let mut out = [0u8; 128];
            let mut at = 0;
            for frame in &written {
                at += write_frame(&mut out[at..], frame).unwrap();
            }
            let parsed: Vec<_> = frames(&out[..at]).map(Result::unwrap).collect();
            prop_assert_eq!(&parsed[..], &written[..]);
        }

        #[test]
        fn transport_header_round_trip(control in any::<bool>(), path_id in 0..=MAX_PATH_ID,
                                       receiver in any::<u32>(), counter in any::<u64>()) {
            let header = TransportHeader {
                packet_type: if control { PacketType::Control } else { PacketType::Data },
                path_id,
                receiver: SessionId(receiver),
                counter,
            };
            let mut out = [0u8; TRANSPORT_HEADER_LEN];
            header.emit(&mut out);
            prop_assert_eq!(TransportHeader::parse(&out), Ok(header));
        }
    }
}
