"""What a benchmark's result file records about the mptund binary that ran (no root needed)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO_ROOT / "testbed"))
from mptund import binary_record, commit_of_version  # noqa: E402


def test_the_commit_is_the_one_the_version_line_names():
    assert commit_of_version("mptund 0.1.0 (commit e0214ed8a)") == "e0214ed8a"
    assert commit_of_version("mptund 0.1.0 (commit e0214ed8a-dirty)\n") == "e0214ed8a-dirty"
    assert commit_of_version("mptund 0.1.0 (commit unknown)") == "unknown"
    assert commit_of_version("mptund 0.1.0") == "not recorded"


def test_the_record_comes_from_the_binary_not_the_tree(tmp_path):
    # A binary copied out of any checkout still names its own commit.
    fake = tmp_path / "mptund"
    fake.write_text("#!/bin/sh\necho 'mptund 0.1.0 (commit 0123456789abc)'\n")
    fake.chmod(0o755)
    assert binary_record(fake) == {"path": str(fake.resolve()), "version": "mptund 0.1.0 (commit 0123456789abc)",
                                   "commit": "0123456789abc"}
