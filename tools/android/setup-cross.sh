#!/usr/bin/env bash
# Installs, on Debian or Ubuntu, what the Android checks need and are
# missing: clang and lld (tests/android/struct_layout.py, test_package_aar.sh),
# the aarch64 and armhf cross compilers and qemu-user
# (tests/android/qemu_tests.sh). Prints nothing when all are there.
# With --gpu also the arm64 Vulkan loader, lavapipe and validation layer
# (multiarch), for qemu_tests.sh --gpu.
set -euo pipefail
need=()
have() { command -v "$1" >/dev/null 2>&1; }
have_any() { local c; for c in "$@"; do have "$c" && return 0; done; return 1; }
have_any clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14 || need+=(clang)
have_any ld.lld ld.lld-19 ld.lld-18 ld.lld-17 ld.lld-16 ld.lld-15 ld.lld-14 || need+=(lld)
have aarch64-linux-gnu-g++ || need+=(g++-aarch64-linux-gnu)
have arm-linux-gnueabihf-g++ || need+=(g++-arm-linux-gnueabihf)
{ have qemu-aarch64 && have qemu-arm; } || { have qemu-aarch64-static && have qemu-arm-static; } || need+=(qemu-user)
if [ "${1:-}" = --gpu ]; then
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
  fi
  for p in libvulkan1:arm64 mesa-vulkan-drivers:arm64 vulkan-validationlayers:arm64; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
fi
[ ${#need[@]} -eq 0 ] && exit 0
sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
echo "setup-cross: installing ${need[*]}"
# A mirror caught mid-sync fails one index; what is needed is usually in the rest.
$sudo apt-get update -q >/dev/null || true
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
