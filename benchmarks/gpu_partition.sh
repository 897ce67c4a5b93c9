#!/usr/bin/env bash
# The GXU-shaped GPU (gxu-partition-on-h200: a 16-SM green context) against the whole H200:
# calibration samples and the suite at GPU scale with kernel times, on the partition.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GXUSIM_CACHE_DIR=/tmp/gxusim-cache GXUSIM_TARGET=cuda
timeout 200 python3 -m gxusim calibrate --spec gxu-partition-on-h200 --out "$OUT/partition-calibrated.toml" \
  --samples "$OUT/calibration_partition_h200.json" > "$OUT/calibrate_partition.log" 2>&1; echo "calibrate exit $?"; tail -3 "$OUT/calibrate_partition.log"
GXUSIM_TIMING=1 timeout 200 python3 -m gxusim sweep add_relu mul_relu tanh_gelu transpose row_sum cumsum mlp transformer_block embedding_classifier \
  --scale gpu --spec gxu-partition-on-h200 --policies seed gxu --json "$OUT/sweep_gpu_partition_h200.json" > "$OUT/sweep_partition.log" 2>&1; echo "sweep exit $?"; grep -v "sweep:" "$OUT/sweep_partition.log" | tail -14
