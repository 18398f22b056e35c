#!/usr/bin/env bash
# Builds the library and the unit tests for Linux on aarch64 and on 32-bit
# ARM (armhf: 32-bit size_t and pointers, 8-byte aligned 64-bit integers, as
# on armeabi-v7a) with Debian's cross compilers, warnings on, and runs the
# unit tests under qemu-user. With --gpu it also builds the GPU tests and runs
# the ones matching GPU_TESTS (a Catch2 test spec) on the target's own lavapipe
# (Debian's mesa-vulkan-drivers, libvulkan1 and vulkan-validationlayers for
# that architecture: multiarch packages, or the same packages unpacked into
# $KVRT_CROSS_ROOTS/<arch>, /opt/kvrt-cross by default), with the Khronos
# validation layer on: a validation error fails the test that caused it.
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
# 32-bit ARM first: its GPU tests take longest, and run while aarch64 builds.
[ ${#arches[@]} -gt 0 ] || arches=(armhf aarch64)
declare -A triple=([aarch64]=aarch64-linux-gnu [armhf]=arm-linux-gnueabihf)
declare -A qemu=([aarch64]=qemu-aarch64 [armhf]=qemu-arm)
declare -A debarch=([aarch64]=arm64 [armhf]=armhf)
roots=${KVRT_CROSS_ROOTS:-/opt/kvrt-cross}
# Contexts, store, attention in every kernel variant, RoPE shift and the
# static layout: the quick cases of each (Catch2 wildcards; a name's commas
# cannot be given), since emulation makes lavapipe some 10 to 20 times
# slower. The full matrix of each runs on x86_64 in make test.
GPU_TESTS=${GPU_TESTS:-"[context],store works through staging memory*,store converts and quantizes exactly*,\
attention masks sequences*,a query that sees no cell gets zeros,forcing kernels: conflicting flags*,\
a shift by +d then -d gives back K*,static layout: windows*,static layout: chunks*"}
# The CPU qemu emulates for the GPU tests. On 32-bit ARM, lavapipe's NEON
# code (LLVM 15 JIT, run by qemu-arm 7.2) computes floor() and trunc() as if
# they returned their input (Q8_0 codes came out rounded toward zero), and
# every softmax of two cells or more wrong (attention nmse 0.01 to 0.26); the
# same SPIR-V is exact on x86_64 and aarch64 lavapipe, and on armhf itself
# with a CPU without NEON. cortex-r5f is such a CPU (ARMv7, VFPv3-D16: Debian
# armhf's own baseline, which kvrt is built for), so lavapipe's scalar VFP
# code runs the kernels there.
declare -A GPU_QEMU_CPU=([armhf]=cortex-r5f)
# The files of tests/gpu holding the cases of GPU_TESTS: the only ones built
# (KVRT_GPU_TEST_FILES), which halves each ARM build.
GPU_TEST_FILES=${GPU_TEST_FILES:-"test_context;test_device_faults;test_cache_store;test_attention;\
test_kernel_variants;test_rope_shift;test_static_layout"}

# The SPIR-V of the main build (make build), when there is one: SPIR-V is the
# same for every target, so the ARM builds embed it instead of compiling every
# shader again (KVRT_SPIRV_FROM, cmake/KvrtShaders.cmake). KVRT_SPIRV_FROM=""
# compiles them here.
spirv_from=${KVRT_SPIRV_FROM-$PWD/build}
if [ -n "$spirv_from" ] && [ -f "$spirv_from/build.ninja" ]; then
  cmake --build "$spirv_from" -j "${JOBS:-2}" --target kvrt_spirv >/dev/null ||
    { echo "qemu_tests: could not bring the SPIR-V of $spirv_from up to date" >&2; exit 1; }
else
  spirv_from=
fi

# The tests of one architecture, built in build-cross-<arch>: the unit tests,
# then the GPU tests with --gpu. Run in the background while the next
# architecture builds and beside the other's tests (emulated lavapipe compiles
# each pipeline on one core); each writes its own log, printed in order.
run_tests() {
  local arch=$1 t=${triple[$1]} build=build-cross-$1 q=$2 start root icd spec cpu run
  file -L "$build/lib/libkvrt.so" 2>/dev/null | cut -d, -f1-2 || true
  # The cross toolchain's own libraries, also where Debian's multiarch
  # libc6:<arch> is installed (its ld.so must not meet the cross libc).
  run=(env LD_LIBRARY_PATH="/usr/$t/lib" "$q" -L "/usr/$t")
  echo "qemu_tests: $arch: unit tests under $(basename "$q")"
  "${run[@]}" "$build/bin/kvrt_unit_tests" >"$build/unit.log" 2>&1 ||
    { cat "$build/unit.log"; echo "qemu_tests: $arch: unit tests failed" >&2; return 1; }
  tail -n 2 "$build/unit.log"
  if [ $gpu = 1 ]; then
    # The Vulkan loader, lavapipe, LLVM and the validation layer of the
    # target: multiarch packages (everything from /, multiarch libc
    # included), or the same packages unpacked into their own root. qemu
    # looks up every absolute path in that root first, the ICD's and the
    # layer's manifests and libraries included.
    root=/
    if ! icd=$(grep -l "/$t/" /usr/share/vulkan/icd.d/lvp_icd.*.json 2>/dev/null | head -n 1) || [ -z "$icd" ]; then
      root=$roots/${debarch[$arch]}
      icd=$(cd "$root" 2>/dev/null && ls usr/share/vulkan/icd.d/lvp_icd.*.json 2>/dev/null | head -n 1) && [ -n "$icd" ] ||
        { echo "qemu_tests: no lavapipe for $t (run tools/android/setup-cross.sh --gpu)" >&2; return 1; }
      icd=/$icd
    fi
    spec=$GPU_TESTS
    cpu=${GPU_QEMU_CPU[$arch]:-}
    echo "qemu_tests: $arch: GPU tests $spec on lavapipe (root $root) under $(basename "$q")${cpu:+ -cpu $cpu}"
    start=$SECONDS
    # The layer's manifest by its file name: a 32-bit guest cannot list the
    # host's directories (qemu-user's 32-bit readdir fails on 64-bit
    # directory offsets), so the loader would find no layer by searching.
    KVRT_VALIDATION=1 VK_ICD_FILENAMES=$icd \
      VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json \
      "$q" ${cpu:+-cpu "$cpu"} -L "$root" "$build/bin/kvrt_gpu_tests" --durations yes "$spec" >"$build/gpu.log" 2>&1 ||
      { cat "$build/gpu.log"; echo "qemu_tests: $arch: GPU tests failed" >&2; return 1; }
    # What the device could not run is said in the log; show it here too.
    grep -h "^kvrt_gpu_tests: skipped" "$build/gpu.log" | sort | uniq -c || true
    tail -n 2 "$build/gpu.log"
    echo "qemu_tests: $arch: GPU tests took $((SECONDS - start)) s"
  fi
}

declare -A pids
# A failed build stops the tests still running in the background.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

for arch in "${arches[@]}"; do
  t=${triple[$arch]} build=build-cross-$arch
  command -v "$t-g++" >/dev/null || { echo "qemu_tests: $t-g++ not found (run tools/android/setup-cross.sh)" >&2; exit 1; }
  q=$(command -v "${qemu[$arch]}" || command -v "${qemu[$arch]}-static") ||
    { echo "qemu_tests: ${qemu[$arch]} not found (run tools/android/setup-cross.sh)" >&2; exit 1; }
  targets=(kvrt kvrt_unit_tests)
  [ $gpu = 1 ] && targets+=(kvrt_gpu_tests)
  echo "qemu_tests: $arch: building ${targets[*]} in $build"
  # Configured every time, so that a changed GPU_TEST_FILES takes effect (the
  # toolchain only the first time: CMake keeps it).
  cfg=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVRT_TESTS_ONLY=ON -DKVRT_BUILD_TOOLS=OFF -DKVRT_BUILD_EXAMPLES=OFF
    "-DKVRT_GPU_TEST_FILES=$GPU_TEST_FILES" "-DKVRT_SPIRV_FROM=$spirv_from")
  [ -f "$build/build.ninja" ] ||
    cfg+=(-G Ninja -DCMAKE_TOOLCHAIN_FILE="cmake/toolchains/linux-$arch.cmake")
  cmake -S . -B "$build" "${cfg[@]}" >/dev/null
  log=$build/qemu_tests_build.log
  if ! cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]}" >"$log" 2>&1; then
    tail -n 40 "$log"; echo "qemu_tests: $arch: build failed (log: $log)" >&2; exit 1
  fi
  if grep -q "warning:" "$log"; then
    grep -A3 "warning:" "$log"; echo "qemu_tests: $arch: the build has warnings" >&2; exit 1
  fi
  echo "qemu_tests: $arch: tests started in the background (log: $build/qemu_tests_run.log)"
  run_tests "$arch" "$q" >"$build/qemu_tests_run.log" 2>&1 &
  pids[$arch]=$!
done

status=0
for arch in "${arches[@]}"; do
  wait "${pids[$arch]}" || status=1
  cat "build-cross-$arch/qemu_tests_run.log"
done
exit $status
