"""Figure 11: scale. N = 500, 5,000 and 20,000 files under /etc (a scratch `--root`, 500 to a
directory, tools stubbed): converge, no-op, and the peak RSS of apply, plan and owned beside the
declaration's size; then the service's idle RSS, fresh and after a 20,000-file run. Uses
bench.py's helpers."""

import json
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


def service_rss(d):
    """RSS (KiB) of a service on host dir `d`: fresh, then idle after it reconciled the 20,000
    files `apply` put in force (SIGUSR1: reconcile now)."""
    child = bench.spawn(bench.mesh(d, "run"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        fresh = bench.proc(child.pid)["rss"]
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
        after = bench.proc(child.pid)["rss"]
    finally:
        bench.kill(child, signal.SIGTERM)
    return fresh, after


def figure():
    sizes = [500, 5000] if bench.QUICK else [500, 5000, 20000]
    runs = 3 if bench.QUICK else 7
    rows = []
    for n in sizes:
        d = bench.host_dir(f"scale{n}", bench.STUBS, declaration(n))
        path = d / "declaration.json"
        size = path.stat().st_size
        converge, converge_rss = measured(bench.mesh(d, "apply", str(path)))
        noops = [measured(bench.mesh(d, "apply", str(path))) for _ in range(runs)]
        noop = bench.median([t for t, _ in noops])
        peaks = {
            "apply": max(r for _, r in noops + [(converge, converge_rss)]),
            "plan": measured(bench.mesh(d, "plan", str(path)))[1],
            "owned": measured(bench.mesh(d, "owned"))[1],
        }
        goal = 3 * size / 1024 + 4096  # KiB
        worst = max(peaks.values())
        rows.append([
            f"{n:,}", f"{size / 1e6:.2f} MB",
            f"{converge:.2f} s" + (" (goal ≤ 5 s)" if n == 20000 else ""),
            f"{1000 * noop:.0f} ms ({1e6 * noop / n:.1f} µs a file)" + (" (goal ≤ 100 ms)" if n == 20000 else ""),
            " / ".join(f"{bench.mib(peaks[k]):.1f}" for k in ("apply", "plan", "owned")),
            f"{bench.mib(goal):.1f} MiB", f"{worst / (size / 1024):.1f}×", bench.verdict(worst <= goal),
        ])
    big = sizes[-1]
    services = []
    for watch in (False, True):
        d = bench.host_dir(f"scale-service-{watch}", dict(bench.STUBS, watch=watch), {"schema": 1})
        (d / "big.json").write_text(json.dumps(declaration(big)))
        fresh, after = service_rss(d)
        services.append([
            f"service idle RSS, `watch: {str(watch).lower()}`: fresh / after a {big:,}-file run",
            f"{bench.mib(fresh):.2f} / {bench.mib(after):.2f} MiB", "within 1 MiB",
            bench.verdict(after - fresh <= 1024)])
    return (
        "`mesh-host apply` of N files under /etc in a scratch `--root` (500 to a directory, 80 bytes "
        f"each, mode 0644, tools stubbed), the static binary; `/usr/bin/time`, no-op the median of {runs} "
        "runs; peak RSS of `apply` (the worst of converge and the no-ops), `plan` and `owned`. Every "
        "write is atomic and durable (temp files written, one syncfs, renamed, each directory fsynced "
        "once).\n\n"
        + bench.table(["N", "declaration", "converge (new files)", "no-op", "peak RSS MiB apply / plan / owned",
                       "goal (3 × declaration + 4 MiB)", "worst ÷ declaration", "verdict"], rows)
        + "\n\n"
        + bench.table(["figure", "value", "goal", "verdict"], services)
        + "\n\nWith `watch` on, what stays is the watcher's own tables (about 0.3 MiB for 20,000 files, "
        "a few buffers for all directories); see the notes below."
    )
