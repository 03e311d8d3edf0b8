//! Any bytes as a control request line: a request or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = supervise::control::decode(data);
});
