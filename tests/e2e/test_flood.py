"""Handshake floods end to end: while a sender keeps the server under handshake load
with genuine-looking inits (the configured client's key, so they pass mac1), a client
still connects, through a cookie reply and an init with mac2, and the server answers
the flood only with cookie replies smaller than the inits."""

import json
import subprocess
import sys
import time

from mptund import SERVER_PORT, SERVER_PUBLIC_ADDR, DaemonPair, direct_topology
from netns import Testbed
from workspace import release_binary

INIT_LEN = 148
COOKIE_REPLY_LEN = 52

# Sends one init every 20 ms (50/s, past the test's threshold of 10/s) for `seconds`,
# from an ordinary socket so the cookie replies come back to it; prints what it sent
# and the length of every reply.
SENDER = r"""
import json, socket, sys, time
inits = open(sys.argv[1], "rb").read()
size, host, port, seconds = int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
count = len(inits) // size
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.settimeout(0.02)
sent, replies, end = 0, [], time.monotonic() + seconds
while time.monotonic() < end:
    sock.sendto(inits[(sent % count) * size:(sent % count + 1) * size], (host, port))
    sent += 1
    try:
        while True:
            replies.append(len(sock.recv(2048)))
    except socket.timeout:
        pass
print(json.dumps({"sent": sent, "replies": replies}))
"""


def test_a_client_connects_through_cookies_while_the_server_is_flooded():
    with Testbed() as bed:
        client, server, uplinks = direct_topology(bed, 2)
        pair = DaemonPair(bed, client, server, uplinks,
                          server_handshake={"load_threshold_per_s": 10})
        pair.write_configs()
        server_public = subprocess.run([pair.binary, "pubkey"], check=True, capture_output=True,
                                       text=True, input=(pair.workdir / "server.key").read_text()
                                       ).stdout.strip()
        inits = pair.workdir / "inits.bin"
        subprocess.run([release_binary("examples/flood_inits", "FLOOD_INITS_BIN"),
                        "--client-key", pair.workdir / "client.key", "--server-public-key",
                        server_public, "--count", "64", "--out", inits], check=True)
        assert inits.stat().st_size == 64 * INIT_LEN
        pair.start_server()
        deadline = time.monotonic() + 10
        while f":{SERVER_PORT}" not in server.output("ss", "-Hlun"):
            assert time.monotonic() < deadline, "the server never listened"
            time.sleep(0.05)
        flood = server.popen(sys.executable, "-c", SENDER, inits, str(INIT_LEN), SERVER_PUBLIC_ADDR,
                             str(SERVER_PORT), "8", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        time.sleep(1.5)  # the server is under load before the client starts
        pair.start_client()
        pair.wait_established(15)
        out, err = flood.communicate(timeout=30)
        assert flood.returncode == 0, err
        flooded = json.loads(out)
        assert pair.running(), "a daemon died"
        client_report, server_report = pair.stop()

    assert flooded["sent"] >= 300
    # Nothing the server sent was larger than an init. The first inits, before the
    # load counted, were answered with a HandshakeResponse (this fresh server has no
    # timestamp of the client yet, and a session nobody confirms takes over nothing);
    # the rest got cookie replies.
    assert all(length <= INIT_LEN for length in flooded["replies"]), flooded["replies"]
    cookies_to_flood = flooded["replies"].count(COOKIE_REPLY_LEN)
    assert cookies_to_flood >= flooded["sent"] // 2
    # The client got a cookie reply too, and its init with mac2 was answered.
    assert server_report["cookie_replies_sent"] > cookies_to_flood
    assert server_report["drops"]["cookie_required"] == server_report["cookie_replies_sent"]
    assert client_report["drops"]["cookie_reply_rejected"] == 0
    assert len(client_report["sessions"]) == 1
