#!/usr/bin/env bash
# tests/current-tools.sh - the tests again, against the tools Arch runs today: Debian sid's
# systemd 262, pacman 7.1 (with Arch's `DownloadUser = alpm`) and podman 5 with crun, where
# ./tests/run.sh uses this machine's (Debian 12: systemd 252, pacman 6.0, podman 4.3 with runc).
#
# Two parts, each printing the versions it used:
#  1. the sandbox integration tests (TESTS below), built here and run in a chroot of a sid root
#     (tests/debian-root.sh; a fresh copy per run) that sees this checkout at the same path, a
#     cgroup2 /sys/fs/cgroup (systemd 262 has no cgroup v1) and its own /run; the sandbox
#     (tests/sandbox/setup.sh) is set up there with sid's tools and torn down after;
#  2. the PID 1 tier on sid: MESH_PID1_SUITE=sid tests/pid1/run.sh.
#
# As root: tests/current-tools.sh [TEST...]   (TEST: a module of tests/it/, as `packages`; none: all
# of TESTS and the tier; `pid1` alone: the tier alone)
# Environment: MESH_SID_CACHE where the sid root is cached (default /var/tmp/mesh-host-sid);
# MESH_PID1_* as tests/pid1/run.sh reads them.
# Exit: 0 all passed, 1 a test failed, 2 it could not run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
STARTED=$(date +%s)
TESTS=(packages files units containers upkeep faults crash service generations secrets
       systemd_paths unitfiles unit_confirm progress watch_race)
# The sid root: what the sandbox needs (tests/sandbox/apt-packages, with crun for runc), and
# what the tests call (file, patch, getfattr, script, python3).
INCLUDE=systemd,systemd-sysv,dbus,pacman-package-manager,libarchive-tools,zstd,podman,crun,catatonit,busybox-static,makepkg,fakeroot,python3,file,patch,attr,procps,gnupg,bsdutils,util-linux,ca-certificates
CACHE=${MESH_SID_CACHE:-/var/tmp/mesh-host-sid}

log() { printf '[current-tools %(%T)T] %s\n' -1 "$*" >&2; }
die() { printf 'tests/current-tools.sh: %s\n' "$*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "makes a chroot, mounts and runs the sandbox: run it as root"
for tool in debootstrap unshare chroot jq cargo; do
  command -v "$tool" >/dev/null || die "needs $tool"
done

tests=() pid1=yes
if [ $# -gt 0 ]; then
  pid1=no
  for t in "$@"; do
    if [ "$t" = pid1 ]; then pid1=yes; else tests+=("$t"); fi
  done
else
  tests=("${TESTS[@]}")
fi

status=0
WORK=
cleanup() {
  local s=$?
  set +e
  # Whatever still runs in the chroot (an interrupted run's user manager, conmon) keeps its
  # mount namespace alive; once they are gone the copy is plain files.
  if [ -n "$WORK" ]; then
    local p
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/root" 2>/dev/null)" = "$WORK/root" ] && kill -KILL "${p#/proc/}" 2>/dev/null
    done
    sleep 0.5
    rm -rf --one-file-system "$WORK"
  fi
  log "took $(( $(date +%s) - STARTED )) s"
  exit "$s"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ ${#tests[@]} -gt 0 ]; then
  log "building the test binary here (tests/it: ${tests[*]})"
  cargo build -q --bins
  exe=$(cargo test -q --no-run --message-format=json --test it \
    | jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test) | .executable')
  [ -x "$exe" ] || die "no test binary built for tests/it"
  # Each module's tests by their full names (a filter `files::` would take `unitfiles::` too).
  all=$("$exe" --list --format terse | sed -n 's/: test$//p')
  modules=()
  for t in "${tests[@]}"; do
    grep -q "^$t::" <<<"$all" || die "tests/it has no module $t"
    modules+=("$t $exe $(grep "^$t::" <<<"$all" | tr '\n' ' ')")
  done

  sid=$(tests/debian-root.sh sid "$INCLUDE" "$CACHE") || die "no sid root"
  WORK=$(mktemp -d /var/tmp/mesh-current-tools.XXXXXX)
  R=$WORK/root
  log "copying the sid root"
  cp -a --reflink=auto "$sid/." "$R/"
  rm -f "$R/.complete"
  mkdir -p "$R$REPO"
  printf '%s\n' "${modules[@]}" > "$R/tmp/modules"

  # In the chroot: the versions, the sandbox, each module's tests as `cargo test` runs them (the
  # test binary from the checkout, --include-ignored), the teardown. A summary line per module.
  cat > "$R/tmp/run-tests.sh" <<'EOF'
set -uo pipefail
cd "$REPO"
printf 'current tools (Debian sid): pacman %s, systemd %s, podman %s, crun %s, kernel %s\n' \
  "$(pacman -V | sed -n 's/.*Pacman v\([^ ]*\).*/\1/p')" "$(systemctl --version | awk 'NR == 1 {print $2}')" \
  "$(podman --version | awk '{print $3}')" "$(crun --version | awk 'NR == 1 {print $3}')" "$(uname -r)"
export MESH_SANDBOX=/var/tmp/mesh-sandbox-sid
SKIP_APT=1 tests/sandbox/setup.sh || { MESH_SANDBOX=$MESH_SANDBOX tests/sandbox/teardown.sh; exit 2; }
source "$MESH_SANDBOX/env"
failed=()
while read -r -a line; do   # a module, the test binary, the module's tests
  name=${line[0]} exe=${line[1]}
  printf '\n--- %s (%s)\n' "$name" "${exe##*/}"
  started=$(date +%s)
  "$exe" --include-ignored --exact "${line[@]:2}" </dev/null || failed+=("$name")
  printf -- '--- %s took %s s\n' "$name" "$(( $(date +%s) - started ))"
done < /tmp/modules
tests/sandbox/teardown.sh
printf '\nsid sandbox tests: %d modules, %d failed%s\n' "$(wc -l < /tmp/modules)" "${#failed[@]}" \
  "$( [ ${#failed[@]} = 0 ] || printf ' (%s)' "${failed[*]}")"
[ ${#failed[@]} = 0 ]
EOF
  log "running the tests in the sid chroot"
  # A mount namespace of its own: everything mounted here goes when the last process in it does.
  unshare -m --propagation private env R="$R" REPO="$REPO" bash -c '
    set -e
    mount --bind "$R" "$R"   # a mount point, as / is: pacman'"'"'s CheckSpace looks for the one it is on
    mount --rbind /dev "$R/dev"
    mount -t proc proc "$R/proc"
    mount -t sysfs sysfs "$R/sys"
    mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup"
    mount -t tmpfs -o mode=0755 tmpfs "$R/run"
    mkdir -p "$R/run/lock"
    mount --bind "$REPO" "$R$REPO"
    exec chroot "$R" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root LANG=C.UTF-8 REPO="$REPO" RUST_BACKTRACE=1 bash /tmp/run-tests.sh
  ' || status=$?
  [ "$status" -le 1 ] || status=1
fi

if [ "$pid1" = yes ]; then
  log "the PID 1 tier on sid"
  MESH_PID1_SUITE=sid tests/pid1/run.sh || { s=$?; [ "$status" != 0 ] || status=$s; }
fi
log "sid run: exit $status"
exit "$status"
