#!/usr/bin/env bash
# fuzz/run.sh [SECONDS] - run each cargo-fuzz target for SECONDS (default 60) from the committed
# seed corpus; exits non-zero if any target crashes (the input is left in fuzz/artifacts/TARGET/).
# Needs nightly (`cargo +nightly`) and cargo-fuzz (`cargo install cargo-fuzz`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
seconds=${1:-60}
status=0
for target in declaration link_input envelope; do
  echo "=== fuzz $target for ${seconds}s"
  # Work on a scratch copy of the seeds so the committed corpus stays small.
  work=$(mktemp -d)
  cp corpus/"$target"/seed-* "$work"/
  if ! cargo +nightly fuzz run "$target" "$work" -- -max_total_time="$seconds" -rss_limit_mb=2048 \
       -print_final_stats=1; then
    echo "fuzz/run.sh: $target CRASHED; reproducer in fuzz/artifacts/$target/" >&2
    status=1
  fi
  rm -rf "$work"
done
exit "$status"
