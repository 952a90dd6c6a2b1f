"""The aarch64 build (Raspberry Pi 4/5, most vehicle routers) under emulation
(qemu-user-static): it runs, makes keys that the x86 build agrees with, and
accepts the example configurations. scripts/test.sh builds it, and runs the
in-memory session tests for aarch64 under qemu as well."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from conftest import REPO_ROOT
from mptund import mptund_binary

TARGET = "aarch64-unknown-linux-musl"
EM_AARCH64 = 183  # the ELF header's e_machine


def aarch64_binary() -> Path:
    target_dir = Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target"))
    binary = target_dir / TARGET / "debug" / "mptund"
    assert binary.is_file(), \
        f"{binary} missing: cargo build -p mptund --bin mptund --target {TARGET} (scripts/test.sh does)"
    return binary


def run(*argv, input: str | None = None) -> str:
    done = subprocess.run([str(a) for a in argv], input=input, capture_output=True, text=True)
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done.stdout


def test_the_aarch64_binary_runs_under_qemu(tmp_path):
    binary = aarch64_binary()
    header = binary.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == EM_AARCH64
    qemu = shutil.which("qemu-aarch64-static")
    assert qemu, "qemu-aarch64-static missing: scripts/setup.sh installs qemu-user-static"
    host = mptund_binary()
    assert run(qemu, binary, "--version") == run(host, "--version")

    for role in ("server", "client"):
        private = run(qemu, binary, "genkey")
        # The public key the router computes is the one the gateway computes.
        assert run(qemu, binary, "pubkey", input=private) == run(host, "pubkey", input=private)
        (tmp_path / f"{role}.key").write_text(private)
        (tmp_path / f"{role}.key").chmod(0o600)
        shutil.copy(REPO_ROOT / "config" / f"{role}.toml", tmp_path)
        checked = run(qemu, binary, "check-config", tmp_path / f"{role}.toml")
        assert checked.strip() == f"{tmp_path / role}.toml: valid {role} configuration"
