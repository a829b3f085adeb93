#!/usr/bin/env bash
# bench/run.sh - mesh-host's benchmarks (issue 6): prints each figure with medians over several
# runs and asserts nothing; a run without QUICK=1 rewrites the sections of docs/performance.md of
# the figures it ran. As root: it sets up the sandbox of real tools (tests/sandbox/setup.sh) in a
# temp MESH_SANDBOX when `noop` runs and tears it down on exit; it builds the static binary
# (./build.sh) when it is missing or older than src/, and the control-plane example; `files` (the
# pairs against CFEngine) installs cfengine3 from Debian (apt-get) when cf-agent is
# missing, unless SKIP_APT=1.
#
#   bench/run.sh                           every figure (several minutes)
#   bench/run.sh QUICK=1                   every figure, fewer runs, shorter waits; writes nothing
#   bench/run.sh size noop fleet           a subset: size idle noop files latency confirm fleet scale watch
#                                          watch-idle watch-storm watch-memory
# Knobs: SKIP_APT=1 as for tests/run.sh; FLEET_N=N hosts in the fleet (300); RECONNECT_BASE_SECS=N
# gives the fleet that reconnect_base_secs.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then echo "bench/run.sh: run as root (the sandbox needs it)" >&2; exit 2; fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin=target/x86_64-unknown-linux-musl/release/mesh-host
if [ ! -x "$bin" ] || [ -n "$(find src Cargo.toml Cargo.lock -newer "$bin" | head -1)" ]; then ./build.sh; fi
cargo build --quiet --release --example control-plane

figures=("$@")
needs_sandbox=0
if [ ${#figures[@]} = 0 ] || [ "${figures[*]}" = QUICK=1 ]; then needs_sandbox=1; fi
needs_cfengine=$needs_sandbox
for f in "${figures[@]}"; do case "$f" in noop|confirm) needs_sandbox=1 ;; files) needs_cfengine=1 ;; esac; done
if [ "$needs_cfengine" = 1 ] && ! command -v cf-agent >/dev/null && [ "${SKIP_APT:-0}" != 1 ]; then
  echo "bench/run.sh: installing cfengine3 (apt-get) for the pairs against cf-agent"
  apt-get -q update >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends cfengine3 </dev/null >/dev/null
fi
if [ "$needs_sandbox" = 1 ]; then
  export MESH_SANDBOX=/var/tmp/mesh-bench-sandbox-$$
  trap 'tests/sandbox/teardown.sh >/dev/null' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  tests/sandbox/setup.sh >/dev/null
  source "$MESH_SANDBOX/env"
fi
ulimit -n 20000 2>/dev/null || true
# Each host of the fleet holds an inotify instance (the watcher, on by default): the kernel's
# default of 128 per user would leave hosts without one and starve everything else on the machine
# of them (other tests' watchers), so a run that may start the fleet raises it, saying so.
instances=$(sysctl -n fs.inotify.max_user_instances 2>/dev/null || echo 0)
want=$(( ${FLEET_N:-300} + 256 ))
if [ "$instances" -lt "$want" ]; then
  echo "bench/run.sh: fs.inotify.max_user_instances $instances -> $want (one per host of the fleet)"
  sysctl -qw fs.inotify.max_user_instances="$want"
fi
PYTHONDONTWRITEBYTECODE=1 python3 bench/bench.py --write docs/performance.md "$@"
