#!/usr/bin/env python3
"""The long fuzzing run's summary: one JSON file per target, read from libFuzzer's
log, and fuzz/long-run/SUMMARY.md, a table generated from every such file.

    scripts/fuzz_summary.py record TARGET LOG CORPUS_DIR SECONDS STATUS RUNS
    scripts/fuzz_summary.py table

`record` writes fuzz/long-run/TARGET.json: the commit the binaries were built from
(and whether the tree differed from it), the executions, libFuzzer's coverage
(`cov:`, edges) and features (`ft:`) and corpus (`corp:`) from the log's last stats
line, the corpus directory at the end, the run time and the exit status.
scripts/fuzz-long.sh calls both after each target.
"""

import datetime
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG_RUN = os.path.join(ROOT, "fuzz", "long-run")

# libFuzzer's stats lines: "#4096\tpulse  cov: 123 ft: 456 corp: 7/890b lim: ... exec/s: 10 rss: 50Mb"
STATS = re.compile(
    r"^#(?P<execs>\d+)\s+(?P<event>\w+)\s+cov: (?P<cov>\d+) ft: (?P<ft>\d+)"
    r"(?: corp: (?P<units>\d+)/(?P<size>\d+)(?P<unit>b|Kb|Mb))?"
)
DONE = re.compile(r"^Done (?P<runs>\d+) runs in (?P<seconds>\d+) second")
STAT = re.compile(r"^stat::(?P<name>\w+):\s+(?P<value>\d+)")
SIZE_UNITS = {"b": 1, "Kb": 1 << 10, "Mb": 1 << 20}
# What the fuzz binaries are built from.
CODE_UNDER_TEST = ("crates", "fuzz/src", "fuzz/fuzz_targets", "fuzz/Cargo.toml", "fuzz/Cargo.lock",
                   "Cargo.lock")


def git(*args):
    return subprocess.run(
        ["git", "-C", ROOT, *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def parse_log(path):
    """The last stats line, the Done line and the final stat:: lines of a log."""
    found = {}
    with open(path, errors="replace") as log:
        for line in log:
            stats = STATS.match(line)
            if stats:
                found["last_stats"] = stats
                continue
            done = DONE.match(line)
            if done:
                found["done"] = done
                continue
            stat = STAT.match(line)
            if stat:
                found[stat["name"]] = int(stat["value"])
    return found


def directory_size(path):
    files = [os.path.join(path, name) for name in os.listdir(path)] if os.path.isdir(path) else []
    files = [name for name in files if os.path.isfile(name)]
    return len(files), sum(os.path.getsize(name) for name in files)


def record(target, log_path, corpus_dir, seconds, status, runs):
    found = parse_log(log_path)
    stats = found.get("last_stats")
    done = found.get("done")
    executions = found.get("number_of_executed_units")
    if executions is None and done:
        executions = int(done["runs"])
    if executions is None and stats:
        executions = int(stats["execs"])
    corpus_units = corpus_bytes = None
    if stats and stats["units"]:
        corpus_units = int(stats["units"])
        corpus_bytes = int(stats["size"]) * SIZE_UNITS[stats["unit"]]
    dir_files, dir_bytes = directory_size(corpus_dir)
    # The build's commit, as scripts/fuzz-long.sh saw it before building; changes to
    # the code under test since that commit make the hash a lie: say so.
    commit = os.environ.get("FUZZ_BUILD_COMMIT") or git("rev-parse", "HEAD")
    dirty = os.environ.get("FUZZ_BUILD_DIRTY")
    if dirty is None:
        dirty = git("status", "--porcelain", "--", *CODE_UNDER_TEST)
    summary = {
        "target": target,
        "commit": commit,
        "tree_differs_from_commit": bool(dirty),
        "finished_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "runs_requested": int(runs),
        "executions": executions,
        "exec_per_s": found.get("average_exec_per_sec"),
        "cov": int(stats["cov"]) if stats else None,
        "ft": int(stats["ft"]) if stats else None,
        "final_event": stats["event"] if stats else None,
        "corpus_units": corpus_units,
        "corpus_bytes": corpus_bytes,
        "corpus_dir_files": dir_files,
        "corpus_dir_bytes": dir_bytes,
        "new_units_added": found.get("new_units_added"),
        "peak_rss_mb": found.get("peak_rss_mb"),
        "run_time_s": int(seconds),
        "exit_status": int(status),
    }
    os.makedirs(LONG_RUN, exist_ok=True)
    with open(os.path.join(LONG_RUN, f"{target}.json"), "w") as out:
        json.dump(summary, out, indent=2)
        out.write("\n")


def number(value):
    return "-" if value is None else f"{value:,}"


def size(value):
    if value is None:
        return "-"
    if value >= 1 << 20:
        return f"{value / (1 << 20):.1f} MB"
    if value >= 1 << 10:
        return f"{value / (1 << 10):.0f} KB"
    return f"{value} B"


def table():
    summaries = []
    for name in sorted(os.listdir(LONG_RUN)) if os.path.isdir(LONG_RUN) else []:
        if name.endswith(".json"):
            with open(os.path.join(LONG_RUN, name)) as summary:
                summaries.append(json.load(summary))
    lines = [
        "# Long fuzzing run",
        "",
        "Generated by `scripts/fuzz_summary.py table` from the `<target>.json` files beside",
        "it, which `scripts/fuzz-long.sh` writes after each target (libFuzzer through",
        "cargo-fuzz, nightly; release build with debug assertions and overflow checks, no",
        "AddressSanitizer; `nice 19`). `cov` is libFuzzer's edge coverage and `ft` its",
        "features, from the last stats line of the target's log; the corpus is libFuzzer's",
        "(inputs / bytes) at that line. The logs and grown corpora stay local",
        "(`fuzz/long-run/<target>.log`, `fuzz/long-run/corpus/`).",
        "",
    ]
    if not summaries:
        lines.append("No run of `scripts/fuzz-long.sh` on this code yet.")
    else:
        lines += [
            "| target | commit | executions | exec/s | corpus (inputs / bytes) | cov | ft | run time | result |",
            "|---|---|---:|---:|---|---:|---:|---:|---|",
        ]
        for s in summaries:
            commit = s["commit"][:8] + (" (tree differed)" if s["tree_differs_from_commit"] else "")
            corpus = f"{number(s['corpus_units'])} / {size(s['corpus_bytes'])}"
            if s["exit_status"] == 0:
                result = "passed"
            else:
                result = f"FAILED (exit {s['exit_status']}; see fuzz/artifacts/{s['target']}/)"
            lines.append(
                f"| {s['target']} | `{commit}` | {number(s['executions'])} | {number(s['exec_per_s'])} "
                f"| {corpus} | {number(s['cov'])} | {number(s['ft'])} | {number(s['run_time_s'])} s "
                f"| {result} |"
            )
        lines += ["", f"Finished (UTC): {', '.join(sorted({s['finished_utc'][:10] for s in summaries}))}."]
    earlier = sorted(name for name in os.listdir(LONG_RUN) if re.match(r"\d{4}-\d\d-\d\d\.md$", name))
    if earlier:
        lines += ["", "Earlier runs: " + ", ".join(f"[{name[:-3]}]({name})" for name in earlier) + "."]
    with open(os.path.join(LONG_RUN, "SUMMARY.md"), "w") as out:
        out.write("\n".join(lines) + "\n")


def main(argv):
    if len(argv) == 8 and argv[1] == "record":
        record(*argv[2:])
    elif len(argv) == 2 and argv[1] == "table":
        table()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
