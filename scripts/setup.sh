#!/usr/bin/env bash
# Installs the system packages the daemon's tests, demo, test bed and benchmarks use.
# Idempotent.
#
#   scripts/setup.sh             # what scripts/test.sh, the demo and the benchmarks need
#   scripts/setup.sh --release   # and the other cross compilers for scripts/release.sh
set -euo pipefail
release=false
[ "${1:-}" = "--release" ] && release=true
# prometheus: the metrics tests run promtool and a Prometheus server; systemd ships
# systemd-analyze (the unit file test); debootstrap and systemd-container (nspawn)
# boot the Debian container of the real-systemd test; dpkg-dev and lintian build
# and check the .deb. mptcpize (its own package since Debian 12) wraps iperf3 for
# the benchmarks' kernel-MPTCP rows; git and util-linux (chrt) are for them too.
# The aarch64 cross compiler (ring's C, the linker) and qemu-user-static: the
# tests build for aarch64 and run it under emulation. wireguard-tools (`wg`)
# configures the wireguard-go baseline of benches/datapath/.
packages=(iproute2 iputils-ping iperf3 ethtool mptcpd mptcpize procps util-linux git
          prometheus systemd debootstrap systemd-container dpkg-dev lintian file
          gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static wireguard-tools)
if $release; then
    # The other release targets: armv7 and x86_64 musl (musl-gcc for ring's C).
    packages+=(gcc-arm-linux-gnueabihf libc6-dev-armhf-cross musl-tools)
fi
missing=()
for package in "${packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# Every program the benchmark scripts (benches/*/run.py) and the test bed call.
for tool in ip tc iperf3 ethtool ping sysctl chrt git mptcpize; do
    command -v "$tool" >/dev/null || { echo "$tool is missing after the install" >&2; exit 1; }
done
python3 -m pytest --version >/dev/null 2>&1 || python3 -m pip install -q pytest
# The reference Prometheus client's parsers, for the OpenMetrics output.
python3 -c "import prometheus_client" 2>/dev/null || python3 -m pip install -q prometheus-client
command -v cargo >/dev/null || { echo "cargo is missing: install Rust (https://rustup.rs)" >&2; exit 1; }
# cargo-deb builds the Debian package (the real-systemd test installs it).
CARGO_DEB_VERSION=3.8.0
if [ "$(cargo deb --version 2>/dev/null)" != "cargo-deb $CARGO_DEB_VERSION" ]; then
    nice -n 19 cargo install --locked --version "$CARGO_DEB_VERSION" cargo-deb
fi
rustup target add aarch64-unknown-linux-musl
# The test command enforces the no-panic lints of the datagram modules.
rustup component add clippy
# The fuzz targets (fuzz/, scripts/fuzz-smoke.sh) build with nightly and cargo-fuzz.
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
CARGO_FUZZ_VERSION=0.13.2
if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
    nice -n 19 cargo +nightly install --locked --version "$CARGO_FUZZ_VERSION" cargo-fuzz
fi
if $release; then
    rustup target add x86_64-unknown-linux-musl armv7-unknown-linux-gnueabihf
fi
modprobe tun 2>/dev/null || true
[ -c /dev/net/tun ] || { echo "/dev/net/tun is missing: the kernel needs TUN support" >&2; exit 1; }
# ns-3 for the hybrid emulation test (tests/e2e/test_ns3.py): Debian's libns3-dev
# and ns3, the TapBridge helper link, and the scenario program's build.
"$(dirname "$0")/../ns3-tap-bridge/setup.sh"
