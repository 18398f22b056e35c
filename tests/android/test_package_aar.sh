#!/usr/bin/env bash
# Tests tools/android/package-aar.sh and check_aar.py without an NDK: builds a
# stand-in libkvrt.so per Android ABI with clang and lld (no libc, one
# function), packages them, and checks the AAR; then checks that the checker
# refuses what Android would refuse (a versioned SONAME, a library of another
# ABI, a library that needs libc++_shared.so under c++_static).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/tests/android

find_tool() { for n in "$@"; do command -v "$n" >/dev/null && { command -v "$n"; return; }; done; return 1; }
clang=$(find_tool clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14) ||
  { echo "test_package_aar: clang not found (on Debian: apt-get install clang lld)" >&2; exit 1; }
lld=$(find_tool ld.lld ld.lld-19 ld.lld-18 ld.lld-17 ld.lld-16 ld.lld-15 ld.lld-14) ||
  { echo "test_package_aar: ld.lld not found (on Debian: apt-get install lld)" >&2; exit 1; }

work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
echo 'int kvrt_stand_in(void) { return 0; }' > "$work/lib.c"

# stand_in ABI TARGET SONAME [NEEDED]: a shared object for TARGET.
stand_in() {
  local out=$work/$1/$3
  mkdir -p "$work/$1"
  "$clang" --target="$2" -ffreestanding -nostdlib -shared -fPIC -fuse-ld="$lld" \
    -Wl,-soname,"$3" ${4:+"$work/$4"} -o "$work/$1/libkvrt.so" "$work/lib.c"
}
"$clang" --target=aarch64-linux-android24 -nostdlib -shared -fuse-ld="$lld" -Wl,-soname,libc++_shared.so \
  -o "$work/libc++_shared.so" "$work/lib.c"

declare -A triple=([arm64-v8a]=aarch64-linux-android24 [armeabi-v7a]=armv7a-linux-androideabi24
                   [x86_64]=x86_64-linux-android24 [x86]=i686-linux-android24)
args=()
for abi in arm64-v8a armeabi-v7a x86_64 x86; do
  stand_in "$abi" "${triple[$abi]}" libkvrt.so
  args+=("$abi=$work/$abi/libkvrt.so")
done

fail=0
expect() {  # expect ok|fail DESCRIPTION COMMAND...
  local want=$1 what=$2; shift 2
  if "$@" >"$work/log" 2>&1; then got=ok; else got=fail; fi
  if [ "$got" = "$want" ]; then echo "test_package_aar: ok: $what${VERBOSE:+: $(tail -n 1 "$work/log")}"
  else echo "test_package_aar: FAILED: $what (expected $want)"; cat "$work/log"; fail=1; fi
}

pkg=$root/tools/android/package-aar.sh
expect ok "four ABIs, c++_static, packaged" bash "$pkg" --ndk 27 -o "$work/kvrt.aar" --stage "$work/stage" "${args[@]}"
expect ok "the AAR passes the prefab checks" python3 "$here/check_aar.py" "$work/kvrt.aar" \
  --abis arm64-v8a,armeabi-v7a,x86,x86_64 --api 24 --stl c++_static
expect ok "c++_shared at API 26, packaged" bash "$pkg" --ndk 27 --api 26 --stl c++_shared -o "$work/shared.aar" "${args[@]:0:2}"
expect ok "the c++_shared AAR passes" python3 "$here/check_aar.py" "$work/shared.aar" \
  --abis arm64-v8a,armeabi-v7a --api 26 --stl c++_shared
expect fail "the packager refuses API 23" bash "$pkg" --ndk 27 --api 23 -o "$work/x.aar" "${args[0]}"
expect fail "the packager refuses an unknown ABI" bash "$pkg" --ndk 27 -o "$work/x.aar" "mips=$work/x86/libkvrt.so"
expect fail "the packager refuses an ABI given twice" bash "$pkg" --ndk 27 -o "$work/x.aar" "${args[0]}" "${args[0]}"

stand_in versioned aarch64-linux-android24 libkvrt.so.0.1
expect ok "versioned SONAME, packaged" bash "$pkg" --ndk 27 -o "$work/bad1.aar" "arm64-v8a=$work/versioned/libkvrt.so"
expect fail "the checker refuses a versioned SONAME" python3 "$here/check_aar.py" "$work/bad1.aar"
expect ok "x86 library as arm64-v8a, packaged" bash "$pkg" --ndk 27 -o "$work/bad2.aar" "arm64-v8a=$work/x86/libkvrt.so"
expect fail "the checker refuses a library of another ABI" python3 "$here/check_aar.py" "$work/bad2.aar"
stand_in needs-cxx aarch64-linux-android24 libkvrt.so libc++_shared.so
expect ok "library needing libc++_shared.so, packaged as c++_static" bash "$pkg" --ndk 27 -o "$work/bad3.aar" \
  "arm64-v8a=$work/needs-cxx/libkvrt.so"
expect fail "the checker refuses it" python3 "$here/check_aar.py" "$work/bad3.aar"
python3 - "$work/stage/prefab/prefab.json" <<'PY' && cp "$work/kvrt.aar" "$work/bad4.aar"
import json, sys
p = json.load(open(sys.argv[1])); p["schema_version"] = 1; json.dump(p, open(sys.argv[1], "w"))
PY
(cd "$work/stage" && python3 -c "import zipfile,sys; z=zipfile.ZipFile('$work/bad4.aar','w'); [z.write(l, l) for l in sys.argv[1:]]" \
  AndroidManifest.xml classes.jar prefab/prefab.json)
expect fail "the checker refuses schema_version 1 and a missing module" python3 "$here/check_aar.py" "$work/bad4.aar"

exit $fail
