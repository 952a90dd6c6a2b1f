//! The control socket's request line, as the daemon reads it: at most 256 bytes,
//! up to the first newline, as UTF-8 (other bytes end the connection unanswered).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mptund::daemon::{parse_control_request, ControlRequest};

const MAX_REQUEST_BYTES: usize = 256;

fuzz_target!(|input: &[u8]| {
    let limited = &input[..input.len().min(MAX_REQUEST_BYTES)];
    let line = match limited.iter().position(|&b| b == b'\n') {
        Some(end) => &limited[..=end],
        None => limited,
    };
    let Ok(line) = std::str::from_utf8(line) else {
        return;
    };
    match parse_control_request(line) {
        Ok(request) => {
            let expected = match request {
                ControlRequest::StatusTable => "status",
                ControlRequest::StatusJson => "status json",
                ControlRequest::StatusDump => "status dump",
            };
            assert_eq!(line.trim(), expected);
        }
        Err(refusal) => {
            assert!(refusal.starts_with("error: "));
            assert!(refusal.ends_with('\n'));
            assert_eq!(refusal.matches('\n').count(), 1, "one line: {refusal:?}");
        }
    }
});
