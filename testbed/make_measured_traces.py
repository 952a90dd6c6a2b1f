#!/usr/bin/env python3
"""Writes Mahimahi traces derived from published measurement figures.

These are not raw measurements: each trace is synthetic, a seeded rate (and
delay) process whose parameters are read from a named published figure or
table. Which parameters come from the publication and which are our own
assumptions is written next to each value below and in ns3-tap-bridge/README.md
("Trace-driven link"). The same arguments always give the same files.

    python3 testbed/make_measured_traces.py --out ns3-tap-bridge/traces          # all profiles
    python3 testbed/make_measured_traces.py --out /tmp/t --profile starlink
    python3 testbed/make_measured_traces.py --out ns3-tap-bridge/traces --check  # committed files current?

Each profile writes <name>-down.mahi and <name>-up.mahi (one line per 1500-byte
delivery opportunity, in ms; the trace loops with its last timestamp as
period; the format of testbed/make_mahimahi_trace.py and linkem) and, where
the publication gives delay over time, <name>-delay.csv (`time_ms,delay_ms`,
one-way, each row holding until the next, looping with the delivery trace;
read by ns-3's trace link, --traceDownDelays/--traceUpDelays).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

OPPORTUNITY_BITS = 1500 * 8  # Mahimahi's MTU-sized delivery opportunity
# The standard normal's 90th percentile: turns a published p10/p50/p90 into log-normal spreads.
Z90 = NormalDist().inv_cdf(0.9)


@dataclass(frozen=True)
class SplitLogNormal:
    """A rate (or delay) distribution pinned to three published percentiles: log-normal
    below the median with the spread that puts p10 where published, and above it
    with the spread for p90 (the published ones are skewed, so one log-normal
    cannot meet both)."""

    p10: float
    p50: float
    p90: float

    def quantile(self, u: float) -> float:
        z = NormalDist().inv_cdf(u)
        spread = math.log(self.p50 / self.p10) / Z90 if z < 0 else math.log(self.p90 / self.p50) / Z90
        return self.p50 * math.exp(z * spread)


def opportunities(rate_mbit_per_ms: list[float]) -> list[int]:
    """Mahimahi timestamps for a rate given per millisecond (Mbit/s of ms 1, 2, ...):
    one opportunity each time 1500 bytes' worth of credit has accrued. The last
    line is the duration (the loop period), added if the credit did not land there."""
    credit_bits, lines = 0.0, []
    for ms, rate in enumerate(rate_mbit_per_ms, start=1):
        credit_bits += rate * 1e3  # bits per millisecond at `rate` Mbit/s
        while credit_bits >= OPPORTUNITY_BITS:
            credit_bits -= OPPORTUNITY_BITS
            lines.append(ms)
    if not lines or lines[-1] != len(rate_mbit_per_ms):
        lines.append(len(rate_mbit_per_ms))
    return lines


def fading(rng: random.Random, level_mbit: list[float], step_ms: int, sigma: float, correlation_ms: float) -> list[float]:
    """A rate per ms: `level_mbit` (per ms) times a log-normal AR(1) factor that changes
    every `step_ms`, with log-spread `sigma` and correlation time `correlation_ms`,
    normalised to median 1 so the level stays the published median."""
    keep = math.exp(-step_ms / correlation_ms)
    state, rates = 0.0, []
    for ms, level in enumerate(level_mbit):
        if ms % step_ms == 0:
            state = keep * state + math.sqrt(1 - keep * keep) * rng.gauss(0, 1)
        rates.append(level * math.exp(sigma * state))
    return rates


def write_trace(path: Path, lines: list[int]) -> None:
    path.write_text("".join(f"{ms}\n" for ms in lines))


# Profiles --------------------------------------------------------------------
def five_g_midband_drive(out: Path) -> list[Path]:
    """5G mid-band (T-Mobile, n41 2.5 GHz) while driving.

    Published (Ookla, Speedtest Connectivity Report, United States, H1 2024,
    Speedtest Intelligence data January-June 2024, as reported by RCR Wireless
    News, 17 July 2024, "T-Mobile US first in 5G mobile, AT&T in home internet:
    Ookla"): T-Mobile's median 5G download 265.80 Mbit/s, median 5G upload
    14.56 Mbit/s, 5G latency 47 ms (multi-server, round trip).
    Our assumptions (no published figure): the rate fades log-normally around
    that median with log-spread 0.5 and a 1 s correlation time, changing every
    100 ms (a car passing cells and obstacles); the one-way delay is half the
    published latency (use --traceDelay=24ms; no delay series)."""
    rng = random.Random(5)
    seconds = 6  # short: a 265 Mbit/s trace has ~22 000 lines per second
    down = fading(rng, [265.80] * (seconds * 1000), step_ms=100, sigma=0.5, correlation_ms=1000)
    up = fading(rng, [14.56] * (seconds * 1000), step_ms=100, sigma=0.5, correlation_ms=1000)
    paths = [out / "5g-midband-drive-down.mahi", out / "5g-midband-drive-up.mahi"]
    write_trace(paths[0], opportunities(down))
    write_trace(paths[1], opportunities(up))
    return paths


# Starlink reassigns a user terminal's satellite in 15-second slots (Geoff Huston,
# "Measuring Starlink Protocol Performance", APNIC, presented at NANOG 92, 2024:
# "A satellite is assigned to a user terminal in 15 second time slots").
STARLINK_SLOT_MS = 15_000


def starlink(out: Path) -> list[Path]:
    """Starlink, residential dish, two 15 s satellite slots.

    Published (Ookla, "Above Maine, Starlink Twinkles", 18 December 2024, table
    of Starlink Speedtest results in Maine, 1 Oct - 15 Dec 2024): download
    p10 22.81, median 116.77, p90 250.96 Mbit/s; upload p10 6.79, median
    18.17, p90 27.17 Mbit/s; multi-server latency 72 ms (10th percentile,
    slower), 47 ms (median), 37 ms (90th percentile, faster). The 15 s slot:
    STARLINK_SLOT_MS above.
    Our assumptions: each slot's level is a stratified draw from the published
    distribution (slot i of n at quantile (i + 0.5) / n, so two slots sit at
    the 25th and 75th percentile; Ookla's spread is across users and tests,
    used here as the spread across slots); the slower slot has the longer
    latency (same quantile from the slow end); the one-way delay is half the
    round trip; within a slot the rate fades log-normally with log-spread 0.15,
    0.5 s correlation, changing every 100 ms. Not modelled: the loss and
    latency spike at a slot change, obstructions."""
    rng = random.Random(7)
    slots = 2
    down_mbit = SplitLogNormal(22.81, 116.77, 250.96)
    up_mbit = SplitLogNormal(6.79, 18.17, 27.17)
    # Latency percentiles from the fast end: p10 (fast) 37, p50 47, p90 (slow) 72 ms.
    latency_ms = SplitLogNormal(37, 47, 72)
    order = list(range(slots))
    rng.shuffle(order)
    quantiles = [(i + 0.5) / slots for i in order]
    down_level, up_level, delay_rows = [], [], ["time_ms,delay_ms"]
    for slot, u in enumerate(quantiles):
        down_level += [down_mbit.quantile(u)] * STARLINK_SLOT_MS
        up_level += [up_mbit.quantile(u)] * STARLINK_SLOT_MS
        one_way = latency_ms.quantile(1 - u) / 2
        delay_rows.append(f"{slot * STARLINK_SLOT_MS},{one_way:.1f}")
    down = fading(rng, down_level, step_ms=100, sigma=0.15, correlation_ms=500)
    up = fading(rng, up_level, step_ms=100, sigma=0.15, correlation_ms=500)
    paths = [out / "starlink-down.mahi", out / "starlink-up.mahi", out / "starlink-delay.csv"]
    write_trace(paths[0], opportunities(down))
    write_trace(paths[1], opportunities(up))
    paths[2].write_text("# one-way delay per 15 s Starlink slot (testbed/make_measured_traces.py)\n"
                        + "\n".join(delay_rows) + "\n")
    return paths


PROFILES = {"5g-midband-drive": five_g_midband_drive, "starlink": starlink}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="directory for the trace files")
    parser.add_argument("--profile", choices=sorted(PROFILES), action="append",
                        help="which profile (repeatable; default: all)")
    parser.add_argument("--check", action="store_true",
                        help="do not write: exit 1 if the files in --out differ from what the profiles give")
    args = parser.parse_args()
    names = args.profile or sorted(PROFILES)
    if args.check:
        import tempfile
        with tempfile.TemporaryDirectory() as scratch:
            stale = []
            for name in names:
                for fresh in PROFILES[name](Path(scratch)):
                    committed = args.out / fresh.name
                    if not committed.is_file() or committed.read_bytes() != fresh.read_bytes():
                        stale.append(str(committed))
        if stale:
            print("out of date (rerun without --check): " + ", ".join(stale), file=sys.stderr)
            return 1
        print(f"{len(names)} profile(s) current in {args.out}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        for path in PROFILES[name](args.out):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
