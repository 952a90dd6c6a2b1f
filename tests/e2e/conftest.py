"""End-to-end tests run as root: they build namespaces, TUN devices and daemons."""

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "testbed"))


def pytest_collection_modifyitems(config, items):
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="end-to-end tests need root (namespaces, TUN)")
        for item in items:
            item.add_marker(skip)
