#!/usr/bin/env bash
# One round of the A/B speed check used when a refactor must not change costs
# (docs/benchmarks.md, "Re-run after the foundation refactor"): libvgpu's
# launch, alloc+free and process-start costs, the extender's latency and
# end-to-end rate, and one placement over the trace cluster.
#
#   bench/ab-round.sh TREE [LABEL]
#
# TREE is a checkout whose build/ holds RelWithDebInfo builds of vgpu_bench,
# vgpu, tessera_sim_cuda, tessera_sim_nvml, scheduler_bench and placement_bench
# (e.g. a `git worktree` of the baseline commit). Alternate baseline and
# candidate rounds: on a shared machine the spread between rounds of one build
# is the noise to compare against.
set -euo pipefail
TREE=$(cd "${1:?usage: bench/ab-round.sh TREE [LABEL]}" && pwd)
LABEL=${2:-$(basename "$TREE")}
REPO_DIR=$(cd "$(dirname "$0")/.." && pwd)
TRACE_DIR=${TESSERA_TRACE_DIR:-$REPO_DIR/../shared/data/alibaba-gpu-2023}
cd "$TREE"
echo "#### $LABEL $(git log -1 --format=%h) $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
STATE=$(mktemp -d)
trap 'rm -rf "$STATE"' EXIT
(
  export TESSERA_SIM_GPUS=2xA100-80GB TESSERA_SIM_STATE=$STATE LD_LIBRARY_PATH=build/lib/sim
  export TESSERA_REGION=$STATE/region/vgpu.region CUDA_DEVICE_MEMORY_LIMIT=10g
  run_vgpu() { ./build/bin/vgpu_bench --benchmark_repetitions="$1" --benchmark_report_aggregates_only=true \
                 --benchmark_filter="$2" 2>&1 | grep median | sed 's/  */ /g'; }
  echo "-- vgpu plain"; run_vgpu 5 'Launch|AllocFree'
  echo "-- vgpu preloaded"; LD_PRELOAD=$PWD/build/lib/libvgpu.so run_vgpu 5 'Launch|AllocFree'
  echo "-- vgpu start"; run_vgpu 3 'Start'
)
echo "-- sched warm"; ./build/bin/scheduler_bench latency --iterations 300 2>&1 | sed -n 2,3p
echo "-- sched cold"; BENCH_COLD=1 ./build/bin/scheduler_bench latency --iterations 300 2>&1 | sed -n 2,3p
echo "-- sched e2e"; ./build/bin/scheduler_bench e2e 2>/dev/null | tail -1
echo "-- placement"
TESSERA_TRACE_DIR=$TRACE_DIR taskset -c 0 ./build/bin/placement_bench --benchmark_repetitions=3 \
  --benchmark_filter='tessera|fgd|bestfit' --benchmark_report_aggregates_only=true 2>&1 | grep median | sed 's/  */ /g'
