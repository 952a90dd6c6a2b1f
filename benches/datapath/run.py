#!/usr/bin/env python3
"""Data path benchmark: one cubic TCP flow over unshaped veths, mptund against the raw
path and the newest wireguard-go, in the same run.

Two namespaces joined by veth pairs without any shaping. Per round, in turn (the order
rotates each round, so slow drift of the machine hits every mode alike):

  raw           iperf3 over the bare veth
  wireguard-go  iperf3 through wireguard-go (built here with `go install
                golang.zx2c4.com/wireguard@latest`, its TUN and UDP offloads on)
  mptund-1      iperf3 through mptund with one path (its defaults otherwise)
  mptund-3      iperf3 through mptund striping over three veth paths
  baseline-1, baseline-3   the same with another mptund binary (--baseline-bin, e.g.
                the previous commit's build)

Measured per run: the receiver's goodput, and the CPU time of each tunnel process
(user + system, from /proc) over the flow, in cores; CPU per Gbit/s is the sum of
both tunnel ends divided by the goodput.

    sudo python3 benches/datapath/run.py                         # 3 rounds, 10 s flows
    sudo python3 benches/datapath/run.py --rounds 5 --duration 15 --modes wireguard-go mptund-1
    sudo python3 benches/datapath/run.py --baseline-bin /tmp/mptund-previous   # + baseline-1/3
    python3 benches/datapath/run.py --report                    # tables from results.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
sys.path.insert(0, str(REPO_ROOT / "testbed"))
from mptund import SERVER_TUN_ADDR, DaemonPair, binary_record, direct_topology, mptund_binary  # noqa: E402
from netns import Testbed  # noqa: E402

MODES = ["raw", "wireguard-go", "mptund-1", "mptund-3"]
BASELINE_MODES = ["baseline-1", "baseline-3"]
WIREGUARD_MODULE = "golang.zx2c4.com/wireguard@latest"
WIREGUARD_BIN_DIR = REPO_ROOT / "target" / "wireguard-go"
WIREGUARD_PORT = 51820
# wireguard-go's inner addresses, inside 198.18.0.0/15 like every test address.
WG_CLIENT_ADDR = "198.18.101.2"
WG_SERVER_ADDR = "198.18.101.1"
# WireGuard's own default: 1500 - 80 (IPv6 outer header worst case).
WG_MTU = 1420
IPERF_PORT = 5201


def build_wireguard_go() -> Path:
    """The newest wireguard-go, built with `go install` into target/wireguard-go."""
    env = dict(os.environ, GOBIN=str(WIREGUARD_BIN_DIR), GOFLAGS="-mod=mod")
    subprocess.run(["go", "install", WIREGUARD_MODULE], env=env, check=True)
    return WIREGUARD_BIN_DIR / "wireguard"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far, in seconds."""
    ticks = os.sysconf("SC_CLK_TCK")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks


def iperf3_flow(bed: Testbed, client, server, address: str, duration_s: int,
                processes: dict[str, int]) -> dict:
    """One cubic flow client -> `address` for `duration_s`; the goodput and the CPU of
    each process in `processes` (name -> PID) over the flow."""
    listener = server.popen("iperf3", "-s", "-1", "-B", address, "-p", str(IPERF_PORT),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    before = {name: cpu_seconds(pid) for name, pid in processes.items()}
    started = time.monotonic()
    flow = client.popen("iperf3", "-c", address, "-p", str(IPERF_PORT), "-t", str(duration_s),
                        "-J", "-C", "cubic", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = flow.communicate(timeout=duration_s + 60)
    except subprocess.TimeoutExpired:
        bed.stop_process(flow)
        bed.stop_process(listener)
        return {"error": f"iperf3 did not finish within {duration_s + 60} s"}
    elapsed = time.monotonic() - started
    cpu = {name: round((cpu_seconds(pid) - before[name]) / elapsed, 3) for name, pid in processes.items()}
    try:
        listener.wait(timeout=15)
    except subprocess.TimeoutExpired:
        bed.stop_process(listener)
    try:
        end = json.loads(stdout)["end"]
    except (json.JSONDecodeError, KeyError):
        return {"error": f"iperf3 exited {flow.returncode}: {stderr.strip()[:300]}"}
    return {"mbit": round(end["sum_received"]["bits_per_second"] / 1e6, 1),
            "retransmissions": end["sum_sent"].get("retransmits"), "cpu_cores": cpu}


def run_raw(bed: Testbed, duration_s: int) -> dict:
    client, server, _ = direct_topology(bed, 1)
    return iperf3_flow(bed, client, server, "198.18.1.1", duration_s, {})


def run_wireguard(bed: Testbed, wireguard: Path, duration_s: int) -> dict:
    client, server, _ = direct_topology(bed, 1)
    workdir = bed.scratch_dir("datapath-wg-")
    keys = {}
    for side in ("client", "server"):
        private = subprocess.run(["wg", "genkey"], capture_output=True, text=True, check=True).stdout.strip()
        public = subprocess.run(["wg", "pubkey"], input=private, capture_output=True, text=True,
                                check=True).stdout.strip()
        (workdir / side).write_text(private + "\n")
        (workdir / side).chmod(0o600)
        keys[side] = public
    processes = {}
    for side, ns, address, peer, peer_address, endpoint in (
            ("server", server, WG_SERVER_ADDR, "client", WG_CLIENT_ADDR, None),
            ("client", client, WG_CLIENT_ADDR, "server", WG_SERVER_ADDR, f"198.18.1.1:{WIREGUARD_PORT}")):
        # The UAPI socket (/var/run/wireguard/NAME.sock) is not per namespace: each end
        # needs its own interface name. -f: stay in the foreground, so the PID is the
        # daemon's and the test bed ends it.
        interface = f"wg-{side}"
        proc = ns.popen(str(wireguard), "-f", interface, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while ns.run("ip", "link", "show", interface, check=False, capture=True).returncode != 0:
            if time.monotonic() > deadline or proc.poll() is not None:
                return {"error": f"wireguard-go did not create wg0 in the {side} namespace"}
            time.sleep(0.1)
        processes[side] = proc.pid
        argv = ["wg", "set", interface, "private-key", str(workdir / side), "peer", keys[peer],
                "allowed-ips", f"{peer_address}/32"]
        if endpoint:
            argv += ["endpoint", endpoint]
        else:
            argv[3:3] = ["listen-port", str(WIREGUARD_PORT)]
        ns.run(*argv)
        ns.run("ip", "addr", "add", f"{address}/24", "dev", interface)
        ns.run("ip", "link", "set", interface, "mtu", str(WG_MTU), "up")
    return iperf3_flow(bed, client, server, WG_SERVER_ADDR, duration_s,
                       {"client": processes["client"], "server": processes["server"]})


def run_mptund(bed: Testbed, paths: int, duration_s: int, binary: str | None = None) -> dict:
    client, server, uplinks = direct_topology(bed, paths)
    # The daemon's defaults: scheduler, hold and congestion control as shipped.
    daemons = DaemonPair(bed=bed, client_ns=client, server_ns=server, uplinks=uplinks,
                         inner_ipv6=True, scheduler=None, hold_ms=None, congestion_controller=None,
                         log_level="warn")
    if binary:
        daemons.binary = binary
    try:
        daemons.start()
    except (RuntimeError, TimeoutError) as error:
        return {"error": f"mptund did not start: {str(error)[:300]}"}
    result = iperf3_flow(bed, client, server, SERVER_TUN_ADDR, duration_s,
                         {"client": daemons.client_proc.pid, "server": daemons.server_proc.pid})
    try:
        daemons.stop()
    except RuntimeError as error:
        result.setdefault("error", f"mptund exited badly: {str(error)[:300]}")
    return result


def run_mode(mode: str, wireguard: Path | None, duration_s: int, baseline: str | None) -> dict:
    with Testbed() as bed:
        if mode == "raw":
            return run_raw(bed, duration_s)
        if mode == "wireguard-go":
            return run_wireguard(bed, wireguard, duration_s)
        if mode.startswith("baseline-"):
            return run_mptund(bed, int(mode.removeprefix("baseline-")), duration_s, baseline)
        return run_mptund(bed, int(mode.removeprefix("mptund-")), duration_s)


def cpu_per_gbit(run: dict) -> float | None:
    cores = sum(run.get("cpu_cores", {}).values())
    return cores / (run["mbit"] / 1000) if cores and run.get("mbit") else None


def report(results: dict) -> str:
    runs = results["runs"]
    modes = [m for m in MODES + BASELINE_MODES if any(r["mode"] == m and "error" not in r for r in runs)]
    medians = {}
    for mode in modes:
        ok = [r for r in runs if r["mode"] == mode and "error" not in r]
        medians[mode] = {
            "mbit": statistics.median(r["mbit"] for r in ok),
            "min": min(r["mbit"] for r in ok), "max": max(r["mbit"] for r in ok),
            "client": statistics.median(r["cpu_cores"].get("client", 0) for r in ok),
            "server": statistics.median(r["cpu_cores"].get("server", 0) for r in ok),
            "per_gbit": statistics.median(cpu_per_gbit(r) or 0 for r in ok),
            "runs": len(ok),
        }
    wg = medians.get("wireguard-go")
    binaries = [f"{label}: `{results[key]['version']}`" for key, label in
                (("binary", "mptund"), ("baseline_binary", "baseline")) if results.get(key)]
    if not binaries and results.get("commit"):
        # Files from before the binaries' --version named their commit.
        binaries = [f"tree commit when run (not necessarily the binary's): `{results['commit']}`"]
    lines = binaries + ([""] if binaries else []) + [
        "| mode | runs | Mbit/s median (min–max) | CPU client / server (cores) | "
        "CPU per Gbit/s (both ends) | vs wireguard-go | CPU per Gbit/s vs wireguard-go |",
        "|---|---:|---:|---:|---:|---:|---:|"]
    for mode, m in medians.items():
        ratio = f"{m['mbit'] / wg['mbit']:.2f}×" if wg and mode != "wireguard-go" else ""
        cpu = f"{m['client']:.2f} / {m['server']:.2f}" if mode != "raw" else ""
        per_gbit = f"{m['per_gbit']:.2f}" if mode != "raw" else ""
        cpu_ratio = (f"{m['per_gbit'] / wg['per_gbit']:.2f}×"
                     if wg and wg["per_gbit"] and mode not in ("raw", "wireguard-go") else "")
        lines.append(f"| {mode} | {m['runs']} | {m['mbit']:.0f} ({m['min']:.0f}–{m['max']:.0f}) | {cpu} | "
                     f"{per_gbit} | {ratio} | {cpu_ratio} |")
    errors = [f"- {r['mode']} round {r['round']}: {r['error']}" for r in runs if "error" in r]
    return "\n".join(lines + ([""] + errors if errors else [])) + "\n"


STANDING_START, STANDING_END = "<!-- standing -->", "<!-- /standing -->"


def write_standing(source: Path, table: str) -> None:
    """Replaces REPORT.md's standing block with `table`; the rest is written by hand."""
    path = HERE / "REPORT.md"
    text = path.read_text()
    head, rest = text.split(STANDING_START, 1)
    tail = rest.split(STANDING_END, 1)[1]
    block = (f"{STANDING_START}\n`python3 benches/datapath/run.py --report --standing --out "
             f"benches/datapath/{source.name}`:\n\n{table}{STANDING_END}")
    path.write_text(head + block + tail)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=10, help="seconds per flow")
    parser.add_argument("--modes", nargs="+", default=MODES, choices=MODES + BASELINE_MODES)
    parser.add_argument("--baseline-bin", help="another mptund binary for the baseline-N modes (added "
                                               "to the default modes when given)")
    parser.add_argument("--out", default=str(HERE / "results.json"))
    parser.add_argument("--report", action="store_true", help="print the table of --out and exit")
    parser.add_argument("--standing", action="store_true",
                        help="with --report: also put the table into REPORT.md's standing (between its "
                             "standing markers), naming --out as its source")
    args = parser.parse_args()
    out = Path(args.out)
    if args.report:
        table = report(json.loads(out.read_text()))
        print(table)
        if args.standing:
            write_standing(out, table)
        return 0
    if os.geteuid() != 0:
        parser.error("runs need root (network namespaces)")
    if args.baseline_bin and args.modes == MODES:
        args.modes = MODES + BASELINE_MODES
    if any(m in BASELINE_MODES for m in args.modes) and not args.baseline_bin:
        parser.error("the baseline-N modes need --baseline-bin")
    # Fails early without a release build. The commits are the binaries' own (their
    # `--version`), not the tree's, which may have moved since they were built.
    binary = binary_record(mptund_binary())
    baseline = binary_record(args.baseline_bin) if args.baseline_bin else None
    wireguard = build_wireguard_go() if "wireguard-go" in args.modes else None
    results = {"commit": binary["commit"], "binary": binary,
               "baseline_bin": args.baseline_bin, "baseline_binary": baseline,
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Linux {platform.release()}",
               "duration_s": args.duration, "runs": []}
    for round_index in range(args.rounds):
        shift = round_index % len(args.modes)
        for mode in args.modes[shift:] + args.modes[:shift]:
            run = {"mode": mode, "round": round_index + 1,
                   **run_mode(mode, wireguard, args.duration, args.baseline_bin)}
            results["runs"].append(run)
            print(f"round {round_index + 1} {mode:13} " + (
                run["error"] if "error" in run else
                f"{run['mbit']:8.1f} Mbit/s  cpu {run['cpu_cores']}  retx {run['retransmissions']}"),
                flush=True)
            out.write_text(json.dumps(results, indent=1) + "\n")
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
