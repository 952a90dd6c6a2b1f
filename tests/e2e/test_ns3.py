"""Hybrid emulation: the tunnel's three uplinks cross ns-3 (LTE with EPC, Wi-Fi,
point-to-point) through TapBridge, in real time (ns3-tap-bridge/).

At a few Mbit/s per link, so ns-3 keeps up on a two-core machine. Checks that a
TCP transfer each way is byte-exact, that ns-3's own counters saw the tunnel's
datagrams cross every simulated link in both directions, and that the simulator
kept up with the wall clock: the runner's verdict (no lag sample after start-up
over the tolerance), with HardLimit synchronisation aborting the simulation if
it falls further behind than the limit. A second test forces a run to fall
behind (--stallMs blocks the simulator) and checks that the runner fails it and
records why. A third runs the trace-driven scenario (a 5G trace path beside
the LTE model) and checks that the trace path carried what its trace offered;
the trace parsers and generator have checks of their own.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "ns3-tap-bridge"))
from ns3_hybrid import (EXIT_FELL_BEHIND, EXIT_NOT_BYTE_EXACT, EXIT_OK, FELL_BEHIND, KEPT_UP,  # noqa: E402
                        NS3_PROGRAM, SCENARIOS, TRACE_RATE_SCALE, TRACES_DIR, UNJUDGED, HybridBed, exit_code,
                        realtime_verdict, trace_capacity_mbit)

RUNNER = REPO_ROOT / "ns3-tap-bridge" / "ns3_hybrid.py"

LINKS = ["lte", "wifi", "p2p"]
BYTES_EACH_WAY = 3_000_000
DATAGRAM_BYTES = 1400
# Modest rates: p2p 4 Mbit/s, Wi-Fi 802.11a at 6 Mbit/s, LTE with 15 resource
# blocks; round-robin striping then runs each path at about the slowest one's rate.
NS3_ARGS = ["--p2pRate=4Mbps", "--p2pDelay=20ms", "--wifiMode=OfdmRate6Mbps", "--lteRbs=15",
            # Lag above 20 ms after start-up counts as not keeping up; beyond
            # 250 ms HardLimit mode aborts ns-3 (and the test fails on its exit code).
            "--lagToleranceMs=20", "--hardLimitMs=250"]


@pytest.fixture(scope="module")
def ns3_program():
    """Builds the scenario program (the Makefile is a no-op when it is up to date)."""
    build = subprocess.run(["make", "-s", "-C", str(REPO_ROOT / "ns3-tap-bridge")], capture_output=True,
                           text=True)
    assert build.returncode == 0 and NS3_PROGRAM.is_file(), (
        "building ns3-tap-bridge failed; run scripts/setup.sh (installs libns3-dev, ns3):\n"
        + build.stdout + build.stderr)
    return NS3_PROGRAM


def test_transfer_crosses_lte_wifi_and_p2p_in_ns3(ns3_program):
    with HybridBed(links=LINKS, ns3_args=NS3_ARGS) as bed:
        bed.start_daemons()
        transfer = bed.transfer(BYTES_EACH_WAY, "both", timeout=90)
        client, server, ns3 = bed.stop()
        log = bed.ns3_log_path.read_text()

    for direction in ("up", "down"):
        sender, receiver = transfer[direction]["sender"], transfer[direction]["receiver"]
        assert sender["bytes"] == receiver["bytes"] == BYTES_EACH_WAY, (direction, sender, receiver)
        assert sender["sha256"] == receiver["sha256"], direction

    # ns-3's own counters: the daemons' datagrams crossed every simulated link,
    # both ways. Round-robin gives each path a third of the data packets.
    share = BYTES_EACH_WAY / DATAGRAM_BYTES / len(LINKS)
    for link in LINKS:
        counters = ns3["links"][link]
        for direction in ("up", "down"):
            delivered = counters[direction]["delivered_packets"]
            assert delivered > 0.8 * share, (link, direction, counters[direction])
            assert delivered <= counters[direction]["offered_packets"], (link, direction)

    # mptund's view agrees: every path up, carrying data both ways.
    paths = {path["name"]: path for path in client["sessions"][0]["paths"]}
    assert sorted(paths) == sorted(LINKS)
    for name, path in paths.items():
        assert path["state"] == "up", path
        assert path["sent_data_packets"] > 0.8 * share, path
        assert path["received_data_packets"] > 0.8 * share, path
    assert len(server["sessions"][0]["paths"]) == len(LINKS)

    # The simulator kept up with the wall clock, by the runner's verdict: enough
    # probes to judge (2.5 s of them; a faster transfer gives fewer), none of them
    # after start-up over the 20 ms tolerance (these arguments, ns-3 at SCHED_FIFO,
    # load average 3-3.5: max lag 1.2-5.7 ms in 6 of 6 runs). HardLimit aborts
    # ns-3 beyond 250 ms anyway.
    lag = ns3["lag"]
    assert ns3["sync_mode"] == "HardLimit"
    assert lag["samples"] > 500, lag
    assert realtime_verdict(lag) == KEPT_UP, f"ns-3 fell behind real time: {lag}\n{log}"


# How long the forced stall blocks the simulator: far over the tolerance, so the
# verdict cannot depend on this machine's scheduling noise (a few ms to ~30 ms).
STALL_MS = 300
STALL_TOLERANCE_MS = 50


@pytest.mark.parametrize("allow_lag", [False, True], ids=["fails", "allow-lag"])
def test_run_that_falls_behind_fails_or_is_kept_with_allow_lag(ns3_program, tmp_path, allow_lag):
    """The runner with a forced stall: the simulator's thread sleeps STALL_MS of wall
    time at simulated 1.5 s (after the 1 s start-up the lag probe leaves out), as
    an overloaded simulator would. The transfer still arrives intact (TCP recovers),
    but the run must fail with EXIT_FELL_BEHIND, or with --allow-lag pass while
    still saying it fell behind; either way its results file says why."""
    results_file = tmp_path / "results.json"
    # One p2p link and 1 MB: a short run (a 4 Mbit/s link needs 2 s for the
    # transfer alone, so ns-3 is still running at 1.5 s).
    run = subprocess.run([sys.executable, RUNNER, "--links", "p2p", "--bytes", "1000000", "--direction", "down",
                          "--timeout", "60", "--json", results_file,
                          "--ns3-arg=--stallAtS=1.5", f"--ns3-arg=--stallMs={STALL_MS}",
                          f"--ns3-arg=--lagToleranceMs={STALL_TOLERANCE_MS}",
                          *(["--allow-lag"] if allow_lag else [])],
                         capture_output=True, text=True, timeout=180)
    output = run.stdout + run.stderr
    expected_code = EXIT_OK if allow_lag else EXIT_FELL_BEHIND
    assert run.returncode == expected_code, output
    assert "FELL BEHIND" in run.stderr, output
    assert ("kept because of --allow-lag" if allow_lag else "the run FAILS") in run.stderr, output

    results = json.loads(results_file.read_text())
    assert results["verdict"] == FELL_BEHIND and results["exit_code"] == expected_code, results
    assert results["allow_lag"] is allow_lag
    lag = results["realtime"]
    assert lag["max_ms"] >= STALL_MS and lag["samples_over_tolerance"] >= 1, lag
    assert lag["tolerance_ms"] == STALL_TOLERANCE_MS
    assert {"p50_ms", "p99_ms", "samples"} <= lag.keys()
    # The transfer, what ran and on what: the results file stands on its own.
    assert results["transfer"]["down"]["byte_exact"], results["transfer"]
    assert results["transfer"]["down"]["bytes"] == 1_000_000
    assert results["scenario"]["links"] == ["p2p"]
    assert results["scenario"]["ns3"]["stallMs"] == STALL_MS
    assert results["scenario"]["ns3"]["p2pRate"] == "4Mbps"
    assert results["ns3_version"]["built_against"], results["ns3_version"]
    assert results["mptund_binary"]["commit"] not in ("", "not recorded"), results["mptund_binary"]


@pytest.mark.parametrize("byte_exact, verdict, allow_lag, expected", [
    (True, KEPT_UP, False, EXIT_OK),
    (True, FELL_BEHIND, False, EXIT_FELL_BEHIND),
    (True, UNJUDGED, False, EXIT_FELL_BEHIND),
    (True, FELL_BEHIND, True, EXIT_OK),
    (False, KEPT_UP, False, EXIT_NOT_BYTE_EXACT),
    (False, FELL_BEHIND, True, EXIT_NOT_BYTE_EXACT),
])
def test_exit_code_of_a_run(byte_exact, verdict, allow_lag, expected):
    assert exit_code(byte_exact, verdict, allow_lag) == expected


def test_verdict_is_the_max_lag_after_start_up_against_the_tolerance():
    lag = {"samples": 400, "max_ms": 16.1, "p99_ms": 8.6, "tolerance_ms": 10, "kept_up": False}
    assert realtime_verdict(lag) == FELL_BEHIND
    assert realtime_verdict({**lag, "max_ms": 4.0, "kept_up": True}) == KEPT_UP
    assert realtime_verdict({**lag, "samples": 0, "max_ms": 0.0, "kept_up": True}) == UNJUDGED


# The trace-driven link ----------------------------------------------------------
TRACE_BYTES = 8_000_000
# Shares of what the trace offered over the transfer that the 5G trace path must
# carry. Upper: a trace link cannot deliver more than its opportunities carry;
# the 10 % allow for the transfer's window, which the runner knows only to its
# 50 ms polling and ns-3's start-up lag (a few % of a 2-3 s transfer). Lower:
# TCP through the tunnel with the earliest-arrival scheduler keeps the faster
# path's queue full except during slow start and loss recovery: 0.72-0.89 in
# eight runs of this scenario and size (load average 4-6; README).
# Half still fails a link whose opportunities go unused or carry the wrong
# number of bytes (a wrong rate scale is off by a factor of 2 or more).
TRACE_SHARE_MAX = 1.10
TRACE_SHARE_MIN = 0.5


def test_5g_trace_path_beside_lte_carries_what_its_trace_offers(ns3_program, tmp_path):
    """The 5g-trace-lte scenario through the runner: a byte-exact transfer over the
    LTE model and a path replaying a 5G drive trace, in real time, with the trace
    path's throughput within its trace's capacity over the transfer."""
    results_file = tmp_path / "results.json"
    run = subprocess.run([sys.executable, RUNNER, "--scenario", "5g-trace-lte", "--bytes", str(TRACE_BYTES),
                          "--direction", "down", "--timeout", "90", "--json", results_file,
                          # As the first test: 20 ms tolerance, HardLimit beyond 250 ms.
                          "--ns3-arg=--lagToleranceMs=20", "--ns3-arg=--hardLimitMs=250"],
                         capture_output=True, text=True, timeout=240)
    output = run.stdout + run.stderr
    results = json.loads(results_file.read_text())
    assert run.returncode == EXIT_OK, output
    assert results["verdict"] == KEPT_UP, results["realtime"]
    assert results["transfer"]["down"]["byte_exact"] and results["transfer"]["down"]["bytes"] == TRACE_BYTES
    assert results["scenario"]["name"] == "5g-trace-lte" and results["scenario"]["links"] == ["lte", "trace"]

    paths = {path["name"]: path for path in results["paths"]}
    compared = paths["trace"]["trace"]["down"]
    capacity, carried = compared["trace_capacity_mbit"], compared["carried_mbit"]
    assert capacity > 0, compared
    assert TRACE_SHARE_MIN * capacity <= carried <= TRACE_SHARE_MAX * capacity, compared
    # The LTE model carried its part too (earliest-arrival uses both paths).
    assert paths["lte"]["ns3_down_packets"] > 100, paths["lte"]

    # The replay agrees with the file: ns-3's mean rate is the trace's, computed here
    # independently (lines x scaled bytes over the period), and no opportunity
    # carried more than its bytes.
    lines = [int(line) for line in (TRACES_DIR / "5g-midband-drive-down.mahi").read_text().split()]
    bytes_per_opportunity = round(1500 * TRACE_RATE_SCALE)
    expected_mean_mbit = len(lines) * bytes_per_opportunity * 8 / (lines[-1] / 1000) / 1e6
    replay = results["ns3"]["trace_links"]["trace"]
    assert replay["down"]["bytes_per_opportunity"] == bytes_per_opportunity
    assert abs(replay["down"]["mean_mbit"] - expected_mean_mbit) < 1e-3 * expected_mean_mbit, replay["down"]
    for direction in ("up", "down"):
        counters = replay[direction]
        assert counters["sent_packets"] > 0, (direction, counters)
        assert counters["sent_bytes"] <= counters["opportunities_used"] * counters["bytes_per_opportunity"], counters


def test_trace_link_passes_its_own_tests():
    """`make test`: the parsers' tests (Mahimahi and delay-series parsing, looping,
    opportunity lookup, error messages; plain C++) and the device's (departure and
    arrival times under Mahimahi's semantics: shared and spanning opportunities,
    lost idle opportunities and leftover bytes, rate scale, drop-tail, delay series
    and delivery order; a plain ns-3 simulation)."""
    run = subprocess.run(["make", "-s", "-C", str(REPO_ROOT / "ns3-tap-bridge"), "test"], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("all checks passed") == 2, run.stdout


def test_the_trace_generator_writes_every_file_the_scenarios_name_the_same_each_time(tmp_path):
    """The traces are generated for each run (testbed/make_measured_traces.py), not
    committed: the generator must be deterministic and write what the scenarios read."""
    generator = [sys.executable, REPO_ROOT / "testbed" / "make_measured_traces.py", "--out", tmp_path]
    subprocess.run(generator, check=True, capture_output=True)
    run = subprocess.run([*generator, "--check"], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    for scenario in ("5g-trace-lte", "starlink-trace-lte"):
        for argument in SCENARIOS[scenario].ns3_args:
            if argument.startswith(("--traceDown=", "--traceUp=", "--traceDownDelays=", "--traceUpDelays=")):
                name = Path(argument.split("=", 1)[1]).name
                assert (tmp_path / name).is_file(), argument


def test_trace_capacity_over_a_window_counts_partial_bins_in_proportion():
    per_second = [1_000_000, 2_000_000, 500_000]  # bytes the trace offered in seconds 0, 1, 2
    assert trace_capacity_mbit(per_second, 1, 0, 1) == 8.0
    assert trace_capacity_mbit(per_second, 1, 0.5, 1.5) == (0.5 * 1_000_000 + 0.5 * 2_000_000) * 8 / 1e6
    assert trace_capacity_mbit(per_second, 1, 1, 3) == (2_000_000 + 500_000) * 8 / 2 / 1e6
    assert trace_capacity_mbit(per_second, 1, 2, 2) == 0.0
    per_100ms = [100_000] * 5 + [300_000] * 5  # 8 Mbit/s for 0.5 s, then 24 Mbit/s
    assert abs(trace_capacity_mbit(per_100ms, 0.1, 0.25, 0.75) - 16.0) < 1e-9
