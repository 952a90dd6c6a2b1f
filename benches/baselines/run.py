#!/usr/bin/env python3
"""Baselines on emulated paths: one TCP flow (iperf3) over a scenario, as

  single  plain TCP over each path alone (bound to that uplink's address),
  mptcp   kernel MPTCP over all paths (mptcpize; one subflow endpoint per uplink),
  mptund  the same flow through the mptund tunnel (testbed/mptund.py), round-robin by default.

Each run gets a fresh topology (testbed/topology.py), so the scenario's outages
happen at the same time after the flow starts. Results are JSON files in
--out (one per scenario, congestion control and mode); `--report` turns them
into a markdown table.

    sudo python3 benches/baselines/run.py --scenario config/scenarios/two-paths-symmetric.toml
    sudo python3 benches/baselines/run.py --all --cc cubic bbr --modes single mptcp mptund
    python3 benches/baselines/run.py --report
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
sys.path.insert(0, str(REPO_ROOT / "testbed"))
from topology import Topology, scenario_summary  # noqa: E402

SCENARIOS = REPO_ROOT / "config" / "scenarios"
RESULTS = HERE / "results"
REPORT = HERE / "REPORT.md"

# iperf3 reporting interval: fine enough to see a 500 ms blockage.
INTERVAL_S = 0.5

# An interval counts as part of a stall when its goodput is below this share of
# the run's mean goodput.
STALL_SHARE = 0.1


def nominal_rates_mbit(summary: dict, direction: str) -> list[float]:
    key = "down" if direction == "download" else "up"
    return [path[key]["rate_mbit"] or 0.0 for path in summary["paths"]]


def iperf3(topo: Topology, cc: str, duration_s: int, direction: str, server_addr: str,
           bind: str | None = None, wrap: list[str] | None = None) -> dict:
    """Runs one iperf3 flow client -> server_addr and returns iperf3's JSON."""
    wrap = wrap or []
    server = topo.server.popen(*wrap, "iperf3", "-s", "-1", "-B", server_addr,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    argv = [*wrap, "iperf3", "-c", server_addr, "-t", str(duration_s), "-i", str(INTERVAL_S), "-J", "-C", cc]
    if direction == "download":
        argv.append("-R")
    if bind:
        argv += ["-B", bind]
    # popen, not run: the test bed tracks the process and kills it by PID if this
    # runner is interrupted, so no iperf3 outlives its namespaces.
    client_started_unix = time.time()
    client = topo.client.popen(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = client.communicate(timeout=duration_s + 60)
    except subprocess.TimeoutExpired:
        topo.testbed.stop_process(client)
        return {"error": f"iperf3 did not finish within {duration_s + 60} s"}
    for process in (server,):
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            topo.testbed.stop_process(process)
    try:
        output = json.loads(stdout)
        # When the flow began, to place the scenario's outages on its intervals
        # (iperf3's own start timestamp has whole seconds only).
        output["client_started_unix"] = client_started_unix
        return output
    except json.JSONDecodeError:
        return {"error": f"iperf3 exited {client.returncode}: {stderr.strip()[:300]}"}


def summarise(raw: dict, rates_mbit: list[float], path_rate_mbit: float | None) -> dict:
    if "error" in raw or "end" not in raw:
        return {"error": raw.get("error", "iperf3 gave no result")}
    end = raw["end"]
    goodput = end["sum_received"]["bits_per_second"] / 1e6
    intervals = [
        {"start_s": round(i["sum"]["start"], 2), "mbit": round(i["sum"]["bits_per_second"] / 1e6, 3)}
        for i in raw.get("intervals", [])
    ]
    mean = statistics.mean([i["mbit"] for i in intervals]) if intervals else 0.0
    longest, current = 0.0, 0.0
    for interval in intervals:
        current = current + INTERVAL_S if interval["mbit"] < STALL_SHARE * mean else 0.0
        longest = max(longest, current)
    result = {
        "goodput_mbit": round(goodput, 3),
        "sum_of_path_rates_mbit": round(sum(rates_mbit), 3),
        "ratio_to_sum": round(goodput / sum(rates_mbit), 4) if sum(rates_mbit) else None,
        "retransmissions": end.get("sum_sent", {}).get("retransmits"),
        # iperf3 sets -C on both ends (a namespace cannot change the default, which is bbr here).
        "sender_congestion_control": end.get("sender_tcp_congestion"),
        "longest_stall_s": longest,
        "intervals": intervals,
    }
    if path_rate_mbit:
        result["path_rate_mbit"] = round(path_rate_mbit, 3)
        result["ratio_to_path"] = round(goodput / path_rate_mbit, 4)
    return result


def run_mptund(topo: Topology, cc: str, duration_s: int, direction: str, **daemon_settings) -> dict:
    """The flow through a pair of mptund daemons (testbed/mptund.py's DaemonPair:
    keys, configs, `mptund run --config FILE` in the client and server namespaces,
    wait until a ping crosses the tunnel), one tunnel path per uplink. The daemons'
    final reports are in the result's "mptund_reports" (client, server)."""
    from mptund import SERVER_TUN_ADDR, DaemonPair  # the lead's harness; needs target/release/mptund

    daemons = DaemonPair(bed=topo.testbed, client_ns=topo.client, server_ns=topo.server,
                         uplinks=topo.uplinks(), inner_ipv6=False,  # the topology disables IPv6
                         **daemon_settings)
    try:
        daemons.start()
    except (RuntimeError, TimeoutError) as error:
        return {"error": f"mptund did not start: {str(error)[:300]}"}
    result = iperf3(topo, cc, duration_s, direction, SERVER_TUN_ADDR)
    try:
        result["mptund_reports"] = daemons.stop()
    except RuntimeError as error:
        result.setdefault("error", f"mptund exited badly: {str(error)[:300]}")
    return result


def run_plain(topo: Topology, mode: str, cc: str, duration_s: int, direction: str,
              path_index: int | None = None) -> dict:
    """The flow without the tunnel: `single` over uplink path_index alone, `mptcp` as
    kernel MPTCP over every uplink."""
    if mode == "single":
        return iperf3(topo, cc, duration_s, direction, topo.server_addr, bind=topo.client_addr(path_index))
    if mode == "mptcp":
        topo.enable_mptcp()
        return iperf3(topo, cc, duration_s, direction, topo.server_addr, wrap=["mptcpize", "run"])
    raise ValueError(mode)


def run_one(scenario: Path, mode: str, cc: str, args, path_index: int | None = None) -> dict:
    summary = scenario_summary(scenario, args.rate_scale)
    duration_s = args.duration or summary["duration_s"]
    rates = nominal_rates_mbit(summary, args.direction)
    with Topology(scenario=scenario, rate_scale=args.rate_scale) as topo:
        if mode == "mptund":
            raw = run_mptund(topo, cc, duration_s, args.direction, scheduler=args.mptund_scheduler)
        else:
            raw = run_plain(topo, mode, cc, duration_s, args.direction, path_index)
        path_rate = rates[path_index - 1] if mode == "single" else None
        emulator = topo.stop_emulator()
        epoch = topo.emulator_epoch_unix_s
    result = summarise(raw, rates, path_rate)
    label = mode if path_index is None else f"single:{summary['paths'][path_index - 1]['name']}"
    result.update({
        "scenario": summary["name"], "mode": label, "cc": cc, "direction": args.direction,
        "duration_s": duration_s, "rate_scale": summary["rate_scale"],
        # iperf3 client launch; its first interval starts a few RTTs later (connect, parameters).
        "flow_start_after_emulator_start_s": (round(raw["client_started_unix"] - epoch, 2)
                                              if "client_started_unix" in raw else None),
        **emulator_figures(emulator, args.direction),
    })
    if mode == "mptund":
        from mptund import binary_record, mptund_binary

        # The binary's own commit (its --version), not the tree's.
        result["mptund_binary"] = binary_record(mptund_binary())
    return result


def emulator_figures(emulator: dict | None, direction: str) -> dict:
    """What the emulator saw of one run: its CPU, drops by cause, each path's share."""
    return {
        "emulator_cpu_percent": round(emulator["cpu_percent"], 1) if emulator else None,
        "emulator_drops": drops(emulator) if emulator else None,
        "path_share": path_share(emulator, direction) if emulator else None,
    }


def drops(emulator: dict) -> dict:
    keys = ("dropped_queue_full", "dropped_random_loss", "dropped_burst_loss", "dropped_outage")
    return {path["name"]: {d: {k: path[d][k] for k in keys if path[d][k]} for d in ("up", "down")}
            for path in emulator["paths"]}


def path_share(emulator: dict, direction: str) -> dict:
    """Share of the flow direction's bytes each path carried (shows which subflows MPTCP used)."""
    key = "down" if direction == "download" else "up"
    carried = {path["name"]: path[key]["forwarded_bytes"] for path in emulator["paths"]}
    total = sum(carried.values()) or 1
    return {name: round(bytes_ / total, 3) for name, bytes_ in carried.items()}


def run_scenario(scenario: Path, args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = len(scenario_summary(scenario, args.rate_scale)["paths"])
    for cc in args.cc:
        for mode in args.modes:
            indices = range(1, paths + 1) if mode == "single" else [None]
            for index in indices:
                result = run_one(scenario, mode, cc, args, index)
                name = f"{result['scenario']}__{cc}__{result['mode'].replace(':', '-')}.json"
                (out / name).write_text(json.dumps(result, indent=2))
                print(f"{result['scenario']:<28} {cc:<6} {result['mode']:<14} "
                      f"goodput {result.get('goodput_mbit', 'ERR')!s:>8} Mbit/s  "
                      f"ratio {result.get('ratio_to_sum')!s:>6}  retx {result.get('retransmissions')!s:>5}  "
                      f"stall {result.get('longest_stall_s')!s:>4} s  {result.get('error', '')}", flush=True)


def write_report(out: Path) -> str:
    results = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    lines = ["| scenario | cc | mode | goodput Mbit/s | of path | of sum of paths | retransmissions | longest stall s |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    order = {"single": 0, "mptcp": 1, "mptund": 2}
    results.sort(key=lambda r: (r["scenario"], r["cc"], order.get(r["mode"].split(":")[0], 3), r["mode"]))
    for r in results:
        if "error" in r:
            lines.append(f"| {r['scenario']} | {r['cc']} | {r['mode']} | error: {r['error']} | | | | |")
            continue
        of_path = f"{r['ratio_to_path']:.0%}" if "ratio_to_path" in r else ""
        lines.append(f"| {r['scenario']} | {r['cc']} | {r['mode']} | {r['goodput_mbit']:.2f} | {of_path} | "
                     f"{r['ratio_to_sum']:.0%} | {r['retransmissions']} | {r['longest_stall_s']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", default=[], help="scenario TOML (repeatable)")
    parser.add_argument("--all", action="store_true", help="every scenario in config/scenarios")
    parser.add_argument("--cc", nargs="+", default=["cubic", "bbr"], choices=["cubic", "bbr", "reno"])
    parser.add_argument("--modes", nargs="+", default=["single", "mptcp"], choices=["single", "mptcp", "mptund"])
    parser.add_argument("--direction", default="download", choices=["download", "upload"],
                        help="download: server sends to client (the papers' measurements)")
    parser.add_argument("--duration", type=int, help="seconds per flow (default: the scenario's duration_s)")
    parser.add_argument("--rate-scale", type=float, help="override every scenario's rate_scale")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--report", action="store_true", help="(re)write REPORT's table from --out and print it")
    parser.add_argument("--mptund-scheduler", default="round-robin",
                        help="scheduler of the mptund mode (binary: $MPTUND_BIN or target/release/mptund)")
    args = parser.parse_args()
    scenarios = [Path(s) for s in args.scenario]
    if args.all:
        scenarios += sorted(SCENARIOS.glob("*.toml"))
    if scenarios and os.geteuid() != 0:
        parser.error("runs need root (network namespaces)")
    for scenario in scenarios:
        run_scenario(scenario, args)
    if args.report or not scenarios:
        print(write_report(Path(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
