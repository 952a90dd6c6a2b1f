#!/usr/bin/env python3
"""One transfer through mptund over a scenario, traced: every 30 ms or so it samples the
inner sender's TCP state (`ss -tin`) and both daemons' `mptund status`, and writes one
CSV row per sample. A download has the server send, an upload (`--direction upload`)
the client; the paths and the send queue are the sending daemon's. It shows where a gap
the receiving application saw, or a shortfall in goodput, came from: the inner flow's
window, slow-start threshold and RTT, mptund's send queue and its drops, each path's
window and queuing delay, the receiver's skipped gaps. Any scenario file works; the
transfer is sized as in run.py, by the rates of the direction it takes.

    sudo python3 benches/failover/trace.py --scenario tests/e2e/scenarios/blackout-best-path.toml \\
        --cc bbr --reorder equalize_delay=all-paths --out /tmp/trace.csv
    sudo python3 benches/failover/trace.py --scenario config/scenarios/three-paths-lossy.toml \\
        --cc cubic --out /tmp/lossy.csv
    sudo python3 benches/failover/trace.py --scenario config/scenarios/u-train-cells.toml \\
        --cc bbr --direction upload --out /tmp/train-up.csv
"""

import argparse
import csv
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent / "testbed"), str(HERE)]

from mptund import SERVER_TUN_ADDR, binary_record, mptund_binary  # noqa: E402
from tcp_state import data_connection, field  # noqa: E402
from topology import Topology  # noqa: E402

import run as failover  # noqa: E402

COLUMNS = ["t_s", "inner_cwnd_pkts", "inner_ssthresh_pkts", "inner_rtt_ms", "inner_min_rtt_ms",
           "inner_unacked_pkts", "inner_retransmissions", "send_queue_depth", "send_queue_aqm_drops",
           "send_queue_sojourn_drops", "receiver_gaps_skipped", "receiver_buffered",
           # The shares of the flow's busy time so far that the receiver's window and the
           # send buffer held it back, and the window the receiver last advertised.
           "inner_rwnd_limited_pct", "inner_sndbuf_limited_pct", "inner_snd_wnd_bytes"]
# Then per path of the sender, in its order: path<i>_in_flight_bytes, path<i>_cwnd_bytes,
# path<i>_queuing_delay_ms, and its controller's view: path<i>_delivery_rate_mbit,
# path<i>_queuing_delay_target_ms, path<i>_jitter_ms, path<i>_lost_packets.
PATH_COLUMNS = ["in_flight_bytes", "cwnd_bytes", "queuing_delay_ms", "delivery_rate_mbit",
                "queuing_delay_target_ms", "jitter_ms", "lost_packets"]


def upload(topo: Topology, server_addr: str, count: int, cc: str) -> tuple[dict, dict]:
    """The client sends `count` bytes to the server, which listens."""
    receiver = topo.server.popen(sys.executable, failover.TRANSFER, "recv", "--listen", f"{server_addr}:{failover.PORT}",
                                 "--timeout", "180", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert receiver.stderr.readline().strip() == "listening"
    sent = json.loads(topo.client.output(sys.executable, failover.TRANSFER, "send", "--to",
                                         f"{server_addr}:{failover.PORT}", "--bytes", str(count), "--cc", cc,
                                         "--timeout", "180", timeout=240))
    received = json.loads(receiver.communicate(timeout=60)[0])
    return sent, received


def row(t: float, ss_output: str, sending: dict, receiving: dict) -> dict:
    """One sample: the inner sender's socket, the sending daemon's queue and paths, the
    receiving daemon's reorder buffer."""
    tcp = data_connection(ss_output)
    sender = (sending.get("sessions") or [{}])[0]
    reorder = (receiving.get("sessions") or [{}])[0].get("reorder", {})
    drops = sending.get("drops", {})
    values = [round(t, 3), field(r"cwnd:(\d+)", tcp), field(r"ssthresh:(\d+)", tcp), field(r" rtt:([\d.]+)", tcp),
              field(r"minrtt:([\d.]+)", tcp), field(r"unacked:(\d+)", tcp), field(r"retrans:\d+/(\d+)", tcp),
              sender.get("send_queue_depth", ""), drops.get("send_queue_aqm", ""), drops.get("send_queue_sojourn", ""),
              reorder.get("gaps_skipped", ""), reorder.get("buffered", ""),
              field(r"rwnd_limited:\d+ms\(([\d.]+)%\)", tcp), field(r"sndbuf_limited:\d+ms\(([\d.]+)%\)", tcp),
              field(r"snd_wnd:(\d+)", tcp)]
    sample = dict(zip(COLUMNS, values))
    for index, path in enumerate(sender.get("paths", [])):
        def rounded(key: str):
            value = path.get(key)
            return round(value, 2) if value is not None else ""
        sample.update({f"path{index}_in_flight_bytes": path.get("bytes_in_flight", ""),
                       f"path{index}_cwnd_bytes": path.get("cwnd_bytes", ""),
                       f"path{index}_queuing_delay_ms": rounded("queuing_delay_ms"),
                       f"path{index}_delivery_rate_mbit": rounded("delivery_rate_mbit"),
                       f"path{index}_queuing_delay_target_ms": rounded("queuing_delay_target_ms"),
                       f"path{index}_jitter_ms": rounded("jitter_ms"),
                       f"path{index}_lost_packets": path.get("lost_packets", "")})
    return sample


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", type=Path, required=True)
    parser.add_argument("--cc", default="bbr", choices=["cubic", "bbr", "reno"])
    parser.add_argument("--direction", default="download", choices=["download", "upload"],
                        help="download: the server sends; upload: the client sends")
    parser.add_argument("--reorder", action="append", default=[], metavar="KEY=VALUE",
                        help="a [reorder] setting for both daemons, as in run.py")
    parser.add_argument("--out", type=Path, required=True, help="the CSV to write")
    args = parser.parse_args()
    uploading = args.direction == "upload"
    count = failover.transfer_bytes(failover.scenario_summary(args.scenario), "up" if uploading else "down")
    rows = []
    with Topology(scenario=args.scenario) as topo:
        pair = failover.default_daemons(topo, failover.settings(args.reorder))
        stop = threading.Event()
        sending_ns, sending_side = (topo.client, "client") if uploading else (topo.server, "server")
        receiving_side = "server" if uploading else "client"

        def sample():
            while not stop.is_set():
                t = time.time() - topo.emulator_epoch_unix_s
                ss_output = sending_ns.run("ss", "-tin", "state", "established", check=False,
                                           capture=True).stdout
                rows.append(row(t, ss_output, pair.status(sending_side) or {},
                                pair.status(receiving_side) or {}))
                time.sleep(0.03)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            if uploading:
                _, received = upload(topo, SERVER_TUN_ADDR, count, args.cc)
            else:
                _, received = failover.download(topo, SERVER_TUN_ADDR, count, args.cc, [])
        finally:
            stop.set()
            sampler.join()
            pair.stop()
        gaps = [gap for gap in failover.gap_starts(topo, received) if gap[1] >= 100]
    paths = max((sum(key.startswith("path") for key in sample) // len(PATH_COLUMNS) for sample in rows), default=0)
    columns = COLUMNS + [f"path{index}_{name}" for index in range(paths) for name in PATH_COLUMNS]
    # The binary's own commit (its --version) on every row, so the CSV alone says what ran.
    columns.append("mptund_commit")
    commit = binary_record(mptund_binary())["commit"]
    for sample in rows:
        sample["mptund_commit"] = commit
    with args.out.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    print(f"longest gap {received['longest_gap_ms']} ms; gaps of 100 ms or more (start s, ms): {gaps}")
    print(f"{len(rows)} samples in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
