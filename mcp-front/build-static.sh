#!/usr/bin/env bash
# Builds mcp-front as one statically linked executable and copies it to OUTPUT_DIR/mcp-front.
# The image (mcp-front/Dockerfile) runs exactly this, so its final stage can be `scratch`; CI
# runs it too and starts the result alone in an empty, read-only root (.ci/image-test).
#
# The host's gnu target with `crt-static` links glibc in: the front needs no name service (it
# binds and connects to IP addresses and a Unix socket only), so nothing is looked up at run
# time. `--target` keeps build scripts and proc macros dynamic, as they must be.
set -euo pipefail
out=${1:?usage: mcp-front/build-static.sh OUTPUT_DIR}
cd "$(dirname "$0")/.."

target=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static -C strip=symbols" \
    cargo build --release --locked -p mcp-front --target "$target"
bin=${CARGO_TARGET_DIR:-target}/$target/release/mcp-front

# Statically linked: no program interpreter and no shared library needed.
if readelf --program-headers "$bin" | grep -q 'INTERP' || readelf --dynamic "$bin" | grep -q 'NEEDED'; then
    echo "mcp-front/build-static.sh: $bin is not statically linked" >&2
    readelf --dynamic "$bin" | grep NEEDED >&2 || true
    exit 1
fi
mkdir -p "$out"
cp "$bin" "$out/mcp-front"
echo "built a static mcp-front for $target: $out/mcp-front ($(wc -c <"$out/mcp-front") bytes)"
