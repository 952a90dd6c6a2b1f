#!/usr/bin/env python3
"""Sets a matrix with references (run.py --matrix, results-matrix-<commit>/) beside an older
one, cell by cell, medians of the repeats, and writes two files into the newer directory:

- against-<older>.txt: mptund's median (min-max), MPTCP's and the best single path's, mptund
  over each, the older matrix's mptund and MPTCP, and mptund's new median over its old one;
- first-3s-and-rest.txt: mptund over MPTCP in the flow's first 3 s and after (run.py's
  STEADY_FROM_S), by the means of iperf3's intervals.

Then it prints the summary the report's table takes: cells at 95 % of MPTCP (whole run and
from 3 s), the geometric mean and median of mptund over MPTCP, cells below the best single
path, lossy cells above MPTCP, and the geometric mean of mptund's new medians over its old.
Ratios are compared unrounded.

    python3 benches/schedulers/tools/matrix_compare.py results-matrix-NEW results-matrix-OLD
    python3 benches/schedulers/tools/matrix_compare.py results-matrix-NEW archive/results-matrix-3b73080.tar.xz
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import run  # noqa: E402  (run.py: the matrix's cells, medians and targets)

MPTUND = "mptund:default"


def part_mbit(cell, first: bool) -> float:
    """Median over the runs of the mean interval rate before (first) or from STEADY_FROM_S."""
    means = []
    for result in cell.runs:
        if "error" in result:
            continue
        values = [i["mbit"] for i in result.get("intervals", [])
                  if (i["start_s"] < run.STEADY_FROM_S) == first]
        if values:
            means.append(sum(values) / len(values))
    return statistics.median(means)


def geometric_mean(ratios: list[float]) -> float:
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    new_dir, old_dir = Path(sys.argv[1]), Path(sys.argv[2])
    new_cells, old_cells = run.cells(run.load(new_dir)), run.cells(run.load(old_dir))
    against, split = [], []
    of_mptcp, of_mptcp_steady, new_over_old = [], [], []
    below_single, lossy, lossy_above = 0, 0, 0
    for key, modes in new_cells.items():
        mptund, mptcp, single = modes.get(MPTUND), modes.get("mptcp"), modes.get("single")
        if not (mptund and mptcp and single):
            continue
        name = "/".join(key)
        m, p, s = mptund.median(), mptcp.median(), single.median()
        runs = mptund.goodputs()
        of_mptcp.append(m / p)
        below_single += m < s
        if mptund.runs[0]["random_loss"]:
            lossy += 1
            lossy_above += m > p
        line = (f"{name:<42} n={len(runs)} mptund {m:6.1f} ({min(runs):.1f}-{max(runs):.1f}) "
                f"mptcp {p:6.1f} single {s:6.1f} {m / p:7.1%} of MPTCP {m / s:7.1%} of single")
        old = old_cells.get(key, {})
        if old.get(MPTUND) and old.get("mptcp"):
            old_m, old_p = old[MPTUND].median(), old["mptcp"].median()
            new_over_old.append(m / old_m)
            line += f" | old {old_m:6.1f} / {old_p:6.1f} = {old_m / old_p:6.1%}  mptund new/old {m / old_m:6.1%}"
        against.append(line)
        first = part_mbit(mptund, True) / part_mbit(mptcp, True)
        rest = part_mbit(mptund, False) / part_mbit(mptcp, False)
        of_mptcp_steady.append(rest)
        split.append(f"{name:<42} first3 {first:7.1%} of MPTCP | rest {rest:7.1%} of MPTCP")
    old_name = old_dir.name.removesuffix(".tar.xz").removeprefix("results-matrix-")
    (new_dir / f"against-{old_name}.txt").write_text("\n".join(against) + "\n")
    (new_dir / "first-3s-and-rest.txt").write_text("\n".join(split) + "\n")
    target = run.OF_MPTCP_TARGET
    print(f"cells: {len(of_mptcp)}")
    print(f"at {target:.0%} of MPTCP or more: {sum(r >= target for r in of_mptcp)}; "
          f"from {run.STEADY_FROM_S:.0f} s on: {sum(r >= target for r in of_mptcp_steady)}")
    print(f"mptund / MPTCP: geometric mean {geometric_mean(of_mptcp):.1%}, median {statistics.median(of_mptcp):.1%}")
    print(f"below the best single path: {below_single}; lossy cells above MPTCP: {lossy_above} of {lossy}")
    if new_over_old:
        print(f"mptund new / old ({old_name}), geometric mean over {len(new_over_old)} cells: "
              f"{geometric_mean(new_over_old) - 1:+.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
