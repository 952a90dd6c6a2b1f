//! Control frames, the ranges of Ack frames and the frames piggybacked in front of
//! an inner packet. Each parsed frame is written again and must parse to the same
//! frame; ranges and split parts must lie within the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mptund::wire::{self, Frame, ACK_RANGE_LEN, PIGGYBACK_LEN_FIELD};

/// Frames looked at per input, so a long walk of empty frames stays fast.
const MAX_FRAMES: usize = 4096;

fn check_frames(body: &[u8]) {
    let mut rewritten = vec![0u8; body.len() + 16];
    for frame in wire::frames(body).take(MAX_FRAMES) {
        let Ok(frame) = frame else {
            break;
        };
        if let Frame::Ack {
            path_id, ranges, ..
        } = &frame
        {
            assert!(*path_id <= wire::MAX_PATH_ID);
            assert!(!ranges.is_empty());
            assert_eq!(ranges.iter().count(), ranges.len());
            assert!(ranges.len() * ACK_RANGE_LEN <= body.len());
        }
        let written = wire::write_frame(&mut rewritten, &frame).expect("a parsed frame fits");
        assert_eq!(written, frame.encoded_len());
        let mut again = wire::frames(&rewritten[..written]);
        assert_eq!(again.next(), Some(Ok(frame)));
        assert_eq!(again.next(), None);
    }
}

fuzz_target!(|input: &[u8]| {
    // The input as a Control body after its metadata.
    check_frames(input);

    // The input as a DataWithFrames plaintext after its metadata.
    if let Ok((frames, inner)) = wire::split_piggybacked(input) {
        assert_eq!(
            PIGGYBACK_LEN_FIELD + frames.len() + inner.len(),
            input.len()
        );
        check_frames(frames);
    }

    // Writing an Ack from ranges derived from the input gives a frame that parses
    // back to them.
    let ranges: Vec<(u32, u32)> = input
        .chunks_exact(8)
        .map(|pair| {
            let first = u32::from_be_bytes([pair[0], pair[1], pair[2], pair[3]]);
            let last = u32::from_be_bytes([pair[4], pair[5], pair[6], pair[7]]);
            (first, last)
        })
        .collect();
    let room = input.first().map_or(0, |&b| usize::from(b)) * 4;
    let mut out = vec![0u8; room];
    if let Ok(written) = wire::write_ack_frame(&mut out, 5, 1, 2, ranges.iter().copied()) {
        match wire::frames(&out[..written]).next() {
            Some(Ok(Frame::Ack {
                path_id,
                ranges: parsed,
                ..
            })) => {
                assert_eq!(path_id, 5);
                assert!(parsed.iter().eq(ranges.iter().copied().take(parsed.len())));
            }
            other => panic!("a written Ack frame parses as {other:?}"),
        }
    }
});
