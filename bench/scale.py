"""Figure 11: scale. N = 500, 5,000 and 20,000 files under /etc (a scratch `--root`, 500 to a
directory, tools stubbed): converge, no-op, and the peak RSS of apply, plan, owned and of the
service receiving the declaration from the control plane and running it, beside the
declaration's size; the same at the declaration size limit (not with QUICK=1); then the
service's idle RSS, fresh and after a 20,000-file run. Uses bench.py's helpers."""

import ctypes
import json
import os
import re
import signal
import subprocess
import time

import bench


def measured(argv):
    """(seconds, peak RSS KiB) of one run of argv, which must exit 0. The time is taken here
    (time's %e counts in hundredths), so it includes the start of /usr/bin/time itself."""
    start = time.perf_counter()
    out = subprocess.run(["/usr/bin/time", "-f", "TIME %M", *argv], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-3:])}: exit {out.returncode}: {out.stderr[-2000:]}")
    return elapsed, int(re.search(r"TIME (\d+)", out.stderr).group(1))


def declaration(n):
    return {"schema": 1, "files": {
        f"/etc/scale/d{i // 500}/f{i}.conf": {"content": f"# managed\nsetting_{i} = {'x' * 64}\n", "mode": "0644"}
        for i in range(n)}}


# config.rs's defaults: `max_declaration_bytes` 64 MiB, `max_file_bytes` 8 MiB.
MAX_DECLARATION = 64 << 20
MAX_FILE = 8 << 20


def at_limit(count):
    """`count` files of config text (lines of 64 bytes), as large as they can be for the whole
    declaration to stay 64 KiB under the size limit (and each file within `max_file_bytes`)."""
    line_bytes = 65  # 63 characters and "\n", which JSON writes as two
    per_file = (MAX_DECLARATION - (64 << 10)) // count - 100  # the key, mode and punctuation
    size = min(MAX_FILE, per_file * 64 // line_bytes)

    def content(i):
        line = f"option_{i} = ".ljust(63, "v") + "\n"
        return (line * (size // len(line) + 1))[:size - 1] + "\n"
    return {"schema": 1, "files": {
        f"/etc/limit/d{i // 500}/f{i}.conf": {"content": content(i), "mode": "0644"} for i in range(count)}}


def service_peak(name, text, host=None, extra=None):
    """Peak RSS (KiB) of a service receiving `text` as revision 1 from the reference control
    plane and running it, read once the run is recorded: VmHWM, so it covers the frame arriving,
    the declaration stored and the run. On a fresh host, or on `host` (a host dir that applied
    the same declaration already: the run is a no-op, and what is left is the service's part).
    `extra`: more of the host's config."""
    cp = bench.ControlPlane(f"{name}-cp", text)
    config = dict(bench.STUBS, **cp.link(), **(extra or {}))
    if host is None:
        d = bench.host_dir(name, config)
    else:
        d = host
        (d / "config.json").write_text(json.dumps(config))
    child = bench.run_host(d)
    try:
        def recorded():
            out = subprocess.run(bench.mesh(d, "status", "--json"), capture_output=True, text=True)
            try:
                return any(r.get("revision") == 1 for r in json.loads(out.stdout).get("runs", []))
            except ValueError:
                return False
        bench.wait_until(f"{name}: the run of the declaration", recorded, 600)
        peak = int(re.search(r"^VmHWM:\s+(\d+)", open(f"/proc/{child.pid}/status").read(), re.M).group(1))
    finally:
        bench.kill(child, signal.SIGTERM)
        bench.kill(cp.child)
    return peak


def signed_service_peak(decl):
    """The declaration's size, its envelope's (signed by a key `keygen` makes), and the peak RSS
    (KiB) of a fresh service that trusts that key receiving the envelope and running it."""
    keys = bench.TMP / "signing"
    keys.mkdir(exist_ok=True)
    run = lambda *args: subprocess.run([str(bench.BIN), *args], capture_output=True, text=True, check=True).stdout
    public = run("keygen", "--out", str(keys / "key.pem")).strip()
    path = keys / "declaration.json"
    path.write_text(json.dumps(dict(decl, revision=1)))  # a signed declaration carries its revision
    envelope = run("sign", "--key", str(keys / "key.pem"), str(path))
    return path.stat().st_size, len(envelope), service_peak("signed", envelope, extra={"trusted_keys": [public]})


PEAKS = ("converge", "no-op", "plan", "owned", "service", "service (no-op run)")

# What a no-op must at least do: look at every file's stat (GNU find printing what the files
# index compares), and what a converge must at least do: write every file as a converge does.
LOOK = "%i %s %T@ %C@ %m %U %G\n"


def bare_look(d, runs):
    """Median seconds of `find` printing each file's stat under host dir `d`'s /etc, started
    through /usr/bin/time as the no-ops are (`measured`)."""
    argv = ["/usr/bin/time", "-f", "%M", "find", str(d / "root/etc"), "-printf", LOOK]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return bench.median(times)


def bare_writes(decl, where):
    """Seconds to write `decl`'s files under `where` as a converge writes them (each to a temp
    file beside it, one syncfs, each renamed, each directory fsynced once), from Python: the
    disk's cost at that moment, which swings on this shared disk far more than the host does."""
    start = time.perf_counter()
    dirs, temps = set(), []
    for path, spec in decl["files"].items():
        target = where / path.lstrip("/")
        if target.parent not in dirs:
            target.parent.mkdir(parents=True, exist_ok=True)
            dirs.add(target.parent)
        temp = target.with_name(f".{target.name}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, spec["content"].encode())
        os.close(fd)
        temps.append((temp, target))
    fd = os.open(where, os.O_RDONLY)
    ctypes.CDLL(None, use_errno=True).syncfs(fd)
    os.close(fd)
    for temp, target in temps:
        os.rename(temp, target)
    for directory in dirs:
        fd = os.open(directory, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return time.perf_counter() - start


def peaks_of(name, decl, runs, with_bare=True):
    """Converge time, no-op median, and the peak RSS (KiB) of each command and of the service,
    for one declaration on fresh hosts; with the declaration's size in bytes and (`with_bare`)
    the bare costs of the converge's writes and of the no-op's look (`bare_writes`, `bare_look`)."""
    d = bench.host_dir(name, bench.STUBS, decl)
    path = d / "declaration.json"
    size = path.stat().st_size
    converge, converge_rss = measured(bench.mesh(d, "apply", str(path)))
    bare = {"converge": bare_writes(decl, d / "bare")} if with_bare else {}
    noops = [measured(bench.mesh(d, "apply", str(path))) for _ in range(runs)]
    if with_bare:
        bare["no-op"] = bare_look(d, runs)
    peaks = {
        "converge": converge_rss,
        "no-op": max(r for _, r in noops),
        "plan": measured(bench.mesh(d, "plan", str(path)))[1],
        "owned": measured(bench.mesh(d, "owned"))[1],
        "service": service_peak(f"{name}-service", path.read_text()),
        "service (no-op run)": service_peak(f"{name}-in-place", path.read_text(), host=d),
    }
    return size, (converge, bench.median([t for t, _ in noops])), bare, peaks


def service_rss(d):
    """`bench.proc` of a service on host dir `d`: fresh, then idle after it reconciled the 20,000
    files `apply` put in force (SIGUSR1: reconcile now)."""
    child = bench.spawn(bench.mesh(d, "run"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        fresh = bench.proc(child.pid)
        apply = subprocess.run(bench.mesh(d, "apply", "--wait", str(d / "big.json")), capture_output=True, text=True)
        if apply.returncode != 0:
            raise RuntimeError(f"apply of the big declaration: {apply.stderr[-2000:]}")

        def runs():
            out = subprocess.run(bench.mesh(d, "status", "--json"), capture_output=True, text=True)
            return len(json.loads(out.stdout).get("runs", []))
        before = runs()
        child.send_signal(signal.SIGUSR1)
        bench.wait_until("the service's run", lambda: runs() > before, 120)
        time.sleep(2)
        after = bench.proc(child.pid)
    finally:
        bench.kill(child, signal.SIGTERM)
    return fresh, after


def figure():
    sizes = [500, 5000] if bench.QUICK else [500, 5000, 20000]
    runs = 3 if bench.QUICK else 7
    rows = []
    for n in sizes:
        size, (converge, noop), bare, peaks = peaks_of(f"scale{n}", declaration(n), runs)
        goal = 3 * size / 1024 + 4096  # KiB
        worst = max(peaks.values())
        rows.append([
            f"{n:,}", f"{size / 1e6:.2f} MB",
            f"{converge:.2f} s ({converge / bare['converge']:.1f}× bare {bare['converge']:.2f} s)"
            + (" (goal ≤ 5 s)" if n == 20000 else ""),
            f"{1000 * noop:.0f} ms ({noop / bare['no-op']:.1f}× bare {1000 * bare['no-op']:.0f} ms)"
            + (" (goal ≤ 60 ms)" if n == 20000 else ""),
            " / ".join(f"{bench.mib(peaks[k]):.1f}" for k in PEAKS),
            f"{bench.mib(goal):.1f} MiB", f"{worst / (size / 1024):.1f}×",
            bench.verdict(worst <= goal and (n != 20000 or (noop <= 0.06 and converge <= 5))),
        ])
    limits = []
    for count, what in ([] if bench.QUICK else [(8, "the largest files `max_file_bytes` allows"),
                                                 (16000, "config files")]):
        decl = at_limit(count)
        file_bytes = len(next(iter(decl["files"].values()))["content"])
        size, (converge, noop), _, peaks = peaks_of(f"limit{count}", decl, 3, with_bare=False)
        if count == 8:
            signed = signed_service_peak(decl)
        del decl
        goal = 3 * size / 1024 + 4096
        worst = max(peaks.values())
        limits.append([
            f"{count:,} files of "
            + (f"{file_bytes / 1e6:.2f} MB" if file_bytes >= 1e6 else f"{file_bytes / 1e3:.1f} kB") + f" ({what})",
            f"{size / 1e6:.2f} MB ({size / MAX_DECLARATION:.1%} of the limit)",
            f"{converge:.2f} s", f"{1000 * noop:.0f} ms",
            " / ".join(f"{bench.mib(peaks[k]):.1f}" for k in PEAKS),
            f"{bench.mib(goal):.1f} MiB", f"{worst / (size / 1024):.2f}×", bench.verdict(worst <= goal),
        ])
    big = sizes[-1]
    services = []
    for watch in (False, True):
        d = bench.host_dir(f"scale-service-{watch}", dict(bench.STUBS, watch=watch), {"schema": 1})
        (d / "big.json").write_text(json.dumps(declaration(big)))
        fresh, after = service_rss(d)
        # Its own memory beside: the binary's pages are mapped as code first runs (the
        # functions a connected host runs are laid out first, build/linker.sh).
        services.append([
            f"service idle RSS, `watch: {str(watch).lower()}`: fresh / after a {big:,}-file run "
            f"(its own, RssAnon)",
            f"{bench.mib(fresh['rss']):.2f} / {bench.mib(after['rss']):.2f} MiB "
            f"({bench.mib(fresh['anon']):.2f} / {bench.mib(after['anon']):.2f})", "within 1 MiB",
            bench.verdict(after["rss"] - fresh["rss"] <= 1024)])
    if limits:
        size, envelope, peak = signed
        goal = 3 * size / 1024 + 4096
        services.append([
            f"service peak RSS receiving the 8 files at the limit signed (`trusted_keys` set; a "
            f"{envelope / 1e6:.2f} MB envelope of the {size / 1e6:.2f} MB declaration)",
            f"{bench.mib(peak):.1f} MiB ({peak / (size / 1024):.2f}×)", f"≤ {bench.mib(goal):.1f} MiB",
            bench.verdict(peak <= goal)])
    limit_table = "" if not limits else (
        "\n\nAt the size limit (64 MiB, `max_declaration_bytes`' default), each declaration "
        "written as files of config text (64-byte lines) just under it; no-op the median of 3 runs.\n\n"
        + bench.table(["declaration", "bytes", "converge (new files)", "no-op",
                       "peak RSS MiB " + " / ".join(PEAKS),
                       "goal (3 × declaration + 4 MiB)", "worst ÷ declaration", "verdict"], limits))
    return (
        "`mesh-host apply` of N files under /etc in a scratch `--root` (500 to a directory, 80 bytes "
        f"each, mode 0644, tools stubbed), the static binary; `/usr/bin/time`, no-op the median of {runs} "
        "runs; peak RSS of `apply` converging and of its no-ops (the worst), `plan` and `owned`; and "
        "of `mesh-host run` on a fresh host (default config, so the watcher on) receiving the same "
        "declaration from the reference control plane (examples/control-plane.rs) and running it: "
        "its VmHWM once the run is recorded; and of the same on the host `apply` converged (the files in "
        "place, its run a no-op: the service's own part, receiving and storing). Every write is atomic and durable (temp files written, "
        "one syncfs, renamed, each directory fsynced once). Bare: the same files written so by Python "
        "right after the converge (the disk's cost then), and `find -printf` of each file's stat "
        "(what the files index compares) beside the no-ops: what any tool pays to write or look at N files.\n\n"
        + bench.table(["N", "declaration", "converge (new files)", "no-op",
                       "peak RSS MiB " + " / ".join(PEAKS),
                       "goal (3 × declaration + 4 MiB)", "worst ÷ declaration", "verdict"], rows)
        + limit_table
        + "\n\n"
        + bench.table(["figure", "value", "goal", "verdict"], services)
        + "\n\nWhat the run leaves (massif of the debug build's service idle after it, 20,000 "
        "files): with `watch: false`, 8 KB live, the rest musl's; with `watch` on, the watcher's "
        "tables, which name every owned file: 204 KiB of names, 78 KiB of where each ends, 20 KiB "
        "of flags, 2.5 KiB of marks (a byte each before, 20 KiB)."
    )
