#!/usr/bin/env python3
"""mptund schedulers against kernel MPTCP and the best single path, one TCP flow.

For each scenario, direction and TCP congestion control, on fresh topologies:

  single:<path>   plain TCP over one path alone: the scenario's highest-rate path in the
                  flow's direction, and its lowest-delay path where that is another;
                  the better of them is the "best single path",
  mptcp           kernel MPTCP over all paths,
  mptund:<sched>  the flow through the tunnel with that scheduler; `mptund:default`
                  leaves scheduler, reorder hold and congestion controller to the
                  daemon's defaults (and, with --duplicate, the first scheduler again
                  with latency-critical duplication on).

A download has the server send, as in the papers; an upload has the client send, and
the sum of path rates is then the sum of the `up` rates. Every cell runs --repeats
times, the modes interleaved (A, B, C, A, B, C, ...) so that drift on the machine hits
all modes alike. For mptund runs the receiving daemon's final report adds the reorder
buffer's figures: the hold in force at the end, mean and maximum hold, hold-time
quantiles, packets released late and gaps skipped. Results are one JSON file per run
in --out; `--report` prints the tables (medians, min–max) and writes one SVG plot per
direction and congestion control into --out. The daemon is $MPTUND_BIN, else
target/release/mptund.

    sudo python3 benches/schedulers/run.py --matrix                      # the whole matrix
    sudo python3 benches/schedulers/run.py --steady --cc cubic --direction download --repeats 1
    sudo python3 benches/schedulers/run.py --scenario three-paths-lossy --schedulers default blest
    sudo python3 benches/schedulers/run.py --scenario two-paths-bdp-buffers --schedulers default \
        --baseline-bin /tmp/mptund-previous --skip-references                # A/B of two builds
    for pass in 1 2 3; do                                                  # the matrix in passes
      sudo python3 benches/schedulers/run.py --matrix --repeats 1 --first-repeat $pass --duration 12 \
          --out benches/schedulers/results-matrix-new --skip-existing      # (resumes a broken pass)
    done
    python3 benches/schedulers/run.py --report --out benches/schedulers/results-matrix
    python3 benches/schedulers/run.py --report --out benches/schedulers/archive/results-ab-reach.tar.xz

Past experiments are archived, one `archive/<name>.tar.xz` each, and listed in HISTORY.md;
REPORT.md, the current standing, is written by tools/standing.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
sys.path.insert(0, str(REPO_ROOT / "testbed"))
from mptund import binary_record, mptund_binary  # noqa: E402
from topology import Topology, scenario_summary  # noqa: E402

_spec = importlib.util.spec_from_file_location("baselines", REPO_ROOT / "benches" / "baselines" / "run.py")
baselines = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(baselines)

SCENARIOS = REPO_ROOT / "config" / "scenarios"
RESULTS = HERE / "results"
# The matrix's runs apart from the older, download-only results of one commit.
MATRIX_RESULTS = HERE / "results-matrix"

# Scenarios whose paths never go away: the ones the 90 % target is about.
STEADY = ["two-paths-symmetric", "two-paths-rtt-asymmetric", "hst-eight-lte", "lte-trace-wifi"]
# One path's quality collapses for seconds (seed 001's 5G blockage).
BLOCKAGE = ["5g-4g-blockage"]

# The daemon's default scheduler and settings, whatever they are in the binary under test.
DEFAULT = "default"
# The daemon's defaults in another build (--baseline-bin), e.g. the previous commit's.
BASELINE_MODE = "mptund-baseline:default"
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


def reorder_figures(receiver_report: dict) -> dict:
    """The flow receiver's reorder buffer at the end of the run."""
    sessions = receiver_report.get("sessions") or []
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
        "parity_rebuilt": sessions[0].get("parity_rebuilt"),
        "parity_unrecoverable": sessions[0].get("parity_unrecoverable"),
        # Sent against the data's direction, where there is room.
        "standalone_acks": sessions[0].get("standalone_acks"),
    }


def sender_figures(sender_report: dict) -> dict:
    """The flow sender's scheduling at the end of the run."""
    sessions = sender_report.get("sessions") or [{}]
    return {
        "reinjected": sessions[0].get("reinjected"),
        "queued": sessions[0].get("queued"),
        "duplicated": sessions[0].get("duplicated"),
        "ecn_marked": sessions[0].get("ecn_marked"),
        "parity_sent": sessions[0].get("parity_sent"),
        # Sent on the data's direction: each takes a slot of the data's rate.
        "standalone_acks": sessions[0].get("standalone_acks"),
        "drops": {k: v for k, v in sender_report.get("drops", {}).items() if v},
        "sent_data_packets": {p["name"]: p["sent_data_packets"] for p in sessions[0].get("paths", [])},
        # How each path's controller saw its path at the end: what it took for jitter
        # and what queue it let stand.
        "paths_at_end": {p["name"]: {key: p.get(key) for key in PATH_FIGURES}
                         for p in sessions[0].get("paths", [])},
    }


PATH_FIGURES = ("min_rtt_ms", "jitter_ms", "queuing_delay_ms", "queuing_delay_target_ms",
                "cwnd_bytes", "delivery_rate_mbit", "lost_packets", "spurious_losses",
                "packet_threshold")


def daemon_setting(text: str) -> tuple[str, int | float | bool | str]:
    """KEY=VALUE for a daemon setting: VALUE as TOML reads it (200, 0.5, true, "x"),
    or a bare word as a string (equalize_delay=all-paths)."""
    key, _, value = text.partition("=")
    if not key or not value:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE, e.g. queue_interval_ms=200")
    try:
        return key, tomllib.loads(f"value = {value}")["value"]
    except tomllib.TOMLDecodeError:
        return key, value


def run_mptund(topo: Topology, scheduler: str, duplicate: bool, cc: str, duration_s: int,
               direction: str, args) -> dict:
    # None: the daemon's default. The tunnel's congestion controller is always the
    # daemon's; the `cc` here is the inner TCP flow's.
    named = scheduler != DEFAULT
    raw = baselines.run_mptund(topo, cc, duration_s, direction,
                               scheduler=scheduler if named else None,
                               hold_ms=args.max_hold_ms if named else None,
                               reorder_adaptive=False if named and args.fixed_hold else None,
                               congestion_controller=None, duplicate_latency_critical=duplicate,
                               congestion=dict(args.congestion) if named else {},
                               reorder=dict(args.reorder) if named else {},
                               scheduler_settings=dict(args.scheduler_settings) if named else {})
    if "mptund_reports" in raw:
        client_report, server_report = raw.pop("mptund_reports")
        receiver, sender = (client_report, server_report) if direction == "download" else (server_report, client_report)
        raw["mptund_reorder"] = reorder_figures(receiver)
        raw["mptund_sender"] = sender_figures(sender)
    return raw


def run_one(scenario: Path, mode: str, cc: str, direction: str, args) -> dict:
    summary = scenario_summary(scenario)
    duration_s = args.duration or summary["duration_s"]
    rates = baselines.nominal_rates_mbit(summary, direction)
    with Topology(scenario=scenario) as topo:
        if args.inner_ecn:
            # Both ends of the inner flow ask for ECN (Linux's default only accepts it).
            for ns in (topo.client, topo.server):
                ns.sysctl("net.ipv4.tcp_ecn", "1")
        path_rate = None
        if mode.startswith("single:"):
            index = [p["name"] for p in summary["paths"]].index(mode.split(":", 1)[1]) + 1
            raw = baselines.run_plain(topo, "single", cc, duration_s, direction, index)
            path_rate = rates[index - 1]
        elif mode == "mptcp":
            raw = baselines.run_plain(topo, "mptcp", cc, duration_s, direction)
        elif mode == BASELINE_MODE:
            previous = os.environ.get("MPTUND_BIN")
            os.environ["MPTUND_BIN"] = args.baseline_bin
            try:
                raw = run_mptund(topo, DEFAULT, False, cc, duration_s, direction, args)
            finally:
                if previous is None:
                    os.environ.pop("MPTUND_BIN")
                else:
                    os.environ["MPTUND_BIN"] = previous
        else:
            scheduler = mode.split(":", 1)[1]
            duplicate = scheduler.endswith("+dup")
            raw = run_mptund(topo, scheduler.removesuffix("+dup"), duplicate, cc, duration_s, direction, args)
        emulator = topo.stop_emulator()
    result = baselines.summarise(raw, rates, path_rate)
    result.update({
        "scenario": summary["name"], "mode": mode, "cc": cc, "direction": direction, "duration_s": duration_s,
        "rate_scale": summary["rate_scale"], "random_loss": has_random_loss(summary),
        **baselines.emulator_figures(emulator, direction),
    })
    if args.inner_ecn:
        result["inner_ecn"] = True
    if mode.startswith("mptund"):
        # The binary's own commit (its --version), which a later build of the tree
        # would not show.
        result["mptund_binary"] = binary_record(args.baseline_bin if mode == BASELINE_MODE
                                                else mptund_binary())
    for key in ("mptund_reorder", "mptund_sender"):
        if key in raw:
            result[key] = raw[key]
    return result


def link_directions(summary: dict) -> list[dict]:
    return [path[key] for path in summary["paths"] for key in ("up", "down")]


def has_random_loss(summary: dict) -> bool:
    """Random or burst loss on some path in some direction (a data or an ACK path)."""
    return any(link["loss_percent"] or link["burst_loss_percent"] for link in link_directions(summary))


def has_outages(summary: dict) -> bool:
    return any(link["outages_ms"] for link in link_directions(summary))


def steady_scenarios() -> list[str]:
    """Every scenario file whose paths never go away."""
    return [path.stem for path in sorted(SCENARIOS.glob("*.toml")) if not has_outages(scenario_summary(path))]


def modes_for(scenario: Path, direction: str, schedulers: list[str], args) -> list[str]:
    summary = scenario_summary(scenario)
    key = "down" if direction == "download" else "up"
    # The best single path is the one that carries the most alone: the highest-rate path,
    # or the lowest-delay one where that differs (a short LTE path next to a GEO
    # terminal's higher rate). Both run; the report takes the better (`cells`).
    fastest = max(summary["paths"], key=lambda p: p[key]["rate_mbit"] or 0.0)
    nearest = min(summary["paths"], key=lambda p: p[key]["delay_ms"] or 0.0)
    singles = [fastest["name"]] + ([nearest["name"]] if nearest["name"] != fastest["name"] else [])
    references = [] if args.skip_references else [f"single:{name}" for name in singles] + ["mptcp"]
    modes = references + [f"mptund:{s}" for s in schedulers]
    if args.duplicate:
        modes.append(f"mptund:{schedulers[0]}+dup")
    if args.baseline_bin:
        modes.append(BASELINE_MODE)
    return modes


def result_file(out: Path, result: dict, repeat: int) -> Path:
    mode = result["mode"].replace(":", "-")
    return out / f"{result['scenario']}__{result['direction']}__{result['cc']}__{mode}__r{repeat}.json"


def existing_result(out: Path, scenario: Path, mode: str, cc: str, direction: str, repeat: int) -> Path | None:
    """The result file of this run if an earlier, interrupted pass wrote it."""
    path = result_file(out, {"scenario": scenario_summary(scenario)["name"], "direction": direction, "cc": cc,
                             "mode": mode}, repeat)
    return path if path.exists() else None


def scenario_file(name: str) -> Path:
    """A scenario of config/scenarios/ by name, or any scenario file by its path."""
    if name.endswith(".toml"):
        return Path(name).resolve()
    return SCENARIOS / f"{name}.toml"


def run_scenarios(names: list[str], directions: list[str], schedulers: list[str], args) -> None:
    if not names:
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        scenario = scenario_file(name)
        for direction in directions:
            modes = modes_for(scenario, direction, schedulers, args)
            for cc in args.cc:
                for repeat in range(args.first_repeat, args.first_repeat + args.repeats):
                    for mode in modes:
                        if args.skip_existing and existing_result(out, scenario, mode, cc, direction, repeat):
                            continue
                        result = run_one(scenario, mode, cc, direction, args)
                        result_file(out, result, repeat).write_text(json.dumps(result, indent=2))
                        reorder = result.get("mptund_reorder") or {}
                        print(f"{result['scenario']:<26} {direction:<8} {cc:<6} #{repeat} {mode:<28} "
                              f"{result.get('goodput_mbit', 'ERR')!s:>8} Mbit/s  "
                              f"ratio {result.get('ratio_to_sum')!s:>6}  retx {result.get('retransmissions')!s:>5}  "
                              f"stall {result.get('longest_stall_s')!s:>4} s  "
                              f"hold {reorder.get('mean_hold_ms', '')}/{reorder.get('max_hold_ms', '')} ms  "
                              f"emu cpu {result.get('emulator_cpu_percent')}%  {result.get('error', '')}",
                              flush=True)


# ---- report -------------------------------------------------------------------------


def load(out: Path) -> list[dict]:
    """The run files of a results directory, or of one archived as `<name>.tar.xz`
    (archive/: the directory's files at the top of the tarball, under `<name>/`)."""
    if out.name.endswith(".tar.xz"):
        with tarfile.open(out) as archive:
            members = sorted((m for m in archive.getmembers()
                              if m.isfile() and m.name.count("/") == 1 and m.name.endswith(".json")),
                             key=lambda m: m.name)
            results = [json.loads(archive.extractfile(m).read()) for m in members]
    else:
        results = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    for result in results:
        # Files from before --direction are downloads on loss-free scenarios.
        result.setdefault("direction", "download")
        result.setdefault("random_loss", False)
    return results


# Intervals from this many seconds on count as steady state: the first ones hold
# slow start (the inner flow's, and for mptund the paths' too).
STEADY_FROM_S = 3.0


def steady_mbit(result: dict) -> float | None:
    values = [i["mbit"] for i in result.get("intervals", []) if i["start_s"] >= STEADY_FROM_S]
    return sum(values) / len(values) if values else None


# Targets for mptund's median goodput against the other modes' medians (issue 13).
OF_MPTCP_TARGET = 0.95
OF_SINGLE_TARGET = 1.0


@dataclass
class Cell:
    """The runs of one mode in one scenario, direction and congestion control."""

    runs: list[dict]

    def goodputs(self) -> list[float]:
        return [r["goodput_mbit"] for r in self.runs if "error" not in r]

    def median(self, key: str = "goodput_mbit") -> float | None:
        values = [r[key] for r in self.runs if "error" not in r and r.get(key) is not None]
        return statistics.median(values) if values else None

    def spread(self) -> str:
        """The min–max over the repeats in parentheses; nothing for one run."""
        values = self.goodputs()
        return f" ({min(values):.1f}–{max(values):.1f})" if len(values) > 1 else ""

    def errors(self) -> list[str]:
        return [r["error"] for r in self.runs if "error" in r]


def cells(results: list[dict]) -> dict[tuple, dict[str, Cell]]:
    """(scenario, direction, cc) -> mode -> its runs; of the single-path modes, the one
    with the higher median goodput counts as "single", the best single path."""
    grouped: dict[tuple, dict[str, Cell]] = {}
    for r in results:
        grouped.setdefault((r["scenario"], r["direction"], r["cc"]), {}).setdefault(r["mode"], Cell([])).runs.append(r)
    for modes in grouped.values():
        singles = [modes.pop(mode) for mode in [m for m in modes if m.startswith("single:")]]
        if singles:
            modes["single"] = max(singles, key=lambda cell: cell.median() or 0.0)
    return dict(sorted(grouped.items()))


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


def percent(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else ""


def targets(of_mptcp: float | None, of_single: float | None, random_loss: bool) -> str:
    mark = lambda ok: "✓" if ok else "✗"
    flags = []
    if of_mptcp is not None:
        flags.append(f"{mark(of_mptcp >= OF_MPTCP_TARGET)} ≥{OF_MPTCP_TARGET:.0%} of MPTCP")
    if of_single is not None:
        flags.append(f"{mark(of_single >= OF_SINGLE_TARGET)} ≥ best single")
    if random_loss and of_mptcp is not None:
        flags.append(f"{mark(of_mptcp > 1.0)} > MPTCP (loss)")
    return ", ".join(flags)


def comparison_table(results: list[dict]) -> str:
    """One row per scenario, direction, congestion control and mptund mode: medians of
    the repeats, min–max, and the targets."""
    lines = ["| scenario | dir | cc | mptund mode | runs | sum of paths Mbit/s | mptund Mbit/s (min–max) | "
             "MPTCP Mbit/s (min–max) | best single Mbit/s (min–max) | mptund of sum | MPTCP of sum | "
             "mptund / MPTCP | mptund / best single | targets |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for (scenario, direction, cc), modes in cells(results).items():
        mptcp, single = modes.get("mptcp"), modes.get("single")
        mptund_cells = [(mode, cell) for mode, cell in modes.items() if mode.startswith("mptund")]
        for mode, cell in sorted(mptund_cells, key=lambda item: -(item[1].median() or 0.0)):
            total = cell.runs[0]["sum_of_path_rates_mbit"]
            mptund_mbit = cell.median()
            mptcp_mbit = mptcp.median() if mptcp else None
            single_mbit = single.median() if single else None
            shown = lambda c, m: f"{m:.1f}{c.spread()}" if m is not None else ("error" if c else "")
            of_mptcp, of_single = ratio(mptund_mbit, mptcp_mbit), ratio(mptund_mbit, single_mbit)
            lines.append(
                f"| {scenario} | {direction} | {cc} | {mode.split(':', 1)[1]} | {len(cell.runs)} | {total:.1f} | "
                f"{shown(cell, mptund_mbit)} | {shown(mptcp, mptcp_mbit)} | {shown(single, single_mbit)} | "
                f"{percent(ratio(mptund_mbit, total))} | {percent(ratio(mptcp_mbit, total))} | "
                f"{percent(of_mptcp)} | {percent(of_single)} | "
                f"{targets(of_mptcp, of_single, cell.runs[0]['random_loss'])} |")
    return "\n".join(lines) + "\n"


def detail_table(results: list[dict]) -> str:
    """Every mode's medians, with the diagnostics: steady state, retransmissions, stalls,
    the receiver's reorder hold."""
    lines = ["| scenario | dir | cc | mode | runs | goodput Mbit/s (min–max) | of sum | steady state (from 3 s) "
             "of sum | retransmissions | longest stall s | mean / max hold ms | released late | errors |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    order = {"single": 0, "mptcp": 1}
    for (scenario, direction, cc), modes in cells(results).items():
        for mode, cell in sorted(modes.items(), key=lambda item: (order.get(item[0], 2), item[0])):
            ok = [r for r in cell.runs if "error" not in r]
            label = cell.runs[0]["mode"] if mode == "single" else mode
            if not ok:
                lines.append(f"| {scenario} | {direction} | {cc} | {label} | {len(cell.runs)} |" + " |" * 7
                             + f" {'; '.join(cell.errors())[:200]} |")
                continue
            total = ok[0]["sum_of_path_rates_mbit"]
            steady = statistics.median(steady_mbit(r) or 0.0 for r in ok)
            reorders = [r["mptund_reorder"] for r in ok if r.get("mptund_reorder")]
            hold = (f"{statistics.median(x['mean_hold_ms'] for x in reorders):.1f} / "
                    f"{statistics.median(x['max_hold_ms'] for x in reorders):.0f}" if reorders else "")
            late = f"{statistics.median(x['released_late'] for x in reorders):.0f}" if reorders else ""
            lines.append(
                f"| {scenario} | {direction} | {cc} | {label} | {len(cell.runs)} | "
                f"{cell.median():.2f}{cell.spread()} | {percent(ratio(cell.median(), total))} | "
                f"{percent(ratio(steady, total))} | {cell.median('retransmissions') or 0:.0f} | "
                f"{cell.median('longest_stall_s'):.1f} | {hold} | {late} | {len(cell.errors()) or ''} |")
    return "\n".join(lines) + "\n"


def svg_plot(results: list[dict], direction: str, cc: str) -> str:
    """Grouped bars: median goodput as a share of the sum of path rates per scenario and
    mode, with a min–max whisker over the repeats."""
    grouped = {(scenario, mode): cell for (scenario, d, c), modes in cells(results).items()
               if d == direction and c == cc for mode, cell in modes.items() if cell.goodputs()}
    scenarios = sorted({scenario for scenario, _ in grouped})
    present = {mode for _, mode in grouped}
    mptund_modes = [f"mptund:{s}" for s in [DEFAULT] + SCHEDULERS if f"mptund:{s}" in present]
    mptund_modes += sorted(m for m in present if m.startswith("mptund:") and m not in mptund_modes)
    modes = ["single", "mptcp"] + mptund_modes
    palette = ["#d32f2f", "#1976d2", "#0097a7", "#388e3c", "#fbc02d", "#7b1fa2", "#f57c00", "#5d4037", "#c2185b"]
    colours = ["#9e9e9e", "#424242"] + [palette[i % len(palette)] for i in range(len(mptund_modes))]
    left, top, bottom = 150, 60, 150  # room for the slanted scenario names
    width = max(980, left + 20 + len(scenarios) * 22 * len(modes))
    height = 480
    plot_w, plot_h = width - left - 20, height - top - bottom
    group_w = plot_w / max(len(scenarios), 1)
    bar_w = group_w * 0.85 / len(modes)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{left}" y="20" font-size="14">One TCP flow, {direction} ({cc}): median goodput as a share '
             f'of the sum of path rates; whiskers min–max</text>']
    for tick in range(0, 101, 20):
        y = top + plot_h * (1 - tick / 100)
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e0e0e0"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{tick}%</text>')
    ceiling_y = top + plot_h * (1 - ceiling()["mptund"])
    parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{ceiling_y:.1f}" y2="{ceiling_y:.1f}" '
                 f'stroke="#1976d2" stroke-dasharray="2 2"/>')
    y_of = lambda share: top + plot_h * (1 - min(share, 1.0))
    for g, scenario in enumerate(scenarios):
        x0 = left + g * group_w + group_w * 0.075
        for m, mode in enumerate(modes):
            cell = grouped.get((scenario, mode))
            if cell is None:
                continue
            total = cell.runs[0]["sum_of_path_rates_mbit"]
            share, low, high = (value / total for value in (cell.median(), min(cell.goodputs()),
                                                             max(cell.goodputs())))
            x = x0 + m * bar_w
            label = cell.runs[0]["mode"] if mode == "single" else mode
            parts.append(f'<rect x="{x:.1f}" y="{y_of(share):.1f}" width="{bar_w * 0.9:.1f}" '
                         f'height="{top + plot_h - y_of(share):.1f}" fill="{colours[m]}"><title>{scenario} '
                         f'{label}: {share:.1%} ({cell.median():.1f} Mbit/s of {total:.1f}), '
                         f'{len(cell.goodputs())} runs</title></rect>')
            if high > low:
                centre = x + bar_w * 0.45
                parts.append(f'<line x1="{centre:.1f}" x2="{centre:.1f}" y1="{y_of(low):.1f}" '
                             f'y2="{y_of(high):.1f}" stroke="black"/>')
        label_x, label_y = left + (g + 0.5) * group_w, top + plot_h + 12
        parts.append(f'<text x="{label_x:.1f}" y="{label_y}" text-anchor="end" '
                     f'transform="rotate(-35 {label_x:.1f} {label_y})">{scenario}</text>')
    legend_y = height - 30
    for m, mode in enumerate(modes):
        x = left + (m % 5) * 180
        y = legend_y + (m // 5) * 18 - 18 * ((len(modes) - 1) // 5)
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{colours[m]}"/>')
        label = {"single": "best single path", "mptcp": "kernel MPTCP"}.get(mode, mode)
        parts.append(f'<text x="{x + 14}" y="{y}">{label}</text>')
    parts.append(f'<text x="{left + plot_w}" y="{top - 4}" text-anchor="end" fill="#1976d2">'
                 f'· · mptund encapsulation ceiling {ceiling()["mptund"]:.1%}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def binaries_line(results: list[dict]) -> str:
    """The mptund builds that ran, by mode, as their --version lines name them (results
    from before the version line carry none)."""
    builds = sorted({(r["mode"], r["mptund_binary"]["version"]) for r in results if r.get("mptund_binary")})
    if not builds:
        return ""
    return "Binaries: " + "; ".join(f"{mode} `{version}`" for mode, version in builds) + "\n\n"


def write_report(out: Path) -> str:
    """Writes goodput-<direction>-<cc>.svg into `out` and returns the tables. For an
    archived set (`archive/<name>.tar.xz`) the plots go to `<name>/` in the current
    directory instead."""
    results = load(out)
    plots = out if out.is_dir() else Path.cwd() / out.name.removesuffix(".tar.xz")
    plots.mkdir(parents=True, exist_ok=True)
    for direction, cc in sorted({(r["direction"], r["cc"]) for r in results}):
        (plots / f"goodput-{direction}-{cc}.svg").write_text(svg_plot(results, direction, cc))
    return (binaries_line(results) + "### mptund against MPTCP and the best single path (medians)\n\n" + comparison_table(results)
            + "\n### Every mode\n\n" + detail_table(results))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steady", action="store_true", help=f"the scenarios without outages: {', '.join(STEADY)}")
    parser.add_argument("--blockage", action="store_true", help=f"the blockage scenario(s): {', '.join(BLOCKAGE)}")
    parser.add_argument("--matrix", action="store_true",
                        help="every scenario file without outages, both directions, cubic and bbr, "
                             "with mptund's defaults (--schedulers adds more); results in results-matrix/")
    parser.add_argument("--scenario", action="append", default=[], help="a scenario name of config/scenarios/, or the path of any "
                        "scenario file (ending in .toml); repeatable")
    parser.add_argument("--direction", default="both", choices=["download", "upload", "both"],
                        help="download: the server sends; upload: the client sends")
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell, modes interleaved; the report "
                                                               "shows the median and min–max")
    parser.add_argument("--first-repeat", type=int, default=1, help="number of the first run per cell, to add "
                        "runs to an existing --out directory (e.g. --first-repeat 2 --repeats 2 after one pass)")
    parser.add_argument("--skip-existing", action="store_true",
                        help="skip runs whose result file is in --out already (to resume an interrupted pass)")
    parser.add_argument("--cc", nargs="+", default=["cubic", "bbr"], choices=["cubic", "bbr", "reno"])
    parser.add_argument("--schedulers", nargs="+",
                        help=f"mptund schedulers ({DEFAULT!r}: the daemon's defaults); default: all seven, "
                             f"with --matrix {DEFAULT!r} only")
    parser.add_argument("--duplicate", action="store_true",
                        help="also run the first scheduler with latency-critical duplication")
    parser.add_argument("--baseline-bin", help="another mptund binary (e.g. the previous commit's build), run "
                                               f"with its defaults as mode {BASELINE_MODE!r} in the same cells")
    parser.add_argument("--skip-references", action="store_true",
                        help="leave out the single-path and MPTCP runs (for A/B runs of two builds)")
    parser.add_argument("--max-hold-ms", type=int, help="reorder.max_hold_ms of both daemons for a named "
                                                        "scheduler (default: the daemon's)")
    parser.add_argument("--fixed-hold", action="store_true", help="reorder.adaptive = false for a named scheduler")
    parser.add_argument("--congestion", nargs="+", default=[], type=daemon_setting, metavar="KEY=VALUE",
                        help="[congestion] settings of both daemons for a named scheduler, "
                             "e.g. queue_interval_ms=200")
    parser.add_argument("--scheduler-settings", nargs="+", default=[], type=daemon_setting, metavar="KEY=VALUE",
                        help="more [scheduler] settings of both daemons for a named scheduler, "
                             "e.g. earliest_arrival_share_percent=1000 blest_lambda=1.5")
    parser.add_argument("--reorder", nargs="+", default=[], type=daemon_setting, metavar="KEY=VALUE",
                        help="[reorder] settings of both daemons for a named scheduler, "
                             "e.g. equalize_percent=100 equalize_delay=all-paths")
    parser.add_argument("--inner-ecn", action="store_true",
                        help="the inner flow's hosts negotiate ECN (net.ipv4.tcp_ecn=1 in both namespaces), "
                             "for every mode; results record it as inner_ecn")
    parser.add_argument("--duration", type=int, help="seconds per flow (default: the scenario's duration_s)")
    parser.add_argument("--out", help="result directory (default: results/, with --matrix results-matrix/)")
    parser.add_argument("--report", action="store_true", help="print the tables and write the SVG plots")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.first_repeat < 1:
        parser.error("--first-repeat must be at least 1")
    names = list(args.scenario) + (STEADY if args.steady else []) + (BLOCKAGE if args.blockage else [])
    if args.matrix:
        names += [name for name in steady_scenarios() if name not in names]
        schedulers = [DEFAULT] + [s for s in args.schedulers or [] if s != DEFAULT]
    else:
        schedulers = args.schedulers or SCHEDULERS
    args.out = args.out or str(MATRIX_RESULTS if args.matrix else RESULTS)
    directions = ["download", "upload"] if args.direction == "both" else [args.direction]
    if names and os.geteuid() != 0:
        parser.error("runs need root (network namespaces)")
    run_scenarios(names, directions, schedulers, args)
    if args.report or not names:
        print(write_report(Path(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
