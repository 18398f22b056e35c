# kvrt: the two commands of the README, and a few more.
#
#   make demo    set up, build, run `kvrt demo` on the default device
#   make test    set up, build, run every test (GPU tests with validation on,
#                unit tests also under ASan+UBSan)
#   make build   set up and build only
#   make bench   set up, build, run the standard benchmark set
#   make abi-baseline
#                after an intended ABI change: rebuild the library, then
#                rewrite tests/abi/kvrt.symbols (from the headers' KVRT_API
#                declarations) and tests/abi/kvrt.abi (abidw of the library)
#
# BUILD_TYPE=Debug make build picks another build type; JOBS sets parallelism.

BUILD      ?= build
ASAN_BUILD ?= build-asan
BUILD_TYPE ?= RelWithDebInfo
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all setup build test unit-asan demo bench abi-baseline clean

all: build

setup:
	@bash tools/setup.sh

$(BUILD)/build.ninja: | setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

build: setup $(BUILD)/build.ninja
	@cmake --build $(BUILD) -j $(JOBS)

$(ASAN_BUILD)/build.ninja: | setup
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKVRT_UNIT_TESTS_ONLY=ON \
	  -DKVRT_BUILD_TOOLS=OFF \
	  "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  "-DCMAKE_C_FLAGS=-fsanitize=address,undefined -fno-sanitize-recover=all" >/dev/null

# The unit tests again under AddressSanitizer and UndefinedBehaviorSanitizer.
unit-asan: setup $(ASAN_BUILD)/build.ninja
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS)

test: build unit-asan
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	@$(BUILD)/bin/kvrt demo

bench: build
	@$(BUILD)/bin/kvrt bench standard

abi-baseline: setup $(BUILD)/build.ninja
	@cmake --build $(BUILD) --target abi-baseline

clean:
	@rm -rf $(BUILD) $(ASAN_BUILD)
