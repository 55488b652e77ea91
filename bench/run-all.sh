#!/usr/bin/env bash
# Runs tessera's benchmarks against a build directory (the Makefile's `make bench`).
#
#   bench/run-all.sh [BUILD_DIR]
#
# Scheduling: the placement micro-benchmark (one decision over the 1,213-node
# trace cluster) and a 10-seed replay of every policy on the default trace.
# The full policy × trace table is bench/trace/run-table.sh (slower).
# Results and the exact commands are recorded in docs/benchmarks.md.
set -euo pipefail
BUILD_DIR=${1:-build}
# The trace data: $TESSERA_TRACE_DIR, else ../shared/data/alibaba-gpu-2023 beside the repository.
REPO_DIR=$(cd "$(dirname "$0")/.." && pwd)
DATA_DIR=${TESSERA_TRACE_DIR:-$REPO_DIR/../shared/data/alibaba-gpu-2023}
export TESSERA_TRACE_DIR="$DATA_DIR"

echo "== scheduling: one placement over the trace cluster (placement_bench)"
if [ -x "$BUILD_DIR/bin/placement_bench" ]; then
  "$BUILD_DIR/bin/placement_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
else
  echo "placement_bench not built in $BUILD_DIR" >&2
fi

if [ -f "$DATA_DIR/openb_pod_list_default.csv" ]; then
  echo "== scheduling: trace replay, default trace, seeds 42-51"
  for p in random dotprod clustering packing bestfit fgd tessera; do
    "$BUILD_DIR/bin/tessera" simulate --nodes "$DATA_DIR/openb_node_list_gpu_node.csv" \
      --pods "$DATA_DIR/openb_pod_list_default.csv" --policy "$p" --seeds 42-51 --json
  done
else
  echo "trace data not found in $DATA_DIR (set TESSERA_TRACE_DIR); skipping the replay" >&2
fi

# Other parts add their benchmarks below.
