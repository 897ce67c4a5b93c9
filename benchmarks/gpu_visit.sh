#!/usr/bin/env bash
# One visit to the GPU machine: install, run GPU tests, then the benchmarks.
#   PYTEST_ARGS  what pytest runs (default: every test, on the cuda target)
#   BENCHES      benchmark scripts to run (default: bench_compile)
# Full logs and JSON go to $OUT (or ./out); the tables are printed last.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GXUSIM_CACHE_DIR=/tmp/gxusim-cache
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout 420 python3 -m pytest ${PYTEST_ARGS:-tests} -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -15
for bench in ${BENCHES:-bench_compile}; do
  timeout 300 python3 benchmarks/$bench.py --json "$OUT/$bench.json" 2>&1 | tee "$OUT/$bench.log" | grep -v Warning | tail -30
done
