#!/usr/bin/env bash
# Installs the system packages the daemon's tests, demo and test bed use. Idempotent.
set -euo pipefail
# prometheus ships promtool (the metrics test checks /metrics with it); systemd ships
# systemd-analyze (the unit file test).
packages=(iproute2 iputils-ping iperf3 ethtool mptcpd procps util-linux prometheus systemd)
missing=()
for package in "${packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
python3 -m pytest --version >/dev/null 2>&1 || python3 -m pip install -q pytest
# The reference Prometheus client's parsers, for the OpenMetrics output.
python3 -c "import prometheus_client" 2>/dev/null || python3 -m pip install -q prometheus-client
command -v cargo >/dev/null || { echo "cargo is missing: install Rust (https://rustup.rs)" >&2; exit 1; }
modprobe tun 2>/dev/null || true
[ -c /dev/net/tun ] || { echo "/dev/net/tun is missing: the kernel needs TUN support" >&2; exit 1; }
# ns-3 for the hybrid emulation test (tests/e2e/test_ns3.py): Debian's libns3-dev
# and ns3, the TapBridge helper link, and the scenario program's build.
"$(dirname "$0")/../ns3-tap-bridge/setup.sh"
