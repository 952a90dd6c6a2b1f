#!/usr/bin/env python3
"""Failover benchmark: what the inner TCP sees when a path dies.

For each blockage scenario, congestion control (cubic, bbr) and transport (mptund with
its default scheduler, kernel MPTCP), `--repeats` downloads (server -> client) run
through fresh emulated topologies, transports interleaved, so every blockage hits at
the same moment of the flow. Reported per run:

  goodput            bytes delivered / transfer time, and as a share of the sum of
                     the paths' nominal rates
  longest_gap_ms     the longest time the receiving application got no byte at all
                     (testbed/transfer.py timestamps every read)
  rto                the sender's retransmission timeouts during the run
                     (TcpExtTCPTimeouts of the sender's namespace)

Targets from the issue: the longest gap under 300 ms when a path with an RTT under
100 ms dies, and no inner-TCP timeout, in every repeat.

    sudo python3 benches/failover/run.py                      # all scenarios, writes REPORT.md
    python3 benches/failover/run.py --report results-3b73080.json   # REPORT.md from stored results
    sudo python3 benches/failover/run.py --scenario config/scenarios/5g-4g-blockage.toml --cc cubic
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
sys.path.insert(0, str(REPO_ROOT / "testbed"))
from mptund import SERVER_TUN_ADDR, DaemonPair, binary_record, mptund_binary  # noqa: E402
from topology import SERVER_ADDR, Topology, scenario_summary  # noqa: E402

SCENARIOS = [
    REPO_ROOT / "tests" / "e2e" / "scenarios" / "blackout-best-path.toml",
    REPO_ROOT / "config" / "scenarios" / "5g-4g-blockage.toml",
    REPO_ROOT / "config" / "scenarios" / "lte-wifi-blockage-handover.toml",
]
TRANSFER = str(REPO_ROOT / "testbed" / "transfer.py")
PORT = 5201


def tcp_timeouts(ns) -> int:
    """TcpExtTCPTimeouts of a namespace: RTOs of every TCP connection in it."""
    lines = ns.output("cat", "/proc/net/netstat").splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            fields = dict(zip(names.split()[1:], values.split()[1:]))
            return int(fields["TCPTimeouts"])
    raise RuntimeError("no TcpExt counters")


def download(topo: Topology, server_addr: str, count: int, cc: str, wrap: list[str]) -> tuple[dict, dict]:
    """The server sends `count` bytes to the client, which connects (MPTCP needs the
    client to open the connection)."""
    sender = topo.server.popen(*wrap, sys.executable, TRANSFER, "send", "--listen", f"{server_addr}:{PORT}",
                               "--bytes", str(count), "--cc", cc, "--timeout", "180",
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert sender.stderr.readline().strip() == "listening"
    received = json.loads(topo.client.output(*wrap, sys.executable, TRANSFER, "recv", "--to", f"{server_addr}:{PORT}",
                                             "--timeout", "180", timeout=240))
    sent = json.loads(sender.communicate(timeout=60)[0])
    return sent, received


def transfer_bytes(summary: dict, way: str = "down") -> int:
    """Enough bytes to keep the flow busy for about the scenario's duration at 60% of
    the nominal sum of the paths' `way` ("down" or "up") rates, so every blockage falls
    inside the transfer."""
    rates = [path[way]["rate_mbit"] or 0.0 for path in summary["paths"]]
    duration_s = float(summary.get("duration_s") or 20)
    return int(sum(rates) * 1e6 / 8 * duration_s * 0.6)


def default_daemons(topo: Topology, reorder: dict | None = None) -> DaemonPair:
    """Both daemons, started, with their own defaults (scheduler, reorder hold, path
    congestion control) but for the given `[reorder]` settings."""
    pair = DaemonPair(topo.testbed, topo.client, topo.server, topo.uplinks(), inner_ipv6=False,
                      log_level="warn", scheduler=None, hold_ms=None, congestion_controller=None,
                      reorder=reorder or {})
    pair.start()
    return pair


def gap_starts(topo: Topology, received: dict) -> list[list[float]]:
    """The receiver's gaps of 20 ms or more as [seconds since the emulator started, ms]."""
    return [[round(end - topo.emulator_epoch_unix_s - ms / 1000, 2), ms]
            for end, ms in received["gaps_over_20ms"]]


def run_one(scenario: Path, mode: str, cc: str, repeat: int, reorder: dict | None = None) -> dict:
    summary = scenario_summary(scenario)
    rates = [path["down"]["rate_mbit"] or 0.0 for path in summary["paths"]]
    count = transfer_bytes(summary)
    with Topology(scenario=scenario) as topo:
        pair = None
        if mode == "mptund":
            pair = default_daemons(topo, reorder)
            server_addr, wrap = SERVER_TUN_ADDR, []
        else:
            topo.enable_mptcp()
            server_addr, wrap = SERVER_ADDR, ["mptcpize", "run"]
        before = tcp_timeouts(topo.server)
        start = time.time() - topo.emulator_epoch_unix_s
        sent, received = download(topo, server_addr, count, cc, wrap)
        rto = tcp_timeouts(topo.server) - before
        tunnel = None
        if pair is not None:
            client_report, server_report = pair.stop()
            session = server_report["sessions"][0]
            # The download's receiver is the client: its reorder buffer is the one
            # that waits for what a dead path took with it.
            tunnel = {"reinjected": session["reinjected"],
                      "reorder": client_report["sessions"][0]["reorder"],
                      "paths": [{k: p[k] for k in ("name", "sent_data_packets", "lost_packets", "reinjected_away")}
                                for p in session["paths"]]}
    goodput = received["bytes"] * 8 / received["seconds"] / 1e6
    return {
        "scenario": summary["name"], "mode": mode, "cc": cc, "repeat": repeat,
        "byte_exact": sent["sha256"] == received["sha256"] and received["bytes"] == count,
        "bytes": received["bytes"], "seconds": round(received["seconds"], 2),
        "started_at_emulator_s": round(start, 2),
        "goodput_mbit": round(goodput, 2),
        "share_of_sum": round(goodput / sum(rates), 3) if sum(rates) else None,
        "sum_of_rates_mbit": round(sum(rates), 2),
        "longest_gap_ms": received["longest_gap_ms"],
        # Every gap of 20 ms or more as [seconds since the emulator started, ms], to
        # tell a blockage's gap from one of the flow's own.
        "gaps": gap_starts(topo, received),
        "rto": rto,
        "tunnel": tunnel,
        # The binary's own commit (its --version), not the tree's.
        "mptund_binary": binary_record(mptund_binary()) if mode == "mptund" else None,
    }


def summary_rows(results: list[dict]) -> list[str]:
    """Per scenario, cc and transport over the repeats: the worst gap, all RTOs, and
    whether the target held in every repeat."""
    rows = []
    keys = sorted({(r["scenario"], r["cc"], r["mode"]) for r in results})
    for scenario, cc, mode in keys:
        runs = [r for r in results if (r["scenario"], r["cc"], r["mode"]) == (scenario, cc, mode)]
        worst_gap = max(r["longest_gap_ms"] for r in runs)
        rtos = sum(r["rto"] for r in runs)
        goodputs = sorted(r["goodput_mbit"] for r in runs)
        met = worst_gap < 300 and rtos == 0 and all(r["byte_exact"] for r in runs)
        rows.append(f"| {scenario} | {cc} | {mode} | {len(runs)} | {goodputs[len(goodputs) // 2]} | "
                    f"{worst_gap} | {rtos} | {'yes' if met else 'no'} |")
    return rows


def write_report(results: list[dict], path: Path, command: str, machine: str | None = None) -> str:
    """The tables; a hand-written part of an existing report from `## Reading` on is kept."""
    machine = machine or f"{platform.node()}, {os.cpu_count()} cores, kernel {platform.release()}"
    lines = [
        "# Failover: what the inner TCP sees when a path dies",
        "",
        "The current standing, written by `run.py` (after a run, or with `--report RESULTS`); "
        "every earlier run is a line of [HISTORY.md](HISTORY.md).",
        "",
        f"Machine: {machine}. Fresh topology per run, transports interleaved.",
        f"Command: `{command}`",
        *(f"Binary: `{version}`" for version in sorted({r["mptund_binary"]["version"] for r in results
                                                         if r.get("mptund_binary")})),
        "",
        "| scenario | cc | transport | runs | median goodput Mbit/s | worst longest gap ms | inner RTOs, all runs | "
        "target met in every run |",
        "|---|---|---|---|---|---|---|---|",
        *summary_rows(results),
        "",
        "Every run:",
        "",
        "| scenario | cc | transport | run | goodput Mbit/s | share of path sum | longest gap ms | inner RTOs | byte-exact |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| {r['scenario']} | {r['cc']} | {r['mode']} | {r.get('repeat', 1)} | {r['goodput_mbit']} | "
                     f"{r['share_of_sum']} | {r['longest_gap_ms']} | {r['rto']} | {'yes' if r['byte_exact'] else 'NO'} |")
    text = "\n".join(lines) + "\n"
    if path.exists() and "\n## Reading" in path.read_text():
        text += "\n## Reading" + path.read_text().split("\n## Reading", 1)[1]
    path.write_text(text)
    return text


def setting_value(text: str):
    """A command-line setting as TOML wants it: numbers and booleans as such, else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def settings(items: list[str]) -> dict:
    """`KEY=VALUE` arguments as a settings table."""
    return {key: setting_value(value) for key, value in (item.split("=", 1) for item in items)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", type=Path, action="append", help="default: the three blockage scenarios")
    parser.add_argument("--cc", nargs="+", default=["cubic", "bbr"])
    parser.add_argument("--modes", nargs="+", default=["mptund", "mptcp"], choices=["mptund", "mptcp"])
    parser.add_argument("--repeats", type=int, default=3, help="runs per scenario, cc and transport")
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--reorder", action="append", default=[], metavar="KEY=VALUE",
                        help="a [reorder] setting for both daemons instead of its default, "
                             "e.g. equalize_delay=off (repeatable)")
    parser.add_argument("--report", type=Path, metavar="RESULTS",
                        help="write REPORT.md in --out from this results file (the standing) and exit")
    parser.add_argument("--command", help="with --report: the command that produced RESULTS, for the report")
    args = parser.parse_args()
    if args.report:
        results = json.loads(args.report.read_text())
        print(write_report(results, args.out / "REPORT.md",
                           args.command or f"(not recorded) -> {args.report.name}",
                           machine=f"the one that wrote `{args.report.name}`"))
        return 0
    reorder = settings(args.reorder)
    results = []
    for scenario in args.scenario or SCENARIOS:
        for cc in args.cc:
            for repeat in range(1, args.repeats + 1):
                for mode in args.modes:
                    result = run_one(scenario.resolve(), mode, cc, repeat, reorder)
                    print(json.dumps(result), flush=True)
                    results.append(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    command = "sudo python3 benches/failover/run.py " + " ".join(sys.argv[1:])
    print(write_report(results, args.out / "REPORT.md", command.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
