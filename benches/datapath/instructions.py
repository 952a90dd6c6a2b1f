#!/usr/bin/env python3
"""Instructions per inner packet of the core benchmarks, for two builds of the criterion
data path benchmark (`cargo bench -p mptund --bench datapath --no-run` prints its path).

Criterion's wall clock spreads widely on a shared VM, and this one has no hardware
counters, so this counts instructions under callgrind instead: each benchmark runs for
two profiling lengths, and the slope of instructions over packets carried
(`MPTUND_BENCH_PACKETS`) drops the set-up out.

    python3 benches/datapath/instructions.py BEFORE_BENCH_BINARY AFTER_BENCH_BINARY

Needs valgrind (`apt-get install valgrind`; not part of scripts/setup.sh).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

BENCHES = [
    "core/client_tun_to_server_tun_per_packet/1_paths",
    "core/client_tun_to_server_tun_per_packet/3_paths",
    "core_batch/client_tun_to_server_tun_batch_of_44/1_paths",
    "core_batch/client_tun_to_server_tun_batch_of_44/3_paths",
    "core_batch/client_tun_to_server_tun_batch_of_44/8_paths",
]
# Profiling lengths in seconds (under callgrind, about fifty times slower than native).
SHORT_S, LONG_S = 2, 8


def measure(binary: str, bench: str, seconds: int) -> tuple[int, int]:
    """(instructions, packets carried) of one profiling run."""
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", binary, "--bench",
         f"^{bench}$", "--profile-time", str(seconds)],
        capture_output=True, text=True, env=dict(os.environ, MPTUND_BENCH_PACKETS="1"), check=True)
    packets = int(re.search(r"packets carried: (\d+)", run.stderr).group(1))
    # Criterion may start helper processes; the benchmark's own count is the largest.
    instructions = max(int(n) for n in re.findall(r"Collected : (\d+)", run.stderr))
    return instructions, packets


def per_packet(binary: str, bench: str) -> float:
    short, long = measure(binary, bench, SHORT_S), measure(binary, bench, LONG_S)
    return (long[0] - short[0]) / (long[1] - short[1])


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    before, after = sys.argv[1:]
    for bench in BENCHES:
        a, b = per_packet(before, bench), per_packet(after, bench)
        print(f"{bench}: {a:,.0f} -> {b:,.0f} instructions per packet ({b / a:.3f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
