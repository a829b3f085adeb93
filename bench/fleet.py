"""Figure 6: a fleet of `mesh-host run` processes (tools stubbed, files only, each with its own
scratch root and store) against one reference control plane, which is killed and restarted on the
same port: how do the reconnects spread over time? Uses bench.py's helpers."""

import collections
import json
import os
import signal
import time

import bench


def accepts(log):
    """Unix times (s) of the connections the control plane accepted, from its --accept-log."""
    return [int(line) / 1000 for line in log.read_text().split()] if log.exists() else []


def figure():
    n = int(os.environ.get("FLEET_N") or (50 if bench.QUICK else 300))
    declaration = json.dumps({"schema": 1, "files": {"/etc/fleet.conf": {"content": "fleet\n"}}})
    # RECONNECT_BASE_SECS=N measures a fleet whose hosts set `reconnect_base_secs` (default 1).
    base = os.environ.get("RECONNECT_BASE_SECS")
    link = dict(bench.STUBS, **({"reconnect_base_secs": int(base)} if base else {}))
    first_log = bench.TMP / "fleet-accepts-1"
    cp = bench.ControlPlane("fleet-cp", declaration, extra=["--accept-log", str(first_log)])
    hosts = []
    try:
        for i in range(n):
            d = bench.host_dir(f"fleet{i}", cp.link(link))
            hosts.append(bench.spawn(bench.mesh(d, "run"), stdout=bench.subprocess.DEVNULL,
                                     stderr=bench.subprocess.DEVNULL))
        bench.wait_until(f"{n} connections", lambda: len(accepts(first_log)) >= n, 180)
        held = 3 if bench.QUICK else 65  # over a minute up: the backoff is back at its base
        time.sleep(held)
        alive = sum(h.poll() is None for h in hosts)
        rss = sorted(bench.proc(h.pid)["rss"] for h in hosts if h.poll() is None)
        anon = sorted(bench.proc(h.pid)["anon"] for h in hosts if h.poll() is None)

        bench.kill(cp.child)  # SIGKILL: every link drops at once
        down = 10
        time.sleep(down)
        second_log = bench.TMP / "fleet-accepts-2"
        restarted = time.time()
        cp.start(["--accept-log", str(second_log)])
        try:
            bench.wait_until(f"{n} reconnections", lambda: len(accepts(second_log)) >= n, 150)
            note = ""
        except RuntimeError:
            note = f" Only {len(accepts(second_log))} of {n} reconnected within 150 s."
        times = accepts(second_log)
        load = bench.load()
    finally:
        for h in hosts:
            bench.kill(h)
        bench.kill(cp.child)

    per_second = collections.Counter(int(t - restarted) for t in times)
    last = max(per_second, default=0)
    peak = max(per_second.values(), default=0)
    limit = n / 20
    back = max(times) - restarted if times else float("nan")
    behind = n - len(times)
    # Ten-second bins keep the figure short; the peak second is in the table below it.
    per_ten = collections.Counter(s // 10 for s in per_second.elements())
    bins = ", ".join(f"{per_ten[b]}" for b in range(last // 10 + 1))
    return (
        f"{n} `mesh-host run` processes (each its own scratch root and store, pacman/systemctl/podman "
        f"stubbed by `true`, one declared file, `reconnect_base_secs` {base or '1 (the default)'}; {alive} alive after connecting, RSS median "
        f"{bench.mib(rss[len(rss) // 2]):.2f} MiB, max {bench.mib(rss[-1]):.2f} MiB) against one "
        f"reference control plane on loopback. Once all had held their link for {held} s, it was "
        f"killed (SIGKILL), and restarted on the same port {down} s later; the base it sent them "
        f"was {min(max(n / 6, 1), 50):.0f} s (n / 6, from 1 to 50 s). Connections it accepted in each ten "
        f"seconds after the restart: {bins}. Load average {load} on 2 cores at the end.{note}\n\n"
        + bench.table(["figure", "value", "goal", "verdict"], [
            ["peak connections accepted per second", f"{peak} ({100 * peak / n:.1f} % of the fleet)",
             f"≤ 5 % ({limit:.0f})", bench.verdict(peak <= limit)],
            ["the last one back after the restart", f"{back:.1f} s", "≤ 60 s", bench.verdict(back <= 60)],
            ["left behind (not back within 150 s)", behind, "none", bench.verdict(behind == 0)],
            ["RSS each (median; RssAnon, the host's own: the rest is the binary's pages, shared)",
             f"{bench.mib(rss[len(rss) // 2]):.2f} MiB (RssAnon {anon[len(anon) // 2]} KiB)", "≤ 3 MiB",
             bench.verdict(rss[len(rss) // 2] <= 3 * 1024)],
        ])
    )
