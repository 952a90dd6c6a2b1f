#!/usr/bin/env bash
# Every test: unit and property tests of all crates, a smoke pass of the fuzz
# targets, then the end-to-end tests in network namespaces (root needed; without
# root they are skipped and say so).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace --bins
# tests/e2e/test_flood.py replays inits the flood_inits example writes.
cargo build --release -p mptund --example flood_inits
# The datagram modules deny unwrap, expect and unchecked indexing outside tests.
cargo clippy -p mptund --lib -- -D warnings
cargo test --workspace
cargo test -p mptund --features sim --test simulated_exchange
# Every fuzz target for a fixed number of executions from its seeds (nightly).
scripts/fuzz-smoke.sh
# aarch64 (most vehicle routers) under emulation, with the qemu runner from
# .cargo/config.toml: the in-memory session tests, and the binary that
# tests/e2e/test_emulated.py runs.
cargo build -p mptund --bin mptund --target aarch64-unknown-linux-musl
cargo test -p mptund --lib --target aarch64-unknown-linux-musl session::
python3 -m pytest -q tests/e2e $( [ -d testbed/tests ] && echo testbed/tests )
