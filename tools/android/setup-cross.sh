#!/usr/bin/env bash
# Installs, on Debian or Ubuntu, what the Android checks need and are
# missing: clang and lld (tests/android/struct_layout.py, test_package_aar.sh),
# the aarch64 and armhf cross compilers and qemu-user
# (tests/android/qemu_tests.sh). Prints nothing when all are there.
#
# With --gpu also Debian's Vulkan loader, lavapipe (mesa-vulkan-drivers) and
# validation layer for arm64 and armhf, for qemu_tests.sh --gpu: installed as
# multiarch packages where apt can, otherwise unpacked (not installed) with
# the libraries they need into $KVRT_CROSS_ROOTS/<arch> (/opt/kvrt-cross),
# where qemu_tests.sh looks for them. Multiarch needs the foreign package of
# every shared library at the very version installed for the host, so it
# fails while the mirror's index of that architecture lags behind the host's
# (a security update whose armhf index is mid-sync, say); the unpacked root
# has no such tie.
set -euo pipefail
need=()
have() { command -v "$1" >/dev/null 2>&1; }
have_any() { local c; for c in "$@"; do have "$c" && return 0; done; return 1; }
have_any clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14 || need+=(clang)
have_any ld.lld ld.lld-19 ld.lld-18 ld.lld-17 ld.lld-16 ld.lld-15 ld.lld-14 || need+=(lld)
have aarch64-linux-gnu-g++ || need+=(g++-aarch64-linux-gnu)
have arm-linux-gnueabihf-g++ || need+=(g++-arm-linux-gnueabihf)
{ have qemu-aarch64 && have qemu-arm; } || { have qemu-aarch64-static && have qemu-arm-static; } || need+=(qemu-user)

sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
if [ ${#need[@]} -gt 0 ]; then
  echo "setup-cross: installing ${need[*]}"
  # A mirror caught mid-sync fails one index; what is needed is usually in the rest.
  $sudo apt-get update -q >/dev/null 2>&1 || true
  $sudo apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi
[ "${1:-}" = --gpu ] || exit 0

roots=${KVRT_CROSS_ROOTS:-/opt/kvrt-cross}
native=$(dpkg --print-architecture)
gpu_packages() { echo "libvulkan1:$1 mesa-vulkan-drivers:$1 vulkan-validationlayers:$1"; }
installed() { local p; for p in $(gpu_packages "$1"); do dpkg -s "$p" >/dev/null 2>&1 || return 1; done; }

# Unpacks $1's lavapipe, loader and validation layer and every library they
# need (from apt's own dependency lists, so the versions agree with each
# other) into $2. apt-get download checks each package against the signed
# index, as an install would.
unpack_root() {
  local arch=$1 dir=$2 tmp pkgs d
  # shellcheck disable=SC2046
  pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
           --no-replaces --no-enhances $(gpu_packages "$arch") |
         grep -E "^(lib[^ ]*|zlib1g|mesa-vulkan-drivers|vulkan-validationlayers):$arch\$" |
         grep -vE '^lib(python|perl)' | sort -u)
  tmp=$(mktemp -d)
  # shellcheck disable=SC2086
  (cd "$tmp" && chmod 777 . && $sudo apt-get download -q $pkgs >/dev/null)
  $sudo rm -rf "$dir.new"
  $sudo mkdir -p "$dir.new"
  for d in "$tmp"/*.deb; do $sudo dpkg-deb -x "$d" "$dir.new"; done
  $sudo rm -rf "$dir" "$tmp"
  $sudo mv "$dir.new" "$dir"
}

for arch in arm64 armhf; do
  installed "$arch" && continue
  [ -f "$roots/$arch/.complete" ] && continue
  dpkg --print-foreign-architectures | grep -qx "$arch" || $sudo dpkg --add-architecture "$arch"
  echo "setup-cross: installing lavapipe for $arch"
  # Only this architecture's indexes (and the host's): a broken index of
  # another foreign architecture would make apt keep stale ones for all.
  $sudo apt-get update -q -o "APT::Architectures::=$native" -o "APT::Architectures::=$arch" >/dev/null 2>&1 || true
  # shellcheck disable=SC2046
  if $sudo apt-get install -y -q --no-install-recommends $(gpu_packages "$arch") >/dev/null 2>&1; then
    continue
  fi
  echo "setup-cross: multiarch install of $(gpu_packages "$arch") failed; unpacking them into $roots/$arch"
  unpack_root "$arch" "$roots/$arch"
  $sudo touch "$roots/$arch/.complete"
done
