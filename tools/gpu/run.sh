#!/usr/bin/env bash
# Runs kvrt's GPU tests, under the Khronos validation layer, and its
# benchmarks on this machine's GPU, from what tools/gpu/prepare.sh put in
# .gpu/ (the Vulkan loader and validation layer as Debian packages, and the
# programs). For a machine with a GPU driver and nothing else: it unpacks the
# loader into / only when the machine has none, and the layer into
# /tmp/kvrt-vvl. Logs go to $OUT (default gpu-out/): info.txt, tests.txt,
# bench.txt; a summary is printed last.
#
#   KVRT_GPU_QUICK=1   a few tests and small sizes (to check this script on
#                      any device, lavapipe included)
#   KVRT_GPU_TESTS     Catch2 test spec for the suite (default: every test)
#   KVRT_GPU_TEST_S    seconds the suite may take (default 300)
#   KVRT_GPU_BENCH_S   seconds all the benchmarks may take (default 230)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
G=${KVRT_GPU_DIR:-$ROOT/.gpu}
O=${OUT:-$ROOT/gpu-out}
QUICK=${KVRT_GPU_QUICK:-0}
mkdir -p "$O"
[ -x "$G/bin/kvrt_gpu_tests" ] || { echo "run: $G/bin/kvrt_gpu_tests is missing: run tools/gpu/prepare.sh first" >&2; exit 1; }
start=$(date +%s)

# The Vulkan loader: the machine's own, else the carried package.
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 '; then
  echo "run: no Vulkan loader here: unpacking $(basename "$G"/debs/libvulkan1_*.deb) into /"
  dpkg -x "$G"/debs/libvulkan1_*.deb / && ldconfig
fi
# The validation layer, beside the system.
vvl=/tmp/kvrt-vvl
rm -rf "$vvl" && dpkg -x "$G"/debs/vulkan-validationlayers_*.deb "$vvl"
export VK_ADD_LAYER_PATH=$vvl/usr/share/vulkan/explicit_layer.d
export LD_LIBRARY_PATH=$vvl/usr/lib/x86_64-linux-gnu:$G/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# NVIDIA's driver in a container: its ICD file where the loader does not look.
nv=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$nv" ]; then export VK_DRIVER_FILES=$nv; fi
export KVRT_VALIDATION=1

kvrt=$G/bin/kvrt
echo "run: kvrt built from $(cat "$G/commit" 2>/dev/null || echo "an unknown commit")" | tee "$O/info.txt"
"$kvrt" info >>"$O/info.txt" 2>&1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem \
  --format=csv >>"$O/info.txt" 2>&1
cat "$O/info.txt"

# ---- The GPU suite, validation on (every test creates its contexts with the
# layer and fails on any validation message).
spec=${KVRT_GPU_TESTS:-}
[ "$QUICK" = 1 ] && spec=${KVRT_GPU_TESTS:-"[context],a forced kernel variant*"}
echo "run: GPU tests${spec:+ ($spec)}, at most ${KVRT_GPU_TEST_S:-300} s"
t0=$(date +%s)
# shellcheck disable=SC2086
timeout "${KVRT_GPU_TEST_S:-300}" "$G/bin/kvrt_gpu_tests" --durations yes --order decl ${spec:+"$spec"} \
  >"$O/tests.txt" 2>&1
test_rc=$?
echo "run: GPU tests exit $test_rc after $(($(date +%s) - t0)) s"

# ---- Benchmarks (Vulkan timestamps; medians of --runs), each bounded in time.
bench_deadline=$(($(date +%s) + ${KVRT_GPU_BENCH_S:-230}))
: >"$O/bench.txt"
bench() {  # bench LABEL ARGS...: one `kvrt bench` case, its rows into bench.txt
  local label=$1 left
  shift
  left=$((bench_deadline - $(date +%s)))
  if [ "$left" -le 5 ]; then
    echo "skipped (no time left): $label" >>"$O/bench.txt"
    return
  fi
  [ "$left" -gt 90 ] && left=90
  local rows
  rows=$(timeout "$left" "$kvrt" bench "$@" 2>>"$O/bench-stderr.txt" | grep -E '^[a-z][a-z-]* ' | grep -v '^case ')
  local rc=$?
  if [ -n "$rows" ]; then
    echo "$rows" | sed "s/^/$label  /" >>"$O/bench.txt"
  else
    echo "failed (exit $rc): $label: kvrt bench $*" >>"$O/bench.txt"
  fi
}
if [ "$QUICK" = 1 ]; then
  copy_mib=16 decode_cells=(256 1024) seq_counts=(1 4 8) prefill=32 big=0
else
  copy_mib=4096 decode_cells=(4096 32768 131072) seq_counts=(1 8 64) prefill=512 big=1
fi
bench copy copy --mib "$copy_mib" --runs 10
for t in f16 q8_0 q4_0; do
  for s in "${seq_counts[@]}"; do
    for c in "${decode_cells[@]}"; do
      # 64 sequences of 131,072 cells: 8.4M cells, 32 GiB of f16: left out.
      [ "$big" = 1 ] && [ "$s" = 64 ] && [ "$c" = 131072 ] && continue
      bench "decode" attn --type "$t" --cells "$c" --seqs "$s" --runs 10
    done
  done
  bench "prefill" attn --type "$t" --cells 4096 --queries "$prefill" --runs 10
done
# The same sequences stored in turns of 16 tokens, as decoding them together
# leaves their cells: each query's run of cells is then the whole cache.
bench "decode interleaved" attn --type f16 --cells "${decode_cells[0]}" --seqs "${seq_counts[2]}" --interleave 16 \
  --runs 10
# About a million cells in turns (lists_ms: the lists' rebuild at that size).
[ "$big" = 1 ] && bench "decode interleaved" attn --type f16 --cells 16384 --seqs 64 --interleave 16 --runs 10
for k in portable tiled; do
  KVRT_KERNELS=$k bench "decode $k" attn --type f16 --cells "${decode_cells[1]}" --seqs "${seq_counts[1]}" --runs 10
  KVRT_KERNELS=$k bench "prefill $k" attn --type f16 --cells 4096 --queries "$prefill" --runs 10
done
bench copy copy --mib "$copy_mib" --runs 10
bench standard standard

echo
echo "==== $(head -2 "$O/info.txt" | tail -1)"
echo "GPU tests: exit $test_rc; $(grep -E '^(All tests passed|test cases:)' "$O/tests.txt" | tail -2 | tr '\n' ' ')"
grep -E 'FAILED|[Vv]alidation' "$O/tests.txt" | sort | uniq -c | sort -rn | head -8
# Effective bandwidth against the copy's (bytes read and written per second,
# the largest copy of the run); for attention over several queries per
# sequence also TFLOP/s (QK and PV: 4 * queries * sequences * cells * heads *
# head_dim operations; causal masking not subtracted).
echo "benchmarks: label, case, parameters, median ms, min ms, GB/s, fraction of the copy's GB/s [, TFLOP/s]"
grep -vE '^standard ' "$O/bench.txt" | sed -E 's/ +/ /g' | awk '
  { lines[NR] = $0 }
  $1 == "copy" && $2 == "copy" && $NF + 0 > best { best = $NF + 0 }
  END {
    for (i = 1; i <= NR; ++i) {
      n = split(lines[i], f, " ")
      g = n  # GB/s: the last field that is not an extra figure (name=value)
      while (g > 1 && f[g] ~ /=/) --g
      if (!(best > 0 && f[g] ~ /^[0-9.]+$/) || lines[i] ~ /^copy /) { print lines[i]; continue }
      q = 1; sq = 1; c = 0; h = 0; d = 0; ms = 0
      for (j = 1; j <= n; ++j) {
        if (split(f[j], kv, "=") == 2) {
          if (kv[1] == "queries") q = kv[2]; else if (kv[1] == "seqs") sq = kv[2]
          else if (kv[1] == "cells") c = kv[2]; else if (kv[1] == "heads") h = kv[2]
          else if (kv[1] == "head_dim") d = kv[2]
        } else if (ms == 0 && f[j] ~ /^[0-9]+\.[0-9]+$/) ms = f[j]
      }
      line = sprintf("%s  %.2f", lines[i], f[g] / best)
      if (f[2] == "attn" && q > 1 && ms > 0) line = sprintf("%s  %.2f TFLOP/s", line, 4 * q * sq * c * h * d / (ms * 1e9))
      print line
    }
  }'
echo "run: $(($(date +%s) - start)) s in all; logs in $O"
