#!/usr/bin/env bash
# GPU measurements for the performance model's held-out check (benchmarks/validate_model.py):
# calibration samples, the model suite at GPU scale under both policies with kernel times,
# then the gpu side of the three-way fuzz. Everything goes to $OUT.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GXUSIM_CACHE_DIR=/tmp/gxusim-cache
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
timeout 200 python3 -m gxusim calibrate --spec gxu-on-h200 --out "$OUT/calibrated.toml" \
  --samples "$OUT/calibration_h200.json" > "$OUT/calibrate.log" 2>&1; echo "calibrate exit $?"; tail -3 "$OUT/calibrate.log"
GXUSIM_TIMING=1 timeout 200 python3 -m gxusim sweep add_relu mul_relu tanh_gelu transpose row_sum cumsum mlp transformer_block embedding_classifier \
  --scale gpu --spec gxu-on-h200 --policies seed gxu --json "$OUT/sweep_gpu_h200.json" > "$OUT/sweep.log" 2>&1; echo "sweep exit $?"; grep -v "sweep:" "$OUT/sweep.log" | tail -14
if [ "${FUZZ:-0}" != 0 ]; then
  timeout ${FUZZ_TIMEOUT:-150} python3 -m tests.fuzz.three_way --examples "$FUZZ" --seed 11 --sides gpu --jobs 12 --timeout 120 --out "$OUT/three_way" > "$OUT/three_way.log" 2>&1; echo "three-way exit $?"; tail -2 "$OUT/three_way.log"
fi
