# tessera — the commands a newcomer and CI use. Each target installs what it
# needs (Debian packages via scripts/install-deps.sh), configures and builds.
#
#   make demo    install deps, build, run the demo on simulated GPUs
#   make test    install deps, build, run every test (ctest)
#   make bench   install deps, build, run the benchmarks
#
# Variables: BUILD_DIR (default build), JOBS (default: nproc), SANITIZE (address|thread).

BUILD_DIR ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
SANITIZE ?=
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

.PHONY: all deps configure build test demo bench format clean

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

format:
	git ls-files '*.cc' '*.h' '*.c' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
