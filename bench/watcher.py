"""mesh-host benchmarks of the service's inotify watcher (issue 14), called by bench.py: drift-to-repair
latency per kind of edit, idle cost with 500 watched files, a storm of events, memory with 500 and
20,000 watched files. Each host is a scratch `--root` with its drift timer at 600 s, so every repair
measured is the watcher's. Prints figures; asserts nothing."""

import json
import os
import signal
import statistics
import subprocess
import time

import bench
from bench import (ControlPlane, STUBS, host_dir, kill, median, mesh, mib, proc, run_host, table, verdict,
                   wait_until, link_up)


def quick():
    return bench.QUICK


def files(n, per_dir=50, tag="w"):
    return {f"/etc/{tag}/d{i // per_dir}/f{i}.conf": {"content": f"setting_{i} = {'x' * 40}\n", "mode": "0644"}
            for i in range(n)}


def status(d):
    out = subprocess.run(mesh(d, "status", "--json"), capture_output=True, text=True)
    try:
        return json.loads(out.stdout)
    except ValueError:
        return {}


def watching(d):
    watch = (status(d).get("service") or {}).get("watch") or {}
    return (watch.get("directories") or 0) > 0


def runs(d, trigger=None):
    return [r for r in status(d).get("runs") or [] if trigger is None or r["trigger"] == trigger]


def started(name, declaration, extra=None):
    """A host holding `declaration` (applied before the service starts), its service once it watches."""
    d = host_dir(name, {**STUBS, "interval_secs": 600, **(extra or {})}, declaration)
    out = subprocess.run(mesh(d, "apply", str(d / "declaration.json")), capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"apply: {out.stdout[-1000:]} {out.stderr[-1000:]}")
    # At info, the log names every run (`status` keeps only the latest 50).
    child = bench.spawn(mesh(d, "run"), stdout=subprocess.DEVNULL, stderr=open(d / "service.log", "w"),
                        env={**os.environ, "RUST_LOG": "info"})
    if (extra or {}).get("watch", True):
        wait_until("the watches", lambda: watching(d), 120)
    return d, child


# ------------------------------------------------------------------ latency

def edit_in_place(path):
    with open(path, "w") as f:
        f.write("edited\n")


def replace_by_rename(path):
    tmp = path.with_name("." + path.name + ".swp")
    tmp.write_text("replaced\n")
    os.rename(tmp, path)


def chmod(path):
    os.chmod(path, 0o600)


def delete(path):
    os.unlink(path)


def repaired(path, want):
    try:
        st = os.stat(path)
        return (st.st_mode & 0o7777) == 0o644 and path.read_bytes() == want
    except FileNotFoundError:
        return False


def fig_latency():
    edits = 10 if quick() else 50
    kinds = [("edited in place", edit_in_place), ("replaced by rename", replace_by_rename),
             ("chmod-ed", chmod), ("deleted", delete)]
    declaration = {"schema": 1, "files": files(500)}
    d, child = started("watch-latency", declaration)
    keys = list(declaration["files"])
    rows, n = [], 0
    for label, edit in kinds:
        samples = []
        for _ in range(edits):
            # A file of its own per edit: the same file edited 50 times a minute would be contested.
            key = keys[n]
            n += 1
            path = d / "root" / key.lstrip("/")
            want = declaration["files"][key]["content"].encode()
            t = time.monotonic()
            edit(path)
            while not repaired(path, want):
                if time.monotonic() - t > 30:
                    raise RuntimeError(f"{key} {label}: not repaired in 30 s")
                time.sleep(0.002)
            samples.append(1000 * (time.monotonic() - t))
            time.sleep(0.05)
        q = statistics.quantiles(samples, n=10)
        rows.append([label, f"{median(samples):.0f} ms", f"{q[8]:.0f} ms", f"{min(samples):.0f} ms",
                     f"{max(samples):.0f} ms", "median < 1 s", verdict(median(samples) < 1000)])
    kill(child, signal.SIGTERM)
    # The log, not `status`: status shows only the latest runs.
    watch_runs = (d / "service.log").read_text().count("reconciling (watch)")
    return (
        f"`mesh-host run` holding 500 files (10 directories) in a scratch root, drift timer 600 s; "
        f"{edits} edits of each kind, each to a file of its own, one after another; the time from the "
        f"edit to the file being back (content and mode 0644), polled every 2 ms. The debounce is "
        f"300 ms after the last event; the rest is the check (observe the touched file, plan) and "
        f"the run (lock, write, record). {watch_runs} watch runs for {n} edits.\n\n"
        + table(["edit", "median", "p90", "min", "max", "goal", "verdict"], rows)
    )


# ------------------------------------------------------------------ idle

def fig_idle():
    window = 10 if quick() else 60
    declaration = json.dumps({"schema": 1, "files": files(500)})
    out = []
    hosts = []
    for watch in (True, False):
        cp = ControlPlane(f"watch-idle-cp-{watch}", declaration)
        d = host_dir(f"watch-idle-{watch}", cp.link({**STUBS, "interval_secs": 600, "heartbeat_secs": 30,
                                                      "watch": watch}))
        child = run_host(d)
        hosts.append((watch, cp, d, child))
    for watch, cp, d, child in hosts:
        wait_until("the link", lambda: link_up(d), 60)
        if watch:
            wait_until("the watches", lambda: watching(d), 60)
    time.sleep(3)  # the start run and its report are done
    before = [proc(h[3].pid) for h in hosts]
    time.sleep(window)
    after = [proc(h[3].pid) for h in hosts]
    hz = os.sysconf("SC_CLK_TCK")
    beats = window / 30
    for (watch, cp, d, child), b, a in zip(hosts, before, after):
        ticks, woke = a["ticks"] - b["ticks"], a["woke"] - b["woke"]
        dirs = ((status(d).get("service") or {}).get("watch") or {}).get("directories", 0)
        out.append([f"watch {'on' if watch else 'off'}" + (f" ({dirs} directories)" if watch else ""),
                    f"{ticks} ticks = {1000 * ticks / hz:.0f} ms",
                    f"{woke} (preempted {a['preempted'] - b['preempted']})",
                    f"≈ {2 * beats:.0f}", verdict(woke <= 2 * beats + 1)])
        kill(child, signal.SIGTERM)
        kill(cp.child, signal.SIGTERM)
    return (
        f"Two `mesh-host run` at once, each holding 500 files (10 directories) in a scratch root and a "
        f"link to the reference control plane on loopback (heartbeat 30 s, drift timer 600 s), one "
        f"watching and one with `watch: false`; CPU time and wake-ups (voluntary context switches; "
        f"beside them the nonvoluntary ones, the machine's load) over {window} s of nothing "
        f"changing, from 3 s after the start run.\n\n"
        + table(["host", f"CPU over {window} s", f"wake-ups over {window} s",
                 "heartbeat baseline", "verdict"], out)
    )


# ------------------------------------------------------------------ storm

def fig_storm():
    events = 2_000 if quick() else 10_000
    declaration = {"schema": 1, "files": files(500)}
    d, child = started("watch-storm", declaration)
    before = len(runs(d))
    owned = [d / "root" / k.lstrip("/") for k in list(declaration["files"])[:10]]
    stranger = d / "root/etc/w/d0"
    # Each write is two events (modified, closed after writing); half to owned files, half to others.
    writes = events // 2
    t = time.monotonic()
    for i in range(writes):
        path = owned[(i // 2) % 10] if i % 2 == 0 else stranger / f"tmp{i}"
        with open(path, "w") as f:
            f.write(f"storm {i}\n")
        # Spread over one second, in steps of 1/50 s.
        if i % (writes // 50) == 0:
            ahead = t + (i + 1) / writes - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    spent = time.monotonic() - t
    wait_until("the repair", lambda: all(p.read_text().startswith("setting_") for p in owned), 30)
    time.sleep(3)
    after = runs(d)[before:]
    watch_runs = [r for r in after if r["trigger"] == "watch"]
    kill(child, signal.SIGTERM)
    logged = (d / "service.log").read_text().count("reconciling (watch)")
    if logged != len(watch_runs):
        raise RuntimeError(f"{logged} watch runs in the log, {len(watch_runs)} in status")
    return (
        f"`mesh-host run` holding 500 files; {writes} writes in {spent:.2f} s (about {events} events: "
        f"each write is modified + closed-after-writing), half of them to 10 owned files in turn, "
        f"half to new files nobody owns in a watched directory; runs counted until 3 s after the "
        f"files were back.\n\n"
        + table(["figure", "value", "goal", "verdict"], [
            ["runs with trigger `watch`", str(len(watch_runs)), "at most a few", verdict(len(watch_runs) <= 3)],
            ["resources those runs changed", str(sum(len(r["changes"]) for r in watch_runs)), "10", ""],
        ])
    )


# ------------------------------------------------------------------ memory

def fig_memory():
    sizes = [500, 2000] if quick() else [500, 20_000]
    rows = []
    for n in sizes:
        row = [f"{n} files ({n // 100} directories)"]
        for watch in (True, False):
            d, child = started(f"watch-mem-{n}-{watch}", {"schema": 1, "files": files(n, per_dir=100, tag=f"m{n}")},
                               {"watch": watch})
            wait_until("the start run", lambda: len(runs(d)) >= 2, 300)
            time.sleep(2)
            p = proc(child.pid)
            hwm = int(next(l.split()[1] for l in open(f"/proc/{child.pid}/status") if l.startswith("VmHWM")))
            row += [f"{mib(p['rss']):.2f} MiB", f"{mib(hwm):.2f} MiB"]
            kill(child, signal.SIGTERM)
        rows.append(row)
    return (
        "RSS of `mesh-host run` holding N files (100 per directory) in a scratch root, 2 s after its "
        "start run, with the watcher and with `watch: false`; the peak (VmHWM) includes parsing the "
        "declaration and the start run. The kernel's own memory for a watch (about 1 KiB each, one "
        "per directory) is not in these figures.\n\n"
        + table(["declaration", "RSS, watching", "peak, watching", "RSS, watch off", "peak, watch off"], rows)
    )


FIGURES = {
    "watch": ("7. Watcher: drift-to-repair latency", fig_latency),
    "watch-idle": ("8. Watcher: idle cost with 500 watched files", fig_idle),
    "watch-storm": ("9. Watcher: a storm of events", fig_storm),
    "watch-memory": ("10. Watcher: memory with 500 and 20,000 watched files", fig_memory),
}
