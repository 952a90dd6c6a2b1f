#!/usr/bin/env bash
# One command from a fresh machine to a running demo: installs what is missing, builds
# mptund, and carries a TCP transfer each way through a three-path tunnel between two
# network namespaces (see testbed/demo.py). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release -p mptund
exec python3 testbed/demo.py "$@"
