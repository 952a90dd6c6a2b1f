#!/usr/bin/env python3
"""Timestamped UDP probes for emulator tests: an echo server and a paced sender.

    udp_probe.py echo --bind 198.18.0.1 --port 9000 --duration 10
    udp_probe.py send --to 198.18.0.1 --port 9000 --interval-ms 5 --count 800

The sender prints one JSON object: for every probe its sequence number, its
send time (Unix seconds; all namespaces share the host clock) and its RTT in
milliseconds or null if no echo came back. The sender stops by itself.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time

PROBE = struct.Struct("!Id")  # sequence number, send time (Unix seconds)

# Wait for stragglers after the last probe: above any RTT plus queueing in the scenarios here.
DRAIN_S = 1.0


def echo(bind: str, port: int, duration_s: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((bind, port))
    sock.settimeout(0.2)
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        try:
            data, peer = sock.recvfrom(2048)
        except socket.timeout:
            continue
        sock.sendto(data, peer)


def send(to: str, port: int, interval_s: float, count: int, size: int, bind: str | None) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if bind:
        sock.bind((bind, 0))
    sock.setblocking(False)
    sent: list[float] = []
    rtt_ms: list[float | None] = [None] * count
    received_at: list[float | None] = [None] * count
    padding = b"\0" * max(0, size - PROBE.size)
    start = time.monotonic()

    def drain() -> None:
        while True:
            try:
                data = sock.recv(2048)
            except BlockingIOError:
                return
            if len(data) < PROBE.size:
                continue
            seq, sent_unix = PROBE.unpack_from(data)
            if seq < count and rtt_ms[seq] is None:
                now = time.time()
                rtt_ms[seq] = (now - sent_unix) * 1e3
                received_at[seq] = now

    for seq in range(count):
        while True:
            drain()
            remaining = start + seq * interval_s - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(remaining, 0.001))
        now = time.time()
        sent.append(now)
        try:
            sock.sendto(PROBE.pack(seq, now) + padding, (to, port))
        except OSError:
            pass  # e.g. ENOBUFS; the probe simply counts as lost
    drain_until = time.monotonic() + DRAIN_S
    while time.monotonic() < drain_until:
        drain()
        time.sleep(0.001)
    return {"interval_s": interval_s, "sent_unix": sent, "rtt_ms": rtt_ms, "received_unix": received_at}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    echo_args = sub.add_parser("echo")
    echo_args.add_argument("--bind", required=True)
    echo_args.add_argument("--port", type=int, default=9000)
    echo_args.add_argument("--duration", type=float, default=30.0)
    send_args = sub.add_parser("send")
    send_args.add_argument("--to", required=True)
    send_args.add_argument("--port", type=int, default=9000)
    send_args.add_argument("--bind")
    send_args.add_argument("--interval-ms", type=float, default=10.0)
    send_args.add_argument("--count", type=int, default=100)
    send_args.add_argument("--size", type=int, default=64)
    args = parser.parse_args()
    if args.mode == "echo":
        echo(args.bind, args.port, args.duration)
    else:
        json.dump(send(args.to, args.port, args.interval_ms / 1e3, args.count, args.size, args.bind), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
