#!/usr/bin/env bash
# Installs every Debian package that tessera's build, tests and benchmarks need.
# Idempotent: when everything is already present it does nothing (no apt-get update either).
#
#   scripts/install-deps.sh               everything: build, tests, benchmarks, `make image`
#   scripts/install-deps.sh --build-only  what configuring and building needs (the Dockerfile's build stage)
#   scripts/install-deps.sh --fuzz        everything, plus clang and its libFuzzer/sanitizer runtimes (`make fuzz`)
set -euo pipefail

# What `cmake -S . -B build && cmake --build build` needs (the configure step finds GTest and benchmark too).
BUILD_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  nlohmann-json3-dev libcpp-httplib-dev libspdlog-dev libfmt-dev libyaml-cpp-dev libcli11-dev
  libcurl4-openssl-dev libssl-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev
)
# What the tests, benchmarks and `make image` add.
TEST_PACKAGES=(
  python3 clang-format  # clang-format: `make format`
  prometheus  # /usr/bin/prometheus and promtool for the metrics integration tests (~22 MB download, ~330 MB installed)
  mmdebstrap umoci  # `make image` and its test (image/build.sh): the root file system and the OCI layout
  python3-yaml  # tests/image: reading the rendered manifests (`kubectl kustomize deploy/`)
  chromium chromium-driver  # the dashboard's browser tests (tests/integration/dashboard): headless Chromium over WebDriver
)
# What `make fuzz` adds (fuzz/README.md): Debian's clang, and compiler-rt with libFuzzer and the
# ASan/UBSan runtimes (libclang-rt-dev pulls the one matching the default clang).
FUZZ_PACKAGES=(clang libclang-rt-dev)

# kubectl: tests/integration/kubectl runs kubectl-tessera through it, tests/image renders deploy/ with it. Debian's
# package is kubernetes-client (1.20: plugins work; its kustomize is too old for deploy/, and that test skips);
# a newer kubectl already on the machine (e.g. from Kubernetes' own packages) is used as it is.
if ! command -v kubectl >/dev/null 2>&1; then TEST_PACKAGES+=(kubernetes-client); fi

PACKAGES=("${BUILD_PACKAGES[@]}")
case "${1:-}" in
  --build-only) ;;
  "") PACKAGES+=("${TEST_PACKAGES[@]}") ;;
  --fuzz) PACKAGES+=("${TEST_PACKAGES[@]}" "${FUZZ_PACKAGES[@]}") ;;
  *) echo "usage: $0 [--build-only | --fuzz]" >&2; exit 2 ;;
esac

# The CUDA toolkit's cuda.h (the driver API's published declarations) is needed to build the simulated
# driver and libvgpu. It is not a Debian main package (Debian's nvidia-cuda-dev is in non-free, and older),
# so it is checked for, not installed: NVIDIA's CUDA toolkit installs it in /usr/local/cuda/include.
CUDA_INCLUDE_DIR=${TESSERA_CUDA_INCLUDE_DIR:-/usr/local/cuda/include}
check_cuda_header() {
  if [ -f "$CUDA_INCLUDE_DIR/cuda.h" ]; then return 0; fi
  cat >&2 <<MSG
install-deps: $CUDA_INCLUDE_DIR/cuda.h not found.
  tessera compiles its simulated driver and libvgpu against the CUDA toolkit's cuda.h (headers only; no GPU
  or driver needed). Install NVIDIA's CUDA toolkit (https://developer.nvidia.com/cuda-downloads; it puts
  the headers in /usr/local/cuda/include), or point the build at a directory holding cuda.h:
    this check:  TESSERA_CUDA_INCLUDE_DIR=/path/to/include $0
    the build:   cmake -DTESSERA_CUDA_INCLUDE_DIR=/path/to/include ...
                 or: make test CMAKE_FLAGS=-DTESSERA_CUDA_INCLUDE_DIR=/path/to/include
MSG
  return 1
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  check_cuda_header || exit 1
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

# The prometheus package's postinst starts its daemon (invoke-rc.d / systemd), which tests do not
# want: they run their own. Without systemd the init script may also fail and take the install
# with it. A policy-rc.d that refuses every start holds for this install only; one the machine
# already has (Docker images ship one) is left alone.
POLICY_RC_D=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY_RC_D" ]; then
  trap '$SUDO rm -f "$POLICY_RC_D"' EXIT
  printf '#!/bin/sh\n# written by tessera scripts/install-deps.sh for one apt-get install\nexit 101\n' |
    $SUDO tee "$POLICY_RC_D" >/dev/null
  $SUDO chmod 755 "$POLICY_RC_D"
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
check_cuda_header || exit 1
