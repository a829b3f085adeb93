#!/usr/bin/env bash
# teardown.sh - undo setup.sh: containers and images of the sandbox's podman store, mounts below the
# sandbox, its user manager (recorded pid), its cgroups, podman's leftover libpod_parent cgroups,
# then the directory. Idempotent, also after a half-done setup; touches only what the sandbox's
# state files attribute to it.   Usage: MESH_SANDBOX=/var/tmp/x tests/sandbox/teardown.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
sb_need_root
SB=$MESH_SANDBOX
[ -d "$SB" ] || { sb_log "nothing at $SB"; exit 0; }
SB=$(cd "$SB" && pwd)
[ -e "$SB/$MESH_SANDBOX_MARKER" ] || sb_die "$SB has no $MESH_SANDBOX_MARKER marker: not a sandbox, not touching it"
STATE=$SB/state; C=$SB/containers

# podman: only the sandbox's own store (its config files name it)
if [ -f "$C/containers.conf" ] && [ -f "$C/storage.conf" ] && command -v podman >/dev/null; then
  export CONTAINERS_CONF=$C/containers.conf CONTAINERS_STORAGE_CONF=$C/storage.conf
  podman pod rm -a -f -t 0 >/dev/null 2>&1 || true
  podman rm -a -f -v -t 0 >/dev/null 2>&1 || true
  podman rmi -a -f >/dev/null 2>&1 || true
  unset CONTAINERS_CONF CONTAINERS_STORAGE_CONF
fi

# mounts below the sandbox (overlay layers, shm), deepest first
findmnt -rn -o TARGET | awk -v p="$SB/" 'index($0, p) == 1' | sort -r | while read -r m; do
  umount -l "$m" || true
done

# the user manager: SIGTERM stops its units, then it exits; KILL after 10 s. (Once dead it stays a
# zombie until PID 1 reaps it, so look at the state rather than at /proc/PID.)
running() { [ -r "/proc/$1/stat" ] && [ "$(sed 's/.*) //; s/ .*//' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
if [ -f "$STATE/manager.pid" ]; then
  pid=$(cat "$STATE/manager.pid")
  if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = systemd ] \
     && tr '\0' ' ' < "/proc/$pid/environ" 2>/dev/null | grep -qF "XDG_RUNTIME_DIR=$SB/"; then
    kill -TERM "$pid" || true
    for _ in $(seq 100); do running "$pid" || break; sleep 0.1; done
    if running "$pid"; then sb_log "user manager $pid ignored SIGTERM: SIGKILL"; kill -KILL "$pid" || true; fi
  fi
fi

# the manager's cgroups: kill what is still inside (only processes in these cgroups), rmdir leaf first
if [ -f "$STATE/cgroups" ]; then
  while read -r cg; do
    [ -d "$cg" ] || continue
    for _ in 1 2 3 4 5; do
      pids=$(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null) || true
      [ -z "$pids" ] && break
      xargs -r kill -KILL <<<"$pids" 2>/dev/null || true; sleep 0.2
    done
    find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    if [ -d "$cg" ]; then sb_log "warning: could not remove cgroup $cg"; fi
  done < "$STATE/cgroups"
fi

# podman's cgroupfs manager leaves libpod_parent cgroups: remove the empty ones that setup did not
# find already (rmdir fails on a cgroup that still has processes or children)
find /sys/fs/cgroup -maxdepth 2 -name libpod_parent -type d 2>/dev/null | while read -r d; do
  grep -qxF "$d" "$STATE/libpod-parents-before" 2>/dev/null && continue
  find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
done

# a setup killed while the user manager started may have left this behind
if [ -e "$STATE/fake-booted" ]; then rmdir /run/systemd/system 2>/dev/null || true; fi

rm -rf "$SB"
sb_log "removed $SB"
