#!/usr/bin/env bash
# The container image `make image` writes, tested as a user of it would: built (or found up to date)
# from this build directory's binaries, unpacked, and every program run inside its root file system.
#
#   tests/image/image_test.sh BUILD_DIR
#
# Checks: the layout has the tags <version> and latest; the config has no entrypoint, cmd
# `tessera --help`, the OCI labels and TESSERA_LIBVGPU; tessera, tessera-scheduler and tessera-node
# run `--help` in the image (exit 0, their usage line) and the dynamic linker finds every library
# they and libvgpu.so need there; /usr/local/tessera/libvgpu.so is an ELF shared object that
# exports cuMemAlloc_v2; the image's binaries are this build's (same GNU build IDs); no simulated
# driver, no test program, no documentation but copyright files, no man pages, no apt lists, no
# device nodes.
#
# Exit 77 (ctest: skipped) when this machine cannot build or run the image; the message says why.
set -uo pipefail

build_dir=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
out=$build_dir/image
oci=$out/oci
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok:   $*"; }
skip() { echo "SKIPPED: $*"; exit 77; }

started=$(date +%s)
"$source_dir/image/build.sh" --build-dir "$build_dir" --out "$out"
status=$?
if [ $status -eq 77 ]; then skip "image/build.sh cannot build the image on this machine (its message above)"; fi
if [ $status -ne 0 ]; then echo "FAIL: image/build.sh exited $status"; exit 1; fi
echo "image/build.sh took $(( $(date +%s) - started )) s"

# Running programs inside the root file system: chroot as root, else a user namespace.
if [ "$(id -u)" -eq 0 ]; then
  in_root() { local root=$1; shift; chroot "$root" "$@"; }
  rootless=()
elif unshare --map-root-user true 2>/dev/null; then
  in_root() { local root=$1; shift; unshare --map-root-user --root="$root" "$@"; }
  rootless=(--rootless)
else
  skip "neither root nor unprivileged user namespaces: cannot run programs inside the image"
fi

work=$(mktemp -d "$out/test.XXXXXX")
trap 'rm -rf "$work"' EXIT

# ---- the layout and the config ---------------------------------------------------------------------
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build_dir/CMakeCache.txt")
tags=$(umoci ls --layout "$oci" | sort | paste -sd' ' -)
expected_tags=$(printf '%s\n' "$version" latest | sort | paste -sd' ' -)
[ "$tags" = "$expected_tags" ] && pass "tags: $tags" || fail "tags are '$tags', expected '$expected_tags'"

python3 - "$oci" "$version" <<'PY' || failures=$((failures + 1))
import json, os, sys
oci, version = sys.argv[1], sys.argv[2]
def blob(digest):
    with open(os.path.join(oci, "blobs", *digest.split(":"))) as f:
        return json.load(f)
index = json.load(open(os.path.join(oci, "index.json")))
latest = [m for m in index["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"] == "latest"][0]
manifest = blob(latest["digest"])
config = blob(manifest["config"]["digest"])
c = config["config"]
problems = []
if c.get("Entrypoint"): problems.append(f"an entrypoint: {c['Entrypoint']}")
if c.get("Cmd") != ["tessera", "--help"]: problems.append(f"cmd {c.get('Cmd')}, expected ['tessera', '--help']")
if "TESSERA_LIBVGPU=/usr/local/tessera/libvgpu.so" not in c.get("Env", []): problems.append(f"env {c.get('Env')}")
labels = c.get("Labels", {})
for key in ["title", "description", "version", "revision", "created"]:
    if not labels.get("org.opencontainers.image." + key): problems.append(f"no label org.opencontainers.image.{key}")
if labels.get("org.opencontainers.image.version") != version: problems.append(f"version label {labels.get('org.opencontainers.image.version')}")
if config.get("architecture") != "amd64" or config.get("os") != "linux": problems.append("platform is not linux/amd64")
if len(manifest["layers"]) != 2: problems.append(f"{len(manifest['layers'])} layers, expected 2 (Debian, tessera)")
size = sum(l["size"] for l in manifest["layers"])
print(f"image: {len(manifest['layers'])} layers, {size / 2**20:.1f} MiB compressed; labels: "
      + ", ".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(labels.items()) if k.startswith("org.opencontainers")))
for p in problems: print("FAIL: config:", p)
sys.exit(1 if problems else 0)
PY
[ $? -eq 0 ] && pass "config: no entrypoint, cmd tessera --help, labels, TESSERA_LIBVGPU"

# ---- unpacked ------------------------------------------------------------------------------------
rootfs=$work/rootfs
if ! umoci raw unpack "${rootless[@]}" --image "$oci:latest" "$rootfs"; then
  echo "FAIL: umoci raw unpack"; exit 1
fi
echo "root file system: $(du -sm "$rootfs" | cut -f1) MiB unpacked"

check_help() {  # program, a line its --help prints
  local program=$1 line=$2 output status
  output=$(in_root "$rootfs" "/usr/bin/$program" --help 2>&1)
  status=$?
  if [ $status -ne 0 ]; then
    fail "$program --help in the image exited $status: $(echo "$output" | head -5)"
  elif ! grep -qF -- "$line" <<<"$output"; then
    fail "$program --help in the image does not print '$line': $(echo "$output" | head -5)"
  else
    pass "$program --help in the image: exit 0, '$line'"
  fi
}
check_help tessera "Usage: tessera [OPTIONS] SUBCOMMAND"
check_help tessera-scheduler "tessera-scheduler: kube-scheduler extender"
check_help tessera-node "tessera-node: the tessera agent on a GPU node."

libvgpu=/usr/local/tessera/libvgpu.so
for program in /usr/bin/tessera /usr/bin/tessera-scheduler /usr/bin/tessera-node $libvgpu; do
  libraries=$(in_root "$rootfs" /usr/bin/ldd "$program" 2>&1)
  if [ $? -ne 0 ] || grep -q "not found" <<<"$libraries"; then
    fail "ldd $program in the image: $(grep "not found" <<<"$libraries" | paste -sd, -)"
  else
    pass "every library $program needs is in the image ($(grep -c '=>' <<<"$libraries") resolved)"
  fi
done

# libvgpu.so: an ELF shared object (e_type ET_DYN) that defines cuMemAlloc_v2, at the path the
# node agent's defaults name (src/node/config.h) and deploy/node's init container copies from.
if [ ! -f "$rootfs$libvgpu" ]; then
  fail "$libvgpu is not in the image"
else
  header=$(readelf -h "$rootfs$libvgpu" 2>&1)
  if grep -q "Type:.*DYN (Shared object file)" <<<"$header"; then
    pass "$libvgpu is an ELF shared object"
  else
    fail "$libvgpu is not an ELF shared object: $(grep Type: <<<"$header")"
  fi
  symbols=$(readelf --dyn-syms -W "$rootfs$libvgpu")
  if [ -n "$(awk '$8 == "cuMemAlloc_v2" && $7 != "UND" && $4 == "FUNC"' <<<"$symbols")" ]; then
    pass "$libvgpu exports cuMemAlloc_v2"
  else
    fail "$libvgpu does not export cuMemAlloc_v2"
  fi
fi

# The image holds this build's binaries (strip keeps the GNU build ID).
build_id() { readelf -n "$1" 2>/dev/null | sed -n 's/.*Build ID: //p'; }
for pair in bin/tessera:/usr/bin/tessera bin/tessera-scheduler:/usr/bin/tessera-scheduler \
            bin/tessera-node:/usr/bin/tessera-node lib/libvgpu.so:$libvgpu; do
  built=$(build_id "$build_dir/${pair%%:*}")
  packed=$(build_id "$rootfs${pair#*:}")
  if [ -n "$built" ] && [ "$built" = "$packed" ]; then
    pass "${pair#*:} is $build_dir/${pair%%:*} (build ID $built)"
  else
    fail "${pair#*:} in the image (build ID '$packed') is not $build_dir/${pair%%:*} ('$built')"
  fi
done

# What must not be there.
unwanted=$(cd "$rootfs" && {
  find . -name 'libcuda.so*' -o -name 'libnvidia-ml.so*' -o -name '*_test' -o -path './usr/lib/sim'
  find ./usr/share/doc -type f ! -name copyright
  find ./usr/share/man ./usr/share/info ./usr/share/locale -mindepth 1 -maxdepth 1 2>/dev/null
  find ./var/lib/apt/lists ./var/cache/apt -type f ! -name lock 2>/dev/null  # apt's empty lock files stay
  find ./dev -mindepth 1
} | head -20)
if [ -z "$unwanted" ]; then
  pass "no simulated driver, tests, documentation, man pages, apt lists or device nodes"
else
  fail "the image holds what it should not: $(echo "$unwanted" | paste -sd' ' -)"
fi

echo "image test took $(( $(date +%s) - started )) s"
if [ $failures -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all image checks passed"
