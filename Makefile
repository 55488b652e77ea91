# tessera — the commands a newcomer and CI use. Each target installs what it
# needs (Debian packages via scripts/install-deps.sh), configures and builds.
#
#   make demo    install deps, build, run the demo on simulated GPUs
#   make test    install deps, build, run every test (ctest)
#   make bench   install deps, build, run the benchmarks
#   make image   install deps, build, write the container image: $(BUILD_DIR)/image/oci (docs/install.md)
#   make fuzz    install deps, build the libFuzzer targets with clang in $(FUZZ_BUILD_DIR) and run each
#                for FUZZ_SECONDS (docs/fuzzing.md); `make test` replays their corpora and regressions
#   make chaos   install deps, build, run the chaos test long: CHAOS_PODS GPU pods through faults and
#                kills, seed CHAOS_SEED (docs/testing.md); `make test` runs it short (1000 pods)
#
# Variables: BUILD_DIR (default build), JOBS (default: nproc), SANITIZE (address|thread),
# IMAGE_FLAGS (image/build.sh options, e.g. --refresh-base to take Debian's latest updates),
# FUZZ_BUILD_DIR (default build-fuzz), FUZZ_SECONDS (per target, default 60), FUZZ_TARGETS (default: all),
# FUZZ_FLAGS (fuzz/run.sh options, e.g. --merge to keep inputs that reached new coverage),
# CHAOS_PODS (default 10000), CHAOS_SEED (default 19), CHAOS_NODES (default 3), CHAOS_LATE_ANSWERS (0; 1:
# Bindings may land after the scheduler's API timeout, an open case, docs/testing.md).

BUILD_DIR ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
SANITIZE ?=
CMAKE_FLAGS ?=
CTEST_FLAGS ?=
IMAGE_FLAGS ?=
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
FUZZ_FLAGS ?=
CHAOS_PODS ?= 10000
CHAOS_SEED ?= 19
CHAOS_NODES ?= 3
CHAOS_LATE_ANSWERS ?= 0

.PHONY: all deps configure build test demo bench image fuzz fuzz-deps chaos format clean

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DTESSERA_SANITIZE=$(SANITIZE) $(CMAKE_FLAGS)

configure: deps $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS)

demo: build
	$(BUILD_DIR)/bin/tessera demo

bench: build
	./bench/run-all.sh $(BUILD_DIR)

# Only what goes into the image is built for it: the three programs and libvgpu.so.
image: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target tessera tessera-scheduler tessera-node vgpu
	./image/build.sh --build-dir $(BUILD_DIR) --out $(BUILD_DIR)/image $(IMAGE_FLAGS)

# Its own build directory: clang, every library instrumented for coverage and ASan/UBSan.
# Warnings stay warnings there (clang's set differs from gcc's, which CI holds to -Werror).
fuzz-deps:
	@./scripts/install-deps.sh --fuzz

$(FUZZ_BUILD_DIR)/build.ninja: | fuzz-deps
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DTESSERA_FUZZ=ON -DTESSERA_WERROR=OFF $(CMAKE_FLAGS)

fuzz: fuzz-deps $(FUZZ_BUILD_DIR)/build.ninja
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target fuzz_targets
	./fuzz/run.sh --build-dir $(FUZZ_BUILD_DIR) --seconds $(FUZZ_SECONDS) $(FUZZ_FLAGS) $(FUZZ_TARGETS)

# The chaos test alone, long; it prints its throughput and what it injected.
chaos: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target chaos_test
	TESSERA_CHAOS_PODS=$(CHAOS_PODS) TESSERA_CHAOS_SEED=$(CHAOS_SEED) TESSERA_CHAOS_NODES=$(CHAOS_NODES) \
	  TESSERA_CHAOS_LATE_ANSWERS=$(CHAOS_LATE_ANSWERS) \
	  $(BUILD_DIR)/bin/chaos_test --gtest_filter='ChaosTest.*'

format:
	git ls-files '*.cc' '*.h' '*.c' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
