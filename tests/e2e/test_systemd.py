"""The Debian package and mptund@.service under a real systemd.

A Debian 12 root file system (debootstrap, cached in /var/cache/mptund-test and
rebuilt when missing) boots under `systemd-nspawn --boot` with a throw-away overlay
on top. The container's network namespace is the test bed's server host, so the
daemon that systemd runs in it, with the unit's full hardening, serves a client
daemon outside the container over real veths, and a real TCP transfer crosses the
tunnel. The package is built from the workspace's release binary with cargo-deb
and installed with dpkg.

This machine's PID 1 need not be systemd: nspawn runs with `--register=no
--keep-unit` (no machined, no scope unit), with `--system-call-filter=bpf` so that
the container's systemd can enforce the unit's DeviceAllow= (a BPF program), and
with CAP_NET_ADMIN, which nspawn leaves out of a container's bounding set unless it
makes the network namespace itself.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from mptund import CLIENT_TUN_ADDR, SERVER_TUN_ADDR, DaemonPair, direct_topology
from netns import Testbed
from test_ops import wait_for
from test_tunnel import assert_byte_exact, result, start_receiver, start_sender

CACHE = Path(os.environ.get("MPTUND_TEST_CACHE", "/var/cache/mptund-test"))
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# systemd as PID 1; ip for the checks; procps, the package's dependency (the
# container has no network to fetch it from, so it is there already).
INCLUDE = ("systemd", "systemd-sysv", "dbus", "iproute2", "procps")
UNIT = "mptund@server.service"
# Where the test's files (the .deb, the configuration) appear in the container.
STAGING = "/mnt/mptund-test"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# The unit's WatchdogSec= and RestartSec=.
WATCHDOG_SEC = 10
RESTART_SEC = 2


def cached_rootfs() -> Path:
    """The Debian root file system, built once per suite, mirror and package list."""
    key = hashlib.sha256(f"{SUITE} {MIRROR} {' '.join(INCLUDE)}".encode()).hexdigest()[:12]
    root = CACHE / f"{SUITE}-{key}"
    if (root / "usr" / "lib" / "systemd" / "systemd").exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = CACHE / f"{root.name}.partial-{os.getpid()}"
    try:
        build = subprocess.run(["nice", "-n", "19", "debootstrap", "--variant=minbase",
                                f"--include={','.join(INCLUDE)}", SUITE, partial, MIRROR],
                               capture_output=True, text=True)
        assert build.returncode == 0, f"debootstrap failed:\n{build.stdout[-3000:]}{build.stderr}"
        partial.rename(root)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return root


def build_deb(out: Path) -> Path:
    """The package, from the release binary scripts/test.sh has built (which keeps
    line tables for backtraces: the packaged copy is stripped)."""
    build = subprocess.run(["cargo", "deb", "-p", "mptund", "--no-build", "--strip", "-o", out],
                           cwd=REPO_ROOT, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    (deb,) = out.glob("mptund_*.deb")
    return deb


def _killed_with_parent() -> None:
    """In the child before exec: SIGKILL when the test process dies, however it
    dies; the container's processes die with nspawn."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Container:
    """A booted Debian container in network namespace `netns`; commands run in it
    through nsenter. Its root is a tmpfs overlay: the cache stays untouched."""

    def __init__(self, root: Path, netns: str, staging: Path, tun: Path, log: Path):
        self.log = log
        # Not through `ip netns exec`, which remounts /sys without the cgroup
        # file systems nspawn needs.
        with open(log, "w") as output:
            self.proc = subprocess.Popen(
                ["systemd-nspawn", "--quiet", "--boot", f"--directory={root}",
                 "--volatile=overlay", "--register=no", "--keep-unit",
                 f"--machine={netns}", f"--network-namespace-path=/run/netns/{netns}",
                 f"--bind={tun}:/dev/net/tun", "--capability=CAP_NET_ADMIN",
                 f"--bind-ro={staging}:{STAGING}", "--system-call-filter=bpf",
                 "--console=pipe"],
                stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                preexec_fn=_killed_with_parent)
        try:
            self.leader = wait_for(self._find_leader, 20, "the container's init")
            # "offline" until systemd's own socket exists; then --wait waits for the boot.
            state = wait_for(self.booted_state, 90, "the container to boot", interval=0.2)
            assert state in ("running", "degraded"), state + self.log.read_text()
        except BaseException:
            self.stop()
            raise

    def booted_state(self) -> str | None:
        state = self.run("systemctl", "is-system-running", "--wait", check=False,
                         timeout=90).stdout.strip()
        return None if state == "offline" else state

    def _find_leader(self) -> int | None:
        """The container's PID 1: nspawn's child that is 1 in its own PID namespace."""
        assert self.proc.poll() is None, f"nspawn exited:\n{self.log.read_text()}"
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                status = dict(line.split(":\t", 1) for line in
                              (entry / "status").read_text().splitlines() if ":\t" in line)
            except OSError:
                continue
            if int(status.get("PPid", "0")) == self.proc.pid and \
                    status.get("NSpid", "").split()[-1:] == ["1"]:
                return int(entry.name)
        return None

    def run(self, *argv, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        done = subprocess.run(["nsenter", f"--target={self.leader}", "--all", *map(str, argv)],
                              capture_output=True, text=True, timeout=timeout)
        if check:
            assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
        return done

    def output(self, *argv) -> str:
        return self.run(*argv).stdout

    def show(self, *properties: str) -> dict[str, str]:
        text = self.output("systemctl", "show", UNIT, *(f"--property={p}" for p in properties))
        return dict(line.split("=", 1) for line in text.splitlines())

    def journal(self) -> str:
        return self.output("journalctl", "--unit", UNIT, "--no-pager", "--output=cat")

    def stop(self) -> None:
        """Powers the container off (nspawn turns SIGTERM into a shutdown)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


class Gateway:
    """The container as the server host, the client daemon outside it."""

    def __init__(self, bed: Testbed, workdir: Path):
        client_ns, server_ns, uplinks = direct_topology(bed, 2)
        self.server_ns = server_ns
        self.staging = workdir / "staging"
        self.staging.mkdir()
        self.pair = DaemonPair(bed, client_ns, server_ns, uplinks, workdir=workdir)
        _, server_toml = self.pair.write_configs()
        # The packaged daemon uses the default control socket, /run/mptund/server.sock.
        self.server_config = re.sub(r"\n\[control\]\nsocket = .*\n", "\n", server_toml.read_text())
        self.stage("server.toml", self.server_config)
        self.stage("server.key", (workdir / "server.key").read_text())
        self.deb = build_deb(self.staging)
        # The TUN clone device with Debian's mode, 0666 (udev's default rule), which
        # the unit's user needs; the host's own node may be root-only.
        tun = workdir / "tun"
        os.mknod(tun, stat.S_IFCHR | 0o600, os.makedev(10, 200))
        tun.chmod(0o666)
        self.container = Container(cached_rootfs(), server_ns.name, self.staging, tun,
                                   workdir / "container.log")

    def stage(self, name: str, text: str) -> None:
        (self.staging / name).write_text(text)

    def install_config(self) -> None:
        # The unit runs as mptund: it reads the configuration through its group and
        # owns its key, which it refuses if group or others may read it.
        self.container.run("install", "-m", "0640", "-o", "root", "-g", "mptund",
                           f"{STAGING}/server.toml", "/etc/mptund/server.toml")
        self.container.run("install", "-m", "0600", "-o", "mptund", "-g", "mptund",
                           f"{STAGING}/server.key", "/etc/mptund/server.key")

    def tun_exists(self) -> bool:
        return self.server_ns.run("ip", "link", "show", "mpt0", check=False,
                                  capture=True).returncode == 0

    def wait_for_tunnel(self, timeout: float, what: str) -> None:
        """Until a ping from the client crosses the tunnel (the server's daemon is
        systemd's, so DaemonPair.wait_established cannot watch it)."""
        assert self.pair.client_proc.poll() is None, self.pair.log("client")
        wait_for(lambda: self.pair.client_ns.run("ping", "-c1", "-W1", SERVER_TUN_ADDR,
                                                 check=False, capture=True).returncode == 0,
                 timeout, what)

    def status(self, *args: str) -> str:
        return self.container.output("mptund", "status", *args)


@pytest.fixture(scope="module")
def gateway():
    workdir = Path(tempfile.mkdtemp(prefix="mptund-systemd-"))
    with Testbed() as bed:
        gateway = None
        try:
            gateway = Gateway(bed, workdir)
            yield gateway
        finally:
            if gateway is not None:
                if gateway.pair.client_proc is not None:
                    bed.stop_process(gateway.pair.client_proc)
                gateway.container.stop()
    shutil.rmtree(workdir, ignore_errors=True)


def test_lintian_finds_no_errors_in_the_package(gateway):
    check = subprocess.run(["lintian", "--fail-on", "error", gateway.deb], capture_output=True,
                           text=True)
    print(check.stdout)
    assert check.returncode == 0, check.stdout + check.stderr
    assert not [line for line in check.stdout.splitlines() if line.startswith("E:")]


def test_the_package_installs_the_binary_the_unit_the_examples_and_a_private_etc(gateway):
    box = gateway.container
    assert box.run("test", "-e", "/etc/mptund", check=False).returncode != 0
    box.run("dpkg", "-i", f"{STAGING}/{gateway.deb.name}")
    assert box.output("dpkg-query", "-W", "-f=${Status}", "mptund") == "install ok installed"
    assert box.output("stat", "-c", "%a %U %G", "/etc/mptund").strip() == "750 root mptund"
    user = box.output("getent", "passwd", "mptund").strip().split(":")
    assert int(user[2]) != 0 and user[6] == "/usr/sbin/nologin", user
    assert box.output("mptund", "--version").startswith("mptund ")
    for example in ("client.toml", "server.toml"):
        box.run("test", "-s", f"/usr/share/doc/mptund/examples/{example}")
    assert "ExecStart=/usr/bin/mptund run" in box.output("systemctl", "cat", "mptund@.service")
    gateway.install_config()


def test_start_reports_active_only_once_the_tun_exists(gateway):
    box = gateway.container
    assert not gateway.tun_exists()
    # Type=notify: `systemctl start` returns when the daemon has sent READY=1.
    started = box.run("systemctl", "start", UNIT, check=False)
    assert started.returncode == 0, started.stderr + box.journal()
    assert gateway.tun_exists(), "systemd reported the unit started before the TUN existed"
    state = box.show("Type", "ActiveState", "SubState", "StatusErrno")
    assert state == {"Type": "notify", "ActiveState": "active", "SubState": "running",
                     "StatusErrno": "0"}, state


def test_a_transfer_through_the_hardened_unit(gateway):
    box = gateway.container
    hardening = box.show("CapabilityBoundingSet", "ProtectSystem", "NoNewPrivileges",
                         "DevicePolicy", "RestrictAddressFamilies", "SystemCallFilter")
    assert hardening["CapabilityBoundingSet"] == "cap_net_admin cap_net_raw", hardening
    assert hardening["ProtectSystem"] == "strict" and hardening["NoNewPrivileges"] == "yes"
    assert hardening["DevicePolicy"] == "closed" and hardening["SystemCallFilter"], hardening
    # The daemon cannot write outside /run/mptund.
    pid = box.show("MainPID")["MainPID"]
    # It runs as the package's user, with CAP_NET_ADMIN (12) and CAP_NET_RAW (13)
    # and nothing else, in every capability set, and within its resource limits.
    status = dict(line.split(":\t", 1) for line in
                  box.output("cat", f"/proc/{pid}/status").splitlines() if ":\t" in line)
    uid = box.output("id", "-u", "mptund").strip()
    assert status["Uid"].split() == [uid] * 4 and uid != "0", status["Uid"]
    only_net_admin_and_raw = f"{(1 << 12) | (1 << 13):016x}"
    # (Ambient capabilities are inheritable ones too.)
    for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert status[capabilities].strip() == only_net_admin_and_raw, \
            (capabilities, status[capabilities])
    limits = box.show("LimitNOFILE", "MemoryMax", "TasksMax", "User")
    assert limits == {"LimitNOFILE": "1024", "MemoryMax": str(512 << 20), "TasksMax": "16",
                      "User": "mptund"}, limits
    mounts = box.output("cat", f"/proc/{pid}/mountinfo")
    assert re.search(r"^\S+ \S+ \S+ / / ro[,\s]", mounts, re.M), mounts
    # StateDirectory=: the one other place it may write, its own and private.
    assert box.output("stat", "-c", "%a %U", "/var/lib/mptund").strip() == "700 mptund"

    gateway.pair.start_client()
    gateway.wait_for_tunnel(20, "the tunnel to the hardened unit")
    count = 20_000_000
    up_rx = start_receiver(gateway.server_ns, SERVER_TUN_ADDR, 5301)
    down_rx = start_receiver(gateway.pair.client_ns, CLIENT_TUN_ADDR, 5302)
    up_tx = start_sender(gateway.pair.client_ns, SERVER_TUN_ADDR, 5301, count, seed=51)
    down_tx = start_sender(gateway.server_ns, CLIENT_TUN_ADDR, 5302, count, seed=52)
    assert_byte_exact(result(up_tx), result(up_rx), count)
    assert_byte_exact(result(down_tx), result(down_rx), count)

    # The control socket works under the hardening: one line per path, both up.
    rows = [line.split("\t") for line in gateway.status("--dump").splitlines()]
    # The server learns a path by its remote address: the client's uplinks.
    remotes = sorted(row[5].split(":")[0] for row in rows)
    assert remotes == [f"198.18.{i}.2" for i in range(1, len(gateway.pair.uplinks) + 1)], rows
    assert all(row[0] == "client" and row[4] == "up" for row in rows), rows
    # The TUN has no link-local address, so the kernel sends nothing of its own
    # into the tunnel for the peer to drop.
    assert "fe80" not in gateway.server_ns.output("ip", "-6", "addr", "show", "dev", "mpt0")
    assert json.loads(gateway.status("--json"))["drops"]["no_route"] == 0
    exposure = box.output("systemd-analyze", "security", "--no-pager", UNIT)
    score = float(re.search(r"Overall exposure level for \S+: (\d+\.\d+)", exposure)[1])
    print(f"systemd-analyze security {UNIT}: {score}")
    # 2.3 as root with the same sandbox (systemd 252); the dedicated user, private
    # /dev, mounts and IPC, the /proc subset and no @resources take it to 1.6.
    assert score < 2.0, exposure


def test_reload_applies_a_changed_configuration(gateway):
    box = gateway.container
    pid = box.show("MainPID")["MainPID"]
    assert json.loads(gateway.status("--json"))["sessions"][0]["scheduler"] == "round-robin"
    gateway.stage("server.toml", gateway.server_config.replace(
        'name = "round-robin"', 'name = "min-rtt"'))
    gateway.install_config()
    box.run("systemctl", "reload", UNIT)
    wait_for(lambda: "new configuration is in effect" in box.journal(), 10, "the reload")
    assert json.loads(gateway.status("--json"))["sessions"][0]["scheduler"] == "min-rtt"
    assert box.show("MainPID", "ActiveState") == {"MainPID": pid, "ActiveState": "active"}


def test_the_watchdog_restarts_a_stopped_daemon(gateway):
    box = gateway.container
    before = box.show("MainPID", "NRestarts")
    stopped_at = time.monotonic()
    box.run("kill", "-STOP", before["MainPID"])

    def restarted():
        now = box.show("MainPID", "NRestarts", "ActiveState", "SubState")
        return now if now["MainPID"] not in ("0", before["MainPID"]) and \
            now["SubState"] == "running" else None
    after = wait_for(restarted, 45, "the watchdog to restart the daemon", interval=0.5)
    elapsed = time.monotonic() - stopped_at
    # The daemon's last ping came at most WatchdogSec/2 before the SIGSTOP.
    assert elapsed >= WATCHDOG_SEC / 2 + RESTART_SEC, \
        f"restarted after {elapsed:.1f}s, before the watchdog could expire"
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1, after
    assert "Watchdog timeout" in box.journal()
    print(f"watchdog: SIGSTOP to running again in {elapsed:.1f}s")
    # The restarted server takes the client's next handshake: the tunnel carries again.
    gateway.wait_for_tunnel(30, "the tunnel after the restart")


def test_stop_exits_cleanly(gateway):
    box = gateway.container
    earlier = len(box.journal().splitlines())
    box.run("systemctl", "stop", UNIT)
    assert box.show("ActiveState", "Result") == {"ActiveState": "inactive", "Result": "success"}
    stopping = box.journal().splitlines()[earlier:]
    # SIGTERM: the daemon says goodbye and exits 0 by itself, well within
    # TimeoutStopSec; systemd reports neither a failure nor a kill.
    assert any("shutting down" in line for line in stopping), stopping
    assert f"{UNIT}: Deactivated successfully." in stopping, stopping
    assert not [line for line in stopping if "code=" in line or "SIGKILL" in line], stopping
    assert not gateway.tun_exists()
