//! Any bytes as an ecosystem file: the parser, the structure check and the
//! validation must give diagnostics or a model, never panic or hang.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use supervise::config::{Host, check_bytes};

fuzz_target!(|data: &[u8]| {
    let host = Host {
        cpus: 4,
        uid: 1000,
        path: Some("/usr/bin:/bin".into()),
    };
    let _ = check_bytes(data, Path::new("/nonexistent/ecosystem.yaml"), &host);
});
