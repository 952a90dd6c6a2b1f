"""Failover on the emulated test bed: the best path blacks out for 3 s during a
transfer and comes back. The transfer must complete byte-exact, the path must be
reported down and up again, and its traffic must move to the other paths and back."""

import re
import sys
import time
import tomllib
from pathlib import Path

from mptund import SERVER_TUN_ADDR, DaemonPair
from topology import Topology

from test_tunnel import assert_byte_exact, result, start_receiver, start_sender

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "blackout-best-path.toml"
TRANSFER_BYTES = 40_000_000


def outage_window() -> tuple[float, float]:
    scenario = tomllib.loads(SCENARIO.read_text())
    outage = scenario["paths"][0]["outages"][0]
    return outage["start_ms"] / 1000, (outage["start_ms"] + outage["duration_ms"]) / 1000


def sent_data(report: dict) -> dict[str, int]:
    sessions = report.get("sessions") or []
    paths = sessions[0]["paths"] if sessions else report.get("idle_paths", [])
    return {path["name"]: path["sent_data_packets"] for path in paths}


def test_best_path_blacks_out_for_three_seconds_and_comes_back():
    start, end = outage_window()
    with Topology(scenario=SCENARIO) as topo:
        pair = DaemonPair(topo.testbed, topo.client, topo.server, topo.uplinks(), inner_ipv6=False,
                          stats_interval_ms=1000)
        pair.start()
        receiver = start_receiver(topo.server, SERVER_TUN_ADDR, 5001)
        sender = start_sender(topo.client, SERVER_TUN_ADDR, 5001, TRANSFER_BYTES, seed=4)
        samples = []  # (emulator time in s, per-path data packets sent by the client)
        while sender.poll() is None:
            report = pair.snapshot("client")
            if report is not None:
                samples.append((time.time() - topo.emulator_epoch_unix_s, sent_data(report)))
            time.sleep(0.25)
        assert time.time() - topo.emulator_epoch_unix_s > end + 1, "transfer ended before the path came back"
        assert_byte_exact(result(sender), result(receiver), TRANSFER_BYTES)
        client, _ = pair.stop()
        log = pair.log("client")

    best = topo.uplinks()[0]
    # Reported down during the outage and up again after it.
    events = [(m.group(1), m.group(2)) for m in re.finditer(r'path (down|up).*?path=(\S+)', log)]
    best_events = [kind for kind, name in events if name == best]
    assert "down" in best_events, log
    assert best_events[-1] == "up" and best_events.index("down") < len(best_events) - 1, best_events

    # Traffic left the dead path and came back: per-second counter deltas.
    def delta(name: str, t0: float, t1: float) -> int:
        inside = [s for t, s in samples if t0 <= t <= t1]
        return inside[-1][name] - inside[0][name] if len(inside) >= 2 else -1

    others = topo.uplinks()[1:]
    assert delta(best, start + 1.0, end - 0.2) == 0, samples
    assert all(delta(name, start + 1.0, end - 0.2) > 100 for name in others), samples
    assert delta(best, end + 1.5, end + 4) > 100, samples
    assert client["sessions"][0]["paths"][0]["state"] == "up"
