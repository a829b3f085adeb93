//! What mesh-host's words mean, as types and pure rules: the host's config and trust, a
//! declaration and its envelope, the self-refusal model and systemd's unit-file syntax it reads,
//! a run's record, what the machine needs after upgrades, `.pacnew` files.

pub mod config;
pub mod declaration;
pub mod digest;
pub mod envelope;
pub mod fields;
pub mod pacnew;
pub mod run;
pub mod selfref;
pub mod spec;
pub mod trust;
pub mod unitfile;
pub mod upkeep;
