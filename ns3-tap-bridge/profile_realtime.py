#!/usr/bin/env python3
"""Where does ns-3's wall-clock time go during a hybrid transfer?

    sudo python3 ns3-tap-bridge/profile_realtime.py                       # TCP, default scenario
    sudo python3 ns3-tap-bridge/profile_realtime.py --udp-mbit 40 --headroom --perf

One hybrid bed (LTE + Wi-Fi + p2p by default) carries a load through the
tunnel, server to client: the runner's byte-checked TCP transfer, or with
--udp-mbit a constant-rate UDP stream (iperf3) for --seconds. Measured over the
load, from /proc: the CPU time of each ns-3 thread (the simulator's main thread
and TapBridge's reader threads), of the two daemons, and of the whole machine
(all cores, by state), as a share of the wall-clock time. With --perf, a
`perf record` of the ns-3 process over the same interval, summarised by shared
object and by symbol. Then ns-3's lag statistics for the run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ns3_hybrid import HybridBed, realtime_verdict  # noqa: E402
from measure_realtime import HEADROOM_ARGS, UDP_PAYLOAD_BYTES  # noqa: E402
from mptund import CLIENT_TUN_ADDR  # noqa: E402

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# perf's sampling rate: high enough for a few thousand samples over a short
# transfer, low enough that the profiler itself costs little (about 1 % of a core).
PERF_FREQUENCY_HZ = 999
PERF_TOP_ROWS = 40


def thread_times(pid: int) -> dict[int, tuple[str, float, float]]:
    """Every thread of `pid`: tid -> (name, seconds on a CPU, seconds runnable but
    waiting for one), from the scheduler's own accounting (/proc/.../schedstat, in
    ns). The rest of the wall-clock time the thread slept."""
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            on_cpu_ns, waiting_ns, _timeslices = (task / "schedstat").read_text().split()
        except OSError:
            continue  # the thread ended meanwhile
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        threads[int(task.name)] = (name, int(on_cpu_ns) / 1e9, int(waiting_ns) / 1e9)
    return threads


def machine_cpu_seconds() -> dict[str, float]:
    """All cores' time so far by state (user, nice, system, idle, ...), from /proc/stat."""
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:1 + len(names)]
    return {name: int(value) / CLOCK_TICKS_PER_S for name, value in zip(names, fields)}


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def snapshot(bed: HybridBed) -> dict:
    return {"wall": time.monotonic(), "ns3": thread_times(bed.ns3.pid),
            "client": process_cpu_seconds(bed.pair.client_proc.pid),
            "server": process_cpu_seconds(bed.pair.server_proc.pid), "machine": machine_cpu_seconds()}


def cpu_shares(before: dict, after: dict, ns3_pid: int) -> dict:
    """CPU used between two snapshots as a share of the wall-clock interval (1.0 = one core)."""
    wall = after["wall"] - before["wall"]
    threads = []
    for tid, (name, on_cpu, waiting) in after["ns3"].items():
        _, on_cpu_before, waiting_before = before["ns3"].get(tid, (name, 0.0, 0.0))
        role = "simulator (main)" if tid == ns3_pid else name
        threads.append({"tid": tid, "role": role, "share": round((on_cpu - on_cpu_before) / wall, 3),
                        "waiting_for_cpu_share": round((waiting - waiting_before) / wall, 3)})
    threads.sort(key=lambda thread: -thread["share"])
    machine = {state: round((after["machine"][state] - before["machine"][state]) / wall, 3)
               for state in after["machine"]}
    return {"wall_s": round(wall, 2), "ns3_threads": threads,
            "ns3_total": round(sum(thread["share"] for thread in threads), 3),
            "client_daemon": round((after["client"] - before["client"]) / wall, 3),
            "server_daemon": round((after["server"] - before["server"]) / wall, 3),
            "machine_cores_by_state": machine}


def perf_summary(data: Path, sort: str) -> list[str]:
    report = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", "-g", "none", "--sort", sort,
                             "--percent-limit", "0.3"], capture_output=True, text=True, timeout=300)
    rows = [line for line in report.stdout.splitlines() if line.strip() and not line.startswith("#")]
    return rows[:PERF_TOP_ROWS]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--links", default="lte,wifi,p2p")
    parser.add_argument("--bytes", type=int, default=10_000_000, help="TCP transfer size (without --udp-mbit)")
    parser.add_argument("--udp-mbit", type=float, help="offer this constant UDP rate instead of a TCP transfer")
    parser.add_argument("--idle", action="store_true",
                        help="no load: the tunnel's keepalives only, for --seconds (the simulator's own cost)")
    parser.add_argument("--seconds", type=int, default=8, help="UDP load or idle duration")
    parser.add_argument("--headroom", action="store_true",
                        help="links with headroom (measure_realtime.py's: p2p 100 Mbit/s, Wi-Fi 54, LTE 50 RBs)")
    parser.add_argument("--scheduler", default="earliest-arrival")
    parser.add_argument("--no-rt-priority", action="store_true")
    parser.add_argument("--perf", action="store_true", help="perf record the ns-3 process during the load")
    parser.add_argument("--perf-data", help="keep perf's recording (with call graphs) here")
    parser.add_argument("--ns3-arg", action="append", default=[])
    parser.add_argument("--json", help="write the measurements here")
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ns3_args = (HEADROOM_ARGS if args.headroom else []) + args.ns3_arg
    scratch = Path(tempfile.mkdtemp(prefix="mptund-ns3-perf-"))
    perf_data = Path(args.perf_data) if args.perf_data else scratch / "perf.data"
    with HybridBed(links=args.links.split(","), ns3_args=ns3_args, scheduler=args.scheduler,
                   realtime_priority=not args.no_rt_priority) as bed:
        bed.start_daemons()
        perf = None
        if args.perf:
            perf = subprocess.Popen(["perf", "record", "-g", "-F", str(PERF_FREQUENCY_HZ), "-p", str(bed.ns3.pid),
                                     "-o", str(perf_data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)  # perf attaches
        before = snapshot(bed)
        if args.idle:
            time.sleep(args.seconds)
            load = {"idle_s": args.seconds}
        elif args.udp_mbit:
            receiver = bed.client.popen("iperf3", "-s", "-1", "-B", CLIENT_TUN_ADDR, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
            sender = bed.server.run("iperf3", "-c", CLIENT_TUN_ADDR, "-u", "-b", f"{args.udp_mbit}M",
                                    "-l", str(UDP_PAYLOAD_BYTES), "-t", str(args.seconds),
                                    "--connect-timeout", "5000", "-J", capture=True, timeout=args.seconds + 30,
                                    check=False)
            bed.testbed.stop_process(receiver)
            try:
                iperf = json.loads(sender.stdout)["end"]["sum"]
                load = {"udp_offered_mbit": args.udp_mbit,
                        "udp_received_mbit": round(iperf["bits_per_second"] * (1 - iperf["lost_percent"] / 100)
                                                   / 1e6, 2), "udp_lost_percent": iperf["lost_percent"]}
            except (json.JSONDecodeError, KeyError):
                load = {"udp_offered_mbit": args.udp_mbit, "udp_received_mbit": None}
        else:
            transfer = bed.transfer(args.bytes, "down", timeout=120)["down"]
            receiver = transfer["receiver"]
            load = {"tcp_bytes": receiver["bytes"], "byte_exact": transfer["byte_exact"],
                    "tcp_mbit": round(receiver["bytes"] * 8 / receiver["seconds"] / 1e6, 2)}
        after = snapshot(bed)
        if perf is not None:
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=60)
        _client, _server, ns3 = bed.stop()
    shares = cpu_shares(before, after, bed.ns3.pid)
    lag = ns3["lag"]
    result = {"load": load, "cpu": shares, "lag": lag, "verdict": realtime_verdict(lag), "ns3_args": ns3_args,
              "rt_priority": not args.no_rt_priority}
    print(json.dumps(load))
    print(f"over {shares['wall_s']} s of load, CPU as a share of one core (ns-3's threads: on a CPU, "
          "and runnable but waiting for one):")
    for thread in shares["ns3_threads"]:
        if thread["share"] >= 0.005:
            print(f"  ns-3 {thread['role']:<22} {thread['share']:.3f}   waiting {thread['waiting_for_cpu_share']:.3f}")
    print(f"  ns-3 total                  {shares['ns3_total']:.3f}")
    print(f"  mptund client, server       {shares['client_daemon']:.3f}, {shares['server_daemon']:.3f}")
    print("  machine (2 cores = 2.0)     " + ", ".join(f"{state} {share:.2f}" for state, share in
                                                       shares["machine_cores_by_state"].items() if share >= 0.01))
    print(f"lag: max {lag['max_ms']:.2f} ms, p99 {lag['p99_ms']:.2f} ms, p50 {lag['p50_ms']:.2f} ms, "
          f"{lag['samples']} samples; verdict {result['verdict']} (tolerance {lag['tolerance_ms']:g} ms)")
    print("max lag per simulated second (ms): " + " ".join(f"{ms:.0f}" for ms in lag["max_ms_per_s"]))
    if args.perf and perf_data.exists():
        result["perf_by_object"] = perf_summary(perf_data, "dso")
        result["perf_by_symbol"] = perf_summary(perf_data, "dso,sym")
        print("perf, ns-3 process, by shared object:")
        print("\n".join(result["perf_by_object"]))
        print("perf, by symbol:")
        print("\n".join(result["perf_by_symbol"]))
    shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
