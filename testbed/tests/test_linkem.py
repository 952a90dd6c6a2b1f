"""Validation of the linkem emulator on real namespaces (run as root).

Each test builds its own client / wan / server namespaces under a per-run
prefix (see testbed/netns.py), which are removed even when the test fails.
Measured figures are printed (pytest -s) and, if LINKEM_VALIDATION_REPORT
names a file, merged into it as JSON; crates/linkem/README.md quotes them.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

TESTBED = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TESTBED))
from topology import Topology, run_tracked  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

PROBE = str(TESTBED / "udp_probe.py")


def record(name: str, value) -> None:
    print(f"FIGURE {name} = {value}")
    report = os.environ.get("LINKEM_VALIDATION_REPORT")
    if report:
        path = Path(report)
        figures = json.loads(path.read_text()) if path.exists() else {}
        figures[name] = value
        path.write_text(json.dumps(figures, indent=2))


def write_scenario(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text('name = "validation"\n' + body)
    return path


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def test_ping_rtt_is_twice_the_one_way_delay(tmp_path):
    one_way_ms = 10.0
    scenario = write_scenario(tmp_path, f"[[paths]]\nname = \"a\"\nrate_mbit = 50\ndelay_ms = {one_way_ms}\n")
    with Topology(scenario=scenario) as topo:
        # The first ping also waits for ARP; warm up, then measure 200 echoes at low load.
        topo.client.run("ping", "-c", "2", "-i", "0.2", "-q", topo.server_addr, capture=True)
        output = run_tracked(topo.client, "ping", "-c", "200", "-i", "0.02", topo.server_addr).stdout
    rtts = [float(value) for value in re.findall(r"time=([\d.]+) ms", output)]
    assert len(rtts) == 200, output[-500:]
    errors = [abs(rtt - 2 * one_way_ms) for rtt in rtts]
    median_error, p90_error = statistics.median(errors), percentile(errors, 0.90)
    record("ping_rtt_median_error_ms", round(median_error, 3))
    record("ping_rtt_p90_error_ms", round(p90_error, 3))
    record("ping_rtt_p99_error_ms", round(percentile(errors, 0.99), 3))
    assert min(rtts) >= 2 * one_way_ms, "an echo came back faster than the configured delay"
    # The median is the emulator's own accuracy. The tail is mostly the virtual machine's
    # scheduling jitter, which linkem cannot remove: on this idle 2-core VM, consecutive
    # runs gave p90 0.4-2.7 ms and p99 0.6-7.7 ms. The p90 bound only catches a broken
    # emulator; the p99 is recorded, not asserted.
    assert median_error < 1.0, f"median {median_error:.3f} ms"
    assert p90_error < 5.0, f"p90 {p90_error:.3f} ms"


def test_one_tcp_flow_reaches_90_percent_of_the_rate(tmp_path):
    rate_mbit, one_way_ms = 50, 20
    scenario = write_scenario(
        tmp_path, f"[[paths]]\nname = \"a\"\nrate_mbit = {rate_mbit}\ndelay_ms = {one_way_ms}\nqueue_ms = 100\n")
    with Topology(scenario=scenario) as topo:
        server = topo.server.popen("iperf3", "-s", "-1", "-B", topo.server_addr, stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        # 12 s, the first 2 s (slow start) left out of the average.
        result = json.loads(run_tracked(topo.client, "iperf3", "-c", topo.server_addr, "-t", "12", "-O", "2",
                                        "-J", "-C", "cubic", timeout=60).stdout)
        server.wait(timeout=10)
        stats = topo.stop_emulator()
    goodput_mbit = result["end"]["sum_received"]["bits_per_second"] / 1e6
    ratio = goodput_mbit / rate_mbit
    record("tcp_50mbit_20ms_goodput_mbit", round(goodput_mbit, 2))
    record("tcp_50mbit_20ms_ratio", round(ratio, 3))
    record("emulator_cpu_percent_at_50mbit", round(stats["cpu_percent"], 1))
    assert ratio >= 0.90, f"goodput {goodput_mbit:.1f} Mbit/s is {ratio:.1%} of {rate_mbit}"
    assert ratio <= 1.01, f"goodput {goodput_mbit:.1f} Mbit/s exceeds the configured rate"
    up = stats["paths"][0]["up"]
    assert up["dropped_oversize"] == 0 and up["send_errors"] == 0


def probe(topo: Topology, count: int, interval_ms: float, duration_s: float) -> dict:
    echo = topo.server.popen("python3", PROBE, "echo", "--bind", topo.server_addr, "--duration", str(duration_s))
    time.sleep(0.3)
    result = json.loads(run_tracked(topo.client, "python3", PROBE, "send", "--to", topo.server_addr,
                                    "--count", str(count), "--interval-ms", str(interval_ms),
                                    timeout=duration_s + 30).stdout)
    echo.wait(timeout=duration_s + 5)
    return result


def test_configured_loss_shows_up_as_loss(tmp_path):
    loss_percent = 5.0
    scenario = write_scenario(
        tmp_path, f"seed = 4\n[[paths]]\nname = \"a\"\ndelay_ms = 2\nup = {{ loss_percent = {loss_percent} }}\n")
    with Topology(scenario=scenario, stats_interval_ms=500) as topo:
        topo.client.run("ping", "-c", "3", "-i", "0.2", "-q", topo.server_addr, check=False, capture=True)
        result = probe(topo, count=2000, interval_ms=2, duration_s=6)
        periodic = topo.emulator_stats()
        stats = topo.stop_emulator()
    # The periodic report was written while running and already counted drops.
    assert periodic is not None and periodic["paths"][0]["up"]["dropped_random_loss"] > 0
    lost = sum(1 for rtt in result["rtt_ms"] if rtt is None)
    measured_percent = 100 * lost / len(result["rtt_ms"])
    record("configured_loss_percent", loss_percent)
    record("measured_loss_percent", round(measured_percent, 2))
    # 2000 probes at 5 %: standard deviation ~0.5 points; allow 4 of them.
    assert abs(measured_percent - loss_percent) < 2.0
    counters = stats["paths"][0]["up"]
    # Every lost probe is a counted random-loss drop (ping and ARP frames may add a few).
    assert lost <= counters["dropped_random_loss"] <= lost + 10
    assert stats["paths"][0]["down"]["dropped_random_loss"] == 0


def test_outage_stops_all_traffic_for_its_interval(tmp_path):
    start_ms, duration_ms, one_way_ms = 2500, 1000, 5
    scenario = write_scenario(
        tmp_path,
        f"[[paths]]\nname = \"a\"\nrate_mbit = 20\ndelay_ms = {one_way_ms}\n"
        f"outages = [{{ start_ms = {start_ms}, duration_ms = {duration_ms} }}]\n")
    with Topology(scenario=scenario) as topo:
        epoch = topo.emulator_epoch_unix_s
        result = probe(topo, count=1000, interval_ms=5, duration_s=8)
        stats = topo.stop_emulator()
    outage_start, outage_end = epoch + start_ms / 1e3, epoch + (start_ms + duration_ms) / 1e3
    # Clock readings in two processes and the loop's wake-up: 2 ms of slack at the edges.
    margin = 0.002
    round_trip = 2 * one_way_ms / 1e3
    inside = [seq for seq, sent in enumerate(result["sent_unix"])
              if outage_start + margin <= sent < outage_end - margin]
    clearly_outside = [seq for seq, sent in enumerate(result["sent_unix"])
                       if sent < outage_start - round_trip - margin or sent > outage_end + margin]
    assert len(inside) > 150, "the probe did not cover the outage"
    assert all(result["rtt_ms"][seq] is None for seq in inside), "a probe got through during the outage"
    lost_outside = [seq for seq in clearly_outside if result["rtt_ms"][seq] is None]
    assert not lost_outside, f"probes lost outside the outage: {lost_outside[:10]}"
    # Nothing at all arrives back while the path is down (after in-flight echoes drained).
    arrivals_inside = [t for t in result["received_unix"]
                       if t is not None and outage_start + round_trip + margin < t < outage_end - margin]
    assert not arrivals_inside
    counters = stats["paths"][0]
    assert counters["up"]["dropped_outage"] >= len(inside) - 2
    record("outage_probes_inside", len(inside))
    record("outage_probes_lost_outside", len(lost_outside))
