"""Network namespaces for tests and benchmarks that clean up after themselves.

Every host a test needs lives in a namespace this module creates under a per-run
prefix, so parallel runs never collide, and every namespace and every process it
started is removed again when the `Testbed` closes: on normal exit, on an exception,
at interpreter exit, and on SIGINT/SIGTERM. Processes are ended by PID, never by name.
Only addresses from 198.18.0.0/15 (RFC 2544 benchmarking) are meant to be used here.
"""

from __future__ import annotations

import atexit
import os
import random
import signal
import shutil
import string
import subprocess
import tempfile
import time
from pathlib import Path

_LIVE_TESTBEDS: list["Testbed"] = []
_HANDLERS_INSTALLED = False


def _close_all_and_reraise(signum, _frame):
    for bed in list(_LIVE_TESTBEDS):
        bed.close()
    # Restore the default action and re-deliver, so the exit status says "killed by signal".
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_handlers() -> None:
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(lambda: [bed.close() for bed in list(_LIVE_TESTBEDS)])
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(signum, _close_all_and_reraise)


def unique_prefix() -> str:
    """A short per-run prefix: namespace names must stay well under 255 bytes and
    interface names derived from them under 15."""
    alphabet = string.ascii_lowercase + string.digits
    pid36 = ""
    pid = os.getpid()
    while pid:
        pid, digit = divmod(pid, 36)
        pid36 = alphabet[digit] + pid36
    return "mpt" + pid36 + "".join(random.choice(alphabet) for _ in range(3))


class Netns:
    """One network namespace: run commands in it and start tracked processes."""

    def __init__(self, testbed: "Testbed", name: str):
        self.testbed = testbed
        self.name = name

    def _argv(self, argv) -> list[str]:
        return ["ip", "netns", "exec", self.name, *[str(a) for a in argv]]

    def run(self, *argv, check=True, capture=False, timeout=60, input=None):
        return subprocess.run(
            self._argv(argv),
            check=check,
            capture_output=capture,
            text=True,
            timeout=timeout,
            input=input,
        )

    def output(self, *argv, timeout=60) -> str:
        return self.run(*argv, capture=True, timeout=timeout).stdout

    def popen(self, *argv, **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(self._argv(argv), **kwargs)
        self.testbed._processes.append(proc)
        return proc

    def addr(self, ifname: str, cidr: str) -> None:
        self.run("ip", "addr", "add", cidr, "dev", ifname)
        self.run("ip", "link", "set", ifname, "up")

    def sysctl(self, key: str, value: str) -> None:
        self.run("sysctl", "-q", "-w", f"{key}={value}")

    def __repr__(self) -> str:
        return f"Netns({self.name})"


class Testbed:
    """A set of namespaces and processes that lives exactly as long as this object."""

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, prefix: str | None = None):
        self.prefix = prefix or unique_prefix()
        self._namespaces: list[Netns] = []
        self._processes: list[subprocess.Popen] = []
        self._scratch_dirs: list[Path] = []
        self._closed = False
        _install_handlers()
        _LIVE_TESTBEDS.append(self)

    def __enter__(self) -> "Testbed":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def netns(self, role: str) -> Netns:
        name = f"{self.prefix}-{role}"
        subprocess.run(["ip", "netns", "add", name], check=True)
        ns = Netns(self, name)
        self._namespaces.append(ns)
        ns.run("ip", "link", "set", "lo", "up")
        return ns

    def veth(self, a: Netns, a_if: str, b: Netns, b_if: str, mtu: int = 1500) -> None:
        # Create inside `a` so the pair never appears in the caller's namespace.
        a.run("ip", "link", "add", a_if, "mtu", str(mtu), "type", "veth",
              "peer", "name", b_if, "netns", b.name, "mtu", str(mtu))
        a.run("ip", "link", "set", a_if, "up")
        b.run("ip", "link", "set", b_if, "up")

    def scratch_dir(self, prefix: str) -> Path:
        """A temporary directory removed on close (kept if TESTBED_KEEP_WORKDIR is set),
        so that no keys or logs pile up in /tmp run after run."""
        path = Path(tempfile.mkdtemp(prefix=prefix))
        self._scratch_dirs.append(path)
        return path

    def stop_process(self, proc: subprocess.Popen, sig=signal.SIGTERM, timeout=10.0) -> int | None:
        """Signal one of our processes by PID and wait for it; SIGKILL if it lingers."""
        if proc.poll() is None:
            try:
                proc.send_signal(sig)
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
            except ProcessLookupError:
                pass
        return proc.returncode

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for proc in reversed(self._processes):
            try:
                self.stop_process(proc, timeout=5.0)
            except Exception:  # noqa: BLE001 - clean-up must go on whatever happened
                pass
        for ns in reversed(self._namespaces):
            subprocess.run(["ip", "netns", "delete", ns.name], check=False,
                           capture_output=True)
        # veth peers and TUN devices vanish with their namespaces; wait until the
        # kernel has really removed the namespaces so a next run starts clean.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            listed = subprocess.run(["ip", "netns", "list"], capture_output=True,
                                    text=True).stdout
            if not any(ns.name in listed for ns in self._namespaces):
                break
            time.sleep(0.05)
        if not os.environ.get("TESTBED_KEEP_WORKDIR"):
            for path in self._scratch_dirs:
                shutil.rmtree(path, ignore_errors=True)
        if self in _LIVE_TESTBEDS:
            _LIVE_TESTBEDS.remove(self)
