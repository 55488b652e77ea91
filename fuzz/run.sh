#!/usr/bin/env bash
# Runs the libFuzzer targets one after another (`make fuzz` calls this after
# building them; fuzz/README.md).
#
#   fuzz/run.sh [--build-dir DIR] [--seconds N] [--merge] [TARGET...]
#
#   --build-dir DIR  where the fuzz build is (default build-fuzz)
#   --seconds N      how long each target runs (default 60)
#   --merge          afterwards, add the inputs that reached new coverage to
#                    fuzz/corpus/<target> (libFuzzer -merge=1); otherwise the
#                    kept corpus is only read
#   TARGET...        names as in fuzz/CMakeLists.txt (default: every target)
#
# New inputs go to DIR/fuzz-work/<target>, crashes to
# DIR/fuzz-artifacts/<target>/, the log to DIR/fuzz-logs/<target>.log. A
# crash fails the run (exit 1) after every target ran; its input is the file
# to minimise, fix and keep in fuzz/regressions/<target>/.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build_dir=build-fuzz
seconds=60
merge=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --merge) merge=1; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^ *tessera_fuzz_target(\([a-z_0-9]*\).*/\1/p' "$here/CMakeLists.txt")
fi
case "$seconds" in ''|*[!0-9]*) echo "run.sh: --seconds must be a whole number, got '$seconds'" >&2; exit 2 ;; esac

# Inputs larger than a target needs only slow it down; a region file is the
# exception (the whole file, ~580 KiB, is the input).
max_len_for() {
  case "$1" in
    region_file) echo 600000 ;;
    *) echo 16384 ;;
  esac
}

# The token list (fuzz/dict/) that helps a target past its syntax.
dict_for() {
  case "$1" in
    quantity) echo quantity.dict ;;
    vgpu_config) echo env.dict ;;
    node_config|scheduler_config) echo yaml.dict ;;
    pod_request|allocation_codec|inventory_codec|vgpu_json|extender|admission_review|kube_decode) echo json.dict ;;
  esac
}

failed=()
printf '%-18s %8s %10s %8s %8s %8s %s\n' target seconds execs exec/s cov ft crashes
for t in "${targets[@]}"; do
  bin="$build_dir/bin/fuzz_$t"
  if [ ! -x "$bin" ]; then
    echo "run.sh: $bin is not built (make fuzz builds it)" >&2
    exit 2
  fi
  work="$build_dir/fuzz-work/$t"
  artifacts="$build_dir/fuzz-artifacts/$t/"
  log="$build_dir/fuzz-logs/$t.log"
  mkdir -p "$work" "$artifacts" "$(dirname "$log")" "$here/regressions/$t"
  dict=()
  d=$(dict_for "$t")
  [ -n "$d" ] && dict=(-dict="$here/dict/$d")
  start=$(date +%s)
  status=0
  "$bin" "$work" "$here/corpus/$t" "$here/regressions/$t" "${dict[@]}" \
    -max_total_time="$seconds" -max_len="$(max_len_for "$t")" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts" -print_final_stats=1 >"$log" 2>&1 || status=$?
  elapsed=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$( (grep -o 'cov: [0-9]*' "$log" || true) | tail -1 | cut -d' ' -f2)
  ft=$( (grep -o 'ft: [0-9]*' "$log" || true) | tail -1 | cut -d' ' -f2)
  crashes=$(find "$artifacts" -type f | wc -l)
  printf '%-18s %8s %10s %8s %8s %8s %s\n' "$t" "$elapsed" "${execs:--}" "${rate:--}" "${cov:--}" "${ft:--}" "$crashes"
  if [ "$status" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    failed+=("$t")
    (grep -m1 -E 'ERROR: |error:|fuzz check failed|runtime error' "$log" || tail -1 "$log") | sed 's/^/    /'
  fi
  if [ "$merge" -eq 1 ]; then
    "$bin" -merge=1 -max_len="$(max_len_for "$t")" "$here/corpus/$t" "$work" >>"$log" 2>&1 || true
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "run.sh: crashes in: ${failed[*]} (inputs in $build_dir/fuzz-artifacts/<target>/, logs in $build_dir/fuzz-logs/)" >&2
  exit 1
fi
