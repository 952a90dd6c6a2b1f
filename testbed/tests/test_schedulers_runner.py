"""The scheduler benchmark's choice of the best single path (no root needed)."""

from __future__ import annotations

import importlib.util
import sys
from argparse import Namespace
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
_spec = importlib.util.spec_from_file_location("schedulers_run", REPO_ROOT / "benches" / "schedulers" / "run.py")
schedulers_run = importlib.util.module_from_spec(_spec)
sys.modules["schedulers_run"] = schedulers_run  # its dataclasses look themselves up there
_spec.loader.exec_module(schedulers_run)

REFERENCES_ONLY = Namespace(skip_references=False, duplicate=False, baseline_bin=None)


def summary_of(paths: list[tuple[str, float, float]]) -> dict:
    """A scenario summary with (name, rate Mbit/s, one-way delay ms) paths, the same both ways."""
    return {"paths": [{"name": name, **{key: {"rate_mbit": rate, "delay_ms": delay} for key in ("down", "up")}}
                      for name, rate, delay in paths]}


def test_the_lowest_delay_path_runs_alone_too_where_it_is_not_the_highest_rate_one(monkeypatch):
    monkeypatch.setattr(schedulers_run, "scenario_summary",
                        lambda _: summary_of([("geo", 25.0, 290.0), ("lte", 15.0, 35.0)]))
    modes = schedulers_run.modes_for(Path("any.toml"), "download", ["default"], REFERENCES_ONLY)
    assert modes == ["single:geo", "single:lte", "mptcp", "mptund:default"]


def test_one_single_path_runs_where_the_highest_rate_path_is_also_the_nearest(monkeypatch):
    monkeypatch.setattr(schedulers_run, "scenario_summary",
                        lambda _: summary_of([("5g", 30.0, 8.0), ("geo", 10.0, 280.0)]))
    modes = schedulers_run.modes_for(Path("any.toml"), "upload", ["default"], REFERENCES_ONLY)
    assert modes == ["single:5g", "mptcp", "mptund:default"]


def test_the_best_single_path_is_the_one_with_the_higher_median():
    def result(mode: str, goodput: float) -> dict:
        return {"scenario": "s", "direction": "download", "cc": "bbr", "mode": mode, "goodput_mbit": goodput}

    results = [result("single:geo", 11.5), result("single:geo", 11.0), result("single:lte", 13.7),
               result("single:lte", 13.1), result("mptcp", 18.7), result("mptund:default", 12.0)]
    modes = schedulers_run.cells(results)[("s", "download", "bbr")]
    assert sorted(modes) == ["mptcp", "mptund:default", "single"]
    assert {run["mode"] for run in modes["single"].runs} == {"single:lte"}
    assert modes["single"].median() == pytest.approx(13.4)
