#!/usr/bin/env bash
# Packages per-ABI builds of libkvrt.so and the public headers as an Android
# Archive with a prefab package, so that an app built with the Android Gradle
# plugin (buildFeatures { prefab true }) finds kvrt with
# find_package(kvrt REQUIRED CONFIG) and links kvrt::kvrt.
#
#   tools/android/package-aar.sh [options] ABI=LIBRARY...
#
#   ABI=LIBRARY      e.g. arm64-v8a=build-android-arm64-v8a/lib/libkvrt.so;
#                    one per ABI (arm64-v8a, armeabi-v7a, x86_64, x86)
#   -o FILE          the AAR to write (default build-android/kvrt-VERSION.aar)
#   --api N          the minimum Android API level the libraries were built
#                    for (default 24)
#   --ndk N          the NDK's major version (default: read from
#                    $ANDROID_NDK/source.properties)
#   --stl NAME       the C++ runtime the libraries use: c++_static (default)
#                    or c++_shared
#   --package NAME   the AAR's Java package name (default org.kvrt)
#   --stage DIR      build the layout in DIR and keep it (default: a
#                    temporary directory)
#
# The layout (prefab schema version 2):
#   AndroidManifest.xml, classes.jar (empty)
#   prefab/prefab.json                             name, version
#   prefab/modules/kvrt/module.json
#   prefab/modules/kvrt/include/kvrt/*.h
#   prefab/modules/kvrt/libs/android.ABI/abi.json  abi, api, ndk, stl, static
#   prefab/modules/kvrt/libs/android.ABI/libkvrt.so
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out="" api=24 ndk="" stl=c++_static package=org.kvrt stage=""
libs=()

die() { echo "package-aar: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=$2; shift 2 ;;
    --api) api=$2; shift 2 ;;
    --ndk) ndk=$2; shift 2 ;;
    --stl) stl=$2; shift 2 ;;
    --package) package=$2; shift 2 ;;
    --stage) stage=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *=*) libs+=("$1"); shift ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

[ ${#libs[@]} -gt 0 ] || die "no ABI=LIBRARY given (see --help)"
case "$stl" in c++_static|c++_shared) ;; *) die "--stl must be c++_static or c++_shared" ;; esac
[[ "$api" =~ ^[0-9]+$ ]] && [ "$api" -ge 24 ] || die "--api must be a number >= 24"
if [ -z "$ndk" ]; then
  props=${ANDROID_NDK:-}/source.properties
  [ -n "${ANDROID_NDK:-}" ] && [ -f "$props" ] || die "--ndk not given and \$ANDROID_NDK/source.properties not found"
  ndk=$(sed -n 's/^Pkg\.Revision *= *\([0-9]*\).*/\1/p' "$props")
fi
[[ "$ndk" =~ ^[0-9]+$ ]] || die "--ndk must be the NDK's major version, a number"

header=$root/include/kvrt/kvrt_version.h
version=$(for p in MAJOR MINOR PATCH; do sed -n "s/^#define KVRT_VERSION_$p \([0-9]*\).*/\1/p" "$header"; done | paste -sd.)
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "cannot read the version from $header"
out=${out:-$root/build-android/kvrt-$version.aar}

if [ -n "$stage" ]; then
  rm -rf "$stage"; mkdir -p "$stage"
else
  stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
fi
module=$stage/prefab/modules/kvrt
mkdir -p "$module/include/kvrt" "$module/libs"

cat > "$stage/AndroidManifest.xml" <<EOF
<?xml version="1.0" encoding="utf-8"?>
<manifest xmlns:android="http://schemas.android.com/apk/res/android" package="$package">
    <uses-sdk android:minSdkVersion="$api" />
</manifest>
EOF
cat > "$stage/prefab/prefab.json" <<EOF
{
  "schema_version": 2,
  "name": "kvrt",
  "version": "$version",
  "dependencies": []
}
EOF
# kvrt exports a C interface only, so a c++_static build may be linked into
# an app whatever C++ runtime the app uses.
cat > "$module/module.json" <<EOF
{
  "export_libraries": [],
  "library_name": "libkvrt",
  "android": {}
}
EOF
for h in kvrt.h kvrt_static.h kvrt_paged.h kvrt_state.h kvrt_memory.h kvrt_vulkan.h kvrt_version.h; do
  cp "$root/include/kvrt/$h" "$module/include/kvrt/$h"
done

seen=" "
for spec in "${libs[@]}"; do
  abi=${spec%%=*} lib=${spec#*=}
  case "$abi" in arm64-v8a|armeabi-v7a|x86_64|x86) ;; *) die "unknown ABI '$abi'" ;; esac
  case "$seen" in *" $abi "*) die "ABI $abi given twice" ;; esac
  seen="$seen$abi "
  [ -f "$lib" ] || die "$lib not found"
  [ "$(head -c 4 "$lib" | od -An -c | tr -d ' ')" = '177ELF' ] || die "$lib is not an ELF file"
  dir=$module/libs/android.$abi
  mkdir -p "$dir"
  cp "$lib" "$dir/libkvrt.so"
  cat > "$dir/abi.json" <<EOF
{
  "abi": "$abi",
  "api": $api,
  "ndk": $ndk,
  "stl": "$stl",
  "static": false
}
EOF
done

python3 - "$stage" <<'EOF'
import sys, zipfile
zipfile.ZipFile(sys.argv[1] + "/classes.jar", "w").close()
EOF
mkdir -p "$(dirname "$out")"
rm -f "$out"
python3 - "$stage" "$out" <<'EOF'
import os, sys, zipfile
stage, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for d, dirs, files in os.walk(stage):
        dirs.sort()
        for f in sorted(files):
            path = os.path.join(d, f)
            z.write(path, os.path.relpath(path, stage))
EOF
echo "package-aar: wrote $out (kvrt $version;${seen% }; API $api, NDK r$ndk, $stl)"
