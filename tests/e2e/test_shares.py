"""Capacity shares end to end.

- One bulk upload over a fast uplink and a slower one on the emulated test bed. Once
  the traffic nears what the fast uplink carries, the client's earliest-arrival
  scheduler shares it by the uplinks' capacity: `mptund status` says so, and each
  uplink's floor follows its rate.
- The same over three uplinks shaped by token buckets, with a sub-millisecond RTT: the
  buckets' bursts must not become the uplinks' rates."""

import statistics
import time
from pathlib import Path

from mptund import SERVER_TUN_ADDR, DaemonPair, direct_topology
from netns import Testbed
from topology import Topology

from test_ops import live, shape_uplinks
from test_tunnel import assert_byte_exact, result, start_receiver, start_sender

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "fast-and-slow-uplinks.toml"
RATES_MBIT = (30, 10)
TRANSFER_BYTES = 30_000_000


def test_a_bulk_upload_is_shared_by_the_uplinks_capacity():
    with Topology(scenario=SCENARIO) as topo:
        pair = DaemonPair(topo.testbed, topo.client, topo.server, topo.uplinks(),
                          inner_ipv6=False, scheduler=None, congestion_controller=None)
        pair.start()
        receiver = start_receiver(topo.server, SERVER_TUN_ADDR, 5001)
        sender = start_sender(topo.client, SERVER_TUN_ADDR, 5001, TRANSFER_BYTES, seed=17)
        sharing = []  # (seconds since the first poll that shared, paths)
        first_shared = None
        while sender.poll() is None:
            sessions = live(pair, "client")["sessions"]
            if sessions and sessions[0]["capacity_sharing"]:
                first_shared = first_shared or time.monotonic()
                sharing.append((time.monotonic() - first_shared, sessions[0]["paths"]))
            time.sleep(0.2)
        sent, received = result(sender), result(receiver)
        pair.stop()
    assert_byte_exact(sent, received, TRANSFER_BYTES)
    # About 40 Mbit/s for 6 s: sharing from the first second on.
    assert len(sharing) >= 10, f"sharing in {len(sharing)} status polls"
    for _, paths in sharing:
        assert all(path["share_floor_rate_bytes_per_s"] for path in paths), paths
    # The floors follow the capacity estimates, which are still rising while the first
    # round trips fill the paths: a first poll read floors of 4.8 Mbit/s in a ratio of
    # 0.06, the next, 0.4 s later, 21 Mbit/s at 0.33. They are judged once settled.
    settled = [paths for since, paths in sharing if since >= 1.0]
    assert len(settled) >= 10, f"{len(settled)} polls after the first second of sharing"
    for paths in settled:
        fast, slow = (path["share_floor_rate_bytes_per_s"] for path in paths)
        # Floors in proportion to capacity (30:10), together three quarters of the
        # traffic: which is at least the threshold, 75 % of the fast uplink, and at
        # most both uplinks' rates (10 % for the estimates' spread).
        assert 0.2 <= slow / fast <= 0.5, (slow, fast)
        floors_mbit = (fast + slow) * 8 / 1e6
        least = 0.9 * 0.75 * 0.75 * RATES_MBIT[0]
        most = 1.1 * 0.75 * sum(RATES_MBIT)
        assert least <= floors_mbit <= most, floors_mbit


def test_token_bucket_bursts_are_not_taken_for_the_uplinks_rate():
    """Three uplinks shaped by tbf at 20 Mbit/s with a 32 kB bucket and an RTT of
    about 0.1 ms, the default controller and scheduler. After a lull a bucket passes
    its 32 kB within one minimum RTT, and the sample read 1.4 to 2 Gbit/s. The paths
    were never window-limited, so every later sample was application-limited, none
    could lower the estimate, and it stayed: shares never engaged (75 % of 2 Gbit/s
    is never reached) and the pacing rate sat at hundreds of Mbit/s. The queue that
    stands at the bucket meanwhile shows the uplinks full: such samples age the
    controller's estimate, which then caps the path's (see `PathProbe::on_ack`).

    Until an idle path's sample became a lower bound, an uplink carried nothing for the
    rest of the transfer in about one run of six: a burst had overflowed its bucket, a
    47-byte ping was the only packet of the flight to arrive, and its sample, 4 kbit/s,
    stood as the uplink's rate while nothing was sent to correct it (see
    `PathProbe::latest_rate_sample`)."""
    transfer_bytes = 40_000_000
    with Testbed() as bed:
        client, server, uplinks = direct_topology(bed, 3)
        shape_uplinks(client, server, uplinks)
        pair = DaemonPair(bed, client, server, uplinks, scheduler=None,
                          congestion_controller=None)
        pair.start()
        receiver = start_receiver(pair.server_ns, SERVER_TUN_ADDR, 5001)
        sender = start_sender(pair.client_ns, SERVER_TUN_ADDR, 5001, transfer_bytes,
                              seed=19)
        polls = []  # the client session, every 0.2 s
        while sender.poll() is None:
            sessions = live(pair, "client")["sessions"]
            if sessions:
                polls.append(sessions[0])
            time.sleep(0.2)
        sent, received = result(sender), result(receiver)
        pair.stop()
    assert_byte_exact(sent, received, transfer_bytes)
    # About 6 s at 3 x 20 Mbit/s. The start may stay muddled for a few seconds: while
    # the inner slow start fills the buckets' 50 ms queues, bursts raise the estimates
    # even in window-limited rounds (one run in about thirty, until 4 s). Before the fix
    # they stayed high for the whole transfer; the second half of it is judged.
    settled = polls[len(polls) // 2:]
    assert len(settled) >= 10, f"{len(settled)} polls in the second half"
    for index, name in enumerate(uplinks):
        rates = [session["paths"][index]["delivery_rate_mbit"] for session in settled]
        pacing = [session["paths"][index]["pacing_rate_bytes_per_s"] * 8 / 1e6
                  for session in settled]
        # A burst still reads high right after a lull, until the queue stands again.
        assert 10 <= statistics.median(rates) <= 30, (name, rates)
        assert statistics.median(pacing) <= 60, (name, pacing)
    # A burst after a lull (the inner flow's own loss recovery) still raises a path's
    # estimate until ten round trips of standing queue age it out. Before the fix,
    # shares were on in none of the polls after the first second in two runs of six.
    sharing = sum(session["capacity_sharing"] for session in settled)
    assert sharing >= len(settled) / 2, f"sharing in {sharing} of {len(settled)} polls"
