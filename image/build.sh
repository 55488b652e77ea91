#!/usr/bin/env bash
# Builds tessera's container image as an OCI image layout, without a container daemon:
#
#   layer 1  Debian bookworm, variant minbase, plus image/runtime-packages.txt (mmdebstrap);
#            no documentation but copyright files, no man pages, no locales, no apt lists
#   layer 2  /usr/bin/tessera, tessera-scheduler, tessera-node and /usr/local/tessera/libvgpu.so,
#            taken from an existing build directory, without their debug information
#
# then umoci writes the layout, the image config (no entrypoint; cmd `tessera --help`; OCI labels)
# and two tags: the project version and `latest`.
#
#   image/build.sh [--build-dir build] [--out build/image]
#
# Output: <out>/oci (load it with `skopeo copy oci:<out>/oci:latest docker://REGISTRY/tessera:TAG`).
# Layer 1 is cached in <out>/cache, keyed by the package list, this script and the mirrors: it is
# built once (it needs Debian's mirror, and root or unprivileged user namespaces) and reused until
# one of those changes; `--refresh-base` builds it anew (to take Debian's security updates).
# The whole image is rebuilt only when a layer or the config changes; otherwise the script says the
# image is up to date and leaves it alone.
#
# Exit codes: 0 built or up to date; 1 an error; 77 this machine cannot build it (a tool missing,
# the mirror unreachable, neither root nor user namespaces): the message says which. The tests map
# 77 to "skipped".
#
# Environment: TESSERA_IMAGE_MIRROR (default http://deb.debian.org/debian),
# TESSERA_IMAGE_SECURITY_MIRROR (default http://deb.debian.org/debian-security),
# SOURCE_DATE_EPOCH (default: the time of the last commit), for every timestamp in the image.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/.." && pwd)
build_dir=build
out_dir=
refresh_base=false
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --build-dir=*) build_dir=${1#*=}; shift ;;
    --out) out_dir=$2; shift 2 ;;
    --out=*) out_dir=${1#*=}; shift ;;
    --refresh-base) refresh_base=true; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "image/build.sh: unknown argument '$1' (--help)" >&2; exit 1 ;;
  esac
done
build_dir=$(cd "$build_dir" && pwd)
out_dir=${out_dir:-$build_dir/image}
mkdir -p "$out_dir/cache"
out_dir=$(cd "$out_dir" && pwd)

say() { echo "image: $*" >&2; }
cannot() { echo "image: cannot build the image here: $*" >&2; exit 77; }

suite=bookworm
mirror=${TESSERA_IMAGE_MIRROR:-http://deb.debian.org/debian}
security_mirror=${TESSERA_IMAGE_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
packages_file=$here/runtime-packages.txt
libvgpu_path=/usr/local/tessera/libvgpu.so  # src/node/config.h: libvgpu_host_path and libvgpu_container_path

# What goes into layer 2: path in the build directory -> path in the image.
declare -A contents=(
  [bin/tessera]=/usr/bin/tessera
  [bin/tessera-scheduler]=/usr/bin/tessera-scheduler
  [bin/tessera-node]=/usr/bin/tessera-node
  [bin/tessera-dra]=/usr/bin/tessera-dra
  [lib/libvgpu.so]=$libvgpu_path
)
inputs=()
for rel in "${!contents[@]}"; do
  if [ ! -f "$build_dir/$rel" ]; then
    echo "image: $build_dir/$rel is missing: build first (cmake --build $build_dir)" >&2
    exit 1
  fi
  inputs+=("$build_dir/$rel")
done

for tool in mmdebstrap umoci tar flock sha256sum python3 strip readelf; do
  command -v "$tool" >/dev/null 2>&1 || cannot "'$tool' is not installed (scripts/install-deps.sh installs it)"
done

# One build at a time per output directory (make image and the test may run together).
exec 9>"$out_dir/.lock"
flock 9

# Every library the binaries link must come from a listed package, or the image would not run them.
runtime_packages=$(sed 's/#.*//' "$packages_file" | awk 'NF {print $1}' | sort -u)
needed=$("$here/derive-packages.sh" "${inputs[@]}")
unlisted=$(comm -23 <(echo "$needed") <(echo "$runtime_packages"))
if [ -n "$unlisted" ]; then
  echo "image: the binaries need libraries from packages that image/runtime-packages.txt does not list:" >&2
  echo "$unlisted" | sed 's/^/  /' >&2
  echo "  (image/derive-packages.sh prints the whole list)" >&2
  exit 1
fi

export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$source_dir" log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build_dir/CMakeCache.txt" 2>/dev/null || true)
version=${version:-0.0.0}
revision=$(git -C "$source_dir" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)

# ---- layer 1: the Debian root file system ---------------------------------------------------------
base_key=$( { cat "$packages_file" "$here/dpkg-excludes.cfg"; sed -n '/^# ---- layer 1/,/^# ---- layer 2/p' "$0";
              echo "$suite $mirror $security_mirror"; } | sha256sum | cut -c1-16)
base_tar=$out_dir/cache/base-$base_key.tar
if $refresh_base; then rm -f "$base_tar"; fi
if [ ! -f "$base_tar" ]; then
  reason=$(python3 - "$mirror/dists/$suite/InRelease" <<'PY'
import sys, urllib.request
try:
    urllib.request.urlopen(urllib.request.Request(sys.argv[1], method="HEAD"), timeout=20)
except Exception as e:
    print(getattr(e, "reason", e))
PY
  )
  if [ -n "$reason" ]; then
    cannot "Debian's mirror does not answer: $mirror ($reason; set TESSERA_IMAGE_MIRROR)"
  fi
  if [ "$(id -u)" -eq 0 ]; then
    mode=root
  elif command -v newuidmap >/dev/null 2>&1 && grep -q "^$(id -un):" /etc/subuid 2>/dev/null; then
    mode=unshare
  else
    cannot "mmdebstrap needs root, or user namespaces with newuidmap (uidmap) and a range in /etc/subuid"
  fi
  say "building the Debian $suite root file system (mmdebstrap, $mode mode; a minute or two)"
  rm -f "$out_dir"/cache/base-*.tar
  log=$out_dir/cache/mmdebstrap.log
  if ! mmdebstrap --mode="$mode" --variant=minbase --format=tar --quiet \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --include="$(echo "$runtime_packages" | paste -sd, -)" \
    --aptopt='APT::Install-Recommends "false"' \
    --aptopt='Acquire::Languages "none"' \
    --dpkgopt="$here/dpkg-excludes.cfg" \
    --customize-hook='rm -f "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old "$1"/etc/machine-id' \
    --customize-hook='rm -f "$1"/var/cache/ldconfig/aux-cache "$1"/usr/share/info/dir' \
    "$suite" "$base_tar.tmp" \
    "deb $mirror $suite main" \
    "deb $mirror $suite-updates main" \
    "deb $security_mirror $suite-security main" > "$log" 2>&1; then
    tail -n 30 "$log" >&2
    # Losing the mirror half-way is this machine's network, not the recipe: skipped, as above.
    if grep -qE "Failed to fetch|Could not (connect|resolve)|Temporary failure resolving|Connection timed out" "$log"; then
      cannot "mmdebstrap lost Debian's mirror half-way (the whole log: $log)"
    fi
    echo "image: mmdebstrap failed (the whole log: $log)" >&2
    exit 1
  fi
  # mmdebstrap puts device nodes into /dev; a container runtime makes its own, and a layer holding
  # device nodes cannot be unpacked without privileges.
  tar --list --file="$base_tar.tmp" > "$base_tar.list"
  if grep -q '^\./dev/.' "$base_tar.list"; then
    tar --delete --file="$base_tar.tmp" --wildcards './dev/?*'
  fi
  rm -f "$base_tar.list"
  mv "$base_tar.tmp" "$base_tar"
fi

# ---- layer 2: tessera's binaries ------------------------------------------------------------------
staging=$out_dir/cache/tessera-root
rm -rf "$staging"
for rel in "${!contents[@]}"; do
  # Without their debug information (RelWithDebInfo's -g): 2.6 MB instead of 52 MB for
  # tessera-node. The symbol tables and the GNU build IDs stay, so a crash in the image can be
  # read against the build directory's binaries (tests/image checks the IDs match).
  install -D -m 0755 "$build_dir/$rel" "$staging${contents[$rel]}"
  strip --strip-debug "$staging${contents[$rel]}"
done
chmod 0755 "$staging/usr" "$staging/usr/bin" "$staging/usr/local" "$staging/usr/local/tessera"
app_tar=$out_dir/cache/tessera-layer.tar
(cd "$staging" && find . -mindepth 1 -print0 | sort -z |
   tar --create --file="$app_tar.tmp" --format=posix \
       --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
       --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
       --no-recursion --null --files-from=-)
mv "$app_tar.tmp" "$app_tar"
rm -rf "$staging"

# ---- the image ------------------------------------------------------------------------------------
image_key=$( { sha256sum "$base_tar" "$app_tar" | cut -d' ' -f1; sed -n '/^# ---- the image/,$p' "$0";
               echo "$version $revision $created"; } | sha256sum | cut -c1-16)
oci=$out_dir/oci
if [ -f "$oci/index.json" ] && [ "$(cat "$out_dir/oci.key" 2>/dev/null)" = "$image_key" ]; then
  say "up to date: $oci (tags $version, latest)"
  exit 0
fi

say "writing the OCI layout $oci"
tmp=$out_dir/oci.tmp
rm -rf "$tmp"
umoci init --layout "$tmp"
umoci new --image "$tmp:$version"
umoci raw add-layer --image "$tmp:$version" --history.created="$created" \
  --history.created_by="mmdebstrap --variant=minbase $suite + image/runtime-packages.txt" "$base_tar"
umoci raw add-layer --image "$tmp:$version" --history.created="$created" \
  --history.created_by="tessera binaries and libvgpu.so (image/build.sh)" "$app_tar"
umoci config --image "$tmp:$version" --no-history --created="$created" \
  --architecture=amd64 --os=linux --author="tessera" \
  --config.cmd=tessera --config.cmd=--help --config.workingdir=/ \
  --config.env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env=TESSERA_LIBVGPU=$libvgpu_path \
  --config.label=org.opencontainers.image.title=tessera \
  --config.label="org.opencontainers.image.description=GPU sharing for Kubernetes: tessera, tessera-scheduler, tessera-node and libvgpu.so" \
  --config.label=org.opencontainers.image.version="$version" \
  --config.label=org.opencontainers.image.revision="$revision" \
  --config.label=org.opencontainers.image.created="$created" \
  --config.label=org.opencontainers.image.documentation=docs/install.md \
  --config.label=io.tessera.image.base="debian:$suite minbase (mmdebstrap)" \
  --config.label=io.tessera.image.libvgpu="$libvgpu_path"
umoci tag --image "$tmp:$version" latest
umoci gc --layout "$tmp"
rm -rf "$oci"
mv "$tmp" "$oci"
echo "$image_key" > "$out_dir/oci.key"
size=$(du -sb "$oci" | cut -f1)
say "built $oci: tags $version and latest, $((size / 1024 / 1024)) MiB compressed"
