//! Transport datagrams as a configured peer gone rogue builds them: every frame type
//! as a structured frame (Ping, Pong, Close, Ack, GaveUp, PathChallenge, PathResponse)
//! or as raw bytes, floods of one frame, Data, Control, DataWithFrames and Parity
//! bodies, all sealed with a session's real keys; and what the core sends back to
//! that peer, opened with the same session's keys.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::ops::Range;

use arbitrary::Arbitrary;
use mptund::crypto::{OpeningKey, SealingKey, SessionKeys};
use mptund::wire::{
    self, DataMeta, Frame, PacketType, ParityMeta, TransportHeader, CONTROL_META_LEN,
    DATA_META_LEN, PARITY_META_LEN, PARITY_SPAN, PATH_TOKEN_LEN, TAG_LEN, TRANSPORT_HEADER_LEN,
};

use crate::{AddressChoice, InnerSpec, MTU};

/// Frames the core reads from one datagram: `MAX_FRAMES_PER_DATAGRAM` in
/// crates/mptund/src/session/receive.rs (not public); a frame past it is dropped
/// unread, so counting further ones would only loosen the checks.
pub const FRAMES_READ_PER_DATAGRAM: usize = 192;

/// Challenge tokens from the core a rogue remembers, to echo them.
const TOKENS_KEPT: usize = 8;
/// Data packets a rogue remembers for its parity: the core's decoder keeps two
/// blocks' span (`fec::RING`).
const HISTORY_KEPT: usize = 2 * PARITY_SPAN as usize;

type Token = [u8; PATH_TOKEN_LEN];

/// The token of a PathResponse.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum TokenChoice {
    /// One of the challenges the core sent this sender, newest first (zeros while
    /// there is none): answering it validates the address the challenge went to.
    Echo(u8),
    Raw(Token),
}

/// A control frame, well-formed or not.
#[derive(Arbitrary, Debug, Clone)]
pub enum FrameSpec {
    Ping {
        ping_id: u32,
    },
    Pong {
        ping_id: u32,
        echoed_tx_time_us: u32,
    },
    Close,
    Ack {
        path_id: u8,
        ack_delay_us: u32,
        largest_owd_raw_us: u32,
        ranges: Vec<(u32, u32)>,
    },
    GaveUp {
        first_seq: u32,
        count: u16,
    },
    PathChallenge {
        token: Token,
    },
    PathResponse {
        token: TokenChoice,
    },
    /// The frame written before this one, `times` more times: a datagram full of
    /// challenges, GaveUp runs or Acks for one path, as a flood builds it.
    Repeat {
        times: u8,
    },
    /// Any type, any body length claim, any body.
    Raw {
        frame_type: u8,
        claimed_len: Option<u16>,
        body: Vec<u8>,
    },
}

/// Writes `frames` one after the other into `out`; `tokens` are the challenges the
/// writer can echo, newest last.
pub fn write_frames(frames: &[FrameSpec], tokens: &VecDeque<Token>, out: &mut Vec<u8>) {
    let mut last: Option<Range<usize>> = None;
    for frame in frames {
        if let FrameSpec::Repeat { times } = frame {
            if let Some(range) = last.clone() {
                for _ in 0..*times {
                    out.extend_from_within(range.clone());
                }
            }
            continue;
        }
        let start = out.len();
        frame.write(tokens, out);
        last = Some(start..out.len());
    }
}

impl FrameSpec {
    fn write(&self, tokens: &VecDeque<Token>, out: &mut Vec<u8>) {
        let mut scratch = [0u8; 2048];
        let written = match self {
            FrameSpec::Ping { ping_id } => {
                wire::write_frame(&mut scratch, &Frame::Ping { ping_id: *ping_id })
            }
            FrameSpec::Pong {
                ping_id,
                echoed_tx_time_us,
            } => wire::write_frame(
                &mut scratch,
                &Frame::Pong {
                    ping_id: *ping_id,
                    echoed_tx_time_us: *echoed_tx_time_us,
                },
            ),
            FrameSpec::Close => wire::write_frame(&mut scratch, &Frame::Close),
            FrameSpec::Ack {
                path_id,
                ack_delay_us,
                largest_owd_raw_us,
                ranges,
            } => {
                let room = (wire::FRAME_HEADER_LEN + wire::ACK_FIXED_LEN + ranges.len() * 8)
                    .min(scratch.len());
                wire::write_ack_frame(
                    &mut scratch[..room],
                    *path_id,
                    *ack_delay_us,
                    *largest_owd_raw_us,
                    ranges.iter().copied(),
                )
            }
            FrameSpec::GaveUp { first_seq, count } => wire::write_frame(
                &mut scratch,
                &Frame::GaveUp {
                    first_seq: *first_seq,
                    count: *count,
                },
            ),
            FrameSpec::PathChallenge { token } => {
                wire::write_frame(&mut scratch, &Frame::PathChallenge { token: *token })
            }
            FrameSpec::PathResponse { token } => {
                let token = match token {
                    TokenChoice::Echo(back) => tokens
                        .len()
                        .checked_sub(1 + usize::from(*back) % tokens.len().max(1))
                        .and_then(|index| tokens.get(index))
                        .copied()
                        .unwrap_or_default(),
                    TokenChoice::Raw(token) => *token,
                };
                wire::write_frame(&mut scratch, &Frame::PathResponse { token })
            }
            FrameSpec::Repeat { .. } => return,
            FrameSpec::Raw {
                frame_type,
                claimed_len,
                body,
            } => {
                out.push(*frame_type);
                let len = claimed_len.unwrap_or(body.len().min(usize::from(u16::MAX)) as u16);
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(body);
                return;
            }
        };
        if let Ok(written) = written {
            out.extend_from_slice(&scratch[..written]);
        }
    }
}

/// A transport plaintext.
#[derive(Arbitrary, Debug, Clone)]
pub enum BodySpec {
    Data {
        path_pn: PnChoice,
        tx_time_us: u32,
        seq: SeqChoice,
        inner: InnerSpec,
    },
    Control {
        path_pn: PnChoice,
        tx_time_us: u32,
        frames: Vec<FrameSpec>,
    },
    DataWithFrames {
        path_pn: PnChoice,
        tx_time_us: u32,
        seq: SeqChoice,
        frames: Vec<FrameSpec>,
        claimed_frames_len: Option<u16>,
        inner: InnerSpec,
    },
    /// A Parity datagram over data packets this sender sent.
    Parity {
        /// The block starts this many packet numbers before the newest one sent.
        first_back: u8,
        /// Bit `i`: packet number `first + i` is a member.
        members: u32,
        payload: ParityPayload,
    },
    Raw(Vec<u8>),
}

/// What a Parity datagram's XOR holds.
#[derive(Arbitrary, Debug, Clone)]
pub enum ParityPayload {
    /// Made so that the one member the sender did not send (or the receiver lost)
    /// rebuilds as `inner` with sequence number `seq`: the XOR of the members the
    /// sender remembers, and of `inner`.
    Rebuild {
        seq: SeqChoice,
        inner: InnerSpec,
    },
    Raw {
        seq_xor: u32,
        bytes: Vec<u8>,
    },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum SeqChoice {
    Next,
    Back(u8),
    /// A gap: skips this many sequence numbers first.
    Skip(u16),
    Raw(u32),
}

/// A path packet number.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum PnChoice {
    /// The sender's next number (one counter for every path: increasing on each).
    Next,
    Raw(u32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum CounterChoice {
    Next,
    Repeat(u8),
    Raw(u64),
}

/// The header of a sealed datagram: type and path id as the attacker wants them.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct HeaderSpec {
    /// 0 keeps the body's own type; anything else is written as is.
    pub packet_type: u8,
    pub path_id: u8,
    pub counter: CounterChoice,
    /// `None` addresses the genuine receiver session.
    pub receiver: Option<u32>,
}

/// A datagram a [`RogueSender`] sealed, with what the checks need to know of it.
#[derive(Debug)]
pub struct Sealed {
    pub bytes: Vec<u8>,
    /// The header's path id.
    pub path_id: u8,
    /// Addressed to the genuine session and carrying a PathChallenge where the core
    /// reads frames: the core may answer it with one PathResponse on that path.
    pub challenges: bool,
}

/// What one datagram the core sent to a [`RogueSender`] carried.
#[derive(Debug, Default)]
pub struct Observed {
    pub path_id: u8,
    pub path_responses: usize,
}

/// A sender holding a session's real keys: a configured peer gone rogue.
pub struct RogueSender {
    key: SealingKey,
    opener: OpeningKey,
    /// The core's session id, the receiver of what the rogue sends.
    pub receiver: u32,
    /// The rogue's own session id, the receiver of what the core sends it.
    pub local: u32,
    next_counter: u64,
    next_seq: u32,
    next_pn: u32,
    /// Challenges the core sent, newest last.
    tokens: VecDeque<Token>,
    /// Data packets sent: path packet number, sequence number, inner packet.
    history: VecDeque<(u32, u32, Vec<u8>)>,
}

impl RogueSender {
    /// `keys` are the rogue's side of the session: `send` seals what it sends.
    pub fn new(keys: SessionKeys, receiver: u32, local: u32) -> Self {
        Self {
            key: keys.send,
            opener: keys.recv,
            receiver,
            local,
            next_counter: 0,
            next_seq: 0,
            next_pn: 0,
            tokens: VecDeque::new(),
            history: VecDeque::new(),
        }
    }

    pub fn seal(&mut self, header: HeaderSpec, body: &BodySpec) -> Sealed {
        let (own_type, plaintext) = self.plaintext(body);
        let counter = match header.counter {
            CounterChoice::Next => {
                self.next_counter += 1;
                self.next_counter
            }
            CounterChoice::Repeat(back) => self.next_counter.saturating_sub(u64::from(back)),
            CounterChoice::Raw(counter) => counter,
        };
        let packet_type = if header.packet_type == 0 {
            own_type
        } else {
            header.packet_type
        };
        let receiver = header.receiver.unwrap_or(self.receiver);
        let mut header_bytes = [0u8; TRANSPORT_HEADER_LEN];
        header_bytes[wire::field::TYPE] = packet_type;
        header_bytes[wire::field::PATH_ID] = header.path_id;
        header_bytes[wire::field::TRANSPORT_RECEIVER].copy_from_slice(&receiver.to_be_bytes());
        header_bytes[wire::field::TRANSPORT_COUNTER].copy_from_slice(&counter.to_be_bytes());
        let challenges = receiver == self.receiver
            && frames_read(packet_type, &plaintext).is_some_and(|mut frames| {
                frames.any(|frame| matches!(frame, Frame::PathChallenge { .. }))
            });
        let mut sealed = header_bytes.to_vec();
        let mut body_bytes = plaintext;
        let tag = self
            .key
            .seal_in_place(&header_bytes, counter, &mut body_bytes);
        sealed.extend_from_slice(&body_bytes);
        sealed.extend_from_slice(&tag);
        Sealed {
            bytes: sealed,
            path_id: header.path_id,
            challenges,
        }
    }

    /// Opens a datagram the core sent, if it is addressed to this rogue's session,
    /// remembers the challenges in it and counts its PathResponse frames.
    pub fn observe(&mut self, datagram: &[u8]) -> Option<Observed> {
        let header = TransportHeader::parse(datagram).ok()?;
        if header.receiver.0 != self.local {
            return None;
        }
        let mut copy = datagram.to_vec();
        let (_, plaintext) = self.opener.open_datagram(&mut copy).ok()?;
        let mut observed = Observed {
            path_id: header.path_id,
            path_responses: 0,
        };
        for frame in frames_read(header.packet_type.into(), plaintext)? {
            match frame {
                Frame::PathChallenge { token } => {
                    if self.tokens.len() == TOKENS_KEPT {
                        self.tokens.pop_front();
                    }
                    self.tokens.push_back(token);
                }
                Frame::PathResponse { .. } => observed.path_responses += 1,
                _ => {}
            }
        }
        Some(observed)
    }

    fn seq(&mut self, choice: SeqChoice) -> u32 {
        match choice {
            SeqChoice::Next => self.take_seq(),
            SeqChoice::Skip(skip) => {
                self.next_seq = self.next_seq.wrapping_add(u32::from(skip));
                self.take_seq()
            }
            SeqChoice::Back(back) => self.next_seq.wrapping_sub(u32::from(back)),
            SeqChoice::Raw(seq) => seq,
        }
    }

    fn take_seq(&mut self) -> u32 {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        seq
    }

    fn pn(&mut self, choice: PnChoice) -> u32 {
        match choice {
            PnChoice::Next => {
                let pn = self.next_pn;
                self.next_pn = self.next_pn.wrapping_add(1);
                pn
            }
            PnChoice::Raw(pn) => pn,
        }
    }

    fn remember(&mut self, pn: u32, seq: u32, inner: &[u8]) {
        if self.history.len() == HISTORY_KEPT {
            self.history.pop_front();
        }
        self.history.push_back((pn, seq, inner.to_vec()));
    }

    fn plaintext(&mut self, body: &BodySpec) -> (u8, Vec<u8>) {
        let mut out = Vec::new();
        match body {
            BodySpec::Data {
                path_pn,
                tx_time_us,
                seq,
                inner,
            } => {
                let (pn, seq) = (self.pn(*path_pn), self.seq(*seq));
                push_data_meta(&mut out, pn, *tx_time_us, seq);
                let inner = inner.build();
                out.extend_from_slice(&inner);
                self.remember(pn, seq, &inner);
                (PacketType::Data.into(), out)
            }
            BodySpec::Control {
                path_pn,
                tx_time_us,
                frames,
            } => {
                out.extend_from_slice(&self.pn(*path_pn).to_be_bytes());
                out.extend_from_slice(&tx_time_us.to_be_bytes());
                write_frames(frames, &self.tokens, &mut out);
                (PacketType::Control.into(), out)
            }
            BodySpec::DataWithFrames {
                path_pn,
                tx_time_us,
                seq,
                frames,
                claimed_frames_len,
                inner,
            } => {
                let (pn, seq) = (self.pn(*path_pn), self.seq(*seq));
                push_data_meta(&mut out, pn, *tx_time_us, seq);
                let mut frame_bytes = Vec::new();
                write_frames(frames, &self.tokens, &mut frame_bytes);
                let len = claimed_frames_len
                    .unwrap_or(frame_bytes.len().min(usize::from(u16::MAX)) as u16);
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&frame_bytes);
                let inner = inner.build();
                out.extend_from_slice(&inner);
                self.remember(pn, seq, &inner);
                (PacketType::DataWithFrames.into(), out)
            }
            BodySpec::Parity {
                first_back,
                members,
                payload,
            } => {
                self.parity(*first_back, *members, payload, &mut out);
                (PacketType::Parity.into(), out)
            }
            BodySpec::Raw(bytes) => (PacketType::Control.into(), bytes.clone()),
        }
    }

    fn parity(&mut self, first_back: u8, members: u32, payload: &ParityPayload, out: &mut Vec<u8>) {
        let newest = self.history.back().map_or(0, |(pn, _, _)| *pn);
        let first_pn = newest.wrapping_sub(u32::from(first_back));
        let (seq_xor, xor) = match payload {
            ParityPayload::Raw { seq_xor, bytes } => (*seq_xor, bytes.clone()),
            ParityPayload::Rebuild { seq, inner } => {
                let mut seq_xor = self.seq(*seq);
                let mut xor = inner.build();
                for bit in 0..PARITY_SPAN {
                    if members & (1 << bit) == 0 {
                        continue;
                    }
                    let pn = first_pn.wrapping_add(bit);
                    if let Some((_, member_seq, bytes)) =
                        self.history.iter().rev().find(|(sent, _, _)| *sent == pn)
                    {
                        seq_xor ^= member_seq;
                        if xor.len() < bytes.len() {
                            xor.resize(bytes.len(), 0);
                        }
                        for (into, byte) in xor.iter_mut().zip(bytes) {
                            *into ^= byte;
                        }
                    }
                }
                xor.truncate(MTU + 1);
                (seq_xor, xor)
            }
        };
        let meta = ParityMeta {
            first_pn,
            members,
            seq_xor,
        };
        let mut meta_bytes = [0u8; PARITY_META_LEN];
        meta.emit(&mut meta_bytes);
        out.extend_from_slice(&meta_bytes);
        out.extend_from_slice(&xor);
    }
}

/// The frames the core reads from a plaintext of `packet_type` (Control, or
/// DataWithFrames in front of the inner packet), as far as it reads them.
pub fn frames_read(
    packet_type: u8,
    plaintext: &[u8],
) -> Option<impl Iterator<Item = Frame<'_>> + '_> {
    let section = match PacketType::try_from(packet_type).ok()? {
        PacketType::Control => plaintext.get(CONTROL_META_LEN..)?,
        PacketType::DataWithFrames => {
            DataMeta::parse(plaintext).ok()?;
            wire::split_piggybacked(plaintext.get(DATA_META_LEN..)?)
                .ok()?
                .0
        }
        _ => return None,
    };
    Some(
        wire::frames(section)
            .take(FRAMES_READ_PER_DATAGRAM)
            .map_while(Result::ok),
    )
}

fn push_data_meta(out: &mut Vec<u8>, path_pn: u32, tx_time_us: u32, seq: u32) {
    out.extend_from_slice(&path_pn.to_be_bytes());
    out.extend_from_slice(&tx_time_us.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
}

/// The attacks of issue 64, each in one action: what a hostile peer sends at line
/// rate, so that a short execution reaches the core's limits.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Attack {
    /// Control datagrams each as full of PathChallenges as a buffer holds (150 in
    /// the test).
    ChallengeFlood { datagrams: u8, path_id: u8 },
    /// Control datagrams each as full of GaveUp runs as a buffer holds.
    GaveUpFlood {
        datagrams: u8,
        first_seq: u32,
        count: u16,
    },
    /// A data datagram and then a Parity datagram on each of `paths` path ids.
    ParityPaths { paths: u8 },
    /// A data datagram on each of `paths` path ids: a new path each.
    ManyPaths { paths: u8 },
    /// Four data datagrams per unit of `packets` beyond a gap of `gap` sequence
    /// numbers that is never filled: the reorder buffer holds them.
    GapsHeldOpen { packets: u8, gap: u16 },
    /// A PathResponse for every challenge seen, on `path_id`: the address the
    /// challenges went to is validated.
    AnswerChallenges { path_id: u8 },
}

/// Most datagrams one attack sends.
const MAX_ATTACK_DATAGRAMS: usize = 1024;

impl RogueSender {
    /// The datagrams of `attack`, none longer than `max_len` bytes; inner packets
    /// come from `inner_source` (the peer's allowed address).
    pub fn attack(
        &mut self,
        attack: Attack,
        max_len: usize,
        inner_source: Ipv4Addr,
    ) -> Vec<Sealed> {
        let header = |path_id: u8| HeaderSpec {
            packet_type: 0,
            path_id,
            counter: CounterChoice::Next,
            receiver: None,
        };
        let inner = InnerSpec::Ipv4 {
            source: AddressChoice::Other(inner_source.octets()),
            destination: AddressChoice::Server,
            protocol: 17,
            transport: vec![0x5a; 8],
            padding: 72,
            fragment_offset: 0,
        };
        let data = |seq| BodySpec::Data {
            path_pn: PnChoice::Next,
            tx_time_us: 0,
            seq,
            inner: inner.clone(),
        };
        // Room for frames in a Control datagram of `max_len` bytes.
        let room = max_len.saturating_sub(TRANSPORT_HEADER_LEN + CONTROL_META_LEN + TAG_LEN);
        let control = |frame: FrameSpec, len: usize| BodySpec::Control {
            path_pn: PnChoice::Next,
            tx_time_us: 0,
            frames: vec![
                frame,
                FrameSpec::Repeat {
                    times: (room / len).saturating_sub(1).min(usize::from(u8::MAX)) as u8,
                },
            ],
        };
        let mut bodies: Vec<(u8, BodySpec)> = Vec::new();
        match attack {
            Attack::ChallengeFlood { datagrams, path_id } => {
                for index in 0..=datagrams {
                    let token = [index; PATH_TOKEN_LEN];
                    let frame = FrameSpec::PathChallenge { token };
                    let len = wire::FRAME_HEADER_LEN + PATH_TOKEN_LEN;
                    bodies.push((path_id, control(frame, len)));
                }
            }
            Attack::GaveUpFlood {
                datagrams,
                first_seq,
                count,
            } => {
                for _ in 0..=datagrams {
                    let frame = FrameSpec::GaveUp { first_seq, count };
                    let len = wire::FRAME_HEADER_LEN + wire::GAVE_UP_BODY_LEN;
                    bodies.push((0, control(frame, len)));
                }
            }
            Attack::ParityPaths { paths } => {
                for path_id in 0..=paths.min(wire::MAX_PATH_ID) {
                    bodies.push((path_id, data(SeqChoice::Next)));
                    let payload = ParityPayload::Rebuild {
                        seq: SeqChoice::Next,
                        inner: inner.clone(),
                    };
                    let parity = BodySpec::Parity {
                        first_back: 1,
                        members: 0b11,
                        payload,
                    };
                    bodies.push((path_id, parity));
                }
            }
            Attack::ManyPaths { paths } => {
                for path_id in 0..=paths.min(wire::MAX_PATH_ID) {
                    bodies.push((path_id, data(SeqChoice::Next)));
                }
            }
            Attack::GapsHeldOpen { packets, gap } => {
                bodies.push((0, data(SeqChoice::Skip(gap.max(1)))));
                for _ in 0..usize::from(packets) * 4 + 3 {
                    bodies.push((0, data(SeqChoice::Next)));
                }
            }
            Attack::AnswerChallenges { path_id } => {
                let frames = (0..self.tokens.len())
                    .map(|back| FrameSpec::PathResponse {
                        token: TokenChoice::Echo(back as u8),
                    })
                    .collect();
                let body = BodySpec::Control {
                    path_pn: PnChoice::Next,
                    tx_time_us: 0,
                    frames,
                };
                bodies.push((path_id, body));
            }
        }
        bodies
            .iter()
            .take(MAX_ATTACK_DATAGRAMS)
            .map(|(path_id, body)| self.seal(header(*path_id), body))
            .collect()
    }
}
