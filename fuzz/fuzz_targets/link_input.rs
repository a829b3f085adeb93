//! Fuzz target: arbitrary bytes from the control plane into a link that is up; must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mesh_host::fuzzing::link_input(data);
});
