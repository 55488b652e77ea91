#!/usr/bin/env bash
# Compute isolation benchmark (issue 5) on the simulated GPU.
#
#   bench/compute/run.sh [BUILD_DIR] [OUT_DIR] [SECTION...]
#
# Sections (default: all, in this order): one long ceiling latency groups
# shares series cost.
#
# Needs the targets vgpu, tessera_sim_cuda, tessera_sim_nvml,
# compute_share_workload and compute_launch_cost built in BUILD_DIR (default
# build). Prints the tables recorded in docs/benchmarks.md and leaves the raw
# per-window shares and the time series (series.txt) in OUT_DIR, from which
# bench/compute/plot.py draws docs/img/compute-share.svg.
#
# A saturating tenant keeps IN_FLIGHT_MS (10) of work queued, so that a late
# wake-up of a loaded host does not idle the device. The latency-bound table
# runs the old three-kernels-in-flight workload instead, each limited run with
# a twin: the same workload without a quota on the second simulated GPU in the
# same seconds, which measures what the host let such a tenant have.
set -euo pipefail
BUILD=$(realpath "${1:-build}")
OUT=${2:-$(mktemp -d /tmp/tessera-compute-bench-XXXXXX)}
shift $(($# < 2 ? $# : 2))
SECTIONS=${*:-one long ceiling latency groups shares series cost}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/tessera-compute-run-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
WL=$BUILD/bin/compute_share_workload
export TESSERA_SIM_GPUS=2xA100-80GB TESSERA_SIM_STATE=$WORK/sim LD_LIBRARY_PATH=$BUILD/lib/sim
PRELOAD=$BUILD/lib/libvgpu.so
IN_FLIGHT_MS=10

echo "host: $(nproc) CPUs, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

# tenant LABEL QUOTA POLICY KERNEL_US DURATION_S WINDOW_MS [IN_FLIGHT_MS]: one
# preloaded tenant in its own container (region), saturating unless told
# otherwise; output to $OUT/LABEL.txt.
tenant() {
  local label=$1 quota=$2 policy=$3 kernel=$4 dur=$5 win=$6 inflight=${7:-$IN_FLIGHT_MS}
  # One region per label: the tenants of a group run in the background
  # (subshells), so nothing counted here could tell them apart.
  env TESSERA_REGION="$WORK/region-$label/vgpu.region" LD_PRELOAD="$PRELOAD" CUDA_DEVICE_SM_LIMIT="$quota" \
    GPU_CORE_UTILIZATION_POLICY="$policy" "$WL" "$label" "$kernel" "$dur" "$win" "$inflight" \
    > "$OUT/$label.txt"
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

# twin_stats LIMITED TWIN QUOTA FIRST_WINDOW: per window after FIRST_WINDOW
# (the last excluded), the limited tenant's share against what its unlimited
# twin got in the same window, capped at the quota: mean and min of the twin,
# and the worst shortfall share - min(quota, twin) (negative: the limiter took
# less than the host allowed).
twin_stats() {
  paste "$1" "$2" | awk -v q="$3" -v from="$4" '
    { t[NR] = $2; s[NR] = $3; u[NR] = $6 }
    END {
      n = 0; tsum = 0; tmin = 1e9; worst = 1e9
      for (i = 1; i < NR; i++) {
        if (t[i] <= from) continue
        n++; tsum += u[i]
        if (u[i] < tmin) tmin = u[i]
        cap = u[i] < q ? u[i] : q
        d = s[i] - cap; if (d < worst) worst = d
      }
      if (n == 0) { print "n/a"; exit }
      printf "%6.2f %6.2f %6.2f\n", tsum / n, tmin, worst
    }'
}

if want one; then
  echo "== one tenant, policy force, saturating ($IN_FLIGHT_MS ms in flight): share per 1-s window after the first second"
  echo "quota kernel_us   mean    min    max  worst|dev| windows"
  for q in 10 30 50 70 90; do
    for k in 100 1000 10000; do
      tenant "one-q$q-k$k" "$q" force "$k" 6 1000
      printf "%5s %9s %s\n" "$q" "$k" "$(stats "$OUT/one-q$q-k$k.txt" "$q" 1)"
    done
  done
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if want long; then
  echo "== one tenant, policy force, 50 ms kernels: share per 5-s window after the first second"
  echo "quota kernel_us   mean    min    max  worst|dev| windows"
  for q in 10 30 50 70 90; do
    tenant "long-q$q" "$q" force 50000 11.5 5000
    # windows of 5 s: use the ones ending at 5 s and 10 s... shift by one second
    printf "%5s %9s %s\n" "$q" 50000 "$(stats "$OUT/long-q$q.txt" "$q" 0)"
  done
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if want ceiling; then
  echo "== unlimited (no quota) ceiling of the saturating workload on this machine"
  for k in 100 1000 10000; do
    env TESSERA_REGION="$WORK/region-unl-$k/vgpu.region" LD_PRELOAD="$PRELOAD" "$WL" "unl-k$k" "$k" 4 1000 \
      "$IN_FLIGHT_MS" > "$OUT/unl-k$k.txt"
    printf "unlimited %9s %s\n" "$k" "$(stats "$OUT/unl-k$k.txt" 100 1)"
  done
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if want latency; then
  echo "== latency-bound tenant (3 kernels in flight), policy force, beside its unlimited twin on GPU 1"
  echo "quota kernel_us   mean    min    max  worst|dev| windows | twin mean, min; worst share - min(quota, twin)"
  for k in 100 1000; do
    for q in 10 30 50 70 90; do
      tenant "lat-q$q-k$k" "$q" force "$k" 6 1000 0 &
      lim=$!
      env TESSERA_REGION="$WORK/region-twin-q$q-k$k/vgpu.region" LD_PRELOAD="$PRELOAD" CUDA_VISIBLE_DEVICES=1 \
        "$WL" "twin-q$q-k$k" "$k" 6 1000 0 > "$OUT/twin-q$q-k$k.txt" &
      wait "$lim" $!
      printf "%5s %9s %s | %s\n" "$q" "$k" "$(stats "$OUT/lat-q$q-k$k.txt" "$q" 1)" \
        "$(twin_stats "$OUT/lat-q$q-k$k.txt" "$OUT/twin-q$q-k$k.txt" "$q" 1)"
    done
  done
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if want groups; then
  echo "== several tenants, policy force, saturating, 1 ms kernels, 1-s windows after the first second"
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
      GPU_CORE_UTILIZATION_POLICY=force "$WL" "shared-$i" 1000 6 1000 "$IN_FLIGHT_MS" > "$OUT/shared-$i.txt" &
    pids+=($!)
  done
  wait "${pids[@]}"
  paste "$OUT"/shared-[1-4].txt | awk '{ print "shared", $2, $3 + $6 + $9 + $12 }' > "$OUT/shared-sum.txt"
  printf "%-10s %5s %s\n" "sum of 4" 25 "$(stats "$OUT/shared-sum.txt" 25 1)"
  tenant "alone-25" 25 force 1000 6 1000
  printf "%-10s %5s %s\n" "alone" 25 "$(stats "$OUT/alone-25.txt" 25 1)"
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

# throttled_ms LABEL: the wall time the limiter made LABEL's launches wait
# (its region's DeviceEntry::throttled_ns, at byte 256 + 120: see
# src/vgpu/region_layout.h).
throttled_ms() {
  python3 -c 'import struct, sys
print("%.1f" % (struct.unpack_from("<Q", open(sys.argv[1], "rb").read(), 256 + 120)[0] / 1e6))' \
    "$WORK/region-$1/vgpu.region"
}

if want shares; then
  # Issue 19 item 4: tenants whose quotas add up to 100 % share one GPU, each
  # in its own container, policy force, 1 ms kernels, 6 s, 1-s windows after
  # the first second. Saturating: 10 ms in flight. Latency-bound: launch four
  # kernels, wait for all of them (cuEventSynchronize), again — the device
  # idles at each synchronisation unless a neighbour has work queued.
  # "throttled" is the time the limiter made the tenant wait; "device" the
  # group's summed share per window (100 = never idle). A latency-bound group
  # runs beside its twin on GPU 1 in the same seconds: the same tenants, the
  # largest without a quota, which measures what the host (and the others'
  # quotas) let the largest have; "vs host" is its worst window's share -
  # min(quota, twin's share), as in the latency section.
  echo "== shares: tenants with quotas adding up to 100 %, force, 1 ms kernels, 1-s windows after the first second"
  echo "workload  tenant quota   mean    min    max  worst|dev| windows throttled_ms [| twin mean, min; vs host]"
  shares_group() {
    local kind=$1 name=$2
    shift 2
    local pids=() i=0 inflight batch files=()
    if [[ $kind == saturating ]]; then inflight=$IN_FLIGHT_MS batch=0; else inflight=0 batch=4; fi
    for q in "$@"; do
      i=$((i + 1))
      local label="$kind-$name-$i-q$q"
      if [[ $q == 0 ]]; then  # no quota (the unlimited reference)
        env TESSERA_REGION="$WORK/region-$label/vgpu.region" LD_PRELOAD="$PRELOAD" \
          "$WL" "$label" 1000 6 1000 "$inflight" "$batch" > "$OUT/$label.txt" &
      else
        env TESSERA_REGION="$WORK/region-$label/vgpu.region" LD_PRELOAD="$PRELOAD" CUDA_DEVICE_SM_LIMIT="$q" \
          GPU_CORE_UTILIZATION_POLICY=force "$WL" "$label" 1000 6 1000 "$inflight" "$batch" > "$OUT/$label.txt" &
      fi
      pids+=($!)
      files+=("$OUT/$label.txt")
      if [[ $kind == latency && $q != 0 ]]; then
        local twin_env=(CUDA_DEVICE_SM_LIMIT="$q" GPU_CORE_UTILIZATION_POLICY=force)
        ((i == $#)) && twin_env=()  # the largest (given last) runs without a quota
        env TESSERA_REGION="$WORK/region-twin-$label/vgpu.region" LD_PRELOAD="$PRELOAD" CUDA_VISIBLE_DEVICES=1 \
          "${twin_env[@]}" "$WL" "twin-$label" 1000 6 1000 "$inflight" "$batch" > "$OUT/twin-$label.txt" &
        pids+=($!)
      fi
    done
    wait "${pids[@]}"
    i=0
    for q in "$@"; do
      i=$((i + 1))
      local label="$kind-$name-$i-q$q" twin=""
      if [[ $kind == latency && $q != 0 ]] && ((i == $#)); then
        twin=" | $(twin_stats "$OUT/$label.txt" "$OUT/twin-$label.txt" "$q" 1)"
      fi
      printf "%-11s %-6s %5s %s %s%s\n" "$kind" "$name-$i" "$q" "$(stats "$OUT/$label.txt" "$q" 1)" \
        "$(throttled_ms "$label")" "$twin"
    done
    paste "${files[@]}" | awk -v n=$# '{ s = 0; for (k = 0; k < n; k++) s += $(3 + 3 * k); print "sum", $2, s }' \
      > "$OUT/$kind-$name-sum.txt"
    printf "%-11s %-6s %5s %s\n" "$kind" "$name" device "$(stats "$OUT/$kind-$name-sum.txt" 100 1)"
  }
  for kind in saturating latency; do
    shares_group "$kind" 10-90 10 90
    shares_group "$kind" 30-70 30 70
    shares_group "$kind" 20-30-50 20 30 50
    shares_group "$kind" 10-30-60 10 30 60
  done
  shares_group latency unlimited 0 0
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if want series; then
  echo "== time series for the plot: quota 30, force, saturating, 1 ms kernels, 100-ms windows"
  tenant series 30 force 1000 10 100
  cp "$OUT/series.txt" "$OUT/series-q30.txt"
  printf "%-10s %5s %s\n" "series" 30 "$(stats "$OUT/series.txt" 30 1)"
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if want cost; then
  echo "== launch hook cost (ns per cuLaunchKernel; 200000 launches)"
  COST=$BUILD/bin/compute_launch_cost
  printf "%-28s %s\n" "plain (no libvgpu)" "$("$COST")"
  printf "%-28s %s\n" "libvgpu, no quota" "$(env TESSERA_REGION="$WORK/cost1/vgpu.region" LD_PRELOAD="$PRELOAD" "$COST")"
  printf "%-28s %s\n" "libvgpu, quota 90 (under)" "$(env TESSERA_REGION="$WORK/cost2/vgpu.region" LD_PRELOAD="$PRELOAD" \
    CUDA_DEVICE_SM_LIMIT=90 GPU_CORE_UTILIZATION_POLICY=force "$COST")"
fi

echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "raw output: $OUT"
