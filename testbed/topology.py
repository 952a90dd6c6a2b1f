#!/usr/bin/env python3
"""Client / wan / server namespaces with N emulated paths, as a library and a command.

Layout (path i = 1..N, all addresses from 198.18.0.0/15, RFC 2544):

    client ns                 wan ns                          server ns
    up<i> 198.18.<i>.2/24 --- c<i> ==[linkem or bridge]== s<i> --- p<i> 198.18.<i>.1/24
                                                                   lo   198.18.0.1/32 (public)

The wan namespace joins c<i> and s<i> at layer 2: through the `linkem` emulator
(path i of the scenario; frames from c<i> take its "up" model, from s<i> its
"down" model) or, without a scenario, through a plain Linux bridge. So
addressing is the same with and without emulation. The client reaches the
server's public address over every uplink: the main table has one route per
uplink (metric i, so path 1 is the default), and policy rules send traffic
bound to an uplink's address or device out of that uplink.

Library use (the namespaces and processes go away on exit, error, Ctrl-C):

    with Topology(scenario="config/scenarios/two-paths-symmetric.toml") as topo:
        topo.server.popen("iperf3", "-s", "-1")
        topo.client.run("iperf3", "-c", topo.server_addr)

Command:

    sudo python3 testbed/topology.py --scenario config/scenarios/hst-eight-lte.toml
    sudo python3 testbed/topology.py --paths 2 --exec 'ip netns exec $CLIENT_NS ping -c3 $SERVER_ADDR'
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from netns import Netns, Testbed  # noqa: E402
from workspace import release_binary  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent

SERVER_ADDR = "198.18.0.1"

# Policy routing tables 101..(100+N) for the uplinks; far from the kernel's
# reserved 253-255 and from anything a daemon under test might pick.
TABLE_BASE = 100

# Offloads that make veth hand 64 KB super-frames (GRO/TSO/GSO) or frames with
# unfinished checksums (tx checksumming) to AF_PACKET; the emulator must see
# wire-sized frames with real checksums, as a modem link would carry.
OFFLOADS_OFF = ["rx", "off", "tx", "off", "tso", "off", "gso", "off", "gro", "off"]

# Real-time (SCHED_FIFO) priority for the emulator: on a small shared machine a
# build or iperf3 can otherwise delay its wake-ups by milliseconds. Mid-range, so
# kernel threads with higher RT priority still run; the loop sleeps in ppoll, and
# the kernel's RT throttling (95% by default) bounds the worst case.
EMULATOR_RT_PRIORITY = 20

# Paths use 198.18.1.0/24 .. 198.18.99.0/24: 198.18.100.0/24 is the tunnel's own
# subnet in testbed/mptund.py.
MAX_PATHS = 99

# How long linkem may take to open its sockets before we call it failed.
EMULATOR_START_TIMEOUT_S = 10.0


class TopologyError(RuntimeError):
    """The test bed could not be built; the message says what to fix."""


def linkem_binary() -> Path:
    """The emulator binary: $LINKEM_BIN, else the workspace's release build."""
    try:
        return release_binary("linkem", "LINKEM_BIN")
    except FileNotFoundError as error:
        raise TopologyError(str(error)) from error


def run_tracked(ns: Netns, *argv, timeout: float = 60) -> subprocess.CompletedProcess:
    """Like `ns.run(..., capture=True)`, but through the test bed's tracked `popen`, so
    the process is killed by PID if the caller is interrupted (SIGTERM included)."""
    process = ns.popen(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        ns.testbed.stop_process(process)
        raise
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, argv, stdout, stderr)
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def scenario_path_count(scenario: Path) -> int:
    with open(scenario, "rb") as handle:
        return len(tomllib.load(handle).get("paths", []))


def scenario_summary(scenario: Path, rate_scale: float | None = None) -> dict:
    """The resolved scenario (scaled rates, queues, outages) as `linkem show` prints it."""
    argv = [str(linkem_binary()), "show", "--scenario", str(scenario)]
    if rate_scale is not None:
        argv += ["--rate-scale", str(rate_scale)]
    return json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)


class Topology:
    """Three namespaces and N paths; a context manager that always cleans up."""

    def __init__(self, paths: int | None = None, scenario: str | Path | None = None,
                 rate_scale: float | None = None, prefix: str | None = None,
                 stats_interval_ms: int | None = None, workdir: str | Path | None = None,
                 realtime: bool = True):
        self.scenario = Path(scenario).resolve() if scenario else None
        if self.scenario is not None:
            scenario_paths = scenario_path_count(self.scenario)
            if paths is not None and paths != scenario_paths:
                raise TopologyError(f"{self.scenario} has {scenario_paths} paths, but paths={paths} was asked")
            paths = scenario_paths
        if not paths or paths < 1:
            raise TopologyError("give paths=N (N >= 1) or a scenario")
        if paths > MAX_PATHS:
            raise TopologyError(f"at most {MAX_PATHS} paths fit the 198.18.<path>.0/24 addressing")
        self.paths = paths
        self.rate_scale = rate_scale
        self.stats_interval_ms = stats_interval_ms
        self.prefix = prefix
        self.realtime = realtime
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="mptund-topo-"))
        self.testbed: Testbed | None = None
        self.emulator: subprocess.Popen | None = None
        self.emulator_epoch_unix_s: float | None = None
        self.stats_json = self.workdir / "linkem-stats.json"
        self.emulator_log = self.workdir / "linkem.log"

    # Addressing ---------------------------------------------------------------
    server_addr = SERVER_ADDR

    def uplink(self, path: int) -> str:
        """Client interface of path `path` (1-based)."""
        return f"up{path}"

    def client_addr(self, path: int) -> str:
        return f"198.18.{path}.2"

    def gateway_addr(self, path: int) -> str:
        """The server-side address of path `path` (the client's next hop)."""
        return f"198.18.{path}.1"

    def uplinks(self) -> list[str]:
        """Client interfaces of all paths, in path order."""
        return [self.uplink(i) for i in range(1, self.paths + 1)]

    def client_addrs(self) -> list[str]:
        return [self.client_addr(i) for i in range(1, self.paths + 1)]

    # Life cycle -----------------------------------------------------------------
    def __enter__(self) -> "Topology":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def start(self) -> None:
        for tool in ("ip", "ethtool"):
            if shutil.which(tool) is None:
                raise TopologyError(f"`{tool}` not found: apt-get install -y iproute2 ethtool")
        self.testbed = Testbed(self.prefix)
        self.client = self.testbed.netns("client")
        self.wan = self.testbed.netns("wan")
        self.server = self.testbed.netns("server")
        for ns in (self.client, self.wan, self.server):
            # IPv6 would add router solicitations and DAD to every path.
            ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1")
            ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1")
            # Replies from the server arrive on every uplink while the main
            # table prefers path 1: strict reverse-path filtering would drop them.
            ns.sysctl("net.ipv4.conf.all.rp_filter", "0")
            ns.sysctl("net.ipv4.conf.default.rp_filter", "0")
        self.server.run("ip", "addr", "add", f"{SERVER_ADDR}/32", "dev", "lo")
        for i in range(1, self.paths + 1):
            self.testbed.veth(self.client, self.uplink(i), self.wan, f"c{i}")
            self.testbed.veth(self.wan, f"s{i}", self.server, f"p{i}")
            for ns, ifname in ((self.client, self.uplink(i)), (self.wan, f"c{i}"),
                               (self.wan, f"s{i}"), (self.server, f"p{i}")):
                ns.run("ethtool", "-K", ifname, *OFFLOADS_OFF, check=False, capture=True)
            self.client.addr(self.uplink(i), f"{self.client_addr(i)}/24")
            self.server.addr(f"p{i}", f"{self.gateway_addr(i)}/24")
            table = str(TABLE_BASE + i)
            self.client.run("ip", "route", "add", f"{SERVER_ADDR}/32", "via", self.gateway_addr(i),
                            "dev", self.uplink(i), "metric", str(i))
            self.client.run("ip", "route", "add", f"{SERVER_ADDR}/32", "via", self.gateway_addr(i),
                            "dev", self.uplink(i), "table", table)
            self.client.run("ip", "rule", "add", "from", self.client_addr(i), "table", table, "pref", table)
            self.client.run("ip", "rule", "add", "oif", self.uplink(i), "table", table, "pref", table)
        if self.scenario is None:
            self._bridge_paths()
        else:
            self._start_emulator()

    def _bridge_paths(self) -> None:
        for i in range(1, self.paths + 1):
            self.wan.run("ip", "link", "add", f"br{i}", "type", "bridge")
            self.wan.run("ip", "link", "set", f"c{i}", "master", f"br{i}")
            self.wan.run("ip", "link", "set", f"s{i}", "master", f"br{i}")
            self.wan.run("ip", "link", "set", f"br{i}", "up")

    def _start_emulator(self) -> None:
        for i in range(1, self.paths + 1):
            for ifname in (f"c{i}", f"s{i}"):
                self.wan.run("ip", "link", "set", ifname, "promisc", "on")
        ready_file = self.workdir / "linkem-ready.json"
        ready_file.unlink(missing_ok=True)
        argv = ["chrt", "-f", str(EMULATOR_RT_PRIORITY)] if self.realtime and shutil.which("chrt") else []
        argv += [str(linkem_binary()), "run", "--scenario", str(self.scenario),
                "--stats-json", str(self.stats_json), "--ready-file", str(ready_file)]
        argv += [arg for i in range(1, self.paths + 1) for arg in ("--pair", f"c{i}:s{i}")]
        if self.rate_scale is not None:
            argv += ["--rate-scale", str(self.rate_scale)]
        if self.stats_interval_ms:
            argv += ["--stats-interval-ms", str(self.stats_interval_ms)]
        log = open(self.emulator_log, "w")
        self.emulator = self.wan.popen(*argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + EMULATOR_START_TIMEOUT_S
        while not ready_file.exists():
            if self.emulator.poll() is not None:
                raise TopologyError(f"linkem exited with {self.emulator.returncode}: "
                                    f"{self.emulator_log.read_text().strip()}")
            if time.monotonic() > deadline:
                raise TopologyError(f"linkem did not start within {EMULATOR_START_TIMEOUT_S} s")
            time.sleep(0.02)
        self.emulator_epoch_unix_s = json.loads(ready_file.read_text())["epoch_unix_s"]

    def emulator_stats(self) -> dict | None:
        """The emulator's latest counters (final ones after `stop_emulator`)."""
        if not self.stats_json.exists():
            return None
        return json.loads(self.stats_json.read_text())

    def stop_emulator(self) -> dict | None:
        """Stops linkem (SIGTERM, it writes its counters) and returns the counters."""
        if self.emulator is not None and self.testbed is not None:
            self.testbed.stop_process(self.emulator, signal.SIGTERM)
            self.emulator = None
        return self.emulator_stats()

    def enable_mptcp(self, subflows: int | None = None) -> None:
        """Kernel MPTCP on client and server with one subflow endpoint per uplink."""
        subflows = min(8, subflows or self.paths)  # 8: the kernel's MPTCP_PM_ADDR_MAX limit
        for ns in (self.client, self.server):
            ns.sysctl("net.mptcp.enabled", "1")
            ns.run("ip", "mptcp", "limits", "set", "subflow", str(subflows), "add_addr_accepted", str(subflows))
        for i in range(1, self.paths + 1):
            self.client.run("ip", "mptcp", "endpoint", "add", self.client_addr(i), "dev", self.uplink(i), "subflow")

    def close(self) -> None:
        """Stops the emulator, removes namespaces and processes, and the work
        directory if this object made it (set TESTBED_KEEP_WORKDIR=1 to keep logs)."""
        try:
            self.stop_emulator()
        finally:
            if self.testbed is not None:
                self.testbed.close()
                self.testbed = None
            if self._own_workdir and not os.environ.get("TESTBED_KEEP_WORKDIR"):
                shutil.rmtree(self.workdir, ignore_errors=True)

    def environment(self) -> dict[str, str]:
        """Names a shell command needs to reach this topology."""
        return {
            "CLIENT_NS": self.client.name, "WAN_NS": self.wan.name, "SERVER_NS": self.server.name,
            "SERVER_ADDR": SERVER_ADDR, "CLIENT_ADDRS": " ".join(self.client_addrs()),
            "UPLINKS": " ".join(self.uplinks()), "TOPOLOGY_WORKDIR": str(self.workdir),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paths", type=int, help="number of paths (default: the scenario's)")
    parser.add_argument("--scenario", help="scenario TOML; without it the paths are plain bridges")
    parser.add_argument("--rate-scale", type=float, help="override the scenario's rate_scale")
    parser.add_argument("--prefix", help="namespace name prefix (default: unique per run)")
    parser.add_argument("--stats-interval-ms", type=int, help="write emulator counters this often")
    parser.add_argument("--exec", dest="command",
                        help="shell command to run (with $CLIENT_NS, $SERVER_NS, $SERVER_ADDR, ... set), "
                             "then tear down; without it, wait for Ctrl-C")
    args = parser.parse_args()
    # Ctrl-C must tear down even if our parent started us with SIGINT ignored
    # (as shells do for background jobs); netns.py then installs its clean-up.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with Topology(paths=args.paths, scenario=args.scenario, rate_scale=args.rate_scale, prefix=args.prefix,
                  stats_interval_ms=args.stats_interval_ms) as topo:
        env = topo.environment()
        for key, value in env.items():
            print(f"{key}={value}", flush=True)
        if args.command:
            status = subprocess.run(args.command, shell=True, env={**os.environ, **env}).returncode
        else:
            print("topology up; Ctrl-C to tear down", flush=True)
            try:
                signal.pause()
            except KeyboardInterrupt:
                pass
            status = 0
        stats = topo.stop_emulator()
        if stats is not None:
            print(json.dumps(stats, indent=2))
    return status


if __name__ == "__main__":
    sys.exit(main())
