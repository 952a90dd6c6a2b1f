#!/usr/bin/env bash
# Every test: unit and property tests of all crates, then the end-to-end tests in
# network namespaces (root needed; without root they are skipped and say so).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace --bins
cargo test --workspace
python3 -m pytest -q tests/e2e $( [ -d testbed/tests ] && echo testbed/tests )
