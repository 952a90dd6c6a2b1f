#!/usr/bin/env python3
"""Scale benchmark: what one server pays for many idle sessions.

A server daemon (`mptund run`, release build) in one namespace; in another, the
`idle_clients` example (crates/mptund/examples/idle_clients.rs) runs N real clients,
each with its own key and UDP socket: every one performs the Noise handshake and then
keeps its path alive with a keepalive per second, as an idle `mptund` client does.

Measured per N, once every session is established and after a warm-up:

  rss_mib          the server's resident memory (VmRSS), and per session
  cpu_percent      the server's CPU time over the window, in % of one core
  scrape_ms        time of GET /metrics (median and max of 20), and its size
  status_ms        time of `mptund status --json` through the control socket

    sudo python3 benches/scale/run.py                  # N = 0, 100, 1000; writes results.json
    sudo python3 benches/scale/run.py --counts 100 --window 10
    sudo MPTUND_BIN=/other/tree/target/release/mptund python3 benches/scale/run.py \
        --counts 10000 --window 10 --out benches/scale/results-other.json

The results file records the server binary that ran (`server_binary`: its
`--version` and the commit that line names, which build.rs took when it was built).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
sys.path.insert(0, str(REPO_ROOT / "testbed"))
from mptund import binary_record, mptund_binary  # noqa: E402
from netns import Testbed  # noqa: E402

PORT = 51900
SERVER_IP = "198.18.1.1"
CLIENTS_IP = "198.18.1.2"
METRICS = "127.0.0.1:9477"

SCRAPE = """
import json, sys, time, urllib.request
times, size = [], 0
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    with urllib.request.urlopen(sys.argv[1], timeout=30) as response:
        size = len(response.read())
    times.append((time.perf_counter() - start) * 1e3)
print(json.dumps({"times_ms": times, "bytes": size}))
"""


def build() -> Path:
    subprocess.run(["cargo", "build", "--release", "-p", "mptund", "--bins", "--example",
                    "idle_clients"], cwd=REPO_ROOT, check=True)
    return REPO_ROOT / "target" / "release" / "examples" / "idle_clients"


def describe_binary(binary: Path) -> dict:
    """What ran as the server: its path, `mptund --version`, the commit that line names
    (taken when the binary was built, so it holds wherever the binary is copied), and
    when it was built."""
    record = binary_record(binary)
    built = Path(record["path"]).stat().st_mtime
    return {**record, "built": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(built))}


def proc_stat(pid: int) -> tuple[float, float]:
    """(CPU seconds so far, RSS in MiB) of a process. CPU time from schedstat, in
    nanoseconds: /proc/PID/stat's clock ticks (10 ms) are too coarse for an idle
    daemon."""
    cpu = sum(int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
              for task in os.listdir(f"/proc/{pid}/task")) / 1e9
    rss_kib = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text()
                   .splitlines() if line.startswith("VmRSS:"))
    return cpu, rss_kib / 1024


def measure(count: int, loadgen: Path, window: float, workdir: Path, keepalive_ms: int,
            status_calls_timed: int = 5, status_parallel: int = 1) -> dict:
    binary = mptund_binary()
    with Testbed() as bed:
        server_ns = bed.netns("server")
        clients_ns = bed.netns("clients")
        bed.veth(clients_ns, "c0", server_ns, "s0")
        clients_ns.addr("c0", f"{CLIENTS_IP}/24")
        server_ns.addr("s0", f"{SERVER_IP}/24")
        private = subprocess.run([binary, "genkey"], check=True, capture_output=True,
                                 text=True).stdout
        (workdir / "server.key").write_text(private)
        (workdir / "server.key").chmod(0o600)
        public = subprocess.run([binary, "pubkey"], input=private, check=True,
                                capture_output=True, text=True).stdout.strip()
        peers = subprocess.run([loadgen, "peers", "--count", str(max(count, 1))], check=True,
                               capture_output=True, text=True).stdout
        config = workdir / "server.toml"
        config.write_text(
            f'mode = "server"\nprivate_key_file = "server.key"\nlisten = "0.0.0.0:{PORT}"\n'
            '\n[tun]\nname = "mpt0"\naddresses = ["198.18.100.1/24"]\n'
            # The per-path log line every interval is switched off: 1,000 lines per
            # interval would measure the logger.
            '\n[log]\nstats_interval_ms = 0\n'
            # Every generated client comes from one address: the per-source token
            # bucket and the load threshold (cookie replies) would pace their
            # handshakes. This measures idle sessions, not the flood defences.
            '\n[handshake]\nload_threshold_per_s = 1000000\nrate_per_source_per_s = 100000\n'
            'burst_per_source = 100000\n'
            f'\n[metrics]\nlisten = "{METRICS}"\n'
            f'\n[control]\nsocket = "{workdir}/server.sock"\n\n' + peers)
        log = open(workdir / f"server-{count}.log", "w")
        server = server_ns.popen(binary, "run", "--config", config, stdout=log,
                                 stderr=subprocess.STDOUT, env={**os.environ, "MPTUND_LOG": "info"})
        time.sleep(0.5)
        _, idle_rss = proc_stat(server.pid)
        loadgen_proc = None
        started = time.monotonic()
        if count:
            loadgen_log = open(workdir / f"clients-{count}.log", "w")
            loadgen_proc = clients_ns.popen(loadgen, "run", "--count", str(count), "--server",
                                            f"{SERVER_IP}:{PORT}", "--server-public-key", public,
                                            "--bind", CLIENTS_IP, "--keepalive-ms", str(keepalive_ms),
                                            stdout=loadgen_log,
                                            stderr=subprocess.STDOUT)

        # Every `status --json` must answer (a failure stops the bench): counted.
        status_calls = 0

        def report() -> dict:
            nonlocal status_calls
            status_calls += 1
            return json.loads(server_ns.output(binary, "status", "--socket",
                                               workdir / "server.sock", "--json"))

        def sessions() -> int:
            return len(report()["sessions"])

        def received() -> int:
            return sum(p["received_packets"] for s in report()["sessions"] for p in s["paths"])

        deadline = time.monotonic() + 120
        while sessions() < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {sessions()} of {count} sessions after 120 s")
            time.sleep(0.5)
        established_s = time.monotonic() - started
        time.sleep(3)  # warm-up: handshakes done, keepalives steady
        received_before = received()
        cpu_before, _ = proc_stat(server.pid)
        load_before = proc_stat(loadgen_proc.pid)[0] if loadgen_proc else 0.0
        time.sleep(window)
        cpu_after, rss = proc_stat(server.pid)
        load_after = proc_stat(loadgen_proc.pid)[0] if loadgen_proc else 0.0
        # Includes the report requests' own small share of the window.
        received_per_s = (received() - received_before) / window
        scrape = json.loads(server_ns.output(sys.executable, "-c", SCRAPE,
                                             f"http://{METRICS}/metrics", "20"))
        status_times = []
        status_bytes = 0

        def timed_status(_: int) -> tuple[float, int]:
            start = time.perf_counter()
            text = server_ns.output(binary, "status", "--socket", workdir / "server.sock",
                                    "--json")
            elapsed_ms = (time.perf_counter() - start) * 1e3
            json.loads(text)
            return elapsed_ms, len(text)

        # `--status-parallel` operators asking at once: each call must still answer.
        with ThreadPoolExecutor(max_workers=status_parallel) as pool:
            for elapsed_ms, status_bytes in pool.map(timed_status, range(status_calls_timed)):
                status_times.append(elapsed_ms)
                status_calls += 1

        def first_byte(_: int) -> float:
            """Milliseconds until the daemon's first byte of a `status json` answer,
            read straight from the socket: `mptund status` gives up when it waits
            longer than its read timeout for the next byte."""
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as control:
                control.settimeout(60)
                start = time.perf_counter()
                control.connect(str(workdir / "server.sock"))
                control.sendall(b"status json\n")
                control.recv(1)
                waited_ms = (time.perf_counter() - start) * 1e3
                while control.recv(1 << 20):
                    pass
                return waited_ms

        with ThreadPoolExecutor(max_workers=status_parallel) as pool:
            first_bytes = list(pool.map(first_byte, range(status_parallel)))
        final_sessions = sessions()
        for proc in (loadgen_proc, server):
            if proc is not None:
                bed.stop_process(proc)
        log.close()
        server_log = (workdir / f"server-{count}.log").read_text()
        return {
            "sessions": count,
            "sessions_at_end": final_sessions,
            "established_after_s": round(established_s, 1),
            # Handshakes repeated because a client was slow to see the answer: each
            # replaces a session, and its freed memory may stay in the allocator.
            "sessions_replaced": server_log.count("replaced by a new handshake"),
            "rss_mib": round(rss, 1),
            "rss_before_clients_mib": round(idle_rss, 1),
            "rss_per_session_kib": round((rss - idle_rss) * 1024 / count, 1) if count else None,
            "cpu_percent": round((cpu_after - cpu_before) / window * 100, 2),
            "datagrams_received_per_s": round(received_per_s),
            "loadgen_cpu_percent": round((load_after - load_before) / window * 100, 2),
            "scrape_ms_median": round(statistics.median(scrape["times_ms"]), 2),
            "scrape_ms_max": round(max(scrape["times_ms"]), 2),
            "scrape_bytes": scrape["bytes"],
            "status_json_ms_median": round(statistics.median(status_times), 1),
            "status_json_max_ms": round(max(status_times), 1),
            "status_json_bytes": status_bytes,
            "status_json_calls_answered": status_calls,
            # `--status-parallel` requests at once, read without parsing.
            "status_first_byte_ms_max": round(max(first_bytes), 1),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="0,100,1000")
    parser.add_argument("--window", type=float, default=20.0,
                        help="seconds over which CPU is measured")
    parser.add_argument("--keepalive-ms", type=int, default=1000,
                        help="each client's keepalive interval (mptund's default: 1000)")
    parser.add_argument("--out", type=Path, default=HERE / "results.json")
    parser.add_argument("--status-calls", type=int, default=5,
                        help="timed `mptund status --json` calls at the end")
    parser.add_argument("--status-parallel", type=int, default=1,
                        help="how many of those run at once")
    args = parser.parse_args()
    loadgen = build()
    workdir = Path(tempfile.mkdtemp(prefix="mptund-scale-"))
    results = []
    try:
        for count in (int(c) for c in args.counts.split(",")):
            row = measure(count, loadgen, args.window, workdir, args.keepalive_ms,
                          args.status_calls, args.status_parallel)
            print(json.dumps(row), flush=True)
            results.append(row)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    args.out.write_text(json.dumps({
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
        # The bench's own tree (run.py, the load generator); the server that ran is
        # `server_binary`, which MPTUND_BIN may take from another tree.
        "git": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                              capture_output=True, text=True).stdout.strip(),
        "server_binary": describe_binary(mptund_binary()),
        "window_s": args.window,
        "keepalive_ms": args.keepalive_ms,
        "status_calls": args.status_calls,
        "status_parallel": args.status_parallel,
        "results": results,
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
