#!/usr/bin/env bash
# Builds the library and the unit tests for Linux on aarch64 and on 32-bit
# ARM (armhf: 32-bit size_t and pointers, 8-byte aligned 64-bit integers, as
# on armeabi-v7a) with Debian's cross compilers, warnings on, and runs the
# unit tests under qemu-user. With --gpu it also builds the GPU tests and runs
# the ones matching GPU_TESTS (a Catch2 test spec) on the target's own lavapipe
# (Debian's mesa-vulkan-drivers and libvulkan1 for that architecture).
#
#   tests/android/qemu_tests.sh [--gpu] [aarch64] [armhf]    (default: both)
#
# Builds go to build-cross-<arch>/ (cmake/toolchains/linux-<arch>.cmake).
# Needs g++-aarch64-linux-gnu, g++-arm-linux-gnueabihf and qemu-user
# (tools/android/setup-cross.sh installs what is missing).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
gpu=0 arches=()
for a in "$@"; do
  case "$a" in
    --gpu) gpu=1 ;;
    aarch64|armhf) arches+=("$a") ;;
    *) echo "qemu_tests: unknown argument '$a'" >&2; exit 1 ;;
  esac
done
[ ${#arches[@]} -gt 0 ] || arches=(aarch64 armhf)
declare -A triple=([aarch64]=aarch64-linux-gnu [armhf]=arm-linux-gnueabihf)
declare -A qemu=([aarch64]=qemu-aarch64 [armhf]=qemu-arm)
# The default set avoids the F16 kernels: lavapipe's LLVM 15 on aarch64
# (Debian 12) aborts compiling them ("LLVM ERROR: Cannot select ...
# AArch64ISD::VLSHR"), which takes the test process down.
GPU_TESTS=${GPU_TESTS:-"[buffer],[stream]"}

for arch in "${arches[@]}"; do
  t=${triple[$arch]} build=build-cross-$arch
  command -v "$t-g++" >/dev/null || { echo "qemu_tests: $t-g++ not found (run tools/android/setup-cross.sh)" >&2; exit 1; }
  q=$(command -v "${qemu[$arch]}" || command -v "${qemu[$arch]}-static") ||
    { echo "qemu_tests: ${qemu[$arch]} not found (run tools/android/setup-cross.sh)" >&2; exit 1; }
  targets=(kvrt kvrt_unit_tests)
  [ $gpu = 1 ] && targets+=(kvrt_gpu_tests)
  echo "qemu_tests: $arch: building ${targets[*]} in $build"
  [ -f "$build/build.ninja" ] ||
    cmake -S . -B "$build" -G Ninja -DCMAKE_TOOLCHAIN_FILE="cmake/toolchains/linux-$arch.cmake" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVRT_TESTS_ONLY=ON -DKVRT_BUILD_TOOLS=OFF \
      -DKVRT_BUILD_EXAMPLES=OFF >/dev/null
  log=$build/qemu_tests_build.log
  if ! cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]}" >"$log" 2>&1; then
    tail -n 40 "$log"; echo "qemu_tests: $arch: build failed (log: $log)" >&2; exit 1
  fi
  if grep -q "warning:" "$log"; then
    grep -A3 "warning:" "$log"; echo "qemu_tests: $arch: the build has warnings" >&2; exit 1
  fi
  file -L "$build/lib/libkvrt.so" 2>/dev/null | cut -d, -f1-2 || true
  # The cross toolchain's own libraries, also where Debian's multiarch
  # libc6:<arch> is installed (its ld.so must not meet the cross libc).
  run=(env LD_LIBRARY_PATH="/usr/$t/lib" "$q" -L "/usr/$t")
  echo "qemu_tests: $arch: unit tests under $(basename "$q")"
  "${run[@]}" "$build/bin/kvrt_unit_tests" >"$build/unit.log" 2>&1 ||
    { cat "$build/unit.log"; echo "qemu_tests: $arch: unit tests failed" >&2; exit 1; }
  tail -n 2 "$build/unit.log"
  if [ $gpu = 1 ]; then
    icd=$(grep -l "/$t/" /usr/share/vulkan/icd.d/lvp_icd.*.json | head -n 1) ||
      { echo "qemu_tests: no lavapipe for $t (apt-get install mesa-vulkan-drivers:${arch/aarch64/arm64})" >&2; exit 1; }
    # The Vulkan loader, lavapipe, LLVM and the validation layer are
    # multiarch packages: everything from the root, multiarch libc included.
    echo "qemu_tests: $arch: GPU tests $GPU_TESTS on lavapipe under $(basename "$q")"
    KVRT_VALIDATION=1 VK_ICD_FILENAMES=$icd "$q" -L / "$build/bin/kvrt_gpu_tests" "$GPU_TESTS" >"$build/gpu.log" 2>&1 ||
      { cat "$build/gpu.log"; echo "qemu_tests: $arch: GPU tests failed" >&2; exit 1; }
    tail -n 2 "$build/gpu.log"
  fi
done
