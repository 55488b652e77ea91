# tessera — the commands a newcomer and CI use. Each target installs what it
# needs (Debian packages via scripts/install-deps.sh), configures and builds.
#
#   make demo    install deps, build, run the demo on simulated GPUs
#   make test    install deps, build, run every test (ctest)
#   make bench   install deps, build, run the benchmarks
#   make image   install deps, build, write the container image: $(BUILD_DIR)/image/oci (docs/install.md)
#
# Variables: BUILD_DIR (default build), JOBS (default: nproc), SANITIZE (address|thread),
# IMAGE_FLAGS (image/build.sh options, e.g. --refresh-base to take Debian's latest updates).

BUILD_DIR ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
SANITIZE ?=
CMAKE_FLAGS ?=
CTEST_FLAGS ?=
IMAGE_FLAGS ?=

.PHONY: all deps configure build test demo bench image format clean

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

format:
	git ls-files '*.cc' '*.h' '*.c' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
