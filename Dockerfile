# syntax=docker/dockerfile:1.4
#
# tessera's container image, for those who build with Docker (BuildKit, Docker 23 or later):
#
#   docker buildx build --build-context cuda=/usr/local/cuda/include \
#     --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse --short=12 HEAD) \
#     -t tessera:0.1.0 --load .
#
# The `cuda` build context is a directory holding cuda.h, the CUDA toolkit's driver-API header that
# libvgpu is compiled against (headers only; not in Debian main; see scripts/install-deps.sh).
#
# NOT TESTED: the project's machines and CI have no Docker engine. The image tessera builds and
# tests is `make image` (image/build.sh: mmdebstrap + umoci, no daemon; tests/image). This file
# makes the same image the Docker way, from the same lists, so the two stay in step:
#   build stage    scripts/install-deps.sh --build-only (the packages the build needs)
#   runtime stage  image/runtime-packages.txt (checked against the binaries here too) and
#                  image/dpkg-excludes.cfg
# and the same paths and config as image/build.sh: /usr/bin/tessera, tessera-scheduler,
# tessera-node, /usr/local/tessera/libvgpu.so, no entrypoint, cmd `tessera --help`. The runtime
# base is debian:bookworm-slim instead of mmdebstrap's minbase: nearly the same package set.

# Replaced by --build-context cuda=DIR; empty otherwise (and the build stops, saying so).
FROM scratch AS cuda

FROM debian:bookworm AS build
ENV DEBIAN_FRONTEND=noninteractive
RUN --mount=from=cuda,target=/cuda \
    if [ ! -f /cuda/cuda.h ]; then \
      echo "Dockerfile: no cuda.h; pass --build-context cuda=/usr/local/cuda/include (a directory holding the CUDA toolkit's cuda.h)" >&2; \
      exit 1; \
    fi; \
    mkdir -p /usr/local/cuda/include && cp /cuda/cuda.h /usr/local/cuda/include/cuda.h
RUN --mount=type=bind,source=scripts/install-deps.sh,target=/tmp/install-deps.sh \
    /tmp/install-deps.sh --build-only && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/root/.cache/ccache \
    CCACHE_DIR=/root/.cache/ccache cmake -S . -B build -G Ninja \
 && CCACHE_DIR=/root/.cache/ccache cmake --build build -j"$(nproc)" \
      --target tessera tessera-scheduler tessera-node vgpu
# The runtime stage installs image/runtime-packages.txt: stop here if the binaries need more.
RUN image/derive-packages.sh build/bin/tessera build/bin/tessera-scheduler build/bin/tessera-node \
      build/lib/libvgpu.so > /tmp/needed \
 && sed 's/#.*//' image/runtime-packages.txt | awk 'NF {print $1}' | sort -u > /tmp/listed \
 && if comm -23 /tmp/needed /tmp/listed | grep .; then \
      echo "Dockerfile: image/runtime-packages.txt lacks the packages above" >&2; exit 1; \
    fi
RUN mkdir -p /out/usr/bin /out/usr/local/tessera \
 && for p in tessera tessera-scheduler tessera-node; do \
      strip --strip-debug -o /out/usr/bin/$p build/bin/$p; \
    done \
 && strip --strip-debug -o /out/usr/local/tessera/libvgpu.so build/lib/libvgpu.so \
 && chmod 0755 /out/usr/bin/* /out/usr/local/tessera/libvgpu.so

FROM debian:bookworm-slim
ENV DEBIAN_FRONTEND=noninteractive
COPY image/dpkg-excludes.cfg /etc/dpkg/dpkg.cfg.d/tessera
RUN --mount=type=bind,source=image/runtime-packages.txt,target=/tmp/runtime-packages.txt \
    apt-get update \
 && sed 's/#.*//' /tmp/runtime-packages.txt | awk 'NF {print $1}' \
      | xargs apt-get install -y --no-install-recommends \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log /var/cache/debconf/*-old
COPY --from=build /out/ /
ENV DEBIAN_FRONTEND= \
    TESSERA_LIBVGPU=/usr/local/tessera/libvgpu.so
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="tessera" \
      org.opencontainers.image.description="GPU sharing for Kubernetes: tessera, tessera-scheduler, tessera-node and libvgpu.so" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.documentation="docs/install.md" \
      io.tessera.image.base="debian:bookworm-slim (Dockerfile)" \
      io.tessera.image.libvgpu="/usr/local/tessera/libvgpu.so"
CMD ["tessera", "--help"]
