#!/usr/bin/env python3
"""First data point for the tunnel's cost: one TCP flow (iperf3) over a single veth
path, raw and through mptund, measured in the same run, alternating, with the CPU time
each daemon used. Writes JSON and a markdown table.

    sudo python3 benches/e2e/single_path.py [--seconds 10] [--repeats 3] [--out benches/e2e/results]

No emulation: this measures the daemon's own ceiling on this machine, not a network.
"""

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "testbed"))
from mptund import (SERVER_PUBLIC_ADDR, SERVER_TUN_ADDR, DaemonPair, binary_record,  # noqa: E402
                    direct_topology, mptund_binary)
from netns import Testbed  # noqa: E402


def iperf(client_ns, server_ns, address: str, seconds: int, congestion: str) -> dict:
    server = server_ns.popen("iperf3", "-s", "-1", "-B", address, stdout=None, stderr=None)
    time.sleep(0.3)
    out = client_ns.output("iperf3", "-c", address, "-t", str(seconds), "-C", congestion, "-J",
                           timeout=seconds + 30)
    server.wait(timeout=10)
    end = json.loads(out)["end"]
    return {"goodput_mbit": end["sum_received"]["bits_per_second"] / 1e6,
            "retransmits": end["sum_sent"].get("retransmits", 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--congestion", default="cubic")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    runs = []
    with Testbed() as bed:
        client, server, uplinks = direct_topology(bed, 1)
        pair = DaemonPair(bed, client, server, uplinks, log_level="warn")
        pair.start()
        for repeat in range(args.repeats):
            raw = iperf(client, server, SERVER_PUBLIC_ADDR, args.seconds, args.congestion)
            cpu_before, wall_before = pair.cpu_seconds(), time.monotonic()
            tunnel = iperf(client, server, SERVER_TUN_ADDR, args.seconds, args.congestion)
            wall = time.monotonic() - wall_before
            cpu_after = pair.cpu_seconds()
            cpu = {side: (cpu_after[side] - cpu_before[side]) / wall for side in cpu_after}
            runs.append({"repeat": repeat, "raw": raw, "tunnel": tunnel,
                         "ratio": tunnel["goodput_mbit"] / raw["goodput_mbit"],
                         "daemon_cpu_cores": cpu})
            print(json.dumps(runs[-1]), flush=True)
        pair.stop()
    summary = {
        # The binary's own commit (its --version), not the tree's.
        "mptund_binary": binary_record(mptund_binary()),
        "machine": {"cpus": __import__("os").cpu_count(), "kernel": platform.release()},
        "seconds": args.seconds, "congestion": args.congestion, "runs": runs,
        "median_raw_mbit": statistics.median(r["raw"]["goodput_mbit"] for r in runs),
        "median_tunnel_mbit": statistics.median(r["tunnel"]["goodput_mbit"] for r in runs),
        "median_ratio": statistics.median(r["ratio"] for r in runs),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "single_path.json").write_text(json.dumps(summary, indent=2))
    lines = [f"Binary: `{summary['mptund_binary']['version']}`", "",
             "| run | raw veth Mbit/s | through mptund Mbit/s | ratio | retransmits (tunnel) | client CPU (cores) | server CPU (cores) |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['repeat']} | {r['raw']['goodput_mbit']:.0f} | {r['tunnel']['goodput_mbit']:.0f} | "
                     f"{r['ratio']:.2f} | {r['tunnel']['retransmits']} | {r['daemon_cpu_cores']['client']:.2f} | "
                     f"{r['daemon_cpu_cores']['server']:.2f} |")
    lines.append(f"\nMedian: raw {summary['median_raw_mbit']:.0f} Mbit/s, tunnel "
                 f"{summary['median_tunnel_mbit']:.0f} Mbit/s, ratio {summary['median_ratio']:.2f}.")
    (args.out / "single_path.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
