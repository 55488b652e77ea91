#!/usr/bin/env bash
# MPS share accuracy beside libvgpu's limiter (issue 15), on the simulated GPU.
#
#   bench/mps/run.sh [BUILD_DIR] [OUT_DIR]
#
# Two saturating tenants share GPU 0 at Q1/Q2 percent (30/70 and 10/90), the
# same workload (compute_share_workload: 1 ms sim_busy kernels, 10 ms of work
# in flight, 8 s, shares per 1-s window after the first second) run two ways:
#   mps     each tenant an MPS client of the GPU's control daemon
#           (tessera-sim-mps-control) with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=Q
#   libvgpu each tenant under libvgpu.so with CUDA_DEVICE_SM_LIMIT=Q and
#           GPU_CORE_UTILIZATION_POLICY=force, in its own region
# and prints per tenant: mean, min and max share, the worst |share - Q| and
# the windows counted. Needs compute_share_workload, vgpu and
# tessera-sim-mps-control built in BUILD_DIR (default build). Raw per-window
# shares stay in OUT_DIR. docs/benchmarks.md ("MPS beside libvgpu") records
# the numbers.
set -euo pipefail
BUILD=$(realpath "${1:-build}")
OUT=${2:-$(mktemp -d /tmp/tessera-mps-bench-XXXXXX)}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/tessera-mps-run-XXXXXX)
PIPE=$WORK/pipe
cleanup() {
  if [[ -f $PIPE/nvidia-cuda-mps-control.pid ]]; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$PIPE "$BUILD/bin/tessera-sim-mps-control" > /dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
WL=$BUILD/bin/compute_share_workload
export TESSERA_SIM_GPUS=1xA100-80GB TESSERA_SIM_STATE=$WORK/sim LD_LIBRARY_PATH=$BUILD/lib/sim
PRELOAD=$BUILD/lib/libvgpu.so
KERNEL_US=1000 DURATION_S=8 WINDOW_MS=1000 IN_FLIGHT_MS=10

echo "host: $(nproc) CPUs, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

# stats FILE QUOTA: mean, min, max, worst |share - quota|, windows — of the
# windows ending after the first second (the last, partial one excluded).
stats() {
  awk -v q="$2" '
    { t[NR] = $2; s[NR] = $3 }
    END {
      n = 0; sum = 0; min = 1e9; max = -1; worst = 0
      for (i = 1; i < NR; i++) {
        if (t[i] <= 1) continue
        n++; sum += s[i]
        if (s[i] < min) min = s[i]
        if (s[i] > max) max = s[i]
        d = s[i] - q; if (d < 0) d = -d; if (d > worst) worst = d
      }
      if (n == 0) { print "n/a"; exit }
      printf "%6.2f %6.2f %6.2f %6.2f %d\n", sum / n, min, max, worst, n
    }' "$1"
}

mkdir -p "$PIPE"
CUDA_MPS_PIPE_DIRECTORY=$PIPE CUDA_MPS_LOG_DIRECTORY=$PIPE/log "$BUILD/bin/tessera-sim-mps-control" -d

# pair MODE Q1 Q2: both tenants at once; output in $OUT/MODE-Q-QUOTA.txt.
pair() {
  local mode=$1 q1=$2 q2=$3 pids=()
  for q in "$q1" "$q2"; do
    local label="$mode-$q1-$q2-q$q"
    if [[ $mode == mps ]]; then
      env CUDA_MPS_PIPE_DIRECTORY="$PIPE" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$q" \
        "$WL" "$label" "$KERNEL_US" "$DURATION_S" "$WINDOW_MS" "$IN_FLIGHT_MS" > "$OUT/$label.txt" &
    else
      env TESSERA_REGION="$WORK/region-$label/vgpu.region" LD_PRELOAD="$PRELOAD" CUDA_DEVICE_SM_LIMIT="$q" \
        GPU_CORE_UTILIZATION_POLICY=force \
        "$WL" "$label" "$KERNEL_US" "$DURATION_S" "$WINDOW_MS" "$IN_FLIGHT_MS" > "$OUT/$label.txt" &
    fi
    pids+=($!)
  done
  wait "${pids[@]}"
  for q in "$q1" "$q2"; do
    printf "%-8s %5s %6s %s\n" "$mode" "$q1/$q2" "$q" "$(stats "$OUT/$mode-$q1-$q2-q$q.txt" "$q")"
  done
}

echo "== two saturating tenants on one GPU: share per 1-s window after the first second"
echo "limiter   pair  quota   mean    min    max  worst|dev| windows"
for p in "30 70" "10 90"; do
  pair mps $p
  pair libvgpu $p
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
