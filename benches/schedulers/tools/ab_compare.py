#!/usr/bin/env python3
"""Compares the two builds of an A/B run of run.py (`--baseline-bin`): per cell, the median
goodput of mptund:default ("new") against mptund-baseline:default ("old"), their runs, and
the change; then the geometric mean of new / old over the cells. With a second directory
(a matrix with references, e.g. results-matrix-<commit>/) it adds each build's share of
that directory's median MPTCP goodput and counts the cells at 95 % or more.

    python3 benches/schedulers/tools/ab_compare.py AB_DIR [REFERENCE_DIR]
"""

import collections
import glob
import json
import math
import statistics
import sys

BUILDS = {"mptund:default": "new", "mptund-baseline:default": "old"}


def goodputs(directory: str) -> dict:
    """(scenario, direction, cc) -> mode -> goodputs of every result file below `directory`."""
    cells = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in glob.glob(f"{directory}/**/*.json", recursive=True):
        with open(path) as file:
            result = json.load(file)
        if "goodput_mbit" not in result:
            continue
        mode = BUILDS.get(result["mode"], result["mode"].split(":")[0])
        cells[(result["scenario"], result["direction"], result["cc"])][mode].append(result["goodput_mbit"])
    return cells


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    cells = goodputs(sys.argv[1])
    references = goodputs(sys.argv[2]) if len(sys.argv) == 3 else {}
    ratios = []
    passing = {"new": 0, "old": 0}
    referenced = 0
    for cell in sorted(cells):
        runs = cells[cell]
        if "new" not in runs or "old" not in runs:
            continue
        new, old = statistics.median(runs["new"]), statistics.median(runs["old"])
        ratios.append(new / old)
        listed = {build: " ".join(f"{value:.1f}" for value in sorted(runs[build])) for build in ("new", "old")}
        line = (f"{'/'.join(cell):40s} new {new:6.2f} ({listed['new']}) old {old:6.2f} ({listed['old']}) "
                f"{100 * (new / old - 1):+5.1f}%")
        mptcp = references.get(cell, {}).get("mptcp")
        if mptcp:
            reference = statistics.median(mptcp)
            referenced += 1
            line += f" | MPTCP {reference:5.1f}: new {100 * new / reference:5.1f}% old {100 * old / reference:5.1f}%"
            passing["new"] += new / reference >= 0.95
            passing["old"] += old / reference >= 0.95
        print(line)
    if not ratios:
        print("no cell has both builds")
        return 1
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"cells {len(ratios)} geomean new/old {100 * (geomean - 1):+.2f}% "
          f"better>1% {sum(r > 1.01 for r in ratios)} worse>1% {sum(r < 0.99 for r in ratios)}")
    if referenced:
        print(f"vs ref MPTCP medians ({referenced} cells): >=95% new {passing['new']} old {passing['old']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
