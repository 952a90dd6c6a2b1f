#!/usr/bin/env python3
"""How much of each cell's gap to kernel MPTCP is the flow's start: per cell, mptund's
goodput over MPTCP's for the whole run, for the first two seconds (iperf3's first four
half-second intervals) and for the rest, and the start's cost as a share of MPTCP's
whole-run bytes. Runs of one cell are averaged across the result directories given.

    # archived result sets are unpacked first (tar -xJf archive/<name>.tar.xz -C /tmp):
    python3 benches/schedulers/tools/start_cost.py /tmp/results-matrix-21602b6-pass1 \\
        /tmp/results-matrix-21602b6-pass2
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

START_INTERVALS = 4


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--mode", default="mptund-default", help="the mode set against mptcp")
    args = parser.parse_args()
    runs: dict[tuple[str, ...], list[list[float]]] = collections.defaultdict(list)
    for directory in args.dirs:
        for path in sorted(directory.glob("*.json")):
            parts = path.stem.split("__")
            if len(parts) < 5:
                continue
            intervals = [i["mbit"] for i in json.loads(path.read_text()).get("intervals") or []]
            if len(intervals) > START_INTERVALS:
                runs[tuple(parts[:4])].append(intervals)
    print(f"{'cell':44} {'whole':>7} {'first 2 s':>9} {'rest':>7} {'start cost':>10}")
    for cell in sorted({key[:3] for key in runs}):
        ours, theirs = runs.get(cell + (args.mode,)), runs.get(cell + ("mptcp",))
        if not ours or not theirs:
            continue
        whole = mean([mean(r) for r in ours]) / mean([mean(r) for r in theirs])
        start = mean([mean(r[:START_INTERVALS]) for r in ours]) / mean([mean(r[:START_INTERVALS]) for r in theirs])
        rest = mean([mean(r[START_INTERVALS:]) for r in ours]) / mean([mean(r[START_INTERVALS:]) for r in theirs])
        cost = (mean([sum(r[:START_INTERVALS]) for r in theirs]) - mean([sum(r[:START_INTERVALS]) for r in ours])) \
            / mean([sum(r) for r in theirs])
        print(f"{'/'.join(cell):44} {whole:7.1%} {start:9.1%} {rest:7.1%} {cost:10.1%}")


if __name__ == "__main__":
    main()
