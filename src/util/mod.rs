//! What any layer may use: byte codecs and digests, sorted walks, words for people, logging,
//! JSON read in place, content diffs, the progress a run tells a person. Nothing here knows mesh-host's domain.

pub mod codec;
pub mod diff;
pub mod json_in_place;
pub mod logging;
pub mod progress;
pub mod sorted;
#[cfg(test)]
pub mod testutil;
pub mod words;
