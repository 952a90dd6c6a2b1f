//! Splitting a GRO receive buffer into datagrams, with whatever length and stride
//! the kernel reports: the segments must tile the received bytes in order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mptund::daemon::gro_segments;

fuzz_target!(|input: &[u8]| {
    let Some((lengths, buffer)) = input.split_first_chunk::<4>() else {
        return;
    };
    let received_len = usize::from(u16::from_be_bytes([lengths[0], lengths[1]]));
    let stride = usize::from(u16::from_be_bytes([lengths[2], lengths[3]]));
    let received = &buffer[..received_len.min(buffer.len())];
    let mut offset = 0;
    let mut count = 0;
    for segment in gro_segments(buffer, received_len, stride) {
        assert!(!segment.is_empty());
        if stride > 0 {
            assert!(segment.len() <= stride);
        }
        assert_eq!(segment, &received[offset..offset + segment.len()]);
        offset += segment.len();
        count += 1;
    }
    assert_eq!(offset, received.len());
    if stride == 0 {
        assert!(count <= 1);
    }
});
