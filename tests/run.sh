#!/usr/bin/env bash
# tests/run.sh - THE test command of mesh-host (as root: `./tests/run.sh [cargo test args]`).
# Builds a fresh sandbox with real pacman, systemctl --user and podman (tests/sandbox/setup.sh),
# always tears it down on exit, and runs `cargo test --all-targets "$@"` with the sandbox's env
# and MESH_REQUIRE_SANDBOX=1. Exits with cargo's status (2 when not root). SKIP_APT=1: no apt-get.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  echo "tests/run.sh: the integration tests drive real pacman, systemd and podman in a sandbox" >&2
  echo "and need root. Run it as root: ./tests/run.sh (or, where sudo exists, sudo ./tests/run.sh)" >&2
  exit 2
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export MESH_SANDBOX=${TMPDIR:-/tmp}/mesh-sandbox-$$
trap 'tests/sandbox/teardown.sh' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
tests/sandbox/setup.sh
source "$MESH_SANDBOX/env"
export MESH_REQUIRE_SANDBOX=1
status=0
cargo test --all-targets --no-fail-fast "$@" || status=$?
exit "$status"
