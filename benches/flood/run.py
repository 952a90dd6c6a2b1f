#!/usr/bin/env python3
"""Flood benchmark: does an established session keep its goodput while a third
namespace floods the server with genuine-looking handshake inits from spoofed sources?

    client ns ==[linkem: two-paths-symmetric, 2 x 20 Mbit/s]== server ns --- flood ns
                                                                198.18.200.1  198.18.200.2
                                                                spoofed sources 198.19.0.0/16

- The client and server daemons (release build, daemon defaults) run over the emulated
  two-path scenario; a checked TCP transfer (testbed/transfer.py) goes client to server.
- The flood namespace replays inits made with the configured client's key and the
  server's public key (`flood_inits` example: every init passes mac1, each has its own
  ephemeral key, timestamps are old as in a replay of captured inits) at
  `--rate` per second from `--sources` spoofed addresses in 198.19.0.0/16, through a
  raw socket (`spoof_sender.c`, sendmmsg with IP_HDRINCL). The server routes
  198.19.0.0/16 back to the flood namespace, which drops it (forwarding on, blackhole
  route): no reply leaves the test namespaces.
- A second, smaller flood comes from one spoofed address at `--one-source-rate` per
  second, below the load threshold, so no cookies are asked for: it shows each
  source's token bucket (20/s, burst 5) at work.
- Rounds alternate: transfer without a flood, with the spoofed-source flood, with the
  one-source flood, `--rounds` times, in one run. Per round: goodput, the server's CPU time (/proc/PID/stat, in % of one core),
  its peak RSS (VmHWM), the sender's achieved rate, and the server's counters
  (`mptund status --json`: drops by reason, cookie replies sent).

    sudo python3 benches/flood/run.py                       # writes results.json and results.md here
    sudo python3 benches/flood/run.py --rounds 5 --rate 30000 --bytes 60000000

Binaries: $MPTUND_BIN, $LINKEM_BIN and $FLOOD_INITS_BIN, else built with cargo into
$CARGO_TARGET_DIR (or target/). A benchmark, not a test: it prints and records numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
sys.path.insert(0, str(REPO_ROOT / "testbed"))

SCENARIO = REPO_ROOT / "config" / "scenarios" / "two-paths-symmetric.toml"
FLOOD_NET = "198.18.200"
SPOOF_NET = "198.19.0.0"
SPOOF_PREFIX = f"{SPOOF_NET}/16"
TRANSFER_PORT = 5201
INIT_LEN_BY_VERSION = {1: 128, 2: 148}


def target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target"))


def build() -> None:
    """Release builds of what is not given through the environment."""
    missing = [var for var in ("MPTUND_BIN", "LINKEM_BIN", "FLOOD_INITS_BIN") if var not in os.environ]
    if missing:
        subprocess.run(["cargo", "build", "--release", "-p", "mptund", "-p", "linkem", "--bins",
                        "--example", "flood_inits"], cwd=REPO_ROOT, check=True)
    release = target_dir() / "release"
    os.environ.setdefault("MPTUND_BIN", str(release / "mptund"))
    os.environ.setdefault("LINKEM_BIN", str(release / "linkem"))
    os.environ.setdefault("FLOOD_INITS_BIN", str(release / "examples" / "flood_inits"))


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def server_counters(pair, binary: str) -> dict:
    report = json.loads(pair.server_ns.output(binary, "status", "--socket",
                                              pair.control_socket("server"), "--json"))
    drops = report.get("drops", {})
    keys = ("cookie_required", "handshake_rate_limited", "handshake_queue_full", "handshake_rejected",
            "malformed")
    counters = {key: drops.get(key, 0) for key in keys}
    counters["cookie_replies_sent"] = report.get("cookie_replies_sent", 0)
    counters["sessions_established"] = report.get("sessions_established", 0)
    return counters


def nonzero_drops(pair, binary: str, side: str) -> dict:
    ns = pair.client_ns if side == "client" else pair.server_ns
    report = json.loads(ns.output(binary, "status", "--socket", pair.control_socket(side), "--json"))
    return {reason: count for reason, count in report.get("drops", {}).items() if count}


def udp_receive_errors(ns) -> int:
    """The namespace's UDP RcvbufErrors: datagrams the kernel dropped because a
    socket's receive buffer was full."""
    lines = [line.split() for line in ns.output("cat", "/proc/net/snmp").splitlines() if line.startswith("Udp:")]
    return int(dict(zip(lines[0], lines[1]))["RcvbufErrors"])


def build_flood_namespace(topo, bed) -> object:
    flood = bed.netns("flood")
    flood.sysctl("net.ipv6.conf.all.disable_ipv6", "1")
    bed.veth(flood, "f0", topo.server, "fl0")
    flood.addr("f0", f"{FLOOD_NET}.2/24")
    topo.server.addr("fl0", f"{FLOOD_NET}.1/24")
    flood.run("ip", "route", "add", f"{topo.server_addr}/32", "via", f"{FLOOD_NET}.1")
    # Replies to the spoofed sources go back to the flood namespace, which forwards
    # nothing anywhere: a blackhole route drops them without ICMP.
    topo.server.run("ip", "route", "add", SPOOF_PREFIX, "via", f"{FLOOD_NET}.2")
    flood.sysctl("net.ipv4.ip_forward", "1")
    flood.run("ip", "route", "add", "blackhole", SPOOF_PREFIX)
    return flood


def transfer(topo, pair, count: int, seed: int) -> dict:
    listen = f"198.18.100.1:{TRANSFER_PORT}"
    receiver = topo.server.popen(sys.executable, str(REPO_ROOT / "testbed" / "transfer.py"), "recv",
                                 "--listen", listen, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
    time.sleep(0.3)
    sent = json.loads(topo.client.output(sys.executable, str(REPO_ROOT / "testbed" / "transfer.py"),
                                         "send", "--to", listen, "--bytes", str(count),
                                         "--seed", str(seed), timeout=300))
    out, _ = receiver.communicate(timeout=60)
    received = json.loads(out)
    return {"byte_exact": sent["sha256"] == received["sha256"] and received["bytes"] == count,
            "seconds": received["seconds"],
            "goodput_mbit": received["bytes"] * 8 / received["seconds"] / 1e6}


def run(args) -> dict:
    from mptund import DaemonPair, binary_record  # noqa: E402 - needs MPTUND_BIN set first
    from topology import Topology  # noqa: E402

    binary = os.environ["MPTUND_BIN"]
    rounds = []
    with Topology(scenario=SCENARIO) as topo:
        bed = topo.testbed
        flood = build_flood_namespace(topo, bed)
        pair = DaemonPair(bed, topo.client, topo.server, topo.uplinks(), inner_ipv6=False,
                          log_level="warn", scheduler=None, hold_ms=None, congestion_controller=None,
                          reorder_adaptive=None, stats_interval_ms=0)
        pair.start()
        server_pub = subprocess.run([binary, "pubkey"], input=(pair.workdir / "server.key").read_text(),
                                    check=True, capture_output=True, text=True).stdout.strip()
        inits = pair.workdir / "inits.bin"
        subprocess.run([os.environ["FLOOD_INITS_BIN"], "--client-key", str(pair.workdir / "client.key"),
                        "--server-public-key", server_pub, "--count", str(args.inits), "--out", str(inits)],
                       check=True)
        init_len = inits.stat().st_size // args.inits
        if init_len not in INIT_LEN_BY_VERSION.values():
            raise RuntimeError(f"unexpected init length {init_len}")
        sender = pair.workdir / "spoof_sender"
        subprocess.run(["cc", "-O2", "-o", str(sender), str(HERE / "spoof_sender.c")], check=True)
        server_pid = pair.server_proc.pid
        floods = {"spoofed": (args.sources, args.rate), "one_source": (1, args.one_source_rate)}
        for round_number in range(1, args.rounds + 1):
            for flood_kind in ("off", "spoofed", "one_source"):
                flooded = flood_kind != "off"
                before = server_counters(pair, binary)
                rcvbuf_before = udp_receive_errors(topo.server)
                cpu_before, wall_before = proc_cpu_seconds(server_pid), time.monotonic()
                flood_proc = None
                if flooded:
                    sources, rate = floods[flood_kind]
                    flood_proc = flood.popen(str(sender), str(inits), str(init_len), topo.server_addr, "51900",
                                             SPOOF_NET, str(sources), str(rate), "600",
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    time.sleep(args.flood_lead)  # the flood is on before the transfer starts
                result = transfer(topo, pair, args.bytes, seed=round_number)
                flood_stats = None
                if flood_proc is not None:
                    bed.stop_process(flood_proc)
                    out, err = flood_proc.communicate(timeout=10)
                    flood_stats = json.loads(out) if out.strip() else {"error": err.strip()}
                cpu = proc_cpu_seconds(server_pid) - cpu_before
                wall = time.monotonic() - wall_before
                after = server_counters(pair, binary)
                row = {
                    "round": round_number, "flood": flood_kind, **result,
                    "server_cpu_percent": round(100 * cpu / wall, 1),
                    "server_peak_rss_mib": round(proc_peak_rss_mib(server_pid), 1),
                    "flood_sender": flood_stats,
                    "server_counters": {key: after[key] - before.get(key, 0) for key in after},
                    "server_udp_rcvbuf_errors": udp_receive_errors(topo.server) - rcvbuf_before,
                    "client_drops_so_far": nonzero_drops(pair, binary, "client"),
                }
                row["goodput_mbit"] = round(row["goodput_mbit"], 2)
                print(json.dumps(row), flush=True)
                rounds.append(row)
                if not pair.running():
                    raise RuntimeError("a daemon exited during the flood:\n" + pair.log("server"))
                time.sleep(1.5)  # let the server's load window pass between rounds
        final = server_counters(pair, binary)
        pair.stop()
    result_load = [round(x, 2) for x in os.getloadavg()]
    settings = {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()}
    return {"rounds": rounds, "final_server_counters": final, "init_len": init_len,
            "settings": settings, "load_average_at_end": result_load,
            # The binary's own commit (its --version), not the tree's.
            "mptund_binary": binary_record(binary)}


def summarize(result: dict) -> dict:
    rows = result["rounds"]
    quiet = [r["goodput_mbit"] for r in rows if r["flood"] == "off"]
    flooded = [r["goodput_mbit"] for r in rows if r["flood"] == "spoofed"]
    one_source = [r["goodput_mbit"] for r in rows if r["flood"] == "one_source"]
    ratios = [f / q for q, f in zip(quiet, flooded)]
    rates = [r["flood_sender"]["rate_per_s"] for r in rows
             if r["flood"] == "spoofed" and "rate_per_s" in r["flood_sender"]]
    return {
        "goodput_without_mbit_median": round(statistics.median(quiet), 2),
        "goodput_with_mbit_median": round(statistics.median(flooded), 2),
        "ratio_median": round(statistics.median(ratios), 3),
        "ratio_per_round": [round(r, 3) for r in ratios],
        "goodput_without_spread_mbit": round(max(quiet) - min(quiet), 2),
        "goodput_with_spread_mbit": round(max(flooded) - min(flooded), 2),
        "flood_rate_min_per_s": min(rates) if rates else None,
        "goodput_one_source_mbit_median": round(statistics.median(one_source), 2) if one_source else None,
        "all_byte_exact": all(r["byte_exact"] for r in rows),
    }


def write_markdown(result: dict, summary: dict, path: Path, command: str) -> str:
    lines = [
        "# Handshake flood: goodput of an established session under a spoofed init flood",
        "",
        f"Machine: {platform.node()}, {os.cpu_count()} cores (shared), kernel {platform.release()}. "
        f"Scenario `two-paths-symmetric` (2 x 20 Mbit/s, 20 ms RTT), client-to-server transfer of "
        f"{result['settings']['bytes'] / 1e6:.0f} MB per round, daemon defaults; flood of "
        f"{result['init_len']}-byte inits (valid mac1, client's key, old timestamps) at "
        f"{result['settings']['rate']}/s from {result['settings']['sources']} spoofed sources in {SPOOF_PREFIX} "
        f"(`spoofed`), or at {result['settings']['one_source_rate']}/s from one spoofed source (`one_source`, "
        "below the load threshold: only the token bucket stops it).",
        f"Command: `{command}`. Load average (1, 5, 15 min) at the end of the run: "
        f"{result.get('load_average_at_end')} (other builds share the machine).",
        f"Binary: `{result['mptund_binary']['version']}`." if result.get("mptund_binary") else "",
        "",
        f"- goodput without flood (median): **{summary['goodput_without_mbit_median']} Mbit/s**, "
        f"with flood: **{summary['goodput_with_mbit_median']} Mbit/s**, "
        f"ratio (median of rounds): **{summary['ratio_median']}** (per round: {summary['ratio_per_round']}; goal >= 0.9)",
        f"- spread across rounds: {summary['goodput_without_spread_mbit']} Mbit/s without, "
        f"{summary['goodput_with_spread_mbit']} Mbit/s with the flood",
        f"- achieved flood rate (lowest round): {summary['flood_rate_min_per_s']} inits/s",
        f"- goodput with the one-source flood (median): {summary['goodput_one_source_mbit_median']} Mbit/s",
        f"- every transfer byte-exact: {'yes' if summary['all_byte_exact'] else 'NO'}",
        "",
        "| round | flood | goodput Mbit/s | seconds | server CPU % of a core | server peak RSS MiB | inits sent/s | "
        "cookie replies | cookie_required | rate_limited | queue_full | handshake_rejected |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rounds"]:
        c = r["server_counters"]
        rate = (r["flood_sender"] or {}).get("rate_per_s", "-")
        lines.append(f"| {r['round']} | {r['flood']} | {r['goodput_mbit']} | "
                     f"{r['seconds']:.2f} | {r['server_cpu_percent']} | {r['server_peak_rss_mib']} | {rate} | "
                     f"{c['cookie_replies_sent']} | {c['cookie_required']} | {c['handshake_rate_limited']} | "
                     f"{c['handshake_queue_full']} | {c['handshake_rejected']} |")
    lines += ["", f"Server counters at the end: `{json.dumps(result['final_server_counters'])}`", ""]
    text = "\n".join(lines)
    if path.exists() and "\n## Reading" in path.read_text():
        text += "\n## Reading" + path.read_text().split("\n## Reading", 1)[1]
    path.write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=25000, help="inits per second")
    parser.add_argument("--sources", type=int, default=65536, help="spoofed source addresses")
    parser.add_argument("--one-source-rate", type=int, default=150,
                        help="inits per second of the one-source flood (below the load threshold)")
    parser.add_argument("--inits", type=int, default=4096, help="distinct inits to replay")
    parser.add_argument("--bytes", type=int, default=40_000_000, help="bytes per transfer")
    parser.add_argument("--flood-lead", type=float, default=2.0,
                        help="seconds the flood runs before the transfer starts")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    build()
    result = run(args)
    summary = summarize(result)
    result["summary"] = summary
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    command = ("sudo python3 benches/flood/run.py " + " ".join(sys.argv[1:])).strip()
    print(write_markdown(result, summary, args.out / "results.md", command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
