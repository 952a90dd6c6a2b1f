"""Where the workspace's programs are, for tests and benchmarks."""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def release_binary(name: str, env_var: str) -> Path:
    """`$env_var` if set, else the workspace's release build of `name`."""
    candidate = Path(os.environ.get(env_var, REPO_ROOT / "target" / "release" / name))
    if not candidate.is_file():
        raise FileNotFoundError(f"{name} binary not found at {candidate}: run "
                                f"`cargo build --release -p {name}` or set {env_var}")
    return candidate
