#!/usr/bin/env python3
"""A TCP bulk transfer whose bytes are checked end to end.

    transfer.py recv --listen 198.18.100.1:5001          # prints {"bytes", "sha256", "seconds"}
    transfer.py send --to 198.18.100.1:5001 --bytes 50000000 --seed 7

The sender streams deterministic pseudo-random bytes (seeded, so a rerun sends the
same) and prints their SHA-256; the receiver hashes what arrives until EOF. Equal
digests and counts mean the tunnel delivered every byte, in order, unaltered.
"""

import argparse
import hashlib
import json
import random
import socket
import sys
import time

CHUNK = 1 << 16


def parse_endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def receive(listen: str, timeout: float) -> dict:
    host, port = parse_endpoint(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((host, port))
        server.listen(1)
        server.settimeout(timeout)
        print("listening", file=sys.stderr, flush=True)
        conn, _ = server.accept()
        conn.settimeout(timeout)
        digest, total, start = hashlib.sha256(), 0, time.monotonic()
        with conn:
            while chunk := conn.recv(1 << 20):
                digest.update(chunk)
                total += len(chunk)
        return {"bytes": total, "sha256": digest.hexdigest(), "seconds": time.monotonic() - start}


def send(to: str, count: int, seed: int, timeout: float) -> dict:
    host, port = parse_endpoint(to)
    rng = random.Random(seed)
    digest, sent = hashlib.sha256(), 0
    deadline = time.monotonic() + timeout
    while True:  # the receiver may still be starting
        try:
            conn = socket.create_connection((host, port), timeout=timeout)
            break
        except (ConnectionRefusedError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
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
    recv_parser = sub.add_parser("recv")
    recv_parser.add_argument("--listen", required=True)
    recv_parser.add_argument("--timeout", type=float, default=120)
    send_parser = sub.add_parser("send")
    send_parser.add_argument("--to", required=True)
    send_parser.add_argument("--bytes", type=int, required=True)
    send_parser.add_argument("--seed", type=int, default=1)
    send_parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    if args.mode == "recv":
        result = receive(args.listen, args.timeout)
    else:
        result = send(args.to, args.bytes, args.seed, args.timeout)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
