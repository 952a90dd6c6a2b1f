"""Run a pair of mptund daemons (client and server) in namespaces, for tests, the demo
and benchmarks: keys, configuration files, start, wait for the session, stop with the
final per-path counters.

The namespaces and uplinks come from the caller: `direct_topology` below joins client
and server with one veth pair per path; `topology.Topology` puts the link emulator in
between. Both use the same addressing plan:

    client up<i> 198.18.<i>.2/24  ---  server p<i> 198.18.<i>.1/24   (path i = 1..N)
    server public address 198.18.0.1/32 on lo, reachable over every uplink
    tunnel: client 198.18.100.2/24, server 198.18.100.1/24
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from netns import Netns, Testbed
from workspace import release_binary

SERVER_PUBLIC_ADDR = "198.18.0.1"
SERVER_PORT = 51900
CLIENT_TUN_ADDR = "198.18.100.2"
SERVER_TUN_ADDR = "198.18.100.1"
# Unique local IPv6 inside the namespaces only, to carry inner IPv6 as well.
CLIENT_TUN_ADDR6 = "fdd8:6d70:7475::2"
SERVER_TUN_ADDR6 = "fdd8:6d70:7475::1"


def mptund_binary() -> Path:
    """$MPTUND_BIN, else the workspace's release build."""
    return release_binary("mptund", "MPTUND_BIN")


# `mptund 0.1.0 (commit e0214ed8a-dirty)`, as crates/mptund/build.rs makes it.
_VERSION_COMMIT = re.compile(r"\(commit ([0-9A-Za-z._+-]+)\)")


def commit_of_version(version_line: str) -> str:
    """The commit `mptund --version` names; `unknown` when the binary was built outside
    a checkout, `not recorded` for a binary older than the version line's commit."""
    match = _VERSION_COMMIT.search(version_line)
    return match.group(1) if match else "not recorded"


def binary_record(binary: Path | str) -> dict:
    """What a benchmark's result file says about the mptund binary that ran: its path,
    its `--version` line, and the commit that line names. The commit is the binary's
    own (taken when it was built), not the commit of the tree the script runs in,
    which may differ."""
    path = Path(binary).resolve()
    version = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
    return {"path": str(path), "version": version, "commit": commit_of_version(version)}


def direct_topology(bed: Testbed, paths: int) -> tuple[Netns, Netns, list[str]]:
    """Client and server namespaces joined by `paths` veth pairs; returns the client's
    uplink interface names."""
    client = bed.netns("client")
    server = bed.netns("server")
    server.run("ip", "addr", "add", f"{SERVER_PUBLIC_ADDR}/32", "dev", "lo")
    # Replies to an uplink come from the public address, which the client routes via
    # another uplink too: reverse-path filtering must be loose.
    for ns in (client, server):
        ns.sysctl("net.ipv4.conf.all.rp_filter", "2")
        ns.sysctl("net.ipv4.conf.default.rp_filter", "2")
    uplinks = []
    for i in range(1, paths + 1):
        up, down = f"up{i}", f"p{i}"
        bed.veth(client, up, server, down)
        client.addr(up, f"198.18.{i}.2/24")
        server.addr(down, f"198.18.{i}.1/24")
        client.run("ip", "route", "add", f"{SERVER_PUBLIC_ADDR}/32", "via", f"198.18.{i}.1",
                   "dev", up, "metric", str(i))
        uplinks.append(up)
    return client, server, uplinks


def toml_table(heading: str, /, **settings) -> str:
    """A TOML table of the settings that are not None (JSON strings, numbers and
    booleans are TOML ones)."""
    lines = "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items() if value is not None)
    return f"\n[{heading}]\n{lines}"


@dataclass
class DaemonPair:
    """Client and server daemons with generated keys and configuration files."""

    bed: Testbed
    client_ns: Netns
    server_ns: Netns
    uplinks: list[str]
    # None leaves a setting out of the configuration: the daemon's own default.
    scheduler: str | None = "round-robin"
    hold_ms: int | None = 100
    # None: a scratch directory of the test bed, removed when the bed closes.
    workdir: Path | None = None
    log_level: str = "info"
    # The emulated topology disables IPv6 in its namespaces.
    inner_ipv6: bool = True
    stats_interval_ms: int = 5000
    congestion_controller: str | None = "cubic"
    reorder_adaptive: bool | None = True
    duplicate_latency_critical: bool = False
    # Extra `[scheduler]` settings for both daemons, e.g. {"parity_on_lossy_paths": False}.
    scheduler_settings: dict = field(default_factory=dict)
    # Serve Prometheus metrics on this port of each namespace's loopback (None: off).
    metrics_port: int | None = None
    # Extra `[congestion]` settings for both daemons, e.g. {"queue_target_delay_ms": 20}.
    congestion: dict = field(default_factory=dict)
    # Extra `[reorder]` settings for both daemons, e.g. {"equalize_delay": "all-paths"}.
    reorder: dict = field(default_factory=dict)
    # Extra `[timers]` settings for both daemons, e.g. {"rekey_after_ms": 2000}.
    timers: dict = field(default_factory=dict)
    # The server's `[handshake]` settings, e.g. {"load_threshold_per_s": 10}.
    server_handshake: dict = field(default_factory=dict)
    # The client's `server.cipher` (None: the daemon's default, "auto").
    cipher: str | None = None
    # Extra settings of the client's `[[path]]` tables by uplink index, e.g.
    # {1: {"socket_buffer_bytes": 65536}}.
    path_settings: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.workdir is None:
            self.workdir = self.bed.scratch_dir("mptund-")
        self.binary = mptund_binary()
        self.client_proc: subprocess.Popen | None = None
        self.server_proc: subprocess.Popen | None = None

    def _key_pair(self, name: str) -> str:
        private = subprocess.run([self.binary, "genkey"], check=True, capture_output=True,
                                 text=True).stdout
        key_file = self.workdir / f"{name}.key"
        key_file.write_text(private)
        key_file.chmod(0o600)
        return subprocess.run([self.binary, "pubkey"], input=private, check=True,
                              capture_output=True, text=True).stdout.strip()

    def write_configs(self) -> tuple[Path, Path]:
        client_pub = self._key_pair("client")
        server_pub = self._key_pair("server")
        paths = "".join(
            f'\n[[path]]\nname = "{uplink}"\ninterface = "{uplink}"\n'
            + "".join(f"{key} = {json.dumps(value)}\n" for key, value in self.path_settings.get(index, {}).items())
            for index, uplink in enumerate(self.uplinks))
        common = (toml_table("scheduler", name=self.scheduler,
                             duplicate_latency_critical=self.duplicate_latency_critical,
                             **self.scheduler_settings)
                  + toml_table("reorder", max_hold_ms=self.hold_ms, adaptive=self.reorder_adaptive,
                               **self.reorder)
                  + toml_table("congestion", controller=self.congestion_controller, **self.congestion)
                  + toml_table("log", stats_interval_ms=self.stats_interval_ms)
                  + toml_table("timers", **self.timers))
        if self.metrics_port is not None:
            common += f'\n[metrics]\nlisten = "127.0.0.1:{self.metrics_port}"\n'
        # Each daemon's control socket in the work directory, so that parallel runs
        # never meet in /run/mptund.
        control = lambda side: f'\n[control]\nsocket = "{self.workdir / (side + ".sock")}"\n'
        client_addresses = [f"{CLIENT_TUN_ADDR}/24"] + ([f"{CLIENT_TUN_ADDR6}/64"] if self.inner_ipv6 else [])
        server_addresses = [f"{SERVER_TUN_ADDR}/24"] + ([f"{SERVER_TUN_ADDR6}/64"] if self.inner_ipv6 else [])
        allowed = [f"{CLIENT_TUN_ADDR}/32"] + ([f"{CLIENT_TUN_ADDR6}/128"] if self.inner_ipv6 else [])
        client = self.workdir / "client.toml"
        client.write_text(
            'mode = "client"\nprivate_key_file = "client.key"\n'
            f'\n[tun]\nname = "mpt0"\naddresses = {json.dumps(client_addresses)}\n'
            f'\n[server]\nendpoint = "{SERVER_PUBLIC_ADDR}:{SERVER_PORT}"\npublic_key = "{server_pub}"\n'
            + (f'cipher = "{self.cipher}"\n' if self.cipher else "")
            + paths + common + control("client"))
        server = self.workdir / "server.toml"
        server.write_text(
            f'mode = "server"\nprivate_key_file = "server.key"\nlisten = "0.0.0.0:{SERVER_PORT}"\n'
            f'\n[tun]\nname = "mpt0"\naddresses = {json.dumps(server_addresses)}\n'
            f'\n[[peer]]\nname = "client"\npublic_key = "{client_pub}"\n'
            f'allowed_ips = {json.dumps(allowed)}\n'
            + common + control("server")
            + (toml_table("handshake", **self.server_handshake) if self.server_handshake else ""))
        return client, server

    def start(self, timeout: float = 15.0) -> None:
        self.write_configs()
        self.start_server()
        self.start_client()
        self.wait_established(timeout)

    def _start(self, side: str, ns: Netns) -> subprocess.Popen:
        """One daemon, its log appended to `side`.log (a restart keeps the old lines)."""
        env = {**os.environ, "MPTUND_LOG": self.log_level}
        log = open(self.workdir / f"{side}.log", "a")
        setattr(self, f"{side}_log", log)
        return ns.popen(self.binary, "run", "--config", self.workdir / f"{side}.toml",
                        "--stats-file", self.workdir / f"{side}-stats.json",
                        stdout=log, stderr=subprocess.STDOUT, env=env)

    def start_server(self) -> None:
        self.server_proc = self._start("server", self.server_ns)

    def start_client(self) -> None:
        self.client_proc = self._start("client", self.client_ns)

    def wait_established(self, timeout: float) -> None:
        """Until a ping crosses the tunnel (both TUNs up, handshake done)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc, name in ((self.server_proc, "server"), (self.client_proc, "client")):
                if proc.poll() is not None:
                    raise RuntimeError(f"mptund {name} exited with {proc.returncode}:\n"
                                       + self.log(name))
            ping = self.client_ns.run("ping", "-c1", "-W1", SERVER_TUN_ADDR, check=False,
                                      capture=True)
            if ping.returncode == 0:
                return
        raise TimeoutError(f"tunnel not up after {timeout}s\nclient log:\n{self.log('client')}"
                           f"\nserver log:\n{self.log('server')}")

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text() if path.exists() else ""

    def running(self) -> bool:
        return all(p is not None and p.poll() is None for p in (self.client_proc, self.server_proc))

    def stop(self) -> tuple[dict, dict]:
        """SIGTERM both daemons (client first, so it can say goodbye) and return their
        final reports (`--stats-file`). Both are stopped before a failed exit is
        reported."""
        codes = {}
        for side in ("client", "server"):
            proc = getattr(self, f"{side}_proc")
            if proc is not None:
                codes[side] = self.bed.stop_process(proc)
                getattr(self, f"{side}_log").close()
        for side, code in codes.items():
            if code != 0:
                raise RuntimeError(f"mptund {side} exited with {code}:\n{self.log(side)}")
        return (json.loads((self.workdir / "client-stats.json").read_text()),
                json.loads((self.workdir / "server-stats.json").read_text()))

    def control_socket(self, side: str) -> Path:
        """Where the `side` daemon's control socket is (`mptund status --socket`)."""
        return self.workdir / f"{side}.sock"

    def status(self, side: str, timeout: float = 1.0) -> dict | None:
        """The `side` daemon's `status json` from its control socket, or None while it
        cannot answer (starting, stopping)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(timeout)
                conn.connect(str(self.control_socket(side)))
                conn.sendall(b"status json\n")
                chunks = []
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
            return json.loads(b"".join(chunks))
        except (OSError, ValueError):
            return None

    def snapshot(self, side: str) -> dict | None:
        """The daemon's latest periodic report (`--stats-file`), if written yet."""
        path = self.workdir / f"{side}-stats.json"
        return json.loads(path.read_text()) if path.exists() else None

    def cpu_seconds(self) -> dict[str, float]:
        """User+system CPU time so far of each daemon (from /proc, in seconds)."""
        ticks = os.sysconf("SC_CLK_TCK")
        result = {}
        for name, proc in (("client", self.client_proc), ("server", self.server_proc)):
            # `ip netns exec` execs the command, so the PID is the daemon's own.
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            result[name] = (int(fields[11]) + int(fields[12])) / ticks
        return result

