//! What any layer may use: byte codecs and digests, a counting writer, sorted walks, words for
//! people, logging, content diffs, the progress a run tells a person. Nothing here knows mesh-host's domain.

pub mod codec;
pub mod counted;
pub mod diff;
pub mod logging;
pub mod progress;
pub mod sorted;
#[cfg(test)]
pub mod testutil;
pub mod words;
