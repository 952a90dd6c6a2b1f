#!/usr/bin/env python3
"""Writes benches/schedulers/REPORT.md, the benchmark's current standing: one table per
target of issue 13, from the newest full matrix with references (median of three) and
the newest pass over the scenarios nobody tuned on, plus failover's newest results.

Result sets are directories of run.py's JSON files or the same archived as
`archive/<name>.tar.xz`. A scenario counts as unseen while its file is in unseen/; the
cells of scenarios moved to config/scenarios/ since the pass (a change was tuned on
them, HISTORY.md says when) are shown apart. The part of the old REPORT.md between the
`<!-- open -->` and `<!-- /open -->` lines (what is open) is written by hand and kept.
Plots of the matrix go to plots/.

    python3 benches/schedulers/tools/standing.py \\
        --matrix archive/results-matrix-3b73080.tar.xz \\
        --unseen archive/results-unseen-3b73080-all.tar.xz archive/results-unseen-3b73080-probes.tar.xz \\
        --failover ../failover/results-3b73080.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
sys.path.insert(0, str(BENCH))
import run  # noqa: E402  (run.py: loading, cells, medians, the targets and the plots)

MPTUND = "mptund:default"
# The moonshot of issue 13: at least 80 % of the sum of the paths where one cubic flow
# over kernel MPTCP gets about 15 % of it; cells where MPTCP gets under 20 % count.
MOONSHOT_SHARE = 0.80
MOONSHOT_MPTCP_BELOW = 0.20
# Failover's target (issue 13): the longest gap under 300 ms and no inner RTO.
FAILOVER_GAP_MS = 300.0
OPEN_START, OPEN_END = "<!-- open -->", "<!-- /open -->"


def display(path: Path) -> str:
    """A path as the report names it: relative to the benchmark's folder."""
    try:
        return str(path.resolve().relative_to(BENCH))
    except ValueError:
        return str(path)


def set_name(path: Path) -> str:
    return path.name.removesuffix(".tar.xz")


def commit_of(results: list[dict], fallback: str) -> str:
    """The commit the runs' binaries name (run.py records it since --version has one),
    else what the result set's name says."""
    commits = {r["mptund_binary"]["commit"] for r in results if r.get("mptund_binary")}
    return ", ".join(sorted(commits)) if commits else fallback


def part_mbit(cell: run.Cell, first: bool) -> float | None:
    """Median over the runs of the mean interval rate before (first) or from STEADY_FROM_S."""
    means = []
    for result in cell.runs:
        values = [i["mbit"] for i in result.get("intervals", [])
                  if (i["start_s"] < run.STEADY_FROM_S) == first]
        if "error" not in result and values:
            means.append(sum(values) / len(values))
    return statistics.median(means) if means else None


class Row:
    """One cell with references: mptund's, MPTCP's and the best single path's medians."""

    def __init__(self, key: tuple, modes: dict[str, run.Cell]):
        self.scenario, self.direction, self.cc = key
        self.mptund, self.mptcp, self.single = modes[MPTUND], modes["mptcp"], modes["single"]
        self.m, self.p, self.s = self.mptund.median(), self.mptcp.median(), self.single.median()
        first = self.mptund.runs[0]
        self.total = first["sum_of_path_rates_mbit"]
        self.lossy = first["random_loss"]

    @property
    def name(self) -> str:
        return f"{self.scenario} {self.direction} {self.cc}"

    def of_mptcp(self) -> float:
        return self.m / self.p

    def of_single(self) -> float:
        return self.m / self.s

    def first_and_rest(self) -> tuple[float | None, float | None]:
        return tuple(run.ratio(part_mbit(self.mptund, first), part_mbit(self.mptcp, first))
                     for first in (True, False))


def rows(results: list[dict]) -> list[Row]:
    return [Row(key, modes) for key, modes in run.cells(results).items()
            if all(modes.get(mode) and modes[mode].median() for mode in (MPTUND, "mptcp", "single"))]


def pct(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "–"


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def unseen_now() -> set[str]:
    return {path.stem for path in (BENCH / "unseen").glob("*.toml")}


def sets_of(matrix: list[Row], unseen: list[Row]) -> list[tuple[str, list[Row]]]:
    names = unseen_now()
    still = [r for r in unseen if r.scenario in names]
    moved = [r for r in unseen if r.scenario not in names]
    sets = [("the matrix (config/scenarios/ of the pass), median of 3", matrix),
            ("unseen/ scenarios, one run each", still)]
    if moved:
        sets.append(("scenarios tuned on since, now in config/scenarios/, one run each", moved))
    return [(label, group) for label, group in sets if group]


def count_by_cc(group: list[Row], test) -> str:
    met = [r for r in group if test(r)]
    by_cc = ", ".join(f"inner {cc} {sum(r.cc == cc for r in met)} of {sum(r.cc == cc for r in group)}"
                      for cc in sorted({r.cc for r in group}))
    return f"**{len(met)} of {len(group)}** ({by_cc})"


def target_mptcp(sets: list[tuple[str, list[Row]]], matrix: list[Row]) -> list[str]:
    lines = ["## ≥ 95 % of kernel MPTCP", "",
             "| set | cells met | from 3 s into the flow | geometric mean of mptund / MPTCP |",
             "|---|---|---|---|"]
    for label, group in sets:
        rest = [r.first_and_rest()[1] for r in group]
        lines.append(f"| {label} | {count_by_cc(group, lambda r: r.of_mptcp() >= run.OF_MPTCP_TARGET)} | "
                     f"{sum(x is not None and x >= run.OF_MPTCP_TARGET for x in rest)} of {len(group)} | "
                     f"{pct(geometric_mean([r.of_mptcp() for r in group]))} |")
    misses = sorted((r for r in matrix if r.of_mptcp() < run.OF_MPTCP_TARGET), key=Row.of_mptcp)
    if misses:
        lines += ["", "The matrix's cells below, Mbit/s (min–max of mptund's runs); the last two columns "
                  "are mptund over MPTCP in the flow's first 3 s and after:", "",
                  "| cell | mptund | MPTCP | of MPTCP | first 3 s | from 3 s |", "|---|---|---|---|---|---|"]
        for r in misses:
            first, rest = r.first_and_rest()
            lines.append(f"| {r.name} | {r.m:.1f}{r.mptund.spread()} | {r.p:.1f} | **{pct(r.of_mptcp())}** | "
                         f"{pct(first)} | {pct(rest)} |")
    return lines


def target_single(sets: list[tuple[str, list[Row]]]) -> list[str]:
    lines = ["## Never below the best single path", "",
             "| set | cells met | cells below (mptund / best single path) |", "|---|---|---|"]
    for label, group in sets:
        below = sorted((r for r in group if r.of_single() < run.OF_SINGLE_TARGET), key=Row.of_single)
        lines.append(f"| {label} | {count_by_cc(group, lambda r: r.of_single() >= run.OF_SINGLE_TARGET)} | "
                     + ("; ".join(f"{r.name} {pct(r.of_single())}" for r in below) or "none") + " |")
    return lines


def target_lossy(sets: list[tuple[str, list[Row]]]) -> list[str]:
    lines = ["## Above kernel MPTCP on paths with random loss", "",
             "| set | lossy cells above MPTCP | lossy cells not above (mptund / MPTCP) |", "|---|---|---|"]
    for label, group in sets:
        lossy = [r for r in group if r.lossy]
        if not lossy:
            continue
        behind = sorted((r for r in lossy if r.of_mptcp() <= 1.0), key=Row.of_mptcp)
        lines.append(f"| {label} | {count_by_cc(lossy, lambda r: r.of_mptcp() > 1.0)} | "
                     + ("; ".join(f"{r.name} {pct(r.of_mptcp())}" for r in behind) or "none") + " |")
    return lines


def target_moonshot(sets: list[tuple[str, list[Row]]]) -> list[str]:
    lines = ["## Moonshot: ≥ 80 % of the sum of the paths where one cubic flow over MPTCP gets about 15 %", "",
             "Inner cubic cells where MPTCP gets under 20 % of the sum, and three-paths-lossy, the "
             "matrix's cell for it:", "",
             "| set | cell | MPTCP of sum | mptund of sum | met |", "|---|---|---|---|---|"]
    for label, group in sets:
        for r in group:
            if r.cc != "cubic" or not (r.p / r.total < MOONSHOT_MPTCP_BELOW or r.scenario == "three-paths-lossy"):
                continue
            share = r.m / r.total
            lines.append(f"| {label.split(',')[0]} | {r.name} | {pct(r.p / r.total)} | **{pct(share)}** | "
                         f"{'yes' if share >= MOONSHOT_SHARE else 'no'} |")
    return lines


def target_failover(path: Path | None) -> list[str]:
    lines = ["## Failover: a path dies; longest gap < 300 ms, no inner RTO, every run", ""]
    if path is None or not path.exists():
        return lines + ["No failover results given (`--failover`)."]
    results = [r for r in json.loads(path.read_text()) if r["mode"] == "mptund"]
    lines += [f"From `{display(path)}` (`../failover/REPORT.md`), mptund with its defaults:", "",
              "| scenario | cc | runs | median goodput Mbit/s | worst longest gap ms | inner RTOs | met |",
              "|---|---|---|---|---|---|---|"]
    for scenario, cc in sorted({(r["scenario"], r["cc"]) for r in results}):
        group = [r for r in results if (r["scenario"], r["cc"]) == (scenario, cc)]
        met = sum(r["longest_gap_ms"] < FAILOVER_GAP_MS and r["rto"] == 0 and r["byte_exact"] for r in group)
        lines.append(f"| {scenario} | {cc} | {len(group)} | {statistics.median(r['goodput_mbit'] for r in group):.2f} | "
                     f"{max(r['longest_gap_ms'] for r in group):.1f} | {sum(r['rto'] for r in group)} | "
                     f"{met} of {len(group)} |")
    return lines


def open_block(report: Path) -> list[str]:
    """The hand-written part of the existing report: what is open."""
    text = report.read_text() if report.exists() else ""
    if OPEN_START in text and OPEN_END in text:
        return [OPEN_START + text.split(OPEN_START, 1)[1].split(OPEN_END, 1)[0] + OPEN_END]
    return [OPEN_START, "", "(Write here what is open.)", "", OPEN_END]


def write(matrix_path: Path, unseen_paths: list[Path], failover: Path | None, report: Path) -> str:
    matrix_results = run.load(matrix_path)
    unseen_results = [r for path in unseen_paths for r in run.load(path)]
    matrix, unseen = rows(matrix_results), rows(unseen_results)
    sets = sets_of(matrix, unseen)
    plots = BENCH / "plots"
    plots.mkdir(exist_ok=True)
    for direction, cc in sorted({(r["direction"], r["cc"]) for r in matrix_results}):
        (plots / f"goodput-{direction}-{cc}.svg").write_text(run.svg_plot(matrix_results, direction, cc))
    matrix_name = set_name(matrix_path)
    sources = [matrix_path, *unseen_paths] + ([failover] if failover else [])
    command = ("python3 benches/schedulers/tools/standing.py --matrix " + display(matrix_path)
               + "".join(f" \\\n    --unseen {display(p)}" for p in unseen_paths[:1])
               + "".join(f" {display(p)}" for p in unseen_paths[1:])
               + (f" \\\n    --failover {display(failover)}" if failover else ""))
    lines = [
        "# Schedulers: one TCP flow over every scenario, against kernel MPTCP and the best single path",
        "",
        "<!-- Written by tools/standing.py; edit only the part between the open markers. -->",
        "",
        f"The standing of the build `{commit_of(matrix_results, matrix_name.rsplit('-', 1)[-1])}`: the "
        f"matrix of `{matrix_name}` (every scenario of config/scenarios/ without outages at the time, both "
        "directions, inner cubic and bbr, three passes with kernel MPTCP and the best single path in the "
        "same runs, 12 s flows) and one pass over unseen/. How it got here, experiment by experiment: "
        "[HISTORY.md](HISTORY.md). The raw runs: " + ", ".join(f"`{display(p)}`" for p in sources) + ".",
        "",
        "## How to reproduce",
        "",
        "```",
        "for pass in 1 2 3; do",
        "  sudo MPTUND_BIN=target/release/mptund python3 benches/schedulers/run.py --matrix --schedulers default \\",
        "      --repeats 1 --first-repeat $pass --duration 12 --out benches/schedulers/results-matrix-NEW --skip-existing",
        "done",
        "sudo python3 benches/schedulers/run.py --scenario benches/schedulers/unseen/<each>.toml ... --schedulers default \\",
        "    --direction both --cc cubic bbr --repeats 1 --duration 12 --out benches/schedulers/results-unseen-NEW",
        "sudo python3 benches/failover/run.py --modes mptund --repeats 3 --out DIR",
        "python3 benches/schedulers/tools/matrix_compare.py results-matrix-NEW archive/<the standing's matrix>",
        "# then archive the result folders (HISTORY.md, top) and regenerate this file:",
        command,
        "```",
        "",
        "Every result file names the binary that ran (`mptund_binary`: its `--version` and commit).",
        "",
    ]
    lines += target_mptcp(sets, matrix) + [""]
    lines += target_single(sets) + [""]
    lines += target_lossy(sets) + [""]
    lines += target_moonshot(sets) + [""]
    lines += target_failover(failover) + [""]
    lines += ["## What is open", ""] + open_block(report) + [""]
    lines += ["## The matrix, every cell", ""]
    lines += [f"![{d}, {c}](plots/goodput-{d}-{c}.svg)"
              for d, c in sorted({(r["direction"], r["cc"]) for r in matrix_results})]
    lines += ["", run.comparison_table(matrix_results)]
    text = "\n".join(lines)
    report.write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--matrix", type=Path, required=True, help="the standing's full matrix (dir or .tar.xz)")
    parser.add_argument("--unseen", type=Path, nargs="*", default=[], help="the newest pass over unseen/")
    parser.add_argument("--failover", type=Path, help="failover/run.py's results JSON of the same build")
    parser.add_argument("--out", type=Path, default=BENCH / "REPORT.md")
    args = parser.parse_args()
    resolve = lambda p: p if p.is_absolute() or p.exists() else BENCH / p
    write(resolve(args.matrix), [resolve(p) for p in args.unseen],
          resolve(args.failover) if args.failover else None, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
