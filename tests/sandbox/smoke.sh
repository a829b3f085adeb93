#!/usr/bin/env bash
# smoke.sh - quick self-check of a sandbox made by setup.sh: a few real pacman, systemctl --user
# and podman operations of the kinds the integration tests rely on. Leaves the sandbox as found.
# Prints "N passed, M failed"; exits 1 on any failure.   Usage: MESH_SANDBOX=/var/tmp/x tests/sandbox/smoke.sh
# shellcheck disable=SC2016  # the eval'd checks expand their variables when they run
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
[ -f "$MESH_SANDBOX/env" ] || sb_die "no sandbox at $MESH_SANDBOX (run setup.sh)"
source "$MESH_SANDBOX/env"
export LC_ALL=C
pass=0 fail=0
ok()  { if "$@" >/dev/null 2>&1; then pass=$((pass + 1)); echo "ok   $desc"; else fail=$((fail + 1)); echo "FAIL $desc"; fi; }
not() { ! "$@"; }
t()   { desc=$1; shift; ok "$@"; }

pac() { pacman --config "$MESH_PACMAN_CONF" --noconfirm "$@"; }
sc()  { systemctl --user "$@"; }
id=mesh-smoke-$$

# ------------------------------------------------------------------ pacman
t "pacman: mesh-a not installed (-Q exits 1)"       not pac -Q mesh-a
t "pacman: -S mesh-b mesh-d resolves dependencies"  pac -S --needed mesh-b mesh-d
t "pacman: mesh-a installed as dependency"          eval 'pac -Qi mesh-a | grep -qx "Install Reason  : Installed as a dependency for another package"'
t "pacman: files land under the sandbox root"       test -f "$MESH_PACMAN_ROOT/usr/share/mesh-b/marker"
t "pacman: -R of a needed package is refused"       not pac -R mesh-c
t "pacman: -Rs removes the dependencies too"        pac -Rs mesh-b mesh-d
t "pacman: nothing left installed"                  eval '[ -z "$(pac -Qq)" ]'

# ------------------------------------------------------------------ systemd --user
printf '%s\n' '[Unit]' 'Description=mesh-host smoke unit' '[Service]' 'ExecStart=/bin/sleep infinity' \
  '[Install]' 'WantedBy=default.target' > "$MESH_UNIT_DIR/$id.service"
t "systemd: daemon-reload"                          sc daemon-reload
t "systemd: enable --now a unit in MESH_UNIT_DIR"   sc enable --now "$id.service"
t "systemd: show: active, enabled"                  eval '[ "$(sc show -p ActiveState,UnitFileState --value "$id.service" | tr "\n" " ")" = "active enabled " ]'
t "systemd: disable --now"                          sc disable --now "$id.service"
t "systemd: inactive after stop (is-active exits 3)" eval 'sc is-active "$id.service"; [ $? = 3 ]'
t "systemd: packaged unit visible after pacman -S"  eval 'pac -S mesh-web && sc start mesh-web.service'
t "systemd: its FragmentPath is in the pacman root" eval '[[ "$(sc show -p FragmentPath --value mesh-web.service)" == "$MESH_PACMAN_ROOT"/usr/lib/systemd/user/* ]]'
t "systemd: stop it and pacman -R it"               eval 'sc stop mesh-web.service && pac -R mesh-web'
cp "$MESH_UNIT_DIR/$id.service" "$MESH_SYSTEMD_OFFLINE_ROOT/etc/systemd/system/"
t "systemd offline: enable --root"                  systemctl --root="$MESH_SYSTEMD_OFFLINE_ROOT" enable "$id.service"
t "systemd offline: is-enabled --root"              systemctl --root="$MESH_SYSTEMD_OFFLINE_ROOT" is-enabled "$id.service"
systemctl --root="$MESH_SYSTEMD_OFFLINE_ROOT" disable "$id.service" >/dev/null 2>&1 || true
rm -f "$MESH_UNIT_DIR/$id.service" "$MESH_SYSTEMD_OFFLINE_ROOT/etc/systemd/system/$id.service"
sc daemon-reload

# ------------------------------------------------------------------ podman
t "podman: test image present"                      podman image exists "$MESH_TEST_IMAGE"
t "podman: run --init -d"                           podman run --init -d --name "$id" --label mesh-host.owned=1 "$MESH_TEST_IMAGE" sleep 1000
t "podman: ps --format json shows it running"       eval 'podman ps -a --format json --filter "name=^$id\$" | grep -q "\"State\": \"running\""'
t "podman: stop is quick with --init"               timeout 5 podman stop -t 3 "$id"
t "podman: rm"                                      podman rm "$id"
t "podman: container gone (exists exits 1)"         eval 'podman container exists "$id"; [ $? = 1 ]'

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
