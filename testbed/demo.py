#!/usr/bin/env python3
"""The quick-start demo: a client and a server in their own network namespaces, joined
by three veth pairs (three uplinks), carry a 100 MB TCP transfer each way through
mptund, checked byte for byte; then the per-path counters are printed.

    sudo python3 testbed/demo.py [--paths 3] [--megabytes 100]
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mptund import CLIENT_TUN_ADDR, SERVER_TUN_ADDR, DaemonPair, direct_topology  # noqa: E402
from netns import Testbed  # noqa: E402

TRANSFER = str(Path(__file__).resolve().parent / "transfer.py")


def transfer(sender_ns, receiver_ns, address: str, port: int, count: int) -> tuple[dict, dict]:
    receiver = receiver_ns.popen(sys.executable, TRANSFER, "recv", "--listen", f"{address}:{port}",
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    receiver.stderr.readline()
    sent = json.loads(sender_ns.output(sys.executable, TRANSFER, "send", "--to", f"{address}:{port}",
                                       "--bytes", str(count), timeout=300))
    received = json.loads(receiver.communicate(timeout=300)[0])
    return sent, received


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paths", type=int, default=3)
    parser.add_argument("--megabytes", type=int, default=100)
    args = parser.parse_args()
    count = args.megabytes * 1_000_000
    ok = True
    with Testbed() as bed:
        client, server, uplinks = direct_topology(bed, args.paths)
        print(f"namespaces {client.name} and {server.name}, uplinks {', '.join(uplinks)}")
        pair = DaemonPair(bed, client, server, uplinks)
        pair.start()
        print(f"tunnel up: {CLIENT_TUN_ADDR} <-> {SERVER_TUN_ADDR}, logs in {pair.workdir}")
        for label, (sender, receiver, address, port) in {
            "client -> server": (client, server, SERVER_TUN_ADDR, 5001),
            "server -> client": (server, client, CLIENT_TUN_ADDR, 5002),
        }.items():
            sent, received = transfer(sender, receiver, address, port, count)
            exact = sent["sha256"] == received["sha256"] and received["bytes"] == count
            ok &= exact
            rate = received["bytes"] * 8 / received["seconds"] / 1e6
            print(f"{label}: {received['bytes']} bytes in {received['seconds']:.2f} s "
                  f"({rate:.0f} Mbit/s), sha256 {'matches' if exact else 'DIFFERS'}")
        client_report, server_report = pair.stop()
    print(f"\n{'side':<7}{'path':<7}{'state':<7}{'tx pkts':>10}{'tx MB':>9}{'rx pkts':>10}{'rx MB':>9}{'srtt ms':>9}")
    for side, report in (("client", client_report), ("server", server_report)):
        for path in report["sessions"][0]["paths"]:
            srtt = f"{path['srtt_ms']:.2f}" if path["srtt_ms"] is not None else "-"
            print(f"{side:<7}{path['name']:<7}{path['state']:<7}{path['sent_packets']:>10}"
                  f"{path['sent_bytes'] / 1e6:>9.1f}{path['received_packets']:>10}"
                  f"{path['received_bytes'] / 1e6:>9.1f}{srtt:>9}")
    drops = {k: v for k, v in server_report["drops"].items() if v}
    print(f"server drops: {drops or 'none'}")
    print("namespaces removed; demo", "passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
