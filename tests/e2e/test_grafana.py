"""The Grafana dashboard (deploy/grafana/mptund.json) against a real Prometheus.

A Prometheus server (Debian's `prometheus`) in a monitoring namespace scrapes both
daemons every second over a management network of its own while a transfer runs
through the tunnel; then every query of every panel is evaluated through
Prometheus's HTTP API over the transfer, and each must return data.

The endpoints listen on the management addresses, so they ask for a bearer token
(`metrics.bearer_token_file`): Prometheus sends it from its `credentials_file`,
and a request without it, or with another, gets 401.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import time
import urllib.parse


from conftest import REPO_ROOT
from mptund import CLIENT_TUN_ADDR, SERVER_TUN_ADDR, DaemonPair, direct_topology
from netns import Testbed
from test_ops import shape_uplinks, wait_for
from test_tunnel import assert_byte_exact, result, start_receiver, start_sender

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "mptund.json"
ROWS = ["Sessions", "Paths", "Reorder buffer", "Drops", "Re-sent and duplicated packets"]
METRICS_PORT = 9477
PROMETHEUS = "127.0.0.1:9090"
# Grafana fills these in; the test gives the values Grafana would for a
# 1 s scrape interval (the rate window: four scrapes) and "All" daemons.
GRAFANA_VARIABLES = {"$__rate_interval": "4s", "$instance": ".+"}
# The management network: monitor namespace to each daemon's host.
MANAGEMENT = {"client": ("198.18.200.1", "198.18.200.2"),
              "server": ("198.18.200.5", "198.18.200.6")}

GET = """
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=10) as response:
    sys.stdout.write(response.read().decode())
"""


def panels(dashboard: dict) -> list[dict]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_the_dashboard_has_the_rows_and_only_prometheus_queries():
    dashboard = json.loads(DASHBOARD.read_text())
    assert [p["title"] for p in dashboard["panels"] if p["type"] == "row"] == ROWS
    for panel in panels(dashboard):
        assert panel["datasource"]["type"] == "prometheus", panel["title"]
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_every_panel_query_returns_data_from_a_real_prometheus(tmp_path):
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus missing: scripts/setup.sh installs it"
    with Testbed() as bed:
        client_ns, server_ns, uplinks = direct_topology(bed, 2)
        shape_uplinks(client_ns, server_ns, uplinks)
        monitor = bed.netns("monitor")
        pair = DaemonPair(bed, client_ns, server_ns, uplinks, stats_interval_ms=1000,
                          metrics_port=METRICS_PORT)
        targets = []
        for side, ns in (("client", client_ns), ("server", server_ns)):
            monitor_addr, daemon_addr = MANAGEMENT[side]
            bed.veth(monitor, f"m-{side}", ns, "mgmt")
            monitor.addr(f"m-{side}", f"{monitor_addr}/30")
            ns.addr("mgmt", f"{daemon_addr}/30")
            targets.append(f"{daemon_addr}:{METRICS_PORT}")
        # The daemons' token and Prometheus's copy of it, each in a file of its own
        # (a trailing newline, as `base64` writes it, is not part of the token).
        token = secrets.token_urlsafe(32)
        daemon_token = pair.workdir / "metrics.token"
        daemon_token.write_text(token + "\n")
        daemon_token.chmod(0o600)
        prometheus_token = tmp_path / "prometheus.token"
        prometheus_token.write_text(token + "\n")
        prometheus_token.chmod(0o600)
        for config in pair.write_configs():
            side = config.stem
            config.write_text(config.read_text().replace(
                f'listen = "127.0.0.1:{METRICS_PORT}"',
                f'listen = "{MANAGEMENT[side][1]}:{METRICS_PORT}"\n'
                f'bearer_token_file = "{daemon_token}"'))
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: mptund\n"
            f"    authorization:\n      credentials_file: {prometheus_token}\n"
            "    static_configs:\n"
            f"      - targets: {json.dumps(targets)}\n")
        server = monitor.popen(prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                               f"--storage.tsdb.path={tmp_path / 'data'}",
                               f"--web.listen-address={PROMETHEUS}", "--log.level=warn",
                               stdout=open(tmp_path / "prometheus.log", "w"),
                               stderr=subprocess.STDOUT)

        def api(path: str, **params) -> dict:
            url = f"http://{PROMETHEUS}/api/v1/{path}?{urllib.parse.urlencode(params)}"
            answer = json.loads(monitor.output(sys.executable, "-c", GET, url))
            assert answer["status"] == "success", answer
            return answer["data"]

        pair.start_server()
        pair.start_client()
        pair.wait_established(15)

        def both_targets_up():
            try:
                found = api("targets")["activeTargets"]
            except (subprocess.CalledProcessError, json.JSONDecodeError):
                return False
            return len(found) == 2 and all(t["health"] == "up" for t in found)
        wait_for(both_targets_up, 30, "Prometheus to scrape both daemons", interval=0.5)

        # Without the token, or with another, the endpoint answers 401 with the
        # challenge; Prometheus's scrapes carry it.
        for side in ("client", "server"):
            url = f"http://{MANAGEMENT[side][1]}:{METRICS_PORT}/metrics"
            for header in ([], ["-H", "Authorization: Bearer wrong"],
                           ["-H", f"Authorization: Basic {token}"]):
                answer = monitor.output("curl", "-sS", "-i", "--max-time", "5", *header, url)
                assert answer.startswith("HTTP/1.1 401"), answer
                assert 'www-authenticate: Bearer realm="mptund"' in answer, answer
                assert "mptund_sessions" not in answer
            ok = monitor.output("curl", "-sS", "--max-time", "5", "-H",
                                f"Authorization: Bearer {token}", url)
            assert "\nmptund_sessions 1" in ok, ok[:400]
        # Both daemons counted the three refusals, and Prometheus scraped the counts.
        def refusals_scraped():
            found = api("query", query="mptund_metrics_unauthorized_requests_total")["result"]
            return len(found) == 2 and all(float(r["value"][1]) == 3 for r in found)
        wait_for(refusals_scraped, 10, "Prometheus to scrape the 401 counts", interval=0.5)

        count = 40_000_000
        start = time.time()
        up_rx = start_receiver(server_ns, SERVER_TUN_ADDR, 5401)
        down_rx = start_receiver(client_ns, CLIENT_TUN_ADDR, 5402)
        up_tx = start_sender(client_ns, SERVER_TUN_ADDR, 5401, count, seed=61)
        down_tx = start_sender(server_ns, CLIENT_TUN_ADDR, 5402, count, seed=62)
        assert_byte_exact(result(up_tx), result(up_rx), count)
        assert_byte_exact(result(down_tx), result(down_rx), count)
        time.sleep(2)  # the last scrapes of the transfer
        end = time.time()
        assert server.poll() is None, (tmp_path / "prometheus.log").read_text()

        dashboard = json.loads(DASHBOARD.read_text())
        empty = []
        for panel in panels(dashboard):
            for target in panel["targets"]:
                query = target["expr"]
                for variable, value in GRAFANA_VARIABLES.items():
                    query = query.replace(variable, value)
                series = api("query_range", query=query, start=start, end=end, step=1)["result"]
                values = [float(v) for s in series for _, v in s["values"]]
                finite = [v for v in values if v == v]  # NaN is not data
                print(f"{panel['title']} [{target['refId']}]: {len(series)} series, "
                      f"{len(finite)} samples, max {max(finite, default=float('nan')):.4g}")
                if not finite:
                    empty.append(f"{panel['title']}: {query}")
        assert not empty, "queries without data:\n" + "\n".join(empty)
        # And the figures are the transfer's: both daemons' paths carried it.
        sent = api("query", query="sum(increase(mptund_path_sent_bytes_total[1h]))", time=end)
        assert float(sent["result"][0]["value"][1]) > 2 * count
        pair.stop()
