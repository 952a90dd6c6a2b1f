#!/usr/bin/env bash
# Installs what the ns-3 hybrid emulation needs on Debian 12, makes TapBridge
# work on an installed (not source-built) ns-3, and builds the scenario program.
# Idempotent; needs root for apt-get and the helper link.
#
# Why the link: TapBridge opens every tap device through a small helper,
# tap-creator, which it fork()s and execlp()s by an absolute path compiled in
# as TAP_CREATOR -- in every mode, ConfigureLocal, UseLocal and UseBridge alike
# (TapBridge::CreateTap). Debian built that path from its build tree
# (/build/ns3-<random>/.../build/src/tap-bridge/ns3.37-tap-creator), which does
# not exist on an installed system; the helper itself ships in the `ns3`
# package under /usr/libexec/ns3/. So we read the compiled-in path out of the
# installed library and link it to the shipped helper. Without it the program
# dies with "TapBridge::CreateTap(): Back from execlp(), ... No such file or
# directory".
set -euo pipefail
cd "$(dirname "$0")"

# libns3-dev: headers and pkg-config files; ns3: the tap-creator helper;
# binutils: `strings`, to read the helper's compiled-in path.
packages=(libns3-dev ns3 g++ make pkg-config binutils)
missing=()
for package in "${packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The library the program links (libns3-tap-bridge.so is libns3-dev's link to it).
library=$(readlink -f "$(pkg-config --variable=libdir ns3-tap-bridge)/libns3-tap-bridge.so")
[ -f "$library" ] || { echo "libns3 tap-bridge library not found (is libns3-dev installed?)" >&2; exit 1; }
expected=$(strings -a "$library" | grep -E '^/.*tap-creator$' | head -n1)
[ -n "$expected" ] || { echo "no tap-creator path compiled into $library" >&2; exit 1; }
shipped=$(dpkg -L ns3 | grep -E '/[^/]*tap-creator$' | head -n1)
[ -x "$shipped" ] || { echo "the ns3 package ships no tap-creator" >&2; exit 1; }
if [ "$(readlink -f "$expected" 2>/dev/null)" != "$(readlink -f "$shipped")" ]; then
    mkdir -p "$(dirname "$expected")"
    ln -sfn "$shipped" "$expected"
    echo "linked TapBridge's helper path $expected -> $shipped"
fi

nice -n 10 make -s -j"$(nproc)"
