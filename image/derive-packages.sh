#!/usr/bin/env bash
# Prints the Debian packages that hold the shared libraries the given ELF files link directly
# (their DT_NEEDED entries, resolved as the dynamic linker would on this machine), one per line,
# sorted. Their own dependencies come with them through apt, so this is the runtime package list
# of the image: image/runtime-packages.txt is this script's output for tessera's binaries.
#
#   image/derive-packages.sh build/bin/tessera build/bin/tessera-scheduler build/bin/tessera-node build/lib/libvgpu.so
#
# Exits 1 when a needed library is not found or no package owns it (the build linked something
# that is not from a Debian package, which the image could not hold).
set -euo pipefail

if [ $# -eq 0 ]; then
  echo "usage: $0 ELF..." >&2
  exit 2
fi

owner_of() {  # path -> package name, trying the merged-/usr spellings dpkg may have recorded
  local path=$1 real candidates c out
  real=$(readlink -f "$path")
  candidates=("$path" "$real")
  for c in "$path" "$real"; do
    case "$c" in
      /usr/*) candidates+=("${c#/usr}") ;;
      *) candidates+=("/usr$c") ;;
    esac
  done
  for c in "${candidates[@]}"; do
    if out=$(dpkg-query -S "$c" 2>/dev/null); then
      # "libgrpc++1.51:amd64: /usr/lib/..." -> libgrpc++1.51
      echo "${out%%:*}"
      return 0
    fi
  done
  return 1
}

status=0
declare -A packages=()
for elf in "$@"; do
  if [ ! -f "$elf" ]; then
    echo "derive-packages: $elf: no such file" >&2
    exit 1
  fi
  # name => path, for every library the dynamic linker loads for this file. The dynamic linker
  # itself appears without "=>", under its path (/lib64/ld-linux-x86-64.so.2).
  ldd_output=$(ldd "$elf")
  declare -A resolved=()
  while read -r name arrow path _; do
    if [ "$arrow" = "=>" ]; then
      resolved[$name]=$path
    elif [[ "$name" == /* ]]; then
      resolved[${name##*/}]=$name
    fi
  done <<<"$ldd_output"
  while read -r needed; do
    path=${resolved[$needed]:-}
    if [ -z "$path" ] || [ ! -e "$path" ]; then
      echo "derive-packages: $elf needs $needed, which the dynamic linker does not find" >&2
      status=1
      continue
    fi
    if pkg=$(owner_of "$path"); then
      packages[$pkg]=1
    else
      echo "derive-packages: $elf needs $needed ($path), which no Debian package holds" >&2
      status=1
    fi
  done < <(readelf -d "$elf" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  unset resolved
done

printf '%s\n' "${!packages[@]}" | sort
exit $status
