#!/usr/bin/env bash
# Builds libkvrt.so for Android with the NDK at $ANDROID_NDK, one build per
# ABI from the presets in CMakePresets.json (build-android-<abi>/), packages
# them as an AAR with package-aar.sh and checks it with
# tests/android/check_aar.py. Without $ANDROID_NDK it says so and succeeds:
# nothing to build.
#
#   tools/android/build.sh [--stl c++_static|c++_shared] [ABI...]
#
# ABIs: arm64-v8a armeabi-v7a x86_64 (the default: all three) and x86 (32-bit
# emulators; on request). Every public struct has the same layout on x86 as
# on armeabi-v7a (tests/android/struct_layout.py). The host needs
# cmake (3.21 or newer), ninja, glslc and spirv-val, as for any kvrt build.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stl=c++_static
abis=()
while [ $# -gt 0 ]; do
  case "$1" in
    --stl) stl=$2; shift 2 ;;
    arm64-v8a|armeabi-v7a|x86_64|x86) abis+=("$1"); shift ;;
    *) echo "android build: unknown argument '$1'" >&2; exit 1 ;;
  esac
done
[ ${#abis[@]} -gt 0 ] || abis=(arm64-v8a armeabi-v7a x86_64)

if [ -z "${ANDROID_NDK:-}" ]; then
  echo "android build: skipped (ANDROID_NDK is not set; point it at an NDK, r25 or newer, to build)"
  exit 0
fi
[ -f "$ANDROID_NDK/build/cmake/android.toolchain.cmake" ] ||
  { echo "android build: $ANDROID_NDK is not an NDK (no build/cmake/android.toolchain.cmake)" >&2; exit 1; }
ndk=$(sed -n 's/^Pkg\.Revision *= *\([0-9]*\).*/\1/p' "$ANDROID_NDK/source.properties")

cd "$root"
libs=()
for abi in "${abis[@]}"; do
  echo "android build: $abi (NDK r$ndk, $stl)"
  cmake --preset "android-$abi" -DANDROID_STL="$stl" >/dev/null
  cmake --build --preset "android-$abi" -j "${JOBS:-2}"
  libs+=("$abi=build-android-$abi/lib/libkvrt.so")
done
aar=build-android/kvrt.aar
bash tools/android/package-aar.sh --ndk "$ndk" --stl "$stl" -o "$aar" "${libs[@]}"
python3 tests/android/check_aar.py "$aar" --abis "$(IFS=,; echo "${abis[*]}")" --api 24 --stl "$stl"
