#!/usr/bin/env python3
"""Hybrid emulation: mptund's uplinks cross ns-3 (LTE, Wi-Fi, point-to-point).

    sudo ns3-tap-bridge/run.sh                                   # build, run, report
    sudo python3 ns3-tap-bridge/ns3_hybrid.py --bytes 20000000 --direction both \\
         --ns3-arg=--p2pRate=8Mbps --ns3-arg=--event=wifi-walk --ns3-arg=--eventAtS=5
    sudo python3 ns3-tap-bridge/ns3_hybrid.py --scenario 5g-trace-lte   # a 5G trace path beside LTE

Layout (all addresses the kernels see are in 198.18.0.0/15; see README.md):

    client ns                       sim ns: mptund-ns3 (real time)                server ns
    lte  198.18.1.2/24 ==tap== ghost|LAN|UE ~~LTE~~ eNB - EPC - PGW --\\
    wifi 198.18.2.2/24 ==tap== ghost|LAN|STA ~~802.11a~~ AP ---------- core |LAN|ghost ==tap== srv 198.18.250.2/24
    p2p  198.18.3.2/24 ==tap== ghost|LAN|router ---- p2p link ---------/                    lo  198.18.0.1/32

The taps are created in the "sim" namespace, where ns-3 runs and opens them
(TapBridge opens a tap by name in its own namespace), then moved to the client
and server namespaces and configured there: the open file descriptor stays
attached across the move. Then the mptund client and server start (one path
per uplink tap, bound by interface), a byte-checked TCP transfer runs through
the tunnel, and the per-path throughput is printed from mptund's counters
(--stats-file JSON) and from ns-3's (packets forwarded at both ends of each
simulated link); a trace-driven path's also against what its trace offered
over the transfer. Namespaces and processes are removed on exit, error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "testbed"))
from mptund import (CLIENT_TUN_ADDR, SERVER_PUBLIC_ADDR, SERVER_TUN_ADDR,  # noqa: E402
                    DaemonPair, binary_record, mptund_binary)
from netns import Netns, Testbed  # noqa: E402
from workspace import REPO_ROOT  # noqa: E402

NS3_PROGRAM = HERE / "build" / "mptund-ns3"
TRANSFER = REPO_ROOT / "testbed" / "transfer.py"
LINK_TYPES = ("lte", "wifi", "p2p", "trace")
TRACES_DIR = HERE / "traces"


@dataclass(frozen=True)
class Scenario:
    """A named hybrid scenario: links and mptund-ns3 options (--scenario NAME).
    Later --ns3-arg options override its ns-3 options (ns-3's last value wins)."""

    links: str
    ns3_args: tuple[str, ...]
    description: str


# Rate scale of the trace scenarios: the traces carry the published rates
# (hundreds of Mbit/s), which the real-time simulator cannot keep up with on a
# two-core machine (README, Fidelity caveats: about 20-40 Mbit/s in all). Each
# opportunity then carries 1500 x this bytes at the published instants, as
# linkem's rate_scale does; --ns3-arg=--traceRateScale=X overrides it.
TRACE_RATE_SCALE = 0.05
SCENARIOS = {
    "default": Scenario("lte,wifi,p2p", (), "LTE + Wi-Fi + point-to-point models"),
    "5g-trace-lte": Scenario(
        "lte,trace",
        (f"--traceDown={TRACES_DIR / '5g-midband-drive-down.mahi'}",
         f"--traceUp={TRACES_DIR / '5g-midband-drive-up.mahi'}",
         # Half the published 47 ms 5G latency (testbed/make_measured_traces.py).
         "--traceDelay=24ms", f"--traceRateScale={TRACE_RATE_SCALE}"),
        "a 5G mid-band drive trace (derived from Ookla's H1 2024 medians) beside the LTE model"),
    "starlink-trace-lte": Scenario(
        "lte,trace",
        (f"--traceDown={TRACES_DIR / 'starlink-down.mahi'}", f"--traceUp={TRACES_DIR / 'starlink-up.mahi'}",
         f"--traceDownDelays={TRACES_DIR / 'starlink-delay.csv'}",
         f"--traceUpDelays={TRACES_DIR / 'starlink-delay.csv'}", f"--traceRateScale={TRACE_RATE_SCALE}"),
        "a Starlink trace with 15 s slots and per-slot delay (derived from Ookla's 2024 Maine table) "
        "beside the LTE model"),
}
SERVER_TAP = "srv"
# The LAN between ns-3's core router and the server namespace (matches main.cc).
CORE_LAN_GATEWAY = "198.18.250.1"
SERVER_TAP_ADDR = "198.18.250.2"
# ns-3 opens its taps at simulated time 0; LTE attach and Wi-Fi association take
# a little longer, the daemons' handshake retries cover that.
NS3_START_TIMEOUT_S = 20.0
TUNNEL_UP_TIMEOUT_S = 45.0
# Real-time (SCHED_FIFO) priority for ns-3, as the test bed gives linkem: on a
# small shared machine a build or the transfer itself can otherwise delay its
# wake-ups by tens of milliseconds, and every delay is lag of the simulated
# clock. Mid-range, so kernel threads with higher priority still run; ns-3
# sleeps between events and the kernel's RT throttling bounds the worst case.
NS3_RT_PRIORITY = 20
# Where a run's results file goes unless --json names one (ignored by git).
RESULTS_DIR = HERE / "results"

# The runner's exit codes. A run that fell behind real time measured the
# simulator, not the links: it fails unless the caller passed --allow-lag.
EXIT_OK = 0
EXIT_ERROR = 1            # the bed could not be built or run (ns-3 aborted at its HardLimit included)
EXIT_NOT_BYTE_EXACT = 3   # the transfer was not byte-exact (takes precedence over the lag)
EXIT_FELL_BEHIND = 4      # ns-3 fell behind the wall clock by more than its tolerance

# The verdicts a results file records.
KEPT_UP = "kept-up"
FELL_BEHIND = "fell-behind"
# No lag sample after start-up (a run shorter than --lagWarmupS): nothing to judge by.
UNJUDGED = "unjudged"
ERROR = "error"
# ns-3's message when HardLimit synchronisation aborts the simulation.
HARD_LIMIT_MESSAGE = "Hard real-time limit exceeded"


class HybridError(RuntimeError):
    """The hybrid test bed could not be built or run; the message says what to fix."""


def client_addr(path: int) -> str:
    return f"198.18.{path}.2"


def gateway_addr(path: int) -> str:
    return f"198.18.{path}.1"


def check_prerequisites() -> None:
    if not NS3_PROGRAM.is_file():
        raise HybridError(f"{NS3_PROGRAM} is missing: run ns3-tap-bridge/setup.sh (installs ns-3, builds it)")
    if os.geteuid() != 0:
        raise HybridError("needs root: namespaces, taps and TUN devices")


@dataclass
class HybridBed:
    """Client, server and sim namespaces, ns-3 with one tap per link, and the daemons."""

    links: list[str] = field(default_factory=lambda: ["lte", "wifi", "p2p"])
    ns3_args: list[str] = field(default_factory=list)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mptund-ns3-")))
    prefix: str | None = None
    scheduler: str = "round-robin"
    realtime_priority: bool = True
    # Keep the work directory (configs, keys, daemon and ns-3 logs, reports).
    keep_workdir: bool = False

    def __post_init__(self):
        unknown = [link for link in self.links if link not in LINK_TYPES]
        if unknown or not self.links or len(set(self.links)) != len(self.links):
            raise HybridError(f"links must be distinct names from {LINK_TYPES}, got {self.links}")
        self.testbed: Testbed | None = None
        self.ns3: subprocess.Popen | None = None
        self.pair: DaemonPair | None = None
        self.ns3_stats = self.workdir / "ns3-stats.json"
        self.ns3_log_path = self.workdir / "ns3.log"
        # time.monotonic() at ns-3's simulated time 0 (from its ready file).
        self.sim_epoch_monotonic: float | None = None

    def __enter__(self) -> "HybridBed":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    # Build ---------------------------------------------------------------------
    def start(self) -> None:
        check_prerequisites()
        self.testbed = Testbed(self.prefix)
        self.client = self.testbed.netns("client")
        self.server = self.testbed.netns("server")
        self.sim = self.testbed.netns("sim")
        for ns in (self.client, self.server, self.sim):
            # No router solicitations or DAD into the simulation (ns-3 routes IPv4 only).
            ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1")
            ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1")
        for ns in (self.client, self.server):
            # Replies come back over every uplink while one route is preferred.
            ns.sysctl("net.ipv4.conf.all.rp_filter", "2")
            ns.sysctl("net.ipv4.conf.default.rp_filter", "2")
        for tap in [*self.links, SERVER_TAP]:
            self.sim.run("ip", "tuntap", "add", "dev", tap, "mode", "tap")
        self._start_ns3()
        for tap in self.links:
            self.sim.run("ip", "link", "set", tap, "netns", self.client.name)
        self.sim.run("ip", "link", "set", SERVER_TAP, "netns", self.server.name)
        self._configure_client()
        self._configure_server()

    def _start_ns3(self) -> None:
        ready = self.workdir / "ns3-ready.json"
        argv = ["chrt", "-f", str(NS3_RT_PRIORITY)] if self.realtime_priority and shutil.which("chrt") else []
        argv += [NS3_PROGRAM, f"--links={','.join(self.links)}", f"--serverTap={SERVER_TAP}",
                f"--statsFile={self.ns3_stats}", f"--readyFile={ready}", *self.ns3_args]
        self.ns3_log = open(self.ns3_log_path, "w")
        self.ns3 = self.sim.popen(*argv, stdout=subprocess.DEVNULL, stderr=self.ns3_log)
        deadline = time.monotonic() + NS3_START_TIMEOUT_S
        while not ready.exists():
            if self.ns3.poll() is not None:
                raise HybridError(f"ns-3 exited with {self.ns3.returncode} before opening its taps:\n"
                                  + self.ns3_log_path.read_text())
            if time.monotonic() > deadline:
                raise HybridError(f"ns-3 did not open its taps within {NS3_START_TIMEOUT_S} s:\n"
                                  + self.ns3_log_path.read_text())
            time.sleep(0.02)
        # Written in one go at simulated 1 ms; poll until it parses (the writer may be mid-write).
        while self.sim_epoch_monotonic is None:
            try:
                report = json.loads(ready.read_text())
                self.sim_epoch_monotonic = report["monotonic_s"] - report["sim_s"]
            except (ValueError, KeyError):
                time.sleep(0.01)

    def sim_time(self, monotonic: float) -> float:
        """Simulated seconds at a time.monotonic() instant, while ns-3 keeps real time."""
        return monotonic - self.sim_epoch_monotonic

    def _configure_client(self) -> None:
        for path, tap in enumerate(self.links, start=1):
            self.client.addr(tap, f"{client_addr(path)}/24")
            # One route to the server per uplink; the daemon's sockets pick theirs
            # by interface binding, the metric only orders them for other traffic.
            self.client.run("ip", "route", "add", f"{SERVER_PUBLIC_ADDR}/32", "via", gateway_addr(path),
                            "dev", tap, "metric", str(path))

    def _configure_server(self) -> None:
        self.server.run("ip", "addr", "add", f"{SERVER_PUBLIC_ADDR}/32", "dev", "lo")
        self.server.addr(SERVER_TAP, f"{SERVER_TAP_ADDR}/24")
        for path in range(1, len(self.links) + 1):
            self.server.run("ip", "route", "add", f"198.18.{path}.0/24", "via", CORE_LAN_GATEWAY)

    def start_daemons(self) -> DaemonPair:
        self.pair = DaemonPair(self.testbed, self.client, self.server, list(self.links),
                               scheduler=self.scheduler, workdir=self.workdir, inner_ipv6=False,
                               stats_interval_ms=1000)
        self.pair.start(timeout=TUNNEL_UP_TIMEOUT_S)
        return self.pair

    # Run -----------------------------------------------------------------------
    def transfer(self, count: int, direction: str, timeout: float) -> dict:
        """A byte-checked TCP transfer through the tunnel: "up" (client to server),
        "down" or "both" at once. Returns each direction's sender and receiver report."""
        flows = []
        if direction in ("up", "both"):
            flows.append(("up", self.client, self.server, SERVER_TUN_ADDR, 5001, 1))
        if direction in ("down", "both"):
            flows.append(("down", self.server, self.client, CLIENT_TUN_ADDR, 5002, 2))
        started = []
        for name, sender_ns, receiver_ns, address, port, seed in flows:
            receiver = receiver_ns.popen(sys.executable, TRANSFER, "recv", "--listen", f"{address}:{port}",
                                         "--timeout", str(timeout), stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
            if receiver.stderr.readline().strip() != "listening":
                raise HybridError(f"transfer receiver ({name}) did not start")
            sender = sender_ns.popen(sys.executable, TRANSFER, "send", "--to", f"{address}:{port}",
                                     "--bytes", str(count), "--seed", str(seed), "--timeout", str(timeout),
                                     stdout=subprocess.PIPE, text=True)
            started.append((name, sender, receiver))
        results = {}
        deadline = time.monotonic() + timeout + 10
        for name, sender, receiver in started:
            while sender.poll() is None or receiver.poll() is None:
                # ns-3 gone (HardLimit abort, crash) means no path is left: say so
                # now rather than after the transfer's timeout.
                if self.ns3.poll() is not None:
                    raise HybridError(f"ns-3 exited with {self.ns3.returncode} during the transfer:\n"
                                      + self.ns3_log_path.read_text()[-3000:])
                if time.monotonic() > deadline:
                    raise HybridError(f"transfer {name} did not finish within {timeout} s")
                time.sleep(0.05)
            # When the receiver saw the last byte, to within this loop's 50 ms polling.
            ended = time.monotonic()
            sent, received = sender.stdout.read(), receiver.stdout.read()
            if sender.returncode or receiver.returncode:
                raise HybridError(f"transfer {name} failed: sender {sender.returncode} {sent!r}, "
                                  f"receiver {receiver.returncode} {received!r}")
            results[name] = {"sender": json.loads(sent), "receiver": json.loads(received), "ended_monotonic": ended}
            sender_report, receiver_report = results[name]["sender"], results[name]["receiver"]
            results[name]["byte_exact"] = (sender_report["bytes"] == receiver_report["bytes"] == count
                                           and sender_report["sha256"] == receiver_report["sha256"])
        return results

    def stop(self) -> tuple[dict, dict, dict]:
        """Stops the daemons, then ns-3; returns (client, server, ns-3) reports."""
        client, server = self.pair.stop()
        return client, server, self.stop_ns3()

    def stop_ns3(self) -> dict:
        code = self.testbed.stop_process(self.ns3, signal.SIGTERM, timeout=15)
        self.ns3_log.close()
        if code != 0 or not self.ns3_stats.exists():
            raise HybridError(f"ns-3 exited with {code}:\n{self.ns3_log_path.read_text()[-3000:]}")
        return json.loads(self.ns3_stats.read_text())

    def close(self) -> None:
        if self.testbed is not None:
            self.testbed.close()
            self.testbed = None
        if getattr(self, "ns3_log", None) is not None:
            self.ns3_log.close()
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


# Verdict ---------------------------------------------------------------------
def realtime_verdict(lag: dict) -> str:
    """Whether the simulator kept up with the wall clock, from ns-3's lag probe:
    kept up when no sample after start-up lagged by more than the tolerance
    (max lag <= --lagToleranceMs, the rule of ns-3's own `kept_up`); unjudged
    when there was no such sample. The worst sample decides, not a percentile:
    one 16 ms stall stretches a 10 ms link delay as surely as many do."""
    if lag["samples"] == 0:
        return UNJUDGED
    return KEPT_UP if lag["max_ms"] <= lag["tolerance_ms"] else FELL_BEHIND


def exit_code(transfer_byte_exact: bool, verdict: str, allow_lag: bool) -> int:
    """The runner's exit code for a run that completed: a corrupt transfer first,
    then a verdict other than kept-up, unless the caller allowed lag."""
    if not transfer_byte_exact:
        return EXIT_NOT_BYTE_EXACT
    if verdict != KEPT_UP and not allow_lag:
        return EXIT_FELL_BEHIND
    return EXIT_OK


def verdict_line(verdict: str, lag: dict, allow_lag: bool) -> str:
    """One line that says whether the run counts."""
    tolerance = f"tolerance {lag['tolerance_ms']:g} ms"
    if verdict == KEPT_UP:
        return f"verdict: kept up with real time (max lag {lag['max_ms']:.2f} ms, {tolerance})"
    what = (f"FELL BEHIND real time: max lag {lag['max_ms']:.2f} ms > {tolerance}, "
            f"{lag['samples_over_tolerance']} of {lag['samples']} samples over"
            if verdict == FELL_BEHIND else
            f"UNJUDGED: no lag sample after {lag['warmup_s']:g} s of start-up")
    if allow_lag:
        return (f"verdict: {what}; kept because of --allow-lag: the links' delays and rates "
                "were stretched, these numbers describe the simulator, not the links")
    return f"verdict: {what}; the run FAILS (exit {EXIT_FELL_BEHIND}; --allow-lag keeps it)"


def ns3_version(program: Path = NS3_PROGRAM) -> dict:
    """Which ns-3 the scenario program runs on: the release it was built against
    (pkg-config) and the package of the core library it loads (ldd, dpkg). Debian's
    build has no version tag of its own (`--PrintVersion` prints a placeholder).
    Missing tools leave a field None."""
    def output(*argv: str) -> str | None:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    record = {"built_against": output("pkg-config", "--modversion", "ns3-core"),
              "core_library": None, "package": None, "package_version": None}
    match = re.search(r"libns3[^ ]*core[^ ]* => (\S+)", output("ldd", str(program)) or "")
    if match:
        library = os.path.realpath(match.group(1))
        record["core_library"] = library
        owner = output("dpkg-query", "-S", library)
        if owner:
            # "libns3.37:amd64: /usr/lib/...": the package name ends at the first colon.
            package = owner.split(":", 1)[0]
            record["package"] = package
            record["package_version"] = output("dpkg-query", "-W", "-f=${Version}", package)
    return record


# Report ----------------------------------------------------------------------
def mbit(nbytes: float, seconds: float) -> float:
    return nbytes * 8 / seconds / 1e6 if seconds > 0 else 0.0


def trace_capacity_mbit(capacity_bytes: list[int], bin_s: float, start_s: float, end_s: float) -> float:
    """What a trace offered over [start_s, end_s) of simulated time, in Mbit/s, from
    ns-3's capacity per bin of `bin_s` (a bin partly inside counts in proportion)."""
    if end_s <= start_s:
        return 0.0
    offered = 0.0
    for index, nbytes in enumerate(capacity_bytes):
        overlap = min(end_s, (index + 1) * bin_s) - max(start_s, index * bin_s)
        if overlap > 0:
            offered += nbytes * overlap / bin_s
    return mbit(offered, end_s - start_s)


def trace_comparison(trace_link: dict, windows: dict, path: dict) -> dict:
    """For each direction that carried a transfer: what the path delivered (ns-3's
    count) against what its trace offered over that transfer's window."""
    compared = {}
    for direction, (start_s, end_s) in windows.items():
        replay = trace_link[direction]
        capacity = trace_capacity_mbit(replay["capacity_bytes_per_100ms"], 0.1, start_s, end_s)
        carried = path[f"ns3_{direction}_mbit"]
        compared[direction] = {
            "window_sim_s": [round(start_s, 3), round(end_s, 3)],
            "trace_capacity_mbit": round(capacity, 3),
            "trace_mean_mbit": round(replay["mean_mbit"], 3),
            "carried_mbit": carried,
            "carried_share_of_capacity": round(carried / capacity, 3) if capacity > 0 else None,
            "bytes_per_opportunity": replay["bytes_per_opportunity"],
            "dropped_packets": replay["dropped_packets"],
            "max_queue_bytes": replay["max_queue_bytes"],
            "trace": replay["trace"],
        }
    return compared


def summarise(links: list[str], transfer: dict, client: dict, ns3: dict,
              windows: dict[str, tuple[float, float]] | None = None) -> dict:
    """Per-path throughput over the transfer, from mptund's and from ns-3's counters.
    Both are totals over the run divided by the transfer's duration (each
    direction's own with --direction both; its bytes then include the other
    transfer's acknowledgements, a few percent); outside the
    transfer only keepalives cross (about 100 bytes a second per path)."""
    seconds_of = {name: result["receiver"]["seconds"] for name, result in transfer.items()}
    # Each direction over its own transfer's duration; with a one-way transfer
    # the other direction (acknowledgements) over that transfer's.
    up_s = seconds_of.get("up", seconds_of.get("down"))
    down_s = seconds_of.get("down", seconds_of.get("up"))
    session_paths = client["sessions"][0]["paths"] if client["sessions"] else client["idle_paths"]
    by_name = {path["name"]: path for path in session_paths}
    paths = []
    for name in links:
        path = by_name.get(name, {})
        link = ns3["links"][name]
        paths.append({
            "name": name,
            "mptund_up_mbit": round(mbit(path.get("sent_bytes", 0), up_s), 3),
            "mptund_down_mbit": round(mbit(path.get("received_bytes", 0), down_s), 3),
            "mptund_srtt_ms": path.get("srtt_ms"),
            "mptund_lost_packets": path.get("lost_packets"),
            "ns3_up_mbit": round(mbit(link["up"]["delivered_bytes"], up_s), 3),
            "ns3_down_mbit": round(mbit(link["down"]["delivered_bytes"], down_s), 3),
            "ns3_up_packets": link["up"]["delivered_packets"],
            "ns3_down_packets": link["down"]["delivered_packets"],
            "ns3_up_lost": link["up"]["offered_packets"] - link["up"]["delivered_packets"],
            "ns3_down_lost": link["down"]["offered_packets"] - link["down"]["delivered_packets"],
        })
        trace_link = ns3.get("trace_links", {}).get(name)
        if trace_link is not None and windows:
            paths[-1]["trace"] = trace_comparison(trace_link, windows, paths[-1])
    return {
        "transfer": {name: {"bytes": result["receiver"]["bytes"], "seconds": result["receiver"]["seconds"],
                            "goodput_mbit": round(mbit(result["receiver"]["bytes"], result["receiver"]["seconds"]), 3),
                            "byte_exact": result["byte_exact"]}
                     for name, result in transfer.items()},
        "paths": paths,
        "realtime": ns3["lag"],
        "sync_mode": ns3["sync_mode"],
    }


def print_summary(summary: dict) -> None:
    for name, result in summary["transfer"].items():
        verdict = "byte-exact (SHA-256 equal)" if result["byte_exact"] else "CORRUPT OR INCOMPLETE"
        print(f"transfer {name}: {result['bytes']} bytes in {result['seconds']:.2f} s = "
              f"{result['goodput_mbit']:.2f} Mbit/s, {verdict}")
    print()
    print(f"{'path':<6} {'mptund up':>10} {'ns-3 up':>9} {'mptund down':>12} {'ns-3 down':>10} "
          f"{'srtt ms':>8} {'ns-3 lost up/down':>18}   (Mbit/s over the transfer)")
    for path in summary["paths"]:
        srtt = f"{path['mptund_srtt_ms']:.1f}" if path["mptund_srtt_ms"] is not None else "-"
        print(f"{path['name']:<6} {path['mptund_up_mbit']:>10.2f} {path['ns3_up_mbit']:>9.2f} "
              f"{path['mptund_down_mbit']:>12.2f} {path['ns3_down_mbit']:>10.2f} {srtt:>8} "
              f"{path['ns3_up_lost']:>8}/{path['ns3_down_lost']:<9}")
    for path in summary["paths"]:
        for direction, compared in path.get("trace", {}).items():
            share = compared["carried_share_of_capacity"]
            print(f"{path['name']} {direction}: carried {compared['carried_mbit']:.2f} Mbit/s of the "
                  f"{compared['trace_capacity_mbit']:.2f} Mbit/s its trace offered over the transfer "
                  f"({share * 100 if share is not None else 0:.0f} %; whole-trace mean "
                  f"{compared['trace_mean_mbit']:.2f} Mbit/s at {compared['bytes_per_opportunity']} bytes per "
                  f"opportunity; {compared['dropped_packets']} dropped at its queue)")
    lag = summary["realtime"]
    print()
    print(f"ns-3 ({summary['sync_mode']}): lag behind the wall clock max {lag['max_ms']:.2f} ms "
          f"(at t={lag['max_at_s']:.1f} s), p99 {lag['p99_ms']:.2f} ms, p50 {lag['p50_ms']:.2f} ms, "
          f"mean {lag['mean_ms']:.2f} ms over {lag['samples']} samples after {lag['warmup_s']:g} s of "
          f"start-up (start-up max {lag['startup_max_ms']:.1f} ms)")


def transfer_windows(bed: HybridBed, transfer: dict) -> dict[str, tuple[float, float]]:
    """Each direction's transfer in simulated seconds: the receiver's duration,
    ending when the runner saw it finish."""
    windows = {}
    for name, result in transfer.items():
        end = bed.sim_time(result["ended_monotonic"])
        windows[name] = (end - result["receiver"]["seconds"], end)
    return windows


def scenario_of(args) -> tuple[list[str], list[str]]:
    """The links and ns-3 options of a run: the scenario's, then --links and --ns3-arg."""
    scenario = SCENARIOS[args.scenario]
    links = (args.links or scenario.links).split(",")
    return links, [*scenario.ns3_args, *args.ns3_arg]


def write_traces() -> None:
    """Writes the trace scenarios' files into TRACES_DIR. They are generated, not
    committed: the generator is deterministic and takes under a second, and the
    files are megabytes of lines."""
    subprocess.run([sys.executable, str(REPO_ROOT / "testbed" / "make_measured_traces.py"), "--out",
                    str(TRACES_DIR)], check=True, stdout=subprocess.DEVNULL)


def run(args, results: dict) -> dict:
    """One hybrid run; fills `results` as it learns (scenario first, so that a run
    that fails still leaves a record of what was tried) and returns the summary."""
    links, ns3_args = scenario_of(args)
    if "trace" in links:
        write_traces()
    with HybridBed(links=links, ns3_args=ns3_args, prefix=args.prefix,
                   scheduler=args.scheduler, realtime_priority=not args.no_rt_priority,
                   keep_workdir=args.keep_workdir) as bed:
        kept = f", logs kept in {bed.workdir}" if args.keep_workdir else ""
        print(f"namespaces {bed.testbed.prefix}-{{client,server,sim}}{kept}", flush=True)
        bed.start_daemons()
        print("tunnel up; transferring", flush=True)
        try:
            transfer = bed.transfer(args.bytes, args.direction, args.timeout)
        finally:
            results["ns3_log"] = bed.ns3_log_path.read_text().splitlines()[-20:]
        client, _server, ns3 = bed.stop()
        summary = summarise(bed.links, transfer, client, ns3, transfer_windows(bed, transfer))
        summary["ns3_log"] = bed.ns3_log_path.read_text().splitlines()[-20:]
        events = [line for line in summary["ns3_log"] if "wifi" in line or "lte" in line or "trace link" in line]
        for line in events:
            print("ns-3:", line)
        print_summary(summary)
        results["scenario"]["ns3"] = ns3.get("scenario")
        results.update({**summary, "ns3": ns3, "mptund_client": client})
        return summary


def results_path(args) -> Path:
    if args.json:
        return Path(args.json)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return RESULTS_DIR / f"hybrid-{stamp}-{os.getpid()}.json"


def write_results(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    shown = path.resolve()
    if shown.is_relative_to(Path.cwd()):
        shown = shown.relative_to(Path.cwd())
    print(f"results: {shown}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="default",
                        help="; ".join(f"{name}: {s.description} (links {s.links})" for name, s in SCENARIOS.items()))
    parser.add_argument("--links", help="links in path order (lte, wifi, p2p, trace); default: the scenario's")
    parser.add_argument("--bytes", type=int, default=10_000_000, help="bytes per transfer direction")
    parser.add_argument("--direction", choices=("up", "down", "both"), default="down",
                        help="up: client to server; down: server to client")
    parser.add_argument("--timeout", type=float, default=120, help="transfer timeout (s)")
    parser.add_argument("--scheduler", default="earliest-arrival",
                        help="mptund scheduler (the daemon's default; the CI test uses round-robin for equal shares)")
    parser.add_argument("--prefix", help="namespace name prefix (default: unique per run)")
    parser.add_argument("--ns3-arg", action="append", default=[],
                        help="passed to mptund-ns3, e.g. --ns3-arg=--p2pRate=8Mbps (repeatable; "
                             "see build/mptund-ns3 --help)")
    parser.add_argument("--no-rt-priority", action="store_true",
                        help="run ns-3 at normal priority instead of SCHED_FIFO 20")
    parser.add_argument("--keep-workdir", action="store_true",
                        help="keep configs, keys and the daemons' and ns-3's logs")
    parser.add_argument("--allow-lag", action="store_true",
                        help=f"keep a run in which ns-3 fell behind real time (exit {EXIT_OK} rather than "
                             f"{EXIT_FELL_BEHIND}); the verdict still says so and the results file records it")
    parser.add_argument("--json", help=f"the results file (JSON; default: {RESULTS_DIR.relative_to(REPO_ROOT)}/"
                                       "hybrid-<UTC time>-<pid>.json)")
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    path = results_path(args)
    # What ran, recorded before the run so that a failed run leaves its record too.
    results = {
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "verdict": None,
        "allow_lag": args.allow_lag,
        "exit_code": None,
        "error": None,
        "scenario": {"name": args.scenario, "links": scenario_of(args)[0], "direction": args.direction,
                     "bytes": args.bytes, "scheduler": args.scheduler,
                     "ns3_rt_priority": None if args.no_rt_priority else NS3_RT_PRIORITY,
                     "ns3_args": scenario_of(args)[1], "ns3": None},
        "ns3_version": ns3_version(),
        "mptund_binary": None,
    }
    try:
        results["mptund_binary"] = binary_record(mptund_binary())
        summary = run(args, results)
    except (RuntimeError, TimeoutError, FileNotFoundError) as error:
        # HybridError, the daemons' RuntimeError/TimeoutError, a missing binary.
        hard_limit = HARD_LIMIT_MESSAGE in str(error)
        results.update(verdict=FELL_BEHIND if hard_limit else ERROR, error=str(error), exit_code=EXIT_ERROR)
        print(f"error: {error}", file=sys.stderr)
        if hard_limit:
            print(f"verdict: FELL BEHIND real time: ns-3 aborted at its HardLimit; the run FAILS (exit {EXIT_ERROR})",
                  file=sys.stderr)
        write_results(path, results)
        return EXIT_ERROR
    verdict = realtime_verdict(summary["realtime"])
    byte_exact = all(t["byte_exact"] for t in summary["transfer"].values())
    code = exit_code(byte_exact, verdict, args.allow_lag)
    results.update(verdict=verdict, exit_code=code)
    line = verdict_line(verdict, summary["realtime"], args.allow_lag)
    print(line, file=sys.stdout if verdict == KEPT_UP else sys.stderr, flush=True)
    write_results(path, results)
    return code


if __name__ == "__main__":
    sys.exit(main())
