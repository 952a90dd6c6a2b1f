"""The inner flow's TCP state as `ss -tin` prints it, for the trace tools."""

from __future__ import annotations

import re


def field(pattern: str, text: str) -> str:
    """The first group of `pattern` in `text`, or "" when it does not occur."""
    match = re.search(pattern, text)
    return match.group(1) if match else ""


def data_connection(ss_output: str) -> str:
    """The `ss -tin` entry of the connection that sent the most (not iperf's control one)."""
    entries = re.split(r"\n(?=\S)", ss_output)
    return max(entries, key=lambda entry: int(field(r"bytes_sent:(\d+)", entry) or 0), default="")
