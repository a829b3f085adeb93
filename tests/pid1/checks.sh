# shellcheck shell=bash
# tests/pid1/checks.sh - the checks of the real-systemd tier (sourced by tests/pid1/run.sh, which
# provides in_ct, declare_file (which sets $DECLARED), $ROOT, $WORK, $VERSION, $CONFIG and $EVIDENCE). Each check_NAME
# runs in order, prints what it saw, and fails with `why` (what it expected); the harness then
# prints the check's evidence: every command it ran in the container, its output, its status.

ALL_CHECKS=(install verify start ready_after_start_run status_pid unit_converged reload
            journal refusals stop_during_transaction crash_during_transaction upgrade confirm_revert
            remove)

# The declarations the host must refuse: one JSON file each in tests/pid1/refused/ (add more there).
REFUSED_DIR=tests/pid1/refused

# why WHAT: the check fails here (each check runs in its own subshell), saying what it expected.
why() { echo "EXPECTED: $*"; exit 1; }

# ... | contains [GREP ARGS] PATTERN: whether the input has a match. Unlike `grep -q`, it reads all
# of its input, so the producer never dies of SIGPIPE and fails the pipeline (pipefail is on).
contains() { grep "$@" >/dev/null; }

# wait_until SECS WHAT CMD...: polls CMD (a shell function on this machine) until it succeeds;
# only the last poll's commands go into the evidence.
wait_until() {
  local secs=$1 what=$2 end real=$EVIDENCE; shift 2
  end=$(( $(date +%s) + secs ))
  while :; do
    EVIDENCE=$real.poll
    : > "$EVIDENCE"
    if "$@"; then EVIDENCE=$real; cat "$real.poll" >> "$real"; return 0; fi
    if [ "$(date +%s)" -ge "$end" ]; then
      EVIDENCE=$real
      { echo "(the last poll of: $what)"; cat "$real.poll"; } >> "$real"
      why "$what within $secs s"
    fi
    sleep 0.3
  done
}

# mesh-host status: exit 6 is "degraded" (a failing resource, say), which checks expect and read;
# any other failure is one (the tier runs with pipefail).
host_status() {
  local s=0
  in_ct mesh-host status "$@" || s=$?
  [ "$s" = 0 ] || [ "$s" = 6 ]
}
status_json() { host_status --json; }
# last_run: the newest run record the store holds, as JSON ({} when there is none).
last_run() { status_json | jq -c '.runs[-1] // {}' 2>/dev/null; }
main_pid() { in_ct systemctl show -p MainPID --value mesh-host.service; }
# run_is REVISION OUTCOME [TRIGGER]: the newest run is of REVISION, ended OUTCOME (and had TRIGGER).
run_is() {
  last_run | jq -e --argjson r "$1" --arg o "$2" --arg t "${3:-}" \
    '.revision == $r and .outcome == $o and ($t == "" or (.trigger | contains($t)))' >/dev/null
}
# now_us: a point in the journal (this machine's clock is the container's). Not a cursor:
# journalctl --after-cursor with -u or -p skips the first matching entry when the cursor's own
# entry does not match (systemd 252).
now_us() { date +%s%6N; }
# journal_since US [journalctl args]: mesh-host's journal entries after US, as JSON lines.
journal_since() {
  local t=$1; shift
  in_ct journalctl -q -u mesh-host.service -o json "$@" | grep '^{' \
    | jq -c --arg t "$t" 'select((.__REALTIME_TIMESTAMP | tonumber) > ($t | tonumber))'
}

# The declaration every check starts from: a unit file the host writes, enables and starts, with
# a restart_on file; and a oneshot unit that takes 3 s to start (a start run that repairs it is
# visibly long).
base() {
  jq -n --arg web "${1:-v1}" '{schema: 1,
    files: {"/etc/pid1/web.conf": {content: ($web + "\n")}},
    units: {
      "pid1-web.service": {content: "[Unit]\nDescription=pid1 tier web\n[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n",
                           enabled: true, active: true, restart_on: ["/etc/pid1/web.conf"]},
      "pid1-slowstart.service": {content: "[Unit]\nDescription=pid1 tier slow start\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/sleep 3\n",
                                 active: true}}}'
}
# declare_json JSON: the control plane declares JSON under the next revision ($DECLARED).
declare_json() {
  printf '%s\n' "$1" > "$WORK/next.json"
  declare_file "$WORK/next.json"
  echo "declared revision $DECLARED: $1"
}
# converge_to JSON: declares JSON and waits for the service's run of it to converge.
converge_to() {
  declare_json "$1"
  wait_until 90 "a converged run of revision $DECLARED" run_is "$DECLARED" converged
}

check_install() {
  in_ct pacman -U --noconfirm "/srv/pkgs/nox-mesh-host-$VERSION-1-x86_64.pkg.tar.zst" || why "pacman -U installs the package"
  [ "$(in_ct pacman -Q nox-mesh-host)" = "nox-mesh-host $VERSION-1" ] || why "pacman -Q: nox-mesh-host $VERSION-1"
  in_ct systemctl is-enabled mesh-host.service && why "not enabled by the install (post_install only prints how)"
  in_ct test -x /usr/bin/mesh-host -a -f /usr/lib/systemd/system/mesh-host.service -a -d /var/lib/mesh-host || why "binary, unit and store installed"
  # Joined to the tier's control plane by hand (what `mesh-host join` writes).
  printf '%s\n' "$CONFIG" > "$ROOT/etc/mesh-host/config.json"
}

check_verify() {
  local kill security
  kill=$(in_ct sh -c 'for d in /usr/bin /bin /usr/sbin /sbin /usr/local/bin; do [ -e "$d/kill" ] && echo "$d/kill"; done; true')
  [ -z "$kill" ] || why "no kill binary in the container (found $kill)"
  local said
  # --man=no: the container has no man(1) to look Documentation=man:mesh-host(8) up with;
  # tests/it/packaging.rs verifies the unit where the pages are installed.
  said=$(in_ct systemd-analyze verify --man=no mesh-host.service) || why "systemd-analyze verify exits 0"
  [ -z "$said" ] || why "systemd-analyze verify says nothing (it said: $said)"
  security=$(in_ct systemd-analyze security --no-pager mesh-host.service) || true
  printf '%s\n' "$security" > "$WORK/security.txt"
  echo "systemd-analyze security: $(grep 'Overall exposure' "$WORK/security.txt")"
}

check_start() {
  declare_json "$(base v1)"
  local started ended
  started=$(date +%s)
  in_ct systemctl enable --now mesh-host.service || why "systemctl enable --now mesh-host exits 0"
  ended=$(date +%s)
  echo "enable --now took $((ended - started)) s"
  [ "$(in_ct systemctl is-active mesh-host.service)" = active ] || why "active once enable --now returned"
  wait_until 90 "a converged run of revision $DECLARED" run_is "$DECLARED" converged
  local re='^idle; last run converged at [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} UTC \([0-9]+ changed, 0 failed\); next timer run at [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} UTC; link connected$'
  status_text() { [[ "$(in_ct systemctl show -p StatusText --value mesh-host.service)" =~ $re ]]; }
  wait_until 10 "StatusText matching $re" status_text
  in_ct systemctl status --no-pager mesh-host.service | contains '^ *Status: "idle; last run converged at' \
    || why "systemctl status shows the status line"
}

check_ready_after_start_run() {
  in_ct systemctl stop mesh-host.service || why "stop"
  in_ct systemctl stop pid1-slowstart.service || why "stop pid1-slowstart (drift the start run repairs)"
  local t0 t1
  t0=$(date +%s.%N)
  in_ct systemctl start mesh-host.service || why "systemctl start mesh-host exits 0"
  t1=$(date +%s.%N)
  echo "systemctl start took $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s"
  # The start run restarted pid1-slowstart (3 s) before READY=1: start blocked at least that long,
  # and the run was recorded before the unit became active.
  awk -v a="$t0" -v b="$t1" 'BEGIN {exit !(b - a >= 3)}' || why "systemctl start waits for the start run (>= 3 s)"
  local run active_enter
  run=$(last_run)
  echo "last run: $run"
  jq -e '.trigger | contains("start")' <<<"$run" >/dev/null || why "the newest run is the start run"
  jq -e '.outcome == "converged" and ([.changes[].key] | index("pid1-slowstart.service"))' <<<"$run" >/dev/null \
    || why "the start run converged and started pid1-slowstart.service"
  active_enter=$(in_ct systemctl show -p ActiveEnterTimestamp --value --timestamp=unix mesh-host.service | tr -d @)
  [ "$(jq .ended <<<"$run")" -le "$active_enter" ] || why "the run ended ($(jq .ended <<<"$run")) no later than the unit became active ($active_enter)"
  [ "$(in_ct systemctl is-active pid1-slowstart.service)" = active ] || why "pid1-slowstart active again"
}

check_status_pid() {
  local main status
  main=$(main_pid)
  status=$(status_json | jq -r '.service.pid')
  [ -n "$main" ] && [ "$main" != 0 ] && [ "$main" = "$status" ] || why "MainPID ($main) = mesh-host status's pid ($status)"
  host_status | contains "^service: running (pid $main)" || why "mesh-host status says running (pid $main)"
}

check_unit_converged() {
  in_ct test -f /etc/systemd/system/pid1-web.service || why "the unit file the host wrote"
  [ "$(in_ct systemctl is-enabled pid1-web.service)" = enabled ] || why "pid1-web enabled"
  [ "$(in_ct systemctl is-active pid1-web.service)" = active ] || why "pid1-web active"
  local before after
  before=$(in_ct systemctl show -p MainPID --value pid1-web.service)
  converge_to "$(base v2)"
  after=$(in_ct systemctl show -p MainPID --value pid1-web.service)
  [ "$after" != 0 ] && [ "$after" != "$before" ] || why "pid1-web restarted when /etc/pid1/web.conf changed (MainPID $before -> $after)"
  [ "$(cat "$ROOT/etc/pid1/web.conf")" = v2 ] || why "/etc/pid1/web.conf is v2"
}

check_reload() {
  in_ct sh -c '! command -v kill >/dev/null || [ "$(command -v kill)" = kill ]' || why "kill is at most a shell builtin here"
  local pid c
  pid=$(main_pid)
  c=$(now_us)
  in_ct systemctl reload mesh-host.service || why "systemctl reload exits 0 with no kill binary"
  reloaded() { journal_since "$c" | jq -r .MESSAGE | contains -x 'configuration reloaded'; }
  wait_until 20 "'configuration reloaded' in the journal" reloaded
  [ "$(main_pid)" = "$pid" ] || why "the same process reloaded (MainPID $pid)"
  [ "$(in_ct systemctl is-active mesh-host.service)" = active ] || why "still active"
}

check_journal() {
  local c entries
  c=$(now_us)
  declare_json "$(base v2 | jq '.packages = {"pid1-missing": {}}')"
  wait_until 90 "a failed run of revision $DECLARED" run_is "$DECLARED" failed
  local failing_revision=$DECLARED
  # Two problems: the rejection's message has two lines, and must stay one journal entry.
  declare_json "$(jq -s '.[0] * .[1]' "$REFUSED_DIR/dropin-file.json" "$REFUSED_DIR/unit-key.json")"
  local rejected=$DECLARED
  is_rejected() { journal_since "$c" | jq -r .MESSAGE | contains "^declaration revision $rejected rejected"; }
  wait_until 30 "declaration revision $rejected rejected, in the journal" is_rejected
  converge_to "$(base v2)"
  entries=$(journal_since "$c" -p err)
  echo "journalctl -u mesh-host -p err since the check began:"
  jq -r '"  <\(.PRIORITY)> \(.MESSAGE)"' <<<"$entries"
  [ "$(grep -c . <<<"$entries")" = 2 ] || why "exactly the 2 failures at err: the package and the rejected declaration"
  jq -e -s 'all(.PRIORITY == "3")' <<<"$entries" >/dev/null || why "both at PRIORITY=3"
  jq -r .MESSAGE <<<"$entries" | contains 'pid1-missing.* failed' || why "an err entry for package pid1-missing"
  jq -e -s --arg r "$rejected" 'map(select(.MESSAGE | startswith("declaration revision \($r) rejected")))
      | length == 1 and (.[0].MESSAGE | contains("mesh-host.service.d/x.conf") and contains("units[\"mesh-host.service\"]"))' \
      <<<"$entries" >/dev/null || why "the two-line rejection is one entry naming both problems"
  local all
  all=$(journal_since "$c")
  jq -e -s --arg r "$failing_revision" 'any(.PRIORITY == "4" and (.MESSAGE | test("^run failed: [0-9]+ changed, 1 failed$")))' <<<"$all" >/dev/null \
    || why "the failed run's summary at warning (PRIORITY=4)"
  jq -e -s 'any(.PRIORITY == "6" and (.MESSAGE | startswith("reconciling (")))' <<<"$all" >/dev/null \
    || why "each run's start at info (PRIORITY=6)"
  jq -e -s 'all(.MESSAGE | type == "string" and (test("^<[0-9]>") | not))' <<<"$all" >/dev/null \
    || why "journald parsed every <N> prefix (none left in a message)"
}

check_refusals() {
  local cat_before deps_before f c
  cat_before=$(in_ct systemctl cat mesh-host.service)
  deps_before=$(in_ct systemctl list-dependencies --reverse --plain --no-pager mesh-host.service)
  for f in "$REFUSED_DIR"/*.json; do
    c=$(now_us)
    declare_json "$(cat "$f")"
    local r=$DECLARED
    is_rejected() { journal_since "$c" -p err | jq -r .MESSAGE | contains "^declaration revision $r rejected: .*refused"; }
    wait_until 30 "$f: declaration revision $r rejected (refused), at err" is_rejected
    grep '^{' "$WORK/reports.jsonl" | jq -e -s --argjson r "$r" 'any(.revision == $r and .outcome == "rejected")' >/dev/null \
      || why "$f: the control plane got a rejected report of revision $r"
    [ "$(in_ct systemctl cat mesh-host.service)" = "$cat_before" ] || why "$f: systemctl cat mesh-host.service unchanged"
    [ "$(in_ct systemctl list-dependencies --reverse --plain --no-pager mesh-host.service)" = "$deps_before" ] \
      || why "$f: systemctl list-dependencies --reverse mesh-host.service unchanged"
    echo "refused as it must be: $f"
  done
  in_ct test ! -e /etc/systemd/system/mesh-host.service.d || why "no drop-in directory was made"
  [ "$(in_ct systemctl is-active mesh-host.service)" = active ] || why "mesh-host still active"
  converge_to "$(base v2)"
}

# The scriptlet of pid1-slow-stop takes 15 s: the stop comes while pacman is in the transaction.
check_stop_during_transaction() {
  declare_json "$(base v2 | jq '.packages = {"pid1-slow-stop": {}} | .files["/etc/pid1/after-stop"] = {content: "x\n"}')"
  local log=$ROOT/var/lib/pid1-slow-stop.log
  in_transaction() { grep -qx start "$log" 2>/dev/null; }
  wait_until 60 "pacman in pid1-slow-stop's transaction" in_transaction
  local t0 t1
  t0=$(date +%s)
  T=120 in_ct systemctl stop mesh-host.service || why "systemctl stop exits 0"
  t1=$(date +%s)
  echo "systemctl stop took $((t1 - t0)) s; the scriptlet said: $(tr '\n' ' ' < "$log")"
  grep -qx done "$log" || why "the transaction finished before the host stopped (scriptlet wrote done)"
  ! grep -q '^signal' "$log" || why "pacman and its scriptlet were never signalled ($(grep '^signal' "$log"))"
  [ $((t1 - t0)) -ge 5 ] || why "stop waited for the transaction"
  in_ct pacman -Q pid1-slow-stop || why "pid1-slow-stop installed"
  [ ! -e "$ROOT/var/lib/pacman/db.lck" ] || why "no db.lck left"
  [ "$(in_ct systemctl show -p Result --value mesh-host.service)" = success ] || why "Result=success"
  [ "$(in_ct systemctl show -p ExecMainStatus --value mesh-host.service)" = 0 ] || why "the host exited 0"
  last_run | jq -e --argjson r "$DECLARED" '.revision == $r and .outcome == "interrupted"' >/dev/null \
    || why "the run is recorded interrupted: $(last_run)"
  in_ct test ! -e /etc/pid1/after-stop || why "nothing after the package was applied once stopping"
  in_ct systemctl start mesh-host.service || why "start again"
  wait_until 90 "the next run converges revision $DECLARED" run_is "$DECLARED" converged
  in_ct test -e /etc/pid1/after-stop || why "the next run applied the rest"
}

# pid1-slow-crash's scriptlet takes 30 s, longer than RestartSec=15s: the host is killed during the
# transaction, pacman finishes it (pid1-zz-after comes after the slow scriptlet, so pacman writes
# its progress after the host, the reader of its pipes, is gone: it must not die of SIGPIPE), and
# the host comes back while pacman still holds db.lck. The packages are in pacman's database by
# then, so the start run finds them installed; a declaration sent meanwhile that wants another
# package makes the restarted host wait for the lock, then converge.
check_crash_during_transaction() {
  declare_json "$(base v2 | jq '.packages = {"pid1-slow-stop": {}, "pid1-slow-crash": {}, "pid1-zz-after": {}} | .files["/etc/pid1/after-stop"] = {content: "x\n"}')"
  local log=$ROOT/var/lib/pid1-slow-crash.log old restarts
  in_transaction() { grep -qx start "$log" 2>/dev/null; }
  wait_until 60 "pacman in pid1-slow-crash's transaction" in_transaction
  old=$(main_pid)
  restarts=$(in_ct systemctl show -p NRestarts --value mesh-host.service)
  local killed_at
  killed_at=$(now_us)
  in_ct systemctl kill --signal=SIGKILL --kill-who=main mesh-host.service || why "kill -9 of the host"
  declare_json "$(base v2 | jq '.packages = {"pid1-slow-stop": {}, "pid1-slow-crash": {}, "pid1-zz-after": {}, "pid1-plain": {}} | .files["/etc/pid1/after-stop"] = {content: "x\n"}')"
  sleep 1
  in_ct sh -c 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = pacman ] && echo "pacman pid ${p#/proc/} alive"; done; true' \
    | contains 'pacman pid' || why "pacman alive after the host was killed"
  finished() { grep -qx done "$log"; }
  wait_until 60 "the transaction finished (scriptlet wrote done)" finished
  ! grep -q '^signal' "$log" || why "pacman's scriptlet never signalled ($(grep '^signal' "$log"))"
  echo "the scriptlet said: $(tr '\n' ' ' < "$log")"
  unlocked() { [ ! -e "$ROOT/var/lib/pacman/db.lck" ]; }
  wait_until 60 "the killed host's pacman transaction ended (no db.lck)" unlocked
  in_ct sh -c 'tail -n 6 /var/log/pacman.log'
  # The killed host's transaction (the one that installed pid1-slow-crash) ended completed. Not
  # "the last transaction": the restarted host may already be in its own next one.
  in_ct awk '/installed pid1-slow-crash/ { seen = 1; next }
             seen && /\[ALPM\] transaction (started|completed|interrupted|failed)/ { print; exit }' \
    /var/log/pacman.log | contains 'transaction completed' \
    || why "pacman.log: the transaction that installed pid1-slow-crash completed"
  back() { local p; p=$(main_pid); [ -n "$p" ] && [ "$p" != 0 ] && [ "$p" != "$old" ]; }
  wait_until 60 "Restart= brings the host back (a new MainPID)" back
  [ "$(in_ct systemctl show -p NRestarts --value mesh-host.service)" -gt "$restarts" ] || why "NRestarts grew"
  wait_until 120 "the next run converges revision $DECLARED" run_is "$DECLARED" converged
  in_ct pacman -Q pid1-slow-crash pid1-zz-after pid1-plain || why "pid1-slow-crash, pid1-zz-after and pid1-plain installed"
  journal_since "$killed_at" | jq -r .MESSAGE | contains -E "(database is locked|database lock .* is held by).*; waiting$" \
    || why "the restarted host waited for the running pacman's db.lck"
}

check_upgrade() {
  local old inode_old c new
  old=$(main_pid)
  inode_old=$(stat -c %i "$ROOT/usr/bin/mesh-host")
  c=$(now_us)
  in_ct pacman -U --noconfirm "/srv/pkgs/nox-mesh-host-$VERSION-2-x86_64.pkg.tar.zst" || why "pacman -U of pkgrel 2"
  [ "$(in_ct pacman -Q nox-mesh-host)" = "nox-mesh-host $VERSION-2" ] || why "pacman -Q: $VERSION-2"
  back() { local p; p=$(main_pid); [ -n "$p" ] && [ "$p" != 0 ] && [ "$p" != "$old" ] \
             && [ "$(in_ct systemctl is-active mesh-host.service)" = active ]; }
  wait_until 60 "the service restarted (a new MainPID, active)" back
  new=$(main_pid)
  wait_until 60 "the new host's start run converged" run_is "$(cat "$WORK/revision")" converged start
  sleep 2   # room for a second restart, which must not come
  [ "$(main_pid)" = "$new" ] || why "restarted once only (MainPID $new then $(main_pid))"
  local starts
  starts=$(journal_since "$c" | jq -r .MESSAGE | grep -c '^reconciling (start' || true)
  [ "$starts" = 1 ] || why "one start run after the upgrade (saw $starts)"
  [ "$(in_ct readlink "/proc/$new/exe")" = /usr/bin/mesh-host ] || why "the running binary is the installed file, not a deleted one"
  [ "$(in_ct stat -L -c %i "/proc/$new/exe")" = "$(stat -c %i "$ROOT/usr/bin/mesh-host")" ] \
    && [ "$(stat -c %i "$ROOT/usr/bin/mesh-host")" != "$inode_old" ] || why "the running binary is pkgrel 2's new file (inode)"
  [ "$(in_ct "/proc/$new/exe" --version)" = "mesh-host $VERSION" ] \
    && [ "$(in_ct mesh-host --version)" = "mesh-host $VERSION" ] || why "--version of the running binary matches"
}

# Issue 22's end to end: the host reaches its control plane by a name in /etc/hosts; a declaration
# rewrites /etc/hosts so that the name points nowhere (127.0.0.2: the control plane listens on
# 127.0.0.1 only). A second control plane (same CA, node and secret) on its own port, holding its
# acks (--no-ack, --confirm-secs 15), pushes it; it is then restarted acking, on the same port, so
# the control plane is up but the host cannot reach it: the link fails, the window passes, the host
# puts /etc/hosts back by itself (revert) and reconnects. Prints the window's end to the reconnect.
check_confirm_revert() {
  local port r1 r2 decl=$WORK/confirm-declaration.json original deadline
  # Not local: the check's subshell runs this trap after the function has returned (or `why` has
  # exited), when its locals are gone; so the second control plane is stopped however it ends.
  CONFIRM_CP_PID=
  trap '[ -z "$CONFIRM_CP_PID" ] || { kill "$CONFIRM_CP_PID"; wait "$CONFIRM_CP_PID"; } 2>/dev/null' EXIT
  converge_to "$(base v2)"
  r1=$DECLARED r2=$((DECLARED + 1))
  confirmed() { status_json | jq -e --argjson r "$r1" '.generations.list[-1] | .revision == $r and .state.is == "confirmed"' >/dev/null; }
  wait_until 30 "revision $r1 confirmed by the tier's control plane" confirmed
  in_ct systemctl stop mesh-host.service || why "stop mesh-host"
  in_ct sh -c 'grep -v cp.mesh.test /etc/hosts > /etc/hosts.new; echo "127.0.0.1 cp.mesh.test" >> /etc/hosts.new; mv /etc/hosts.new /etc/hosts' \
    || why "cp.mesh.test -> 127.0.0.1 in the container's /etc/hosts"
  original=$(in_ct cat /etc/hosts)
  base v2 | jq --arg h "$(grep -v cp.mesh.test <<<"$original"; echo '127.0.0.2 cp.mesh.test')" \
    '.files["/etc/hosts"] = {content: ($h + "\n")}' > "$decl"
  # control_plane PORT [FLAG...]: the second control plane on 127.0.0.1:PORT (0: a free one).
  control_plane() {
    local at=$1; shift
    target/debug/examples/control-plane --listen "127.0.0.1:$at" --declaration "$decl" --revision "$r2" \
      --pki-dir "$WORK/pki" --node pid1 --secret-file "$WORK/secret" "$@" \
      >> "$WORK/confirm-reports.jsonl" 2>> "$WORK/confirm-cp.log" &
    CONFIRM_CP_PID=$!
  }
  control_plane 0 --no-ack --confirm-secs 15
  listening() { port=$(sed -n 's/^listening on 127.0.0.1://p' "$WORK/confirm-cp.log"); [ -n "$port" ]; }
  wait_until 20 "the second control plane listening" listening
  # The certificate names localhost: the host checks that name and connects to cp.mesh.test.
  jq --arg a "cp.mesh.test:$port" '.control_plane.address = $a | .control_plane.server_name = "localhost" | .confirm_secs = 15' \
    <<<"$CONFIG" > "$ROOT/etc/mesh-host/config.json"
  in_ct cat /etc/mesh-host/config.json /etc/hosts
  in_ct systemctl start mesh-host.service || why "start mesh-host with the control plane at cp.mesh.test:$port"
  reported() { grep '^{' "$WORK/confirm-reports.jsonl" | jq -e -s --argjson r "$r2" 'any(.revision == $r and .outcome == "converged")' >/dev/null; }
  wait_until 60 "a converged report of revision $r2 (not acked)" reported
  in_ct grep -x '127.0.0.2 cp.mesh.test' /etc/hosts || why "revision $r2 pointed cp.mesh.test to 127.0.0.2"
  deadline=$(status_json | jq -e --argjson r "$r2" '.generations.list[-1] | select(.revision == $r and .state.is == "pending") | .state.deadline') \
    || why "revision $r2 pending"
  host_status | contains 'pending: reverted in' || why "mesh-host status says revision $r2 is pending"
  # The link breaks: the control plane comes back at once, acking, on the same port, with
  # revision $r2 as its newest (not pushed again); the host's reconnects go to 127.0.0.2.
  local killed
  killed=$(now_us)
  kill "$CONFIRM_CP_PID"; wait "$CONFIRM_CP_PID" 2>/dev/null
  : > "$WORK/confirm-cp.log"
  control_plane "$port"
  listening_again() { [ "$(sed -n 's/^listening on //p' "$WORK/confirm-cp.log")" = "127.0.0.1:$port" ]; }
  wait_until 20 "the control plane back on 127.0.0.1:$port" listening_again
  # The host connects to cp.mesh.test:$port and is refused: the name now points to 127.0.0.2.
  refused() { journal_since "$killed" | jq -r .MESSAGE | contains -x "link ended: .*Connection refused.*"; }
  wait_until 30 "a reconnect to cp.mesh.test:$port refused, in the journal" refused
  [ "$(date +%s)" -lt "$deadline" ] || why "the link failed before the deadline ($deadline)"
  ! grep -q '^hello: ' "$WORK/confirm-cp.log" || why "no hello reached the control plane before the revert"
  reverted() { status_json | jq -e --argjson r "$r2" '.generations.reverted.revision == $r' >/dev/null; }
  wait_until 60 "revision $r2 reverted (deadline $deadline)" reverted
  # The newest revert run, not the newest run: the revert puts cp.mesh.test back, and a reconnect
  # whose jittered backoff is near 0 s may run again (a no-op) before this looks.
  revert_run() { status_json | jq -c '[.runs[] | select(.trigger | contains("revert"))] | last // {}'; }
  revert_run | jq -e --argjson r "$r1" '.revision == $r and .outcome == "converged"' >/dev/null \
    || why "the newest revert run converged to revision $r1: $(revert_run)"
  [ "$(in_ct cat /etc/hosts)" = "$original" ] || why "/etc/hosts back to its original content"
  host_status | contains "^reverted: .*$r2 .* back to .*$r1" || why "mesh-host status names the revert"
  hello() { grep '^hello: ' "$WORK/confirm-cp.log" | sed 's/^hello: //' \
              | jq -e -s --argjson r1 "$r1" --argjson r2 "$r2" 'any(.revision == $r2 and .reverted.revision == $r2 and .reverted.to_revision == $r1)' >/dev/null; }
  wait_until 120 "a hello naming revision $r2 reverted to $r1" hello
  report() { grep '^{' "$WORK/confirm-reports.jsonl" | jq -e -s --argjson r1 "$r1" --argjson r2 "$r2" \
               'any(.revision == $r1 and .reverted.revision == $r2 and .reverted.to_revision == $r1
                    and (.reverted.why | contains("Connection refused")))' >/dev/null; }
  wait_until 30 "the control plane received the revert's report (why: the refused reconnect)" report
  local entries revert_us up_us
  entries=$(journal_since "$killed")
  revert_us=$(jq -r -s --arg m "revision $r2 reverted: " 'map(select(.MESSAGE | startswith($m))) | .[0].__REALTIME_TIMESTAMP // empty' <<<"$entries")
  up_us=$(jq -r -s 'map(select(.MESSAGE == "link up")) | .[0].__REALTIME_TIMESTAMP // empty' <<<"$entries")
  [ -n "$revert_us" ] && [ -n "$up_us" ] || why "the revert's run and the link up in the journal"
  [ "$up_us" -gt "$revert_us" ] || why "no link up between the link's failure and the revert"
  jq -r '"  \(.__REALTIME_TIMESTAMP) \(.MESSAGE)"' <<<"$entries"
  awk -v d="$deadline" -v r="$revert_us" -v u="$up_us" 'BEGIN {
    printf "figure: window ended at %d; reverted %.2f s after; reconnected (link up) %.2f s after the window ended\n",
      d, r / 1e6 - d, u / 1e6 - d }'
  # Back to the tier's control plane (its revision is older: nothing is pushed).
  printf '%s\n' "$CONFIG" > "$ROOT/etc/mesh-host/config.json"
  in_ct systemctl restart mesh-host.service || why "restart on the tier's control plane"
}

check_remove() {
  in_ct pacman -R --noconfirm nox-mesh-host || why "pacman -R nox-mesh-host"
  [ "$(in_ct systemctl is-active mesh-host.service)" != active ] || why "the service stopped"
  in_ct systemctl is-enabled mesh-host.service && why "the service is no longer enabled"
  in_ct test ! -e /etc/systemd/system/multi-user.target.wants/mesh-host.service || why "the enablement link is gone"
  in_ct test ! -e /usr/bin/mesh-host || why "the binary is gone"
  in_ct test -f /var/lib/mesh-host/runs.json -a -f /var/lib/mesh-host/ledger.json || why "the store is kept"
  in_ct test -d /etc/mesh-host || why "the config dir is kept"
  return 0
}
