#!/usr/bin/env bash
# Regenerates the scheduling table of docs/benchmarks.md: every policy on every
# trace of the Alibaba GPU-sharing data set, seeds 42-51, tune 1.3.
#
#   bench/trace/run-table.sh [BUILD_DIR] [DATA_DIR] [OUT_DIR]
#
# DATA_DIR defaults to $TESSERA_TRACE_DIR, else ../shared/data/alibaba-gpu-2023
# beside the repository.
# Writes one JSON per (trace, policy) to OUT_DIR (default BUILD_DIR/trace-table)
# and prints the Markdown table (paper value and delta beside each mean).
# POLICIES / TRACES / SEEDS / TESSERA (the binary) may be overridden from the
# environment; with RESUME=1, results already in OUT_DIR are kept.
set -euo pipefail
BUILD_DIR=${1:-build}
REPO_DIR=$(cd "$(dirname "$0")/../.." && pwd)
DATA_DIR=${2:-${TESSERA_TRACE_DIR:-$REPO_DIR/../shared/data/alibaba-gpu-2023}}
OUT_DIR=${3:-$BUILD_DIR/trace-table}
POLICIES=${POLICIES:-"random dotprod clustering packing bestfit fgd tessera"}
TRACES=${TRACES:-"default gpushare40 gpushare60 gpushare80 gpushare100 multigpu20 multigpu30 multigpu40 multigpu50"}
SEEDS=${SEEDS:-42-51}
TESSERA=${TESSERA:-$BUILD_DIR/bin/tessera}
[ -x "$TESSERA" ] || { echo "run-table: $TESSERA not built" >&2; exit 2; }
mkdir -p "$OUT_DIR"
for t in $TRACES; do
  for p in $POLICIES; do
    if [ "${RESUME:-0}" = 1 ] && [ -s "$OUT_DIR/$t.$p.json" ]; then continue; fi
    "$TESSERA" simulate --nodes "$DATA_DIR/openb_node_list_gpu_node.csv" \
      --pods "$DATA_DIR/openb_pod_list_$t.csv" --policy "$p" --seeds "$SEEDS" --json \
      > "$OUT_DIR/$t.$p.json"
  done
done
python3 "$(dirname "$0")/format-table.py" "$OUT_DIR"
