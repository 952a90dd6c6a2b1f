#!/usr/bin/env python3
"""Follows each path of the sending daemon through runs of one cell: the flow through
mptund with its defaults (as run.py's mptund:default), while the sender's control
socket is asked for `status json` every --interval-ms. Each run's samples (per path:
controller phase, window, in flight, bottleneck and delivery rate, pacing rate, RTT,
queuing delay, losses, persistent congestions, data packets sent) and the inner
sender's TCP socket (`ss -tim`: window, RTT, an inner BBR's bandwidth and gains, SACKed and unsent data,
whether its last rate sample was application-limited, socket memory) go to
one JSON file in --out with the flow's goodput and iperf3's intervals; a summary line
per run and path, and one for the inner sender, is printed. For finding out why a run
fell low; run.py stays the benchmark.

    sudo MPTUND_BIN=/tmp/mptund-new python3 benches/schedulers/tools/trace_paths.py \\
        --scenario config/scenarios/u-train-cells.toml --cc cubic --direction download \\
        --runs 6 --out /tmp/trace-train
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import run as bench  # noqa: E402  (run.py: the test bed, scenarios and iperf3 helpers)
from mptund import binary_record, mptund_binary  # noqa: E402  (testbed/, on the path run.py set)
from tcp_state import data_connection, field  # noqa: E402  (testbed/, on the path run.py set)

FIELDS = ("state", "congestion_phase", "cwnd_bytes", "bytes_in_flight", "bottleneck_rate_bytes_per_s",
          "delivery_rate_bytes_per_s", "pacing_rate_bytes_per_s", "srtt_ms", "min_rtt_ms",
          "queuing_delay_ms", "queuing_delay_target_ms", "lost_packets", "persistent_congestions",
          "sent_data_packets", "share_floor_rate_bytes_per_s", "liveness")


SESSION_FIELDS = ("capacity_sharing", "queued", "send_queue_depth", "reinjected")
REORDER_FIELDS = ("hold_ms", "released_late", "gaps_skipped", "seqs_skipped")


INNER_FIELDS = {"cwnd": int, "rtt": str, "minrtt": float, "pacing_rate": str, "delivery_rate": str,
                "bytes_acked": int, "retrans": str, "lost": int, "unacked": int, "bbr": str,
                "busy": str, "rwnd_limited": str, "sndbuf_limited": str, "snd_wnd": int, "rcv_space": int,
                "sacked": int, "notsent": int, "skmem": str}


def inner_socket(ns) -> dict:
    """The inner sender's TCP state (`ss -tin`) for the iperf3 data connection; empty
    before the flow starts."""
    done = ns.run("ss", "-tinmH", "state", "established", "( sport = :5201 or dport = :5201 )",
                  check=False, capture=True, timeout=2)
    tcp = data_connection(done.stdout)
    fields = {}
    for key, kind in INNER_FIELDS.items():
        value = field(rf"(?<![\w_]){key}:(\([^)]*\)|\S+)", tcp)
        try:
            if value:
                fields[key] = kind(value)
        except ValueError:
            pass
    # A flag without a value: the last delivery-rate sample was application-limited.
    if fields and re.search(r"(?<![\w_])app_limited(?![\w_:])", tcp):
        fields["app_limited"] = True
    return fields


class Sampler(threading.Thread):
    """Every `interval_s`: the sending daemon's paths and queue, the receiving daemon's
    reorder buffer, and the inner sender's socket (in `sending_ns`)."""

    def __init__(self, pair, sender: str, receiver: str, sending_ns, interval_s: float):
        super().__init__(daemon=True)
        self.pair, self.sender, self.receiver = pair, sender, receiver
        self.sending_ns, self.interval_s = sending_ns, interval_s
        self.samples: list[dict] = []
        self.inner_samples: list[dict] = []
        self.stopping = threading.Event()
        self.start_s = time.monotonic()

    def run(self) -> None:
        while not self.stopping.is_set():
            report = self.pair.status(self.sender) or {}
            sessions = report.get("sessions") or []
            receiving = (self.pair.status(self.receiver) or {}).get("sessions") or [{}]
            t_s = round(time.monotonic() - self.start_s, 3)
            if sessions:
                self.samples.append({
                    "t_s": t_s,
                    "paths": {p["name"]: {k: p.get(k) for k in FIELDS} for p in sessions[0]["paths"]},
                    "session": {k: sessions[0].get(k) for k in SESSION_FIELDS},
                    "drops": {k: v for k, v in report.get("drops", {}).items() if v},
                    "reorder": {k: receiving[0].get("reorder", {}).get(k) for k in REORDER_FIELDS},
                })
            if inner := inner_socket(self.sending_ns):
                self.inner_samples.append({"t_s": t_s, **inner})
            self.stopping.wait(self.interval_s)


def one_run(scenario: Path, cc: str, direction: str, duration_s: int, interval_s: float) -> dict:
    from mptund import SERVER_TUN_ADDR, DaemonPair  # testbed/mptund.py

    with bench.Topology(scenario=scenario) as topo:
        # None everywhere: the daemon's own defaults, as run.py's mptund:default.
        daemons = DaemonPair(bed=topo.testbed, client_ns=topo.client, server_ns=topo.server,
                             uplinks=topo.uplinks(), inner_ipv6=False, scheduler=None, hold_ms=None,
                             congestion_controller=None, reorder_adaptive=None)
        daemons.start()
        sender, receiver = ("server", "client") if direction == "download" else ("client", "server")
        sampler = Sampler(daemons, sender, receiver, getattr(topo, sender), interval_s)
        sampler.start()
        try:
            flow = bench.baselines.iperf3(topo, cc, duration_s, direction, SERVER_TUN_ADDR)
        finally:
            sampler.stopping.set()
            sampler.join()
            reports = dict(zip(("client", "server"), daemons.stop()))
        emulator = topo.stop_emulator()
    summary = bench.baselines.summarise(flow, [1.0], None)
    return {"goodput_mbit": summary.get("goodput_mbit"), "intervals": summary.get("intervals"),
            "retransmissions": summary.get("retransmissions"), "error": summary.get("error"),
            "mptund_reorder": bench.reorder_figures(reports[receiver]),
            "mptund_sender": bench.sender_figures(reports[sender]),
            **bench.baselines.emulator_figures(emulator, direction),
            "samples": sampler.samples, "inner_samples": sampler.inner_samples}


def describe(result: dict) -> str:
    """Per path: the share of data packets, time per controller phase, persistent
    congestions, and the least window of the second half."""
    samples = result["samples"]
    if not samples:
        return "  no samples"
    sender = result["mptund_sender"]
    lines = [f"  inner retransmissions {result['retransmissions']}  reinjected {sender['reinjected']}"
             f"  sender drops {sender['drops']}  gaps skipped {result['mptund_reorder'].get('gaps_skipped')}"
             f"  emulator drops {result['emulator_drops']}"]
    inner = result.get("inner_samples") or []
    if inner:
        # Up to the data connection's last sample: after it, `ss` finds iperf3's next one.
        last_index = max(range(len(inner)), key=lambda i: inner[i].get("bytes_acked", 0))
        inner = inner[:last_index + 1]
        rtts = sorted(float(s["rtt"].split("/")[0]) for s in inner[len(inner) // 2:] if "rtt" in s)
        # Linux BBR's Startup paces at 2/ln 2 (printed 2.88672); its last sample in Startup.
        startup = [s["t_s"] for s in inner if "pacing_gain:2.88" in s.get("bbr", "")]
        lines.append(
            f"  inner sender: peak cwnd {max(s.get('cwnd', 0) for s in inner)} packets"
            f"  min RTT {min(s.get('minrtt', 1e9) for s in inner):.1f} ms"
            f"  median RTT (2nd half) {rtts[len(rtts) // 2] if rtts else float('nan'):.1f} ms"
            + (f"  bbr Startup until {startup[-1]:.1f} s (sampler time)" if startup else ""))
    last = samples[-1]["paths"]
    total = sum(p["sent_data_packets"] or 0 for p in last.values()) or 1
    half = samples[len(samples) // 2:]
    for name, end in last.items():
        phases: dict[str, int] = {}
        for sample in samples:
            phase = sample["paths"].get(name, {}).get("congestion_phase")
            phases[phase] = phases.get(phase, 0) + 1
        least = min((s["paths"][name]["cwnd_bytes"] for s in half if name in s["paths"]), default=None)
        lines.append(
            f"  {name:8} share {end['sent_data_packets'] / total:5.1%}  persistent {end['persistent_congestions']}"
            f"  lost {end['lost_packets']}  least cwnd (2nd half) {least}  end cwnd {end['cwnd_bytes']}  "
            + " ".join(f"{k}:{v * 100 // len(samples)}%" for k, v in sorted(phases.items(), key=str)))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", required=True, help="a name in config/scenarios/ or a .toml path")
    parser.add_argument("--cc", default="cubic")
    parser.add_argument("--direction", choices=["download", "upload"], default="download")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=int, default=12)
    parser.add_argument("--interval-ms", type=int, default=50)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    scenario = bench.scenario_file(args.scenario)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for run_index in range(1, args.runs + 1):
        result = one_run(scenario, args.cc, args.direction, args.duration, args.interval_ms / 1e3)
        result.update(scenario=scenario.stem, cc=args.cc, direction=args.direction, run=run_index,
                      mptund_binary=binary_record(mptund_binary()))  # the binary's own commit
        (out / f"{scenario.stem}-{args.direction}-{args.cc}-run{run_index}.json").write_text(json.dumps(result))
        print(f"run {run_index}: {result['goodput_mbit']} Mbit/s {result['error'] or ''}")
        print(describe(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
