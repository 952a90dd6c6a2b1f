#!/usr/bin/env python3
"""How much traffic can ns-3 carry here and still keep real time?

    sudo python3 ns3-tap-bridge/measure_realtime.py --rates 10,20,40,60,80

For each offered rate, a fresh hybrid test bed (LTE + Wi-Fi + p2p by default,
configured with headroom: p2p 100 Mbit/s, Wi-Fi 54 Mbit/s, LTE 50 resource
blocks) carries a constant-rate UDP stream (iperf3) from server to client
through the tunnel; round-robin puts a third on each link. Printed per rate:
what arrived (iperf3 and ns-3's per-link counters) and ns-3's lag behind the
wall clock (max, p99). A lag that grows with the rate is the limit. A UDP load
is used rather than TCP so the offered load does not depend on the tunnel's
congestion control.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ns3_hybrid import KEPT_UP, HybridBed, HybridError, realtime_verdict  # noqa: E402
from mptund import CLIENT_TUN_ADDR  # noqa: E402

HEADROOM_ARGS = ["--p2pRate=100Mbps", "--p2pDelay=10ms", "--wifiMode=OfdmRate54Mbps", "--lteRbs=50"]
# Datagrams small enough for the tunnel's MTU (1500 minus mptund's overhead).
UDP_PAYLOAD_BYTES = 1200


def measure(rate_mbit: float, seconds: int, links: list[str], ns3_args: list[str]) -> dict:
    with HybridBed(links=links, ns3_args=ns3_args) as bed:
        bed.start_daemons()
        server = bed.client.popen("iperf3", "-s", "-1", "-B", CLIENT_TUN_ADDR, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        client = bed.server.run("iperf3", "-c", CLIENT_TUN_ADDR, "-u", "-b", f"{rate_mbit}M",
                                "-l", str(UDP_PAYLOAD_BYTES), "-t", str(seconds), "--connect-timeout", "5000",
                                "-J", capture=True, timeout=seconds + 30, check=False)
        bed.testbed.stop_process(server)
        _client_report, _server_report, ns3 = bed.stop()
    try:
        iperf = json.loads(client.stdout)["end"]["sum"]
        received_mbit = iperf["bits_per_second"] * (1 - iperf["lost_percent"] / 100) / 1e6
        lost_percent = iperf["lost_percent"]
    except (json.JSONDecodeError, KeyError):
        received_mbit, lost_percent = float("nan"), float("nan")
    per_link = {name: link["down"]["delivered_bytes"] * 8 / seconds / 1e6 for name, link in ns3["links"].items()}
    return {"offered_mbit": rate_mbit, "received_mbit": received_mbit, "lost_percent": lost_percent,
            "ns3_down_mbit": per_link, "lag": ns3["lag"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="10,20,40,60,80", help="offered UDP rates, Mbit/s")
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--links", default="lte,wifi,p2p")
    parser.add_argument("--ns3-arg", action="append", default=[], help="extra mptund-ns3 arguments")
    parser.add_argument("--json", help="write all results here")
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    results = []
    print(f"{'offered':>8} {'received':>9} {'loss %':>7}  {'ns-3 per link (Mbit/s)':<34} "
          f"{'lag max':>8} {'p99':>6} {'p99.9':>6}  kept up")
    for rate in (float(r) for r in args.rates.split(",")):
        try:
            result = measure(rate, args.seconds, args.links.split(","), HEADROOM_ARGS + args.ns3_arg)
        except HybridError as error:
            print(f"{rate:>8.1f}  failed: {error}")
            continue
        results.append(result)
        links = " ".join(f"{name} {mbit:.1f}" for name, mbit in result["ns3_down_mbit"].items())
        lag = result["lag"]
        print(f"{rate:>8.1f} {result['received_mbit']:>9.1f} {result['lost_percent']:>7.1f}  {links:<34} "
              f"{lag['max_ms']:>8.1f} {lag['p99_ms']:>6.1f} {lag['p999_ms']:>6.1f}  {realtime_verdict(lag) == KEPT_UP}",
              flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
