#!/usr/bin/env bash
# setup.sh - build a throwaway sandbox in which the integration tests drive the REAL pacman,
# systemctl and podman on a Debian machine (as root, systemd not PID 1). Nothing on the host is
# reconfigured: every tool is pointed into $MESH_SANDBOX through config files and env vars.
#
#   MESH_SANDBOX=/var/tmp/x tests/sandbox/setup.sh    (default /var/tmp/mesh-sandbox)
#   source /var/tmp/x/env                             (the variables the tests read)
#   MESH_SANDBOX=/var/tmp/x tests/sandbox/teardown.sh (also after a failed, half-done setup)
# Knob: SKIP_APT=1 skips the apt-get install of tests/sandbox/apt-packages.
# Background: /work/shared/sandbox/NOTES.md (why each workaround below is needed).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
sb_need_root
umask 022
SB=$MESH_SANDBOX
[ -e "$SB/env" ] && sb_die "$SB is already set up; run teardown.sh first"
[ -e "$SB/$MESH_SANDBOX_MARKER" ] && sb_die "$SB holds a half-done sandbox; run teardown.sh first"
[ -d "$SB" ] && [ -n "$(ls -A "$SB")" ] && sb_die "$SB exists and is not empty; pick another MESH_SANDBOX"
fake_booted=0
on_exit() {
  [ "$1" = 0 ] && return
  if [ "$fake_booted" = 1 ]; then rmdir /run/systemd/system 2>/dev/null || true; fi
  sb_log "setup FAILED; clean up with: MESH_SANDBOX=$SB $here/teardown.sh"
}
trap 'on_exit $?' EXIT

# ------------------------------------------------------------------ 0. Debian packages
if [ "${SKIP_APT:-0}" != 1 ]; then
  mapfile -t pkgs < <(grep -v '^#' "$here/apt-packages")
  missing=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "${pkgs[@]}" 2>/dev/null \
              | awk '$1 != "ii" {print $2}'; true)
  # dpkg-query prints nothing for packages it has never heard of: compare counts as well
  if [ -n "$missing" ] || [ "$(dpkg-query -W "${pkgs[@]}" 2>/dev/null | wc -l)" != "${#pkgs[@]}" ]; then
    sb_log "apt-get install ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -q update >/dev/null
    apt-get -q install -y --no-install-recommends -o DPkg::Lock::Timeout=600 "${pkgs[@]}" </dev/null >/dev/null
  fi
fi

mkdir -p "$SB"; SB=$(cd "$SB" && pwd)
STATE=$SB/state; mkdir -p "$STATE" "$SB/tmp"
touch "$SB/$MESH_SANDBOX_MARKER"

# ------------------------------------------------------------------ 1. pacman
# Alternate root; every path pacman uses is in one pacman.conf, so `pacman --config CONF` is all
# the agent needs. Repo "meshtest" (unsigned) of tiny packages; bump-package.sh re-versions them.
P=$SB/pacman; R=$P/root; REPO=$P/repo
mkdir -p "$REPO" "$R/var/lib/pacman" "$R/var/cache/pacman/pkg" "$R/var/log" \
         "$R/etc/pacman.d/hooks" "$R/etc/pacman.d/gnupg"
mkpkg() { # mkpkg NAME VERSION-REL [DEPEND...]
  local name=$1 ver=$2 d; shift 2
  d=$(mktemp -d "$SB/tmp/pkg.XXXXXX")
  mkdir -p "$d/usr/share/$name"; echo "$name $ver" > "$d/usr/share/$name/marker"
  if [ "$name" = mesh-web ]; then
    # The sandbox's user manager reads $MESH_PACMAN_ROOT/usr/lib/systemd/user (see section 2).
    # bump-package.sh rewrites the version in the Description, so an upgrade changes the unit.
    mkdir -p "$d/usr/lib/systemd/user"
    printf '%s\n' '[Unit]' "Description=mesh-web test service $ver" '' '[Service]' \
      'ExecStart=/bin/sleep infinity' '' '[Install]' 'WantedBy=default.target' \
      > "$d/usr/lib/systemd/user/mesh-web.service"
  fi
  if [ "$name" = mesh-conf ]; then
    # A file pacman keeps (backup=): an upgrade leaves FILE.pacnew beside a changed one.
    # bump-package.sh rewrites the version in its first line, so an upgrade changes the default.
    mkdir -p "$d/etc"
    printf '%s\n' "# mesh-conf $ver default" 'listen = 80' 'workers = 2' > "$d/etc/mesh-conf.conf"
  fi
  sb_pkginfo "$d" "$name" "$ver" "$@"
  if [ "$name" = mesh-conf ]; then echo 'backup = etc/mesh-conf.conf' >> "$d/.PKGINFO"; fi
  if [ "$name" = mesh-usurper ]; then
    # Takes the host's package over, as a hostile repo would: mesh-host must refuse to install it.
    printf '%s\n' 'replaces = nox-mesh-host' 'conflict = nox-mesh-host' 'provides = nox-mesh-host=9.0' \
      >> "$d/.PKGINFO"
  fi
  sb_pack "$d" "$REPO/$name-$ver-any.pkg.tar.zst"
  rm -rf "$d"
}
sb_log "pacman: packages and repo $MESH_REPO_NAME"
mkpkg mesh-a 1.0-1
mkpkg mesh-b 1.0-1 mesh-a
mkpkg mesh-c 2.0-1
mkpkg mesh-d 1.0-1 'mesh-c>=2.0'
mkpkg mesh-e 1.0-1
mkpkg mesh-web 1.0-1
mkpkg mesh-conf 1.0-1
mkpkg nox-mesh-host 0.0.1-1 # the host's own name, older than any real release (a marker only)
mkpkg mesh-usurper 1.0-1
mkpkg meshtest-keyring 1.0-1 # a `*-keyring`: a full upgrade takes a newer one first, alone
repo-add -q "$REPO/$MESH_REPO_NAME.db.tar.gz" "$REPO"/*.pkg.tar.zst
# pacman 7 (Arch's, sid's) gets the options of Arch's pacman.conf that change how it runs:
# downloads as the user alpm in pacman's sandbox, in parallel, and the disk space checked. The
# tests' own roots get them too (MESH_PACMAN_OPTIONS, read by tests/it/support/pacman_root.rs).
PACMAN_OPTIONS=
if [ "$(pacman -V | sed -n 's/.*Pacman v\([0-9]*\)\..*/\1/p')" -ge 7 ]; then
  getent passwd alpm >/dev/null || useradd --system --no-create-home --shell /usr/sbin/nologin alpm
  PACMAN_OPTIONS=$'CheckSpace\nParallelDownloads = 5\nDownloadUser = alpm'
fi
write_pacman_conf() {
  cat > "$P/pacman.conf" <<CONF
[options]
RootDir      = $R
DBPath       = $R/var/lib/pacman/
CacheDir     = $R/var/cache/pacman/pkg/
LogFile      = $R/var/log/pacman.log
GPGDir       = $R/etc/pacman.d/gnupg/
HookDir      = $R/etc/pacman.d/hooks/
Architecture = x86_64
SigLevel     = Never
$PACMAN_OPTIONS

[$MESH_REPO_NAME]
Server = file://$REPO
CONF
}
write_pacman_conf
pacman --config "$P/pacman.conf" -Sy --noconfirm >"$SB/tmp/pacman-Sy.log"
# A package downloaded (to a cache of its own), as the tests' installs will: where pacman cannot
# use Landlock (a kernel without it, a container whose filter blocks it), its download sandbox
# fails every download.
probe() { mkdir -p "$SB/tmp/pacman-probe"; pacman --config "$P/pacman.conf" -Sw --noconfirm --cachedir "$SB/tmp/pacman-probe" mesh-a >"$SB/tmp/pacman-Sw.log" 2>&1; }
if ! probe; then
  grep -q Landlock "$SB/tmp/pacman-Sw.log" || sb_die "pacman -Sw: $(cat "$SB/tmp/pacman-Sw.log")"
  sb_log "pacman: no Landlock here; DisableSandboxFilesystem"
  PACMAN_OPTIONS+=$'\nDisableSandboxFilesystem'
  write_pacman_conf
  probe || sb_die "pacman -Sw: $(cat "$SB/tmp/pacman-Sw.log")"
fi
rm -rf "$SB/tmp/pacman-probe"

# ------------------------------------------------------------------ 2. systemd --user manager (as root)
# No system manager here, so a `systemd --user` manager run as root provides real
# start/stop/enable/daemon-reload semantics through `systemctl --user` (private socket, no D-Bus).
#  - It refuses to start unless /run/systemd/system exists: create it only while it starts,
#    under a lock so that parallel setups do not remove it under each other.
#  - It needs a cgroup of its own in each hierarchy systemd uses (hybrid: unified + name=systemd).
#  - HOME and the XDG dirs point into the sandbox. XDG_DATA_HOME is the pacman root's usr/lib, so
#    the manager loads packaged units from $MESH_PACMAN_ROOT/usr/lib/systemd/user, below the
#    admin dir $XDG_CONFIG_HOME/systemd/user in priority, like /usr/lib vs /etc on a real host.
#    (The dir need not exist yet: the manager notices it when a unit is looked up or reloaded.)
S=$SB/systemd; RT=$S/runtime; CFG=$S/config
mkdir -p "$RT"; chmod 700 "$RT"
mkdir -p "$CFG/systemd/user" "$S/home" "$S/offline-root/etc/systemd/system"
CG=mesh-sandbox-$$
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then cgdirs=("/sys/fs/cgroup/$CG")   # pure v2
else
  cgdirs=()
  if [ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then cgdirs+=("/sys/fs/cgroup/unified/$CG"); fi
  if [ -d /sys/fs/cgroup/systemd ]; then cgdirs+=("/sys/fs/cgroup/systemd/$CG"); fi     # name=systemd v1
fi
printf '%s\n' "${cgdirs[@]}" > "$STATE/cgroups"            # recorded before creation, for teardown
enter_cgroups=
for c in "${cgdirs[@]}"; do mkdir "$c"; enter_cgroups+="echo \$\$ > $c/cgroup.procs; "; done
# podman (section 3) creates libpod_parent cgroups; teardown removes only those that are new
find /sys/fs/cgroup -maxdepth 2 -name libpod_parent -type d > "$STATE/libpod-parents-before" 2>/dev/null || true

sb_log "systemd: starting the user manager"
exec 9>/run/lock/mesh-sandbox-boot.lock; flock 9
if [ ! -d /run/systemd/system ]; then
  mkdir -p /run/systemd/system; fake_booted=1; touch "$STATE/fake-booted"
fi
setsid sh -c "$enter_cgroups exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME='$S/home' USER=root LOGNAME=root SHELL=/bin/sh XDG_RUNTIME_DIR='$RT' XDG_CONFIG_HOME='$CFG' \
  XDG_DATA_HOME='$R/usr/lib' XDG_CACHE_HOME='$S/home/.cache' XDG_STATE_HOME='$S/home/.local/state' \
  /usr/lib/systemd/systemd --user" </dev/null >"$S/manager.log" 2>&1 &
echo $! > "$STATE/manager.pid"
for _ in $(seq 100); do [ -S "$RT/systemd/private" ] && break; sleep 0.1; done
if [ "$fake_booted" = 1 ]; then rmdir /run/systemd/system; fake_booted=0; rm "$STATE/fake-booted"; fi
flock -u 9; exec 9>&-
[ -S "$RT/systemd/private" ] || sb_die "user manager did not come up: $(cat "$S/manager.log")"
# `is-system-running` says "offline" (a client-side look at /run/systemd/system): ask the manager
state=
for _ in $(seq 100); do
  state=$(XDG_RUNTIME_DIR=$RT systemctl --user show -p SystemState --value 2>/dev/null) || true
  case $state in running|degraded) break;; esac; sleep 0.1
done
case $state in running|degraded) ;; *) sb_die "user manager state is '$state', not running";; esac

# ------------------------------------------------------------------ 3. podman (rootful)
# runc (crun rejects hybrid cgroups; where /sys/fs/cgroup is cgroup2 only, crun if installed: Arch's
# default, and sid's), cgroupfs, explicit ulimits (no CAP_SYS_RESOURCE: the default
# nofile=1048576 fails, and podman lowers its own NPROC to 32768), no network, catatonit for --init.
sb_log "podman: config and image"
C=$SB/containers; mkdir -p "$C/storage" "$C/run" "$C/tmp" "$C/net" "$C/image/rootfs/bin" "$C/image/rootfs/tmp" "$C/image/rootfs/etc"
nofile=$(ulimit -Hn)
runtime=runc pids_limit=
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
  if command -v crun >/dev/null; then runtime=crun; fi
  # cgroup2 without the pids controller (here it is v1's): podman's default limit of 2048 would
  # make crun refuse to start any container ("controller `pids` is not available").
  grep -qw pids /sys/fs/cgroup/cgroup.controllers || pids_limit='pids_limit = 0'
fi
cat > "$C/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=32768:32768"]
netns = "none"
init_path = "/usr/bin/catatonit"
$pids_limit

[network]
network_config_dir = "$C/net"

[engine]
runtime = "$runtime"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$C/events.log"
tmp_dir = "$C/tmp"
CONF
cat > "$C/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$C/storage"
runroot = "$C/run"
CONF
cp /bin/busybox "$C/image/rootfs/bin/busybox"
for a in sh sleep echo cat ls ps id hostname true false; do ln -s busybox "$C/image/rootfs/bin/$a"; done
tar -C "$C/image/rootfs" --owner=0 --group=0 -cf "$C/image/rootfs.tar" .
CONTAINERS_CONF=$C/containers.conf CONTAINERS_STORAGE_CONF=$C/storage.conf \
  podman import -q --change 'CMD ["/bin/sh"]' "$C/image/rootfs.tar" localhost/mesh-test-busybox:latest >/dev/null

# ------------------------------------------------------------------ 4. env (its presence = setup done)
{
  echo "# generated by tests/sandbox/setup.sh; source it"
  printf 'export %s=%q\n' \
    MESH_SANDBOX "$SB" \
    MESH_PACMAN_CONF "$P/pacman.conf" \
    MESH_PACMAN_ROOT "$R" \
    MESH_PACMAN_REPO "$REPO" \
    MESH_PACMAN_OPTIONS "$PACMAN_OPTIONS" \
    XDG_RUNTIME_DIR "$RT" \
    XDG_CONFIG_HOME "$CFG" \
    XDG_DATA_HOME "$R/usr/lib" \
    MESH_UNIT_DIR "$CFG/systemd/user" \
    MESH_SYSTEMD_OFFLINE_ROOT "$S/offline-root" \
    CONTAINERS_CONF "$C/containers.conf" \
    CONTAINERS_STORAGE_CONF "$C/storage.conf" \
    MESH_TEST_IMAGE localhost/mesh-test-busybox:latest
} > "$SB/env.tmp"
mv "$SB/env.tmp" "$SB/env"
sb_log "ready: source $SB/env"
