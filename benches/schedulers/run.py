#!/usr/bin/env python3
"""Every mptund scheduler against kernel MPTCP and the best single path, one TCP flow.

For each scenario and TCP congestion control, in one run and on fresh topologies:

  single:<path>   plain TCP over the scenario's fastest path alone (the "best single path"),
  mptcp           kernel MPTCP over all paths,
  mptund:<sched>  the flow through the tunnel with each scheduler (and, with
                  --duplicate, the best-known scheduler again with latency-critical
                  duplication on).

The flow is a download (the server sends), as in the papers. For mptund runs the
client daemon's final report adds the reorder buffer's figures: the hold in
force at the end, mean and maximum hold, hold-time quantiles, packets released
late and gaps skipped. Results are one JSON file per run in --out; `--report`
writes the table and an SVG plot (goodput per scheduler per scenario) from them.

    sudo python3 benches/schedulers/run.py --steady --cc cubic bbr
    sudo python3 benches/schedulers/run.py --blockage --cc cubic
    python3 benches/schedulers/run.py --report
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
sys.path.insert(0, str(REPO_ROOT / "testbed"))
from topology import Topology, scenario_summary  # noqa: E402

_spec = importlib.util.spec_from_file_location("baselines", REPO_ROOT / "benches" / "baselines" / "run.py")
baselines = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(baselines)

SCENARIOS = REPO_ROOT / "config" / "scenarios"
RESULTS = HERE / "results"
REPORT = HERE / "REPORT.md"

# Scenarios whose paths never go away: the ones the 90 % target is about.
STEADY = ["two-paths-symmetric", "two-paths-rtt-asymmetric", "hst-eight-lte", "lte-trace-wifi"]
# One path's quality collapses for seconds (seed 001's 5G blockage).
BLOCKAGE = ["5g-4g-blockage"]

SCHEDULERS = ["earliest-arrival", "round-robin", "weighted-round-robin", "min-rtt", "ecf", "blest", "redundant"]

# Bytes on an Ethernet link per full-size inner TCP segment, and the TCP payload
# in it, for the encapsulation ceiling: 1500-byte paths, a 1428-byte tunnel MTU
# (72 bytes of outer IPv4 + UDP + mptund header + tag), inner IPv4 + TCP with
# timestamps (52 bytes). The emulator's rates count Ethernet frames (1514 bytes).
ETHERNET_FRAME = 1514
TUNNEL_TCP_PAYLOAD = 1428 - 52
PLAIN_TCP_PAYLOAD = 1500 - 52


def ceiling() -> dict:
    return {"mptund": TUNNEL_TCP_PAYLOAD / ETHERNET_FRAME, "plain_tcp": PLAIN_TCP_PAYLOAD / ETHERNET_FRAME}


def reorder_figures(client_report: dict) -> dict:
    """The download receiver's (client's) reorder buffer at the end of the run."""
    sessions = client_report.get("sessions") or []
    if not sessions:
        return {}
    reorder = sessions[0]["reorder"]
    released = reorder["released_in_order"] + reorder["released_after_wait"] + reorder["released_late"]
    histogram = reorder.get("hold_histogram") or []

    def quantile(q: float):
        total = sum(count for _, count in histogram)
        if not total:
            return None
        seen = 0
        for bound, count in histogram:
            seen += count
            if seen >= q * total:
                return bound
        return None

    return {
        "hold_ms_at_end": round(reorder.get("hold_ms", 0.0), 1),
        "mean_hold_ms": round(reorder.get("mean_hold_ms", 0.0), 2),
        "max_hold_ms": round(reorder.get("max_hold_seen_ms", 0.0), 1),
        "hold_p50_bound_ms": quantile(0.5),
        "hold_p99_bound_ms": quantile(0.99),
        "released": released,
        "released_after_wait": reorder["released_after_wait"],
        "released_late": reorder["released_late"],
        "gaps_skipped": reorder["gaps_skipped"],
        "seqs_skipped_early": reorder.get("seqs_skipped_early", 0),
        "duplicates": reorder["duplicates"],
    }


def run_mptund(topo: Topology, scheduler: str, duplicate: bool, cc: str, duration_s: int, args) -> dict:
    from mptund import SERVER_TUN_ADDR, DaemonPair

    daemons = DaemonPair(bed=topo.testbed, client_ns=topo.client, server_ns=topo.server,
                         uplinks=topo.uplinks(), scheduler=scheduler, hold_ms=args.max_hold_ms,
                         reorder_adaptive=not args.fixed_hold,
                         duplicate_latency_critical=duplicate, inner_ipv6=False)
    try:
        daemons.start()
    except (RuntimeError, TimeoutError) as error:
        return {"error": f"mptund did not start: {str(error)[:300]}"}
    raw = baselines.iperf3(topo, cc, duration_s, "download", SERVER_TUN_ADDR)
    try:
        client_report, server_report = daemons.stop()
        raw["mptund_reorder"] = reorder_figures(client_report)
        sessions = server_report.get("sessions") or [{}]
        raw["mptund_sender"] = {
            "reinjected": sessions[0].get("reinjected"),
            "queued": sessions[0].get("queued"),
            "duplicated": sessions[0].get("duplicated"),
            "drops": {k: v for k, v in server_report.get("drops", {}).items() if v},
            "sent_data_packets": {p["name"]: p["sent_data_packets"] for p in sessions[0].get("paths", [])},
        }
    except RuntimeError as error:
        raw.setdefault("error", f"mptund exited badly: {str(error)[:300]}")
    return raw


def run_one(scenario: Path, mode: str, cc: str, args) -> dict:
    summary = scenario_summary(scenario)
    duration_s = args.duration or summary["duration_s"]
    rates = baselines.nominal_rates_mbit(summary, "download")
    with Topology(scenario=scenario) as topo:
        path_rate = None
        if mode.startswith("single:"):
            index = [p["name"] for p in summary["paths"]].index(mode.split(":", 1)[1]) + 1
            raw = baselines.iperf3(topo, cc, duration_s, "download", topo.server_addr,
                                   bind=topo.client_addr(index))
            path_rate = rates[index - 1]
        elif mode == "mptcp":
            topo.enable_mptcp()
            raw = baselines.iperf3(topo, cc, duration_s, "download", topo.server_addr, wrap=["mptcpize", "run"])
        else:
            scheduler = mode.split(":", 1)[1]
            duplicate = scheduler.endswith("+dup")
            raw = run_mptund(topo, scheduler.removesuffix("+dup"), duplicate, cc, duration_s, args)
        emulator = topo.stop_emulator()
    result = baselines.summarise(raw, rates, path_rate)
    result.update({
        "scenario": summary["name"], "mode": mode, "cc": cc, "duration_s": duration_s,
        "path_share": baselines.path_share(emulator, "download") if emulator else None,
        "emulator_drops": baselines.drops(emulator) if emulator else None,
        "emulator_cpu_percent": round(emulator["cpu_percent"], 1) if emulator else None,
    })
    for key in ("mptund_reorder", "mptund_sender"):
        if key in raw:
            result[key] = raw[key]
    return result


def modes_for(scenario: Path, args) -> list[str]:
    summary = scenario_summary(scenario)
    fastest = max(summary["paths"], key=lambda p: p["down"]["rate_mbit"] or 0.0)
    modes = [f"single:{fastest['name']}", "mptcp"] + [f"mptund:{s}" for s in args.schedulers]
    if args.duplicate:
        modes.append(f"mptund:{args.schedulers[0]}+dup")
    return modes


def run_scenarios(names: list[str], args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        scenario = SCENARIOS / f"{name}.toml"
        for cc in args.cc:
            for mode in modes_for(scenario, args):
                result = run_one(scenario, mode, cc, args)
                file = out / f"{result['scenario']}__{cc}__{mode.replace(':', '-')}.json"
                file.write_text(json.dumps(result, indent=2))
                reorder = result.get("mptund_reorder") or {}
                print(f"{result['scenario']:<26} {cc:<6} {mode:<32} "
                      f"{result.get('goodput_mbit', 'ERR')!s:>8} Mbit/s  ratio {result.get('ratio_to_sum')!s:>6}  "
                      f"retx {result.get('retransmissions')!s:>5}  stall {result.get('longest_stall_s')!s:>4} s  "
                      f"hold {reorder.get('mean_hold_ms', '')}/{reorder.get('max_hold_ms', '')} ms  "
                      f"late {reorder.get('released_late', '')}  {result.get('error', '')}", flush=True)


# ---- report -------------------------------------------------------------------------


def load(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]


# Intervals from this many seconds on count as steady state: the first ones hold
# slow start (the inner flow's, and for mptund the paths' too).
STEADY_FROM_S = 3.0


def steady_mbit(result: dict) -> float | None:
    values = [i["mbit"] for i in result.get("intervals", []) if i["start_s"] >= STEADY_FROM_S]
    return sum(values) / len(values) if values else None


def table(results: list[dict]) -> str:
    lines = ["| scenario | cc | mode | goodput Mbit/s | of sum of paths | steady state (from 3 s) of sum | "
             "of MPTCP | of best single path | "
             "retransmissions | longest stall s | mean / max hold ms | hold p99 ≤ ms | released late | gaps skipped |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by_key = {(r["scenario"], r["cc"], r["mode"]): r for r in results}
    order = {"single": 0, "mptcp": 1, "mptund": 2}
    for r in sorted(results, key=lambda r: (r["scenario"], r["cc"], order.get(r["mode"].split(":")[0], 3),
                                            -(r.get("goodput_mbit") or 0))):
        if "error" in r:
            lines.append(f"| {r['scenario']} | {r['cc']} | {r['mode']} | error: {r['error']} |" + " |" * 10)
            continue
        mptcp = by_key.get((r["scenario"], r["cc"], "mptcp"), {}).get("goodput_mbit")
        single = next((x.get("goodput_mbit") for k, x in by_key.items()
                       if k[0] == r["scenario"] and k[1] == r["cc"] and k[2].startswith("single:")), None)
        of = lambda base: f"{r['goodput_mbit'] / base:.0%}" if base else ""
        reorder = r.get("mptund_reorder") or {}
        hold = (f"{reorder['mean_hold_ms']:.1f} / {reorder['max_hold_ms']:.0f}" if reorder else "")
        lines.append(
            f"| {r['scenario']} | {r['cc']} | {r['mode']} | {r['goodput_mbit']:.2f} | {r['ratio_to_sum']:.1%} | "
            f"{steady_mbit(r) / r['sum_of_path_rates_mbit']:.1%} | "
            f"{of(mptcp) if r['mode'] != 'mptcp' else ''} | {of(single) if not r['mode'].startswith('single') else ''} | "
            f"{r['retransmissions']} | {r['longest_stall_s']:.1f} | {hold} | "
            f"{reorder.get('hold_p99_bound_ms') or ''} | {reorder.get('released_late', '')} | "
            f"{reorder.get('gaps_skipped', '')} |")
    return "\n".join(lines) + "\n"


def svg_plot(results: list[dict], cc: str) -> str:
    """Grouped bars: goodput as a share of the sum of path rates, per scenario and mode."""
    rows = [r for r in results if r["cc"] == cc and "error" not in r]
    scenarios = sorted({r["scenario"] for r in rows})
    modes = ["single", "mptcp"] + [f"mptund:{s}" for s in SCHEDULERS]
    colours = ["#9e9e9e", "#424242", "#d32f2f", "#1976d2", "#0097a7", "#388e3c", "#fbc02d", "#7b1fa2", "#f57c00"]
    width, height, left, top, bottom = 980, 440, 60, 60, 110
    plot_w, plot_h = width - left - 20, height - top - bottom
    group_w = plot_w / max(len(scenarios), 1)
    bar_w = group_w * 0.85 / len(modes)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{left}" y="20" font-size="14">One TCP flow ({cc}): goodput as a share of the sum of '
             f'path rates</text>']
    for tick in range(0, 101, 20):
        y = top + plot_h * (1 - tick / 100)
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e0e0e0"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{tick}%</text>')
    target_y = top + plot_h * (1 - 0.9)
    parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{target_y:.1f}" y2="{target_y:.1f}" '
                 f'stroke="#d32f2f" stroke-dasharray="4 3"/>')
    ceiling_y = top + plot_h * (1 - ceiling()["mptund"])
    parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{ceiling_y:.1f}" y2="{ceiling_y:.1f}" '
                 f'stroke="#1976d2" stroke-dasharray="2 2"/>')
    for g, scenario in enumerate(scenarios):
        x0 = left + g * group_w + group_w * 0.075
        for m, mode in enumerate(modes):
            match = [r for r in rows if r["scenario"] == scenario and
                     (r["mode"] == mode or (mode == "single" and r["mode"].startswith("single:")))]
            if not match:
                continue
            share = match[0]["ratio_to_sum"] or 0.0
            bar_h = plot_h * min(share, 1.0)
            x = x0 + m * bar_w
            parts.append(f'<rect x="{x:.1f}" y="{top + plot_h - bar_h:.1f}" width="{bar_w * 0.9:.1f}" '
                         f'height="{bar_h:.1f}" fill="{colours[m]}"><title>{scenario} {match[0]["mode"]}: '
                         f'{share:.1%}</title></rect>')
        parts.append(f'<text x="{left + (g + 0.5) * group_w:.1f}" y="{top + plot_h + 16}" '
                     f'text-anchor="middle">{scenario}</text>')
    legend_y = height - 60
    for m, mode in enumerate(modes):
        x = left + (m % 5) * 180
        y = legend_y + (m // 5) * 18
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{colours[m]}"/>')
        label = "best single path" if mode == "single" else mode
        parts.append(f'<text x="{x + 14}" y="{y}">{label}</text>')
    # The two lines are a point apart: one label at each end, both above the bars.
    parts.append(f'<text x="{left + 4}" y="{top - 4}" fill="#d32f2f">- - target 90%</text>')
    parts.append(f'<text x="{left + plot_w}" y="{top - 4}" text-anchor="end" fill="#1976d2">'
                 f'· · mptund encapsulation ceiling {ceiling()["mptund"]:.1%}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write_report(out: Path) -> str:
    results = load(out)
    for cc in sorted({r["cc"] for r in results}):
        (HERE / f"goodput-{cc}.svg").write_text(svg_plot(results, cc))
    return table(results)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steady", action="store_true", help=f"the scenarios without outages: {', '.join(STEADY)}")
    parser.add_argument("--blockage", action="store_true", help=f"the blockage scenario(s): {', '.join(BLOCKAGE)}")
    parser.add_argument("--scenario", action="append", default=[], help="a scenario name (repeatable)")
    parser.add_argument("--cc", nargs="+", default=["cubic", "bbr"], choices=["cubic", "bbr", "reno"])
    parser.add_argument("--schedulers", nargs="+", default=SCHEDULERS)
    parser.add_argument("--duplicate", action="store_true",
                        help="also run the first scheduler with latency-critical duplication")
    parser.add_argument("--max-hold-ms", type=int, default=200, help="reorder.max_hold_ms of both daemons")
    parser.add_argument("--fixed-hold", action="store_true", help="reorder.adaptive = false")
    parser.add_argument("--duration", type=int, help="seconds per flow (default: the scenario's duration_s)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--report", action="store_true", help="print the table and write the SVG plots")
    args = parser.parse_args()
    names = list(args.scenario) + (STEADY if args.steady else []) + (BLOCKAGE if args.blockage else [])
    if names and os.geteuid() != 0:
        parser.error("runs need root (network namespaces)")
    run_scenarios(names, args)
    if args.report or not names:
        print(write_report(Path(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
