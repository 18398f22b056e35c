#!/usr/bin/env bash
# Mutation testing of the kernels and of the host-side allocators: do the tests
# notice a broken one?
#
#   tools/mutations/run.sh [NAME...]     every tools/mutations/*.patch, or those named
#
# Each patch breaks a kernel or allocator on purpose (its `# what:` line says how) and
# names the tests that cover it (`# tests:`, a ctest regular expression over
# the GPU and unit tests), and may name environment settings for that run
# (`# env:`, e.g. KVRT_VALIDATION=gpu for an out-of-bounds access that only
# the validation layer's GPU-assisted mode sees). For each one, the script applies it to a copy of the source
# tree, builds the copy, runs those tests, and records which failed; then it
# takes the patch out again. A mutation that no test catches fails the run,
# as does a test that fails without any mutation (checked first, over the
# tests of all the mutations run). The table of mutations and the tests that
# caught them is printed at the end and written to $DIR/report.txt.
#
# The working tree is never modified. The copy and its build live in $DIR
# (KVRT_MUTATION_DIR, default build-mutations/ in the source tree): tree/ is
# refreshed from the working tree's tracked and unignored files at the start
# (changed files only, so the build stays incremental), build/ is its own
# CMake build (tests only), logs/ holds every build and test log. A patch
# still applied when the script stops, also on Ctrl-C, is taken out of the
# copy on the way out. JOBS sets the build and test parallelism (default 2).
#
# Each mutation rebuilds the SPIR-V of the shader it touches (attention.comp
# has 288 variants), so a full run takes tens of minutes on two cores.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${KVRT_MUTATION_DIR:-$ROOT/build-mutations}
JOBS=${JOBS:-2}
TREE=$DIR/tree
BUILD=$DIR/build
LOGS=$DIR/logs
PATCHES=$ROOT/tools/mutations

applied=""  # the patch applied to the copy now, if any

take_out() {
    if [[ -n $applied ]]; then
        echo "taking $(basename "$applied" .patch) out of the copy"
        reverse "$applied" || echo "could not take $applied out: delete $TREE to start afresh" >&2
        applied=""
    fi
}
trap take_out EXIT
trap 'exit 130' INT TERM

# The files a patch touches, from its +++ lines.
patched_files() { sed -n 's|^+++ b/\([^[:space:]]*\).*|\1|p' "$1"; }

# Applying and reversing leave the touched files newer than every build
# output, so the next build recompiles what depends on them either way.
apply() {
    patch -s -d "$TREE" -p1 --no-backup-if-mismatch <"$1"
    (cd "$TREE" && patched_files "$1" | xargs touch)
}
reverse() {
    patch -s -R -d "$TREE" -p1 --no-backup-if-mismatch <"$1"
    (cd "$TREE" && patched_files "$1" | xargs touch)
}

# The copy: tracked and unignored files of the working tree; a file is copied
# only when its content changed (with a fresh time, so it gets rebuilt), and
# files gone from the working tree go from the copy too.
sync_tree() {
    mkdir -p "$TREE"
    local list
    list=$(mktemp)
    git -C "$ROOT" ls-files -co --exclude-standard >"$list"
    while IFS= read -r f; do
        [[ -f $ROOT/$f ]] || continue
        if ! cmp -s "$ROOT/$f" "$TREE/$f" 2>/dev/null; then
            mkdir -p "$(dirname "$TREE/$f")"
            cp "$ROOT/$f" "$TREE/$f"
        fi
    done <"$list"
    local gone
    gone=$(cd "$TREE" && find . -type f | sed 's|^\./||' | grep -vxF -f "$list" || true)
    if [[ -n $gone ]]; then
        while IFS= read -r f; do rm -f "$TREE/$f"; done <<<"$gone"
    fi
    rm -f "$list"
}

build() {
    local log=$1
    if [[ ! -f $BUILD/build.ninja ]]; then
        # ccache, when the machine has it, makes the per-mutation rebuilds cheap.
        local launcher=()
        command -v ccache >/dev/null &&
            launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
        cmake -S "$TREE" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
            -DKVRT_TESTS_ONLY=ON -DKVRT_BUILD_TOOLS=OFF -DKVRT_BUILD_EXAMPLES=OFF "${launcher[@]}" >"$log" 2>&1
    fi
    cmake --build "$BUILD" -j "$JOBS" --target kvrt_gpu_tests kvrt_unit_tests >>"$log" 2>&1
}

# Runs the GPU and unit tests matching $1 (output in log $2; $3: VAR=value settings for
# their environment); prints the names of those
# that failed, "(timed out)" after the name of one that only ran out of time
# (ctest's limit, or a wait of kvrt's), which says nothing of the mutation.
run_tests() {
    local regex=$1 log=$2 settings=()
    [[ -n ${3:-} ]] && read -r -a settings <<<"$3"
    rm -f "$BUILD/Testing/Temporary/LastTestsFailed.log"
    (cd "$BUILD" && env "${settings[@]}" ctest -L 'gpu|unit' -R "$regex" -j "$JOBS" --timeout 1800 \
        --output-on-failure >"$log" 2>&1) || true
    if ! grep -q "tests passed" "$log"; then
        echo "ctest did not run (see $log)" >&2
        return 2
    fi
    [[ -f $BUILD/Testing/Temporary/LastTestsFailed.log ]] || return 0
    awk '
        /Test +#[0-9]+: / {
            cur = ""
            if ($0 ~ /\*\*\*(Failed|Timeout|Exception)/) {
                cur = $0
                sub(/^.*Test +#[0-9]+: (gpu|unit): */, "", cur)
                sub(/ \.+ *\**(Failed|Timeout|Exception).*$/, "", cur)
                order[++n] = cur
                if ($0 ~ /\*\*\*Timeout/) slow[cur] = 1
            }
            next
        }
        /^ *Start +[0-9]+: / { cur = ""; next }
        cur != "" && /did not complete within|KVRT_ERROR_TIMEOUT/ { slow[cur] = 1 }
        END { for (i = 1; i <= n; ++i) print order[i] (order[i] in slow ? " (timed out)" : "") }
    ' "$log"
}

field() { sed -n "s/^# $1: //p" "$2" | head -n 1; }

main() {
    local names=("$@") patches=()
    if [[ ${#names[@]} -eq 0 ]]; then
        patches=("$PATCHES"/*.patch)
    else
        for n in "${names[@]}"; do
            [[ -f $PATCHES/$n.patch ]] || { echo "no mutation $n ($PATCHES/$n.patch)" >&2; exit 2; }
            patches+=("$PATCHES/$n.patch")
        done
    fi
    mkdir -p "$LOGS"
    echo "refreshing the copy in $TREE"
    sync_tree
    for p in "${patches[@]}"; do
        patch -s --dry-run -d "$TREE" -p1 <"$p" >/dev/null || { echo "$(basename "$p") does not apply" >&2; exit 2; }
    done

    local all=""
    for p in "${patches[@]}"; do all+="${all:+|}$(field tests "$p")"; done
    echo "building the unmutated copy"
    build "$LOGS/build-none.log" || { echo "the unmutated build failed: $LOGS/build-none.log" >&2; exit 1; }
    echo "running the tests of every mutation on the unmutated copy"
    local failed
    failed=$(run_tests "$all" "$LOGS/test-none.log") || exit 1
    if [[ -n $failed ]]; then
        echo "tests fail without any mutation (see $LOGS/test-none.log):" >&2
        echo "$failed" >&2
        exit 1
    fi

    local report=$DIR/report.txt missed=0
    : >"$report"
    for p in "${patches[@]}"; do
        local name
        name=$(basename "$p" .patch)
        echo "mutation $name: $(field what "$p")"
        apply "$p"
        applied=$p
        if ! build "$LOGS/build-$name.log"; then
            echo "  the mutated build failed: $LOGS/build-$name.log" >&2
            exit 1
        fi
        failed=$(run_tests "$(field tests "$p")" "$LOGS/test-$name.log" "$(field env "$p")") || exit 1
        take_out
        [[ -n $failed ]] && echo "$failed" | sed 's/^/  failed: /'
        if [[ -z $(echo "$failed" | grep -v ' (timed out)$' || true) ]]; then
            missed=$((missed + 1))
            printf '%s\tNOT CAUGHT\n' "$name" >>"$report"
            echo "  NOT CAUGHT: no test failed (other than by running out of time)"
        else
            printf '%s\t%s\n' "$name" "$(echo "$failed" | paste -sd ';' - | sed 's/;/; /g')" >>"$report"
        fi
    done
    echo
    echo "mutation -> failing tests ($report)"
    column -t -s $'\t' "$report" 2>/dev/null || cat "$report"
    if [[ $missed -gt 0 ]]; then
        echo "$missed mutation(s) not caught" >&2
        exit 1
    fi
}

main "$@"
