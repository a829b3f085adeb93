#!/usr/bin/env python3
"""Writes build/hot-functions.txt, the functions build/linker.sh lays out first: those a host runs
from its start through its link to the reference control plane, the start run of a one-file
declaration and its report (figure 6's fleet host), then declarations pushed and applied (figure
2's, and one of 1,200 files and its removal), then figure 11's service: a large declaration's run
on a host with no link; as valgrind's lackey sees them run, mangled, in the order first run.
Builds the release binary as build.sh does but with its symbols (target/hot/), and the example
control plane. Run it again when much of what a host runs moves:
a function it misses is laid out among the rest and maps 64 KiB more into every host."""

import bisect
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import bench  # noqa: E402  (its scratch hosts and control plane)

TARGET = "x86_64-unknown-linux-musl"
LIST = REPO / "build/hot-functions.txt"


def build():
    """The release binary with its symbols, and the reference control plane."""
    env = dict(os.environ, CARGO_TARGET_DIR=str(REPO / "target/hot"), LINKER_KEEPS_SYMBOLS="1",
               CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_LINKER=str(REPO / "build/linker.sh"))
    cargo = ["cargo", "build", "--release", "--locked"]
    subprocess.run(cargo + ["--target", TARGET], cwd=REPO, env=env, check=True)
    subprocess.run(cargo + ["--example", "control-plane"], cwd=REPO, check=True)
    return REPO / f"target/hot/{TARGET}/release/mesh-host", REPO / "target/release/examples/control-plane"


class Traced:
    """A mesh-host command under valgrind's lackey: the address of each instruction it ran, once,
    in the order first run (lackey prints every one; awk keeps the first of each), and where the
    binary is loaded."""

    def __init__(self, binary, argv, name):
        self.binary, self.seen = binary, bench.TMP / f"instructions-{name}"
        self.lackey = bench.spawn(["valgrind", "--tool=lackey", "--trace-mem=yes", "--log-fd=1", *argv],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        with open(self.seen, "w") as out:
            self.first = subprocess.Popen(
                ["awk", '$1 == "I" { sub(/,.*/, "", $2); if (!($2 in seen)) { seen[$2]; print $2 } }'],
                stdin=self.lackey.stdout, stdout=out)
        self.lackey.stdout.close()  # awk's alone: it ends when lackey does

    def stop(self):
        """The instructions run, as offsets into the binary."""
        maps = Path(f"/proc/{self.lackey.pid}/maps").read_text()
        load = min(int(m.group(1), 16) for m in re.finditer(r"^([0-9a-f]+)-.* (/\S+)$", maps, re.M)
                   if m.group(2) == str(self.binary))
        self.kill()
        return [int(a, 16) - load for a in self.seen.read_text().split()]

    def kill(self):
        bench.kill(self.lackey, subprocess.signal.SIGINT)
        self.first.wait()


def connected(binary):
    """A host from its start through its link to the reference control plane, the start run and
    its report, then declarations pushed to it."""
    declaration = '{"schema": 1, "files": {"/etc/fleet.conf": {"content": "fleet\\n"}}}'
    cp = bench.ControlPlane("hot-cp", declaration)
    d = bench.host_dir("hot", cp.link(bench.STUBS))
    host = Traced(binary, bench.mesh(d, "run"), "connected")
    try:
        bench.wait_until("the link", lambda: bench.link_up(d), 120)
        time.sleep(10)  # the start run, its report, a heartbeat
        # Declarations arriving, as figure 2 pushes them: a file changed, one created, one
        # removed, each run and reported, so the code a node runs on every push is hot too
        # (laid out cold, a host mapped it on its first push: figure 2's growth).
        # Then a large one, applied a chunk at a time (1,200 files in 3 directories), and its
        # removal: the code a big run maps.
        big = {f"/etc/fleet-big/d{n % 3}/f{n}.conf": {"content": f"{n}\n"} for n in range(1200)}
        for i in range(5):
            runs = len(status(d).get("runs", []))
            files = {"/etc/fleet.conf": {"content": f"fleet {i}\n"}, f"/etc/fleet-{i}.conf": {"content": "x\n"}}
            if i == 3:
                files.update(big)
            (cp.dir / "declaration.json").write_text(json.dumps({"schema": 1, "files": files}))
            bench.wait_until(f"push {i}'s run", lambda: len(status(d).get("runs", [])) > runs, 600)
        time.sleep(5)  # its report and ack
        return host.stop()
    finally:
        host.kill()
        bench.kill(cp.child)


def large_run(binary):
    """Figure 11's service: a host with no link given a large declaration by `apply`, then told to
    reconcile (SIGUSR1): a run over every file in 4 directories, the watcher on them after."""
    files = {f"/etc/scale/d{n // 500}/f{n}.conf": {"content": f"# managed\nsetting_{n} = x\n", "mode": "0644"}
             for n in range(2000)}
    d = bench.host_dir("hot-large", dict(bench.STUBS, watch=True), {"schema": 1})
    (d / "large.json").write_text(json.dumps({"schema": 1, "files": files}))
    host = Traced(binary, bench.mesh(d, "run"), "large")
    try:
        bench.wait_until("the service", lambda: (status(d).get("service") or {}).get("state") == "running", 120)
        time.sleep(10)  # its start, idle
        subprocess.run(bench.mesh(d, "apply", "--wait", str(d / "large.json")), capture_output=True, check=True)
        runs = len(status(d).get("runs", []))
        host.lackey.send_signal(subprocess.signal.SIGUSR1)
        bench.wait_until("its run", lambda: len(status(d).get("runs", [])) > runs, 1200)
        time.sleep(5)  # the watcher on the directories, idle
        return host.stop()
    finally:
        host.kill()


def status(d):
    out = subprocess.run(bench.mesh(d, "status", "--json"), capture_output=True, text=True)
    try:
        return json.loads(out.stdout)
    except ValueError:
        return {}


def functions(binary):
    """(address, end, name) of each function of binary, by address; one written in assembly
    without its size (musl's memcpy, memmove, memset) ends where the next begins."""
    nm = subprocess.run(["nm", "-S", "--defined-only", str(binary)], capture_output=True, text=True, check=True)
    rows = sorted((int(r[0], 16), int(r[1], 16) if len(r) == 4 else -1, r[-1])
                  for r in (line.split() for line in nm.stdout.splitlines())
                  if len(r) in (3, 4) and r[-2] in ("t", "T", "w", "W"))
    return [(start, start + size if size >= 0 else next((s for s, _, _ in rows[i + 1:] if s > start), start), name)
            for i, (start, size, name) in enumerate(rows)]


RING = "ring_core_"


def ring_algorithm(name):
    """The first word of a function of ring's C and assembly after its prefix (sha256, ecp, aes,
    gcm, x25519, ...): its variants for each CPU share it."""
    return name.split("__", 1)[-1].split("_", 1)[0]


def main():
    binary, bench.CP = build()
    bench.BIN = binary
    try:
        # The connected host's functions first (every host runs them), then those a large run
        # adds, so the code a large run maps lies together after them.
        ran = connected(binary) + large_run(binary)
    finally:
        bench.cleanup()
    table = functions(binary)
    starts = [start for start, _, _ in table]
    hot = {}  # name -> bytes, in the order first run
    for offset in ran:
        i = bisect.bisect_right(starts, offset) - 1
        if i >= 0 and offset < table[i][1]:
            start, end, name = table[i]
            hot.setdefault(name, end - start)
    # ring picks its assembly by what the CPU has, and valgrind's lacks some (SHA-NI, ADX, VAES):
    # with each of ring's functions that ran, every variant of its algorithm is listed.
    algorithms = {ring_algorithm(name) for name in hot if name.startswith(RING)}
    for start, end, name in table:
        if name.startswith(RING) and ring_algorithm(name) in algorithms:
            hot.setdefault(name, end - start)
    LIST.write_text("".join(f"{name}\n" for name in hot))
    print(f"{LIST.relative_to(REPO)}: {len(hot)} functions, {sum(hot.values()) // 1024} KiB")


if __name__ == "__main__":
    main()
