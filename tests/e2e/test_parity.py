"""Forward error correction on the emulated test bed: one of two uplinks loses 1 % of
its packets at random. The sender must send parity on that path, the receiver must
rebuild lost packets from it, and the transfer must stay byte-exact; with parity
switched off, none is sent."""

from pathlib import Path

import pytest

from mptund import SERVER_TUN_ADDR, DaemonPair
from topology import Topology

from test_tunnel import assert_byte_exact, result, start_receiver, start_sender

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "two-paths-one-lossy.toml"
TRANSFER_BYTES = 20_000_000


def transfer(parity: bool) -> tuple[dict, dict]:
    """One upload through the daemons' defaults; the client's and server's reports."""
    with Topology(scenario=SCENARIO) as topo:
        pair = DaemonPair(topo.testbed, topo.client, topo.server, topo.uplinks(), inner_ipv6=False,
                          scheduler=None, congestion_controller=None,
                          scheduler_settings={"parity_on_lossy_paths": parity})
        pair.start()
        receiver = start_receiver(topo.server, SERVER_TUN_ADDR, 5001)
        sender = start_sender(topo.client, SERVER_TUN_ADDR, 5001, TRANSFER_BYTES, seed=13)
        sent, received = result(sender), result(receiver)
        client, server = pair.stop()
    assert_byte_exact(sent, received, TRANSFER_BYTES)
    return client["sessions"][0], server["sessions"][0]


@pytest.mark.parametrize("parity", [True, False])
def test_a_lossy_uplink_sends_parity_and_the_server_rebuilds_its_losses(parity):
    client, server = transfer(parity)
    # The scenario's second path is the lossy one; the client names paths by uplink.
    lossy = client["paths"][1]
    print(f"parity {parity}: sent {client['parity_sent']}, rebuilt {server['parity_rebuilt']}, "
          f"unrecoverable {server['parity_unrecoverable']}, lost on the lossy path "
          f"{lossy['lost_packets']} of {lossy['sent_data_packets']}")
    if not parity:
        assert client["parity_sent"] == 0 and server["parity_rebuilt"] == 0
        return
    # Parity follows the lossy path once its losses show: at least one per 100 packets.
    assert client["parity_sent"] >= lossy["sent_data_packets"] // 100, client["parity_sent"]
    # Every parity whose block lost one packet rebuilds it: a good share of the losses.
    assert server["parity_rebuilt"] >= lossy["lost_packets"] // 5, (server["parity_rebuilt"], lossy["lost_packets"])
    assert server["parity_unrecoverable"] <= server["parity_rebuilt"]
