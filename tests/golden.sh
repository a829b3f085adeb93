#!/usr/bin/env bash
# golden.sh - every mesh-host command, in text and --json form, on fixed inputs: a record of what
# the binary prints (stdout, stderr, exit code) to compare one build against another (issue 26:
# "every command's text and --json output identical before and after on the same inputs").
#
#   tests/golden.sh record BINARY OUTDIR [--sandbox]
#       Runs every case with BINARY on scratch hosts (a target root under --root, a store, a
#       config) in a temporary directory, and writes OUTDIR/SCENARIO/FORM/NNN-CASE/ with `cmd`
#       (the command line), `stdout`, `stderr` and `exit`, normalised (see normalise() below).
#       FORM is `text` or `json`: each scenario runs twice, on two hosts of its own, the second
#       time with --json added to every mesh-host command line, so both forms see the same states.
#       --sandbox also runs the packages/units/containers scenario against the real pacman,
#       systemctl --user and podman of a sandbox that must be set up and sourced first:
#         MESH_SANDBOX=/tmp/sb-x SKIP_APT=1 tests/sandbox/setup.sh && source /tmp/sb-x/env
#       OUTDIR must not exist (or be empty). Run as root (files are chowned in the scratch root).
#   tests/golden.sh compare [--ignore-log-targets] DIR_A [DIR_B]
#       diff -ru of two recorded directories (DIR_B defaults to tests/golden/expected, the record
#       of the current behaviour, made with --sandbox); exits 1 on any difference, 0 when
#       identical. A change of output on purpose records it again (and says so in its commit).
#       --ignore-log-targets compares log lines without their module path (`[WARN  mesh_host::
#       commands::converge]` as `[WARN  mesh_host]`), which moving a file changes by itself;
#       the records are not changed.
#
# A debug and a release build record the same. About 15 s; 90 s with --sandbox.
# tests/run.sh records the debug build on its fresh sandbox and compares, before the tests.
#
# Example, after a change:
#   cargo build --release && tests/golden.sh record target/release/mesh-host /tmp/after --sandbox
#   tests/golden.sh compare /tmp/after
#
# The record first made at 21d51db differed from the layered tree's (issue 26) in exactly the
# three command-line fixes the `issue26-*` cases show (`--json=false`, a relative --state-dir, a
# non-UTF-8 argument) and in the log target of one moved module (git log -- tests/golden).
# Anything else that differs is a change of behaviour.
#
# Scenarios: files (a scratch root's whole life: apply, drift, repair, failure, .pacnew, expiry,
# signed, release, a broken store), errors (command line, declarations, configs, keys, sign,
# check with trusted keys, join, reload), service (`run`, `status` while it runs, `reload`,
# SIGUSR1, SIGTERM), sandbox (packages, units, containers on the real tools). Each case's
# `cmd` says what ran; the root's tree (modes, owners, content hashes) and the metrics file are
# recorded as cases too.
#
# The fixtures (declarations, two throwaway ed25519 test keys) are in tests/golden/fixtures/.
# A sandbox whose repo was bumped (tests/sandbox/bump-package.sh) prints other versions: record
# with a freshly set-up sandbox.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FIX=$here/golden/fixtures

die() { echo "golden.sh: $*" >&2; exit 2; }

# ---------------------------------------------------------------------------- normalisation
# THE ONE PLACE where output is rewritten before it is stored. Only what legitimately differs
# between two runs of the same binary on the same inputs:
#   - the scratch directory (a mktemp path)            -> <WORK>
#   - the sandbox directory ($MESH_SANDBOX)            -> <SANDBOX>
#   - the binary's path (in `cmd` only, really)        -> mesh-host
#   - public keys `keygen` just generated (random)     -> <KEYGEN-KEY-N>
#   - Unix times of now (10 digits, 1600000000..1999999999: run records, in-force `since`,
#     lock holders, metrics timestamps; the fixtures' own times are outside that range)
#                                                      -> <UNIXTIME>
#   - the same times as dates people read (`2026-12-06 20:15:29 UTC`, years 2020-2039)
#                                                      -> <DATE>
#   - ages and waits said in words: `N s|min|h|days ago`, `in N ...`, `since N ...`, `over N ...`
#     (words.rs's age/duration_words)                  -> <AGE>
#   - process ids: `pid N`, JSON `"pid": N`            -> <PID>
#   - digests keyed by the store's random digest key (secret content, and a container's spec,
#     whose env is secret): `keyed digest HEX16`, `mesh-host.spec=HEX32` -> <KEYED>
#   - a panic's thread id: `thread 'main' (N)`         -> (<TID>)
#   - metrics that are durations: `mesh_host_last_run_duration_seconds N`,
#     `mesh_host_declaration_age_seconds N`            -> <SECONDS>
LITERALS=() # pairs: literal text, replacement (added at run time: WORK, SANDBOX, keygen keys)
literal() { LITERALS+=("$1" "$2"); }
normalise() { # normalise FILE...: rewrites each file in place
  local script='' i pattern
  for ((i = 0; i < ${#LITERALS[@]}; i += 2)); do
    pattern=$(printf '%s' "${LITERALS[i]}" | sed -e 's/[][\.*^$+?(){}|#/]/\\&/g')
    script+="s#${pattern}#${LITERALS[i + 1]}#g;"
  done
  local age='[0-9]+ (s|min|h|days?)( [0-9]+ (min|h))?'
  script+="s/\\b1[6-9][0-9]{8}\\b/<UNIXTIME>/g;"
  script+="s/\\b20[23][0-9]-[01][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-5][0-9] UTC\\b/<DATE>/g;"
  script+="s/${age} ago\\b/<AGE> ago/g;"
  script+="s/\\b(in|since|over) ${age}\\b/\\1 <AGE>/g;"
  script+="s/\\bpid [0-9]+/pid <PID>/g;"
  script+="s/\"pid\": [0-9]+/\"pid\": <PID>/g;"
  script+="s/keyed digest [0-9a-f]{16}\\b/keyed digest <KEYED>/g;"
  script+="s/mesh-host\\.spec=[0-9a-f]{32}\\b/mesh-host.spec=<KEYED>/g;"
  script+="s/^thread '([^']*)' \\([0-9]+\\)/thread '\\1' (<TID>)/;"
  script+="s/^(mesh_host_last_run_duration_seconds|mesh_host_declaration_age_seconds) [0-9]+(\\.[0-9]+)?$/\\1 <SECONDS>/;"
  sed -E -i -e "$script" "$@"
}

# ---------------------------------------------------------------------------- compare
if [ "${1:-}" = compare ]; then
  shift
  targets=0
  [ "${1:-}" = --ignore-log-targets ] && { targets=1; shift; }
  [ $# -ge 1 ] && [ $# -le 2 ] || die "usage: golden.sh compare [--ignore-log-targets] DIR_A [DIR_B]"
  a=$1 b=${2:-$here/golden/expected}
  [ -d "$a" ] || die "$a is not a directory"
  [ -d "$b" ] || die "$b is not a directory"
  if [ "$targets" = 1 ]; then
    tmp=$(mktemp -d /tmp/mesh-golden-compare.XXXXXX)
    trap 'rm -rf "$tmp"' EXIT
    mkdir "$tmp/a" "$tmp/b"
    cp -a "$a/." "$tmp/a/"; cp -a "$b/." "$tmp/b/"
    find "$tmp" -name stderr -exec sed -E -i \
      's/^\[(ERROR|WARN|INFO|DEBUG|TRACE)( +)mesh_host(::[a-z0-9_]+)*\]/[\1\2mesh_host]/' {} +
    if ! diff -ru "$tmp/b" "$tmp/a" > "$tmp/diff"; then
      sed -e "s#$tmp/b#$b#g" -e "s#$tmp/a#$a#g" "$tmp/diff"
      echo "golden.sh: DIFFERENT (log targets ignored): $b (-) and $a (+)" >&2
      exit 1
    fi
    echo "golden.sh: identical, log targets ignored: $b and $a ($(find "$a" -name exit | wc -l) cases)"
    exit 0
  fi
  if diff -ru "$b" "$a"; then
    echo "golden.sh: identical: $b and $a ($(find "$a" -name exit | wc -l) cases)"
    exit 0
  fi
  echo "golden.sh: DIFFERENT: $b (-) and $a (+)" >&2
  exit 1
fi

# ---------------------------------------------------------------------------- record
[ "${1:-}" = record ] && [ $# -ge 3 ] || die "usage: golden.sh record BINARY OUTDIR [--sandbox] | compare [--ignore-log-targets] DIR_A [DIR_B]"
BIN=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
OUT=$3
SANDBOX=0
[ "${4:-}" = --sandbox ] && SANDBOX=1
[ -x "$BIN" ] || die "$2 is not an executable"
[ -e "$OUT" ] && [ -n "$(ls -A "$OUT")" ] && die "$OUT exists and is not empty"
if [ "$SANDBOX" = 1 ]; then
  [ -n "${MESH_SANDBOX:-}" ] && [ -e "$MESH_SANDBOX/env" ] \
    || die "--sandbox: set one up and source its env first (see the top of this script)"
fi
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d /tmp/mesh-golden.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
literal "$WORK" '<WORK>'
literal "$BIN" 'mesh-host'
[ "$SANDBOX" = 1 ] && literal "$MESH_SANDBOX" '<SANDBOX>'
# What could make the same binary print otherwise: logging, colour, the journal, locale.
unset RUST_LOG RUST_BACKTRACE JOURNAL_STREAM NOTIFY_SOCKET LISTEN_FDS
export NO_COLOR=1 LC_ALL=C TZ=UTC
umask 022

SCEN= FORM= CASEN=0 HOST= ALL_CASES=0
# scenario NAME FORM: the cases that follow go to OUT/NAME/FORM; a fresh host in WORK/NAME-FORM.
scenario() {
  SCEN=$1 FORM=$2 CASEN=0
  HOST=$WORK/$SCEN-$FORM
  mkdir -p "$HOST/root/etc" "$OUT/$SCEN/$FORM"
  # The target root's accounts, for owner/group by name.
  printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'app:x:1234:1234::/srv/app:/usr/sbin/nologin' \
    > "$HOST/root/etc/passwd"
  printf '%s\n' 'root:x:0:' 'app:x:1234:' > "$HOST/root/etc/group"
  cp "$FIX"/*.json "$FIX"/*.pem "$HOST/"
  echo "{\"metrics_file\": \"$HOST/metrics.prom\"}" > "$HOST/config.json"
}

# case_dir NAME: the next case's directory.
case_dir() {
  CASEN=$((CASEN + 1)); ALL_CASES=$((ALL_CASES + 1))
  D=$OUT/$SCEN/$FORM/$(printf '%03d' "$CASEN")-$1
  mkdir -p "$D"
}

# raw NAME ARGS...: `mesh-host ARGS` (plus --json in the json form) run in the host's directory,
# stdin from $STDIN (default /dev/null), under the command $WRAP if set (e.g. flock).
raw() {
  local name=$1; shift
  local args=("$@")
  [ "$FORM" = json ] && args+=(--json)
  case_dir "$name"
  local wrap=()
  [ -n "${WRAP:-}" ] && read -r -a wrap <<< "$WRAP"
  printf '%q ' "${wrap[@]}" "$BIN" "${args[@]}" | sed 's/ $//' > "$D/cmd"; echo >> "$D/cmd"
  # The subshell's own stderr is dropped: bash's "Aborted" when the binary panics.
  (cd "$HOST" && "${wrap[@]}" "$BIN" "${args[@]}" <"${STDIN:-/dev/null}" >"$D/stdout" 2>"$D/stderr") 2>/dev/null
  echo $? > "$D/exit"
  normalise "$D/cmd" "$D/stdout" "$D/stderr"
}

# mh NAME ARGS...: raw, on the host: its store, config and scratch root.
mh() {
  local name=$1; shift
  raw "$name" --state-dir "$HOST/state" --config "$HOST/config.json" --root "$HOST/root" "$@"
}

# snap NAME SHELL-COMMAND: what a shell command prints, as a case (the root's tree, metrics).
snap() {
  case_dir "$1"
  echo "$2" > "$D/cmd"
  (cd "$HOST" && bash -c "$2" </dev/null >"$D/stdout" 2>"$D/stderr")
  echo $? > "$D/exit"
  normalise "$D/cmd" "$D/stdout" "$D/stderr"
}

# The target root as written: type, mode, owner, size and SHA-256 of each entry (no times).
TREE='cd root && find . -mindepth 1 | LC_ALL=C sort | while read -r p; do
  if [ -f "$p" ]; then echo "$(stat -c "%A %u:%g %s" "$p") $(sha256sum < "$p" | cut -c1-16) $p"
  elif [ -L "$p" ]; then echo "$(stat -c "%A %u:%g" "$p") $p -> $(readlink "$p")"
  else echo "$(stat -c "%A %u:%g" "$p") $p"; fi; done'

# ---------------------------------------------------------------------------- the files kind
# A whole life on a scratch root: nothing yet, apply, drift and repair, a change with a failure,
# .pacnew, an expired and a signed declaration, release of everything.
files_scenario() {
  scenario files "$1"
  mh status-no-store status
  mh owned-no-store owned
  mh reconcile-no-store reconcile
  # What is there before: a file to take over, one declared absent, one in the way, a .pacnew.
  printf 'original\n' > "$HOST/root/etc/existing.conf"
  printf 'old\n' > "$HOST/root/etc/old.conf"
  printf 'a file, not a directory\n' > "$HOST/root/etc/blocker"
  printf 'motd from the package\n' > "$HOST/root/etc/motd.pacnew"
  snap tree-before "$TREE"
  mh check-v1 check files-v1.json
  mh plan-v1 plan files-v1.json
  mh plan-v1-traced plan --trace-commands files-v1.json
  mh apply-v1 apply files-v1.json
  mh apply-v1-again apply files-v1.json
  mh status-v1 status
  mh owned-v1 owned
  snap tree-v1 "$TREE"
  snap metrics-v1 'cat metrics.prom'
  # Drift: content, mode, a file removed, a released-absent file back.
  printf 'edited by hand\n' > "$HOST/root/etc/motd"
  chmod 0644 "$HOST/root/etc/app/app.conf"
  rm "$HOST/root/etc/app/blob.bin"
  printf 'back\n' > "$HOST/root/etc/old.conf"
  mh owned-drifted owned
  mh plan-drifted plan files-v1.json
  mh reconcile-repairs reconcile
  mh reconcile-in-sync reconcile
  mh reconcile-wait reconcile --wait
  # A new revision: changed, released, added, and one that fails (its parent is a file).
  mh check-v2 check files-v2.json
  mh plan-v2 plan files-v2.json
  mh apply-v2-fails apply files-v2.json
  mh reconcile-fails-again reconcile
  mh status-failing status
  mh owned-v2 owned
  snap metrics-failing 'cat metrics.prom'
  snap tree-v2 "$TREE"
  # The lock held by another process: exit 3.
  WRAP="flock $HOST/state/lock" mh apply-locked apply files-v2.json
  # Expired, and with no revision.
  mh check-expired check expired.json
  mh apply-expired apply expired.json
  mh status-expired status
  mh apply-norevision apply norevision.json
  # Signed: sign with a fixed key, apply the envelope, status shows who signed it.
  raw sign-for-apply sign --key key-a.pem files-v1.json --config "$HOST/config.json"
  cp "$D/stdout" "$HOST/signed-v1.json"
  mh apply-signed apply signed-v1.json
  mh status-signed status
  # Everything released: taken-over files get their originals back.
  mh plan-release plan empty.json
  mh apply-release apply empty.json
  mh owned-released owned
  mh status-released status
  snap tree-released "$TREE"
  snap metrics-released 'cat metrics.prom'
  # A store that cannot be read: status and reconcile say so (exit 4).
  printf 'not json' > "$HOST/state/ledger.json"
  mh status-bad-ledger status
  mh reconcile-bad-ledger reconcile
  mh owned-bad-ledger owned
  printf '{"schema": 1, "files": {"/etc/motd": {"content": "tampered"}}}' > "$HOST/state/declaration.json"
  mh status-bad-in-force status
}

# ---------------------------------------------------------------------------- errors
# What is refused or cannot run: the command line, declarations, configs, keys, join, reload.
errors_scenario() {
  scenario errors "$1"
  # The command line.
  raw no-arguments
  raw unknown-command frobnicate
  raw unknown-option status --bogus
  raw missing-value plan files-v1.json --root
  raw missing-file-argument apply
  raw extra-argument check files-v1.json extra
  raw join-option-elsewhere status --token t
  raw key-option-elsewhere check files-v1.json --key key-a.pem
  raw out-option-elsewhere status --out x
  raw help help
  raw help-short -h
  raw help-long --help
  raw help-after-command status --help
  raw version-short -V
  raw version-long --version
  # Known command-line bugs issue 26 fixes on purpose: these cases are expected to change.
  raw issue26-json-false --state-dir "$HOST/state" --config "$HOST/config.json" status --json=false
  raw issue26-relative-state-dir --state-dir state --config "$HOST/config.json" status
  raw issue26-non-utf8-argument --state-dir "$HOST/state" --config "$HOST/config.json" status "$(printf '\xff')"
  # Declarations that are refused (exit 2, nothing changed).
  mh check-missing-file check no-such-file.json
  mh plan-missing-file plan no-such-file.json
  mh check-bad-syntax check bad-syntax.json
  mh check-duplicate-key check duplicate-key.json
  mh check-not-utf8 check not-utf8.json
  mh check-invalid check invalid.json
  mh plan-invalid plan invalid.json
  mh apply-invalid apply invalid.json
  mh check-self check self.json
  mh apply-self apply self.json
  mh check-directory check /
  mh status-after-refusals status
  # Configs.
  echo '{"max_declaration_bytes": 100}' > "$HOST/small.json"
  echo '{"state_dir": "relative"}' > "$HOST/relative.json"
  echo '{"colour": "blue"}' > "$HOST/unknown.json"
  echo '{"signatures_required": 2}' > "$HOST/nokeys.json"
  echo '{"trusted_keys": ["ed25519:x"]}' > "$HOST/badkey.json"
  echo '{"interval_secs": 0}' > "$HOST/zero.json"
  echo '{' > "$HOST/broken.json"
  for c in small relative unknown nokeys badkey zero broken; do
    raw "config-$c" --state-dir "$HOST/state" --config "$HOST/$c.json" check files-v1.json
  done
  raw config-relative-state-dir --config "$HOST/relative.json" status
  raw config-missing --state-dir "$HOST/state" --config "$HOST/no-such-config.json" status
  # Keys and signing (fixed keys: ed25519 signatures are deterministic).
  raw keygen keygen --out "$HOST/new-key.pem"
  literal "$(grep -o -m1 'ed25519:[A-Za-z0-9+/=]*' "$D/stdout")" "<KEYGEN-KEY-$FORM>"
  normalise "$D/stdout"
  raw keygen-exists keygen --out "$HOST/new-key.pem"
  raw keygen-no-out keygen
  raw keygen-no-dir keygen --out "$HOST/no/such/dir/key.pem"
  raw sign sign --key key-a.pem files-v1.json --config "$HOST/config.json"
  cp "$D/stdout" "$HOST/signed-a.json"
  raw sign-again sign --key key-a.pem signed-a.json --config "$HOST/config.json"
  raw sign-second sign --key key-b.pem signed-a.json --config "$HOST/config.json"
  cp "$D/stdout" "$HOST/signed-ab.json"
  raw sign-norevision sign --key key-a.pem norevision.json --config "$HOST/config.json"
  raw sign-invalid sign --key key-a.pem invalid.json --config "$HOST/config.json"
  raw sign-bad-key sign --key files-v1.json files-v1.json --config "$HOST/config.json"
  raw sign-no-key sign files-v1.json --config "$HOST/config.json"
  sed 's/workers = 4/workers = 5/' "$HOST/signed-a.json" > "$HOST/tampered.json"
  raw sign-tampered sign --key key-b.pem tampered.json --config "$HOST/config.json"
  local key_a key_b
  key_a=$(grep -o '"key": *"ed25519:[^"]*"' "$HOST/signed-a.json" | head -n1 | grep -o 'ed25519:[^"]*')
  key_b=$(grep -o '"key": *"ed25519:[^"]*"' "$HOST/signed-ab.json" | tail -n1 | grep -o 'ed25519:[^"]*')
  echo "{\"trusted_keys\": [\"$key_a\"]}" > "$HOST/trust-a.json"
  echo "{\"trusted_keys\": [\"$key_b\"]}" > "$HOST/trust-b.json"
  echo "{\"trusted_keys\": [\"$key_a\", \"$key_b\"], \"signatures_required\": 2}" > "$HOST/trust-ab.json"
  mh check-signed-no-trust check signed-a.json
  mh check-tampered check tampered.json
  mh apply-tampered apply tampered.json
  for t in a b ab; do
    for f in signed-a signed-ab files-v1; do
      raw "check-$f-trust-$t" --state-dir "$HOST/state" --config "$HOST/trust-$t.json" check "$f.json"
    done
  done
  # join: the arguments, and a control plane that does not answer (exit 4, nothing written).
  local hash=sha256:$(printf '0%.0s' {1..64})
  echo 'one-time-token' > "$HOST/token"
  raw join-no-args join
  raw join-no-token join --control-plane https://127.0.0.1:1 --ca-hash "$hash"
  raw join-no-hash join --control-plane https://127.0.0.1:1 --token-file token
  raw join-http join --control-plane http://127.0.0.1:1 --token-file token --ca-hash "$hash"
  raw join-path join --control-plane https://127.0.0.1:1/v1 --token-file token --ca-hash "$hash"
  raw join-bad-port join --control-plane https://127.0.0.1:0 --token-file token --ca-hash "$hash"
  raw join-bad-hash join --control-plane https://127.0.0.1:1 --token-file token --ca-hash sha256:00
  raw join-both-tokens join --control-plane https://127.0.0.1:1 --token t --token-file token --ca-hash "$hash"
  raw join-bad-token join --control-plane https://127.0.0.1:1 '--token=a b' --ca-hash "$hash"
  raw join-bad-trust-key join --control-plane https://127.0.0.1:1 --token-file token --ca-hash "$hash" --trust-key x
  raw join-missing-token-file --config "$HOST/join-config.json" join --control-plane https://127.0.0.1:1 --token-file no-such-token --ca-hash "$hash"
  STDIN=/dev/null raw join-empty-stdin --config "$HOST/join-config.json" join --control-plane https://127.0.0.1:1 --token - --ca-hash "$hash"
  raw join-unreachable --config "$HOST/join-config.json" join --control-plane https://127.0.0.1:1 --token-file token --ca-hash "$hash"
  snap join-wrote-nothing 'ls -A'
  # reload: no service in the store, a process that is not mesh-host, none at all.
  mh reload-no-service reload
  raw reload-not-mesh-host reload 1
  raw reload-no-process reload 2147483647
  raw reload-bad-pid reload zero
}

# ---------------------------------------------------------------------------- the service
# `run` with no control plane: the start run, status while it runs, `reload` (SIGHUP), SIGUSR1,
# SIGTERM. Waits on the store, not on time, so each case sees a settled service.
service_scenario() {
  scenario service "$1"
  mh apply apply files-v1.json
  case_dir run
  local args=(--state-dir "$HOST/state" --config "$HOST/config.json" --root "$HOST/root" run)
  [ "$FORM" = json ] && args+=(--json)
  printf '%q ' "$BIN" "${args[@]}" | sed 's/ $//' > "$D/cmd"; echo >> "$D/cmd"
  local run_dir=$D
  (cd "$HOST" && exec "$BIN" "${args[@]}" </dev/null >"$run_dir/stdout" 2>"$run_dir/stderr") &
  local pid=$!
  # wait_for SHELL-TEST: up to 20 s; then until the service published its state after the last
  # run (service.json newer than runs.json, and than quiet.json where no-op runs go), and a
  # moment for it to settle.
  wait_for() {
    local i s=$HOST/state
    for i in $(seq 200); do
      bash -c "$1" && [ "$s/service.json" -nt "$s/runs.json" ] &&
        { [ ! -e "$s/quiet.json" ] || [ "$s/service.json" -nt "$s/quiet.json" ]; } &&
        { sleep 0.5; return 0; }
      sleep 0.1
    done
    echo "golden.sh: service scenario: timed out waiting for: $1" >&2; return 1
  }
  wait_for "grep -q '\"running\"' '$HOST/state/service.json' 2>/dev/null && grep -qs '\"start\"' '$HOST/state/runs.json' '$HOST/state/quiet.json'"
  mh status-running status
  mh reload reload
  wait_for "grep -q reload '$run_dir/stderr'"
  kill -USR1 "$pid"
  wait_for "grep -qs '\"signal\"' '$HOST/state/runs.json' '$HOST/state/quiet.json'"
  mh status-after-signal status
  kill -TERM "$pid"
  wait "$pid"; echo $? > "$run_dir/exit"
  normalise "$run_dir/cmd" "$run_dir/stdout" "$run_dir/stderr"
  mh status-stopped status
}

# ---------------------------------------------------------------------------- the sandbox
# packages, units and containers on the real tools: install, drift, repair, a failure, release.
sandbox_scenario() {
  scenario sandbox "$1"
  local unit_dir=$MESH_UNIT_DIR
  cat > "$HOST/config.json" <<EOF
{"pacman": {"command": ["pacman", "--config", "$MESH_PACMAN_CONF"]},
 "systemctl": {"command": ["systemctl", "--user"]},
 "podman": {"command": ["podman"]},
 "unit_dir": "$unit_dir", "watch": false}
EOF
  sed -e "s#@IMAGE@#$MESH_TEST_IMAGE#g" "$FIX/sandbox-v1.json.in" > "$HOST/sandbox-v1.json"
  sed -e "s#@IMAGE@#$MESH_TEST_IMAGE#g" "$FIX/sandbox-v2.json.in" > "$HOST/sandbox-v2.json"
  # Live: no --root, so units start and containers run.
  sb() { local name=$1; shift; raw "$name" --state-dir "$HOST/state" --config "$HOST/config.json" "$@"; }
  sb check-v1 check sandbox-v1.json
  sb plan-v1 plan --trace-commands sandbox-v1.json
  sb apply-v1 apply --trace-commands sandbox-v1.json
  sb apply-v1-again apply --trace-commands sandbox-v1.json
  sb owned-v1 owned
  sb status-v1 status
  # Drift: the unit stopped, the container removed, a package removed behind the host's back.
  systemctl --user stop golden-web.service
  podman rm -f golden-box >/dev/null 2>&1
  pacman --config "$MESH_PACMAN_CONF" -R --noconfirm mesh-e >/dev/null 2>&1
  sb owned-drifted owned
  sb plan-drifted plan sandbox-v1.json
  sb reconcile-repairs reconcile --trace-commands
  sb owned-repaired owned
  # A change: a package that does not exist (fails), the unit's content changed, the container's
  # command changed (recreated), the second package released.
  sb plan-v2 plan sandbox-v2.json
  sb apply-v2 apply --trace-commands sandbox-v2.json
  sb status-v2 status
  sb owned-v2 owned
  sb check-self check self.json
  # Release everything (what the host installed, wrote and started goes; the next form starts
  # from the same sandbox).
  sb apply-release apply --trace-commands empty.json
  sb owned-released owned
  sb status-released status
}

files_scenario text
files_scenario json
errors_scenario text
errors_scenario json
service_scenario text
service_scenario json
if [ "$SANDBOX" = 1 ]; then
  sandbox_scenario text
  sandbox_scenario json
fi
echo "golden.sh: $ALL_CASES cases recorded in $OUT"
