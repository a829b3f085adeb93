//! The integration tests, one binary: the real `mesh-host` against scratch roots, the sandbox of
//! real tools (`tests/sandbox/`) and the reference control plane (`support/`). One module per
//! area; a test's name is `MODULE::TEST`, so `cargo test --test it -- MODULE::` runs one area.

mod support;

mod containers;
mod control_plane;
mod crash;
mod faults;
mod files;
mod generations;
mod inputs;
mod join;
mod manual;
mod monitoring;
mod noop;
mod output;
mod own_ground;
mod packages;
mod packaging;
mod progress;
mod secrets;
mod service;
mod service_store;
mod signed;
mod systemd_paths;
mod unit_confirm;
mod unitfiles;
mod units;
mod upkeep;
mod watch;
mod watch_race;
