#!/usr/bin/env python3
"""One TCP upload over uplinks shaped by token buckets, for an A/B of mptund builds.

The linkem scenarios of run.py have no burst allowance and round trips of 10 ms and
more. Real shapers have a bucket: after a lull it passes its burst at line rate. This
runs the end-to-end tests' operations fixture (`tests/e2e/test_ops.py`): three veth
uplinks, each shaped by `tbf rate 20mbit burst 32kb latency 50ms` in both directions,
an RTT of about 0.1 ms, and the daemon's default controller and scheduler. Each run
uploads 40 MB; the builds take turns, so drift on the machine hits them alike.

Per run it prints one JSON line: goodput, the share of status polls (every 0.2 s after
the first second) in which capacity shares were on, and each uplink's median
delivery-rate estimate. Root is needed (network namespaces).

    sudo python3 benches/schedulers/token_bucket.py --runs 5 \\
        --build new=target/release/mptund --build old=/tmp/mptund-previous \\
        --out benches/schedulers/results-token-bucket/ab.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests" / "e2e"), str(REPO / "testbed")]

from mptund import SERVER_TUN_ADDR, DaemonPair, binary_record, direct_topology  # noqa: E402
from netns import Testbed  # noqa: E402
from test_ops import live, shape_uplinks  # noqa: E402
from test_tunnel import result, start_receiver, start_sender  # noqa: E402

TRANSFER_BYTES = 40_000_000
UPLINKS = 3


def one_run(binary: str, seed: int) -> dict:
    with Testbed() as bed:
        client, server, uplinks = direct_topology(bed, UPLINKS)
        shape_uplinks(client, server, uplinks)
        pair = DaemonPair(bed, client, server, uplinks, scheduler=None,
                          congestion_controller=None)
        pair.binary = binary
        pair.start()
        receiver = start_receiver(pair.server_ns, SERVER_TUN_ADDR, 5001)
        sender = start_sender(pair.client_ns, SERVER_TUN_ADDR, 5001, TRANSFER_BYTES,
                              seed=seed)
        started = time.monotonic()
        polls = []
        while sender.poll() is None:
            sessions = live(pair, "client")["sessions"]
            if sessions and time.monotonic() - started >= 1.0:
                polls.append(sessions[0])
            time.sleep(0.2)
        sent = result(sender)
        result(receiver)
        pair.stop()
    return {
        "goodput_mbit": round(TRANSFER_BYTES * 8 / sent["seconds"] / 1e6, 2),
        "sharing": round(sum(p["capacity_sharing"] for p in polls) / max(1, len(polls)), 2),
        "median_delivery_rate_mbit": [
            round(statistics.median(p["paths"][index]["delivery_rate_mbit"] for p in polls), 1)
            for index in range(UPLINKS)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per build")
    parser.add_argument("--build", action="append", required=True, metavar="NAME=BINARY",
                        help="a build to run, repeatable")
    parser.add_argument("--out", type=Path, help="also append the JSON lines to this file")
    args = parser.parse_args()
    builds = dict(build.split("=", 1) for build in args.build)
    rows = []
    for run in range(args.runs):
        for name, binary in builds.items():
            # The binary's own commit (its --version) on every line.
            row = {"run": run, "build": name, "commit": binary_record(binary)["commit"],
                   **one_run(binary, seed=run)}
            rows.append(row)
            line = json.dumps(row)
            print(line, flush=True)
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                with args.out.open("a") as out:
                    out.write(line + "\n")
    for name in builds:
        goodputs = [row["goodput_mbit"] for row in rows if row["build"] == name]
        print(f"{name}: goodput median {statistics.median(goodputs)} Mbit/s, "
              f"range {min(goodputs)}-{max(goodputs)}")


if __name__ == "__main__":
    main()
