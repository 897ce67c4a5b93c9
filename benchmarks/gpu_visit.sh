#!/usr/bin/env bash
# One visit to the GPU machine: install, run the GPU suite, then the benchmarks.
#   PYTEST_ARGS  what pytest runs (default: every test, on the cuda target, 8 workers)
#   PYTEST_TIMEOUT  seconds pytest may take (default 540: the suite took over 330 s on 15
#                workers on an H100 once the zoo had llama and mobilenet_v3_small)
#   BENCHES      benchmark commands to run, ';'-separated (default: bench_compile)
#   CORPUS_PART  then measure this part of the kernel corpus (fit or test) under gxu-on-h200,
#                resuming from CORPUS_JSON (copied to $OUT/corpus.json), until CORPUS_LIMIT
#                seconds after the visit began; a kernel that loses the GPU's context ends
#                its process (exit 3), so a new one resumes after it
# Full logs and JSON go to $OUT (or ./out); the tables are printed last.
set -u
START=$(date +%s)
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GXUSIM_CACHE_DIR=/tmp/gxusim-cache
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 benchmarks/code_digest.py  # which files these are (the machine's .git is stale)
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
if [ "${PYTEST_ARGS-x}" != "" ]; then
  timeout ${PYTEST_TIMEOUT:-540} python3 -m pytest ${PYTEST_ARGS:-tests -n 8} -q -p no:cacheprovider -W ignore 2>&1 | tee "$OUT/pytest.log" | tail -25
fi
IFS=';' read -ra benches <<< "${BENCHES:-python3 benchmarks/bench_compile.py}"
for i in "${!benches[@]}"; do
  timeout ${BENCH_TIMEOUT:-300} bash -c "${benches[$i]}" > "$OUT/bench_$i.log" 2>&1
  echo "== ${benches[$i]} (exit $?)"; grep -v Warning "$OUT/bench_$i.log" | tail -${BENCH_TAIL:-30}
done
if [ -n "${CORPUS_PART:-}" ]; then
  [ -n "${CORPUS_JSON:-}" ] && cp "$CORPUS_JSON" "$OUT/corpus.json"
  while true; do
    left=$(( ${CORPUS_LIMIT:-500} - ($(date +%s) - START) ))
    [ $left -lt 40 ] && break
    GXUSIM_SPEC=gxu-on-h200 timeout $left python3 benchmarks/bench_ceiling.py --corpus \
      benchmarks/corpus/kernels.jsonl --part "$CORPUS_PART" --count 100000 --budget 100000 \
      --resume --json "$OUT/corpus.json" >> "$OUT/corpus.log" 2>&1
    code=$?
    echo "== corpus $CORPUS_PART (exit $code)"
    [ $code -ne 3 ] && break
  done
  grep -v Warning "$OUT/corpus.log" | tail -${BENCH_TAIL:-30}
fi
