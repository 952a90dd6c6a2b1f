#!/usr/bin/env python3
"""Writes a synthetic Mahimahi packet-delivery trace with a fading rate.

The rate follows a seeded random walk between --min-mbit and --max-mbit, with a
new value every --step-ms, so the same arguments always give the same file.
Each output line is the millisecond of one 1500-byte delivery opportunity
(Mahimahi's format: several equal lines = several opportunities in that ms;
the trace loops with its last timestamp as period).

    python3 testbed/make_mahimahi_trace.py --seconds 20 --min-mbit 5 --max-mbit 40 \
        > config/scenarios/traces/lte-fading.mahi
"""

from __future__ import annotations

import argparse
import random
import sys

OPPORTUNITY_BITS = 1500 * 8  # Mahimahi's MTU-sized delivery opportunity


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--min-mbit", type=float, default=5.0)
    parser.add_argument("--max-mbit", type=float, default=40.0)
    parser.add_argument("--step-ms", type=int, default=200, help="how often the rate changes")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rate = (args.min_mbit + args.max_mbit) / 2
    credit_bits = 0.0
    lines = []
    for ms in range(1, args.seconds * 1000 + 1):
        if ms % args.step_ms == 0:
            # Random walk with steps of up to 20 % of the range, reflected at the bounds.
            rate += rng.uniform(-0.2, 0.2) * (args.max_mbit - args.min_mbit)
            rate = min(args.max_mbit, max(args.min_mbit, rate))
        credit_bits += rate * 1e3  # bits per millisecond at `rate` Mbit/s
        while credit_bits >= OPPORTUNITY_BITS:
            credit_bits -= OPPORTUNITY_BITS
            lines.append(ms)
    if not lines or lines[-1] != args.seconds * 1000:
        lines.append(args.seconds * 1000)  # the last line sets the loop period
    sys.stdout.write("".join(f"{ms}\n" for ms in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
