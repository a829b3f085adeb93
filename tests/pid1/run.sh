#!/usr/bin/env bash
# tests/pid1/run.sh - the real-systemd tier: mesh-host.service under systemd as PID 1.
#
# Boots a fresh copy of a cached Debian root (debootstrap, with Debian's pacman) as a container
# (systemd-nspawn -b), installs THE package, nox-mesh-host built by makepkg from the source
# tarball (tests/makepkg.sh), with `pacman -U` inside it as a node would, joins it to the reference control plane
# (examples/control-plane.rs, on this machine's loopback: the container shares its network) and
# runs the checks in tests/pid1/checks.sh, each with the commands it ran and their output as its
# evidence (a passing check prints its lines that begin `figure: `: what it measured). Always
# cleans up (container, copy, build user, control plane), bounded in time.
#
# As root: tests/pid1/run.sh [CHECK...]   (no CHECK: all of them, in order; they build on each other)
# Environment:
#   MESH_PID1_SUITE    the Debian suite of the container (default bookworm, systemd 252 and
#                      pacman 6.0; sid has systemd 262 and pacman 7.1, whose pacman.conf then
#                      gets Arch's `DownloadUser = alpm`)
#   MESH_PID1_CACHE    where the debootstrap root is cached (default /var/tmp/mesh-host-pid1)
#   MESH_PID1_TIMEOUT  seconds for the whole tier before it is stopped, once the check then running
#                      ends (default 900; every wait in a check is bounded too)
#   MESH_PID1_KEEP=1   keep the work dir (logs, evidence) after a failure
# Exit: 0 every check passed, 1 a check failed, 2 the tier could not run (not root, no tools).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REPO=$PWD
TIER_STARTED=$(date +%s)
TIMEOUT=${MESH_PID1_TIMEOUT:-900}
CACHE=${MESH_PID1_CACHE:-/var/tmp/mesh-host-pid1}
SUITE=${MESH_PID1_SUITE:-bookworm}
# Debian packages of the container's root: a booted systemd, and pacman with what it unpacks with.
INCLUDE=systemd,systemd-sysv,dbus,pacman-package-manager,libarchive-tools,zstd

log() { printf '[pid1 %(%T)T] %s\n' -1 "$*" >&2; }
die() { printf 'tests/pid1/run.sh: %s\n' "$*" >&2; exit 2; }

[ "$(id -u)" = 0 ] || die "boots a container and installs packages in it: run it as root"
for tool in systemd-nspawn debootstrap nsenter unshare makepkg repo-add runuser bsdtar zstd jq cargo; do
  command -v "$tool" >/dev/null || die "needs $tool (apt-get install systemd-container debootstrap makepkg libarchive-tools zstd jq)"
done

WORK=$(mktemp -d /var/tmp/mesh-pid1-run.XXXXXX)
chmod 0755 "$WORK"   # makepkg runs as a throwaway user below it
MACHINE=mesh-pid1-$$
ROOT=$WORK/root
NSPAWN_PID=
CP_PID=
WATCHDOG_PID=
FAILED=()
PASSED=()

cleanup() {
  local status=$?
  set +e
  [ -n "$WATCHDOG_PID" ] && kill "$WATCHDOG_PID" 2>/dev/null
  [ -n "$CP_PID" ] && kill "$CP_PID" 2>/dev/null && wait "$CP_PID" 2>/dev/null
  if [ -n "$NSPAWN_PID" ] && kill -0 "$NSPAWN_PID" 2>/dev/null; then
    if [ "$status" != 0 ] && [ -n "$PID1" ]; then   # the whole journal, for a kept work dir
      timeout 20 nsenter -t "$PID1" -a journalctl -o short-precise --no-pager > "$WORK/journal.txt" 2>&1
    fi
    kill -TERM "$NSPAWN_PID"   # nspawn halts the container's systemd
    for _ in $(seq 50); do kill -0 "$NSPAWN_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$NSPAWN_PID" 2>/dev/null
    wait "$NSPAWN_PID" 2>/dev/null
  fi
  if [ -d "$ROOT" ]; then rm -rf --one-file-system "$ROOT"; fi
  if [ "$status" != 0 ] && [ "${MESH_PID1_KEEP:-}" = 1 ]; then
    log "kept $WORK"
  else
    rm -rf --one-file-system "$WORK"
  fi
  log "tier took $(( $(date +%s) - TIER_STARTED )) s"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
( sleep "$TIMEOUT"; log "TIMEOUT: the tier ran over ${TIMEOUT} s; stopping it"; kill -TERM $$ ) &
WATCHDOG_PID=$!

# --- the cached root: debootstrap once (tests/debian-root.sh), a fresh copy per run -----------
cached_root() {
  tests/debian-root.sh "$SUITE" "$INCLUDE" "$CACHE" || die "no $SUITE root to boot"
}

# --- packages: the real one (makepkg, two pkgrels) and the tier's test packages ---------------
VERSION=$(awk '/^\[/ {p = ($0 == "[package]")} p && /^version *=/ {gsub(/.*= *"|".*/, ""); print; exit}' Cargo.toml)
build_packages() {
  # As Arch builds it: makepkg from the source tarball (pkgrel 1, check() included; pkgrel 2
  # repackaged), as a throwaway user. The test suite later reuses these packages.
  log "tests/makepkg.sh (the package, built from source by makepkg)"
  local built
  built=$(tests/makepkg.sh 2> "$WORK/makepkg-sh.log" | tail -n 1) \
    || { tail -n 30 "$WORK/makepkg-sh.log" >&2; die "tests/makepkg.sh failed"; }
  grep -h "built from source in" "$built/makepkg.log" >&2 || :
  mkdir -p "$ROOT/srv/pkgs" "$ROOT/srv/repo"
  cp "$built"/nox-mesh-host-*.pkg.tar.zst "$ROOT/srv/pkgs/"
  # A package whose install scriptlet takes SECS seconds and writes what happened to
  # /var/lib/NAME.log: "start", every signal that reached it, and "done" when it finished.
  local name secs
  for spec in pid1-slow-stop:15 pid1-slow-crash:30 pid1-zz-after:0 pid1-plain:0; do
    name=${spec%%:*} secs=${spec#*:}
    d=$WORK/pkg/$name
    mkdir -p "$d/usr/share/$name"
    echo "$name" > "$d/usr/share/$name/marker"
    printf 'pkgname = %s\npkgbase = %s\npkgver = 1.0-1\npkgdesc = mesh-host pid1 tier\nurl = https://example.invalid\nbuilddate = %s\npackager = mesh-host tests\nsize = 1\narch = any\nlicense = MIT\n' \
      "$name" "$name" "$(date +%s)" > "$d/.PKGINFO"
    cat > "$d/.INSTALL" <<EOF
post_install() {
  log=/var/lib/$name.log
  echo start > "\$log"
  for s in TERM INT HUP QUIT; do trap "echo signal \$s >> \$log" "\$s"; done
  end=\$(( \$(date +%s) + $secs ))
  while [ "\$(date +%s)" -lt "\$end" ]; do sleep 0.2; done
  echo done >> "\$log"
}
EOF
    (cd "$d" && bsdtar --uid 0 --gid 0 --uname root --gname root -cf - .PKGINFO .INSTALL usr) | zstd -q -c > "$ROOT/srv/repo/$name-1.0-1-any.pkg.tar.zst"
  done
  repo-add -q "$ROOT/srv/repo/pid1.db.tar.gz" "$ROOT"/srv/repo/*.pkg.tar.zst
}

# --- the container ----------------------------------------------------------------------------
PID1=
# in_ct CMD...: runs CMD inside the container (bounded by T, default 120 s); prints its output
# and appends the command, its output and its exit status to the current check's evidence.
in_ct() {
  local out rc=0
  out=$(timeout "${T:-120}" nsenter -t "$PID1" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C "$@" 2>&1) || rc=$?
  printf '$ %s\n%s\n[exit %s]\n' "$*" "$out" "$rc" >> "$EVIDENCE"
  printf '%s\n' "$out"
  return "$rc"
}
boot() {
  log "booting $MACHINE"
  # systemd 256 and later have no cgroup v1: on this machine's mixed hierarchy their container
  # exits 255 silently unless nspawn gives it the unified one.
  local systemd
  systemd=$(dpkg-query --admindir="$ROOT/var/lib/dpkg" -W -f='${Version}' systemd) || die "no systemd in the $SUITE root"
  if dpkg --compare-versions "$systemd" ge 256; then export SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1; fi
  # nspawn in a mount namespace of its own with a tmpfs on /run/systemd/nspawn: /run is on disk
  # here, and nspawn will not remove its propagation directory from a disk file system.
  mkdir -p /run/systemd/nspawn
  setsid unshare -m --propagation private sh -c 'mount -t tmpfs tmpfs /run/systemd/nspawn && exec "$@"' sh \
    systemd-nspawn -D "$ROOT" -b --register=no --keep-unit --machine="$MACHINE" \
    --console=pipe </dev/null > "$WORK/console.log" 2>&1 &
  NSPAWN_PID=$!
  local p
  for _ in $(seq 100); do
    PID1=$(for p in /proc/[0-9]*; do
             [ "$(awk '/^PPid:/ {print $2}' "$p/status" 2>/dev/null)" = "$NSPAWN_PID" ] \
               && [ "$(cat "$p/comm" 2>/dev/null)" = systemd ] && echo "${p#/proc/}"
           done | head -n1) || true
    [ -n "$PID1" ] && break
    kill -0 "$NSPAWN_PID" 2>/dev/null || { cat "$WORK/console.log" >&2; die "systemd-nspawn exited"; }
    sleep 0.1
  done
  [ -n "$PID1" ] || die "no systemd in the container after 10 s"
  EVIDENCE=$WORK/boot.log
  local state
  state=$(T=120 in_ct systemctl is-system-running --wait) || true
  case "$state" in
    running|degraded) log "container up (PID 1 is $PID1 here; $state)" ;;
    *) cat "$WORK/boot.log" "$WORK/console.log" >&2; die "the container's systemd did not come up: $state" ;;
  esac
}
setup_pacman() {
  # pacman 7 gets Arch's `DownloadUser = alpm` (downloads as that user, in pacman's sandbox).
  local major options=
  major=$(in_ct pacman -V | sed -n 's/.*Pacman v\([0-9]*\)\..*/\1/p')
  if [ "${major:-0}" -ge 7 ]; then
    options='DownloadUser = alpm'
    in_ct sh -c 'getent passwd alpm >/dev/null || useradd --system --no-create-home --shell /usr/sbin/nologin alpm' \
      >/dev/null || die "no user alpm in the container"
  fi
  write_pacman_conf() {
    printf '[options]\nArchitecture = auto\nSigLevel = Never\nLocalFileSigLevel = Never\n%s\n\n[pid1]\nServer = file:///srv/repo\n' \
      "$options" > "$ROOT/etc/pacman.conf"
  }
  write_pacman_conf
  mkdir -p "$ROOT/var/lib/pacman" "$ROOT/var/cache/pacman/pkg" "$ROOT/etc/pacman.d/gnupg"
  in_ct pacman -Sy >/dev/null || { cat "$EVIDENCE" >&2; die "pacman -Sy in the container failed"; }
  # A package downloaded (to a cache of its own) by a service of the container's systemd, as the
  # host's installs will be (a command entered with nsenter escapes the container's system call
  # filter). There pacman 7 cannot use Landlock although this kernel has it (nspawn's filter lets
  # no landlock_* call through, most likely): its download sandbox fails every download
  # ("Landlock is not supported by the kernel"), so DisableSandboxFilesystem.
  local out probe=(systemd-run --wait --pipe --quiet --collect -- pacman -Sw --noconfirm --cachedir /var/tmp/pacman-probe pid1-plain)
  mkdir -p "$ROOT/var/tmp/pacman-probe"   # pacman 7.1 refuses a cache dir that does not exist
  if ! out=$(in_ct "${probe[@]}"); then
    grep -q Landlock <<<"$out" || { cat "$EVIDENCE" >&2; die "pacman -Sw in a service of the container failed"; }
    log "pacman cannot use Landlock here: DisableSandboxFilesystem in the container's pacman.conf"
    options+=$'\nDisableSandboxFilesystem'
    write_pacman_conf
    in_ct "${probe[@]}" >/dev/null || { cat "$EVIDENCE" >&2; die "pacman -Sw in a service of the container failed"; }
  fi
  in_ct rm -rf /var/tmp/pacman-probe
  # The versions this run used.
  printf 'pid1 tier on Debian %s: systemd %s, pacman %s, kernel %s\n' "$SUITE" \
    "$(in_ct systemctl --version | awk 'NR == 1 {print $2}')" \
    "$(in_ct pacman -V | sed -n 's/.*Pacman v\([^ ]*\).*/\1/p')" "$(uname -r)"
}

# --- the control plane (on this machine's loopback) -------------------------------------------
DECLARATION=$WORK/declaration.json
start_control_plane() {
  log "cargo build --example control-plane"
  nice cargo build -q --example control-plane 2> "$WORK/cp-build.log" || { cat "$WORK/cp-build.log" >&2; die "could not build the control plane"; }
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$WORK/secret"
  echo '{"schema": 1}' > "$DECLARATION"
  : > "$WORK/cp.log"   # read below at once: the control plane may not have opened it yet
  target/debug/examples/control-plane --listen 127.0.0.1:0 --declaration "$DECLARATION" \
    --pki-dir "$WORK/pki" --node pid1 --secret-file "$WORK/secret" \
    > "$WORK/reports.jsonl" 2> "$WORK/cp.log" &
  CP_PID=$!
  local addr=
  # A whole line only (ended by its newline), never one still being written.
  local whole=$'listening on ([^\n]+)\n' log
  for _ in $(seq 100); do
    log=$(cat "$WORK/cp.log"; echo .)
    [[ $log =~ $whole ]] && addr=${BASH_REMATCH[1]}
    [ -n "$addr" ] && break
    sleep 0.1
  done
  [ -n "$addr" ] || { cat "$WORK/cp.log" >&2; die "the control plane did not start"; }
  mkdir -p "$ROOT/etc/mesh-host"
  install -m 0644 "$WORK/pki/ca.pem" "$ROOT/etc/mesh-host/ca.pem"
  install -m 0600 "$WORK/secret" "$ROOT/etc/mesh-host/secret"
  CONFIG=$(jq -n --arg a "$addr" '{control_plane: {address: $a, server_name: "localhost",
    ca_file: "/etc/mesh-host/ca.pem", node: "pid1", secret_file: "/etc/mesh-host/secret"}}')
  log "control plane on $addr"
}
# declare_file FILE: the control plane declares FILE's content under its next revision, which
# it returns. The count lives in a file: each check runs in a subshell.
declare_file() {
  local revision
  revision=$(( $(cat "$WORK/revision" 2>/dev/null || echo 1) + 1 ))
  echo "$revision" > "$WORK/revision"
  cp "$1" "$DECLARATION.tmp"
  touch -d "@$(( $(date +%s) + revision ))" "$DECLARATION.tmp"   # a new mtime, even within a second
  mv "$DECLARATION.tmp" "$DECLARATION"
  DECLARED=$revision
}

# --- running the checks -----------------------------------------------------------------------
# shellcheck source=tests/pid1/checks.sh
source tests/pid1/checks.sh
run_check() {
  local name=$1 started
  EVIDENCE=$WORK/evidence-$name.log
  : > "$EVIDENCE"
  started=$(date +%s)
  if ( set +e; "check_$name" ) >> "$EVIDENCE" 2>&1; then
    PASSED+=("$name")
    printf 'ok   - %s (%s s)\n' "$name" "$(( $(date +%s) - started ))"
    grep '^figure: ' "$EVIDENCE" | sed 's/^/    /' || :   # a check's measurements, shown
  else
    FAILED+=("$name")
    printf 'FAIL - %s (%s s); evidence (each command run, its output, its exit status):\n' "$name" "$(( $(date +%s) - started ))"
    sed 's/^/    | /' "$EVIDENCE"
  fi
}

root=$(cached_root)
log "copying the cached root"
mkdir -p "$ROOT"
cp -a --reflink=auto "$root/." "$ROOT/"
rm -f "$ROOT/.complete"
build_packages
start_control_plane
boot
EVIDENCE=$WORK/boot.log
setup_pacman
checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=("${ALL_CHECKS[@]}")
for check in "${checks[@]}"; do
  declare -F "check_$check" >/dev/null || die "no check $check (there are: ${ALL_CHECKS[*]})"
  run_check "$check"
done
printf '\npid1 tier: %d passed, %d failed%s\n' "${#PASSED[@]}" "${#FAILED[@]}" \
  "$( [ ${#FAILED[@]} = 0 ] || printf ' (%s)' "${FAILED[*]}")"
[ ${#FAILED[@]} = 0 ]
