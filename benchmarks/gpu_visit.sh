#!/usr/bin/env bash
# One visit to the GPU machine: install, run the cuda-marked tests, then the benchmarks.
# Full logs and JSON go to $OUT (or ./out); a short table is printed last.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GXUSIM_CACHE_DIR=/tmp/gxusim-cache
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout 420 python3 -m pytest tests -m cuda -q -x -p no:cacheprovider ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest_cuda.log" | tail -25
python3 - <<'PY' 2>&1 | grep -v Warn | tail -5
import os, torch, gxusim
from gxusim.models import CASES
torch._inductor.config.force_disable_caches = True
model, (x,) = CASES["mlp"].build("gxu")
try:
    torch.compile(model)(x).sum().backward(); print("mlp training step: ok")
except Exception as e:
    print("mlp training step failed:", type(e).__name__, str(e)[-200:])
    open(os.path.join(os.environ.get("OUT", "out"), "failed_wrapper.py"), "w").write(gxusim.last_generated_code())
PY
for bench in ${BENCHES:-bench_compile}; do
  timeout 300 python3 benchmarks/$bench.py --json "$OUT/$bench.json" 2>&1 | tee "$OUT/$bench.log" | grep -v Warning | tail -30
done
