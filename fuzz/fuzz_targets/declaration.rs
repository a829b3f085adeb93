//! Fuzz target: arbitrary bytes as a declaration (parse and validate); must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mesh_host::fuzzing::declaration(data);
});
