#!/usr/bin/env bash
# Installs what kvrt needs to build and test on Debian 12 (bookworm): the Vulkan
# loader and headers, Mesa's lavapipe driver, glslc, spirv-tools, glslang-tools,
# the Khronos validation layers, Catch2, cmake, ninja, pkg-config, and
# libabigail's tools (abidw, abidiff) for the ABI check of tests/abi, and
# libclang for the Rust binding's bindgen check (bindings/rust/kvrt-sys).
#
# Idempotent and quiet when everything is present. Run as root, or with sudo
# available. Set KVRT_SETUP_VERBOSE=1 to see apt's output.
set -euo pipefail

packages=(
  cmake ninja-build pkg-config g++ make
  libvulkan-dev libvulkan1 mesa-vulkan-drivers
  glslc spirv-tools glslang-tools
  vulkan-validationlayers vulkan-tools
  catch2
  abigail-tools
  libclang-dev
  libxxhash-dev
  clang-14 libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: missing packages (${missing[*]}) and no apt-get; install them by hand" >&2
  exit 1
fi

sudo=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
    echo "setup: missing packages (${missing[*]}); run as root or install sudo" >&2
    exit 1
  fi
fi

echo "setup: installing ${missing[*]}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() {
  if [ "${KVRT_SETUP_VERBOSE:-0}" = 1 ]; then "$@"; else "$@" >"$log" 2>&1 || { cat "$log" >&2; return 1; }; fi
}
export DEBIAN_FRONTEND=noninteractive
run "${sudo[@]}" apt-get update -q
run "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
