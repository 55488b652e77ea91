#!/usr/bin/env bash
# Compute isolation benchmark (issue 5) on the simulated GPU.
#
#   bench/compute/run.sh [BUILD_DIR] [OUT_DIR]
#
# Needs the targets vgpu, tessera_sim_cuda, tessera_sim_nvml,
# compute_share_workload and compute_launch_cost built in BUILD_DIR (default
# build). Prints the tables recorded in docs/benchmarks.md and leaves the raw
# per-window shares and the time series (series.txt) in OUT_DIR, from which
# bench/compute/plot.py draws docs/img/compute-share.svg.
set -euo pipefail
BUILD=$(realpath "${1:-build}")
OUT=${2:-$(mktemp -d /tmp/tessera-compute-bench-XXXXXX)}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/tessera-compute-run-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
WL=$BUILD/bin/compute_share_workload
export TESSERA_SIM_GPUS=2xA100-80GB TESSERA_SIM_STATE=$WORK/sim LD_LIBRARY_PATH=$BUILD/lib/sim
PRELOAD=$BUILD/lib/libvgpu.so

# tenant LABEL QUOTA POLICY KERNEL_US DURATION_S WINDOW_MS [extra env...]: one
# preloaded tenant in its own container (region); output to $OUT/LABEL.txt.
tenant() {
  local label=$1 quota=$2 policy=$3 kernel=$4 dur=$5 win=$6
  shift 6
  # One region per label: the tenants of a group run in the background
  # (subshells), so nothing counted here could tell them apart.
  env TESSERA_REGION="$WORK/region-$label/vgpu.region" LD_PRELOAD="$PRELOAD" CUDA_DEVICE_SM_LIMIT="$quota" \
    GPU_CORE_UTILIZATION_POLICY="$policy" "$@" "$WL" "$label" "$kernel" "$dur" "$win" > "$OUT/$label.txt"
}

# stats FILE QUOTA FIRST_WINDOW: mean, min, max and worst |share - quota| of the
# windows ending after FIRST_WINDOW seconds (the last, partial window excluded).
stats() {
  awk -v q="$2" -v from="$3" '
    { rows[NR] = $0; t[NR] = $2; s[NR] = $3 }
    END {
      n = 0; sum = 0; min = 1e9; max = -1; worst = 0
      for (i = 1; i < NR; i++) {            # the final window may be cut short
        if (t[i] <= from) continue
        n++; sum += s[i]
        if (s[i] < min) min = s[i]
        if (s[i] > max) max = s[i]
        d = s[i] - q; if (d < 0) d = -d; if (d > worst) worst = d
      }
      if (n == 0) { print "n/a"; exit }
      printf "%6.2f %6.2f %6.2f %6.2f %d\n", sum / n, min, max, worst, n
    }' "$1"
}

echo "== one tenant, policy force: share per 1-s window after the first second"
echo "quota kernel_us   mean    min    max  worst|dev| windows"
for q in 10 30 50 70 90; do
  for k in 100 1000 10000; do
    tenant "one-q$q-k$k" "$q" force "$k" 6 1000
    printf "%5s %9s %s\n" "$q" "$k" "$(stats "$OUT/one-q$q-k$k.txt" "$q" 1)"
  done
done

echo "== one tenant, policy force, 50 ms kernels: share per 5-s window after the first second"
echo "quota kernel_us   mean    min    max  worst|dev| windows"
for q in 10 30 50 70 90; do
  tenant "long-q$q" "$q" force 50000 11.5 5000
  # windows of 5 s: use the ones ending at 5 s and 10 s... shift by one second
  printf "%5s %9s %s\n" "$q" 50000 "$(stats "$OUT/long-q$q.txt" "$q" 0)"
done

echo "== unlimited (no quota) ceiling of the workload on this machine"
for k in 100 1000 10000; do
  env TESSERA_REGION="$WORK/region-unl-$k/vgpu.region" LD_PRELOAD="$PRELOAD" "$WL" "unl-k$k" "$k" 4 1000 \
    > "$OUT/unl-k$k.txt"
  printf "unlimited %9s %s\n" "$k" "$(stats "$OUT/unl-k$k.txt" 100 1)"
done

echo "== several tenants, policy force, 1 ms kernels, 1-s windows after the first second"
echo "tenant quota   mean    min    max  worst|dev| windows"
group() {
  local name=$1
  shift
  local pids=() i=0
  for q in "$@"; do
    i=$((i + 1))
    tenant "$name-$i-q$q" "$q" force 1000 6 1000 &
    pids+=($!)
  done
  wait "${pids[@]}"
  i=0
  for q in "$@"; do
    i=$((i + 1))
    printf "%-10s %5s %s\n" "$name-$i" "$q" "$(stats "$OUT/$name-$i-q$q.txt" "$q" 1)"
  done
}
group two-10-90 10 90
group two-30-70 30 70
group four-25 25 25 25 25
echo "== one container (one region, one budget), four processes, quota 25: their sum"
pids=()
for i in 1 2 3 4; do
  env TESSERA_REGION="$WORK/region-shared/vgpu.region" LD_PRELOAD="$PRELOAD" CUDA_DEVICE_SM_LIMIT=25 \
    GPU_CORE_UTILIZATION_POLICY=force "$WL" "shared-$i" 1000 6 1000 > "$OUT/shared-$i.txt" &
  pids+=($!)
done
wait "${pids[@]}"
paste "$OUT"/shared-[1-4].txt | awk '{ print "shared", $2, $3 + $6 + $9 + $12 }' > "$OUT/shared-sum.txt"
printf "%-10s %5s %s\n" "sum of 4" 25 "$(stats "$OUT/shared-sum.txt" 25 1)"
tenant "alone-25" 25 force 1000 6 1000
printf "%-10s %5s %s\n" "alone" 25 "$(stats "$OUT/alone-25.txt" 25 1)"

echo "== time series for the plot: quota 30, force, 1 ms kernels, 100-ms windows"
tenant series 30 force 1000 10 100
cp "$OUT/series.txt" "$OUT/series-q30.txt"

echo "== launch hook cost (ns per cuLaunchKernel; 200000 launches)"
COST=$BUILD/bin/compute_launch_cost
printf "%-28s %s\n" "plain (no libvgpu)" "$("$COST")"
printf "%-28s %s\n" "libvgpu, no quota" "$(env TESSERA_REGION="$WORK/cost1/vgpu.region" LD_PRELOAD="$PRELOAD" "$COST")"
printf "%-28s %s\n" "libvgpu, quota 90 (under)" "$(env TESSERA_REGION="$WORK/cost2/vgpu.region" LD_PRELOAD="$PRELOAD" \
  CUDA_DEVICE_SM_LIMIT=90 GPU_CORE_UTILIZATION_POLICY=force "$COST")"
echo "raw output: $OUT"
