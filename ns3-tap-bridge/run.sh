#!/usr/bin/env bash
# One command for the hybrid emulation: installs ns-3 and what else is missing,
# builds mptund and the ns-3 scenario program, then runs ns3_hybrid.py: namespaces,
# ns-3 with LTE + Wi-Fi + point-to-point uplinks, both daemons, a checked TCP
# transfer, per-path throughput from mptund's and ns-3's counters. Cleans up
# after itself. Needs root. Options: see `ns3_hybrid.py --help`. Exits 4 when ns-3
# fell behind real time (unless --allow-lag), 3 when the transfer was not
# byte-exact; every run writes a results file (README.md, "The verdict").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
nice -n 10 cargo build --release -p mptund
exec python3 ns3-tap-bridge/ns3_hybrid.py "$@"
