"""The baseline runner's result arithmetic, on synthetic iperf3 output (no root needed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO_ROOT / "benches" / "baselines"))
import run  # noqa: E402


def iperf3_output(interval_mbit: list[float], retransmits: int = 7) -> dict:
    intervals = [{"sum": {"start": i * run.INTERVAL_S, "bits_per_second": mbit * 1e6}}
                 for i, mbit in enumerate(interval_mbit)]
    mean_bps = sum(interval_mbit) / len(interval_mbit) * 1e6
    return {"intervals": intervals,
            "end": {"sum_received": {"bits_per_second": mean_bps},
                    "sum_sent": {"retransmits": retransmits}, "sender_tcp_congestion": "cubic"}}


def test_summary_computes_ratios_and_the_longest_stall():
    # Mean 15 Mbit/s; a stall is < 1.5 Mbit/s: three intervals in a row, then one.
    series = [20, 20, 0, 1, 0, 20, 20, 0, 20, 20, 20, 20]
    summary = run.summarise(iperf3_output(series), rates_mbit=[20, 10], path_rate_mbit=20)
    assert summary["goodput_mbit"] == 13.417
    assert summary["ratio_to_sum"] == round(13.417 / 30, 4)
    assert summary["ratio_to_path"] == round(13.417 / 20, 4)
    assert summary["longest_stall_s"] == 1.5
    assert summary["retransmissions"] == 7
    assert len(summary["intervals"]) == len(series)


def test_summary_passes_iperf3_errors_on():
    assert run.summarise({"error": "iperf3 exited 1: boom"}, [10], None) == {"error": "iperf3 exited 1: boom"}
    assert "error" in run.summarise({"start": {}}, [10], None)


def test_report_lists_single_paths_before_mptcp(tmp_path):
    for mode, goodput in (("mptcp", 30.0), ("single:b", 10.0), ("single:a", 12.0)):
        result = {"scenario": "s", "cc": "cubic", "mode": mode, "goodput_mbit": goodput,
                  "ratio_to_sum": goodput / 40, "retransmissions": 3, "longest_stall_s": 0.0}
        if mode.startswith("single"):
            result["ratio_to_path"] = goodput / 20
        (tmp_path / f"{mode.replace(':', '-')}.json").write_text(json.dumps(result))
    rows = run.write_report(tmp_path).splitlines()[2:]
    assert [row.split("|")[3].strip() for row in rows] == ["single:a", "single:b", "mptcp"]
    assert "| 60% | 30% |" in rows[0]
    assert "|  | 75% |" in rows[2]
