#!/usr/bin/env bash
# Release builds for routers and gateways: one stripped binary per target, the
# Debian packages, SHA256SUMS, and the ARM binaries checked under emulation.
#
#   scripts/release.sh [OUTPUT_DIR]        # default: target/dist
#
# Targets:
#   x86_64-unknown-linux-musl       static    gateways, x86 routers
#   aarch64-unknown-linux-musl      static    Raspberry Pi 4/5, Teltonika, most current vehicle routers
#   armv7-unknown-linux-gnueabihf   static    older vendor LTE routers (glibc linked statically:
#                                             rustup offers no armv7 musl standard library here)
# Static binaries run on any Linux distribution and on OpenWrt.
#
# Needs what `scripts/setup.sh --release` installs (cross compilers,
# qemu-user-static, cargo-deb, the rustup targets). Under emulation each ARM
# binary runs --version, genkey/pubkey and check-config on the example
# configurations. (scripts/test.sh runs the in-memory session tests for aarch64
# under qemu.)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/dist}
target_dir=${CARGO_TARGET_DIR:-target}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)

# target triple, architecture suffix of the release file, qemu runner ("" for the host)
builds=(
    "x86_64-unknown-linux-musl x86_64 "
    "aarch64-unknown-linux-musl aarch64 qemu-aarch64-static"
    "armv7-unknown-linux-gnueabihf armv7 qemu-arm-static"
)

mkdir -p "$out"
rm -f "$out"/mptund-* "$out"/*.deb "$out"/SHA256SUMS
summary=()
for build in "${builds[@]}"; do
    read -r triple arch _ <<<"$build"
    echo "== $triple"
    started=$(date +%s)
    nice -n 19 cargo build --locked --profile dist -p mptund --target "$triple"
    seconds=$(( $(date +%s) - started ))
    binary="$out/mptund-$version-$arch-linux"
    cp "$target_dir/$triple/dist/mptund" "$binary"
    # cargo-deb names the architecture from the target (amd64, arm64, armhf).
    nice -n 19 cargo deb --no-build -p mptund --profile dist --target "$triple" -o "$out/"
    summary+=("$(printf '%-28s %8d bytes  built in %4ds  %s, %s' "$(basename "$binary")" \
        "$(stat -c %s "$binary")" "$seconds" "$(file -b "$binary" | cut -d, -f2)" \
        "$(file -b "$binary" | grep -oE '(static-pie|statically|dynamically) linked')")")
done
echo "== lintian"
lintian --fail-on error "$out"/*.deb
(cd "$out" && sha256sum mptund-* ./*.deb | sed 's| \./| |' > SHA256SUMS)

# Each binary on its own architecture: the example configurations with fresh keys.
check_dir=$(mktemp -d)
trap 'rm -rf "$check_dir"' EXIT
for build in "${builds[@]}"; do
    read -r triple arch runner <<<"$build"
    binary="$out/mptund-$version-$arch-linux"
    echo "== $arch: $(${runner:+$runner} "$binary" --version)${runner:+ (under $runner)}"
    for role in server client; do
        cp "config/$role.toml" "$check_dir/"
        (umask 077; ${runner:+$runner} "$binary" genkey > "$check_dir/$role.key")
        ${runner:+$runner} "$binary" pubkey < "$check_dir/$role.key" > /dev/null
        ${runner:+$runner} "$binary" check-config "$check_dir/$role.toml"
    done
done

echo
echo "== $out"
printf '%s\n' "${summary[@]}"
ls -l "$out"/*.deb | awk '{print $5, $9}'
cat "$out/SHA256SUMS"
