#!/usr/bin/env python3
"""Isolation benchmark: can one authenticated client hurt the others on a shared server?

    server ns (mptund server, 198.18.0.1 on lo)
      |-- c1 .. c10: one real `mptund` client daemon each (TUN, kernel TCP), 2 paths
      |              shaped by tbf to --path-mbit; iperf3 through the tunnel at
      |              --client-rate-mbit (odd clients upload, even clients download)
      |              and a ping through the tunnel every 50 ms
      `-- hostile:   `hostile_client` (crates/mptund/examples/hostile_client.rs) on a
                     link shaped to --hostile-mbit, one attack per run, as fast as its
                     socket takes datagrams (line rate)

For every attack (issue 64, "Why") it runs the same --duration twice on a fresh server:
without the hostile client and with it; with --baseline-bin, the two server binaries
take turns (before/after of each attack in one invocation). Per run it records each
client's goodput (iperf3's receiver) and ping p50/p99/loss, the server's peak memory
(VmHWM, and VmRSS sampled every 250 ms), its CPU, its drop counters, whether any daemon
exited, the hostile client's own counts, and the commits of the binaries. One JSON file
per run goes to OUT/runs/; REPORT.md in OUT is regenerated from them (`--report OUT`).

    sudo python3 benches/isolation/run.py                          # builds; all attacks
    sudo python3 benches/isolation/run.py --bin NEW/mptund --baseline-bin /work/bin-base/mptund
    sudo python3 benches/isolation/run.py --attacks challenge-flood --duration 10
    python3 benches/isolation/run.py --report benches/isolation/results-<commit>

Targets (issue 64): every client keeps >= 95 % of its goodput, its ping p99 rises by
<= 10 ms, the server stays within its memory budget and nothing exits. The report says
pass or fail; the script's exit status does not: it is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
sys.path.insert(0, str(REPO_ROOT / "testbed"))
from mptund import commit_of_version  # noqa: E402

ATTACKS = ["challenge-flood", "gaveup-flood", "parity-paths", "many-paths", "reorder-gaps",
           "handshake-sources", "plain-data"]
# `plain-data` is the control: in-order data at the same line rate, what a heavy but
# honest client costs the others on this machine.
CONTROL_ATTACK = "plain-data"

SERVER_PUBLIC_ADDR = "198.18.0.1"
SERVER_PORT = 51900
SERVER_TUN_ADDR = "198.18.100.1"
HOSTILE_NET = "198.18.200"
HOSTILE_INNER = "198.18.100.200"
# The handshake-sources attack's 256 real source addresses: 198.18.201.0-255 as /32s
# on the hostile namespace's interface, routed back to it by the server.
HOSTILE_SOURCES_NET = "198.18.201"
HOSTILE_SOURCES = 256
IPERF_BASE_PORT = 5200
PING_INTERVAL_S = 0.05
# The issue's targets.
MIN_GOODPUT_RATIO = 0.95
MAX_P99_RISE_MS = 10.0


def client_tun_addr(index: int) -> str:
    return f"198.18.100.{10 + index}"


def path_net(index: int, path: int, paths: int) -> str:
    """The /24 of client `index`'s path `path` (both from 1): 198.18.1.0 upward."""
    return f"198.18.{(index - 1) * paths + path}"


# ---------------------------------------------------------------------------
# Binaries and their commits


def git(tree: Path, *argv: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *argv], capture_output=True, text=True,
                          check=False).stdout.strip()


def describe_binary(path: Path, commit_override: str | None) -> dict:
    """The binary's `--version` and the commit it was built from: the one its version
    line names (`mptund --version`, taken when it was built), else the override, else
    a COMMIT file beside it, else the git tree it sits in (`<tree>/target/release/...`),
    marked `-dirty` if the tree has changes. The last three are for binaries that print
    no commit (older builds, the hostile client example)."""
    version = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                             check=False).stdout.strip() if path.name == "mptund" else None
    commit = commit_of_version(version) if version else None
    source = "its --version" if commit not in (None, "unknown", "not recorded") else None
    if source is None:
        commit = commit_override
        source = "--*-commit flag" if commit else None
    if commit is None and (path.parent / "COMMIT").is_file():
        commit, source = (path.parent / "COMMIT").read_text().strip(), "COMMIT file beside the binary"
    if commit is None:
        for parent in path.resolve().parents:
            if parent.name == "target" and (parent.parent / ".git").exists():
                tree = parent.parent
                commit = git(tree, "rev-parse", "HEAD")
                if git(tree, "status", "--porcelain", "--untracked-files=no"):
                    commit += "-dirty"
                source = f"git rev-parse HEAD in {tree}"
                break
    return {"path": str(path), "version": version, "commit": commit or "unknown",
            "commit_source": source}


def build() -> tuple[Path, Path]:
    subprocess.run(["nice", "-n", "10", "cargo", "build", "--release", "-p", "mptund", "--bins",
                    "--example", "hostile_client"], cwd=REPO_ROOT, check=True)
    release = Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target")) / "release"
    return release / "mptund", release / "examples" / "hostile_client"


# ---------------------------------------------------------------------------
# Topology


def shape(ns, ifname: str, mbit: float) -> None:
    """tbf at `mbit` on the egress of `ifname`: a bucket of 4 ms (at least 16 KB) and a
    queue of 50 ms."""
    burst = max(16_000, int(mbit * 1e6 / 8 * 0.004))
    ns.run("tc", "qdisc", "replace", "dev", ifname, "root", "tbf", "rate", f"{mbit}mbit",
           "burst", str(burst), "latency", "50ms")


class Topology:
    def __init__(self, bed, args):
        self.bed = bed
        self.server = bed.netns("srv")
        self.server.run("ip", "addr", "add", f"{SERVER_PUBLIC_ADDR}/32", "dev", "lo")
        self.clients = []
        namespaces = [self.server]
        for index in range(1, args.clients + 1):
            ns = bed.netns(f"c{index}")
            namespaces.append(ns)
            for path in range(1, args.paths + 1):
                net = path_net(index, path, args.paths)
                up, down = f"up{path}", f"c{index}p{path}"
                bed.veth(ns, up, self.server, down)
                ns.addr(up, f"{net}.2/24")
                self.server.addr(down, f"{net}.1/24")
                ns.run("ip", "route", "add", f"{SERVER_PUBLIC_ADDR}/32", "via", f"{net}.1",
                       "dev", up, "metric", str(path))
                shape(ns, up, args.path_mbit)
                shape(self.server, down, args.path_mbit)
            self.clients.append(ns)
        self.hostile = bed.netns("hos")
        namespaces.append(self.hostile)
        bed.veth(self.hostile, "h0", self.server, "hos0")
        self.hostile.addr("h0", f"{HOSTILE_NET}.2/24")
        self.server.addr("hos0", f"{HOSTILE_NET}.1/24")
        self.hostile.run("ip", "route", "add", f"{SERVER_PUBLIC_ADDR}/32", "via", f"{HOSTILE_NET}.1")
        batch = "".join(f"addr add {HOSTILE_SOURCES_NET}.{host}/32 dev h0\n"
                        for host in range(HOSTILE_SOURCES))
        self.hostile.run("ip", "-batch", "-", input=batch)
        self.server.run("ip", "route", "add", f"{HOSTILE_SOURCES_NET}.0/24", "via", f"{HOSTILE_NET}.2")
        shape(self.hostile, "h0", args.hostile_mbit)
        shape(self.server, "hos0", args.hostile_mbit)
        # Replies to a path come from the public address, which is reachable over
        # every path: reverse-path filtering must be loose. No IPv6 is used.
        for ns in namespaces:
            ns.sysctl("net.ipv4.conf.all.rp_filter", "2")
            ns.sysctl("net.ipv4.conf.default.rp_filter", "2")
            ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1")


# ---------------------------------------------------------------------------
# Daemons


class Keys:
    """Every daemon's key pair, made once per invocation with the first binary."""

    def __init__(self, binary: Path, workdir: Path, clients: int):
        self.workdir = workdir
        self.public = {}
        for name in ["server", "hostile"] + [f"client{i}" for i in range(1, clients + 1)]:
            private = subprocess.run([binary, "genkey"], check=True, capture_output=True,
                                     text=True).stdout
            path = workdir / f"{name}.key"
            path.write_text(private)
            path.chmod(0o600)
            self.public[name] = subprocess.run([binary, "pubkey"], input=private, check=True,
                                               capture_output=True, text=True).stdout.strip()


def write_configs(args, keys: Keys, workdir: Path) -> None:
    peers = "".join(
        f'\n[[peer]]\nname = "client{i}"\npublic_key = "{keys.public[f"client{i}"]}"\n'
        f'allowed_ips = ["{client_tun_addr(i)}/32"]\n' for i in range(1, args.clients + 1))
    peers += (f'\n[[peer]]\nname = "hostile"\npublic_key = "{keys.public["hostile"]}"\n'
              f'allowed_ips = ["{HOSTILE_INNER}/32"]\n')
    extra = (args.server_extra.replace("\\n", "\n") + "\n") if args.server_extra else ""
    (workdir / "server.toml").write_text(
        f'mode = "server"\nprivate_key_file = "server.key"\nlisten = "0.0.0.0:{SERVER_PORT}"\n'
        + extra
        + f'\n[tun]\nname = "mpt0"\naddresses = ["{SERVER_TUN_ADDR}/24"]\n'
        + '\n[log]\nstats_interval_ms = 0\n'
        + f'\n[control]\nsocket = "{workdir / "server.sock"}"\n' + peers)
    timers = ""
    if args.client_rekey_ms:
        timers = (f"\n[timers]\nrekey_after_ms = {args.client_rekey_ms}\n"
                  f"reject_after_ms = {args.client_reject_ms}\n")
    for i in range(1, args.clients + 1):
        paths = "".join(f'\n[[path]]\nname = "up{p}"\ninterface = "up{p}"\n'
                        for p in range(1, args.paths + 1))
        (workdir / f"client{i}.toml").write_text(
            f'mode = "client"\nprivate_key_file = "client{i}.key"\n'
            f'\n[tun]\nname = "mpt0"\naddresses = ["{client_tun_addr(i)}/24"]\n'
            f'\n[server]\nendpoint = "{SERVER_PUBLIC_ADDR}:{SERVER_PORT}"\n'
            f'public_key = "{keys.public["server"]}"\n'
            + paths + timers + '\n[log]\nstats_interval_ms = 0\n'
            + f'\n[control]\nsocket = "{workdir / f"client{i}.sock"}"\n')


def start_daemon(ns, binary: Path, workdir: Path, name: str, tag: str):
    log = open(workdir / f"{tag}-{name}.log", "w")
    proc = ns.popen(binary, "run", "--config", workdir / f"{name}.toml", stdout=log,
                    stderr=subprocess.STDOUT, env={**os.environ, "MPTUND_LOG": "warn"})
    proc.log_file = log
    return proc


def wait_tunnels(topo: Topology, procs: dict, timeout: float) -> None:
    """Until every client's ping crosses its tunnel."""
    pending = set(range(1, len(topo.clients) + 1))
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} while starting")
        for index in sorted(pending):
            ping = topo.clients[index - 1].run("ping", "-c1", "-W0.5", SERVER_TUN_ADDR,
                                               check=False, capture=True)
            if ping.returncode == 0:
                pending.discard(index)
    if pending:
        raise TimeoutError(f"tunnels of clients {sorted(pending)} not up after {timeout} s")


# ---------------------------------------------------------------------------
# Measurements


def proc_cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status_kib(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


class RssSampler(threading.Thread):
    """VmRSS of one process every 250 ms; keeps the largest."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak_kib, self.samples = pid, 0, 0
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.wait(0.25):
            rss = proc_status_kib(self.pid, "VmRSS")
            if rss is not None:
                self.peak_kib = max(self.peak_kib, rss)
                self.samples += 1


def parse_ping(text: str, sent: int) -> dict:
    rtts = {}
    for match in re.finditer(r"icmp_seq=(\d+) .*?time=([\d.]+) ms", text):
        rtts.setdefault(int(match.group(1)), float(match.group(2)))
    times = sorted(rtts.values())
    lost = max(0, sent - len(times))

    def quantile(q: float) -> float | None:
        # Nearest rank, a lost ping counting as slower than every answered one.
        if sent == 0:
            return None
        rank = max(1, math.ceil(q * sent))
        return times[rank - 1] if rank <= len(times) else None

    return {"sent": sent, "received": len(times), "lost": lost,
            "loss_percent": round(100 * lost / sent, 2) if sent else None,
            "p50_ms": quantile(0.50), "p99_ms": quantile(0.99),
            "max_ms": times[-1] if times else None,
            # Every ping's round trip in sending order (None: unanswered), to see when.
            "rtt_ms_by_seq": [rtts.get(seq) for seq in range(1, sent + 1)]}


def iperf_goodput(report: dict) -> dict:
    end = report.get("end", {})
    received = end.get("sum_received", {})
    sent = end.get("sum_sent", {})
    return {"goodput_mbit": round(received.get("bits_per_second", 0) / 1e6, 3),
            "received_bytes": received.get("bytes", 0),
            "seconds": round(received.get("seconds", 0), 2),
            "retransmits": sent.get("retransmits"),
            "error": report.get("error")}


def server_status(binary: Path, workdir: Path) -> dict | None:
    """The server's counters from `mptund status --json`, or why there are none (a
    server whose loop is starved does not answer)."""
    try:
        result = subprocess.run([binary, "status", "--socket", workdir / "server.sock", "--json"],
                                capture_output=True, text=True, timeout=10, check=False)
    except subprocess.TimeoutExpired:
        return {"error": "status --json did not answer within 10 s"}
    if result.returncode != 0:
        return {"error": f"status --json exited with {result.returncode}: {result.stderr.strip()}"}
    try:
        report = json.loads(result.stdout)
    except ValueError:
        return {"error": "status --json printed no JSON"}
    sessions = report.get("sessions", [])
    return {
        "drops": {reason: count for reason, count in report.get("drops", {}).items() if count},
        "sessions": len(sessions),
        "cookie_replies_sent": report.get("cookie_replies_sent"),
        "sessions_established": report.get("sessions_established"),
    }


def cpu_pressure() -> str | None:
    """The kernel's CPU pressure line ("some avg10=..."): how much of the time something
    on the machine waited for a CPU. Other work shares the machine."""
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def one_run(args, topo: Topology, keys: Keys, workdir: Path, attack: str, hostile_on: bool,
            variant: dict, hostile_bin: Path) -> dict:
    server_bin = Path(variant["server"]["path"])
    client_bin = Path(variant["client"]["path"])
    tag = f"{attack}-{variant['label']}-{'on' if hostile_on else 'off'}"
    server = start_daemon(topo.server, server_bin, workdir, "server", tag)
    clients = {}
    try:
        time.sleep(0.3)
        for index, ns in enumerate(topo.clients, start=1):
            clients[index] = start_daemon(ns, client_bin, workdir, f"client{index}", tag)
        wait_tunnels(topo, {"server": server, **{f"client{i}": p for i, p in clients.items()}},
                     timeout=30)
        hostile = None
        hostile_log = workdir / f"{tag}-hostile.log"
        if hostile_on:
            rate = args.handshake_rate if attack == "handshake-sources" else args.hostile_rate
            hostile = topo.hostile.popen(
                hostile_bin, "--client-key", workdir / "hostile.key",
                "--server-public-key", keys.public["server"],
                "--server", f"{SERVER_PUBLIC_ADDR}:{SERVER_PORT}", "--bind", f"{HOSTILE_NET}.2",
                "--attack", attack, "--rate", str(rate),
                "--duration", str(args.lead + args.duration + 2.5),
                "--inner-source", HOSTILE_INNER, "--inner-destination", SERVER_TUN_ADDR,
                "--source-base", f"{HOSTILE_SOURCES_NET}.0", "--sources", str(HOSTILE_SOURCES),
                stdout=subprocess.PIPE, stderr=open(hostile_log, "w"), text=True)
            deadline = time.monotonic() + 15
            while "confirmed" not in hostile_log.read_text() and time.monotonic() < deadline:
                if hostile.poll() is not None:
                    break
                time.sleep(0.05)
        time.sleep(args.lead)
        sampler = RssSampler(server.pid)
        sampler.start()
        cpu_before = proc_cpu_seconds(server.pid)
        hostile_cpu_before = proc_cpu_seconds(hostile.pid) if hostile else 0.0
        wall_before = time.monotonic()
        iperf_servers = [topo.server.popen("iperf3", "-s", "-1", "-B", SERVER_TUN_ADDR,
                                           "-p", str(IPERF_BASE_PORT + i), stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)
                         for i in range(1, len(topo.clients) + 1)]
        time.sleep(0.3)
        iperfs, pings = {}, {}
        ping_count = int(round(args.duration / PING_INTERVAL_S))
        for index, ns in enumerate(topo.clients, start=1):
            argv = ["iperf3", "-c", SERVER_TUN_ADDR, "-p", str(IPERF_BASE_PORT + index),
                    "-t", str(args.duration), "-J", "--connect-timeout", "5000"]
            if args.client_rate_mbit:
                # Paced in writes of 1,400 bytes (iperf3 checks its rate every ms): its
                # default 128 KB writes are each a queue of tens of ms in the tunnel.
                # -b and -l reach the sending server of a -R test too; --fq-rate does not.
                argv += ["-b", f"{args.client_rate_mbit}M", "-l", "1400"]
            if index % 2 == 0:
                argv.append("-R")
            iperfs[index] = ns.popen(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            pings[index] = ns.popen("ping", "-n", "-i", str(PING_INTERVAL_S), "-c", str(ping_count),
                                    "-W", "1", SERVER_TUN_ADDR, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
        client_rows = []
        for index in iperfs:
            try:
                out, err = iperfs[index].communicate(timeout=args.duration + 30)
                report = json.loads(out) if out.strip() else {"error": err.strip()}
            except (subprocess.TimeoutExpired, ValueError) as error:
                report = {"error": str(error)}
            ping_out, _ = pings[index].communicate(timeout=30)
            client_rows.append({"client": index, "direction": "down" if index % 2 == 0 else "up",
                                **iperf_goodput(report), "ping": parse_ping(ping_out, ping_count)})
        wall = time.monotonic() - wall_before
        cpu = proc_cpu_seconds(server.pid) - cpu_before
        sampler.stopped.set()
        sampler.join()
        hwm = proc_status_kib(server.pid, "VmHWM")
        status = server_status(server_bin, workdir) if server.poll() is None else None
        for proc in iperf_servers:
            topo.bed.stop_process(proc, timeout=2)
        hostile_report = None
        if hostile is not None:
            hostile_cpu = proc_cpu_seconds(hostile.pid) - hostile_cpu_before
            try:
                out, _ = hostile.communicate(timeout=args.lead + args.duration + 15)
                lines = [line for line in out.splitlines() if line.startswith("{")]
                hostile_report = json.loads(lines[-1]) if lines else {"error": log_tail(hostile_log)}
            except subprocess.TimeoutExpired:
                topo.bed.stop_process(hostile)
                hostile_report = {"error": "did not exit", "log": log_tail(hostile_log)}
            hostile_report["exit_code"] = hostile.returncode
            hostile_report["cpu_percent"] = round(100 * hostile_cpu / wall, 1)
        exited = {name: proc.returncode for name, proc in
                  [("server", server)] + [(f"client{i}", p) for i, p in clients.items()]
                  if proc.poll() is not None}
        return {
            "attack": attack,
            "hostile": hostile_on,
            "variant": variant["label"],
            "role": variant["role"],
            "server_binary": variant["server"],
            "client_binary": variant["client"],
            "hostile_binary": describe_binary(hostile_bin, args.hostile_commit),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "duration_s": args.duration,
            "clients": client_rows,
            "server": {
                "peak_rss_mib": round(hwm / 1024, 1) if hwm else None,
                "peak_rss_sampled_mib": round(sampler.peak_kib / 1024, 1),
                "rss_samples": sampler.samples,
                "memory_budget_mib": args.memory_budget_mib,
                "cpu_percent": round(100 * cpu / wall, 1),
                "status": status,
            },
            "exited": exited,
            "server_log_tail": log_tail(workdir / f"{tag}-server.log") if "server" in exited else None,
            "hostile_report": hostile_report,
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "cpu_pressure": cpu_pressure(),
        }
    finally:
        for proc in list(clients.values()) + [server]:
            topo.bed.stop_process(proc, timeout=5)
            proc.log_file.close()


# ---------------------------------------------------------------------------
# Report


def fmt(value, digits=1, unit=""):
    if value is None:
        return "–"
    if isinstance(value, float) and math.isinf(value):
        return "∞"
    return f"{value:.{digits}f}{unit}"


def dump_run(run: dict) -> str:
    """Indented JSON with each list of ping round trips on one line."""
    text = json.dumps(run, indent=2)
    return re.sub(r'("rtt_ms_by_seq": )\[([^\]]*)\]',
                  lambda m: m.group(1) + "[" + ", ".join(v.strip() for v in m.group(2).split(",")
                                                         if v.strip()) + "]", text) + "\n"


def load_runs(out: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted((out / "runs").glob("*.json"))]


def merge_repeats(runs: list[dict]) -> dict:
    """One run from the repetitions of the same attack, binary and hostile setting:
    per client the median goodput and the median ping p99 (a p99 of None, more than
    1 % lost, counting as the slowest), the worst loss; the server's highest peak
    memory, its median CPU; every daemon that exited in any of them."""
    if len(runs) == 1:
        return {**runs[0], "repeats": 1}

    def median_p99(values):
        median = statistics.median(math.inf if v is None else v for v in values)
        return None if math.isinf(median) else median

    clients = []
    for rows in zip(*(run["clients"] for run in runs)):
        first = rows[0]
        clients.append({
            **first,
            "goodput_mbit": statistics.median(row["goodput_mbit"] for row in rows),
            "goodput_mbit_each": [row["goodput_mbit"] for row in rows],
            "error": "; ".join(row["error"] for row in rows if row.get("error")) or None,
            "ping": {
                "p99_ms": median_p99([row["ping"]["p99_ms"] for row in rows]),
                "p99_ms_each": [row["ping"]["p99_ms"] for row in rows],
                "loss_percent": max(row["ping"]["loss_percent"] or 0 for row in rows),
            },
        })
    peaks = [run["server"]["peak_rss_mib"] for run in runs if run["server"]["peak_rss_mib"]]
    server = {
        **runs[0]["server"],
        "peak_rss_mib": max(peaks) if peaks else None,
        "peak_rss_sampled_mib": max(run["server"]["peak_rss_sampled_mib"] for run in runs),
        "cpu_percent": statistics.median(run["server"]["cpu_percent"] for run in runs),
        "status": next((run["server"]["status"] for run in runs
                        if (run["server"]["status"] or {}).get("error")), runs[0]["server"]["status"]),
    }
    exited = {}
    for run in runs:
        exited.update(run["exited"])
    return {**runs[0], "clients": clients, "server": server, "exited": exited, "repeats": len(runs),
            "load_average": [run.get("load_average") for run in runs]}


def compare(off: dict, on: dict) -> dict:
    """Per client: goodput ratio and ping p99 rise of `on` against `off`; a p99 of None
    means more than 1 % of the pings were lost."""
    rows = []
    by_client = {row["client"]: row for row in off["clients"]}
    for row in on["clients"]:
        base = by_client.get(row["client"])
        if base is None:
            continue
        ratio = row["goodput_mbit"] / base["goodput_mbit"] if base["goodput_mbit"] else None
        p99_off, p99_on = base["ping"]["p99_ms"], row["ping"]["p99_ms"]
        if p99_on is None:
            rise = math.inf
        elif p99_off is None:
            rise = None
        else:
            rise = p99_on - p99_off
        ok = ratio is not None and ratio >= MIN_GOODPUT_RATIO and rise is not None and rise <= MAX_P99_RISE_MS
        rows.append({"client": row["client"], "direction": row["direction"],
                     "goodput_off": base["goodput_mbit"], "goodput_on": row["goodput_mbit"],
                     "ratio": ratio, "p99_off": p99_off, "p99_on": p99_on, "p99_rise": rise,
                     "loss_on": row["ping"]["loss_percent"], "ok": ok})
    memory_ok = None
    budget = on["server"]["memory_budget_mib"]
    if budget:
        memory_ok = (on["server"]["peak_rss_mib"] or 0) <= budget
    crashed = sorted(set(off["exited"]) | set(on["exited"]))
    verdict = all(r["ok"] for r in rows) and not crashed and memory_ok is not False
    return {"rows": rows, "memory_ok": memory_ok, "crashed": crashed, "pass": verdict,
            "min_ratio": min((r["ratio"] for r in rows if r["ratio"] is not None), default=None),
            "max_rise": max((r["p99_rise"] for r in rows if r["p99_rise"] is not None), default=None)}


def write_report(out: Path) -> str:
    runs = load_runs(out)
    if not runs:
        raise SystemExit(f"no runs in {out / 'runs'}")
    grouped: dict[tuple[str, str, str], list] = {}
    for run in runs:
        grouped.setdefault((run["attack"], run["variant"], "on" if run["hostile"] else "off"),
                           []).append(run)
    pairs: dict[tuple[str, str], dict] = {}
    for (attack, variant, side), repeats in grouped.items():
        pairs.setdefault((attack, variant), {})[side] = merge_repeats(repeats)
    repeats = max(len(group) for group in grouped.values())
    variants = []
    for run in runs:
        if run["variant"] not in [v for v, _ in variants]:
            variants.append((run["variant"], run))
    # The baseline (before) first.
    variants.sort(key=lambda item: 0 if item[1]["role"] == "baseline" else 1)
    attacks = [a for a in ATTACKS if any(key[0] == a for key in pairs)]
    first = runs[0]
    lines = [
        "# Isolation: ten well-behaved clients and one hostile one on one server",
        "",
        "Generated by `benches/isolation/run.py --report` from the JSON files in `runs/`.",
        "",
        f"- {len(first['clients'])} clients, each a real `mptund` client daemon with "
        f"{first.get('settings', {}).get('paths', '?')} paths of "
        f"{first.get('settings', {}).get('path_mbit', '?')} Mbit/s (tbf), iperf3 at "
        f"{first.get('settings', {}).get('client_rate_mbit', '?')} Mbit/s through its tunnel "
        "(odd clients upload, even clients download) and a ping every 50 ms; "
        f"{first['duration_s']} s per run; hostile link "
        f"{first.get('settings', {}).get('hostile_mbit', '?')} Mbit/s.",
        f"- Machine: {first.get('machine', {}).get('node', '?')}, "
        f"{first.get('machine', {}).get('cpus', '?')} cores, kernel "
        f"{first.get('machine', {}).get('kernel', '?')}.",
        f"- Repetitions: {repeats} per attack, binary and setting"
        + (" (interleaved); per client the median goodput and the median ping p99 of the "
           "repetitions are compared, the server's highest peak memory is shown." if repeats > 1 else ".")
        + "",
        f"- Targets: goodput ratio ≥ {MIN_GOODPUT_RATIO}, ping p99 rise ≤ {MAX_P99_RISE_MS:.0f} ms, "
        "server peak memory within its budget, no daemon exits. A p99 of ∞ means more than "
        "1 % of the pings went unanswered.",
        "",
        "Binaries:",
        "",
    ]
    for label, run in variants:
        server = run["server_binary"]
        lines.append(f"- `{label}` ({run['role']}): server `{server['version']}`, commit "
                     f"`{server['commit']}` ({server['path']}); clients commit "
                     f"`{run['client_binary']['commit']}`; hostile_client commit "
                     f"`{run['hostile_binary']['commit']}`")
    lines += ["", "## Summary", "",
              "| attack | binary | min goodput ratio | max p99 rise ms | server peak MiB (off → on) "
              "| budget MiB | server CPU % (off → on) | hostile sent/s | answers per datagram "
              "| exited | verdict |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    results = {}
    for attack in attacks:
        for label, _ in variants:
            pair = pairs.get((attack, label), {})
            if "off" not in pair or "on" not in pair:
                continue
            result = compare(pair["off"], pair["on"])
            results[(attack, label)] = result
            off, on = pair["off"], pair["on"]
            hostile = on.get("hostile_report") or {}
            lines.append(
                f"| {attack} | {label} | {fmt(result['min_ratio'], 3)} | {fmt(result['max_rise'])} | "
                f"{fmt(off['server']['peak_rss_mib'])} → {fmt(on['server']['peak_rss_mib'])} | "
                f"{fmt(on['server']['memory_budget_mib'], 0)} | "
                f"{fmt(off['server']['cpu_percent'])} → {fmt(on['server']['cpu_percent'])} | "
                f"{fmt(hostile.get('sent_per_s'), 0)} | {fmt(hostile.get('answer_datagrams_per_sent'), 2)} | "
                f"{', '.join(result['crashed']) or 'none'} | {'PASS' if result['pass'] else 'FAIL'} |")
    for attack in attacks:
        lines += ["", f"## {attack}", ""]
        present = [(label, run) for label, run in variants if (attack, label) in results]
        if not present:
            continue
        header = "| client | dir |"
        rule = "|---|---|"
        for label, _ in present:
            header += (f" {label}: goodput off → on Mbit/s | ratio | p99 off → on ms | rise ms "
                       f"| loss on % |")
            rule += "---|---|---|---|---|"
        lines += [header, rule]
        rows_by_label = {label: {r["client"]: r for r in results[(attack, label)]["rows"]}
                         for label, _ in present}
        clients = sorted({c for rows in rows_by_label.values() for c in rows})
        for client in clients:
            line = None
            for label, _ in present:
                row = rows_by_label[label].get(client)
                if row is None:
                    continue
                if line is None:
                    line = f"| {client} | {row['direction']} |"
                mark = "" if row["ok"] else " ✗"
                line += (f" {fmt(row['goodput_off'], 2)} → {fmt(row['goodput_on'], 2)} | "
                         f"{fmt(row['ratio'], 3)}{mark} | {fmt(row['p99_off'])} → {fmt(row['p99_on'])} | "
                         f"{fmt(row['p99_rise'])} | {fmt(row['loss_on'])} |")
            lines.append(line)
        lines.append("")
        for label, _ in present:
            pair = pairs[(attack, label)]
            off, on = pair["off"], pair["on"]
            result = results[(attack, label)]
            hostile = on.get("hostile_report") or {}
            budget = on["server"]["memory_budget_mib"]
            memory = (f"{fmt(on['server']['peak_rss_mib'])} MiB against a budget of {budget} MiB "
                      f"({'within' if result['memory_ok'] else 'OVER'})" if budget else
                      f"{fmt(on['server']['peak_rss_mib'])} MiB (no budget given: "
                      "`--memory-budget-mib`)")
            drops = (on["server"].get("status") or {}).get("drops", {})
            lines += [
                f"- `{label}`: server peak memory {fmt(off['server']['peak_rss_mib'])} MiB without, "
                f"{memory} with the attack (sampled VmRSS peak {fmt(on['server']['peak_rss_sampled_mib'])}); "
                f"server CPU {fmt(off['server']['cpu_percent'])} % → {fmt(on['server']['cpu_percent'])} % "
                f"of a core; exited: {', '.join(result['crashed']) or 'none'}; "
                f"**{'PASS' if result['pass'] else 'FAIL'}**.",
                f"  Hostile client: sent {hostile.get('sent_datagrams', '–')} datagrams "
                f"({fmt(hostile.get('sent_per_s'), 0)}/s, {fmt(hostile.get('sent_mbit_per_s'))} Mbit/s, "
                f"{hostile.get('send_errors', '–')} send errors), got back "
                f"{hostile.get('received_datagrams', '–')} datagrams / {hostile.get('received_bytes', '–')} bytes "
                f"({fmt(hostile.get('answer_datagrams_per_sent'), 3)} datagrams and "
                f"{fmt(hostile.get('answer_bytes_per_sent'), 3)} bytes per byte sent; by type "
                f"{json.dumps(hostile.get('received_by_type', {}))}); its CPU "
                f"{fmt(hostile.get('cpu_percent'))} % of a core.",
                f"  Server drops with the attack: `{json.dumps(drops)}`"
                + (f"; status --json: {on['server']['status']['error']}"
                   if (on["server"].get("status") or {}).get("error") else ""),
                f"  Load average at the end (1, 5, 15 min): {off.get('load_average')} without, "
                f"{on.get('load_average')} with.",
            ]
            failed = [f"client {row['client']}: {row['error']}" for row in on["clients"] if row.get("error")]
            if failed:
                lines.append(f"  iperf3 failed with the attack: {'; '.join(failed)}.")
    text = "\n".join(lines) + "\n"
    # A hand-written reading at the end survives regeneration.
    path = out / "REPORT.md"
    if path.exists() and "\n## Reading" in path.read_text():
        text += "\n## Reading" + path.read_text().split("\n## Reading", 1)[1]
    path.write_text(text)
    return text


# ---------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", type=Path, metavar="DIR",
                        help="only (re)write DIR/REPORT.md from DIR/runs/*.json")
    parser.add_argument("--bin", type=Path, help="the server binary under test (default: build this tree)")
    parser.add_argument("--baseline-bin", type=Path, help="a second server binary, run interleaved (before)")
    parser.add_argument("--client-bin", type=Path,
                        help="the clients' binary (default: the same binary as the server of each run)")
    parser.add_argument("--hostile-bin", type=Path, help="hostile_client (default: build this tree)")
    parser.add_argument("--bin-commit", help="commit of --bin, if it cannot be found")
    parser.add_argument("--baseline-commit", help="commit of --baseline-bin, if it cannot be found")
    parser.add_argument("--hostile-commit", help="commit of --hostile-bin, if it cannot be found")
    parser.add_argument("--attacks", default=",".join(ATTACKS))
    parser.add_argument("--repeat", type=int, default=1,
                        help="repetitions of every run, interleaved; the report takes medians")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--paths", type=int, default=2, help="paths per client")
    parser.add_argument("--path-mbit", type=float, default=10.0, help="tbf rate of every client path")
    parser.add_argument("--client-rate-mbit", type=float, default=6.0,
                        help="iperf3 -b of each client (0: unpaced)")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per run")
    parser.add_argument("--lead", type=float, default=1.0,
                        help="seconds the attack runs before the measurement starts")
    parser.add_argument("--hostile-mbit", type=float, default=100.0, help="tbf rate of the hostile link")
    parser.add_argument("--hostile-rate", type=float, default=0,
                        help="hostile datagrams per second (0: as fast as its socket takes them)")
    parser.add_argument("--handshake-rate", type=float, default=8000,
                        help="inits per second of handshake-sources (over the 256 sources' 5,120/s of buckets)")
    parser.add_argument("--client-rekey-ms", type=int, default=4000,
                        help="clients' timers.rekey_after_ms, so renewals happen within a run (0: default)")
    parser.add_argument("--client-reject-ms", type=int, default=8000,
                        help="clients' timers.reject_after_ms")
    parser.add_argument("--memory-budget-mib", type=float,
                        help="the server's configured memory budget, printed beside its peak")
    parser.add_argument("--server-extra", default="",
                        help="TOML put before the server file's first table (\\n for new lines), "
                             "e.g. a memory budget setting")
    parser.add_argument("--out", type=Path, help="results folder (default: results-<commit> here)")
    args = parser.parse_args()

    if args.report:
        print(write_report(args.report))
        return 0

    attacks = [a.strip() for a in args.attacks.split(",") if a.strip()]
    unknown = [a for a in attacks if a not in ATTACKS]
    if unknown:
        parser.error(f"unknown attacks {unknown}; known: {ATTACKS}")
    if args.clients * args.paths > 99:
        parser.error("at most 99 client paths (198.18.1-99.0/24)")
    if args.bin is None or args.hostile_bin is None:
        built_bin, built_hostile = build()
        args.bin = args.bin or built_bin
        args.hostile_bin = args.hostile_bin or built_hostile

    variants = []
    for role, path, commit in (("baseline", args.baseline_bin, args.baseline_commit),
                               ("test", args.bin, args.bin_commit)):
        if path is None:
            continue
        server = describe_binary(path.resolve(), commit)
        client = describe_binary(args.client_bin.resolve(), None) if args.client_bin else server
        variants.append({"role": role, "server": server, "client": client,
                         "label": f"{role}-{server['commit'][:9]}"})
    tested = variants[-1]["server"]["commit"][:9]
    out = args.out or HERE / (f"results-{tested}" if len(variants) == 1 else
                              f"results-{tested}-vs-{variants[0]['server']['commit'][:9]}")
    (out / "runs").mkdir(parents=True, exist_ok=True)

    from netns import Testbed  # noqa: E402

    settings = {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()}
    machine = {"node": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release()}
    started = time.monotonic()
    with Testbed() as bed:
        workdir = bed.scratch_dir("mptund-isolation-")
        topo = Topology(bed, args)
        keys = Keys(Path(variants[-1]["server"]["path"]), workdir, args.clients)
        write_configs(args, keys, workdir)
        runs_planned = [(repeat, attack, variant, hostile_on) for repeat in range(1, args.repeat + 1)
                        for attack in attacks for variant in variants for hostile_on in (False, True)]
        for repeat, attack, variant, hostile_on in runs_planned:
            name = f"{attack}.{variant['label']}.{'on' if hostile_on else 'off'}"
            if args.repeat > 1:
                name += f".r{repeat}"
            try:
                run = one_run(args, topo, keys, workdir, attack, hostile_on, variant,
                              args.hostile_bin)
            except Exception as error:  # noqa: BLE001 - record it and go on
                print(f"{name}: {error}", file=sys.stderr, flush=True)
                continue
            run["settings"] = settings
            run["machine"] = machine
            (out / "runs" / f"{name}.json").write_text(dump_run(run))
            goodputs = [row["goodput_mbit"] for row in run["clients"]]
            p99s = [row["ping"]["p99_ms"] for row in run["clients"]]
            print(f"{name}: goodput median {statistics.median(goodputs):.2f} "
                  f"min {min(goodputs):.2f} Mbit/s, ping p99 max "
                  f"{'lost' if None in p99s else f'{max(p99s):.1f} ms'}, server peak "
                  f"{run['server']['peak_rss_mib']} MiB, exited {run['exited'] or 'none'}"
                  + (f", hostile sent {run['hostile_report'].get('sent_per_s')}/s got back "
                     f"{run['hostile_report'].get('received_datagrams')}"
                     if run["hostile_report"] else ""), flush=True)
    print(f"{len(attacks)} attacks in {time.monotonic() - started:.0f} s", flush=True)
    print(write_report(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
