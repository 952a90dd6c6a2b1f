#!/usr/bin/env bash
# The long fuzzing run: every target for 10,000,000 executions, one process at a
# time and at the lowest priority (the machine is shared), each starting from its
# committed seeds. Logs go to fuzz/long-run/<target>.log; the corpus grown on the
# way to fuzz/long-run/corpus/<target> (not committed), crashes to
# fuzz/artifacts/<target>/. After each target, fuzz/long-run/<target>.json records
# the commit, executions, coverage and corpus (scripts/fuzz_summary.py) and
# fuzz/long-run/SUMMARY.md is generated again from every such file: commit both.
#
#   scripts/fuzz-long.sh [target ...]        # default: every target
#   FUZZ_DEADLINE=23:00 scripts/fuzz-long.sh # stop in time: the targets still to
#                                            # run share what is left until then
#   FUZZ_RUNS_two_sessions=2000000 scripts/fuzz-long.sh
#                                            # another count for one target (each
#                                            # two_sessions input runs the cores twice:
#                                            # about a hundred a second on one core)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${FUZZ_RUNS:-10000000}
# Release with debug assertions and overflow checks. No AddressSanitizer: the code
# under test is safe Rust (a panic is the failure looked for), and it would halve the
# rate of the whole-core targets. scripts/fuzz-smoke.sh builds the same way.
FUZZ_BUILD_FLAGS="-O -a -s none"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    # The fast parser targets first; the slow whole-core ones share what is left.
    targets=(wire_datagram wire_frames inner_packet gro_split control_request config_file
             server_core client_core two_sessions)
fi
deadline=""
[ -n "${FUZZ_DEADLINE:-}" ] && deadline=$(date -d "$FUZZ_DEADLINE" +%s)

# The summaries name the commit the binaries are built from, and whether the code
# under test differed from it.
FUZZ_BUILD_COMMIT=$(git rev-parse HEAD)
FUZZ_BUILD_DIRTY=$(git status --porcelain -- crates fuzz/src fuzz/fuzz_targets fuzz/Cargo.toml \
    fuzz/Cargo.lock Cargo.lock)
export FUZZ_BUILD_COMMIT FUZZ_BUILD_DIRTY
(cd fuzz && nice -n 19 cargo +nightly fuzz build $FUZZ_BUILD_FLAGS)
bin_dir=${CARGO_TARGET_DIR:-fuzz/target}/x86_64-unknown-linux-gnu/release
mkdir -p fuzz/long-run
# config_file writes its key files under the temporary directory: keep them in one
# removed on exit.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
left=${#targets[@]}
for target in "${targets[@]}"; do
    budget=()
    if [ -n "$deadline" ]; then
        seconds=$(( (deadline - $(date +%s)) / left ))
        [ "$seconds" -lt 10 ] && seconds=10
        budget=(-max_total_time="$seconds")
    fi
    runs_override="FUZZ_RUNS_$target"
    runs=${!runs_override:-$RUNS}
    mkdir -p "fuzz/long-run/corpus/$target" "fuzz/artifacts/$target"
    # The whole-core targets decode a sequence of actions: inputs may be long from
    # the start, or most executions would hold only one or two actions.
    shape=()
    case "$target" in *_core|two_sessions) shape=(-len_control=0 -max_len=2048) ;; esac
    echo "== $target: $runs runs ${budget[*]:-} (started $(date -u +%H:%M:%S))"
    status=0
    begin=$SECONDS
    TMPDIR="$scratch" nice -n 19 "$bin_dir/$target" -runs="$runs" "${budget[@]}" "${shape[@]}" -print_final_stats=1 \
        -artifact_prefix="fuzz/artifacts/$target/" \
        "fuzz/long-run/corpus/$target" "fuzz/corpus/$target" \
        > "fuzz/long-run/$target.log" 2>&1 || status=$?
    grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec)' \
        "fuzz/long-run/$target.log" || true
    [ "$status" -ne 0 ] && echo "   $target FAILED (exit $status): see fuzz/long-run/$target.log"
    python3 scripts/fuzz_summary.py record "$target" "fuzz/long-run/$target.log" \
        "fuzz/long-run/corpus/$target" "$((SECONDS - begin))" "$status" "$runs"
    python3 scripts/fuzz_summary.py table
    left=$(( left - 1 ))
done
echo "fuzz-long: summaries in fuzz/long-run/*.json and fuzz/long-run/SUMMARY.md"
