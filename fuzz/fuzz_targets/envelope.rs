//! Fuzz target: arbitrary bytes as a signed envelope (parse, verify, print); must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mesh_host::fuzzing::envelope(data);
});
