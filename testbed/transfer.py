#!/usr/bin/env python3
"""A TCP bulk transfer whose bytes are checked end to end.

    transfer.py recv --listen 198.18.100.1:5001          # prints {"bytes", "sha256", "seconds", ...}
    transfer.py send --to 198.18.100.1:5001 --bytes 50000000 --seed 7

Either side may listen (`--listen`) or connect (`--to`): for kernel MPTCP the client
must open the connection even when the server sends. The sender streams
deterministic pseudo-random bytes (seeded, so a rerun sends the same) and prints
their SHA-256; the receiver hashes what arrives until EOF. Equal digests and counts
mean the tunnel delivered every byte, in order, unaltered. The receiver also reports
the longest time without a single byte arriving (`longest_gap_ms`), what the inner
TCP "sees" of a path failure, with millisecond resolution.
"""

import argparse
import hashlib
import json
import random
import socket
import sys
import time

CHUNK = 1 << 16
# Linux's SO_MAX_PACING_RATE; the socket module does not name it.
SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)


def parse_endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def family_of(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def open_connection(args) -> socket.socket:
    """Accepts one connection on --listen, or connects to --to (retrying while the
    listener is starting)."""
    if args.listen:
        host, port = parse_endpoint(args.listen)
        with socket.socket(family_of(host), socket.SOCK_STREAM) as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((host, port))
            server.listen(1)
            server.settimeout(args.timeout)
            print("listening", file=sys.stderr, flush=True)
            conn, _ = server.accept()
    else:
        host, port = parse_endpoint(args.to)
        deadline = time.monotonic() + args.timeout
        while True:
            try:
                conn = socket.create_connection((host, port), timeout=args.timeout)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    conn.settimeout(args.timeout)
    if getattr(args, "cc", None):
        # Per socket, as iperf3 -C does: the per-namespace default may not be writable.
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, args.cc.encode())
    if getattr(args, "max_rate_mbit", None):
        # TCP paces itself to this rate (Linux's internal pacing, no fq needed).
        conn.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, int(args.max_rate_mbit * 1e6 / 8))
    return conn


def receive(conn: socket.socket) -> dict:
    digest, total = hashlib.sha256(), 0
    start = last = time.monotonic()
    longest_gap = 0.0
    gaps = []  # [wall-clock end, ms] of every gap of 20 ms or more, to match with events
    with conn:
        while chunk := conn.recv(1 << 20):
            now = time.monotonic()
            if total:  # the wait for the first byte is connection set-up, not a gap
                longest_gap = max(longest_gap, now - last)
                if now - last >= 0.020:
                    gaps.append([round(time.time(), 3), round((now - last) * 1000, 1)])
            last = now
            digest.update(chunk)
            total += len(chunk)
    return {"bytes": total, "sha256": digest.hexdigest(), "seconds": time.monotonic() - start,
            "longest_gap_ms": round(longest_gap * 1000, 1), "gaps_over_20ms": gaps}


def send(conn: socket.socket, count: int, seed: int) -> dict:
    rng = random.Random(seed)
    digest, sent = hashlib.sha256(), 0
    start = time.monotonic()
    with conn:
        while sent < count:
            chunk = rng.randbytes(min(CHUNK, count - sent))
            conn.sendall(chunk)
            digest.update(chunk)
            sent += len(chunk)
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)  # wait for the receiver to close: everything was read
    return {"bytes": sent, "sha256": digest.hexdigest(), "seconds": time.monotonic() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    for name in ("recv", "send"):
        role = sub.add_parser(name)
        where = role.add_mutually_exclusive_group(required=True)
        where.add_argument("--listen", help="HOST:PORT to accept one connection on")
        where.add_argument("--to", help="HOST:PORT to connect to")
        role.add_argument("--timeout", type=float, default=120)
        if name == "send":
            role.add_argument("--bytes", type=int, required=True)
            role.add_argument("--seed", type=int, default=1)
            role.add_argument("--cc", help="TCP congestion control of the sending socket (cubic, bbr)")
            role.add_argument("--max-rate-mbit", type=float,
                              help="pace the sending socket to at most this rate")
    args = parser.parse_args()
    conn = open_connection(args)
    result = receive(conn) if args.mode == "recv" else send(conn, args.bytes, args.seed)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
