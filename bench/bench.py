#!/usr/bin/env python3
"""mesh-host benchmarks (issue 6): prints each figure as a markdown section with medians over
several runs, and asserts nothing. bench/run.sh sets up the sandbox and the binaries, then calls
`bench.py [QUICK=1] FIGURE...`; `--write FILE` replaces each figure's section in FILE.
Figures: size idle noop files latency confirm fleet scale (the fleet is in fleet.py, scale in scale.py),
watch watch-idle watch-storm watch-memory (the watcher's, in watcher.py)."""

import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = REPO / "target/x86_64-unknown-linux-musl/release/mesh-host"
CP = REPO / "target/release/examples/control-plane"
QUICK = False
TMP = Path(tempfile.mkdtemp(prefix="mesh-bench-"))
CHILDREN = []  # every process started here, killed on exit


# ------------------------------------------------------------------ helpers

def median(xs):
    return statistics.median(xs) if xs else float("nan")


def mib(kib):
    return kib / 1024


def verdict(ok):
    return "met" if ok else "**missed**"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc(pid):
    """RSS and its anonymous part (KiB), CPU ticks (utime+stime) and context switches of pid:
    `woke`, the voluntary ones (it slept, so something woke it: its wake-ups), and `preempted`,
    the nonvoluntary ones (the scheduler took the CPU from it: the machine's load, not its own)."""
    status = Path(f"/proc/{pid}/status").read_text()
    field = lambda name: int(re.search(rf"^{name}:\s+(\d+)", status, re.M).group(1))
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return {"rss": field("VmRSS"), "anon": field("RssAnon"), "ticks": int(stat[11]) + int(stat[12]),
            "woke": field("voluntary_ctxt_switches"), "preempted": field("nonvoluntary_ctxt_switches")}


def spawn(argv, **kw):
    child = subprocess.Popen(argv, **kw)
    CHILDREN.append(child)
    return child


def kill(child, sig=signal.SIGKILL):
    if child.poll() is None:
        child.send_signal(sig)
    child.wait()


def wait_until(what, done, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if done():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def host_dir(name, config, declaration=None):
    """A scratch host: root/etc, state/, config.json (and a declaration file)."""
    d = TMP / name
    (d / "root/etc").mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(config))
    if declaration is not None:
        (d / "declaration.json").write_text(json.dumps(declaration))
    return d


def mesh(d, *args, root=True):
    argv = [str(BIN), "--state-dir", str(d / "state"), "--config", str(d / "config.json")]
    if root:
        argv += ["--root", str(d / "root")]
    return argv + list(args)


STUBS = {tool: {"command": ["true"]} for tool in ("pacman", "systemctl", "podman")}


class ControlPlane:
    """The reference control plane (examples/control-plane.rs) on a free loopback port."""

    def __init__(self, name, declaration, port=None, extra=()):
        self.dir = TMP / name
        self.dir.mkdir(exist_ok=True)
        (self.dir / "secret").write_text("bench\n")
        (self.dir / "declaration.json").write_text(declaration)
        self.port = port or free_port()
        self.log = self.dir / "cp.log"
        self.start(extra)

    def start(self, extra=()):
        self.child = spawn([str(CP), "--listen", f"127.0.0.1:{self.port}", "--node", "bench",
                            "--declaration", str(self.dir / "declaration.json"),
                            "--secret-file", str(self.dir / "secret"),
                            "--pki-dir", str(self.dir / "pki"), "--quiet", *extra],
                           stdout=subprocess.DEVNULL, stderr=open(self.log, "a"))
        wait_until("the control plane", lambda: "listening on" in self.log.read_text(), 30)

    def link(self, extra=None):
        """The host's config for a link to this control plane."""
        return {"control_plane": {"address": f"127.0.0.1:{self.port}", "server_name": "localhost",
                                  "ca_file": str(self.dir / "pki/ca.pem"), "node": "bench",
                                  "secret_file": str(self.dir / "secret")}, **(extra or {})}


def run_host(d):
    return spawn(mesh(d, "run"), stdout=subprocess.DEVNULL, stderr=open(d / "service.log", "w"))


def link_up(d):
    out = subprocess.run(mesh(d, "status", "--json"), capture_output=True, text=True)
    try:
        return json.loads(out.stdout)["service"]["link"] == "connected"
    except (ValueError, KeyError, TypeError):
        return False


def machine():
    model = re.search(r"^model name\s*:\s*(.*)$", Path("/proc/cpuinfo").read_text(), re.M)
    return (f"{os.cpu_count()} cores ({model.group(1) if model else '?'}), "
            f"Linux {os.uname().release}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


# ------------------------------------------------------------------ 1. size

def fig_size():
    size = BIN.stat().st_size
    kind = subprocess.run(["file", "-b", str(BIN)], capture_output=True, text=True).stdout.strip()
    static = "static" in kind
    source = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    return table(["figure", "value", "goal", "verdict"], [
        ["stripped static binary (x86_64 musl, rustls inside)",
         f"{size} bytes = {mib(size / 1024):.2f} MiB", "≤ 3.5 MiB", verdict(size <= 7 << 19 and static)],
        [f"`file`: {kind.split(',')[0]}, {'statically linked' if static else 'NOT static'}",
         f"./build.sh at `{source}` (the other figures run it)", "", ""],
    ])


# ------------------------------------------------------------------ 2, 3. idle and after pushes

def fig_idle():
    hosts, window, pushes = (3, 10, 100) if QUICK else (3, 60, 1000)
    template = {"schema": 1, "files": {f"/etc/bench/static{i}.conf": {"content": f"static {i}\n"}
                                       for i in range(9)}}
    template["files"]["/etc/bench/push.conf"] = {"content": "push @PUSH@\n"}
    # One control plane per host: the reference one tells reports apart by id alone. Its push
    # delay counts from its own start, so it leaves the set-up 30 s (checked after the window).
    cps = [ControlPlane(f"idle-cp{i}", json.dumps(template),
                        extra=["--push-count", str(pushes), "--push-delay", str(window + 30)])
           for i in range(hosts)]
    dirs = [host_dir(f"idle{i}", cp.link({"pacman": STUBS["pacman"]})) for i, cp in enumerate(cps)]
    children = [run_host(d) for d in dirs]
    for d in dirs:
        wait_until("the link", lambda: link_up(d), 30)
    time.sleep(2)  # the start run and its report are done
    before = [proc(c.pid) for c in children]
    time.sleep(window)
    after = [proc(c.pid) for c in children]
    if any("declaration revision 2 " in (d / "service.log").read_text() for d in dirs):
        raise RuntimeError("the pushes began inside the idle window (a slow set-up): run it again")
    for cp in cps:
        wait_until(f"{pushes} pushes", lambda: "pushed" in cp.log.read_text() or cp.child.poll(), 900)
    push_line = "; ".join(re.search(r"pushed .*|control-plane: .*", cp.log.read_text()).group(0) for cp in cps)
    time.sleep(3)
    pushed = [proc(c.pid) for c in children]
    for c in children + [cp.child for cp in cps]:
        kill(c, signal.SIGTERM)

    rss_idle = median([a["rss"] for a in after])
    rss_pushed = median([p["rss"] for p in pushed])
    growth = 100 * (rss_pushed - rss_idle) / rss_idle
    # The host's own part beside it: the binary's pages are mapped as code first runs (the
    # connected host's functions are laid out first, build/linker.sh), so RSS grows with them.
    anon_idle = median([a["anon"] for a in after])
    anon_growth = 100 * (median([p["anon"] for p in pushed]) - anon_idle) / anon_idle
    ticks = median([a["ticks"] - b["ticks"] for a, b in zip(after, before)])
    woke = [a["woke"] - b["woke"] for a, b in zip(after, before)]
    preempted = [a["preempted"] - b["preempted"] for a, b in zip(after, before)]
    load = os.getloadavg()[0]
    hz = os.sysconf("SC_CLK_TCK")
    beats = window / 30
    per_host = lambda key, xs: ", ".join(f"{x[key] / 1024:.2f}" for x in xs)
    return (
        f"{hosts} `mesh-host run` processes at once, each holding a link to the reference control "
        f"plane on loopback (heartbeat 30 s, drift timer 600 s, declaration of 10 files in a "
        f"scratch root, pacman stubbed), measured {window} s after the link came up; then "
        f"{pushes} declarations pushed to each, each changing one file, each sent once the previous "
        f"one was reported ({push_line}). One control plane per host: the reference one tells "
        f"reports apart by their id alone, and every host counts from 1.\n\n"
        + table(["figure", f"median of {hosts}", "goal", "verdict"], [
            [f"RSS idle, after {window} s", f"{mib(rss_idle):.2f} MiB (each: {per_host('rss', after)})",
             "≤ 4 MiB", verdict(rss_idle <= 4096)],
            [f"RSS after {pushes} declarations applied",
             f"{mib(rss_pushed):.2f} MiB (each: {per_host('rss', pushed)})", "", ""],
            ["RSS growth", f"{growth:+.1f} %", "≤ 10 %", verdict(growth <= 10)],
            [f"of which its own memory (RssAnon, {per_host('anon', after)} MiB idle)",
             f"{anon_growth:+.1f} %", "", ""],
            [f"CPU time idle over {window} s (utime+stime)", f"{ticks} ticks = {1000 * ticks / hz:.0f} ms",
             "heartbeats only", ""],
            [f"wake-ups idle over {window} s (voluntary context switches; the nonvoluntary ones, "
             f"preemptions at the machine's load, apart)",
             f"{median(woke):.0f} (each: {', '.join(map(str, woke))}; preempted: "
             f"{', '.join(map(str, preempted))} at load {load:.1f})",
             f"≈ {2 * beats:.0f} (a ping and its pong every 30 s)", verdict(median(woke) <= 2 * beats + 1)],
        ])
    )


# ------------------------------------------------------------------ 4. no-op reconcile

# Packages of the sandbox repo (tests/sandbox/setup.sh), all but the two the host refuses
# (nox-mesh-host, mesh-usurper); units and containers by N.
PACKAGES = ["mesh-a", "mesh-b", "mesh-c", "mesh-d", "mesh-e", "mesh-web"]
MIX = {10: (1, 1), 100: (12, 12), 500: (20, 20)}  # N: (units, containers); files fill up to N


def mixed(n, tag):
    units, containers = MIX[n]
    files = n - len(PACKAGES) - units - containers
    image = os.environ["MESH_TEST_IMAGE"]
    return {
        "schema": 1,
        "packages": {p: {} for p in PACKAGES},
        "files": {f"/etc/{tag}/f{i}.conf": {"content": f"setting = {i}\n"} for i in range(files)},
        "units": {f"{tag}-{i}.service": {"content": f"[Service]\nExecStart=/bin/sleep infinity\n# {i}\n",
                                         "active": True} for i in range(units)},
        "containers": {f"{tag}-{i}": {"image": image, "command": ["sleep", "100000"], "init": True}
                       for i in range(containers)},
    }, (len(PACKAGES), files, units, containers)


def timed(argv, **kw):
    t = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, **kw)
    return time.perf_counter() - t, out


def fig_noop():
    runs = 3 if QUICK else 7
    sizes = [10, 100] if QUICK else [10, 100, 500]
    tag = f"mesh-bench-{os.getpid()}"
    config = {"pacman": {"command": ["pacman", "--config", os.environ["MESH_PACMAN_CONF"]]},
              "systemctl": {"command": ["systemctl", "--user"]}, "podman": {"command": ["podman"]},
              "unit_dir": os.environ["MESH_UNIT_DIR"]}
    d = host_dir("noop", config)
    rows = []
    try:
        for n in sizes:
            declaration, mix = mixed(n, tag)
            path = d / f"n{n}.json"
            path.write_text(json.dumps(declaration))
            apply = mesh(d, "apply", "--json", "--trace-commands", str(path), root=False)
            first = subprocess.run(apply, capture_output=True, text=True)
            if first.returncode != 0:
                raise RuntimeError(f"first apply of N={n}: {first.stdout[-2000:]} {first.stderr[-2000:]}")
            noop, bare, report = [], [], None
            for _ in range(runs):
                t, out = timed(apply)
                report = json.loads(out.stdout)
                if out.returncode != 0 or report["changes"]:
                    raise RuntimeError(f"no-op of N={n} changed something: {out.stdout[-2000:]}")
                noop.append(t)
                t = time.perf_counter()
                for command in report["commands"]:  # the same batched queries, bare
                    subprocess.run(command.split(" "), capture_output=True, env={**os.environ, "LC_ALL": "C"})
                bare.append(time.perf_counter() - t)
            ratio = median(noop) / median(bare)
            rows.append([n, "%d / %d / %d / %d" % mix, f"{1000 * median(noop):.0f} ms",
                         f"{1000 * median(bare):.0f} ms", f"{ratio:.2f}",
                         report["command_count"], "≤ 1.2" if n == 500 else "",
                         verdict(ratio <= 1.2) if n == 500 else ""])
    finally:
        out = subprocess.run(mesh(d, "apply", "--json", str(write(d / "empty.json", {"schema": 1})), root=False),
                             capture_output=True, text=True)
        subprocess.run(["rm", "-rf", f"/etc/{tag}"])
        if out.returncode != 0:
            print(f"bench: releasing the no-op resources failed: {out.stdout[-2000:]}", file=sys.stderr)
    return (
        f"`mesh-host apply --json --trace-commands` of an unchanged declaration against the sandbox's "
        f"real pacman, `systemctl --user` and rootful podman (tests/sandbox/setup.sh), median of {runs} "
        f"runs, beside the same batched queries run bare (replayed one after another from the run's own "
        f"`commands`); files go to /etc/{tag}/ and are released afterwards.\n\n"
        + table(["N", "packages / files / units / containers", "no-op", "bare queries", "ratio",
                 "processes spawned", "goal", "verdict"], rows)
        + f"\n\nAt N = {sizes[-1]} the no-op runs {len(report['commands'])} commands, one batched query "
        f"per tool (`--trace-commands` lists them).\n"
    )


def fig_confirm():
    """A run that changes a unit file: what systemd's confirmation (kinds/units/confirm.rs) adds."""
    runs = 3 if QUICK else 11
    tag = f"mesh-bench-{os.getpid()}"
    config = {"pacman": {"command": ["pacman", "--config", os.environ["MESH_PACMAN_CONF"]]},
              "systemctl": {"command": ["systemctl", "--user"]}, "podman": {"command": ["podman"]},
              "unit_dir": os.environ["MESH_UNIT_DIR"]}
    d = host_dir("confirm", config)
    rows = []
    try:
        for n in [1, 20]:
            totals, confirms, counts = [], [], []
            for i in range(runs + 1):
                # Every run rewrites one unit file (its Description flips): files, reload, confirm.
                units = {f"{tag}-{k}.service": {"content": f"[Unit]\nDescription={tag} {k} {i if k == 0 else 0}\n"
                                                           "[Service]\nExecStart=/bin/sleep infinity\n"}
                         for k in range(n)}
                path = write(d / "d.json", {"schema": 1, "units": units})
                t, out = timed(mesh(d, "apply", "--json", "--trace-commands", str(path), root=False))
                report = json.loads(out.stdout)
                if out.returncode != 0 or not report["changes"]:
                    raise RuntimeError(f"unit change of N={n}: {out.stdout[-2000:]} {out.stderr[-2000:]}")
                confirm = [c for c in report["commands"] if "-p Id,LoadState,FragmentPath," in c]
                if i == 0:
                    continue  # the first run creates every unit
                totals.append(t)
                counts.append((report["command_count"], len(confirm)))
                t = time.perf_counter()
                for command in confirm:  # the confirmation's two `show`s, bare
                    subprocess.run(command.split(" "), capture_output=True, env={**os.environ, "LC_ALL": "C"})
                confirms.append(time.perf_counter() - t)
            share = median(confirms) / median(totals)
            rows.append([n, f"{1000 * median(totals):.0f} ms", "%d (%d of them confirming)" % counts[-1],
                         f"{1000 * median(confirms):.1f} ms", f"{100 * share:.0f} %"])
    finally:
        write(d / "empty.json", {"schema": 1})
        subprocess.run(mesh(d, "apply", str(d / "empty.json"), root=False), capture_output=True)
    return (
        f"`mesh-host apply --json --trace-commands` of a declaration of N units with unit files, one of "
        f"which changes each run (its file rewritten, the manager reloaded, nothing started), against the "
        f"sandbox's real `systemctl --user` (systemd 252), median of {runs} runs; beside it the "
        f"confirmation's own commands replayed bare from the run's `commands` (`systemctl show` of the "
        f"touched units and the host's, before the file is written and after the reload).\n\n"
        + table(["N units", "run", "processes spawned", "confirmation's spawns, bare", "share of the run"], rows)
    )


def write(path, value):
    path.write_text(json.dumps(value))
    return path


# ------------------------------------------------------------------ 4b, 4c. against CFEngine

def run_usage(argv):
    """(wall s, cpu s, stdout bytes) of one run of argv, which must exit 0: the cpu from wait4
    (user + system), the wall taken around the spawn."""
    t = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = child.stdout.read(), child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-3:])}: exit {child.returncode}: {out[-1000:]!r} {err[-1000:]!r}")
    return wall, usage.ru_utime + usage.ru_stime, out


def peak_rss(argv):
    """Peak RSS (KiB) of argv under /usr/bin/time: a child of Python would count Python's own
    (the high-water mark survives exec)."""
    out = subprocess.run(["/usr/bin/time", "-f", "TIME %M", *argv], capture_output=True, text=True)
    return int(re.search(r"TIME (\d+)", out.stderr).group(1))


def cf_policy(files, path):
    """A CFEngine policy holding `files` ({path: content}, mode 0644) as mesh-host's declaration
    does: content and mode, nothing else (no stdlib, so cf-agent reads one file)."""
    quote = lambda text: text.replace("\\", "\\\\").replace('"', '\\"')
    promises = "".join(f'    "{p}"\n      content => "{quote(c)}",\n      perms => mode644;\n'
                       for p, c in sorted(files.items()))
    path.write_text('body common control\n{\n  bundlesequence => { "mesh_bench" };\n}\n\n'
                    'body perms mode644\n{\n  mode => "0644";\n}\n\n'
                    f'bundle agent mesh_bench\n{{\n  files:\n{promises}}}\n')
    return path


def cf_agent():
    agent = subprocess.run(["sh", "-c", "command -v cf-agent"], capture_output=True, text=True).stdout.strip()
    if not agent:
        raise RuntimeError("cf-agent is missing: bench/run.sh installs cfengine3 (apt-get) unless SKIP_APT=1")
    version = subprocess.run([agent, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    return agent, version.strip()


def load():
    return Path("/proc/loadavg").read_text().split()[0]


def pairs(a, b, runs):
    """`runs` interleaved pairs of a and b (their order alternating), after one warm-up of each:
    per side the medians of wall and cpu and the median of the pairs' ratios; the peak RSS of
    each, the median of 3 more runs."""
    for argv in (a, b):
        run_usage(argv)
    sides, ratios, loads = ([], []), ([], []), []
    for i in range(runs):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        got = {}
        for side in order:
            got[side] = run_usage((a, b)[side])[:2]
            sides[side].append(got[side])
        ratios[0].append(got[0][0] / got[1][0])
        ratios[1].append(got[0][1] / got[1][1] if got[1][1] else float("nan"))
        loads.append(float(load()))
    med = lambda side, k: median([r[k] for r in sides[side]])
    return {"wall": (med(0, 0), med(1, 0), median(ratios[0])), "cpu": (med(0, 1), med(1, 1), median(ratios[1])),
            "rss": (median([peak_rss(a) for _ in range(3)]), median([peak_rss(b) for _ in range(3)])),
            "load": (min(loads), median(loads), max(loads))}


def pair_rows(p, goal):
    wall, cpu, rss = p["wall"], p["cpu"], p["rss"]
    return [
        ["wall", f"{1000 * wall[0]:.1f} ms", f"{1000 * wall[1]:.0f} ms", f"{wall[2]:.3f}", f"≤ {goal}",
         verdict(wall[2] <= goal)],
        ["cpu (user + system)", f"{1000 * cpu[0]:.1f} ms", f"{1000 * cpu[1]:.0f} ms", f"{cpu[2]:.3f}", "", ""],
        ["peak RSS", f"{mib(rss[0]):.1f} MiB", f"{mib(rss[1]):.1f} MiB", f"{rss[0] / rss[1]:.3f}", "", ""],
    ]


PAIR_HEADER = ["figure (median)", "mesh-host", "cf-agent -K", "ratio (median of the pairs)", "goal", "verdict"]


def five_hundred(prefix):
    return {f"{prefix}/d{i // 50}/f{i}.conf": f"# managed\nsetting_{i} = {'x' * 64}\n" for i in range(500)}


def fig_files():
    """500 unchanged files: mesh-host's no-op against `cf-agent -K` holding the same files, under
    `--root` (a scratch root, tools stubbed: nothing spawned, no look) and on the running system
    as a node runs it (no `--root`, the machine's own pacman: the reboot-and-restart look is made
    when its answer can have changed, model/upkeep, its last answer reported otherwise)."""
    runs = 5 if QUICK else 21
    agent, version = cf_agent()
    declared = lambda files: {"schema": 1, "files": {p: {"content": c, "mode": "0644"} for p, c in files.items()}}
    d = host_dir("files", STUBS)
    files = five_hundred("/etc/bench")
    write(d / "declaration.json", declared(files))
    apply = mesh(d, "apply", str(d / "declaration.json"))
    run_usage(apply)
    policy = cf_policy({str(d / "root") + p: c for p, c in files.items()}, d / "policy.cf")
    under_root = pairs(apply, [agent, "-K", "-f", str(policy)], runs)

    tag = f"mesh-bench-cf-{os.getpid()}"
    files = five_hundred(f"/etc/{tag}")
    d = host_dir("upkeep", {**STUBS, "pacman": {"command": ["pacman"]}})
    write(d / "declaration.json", declared(files))
    looking = mesh(d, "apply", "--json", str(d / "declaration.json"), root=False)
    try:
        needs = json.loads(run_usage(looking)[2]).get("needs")
        policy = cf_policy(files, d / "policy.cf")
        on_system = pairs(looking, [agent, "-K", "-f", str(policy)], runs)
    finally:
        write(d / "empty.json", {"schema": 1})
        subprocess.run(mesh(d, "apply", str(d / "empty.json"), root=False), capture_output=True)
        subprocess.run(["rm", "-rf", f"/etc/{tag}"])
    loads = under_root["load"] + on_system["load"]
    rows = [[f"{where}: {r[0]}", *r[1:]] for where, p, goal in
            (("under `--root`", under_root, 0.025), ("running system", on_system, 0.03))
            for r in pair_rows(p, goal)]
    return (
        f"`mesh-host apply D` of 500 unchanged files (10 directories, 80 bytes each, mode 0644) against "
        f"`cf-agent -K -f policy.cf` ({version}) promising the same files (`content` and `perms`, no "
        f"stdlib): under `--root R` (R/etc/bench/, tools stubbed: nothing spawned, no look), and on the "
        f"running system (/etc/{tag}/, no `--root`, the machine's own pacman; the reboot-and-restart "
        f"look is made only when its answer can have changed, otherwise its last answer, "
        f"`{json.dumps(needs)}`, is reported). {runs} interleaved pairs each after a warm-up, the order "
        f"alternating; wall around the spawn, cpu from wait4, peak RSS from `/usr/bin/time`. Load "
        f"average (1 min) during the pairs: {min(loads):.1f} to {max(loads):.1f} on 2 cores.\n\n"
        + table(PAIR_HEADER, rows)
    )


# ------------------------------------------------------------------ 5. latency

def fig_latency():
    """A minimal control plane in Python (ssl, stdlib) so that the moment the declare is written
    is known exactly; the reference one checks for declarations to send every 20 ms."""
    import ssl
    import struct
    pushes = 20 if QUICK else 100
    cp = ControlPlane("latency-cp", "{}")  # started only to create the PKI files
    kill(cp.child)
    port = free_port()
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.minimum_version = ssl.TLSVersion.TLSv1_3
    tls.load_cert_chain(cp.dir / "pki/server.pem", cp.dir / "pki/server.key")
    listener = socket.create_server(("127.0.0.1", port))
    listener.settimeout(30)
    config = cp.link({"pacman": STUBS["pacman"]})
    config["control_plane"]["address"] = f"127.0.0.1:{port}"
    d = host_dir("latency", config)
    host = run_host(d)
    sock, _ = listener.accept()
    sock.settimeout(30)
    conn = tls.wrap_socket(sock, server_side=True)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def recv():
        def exact(n):
            buf = b""
            while len(buf) < n:
                chunk = conn.recv(n - len(buf))
                if not chunk:
                    raise RuntimeError("the host closed the link")
                buf += chunk
            return buf
        return json.loads(exact(struct.unpack(">I", exact(4))[0]))

    def frame(body):
        return struct.pack(">I", len(body)) + body

    def send(message):
        conn.sendall(frame(json.dumps(message).encode()))

    def until_report(revision):
        while True:
            m = recv()
            if m["type"] == "ping":
                send({"type": "pong"})
            elif m["type"] == "report":
                send({"type": "ack", "id": m["id"]})
                if m.get("revision") == revision and m["outcome"] in ("converged", "failed"):
                    return m

    assert recv()["type"] == "hello"
    send({"type": "welcome"})
    latencies = []
    files = {f"/etc/bench/static{i}.conf": {"content": f"static {i}\n"} for i in range(9)}
    for revision in range(1, pushes + 6):
        files["/etc/bench/push.conf"] = {"content": f"push {revision}\n"}
        text = json.dumps({"schema": 1, "files": files})
        t = time.perf_counter()
        # A declare's head, then the declaration's bytes as the next frame (protocol 2).
        head = json.dumps({"type": "declare", "revision": revision}).encode()
        conn.sendall(frame(head) + frame(text.encode()))
        report = until_report(revision)
        if revision > 5:  # the first runs create the files and directories
            latencies.append(time.perf_counter() - t)
        assert report["outcome"] == "converged", report
    kill(host, signal.SIGTERM)
    conn.close()
    listener.close()

    # The change itself, for comparison: the same one-file change by `mesh-host apply`.
    cli = host_dir("latency-cli", STUBS)
    applies = []
    for revision in range(1, pushes + 6):
        files["/etc/bench/push.conf"] = {"content": f"push {revision}\n"}
        path = write(cli / "declaration.json", {"schema": 1, "files": files})
        t, out = timed(mesh(cli, "apply", str(path)))
        if revision > 5:
            applies.append(t)
    lat, change = 1000 * median(latencies), 1000 * median(applies)
    p90 = 1000 * statistics.quantiles(latencies, n=10)[-1]
    return (
        f"`mesh-host run` (10 files in a scratch root, one of them changed per declaration) against a "
        f"minimal control plane in Python on loopback that timestamps the `declare` frame as it writes "
        f"it and the `report` of that revision as it reads it; {pushes} declarations one after another, "
        f"median (after 5 warm-up ones). For scale, the same one-file change applied by a whole "
        f"`mesh-host apply` process (exec, config, store, lock, observe, apply, run record).\n\n"
        + table(["figure", "value", "goal", "verdict"], [
            ["declare -> report (median)", f"{lat:.1f} ms (p90 {p90:.1f} ms)", "", ""],
            ["the same change by `mesh-host apply`", f"{change:.1f} ms", "", ""],
            ["beyond the change itself", f"{lat - change:+.1f} ms", "< 50 ms", verdict(lat - change < 50)],
        ])
    )


# ------------------------------------------------------------------ main

FIGURES = {"size": ("1. Binary size", fig_size), "idle": ("2, 3. Idle RSS, growth, CPU and wake-ups", fig_idle),
           "noop": ("4. No-op reconcile, mixed kinds", fig_noop),
           "files": ("4b, 4c. 500-file no-op against CFEngine, under --root and on the running system", fig_files),
           "latency": ("5. Declaration-to-report latency", fig_latency),
           "confirm": ("12. systemd's confirmation of a unit change", fig_confirm)}


def replace_section(path, name, title, body):
    text = path.read_text() if path.exists() else ""
    section = f"<!-- bench:{name} -->\n## {title}\n\n{body}\n\n<!-- /bench:{name} -->"
    pattern = re.compile(rf"<!-- bench:{name} -->.*?<!-- /bench:{name} -->", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section + "\n"
    path.write_text(text)


def main(args):
    global QUICK
    write_to = None
    if "--write" in args:
        i = args.index("--write")
        write_to = Path(args[i + 1])
        del args[i:i + 2]
    QUICK = "QUICK=1" in args
    sys.modules["bench"] = sys.modules[__name__]  # fleet.py shares these globals
    import fleet
    import scale
    import watcher
    figures = {**FIGURES, "fleet": ("6. Fleet: reconnects after a control-plane restart", fleet.figure),
               "scale": ("11. Scale: 500, 5,000 and 20,000 files, and the size limit", scale.figure), **watcher.FIGURES}
    names = [a for a in args if a != "QUICK=1"] or list(figures)
    status = 0
    for name in names:
        title, figure = figures[name]
        print(f"== {title}", file=sys.stderr, flush=True)
        n = os.environ.get("FLEET_N", "300")
        knob = f"FLEET_N={n} " if name == "fleet" and n != "300" else ""
        try:
            body = (figure() + f"\n\nMeasured on {machine()}{' (QUICK=1)' if QUICK else ''}."
                    f"\nReproduce: `{knob}bench/run.sh {name}` (as root).")
        except Exception as e:  # a figure that cannot be measured says why; the others go on
            body, status = f"Not measured: {e}", 1
        print(f"## {title}\n\n{body}\n", flush=True)
        if write_to and not QUICK:
            # The fleet is recorded at 300 (`fleet`) and at other sizes beside it (`fleet-N`).
            section = f"fleet-{n}" if knob else name
            replace_section(write_to, section, title if section == name else f"{title} (n = {n})", body)
    return status


def cleanup():
    for child in CHILDREN:
        if child.poll() is None:
            child.kill()
        child.wait()
    subprocess.run(["rm", "-rf", str(TMP)])


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        sys.exit(main(sys.argv[1:]))
    finally:
        cleanup()
