#!/usr/bin/env bash
# Prepares a run of kvrt's GPU tests and benchmarks on another x86-64 Linux
# machine that has a GPU but no network and no Vulkan packages (tools/gpu/run.sh
# runs there). Here it builds kvrt (make build) and fills .gpu/, which git
# ignores, with what that run needs:
#
#   .gpu/debs/  libvulkan1 (the Vulkan loader) and vulkan-validationlayers, as
#               Debian 12 packages (run.sh unpacks them; nothing is installed here)
#   .gpu/bin/   kvrt_gpu_tests and kvrt, stripped
#   .gpu/lib/   libkvrt.so.0.MINOR (its SONAME), stripped
#
# About 30 MiB in all. Then, on the GPU machine, in a copy of this tree with
# .gpu/ beside it: `bash tools/gpu/run.sh` (OUT=<folder> for its logs).
# The programs need glibc 2.36 or later there.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${KVRT_GPU_DIR:-$ROOT/.gpu}

echo "prepare: building kvrt (make build)"
make -C "$ROOT" build >/dev/null

rm -rf "$DEST"
mkdir -p "$DEST/debs" "$DEST/bin" "$DEST/lib"

# The packages of this machine's Debian release, downloaded for amd64 into a
# private package list (the system's lists are left as they are).
lists=$(mktemp -d)
trap 'rm -rf "$lists"' EXIT
mkdir -p "$lists/partial"
apt_opts=(-q -oAPT::Architecture=amd64 -oAPT::Architectures=amd64 "-oDir::State::Lists=$lists")
echo "prepare: downloading libvulkan1 and vulkan-validationlayers"
apt-get "${apt_opts[@]}" update >/dev/null
(cd "$DEST/debs" && apt-get "${apt_opts[@]}" download libvulkan1 vulkan-validationlayers 2>&1 |
  grep -v "unsandboxed" || true)
ls "$DEST"/debs/libvulkan1_*.deb "$DEST"/debs/vulkan-validationlayers_*.deb >/dev/null

strip -o "$DEST/bin/kvrt_gpu_tests" "$ROOT/build/bin/kvrt_gpu_tests"
strip -o "$DEST/bin/kvrt" "$ROOT/build/bin/kvrt"
# The library under its SONAME (libkvrt.so.0.MINOR before 1.0), as the
# programs ask the loader for it.
soname=$(readelf -d "$ROOT/build/lib/libkvrt.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ -n "$soname" ]] || { echo "prepare: no SONAME in $ROOT/build/lib/libkvrt.so" >&2; exit 1; }
strip -o "$DEST/lib/$soname" "$(readlink -f "$ROOT/build/lib/libkvrt.so")"
git -C "$ROOT" describe --always --dirty --abbrev=12 >"$DEST/commit" 2>/dev/null || true

echo "prepare: $(du -sh "$DEST" | cut -f1) in $DEST (built from $(cat "$DEST/commit" 2>/dev/null || echo "an unknown commit"))"
echo "prepare: on the GPU machine, with .gpu carried: bash tools/gpu/run.sh"
