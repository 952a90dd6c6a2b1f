#!/usr/bin/env python3
"""Hostile input for a running mptund server, run inside the server's namespace.

Captures real datagrams of the live session from an interface (AF_PACKET), then
sends to the server's port: exact replays, copies with a forged nonce counter (the
AEAD tag no longer matches), truncated and random datagrams, handshake inits with a
bad MAC and with a valid MAC but garbage Noise, and an oversized datagram. Prints
what it sent as JSON, and whether the server answered anything (it must not).

With --rewrite-init-path-ids it plays the attacker who once crashed the server: it
captures a genuine HandshakeInit as the client starts, waits for a line on stdin (the
test restarts the server meanwhile, so the init's timestamp is new to it again), then
sends copies with the path id rewritten and mac1 recomputed, which takes only the
server's public key.
"""

import argparse
import base64
import hashlib
import hmac
import json
import os
import socket
import struct
import sys
import time

ETH_P_IP = 0x0800
DATA = 3
HANDSHAKE_INIT = 1
INIT_LEN = 148
MAC1_INPUT_LEN = 116
MAC1_END = 132
VERSION = 2
WIRE_MTU = 1500


def capture(interface: str, port: int, count: int, timeout: float,
            packet_type: int = DATA) -> list[bytes]:
    """UDP payloads of datagrams of `packet_type` to `port` seen on `interface`."""
    sniffer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
    sniffer.bind((interface, ETH_P_IP))
    sniffer.settimeout(timeout)
    print("capturing", file=sys.stderr, flush=True)
    found = []
    deadline = time.monotonic() + timeout
    while len(found) < count and time.monotonic() < deadline:
        frame = sniffer.recv(65535)
        ip = frame[14:]
        if len(ip) < 28 or ip[0] >> 4 != 4 or ip[9] != 17:
            continue
        # Past the veth MTU: a UDP GSO run the sender handed over in one piece; the
        # wire carries it split, so it is not one datagram an attacker could copy.
        if len(ip) > WIRE_MTU:
            continue
        header_len = (ip[0] & 0x0F) * 4
        dst_port = struct.unpack("!H", ip[header_len + 2:header_len + 4])[0]
        payload = ip[header_len + 8:]
        if dst_port == port and payload and payload[0] == packet_type:
            found.append(bytes(payload))
    return found


def mac1(server_public: bytes, message: bytes) -> bytes:
    key = hashlib.sha256(b"mptund mac1" + server_public).digest()
    return hmac.new(key, message[:MAC1_INPUT_LEN], hashlib.sha256).digest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, help="IP:port of the server")
    parser.add_argument("--capture-interface", required=True)
    parser.add_argument("--server-public-key", required=True)
    parser.add_argument("--each", type=int, default=3)
    parser.add_argument("--rewrite-init-path-ids", type=int, nargs="+", metavar="ID")
    args = parser.parse_args()
    host, port = args.server.rsplit(":", 1)
    port = int(port)
    server_public = base64.b64decode(args.server_public_key)
    if args.rewrite_init_path_ids:
        return rewritten_inits(args, (host, port), server_public)

    captured = capture(args.capture_interface, port, args.each, timeout=20)
    if len(captured) < args.each:
        raise SystemExit(f"captured only {len(captured)} data datagrams")
    sent = {"replayed": 0, "forged": 0, "truncated": 0, "random": 0, "bad_mac_init": 0,
            "garbage_noise_init": 0, "oversize": 0}
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    target = (host, port)
    for datagram in captured:
        sock.sendto(datagram, target)
        sent["replayed"] += 1
        forged = bytearray(datagram)
        # Far ahead of the session's counter, yet under every key's message limit
        # (2^28 for AES-256-GCM), so the tag check is what refuses it.
        forged[8:16] = struct.pack("!Q", (1 << 27) + sent["forged"])
        sock.sendto(bytes(forged), target)
        sent["forged"] += 1
        sock.sendto(datagram[:10], target)
        sent["truncated"] += 1
        sock.sendto(b"\xee" + os.urandom(99), target)
        sent["random"] += 1
    bad_init = bytearray(os.urandom(INIT_LEN))
    bad_init[0:4] = bytes([HANDSHAKE_INIT, 0, VERSION, 0])
    sock.sendto(bytes(bad_init), target)
    sent["bad_mac_init"] += 1
    garbage = bytearray(os.urandom(INIT_LEN))
    garbage[0:4] = bytes([HANDSHAKE_INIT, 0, VERSION, 0])
    garbage[MAC1_INPUT_LEN:MAC1_END] = mac1(server_public, bytes(garbage))
    sock.sendto(bytes(garbage), target)
    sent["garbage_noise_init"] += 1
    sock.sendto(bytes([DATA]) + os.urandom(60000), target)
    sent["oversize"] += 1

    sock.settimeout(1.0)
    try:
        reply = sock.recv(65535)
        answered = len(reply)
    except socket.timeout:
        answered = 0
    print(json.dumps({"sent": sent, "answer_bytes": answered}))


def rewritten_inits(args, target: tuple[str, int], server_public: bytes) -> None:
    captured = capture(args.capture_interface, target[1], 1, timeout=20,
                       packet_type=HANDSHAKE_INIT)
    if not captured or len(captured[0]) != INIT_LEN:
        raise SystemExit("captured no handshake init")
    print("captured", file=sys.stderr, flush=True)
    sys.stdin.readline()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for path_id in args.rewrite_init_path_ids:
        crafted = bytearray(captured[0])
        crafted[1] = path_id
        crafted[MAC1_INPUT_LEN:MAC1_END] = mac1(server_public, bytes(crafted))
        sock.sendto(bytes(crafted), target)
    sock.settimeout(1.0)
    try:
        answered = len(sock.recv(65535))
    except socket.timeout:
        answered = 0
    print(json.dumps({"sent": len(args.rewrite_init_path_ids), "answer_bytes": answered}))


if __name__ == "__main__":
    main()
