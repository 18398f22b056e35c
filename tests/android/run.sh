#!/usr/bin/env bash
# The Android checks, none of which needs an NDK or a device:
#   1. struct_layout.py: every public struct's size and field offsets on
#      arm64-v8a, armeabi-v7a, x86_64 and x86, against the natural layout and
#      the committed baseline (clang, freestanding);
#   2. test_package_aar.sh: the AAR packager and its prefab checker, on
#      stand-in libraries built with clang and lld;
#   3. tools/android/build.sh: the real NDK build of the three ABIs and its
#      AAR, when ANDROID_NDK points at an NDK (skipped, visibly, otherwise).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python3 "$here/struct_layout.py"
bash "$here/test_package_aar.sh"
bash "$here/../../tools/android/build.sh"
