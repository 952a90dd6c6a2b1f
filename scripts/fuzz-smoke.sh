#!/usr/bin/env bash
# The CI smoke pass over the fuzz targets: each runs a fixed number of executions
# from its committed seeds (fuzz/corpus/<target>, left unchanged), about four minutes
# in all on a 2-core VM once built. A crash fails the script; its input is in
# fuzz/artifacts/<target>/. scripts/fuzz-long.sh is the long run.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v rustup >/dev/null || { echo "rustup is missing: scripts/setup.sh installs the fuzz tools" >&2; exit 1; }
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
cargo fuzz --version >/dev/null 2>&1 || cargo +nightly install --locked cargo-fuzz
# Same build as scripts/fuzz-long.sh: release with debug assertions and overflow
# checks, no AddressSanitizer (safe Rust; a panic is the failure looked for).
(cd fuzz && nice -n 10 cargo +nightly fuzz build -O -a -s none)
bin_dir=${CARGO_TARGET_DIR:-fuzz/target}/x86_64-unknown-linux-gnu/release
# Executions per target: the parsers run at tens of thousands a second, the
# whole-core targets at hundreds to thousands (the fuzzing build's cheap
# Diffie-Hellman), two_sessions at about a hundred (each input runs twice).
declare -A runs=(
    [wire_datagram]=1000000 [wire_frames]=1000000 [inner_packet]=1000000
    [gro_split]=1000000 [control_request]=1000000 [config_file]=50000
    [server_core]=40000 [client_core]=40000 [two_sessions]=5000
)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
started=$SECONDS
for target in wire_datagram wire_frames inner_packet gro_split control_request config_file \
              server_core client_core two_sessions; do
    mkdir -p "$scratch/$target" "fuzz/artifacts/$target"
    begin=$SECONDS
    # TMPDIR: config_file writes its key files under the temporary directory.
    if ! TMPDIR="$scratch" nice -n 10 "$bin_dir/$target" -runs="${runs[$target]}" -seed=1 \
            -artifact_prefix="fuzz/artifacts/$target/" \
            "$scratch/$target" "fuzz/corpus/$target" > "$scratch/$target.log" 2>&1; then
        tail -n 40 "$scratch/$target.log" >&2
        echo "fuzz-smoke: $target FAILED; the input is in fuzz/artifacts/$target/" >&2
        exit 1
    fi
    echo "fuzz-smoke: $target: ${runs[$target]} runs in $((SECONDS - begin)) s"
done
echo "fuzz-smoke: every target passed in $((SECONDS - started)) s"
