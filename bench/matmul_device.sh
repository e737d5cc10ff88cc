#!/usr/bin/env bash
# One device call for the GEMM: peers' wheels, GPU correctness tests (with a time limit, so
# a deadlock costs 150 s, not the call), ptxas resources, then bench/matmul.py.
# Usage (GPU machine, repo root): bash bench/matmul_device.sh [bench args...]
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
WHL=${WHL:-.whl}
if compgen -G "$WHL/*.whl" > /dev/null; then
  python3 bench/install_wheels.py --wheels "$WHL" --target /tmp/site > "$OUT/wheels.log" 2>&1 \
    && export PYTHONPATH=.:/tmp/site || export PYTHONPATH=.
else
  export PYTHONPATH=.
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
if [ "${PYPTX_EXT:-0}" = 1 ] && python3 -c "import pyptx" 2>/dev/null; then
  # pyptx's C++ launch extension (its fast host path), built while the tests run
  (timeout 100 python3 -c "import pyptx.torch_support as t; print('pyptx torch extension:', t._try_load_cpp_ext())" > "$OUT/pyptx_ext.log" 2>&1) &
  EXT_PID=$!
fi
echo "=== tests ($(date +%T))"
timeout 150 python3 -m pytest --maxfail=5 -q -p no:cacheprovider tests/gpu/test_ops_matmul_gpu.py > "$OUT/tests.log" 2>&1
rc=$?; tail -25 "$OUT/tests.log"
ONLY=()
if [ $rc -eq 124 ]; then echo "tests timed out (a hang?): ptxdsl left out of the bench"; ONLY=(--only cuBLAS,triton,pyptx); fi
if [ -n "${EXT_PID:-}" ]; then
  wait $EXT_PID; tail -2 "$OUT/pyptx_ext.log"
  # only a built extension is used in the bench (else pyptx would try to build it there)
  grep -q "extension: <module" "$OUT/pyptx_ext.log" && export PYPTX_EXT=1 || export PYPTX_EXT=0
fi
echo "=== bench ($(date +%T))"
timeout ${BENCH_TIMEOUT:-300} python3 bench/matmul.py --json "$OUT/matmul.json" "${ONLY[@]}" "$@" 2>&1 | tee "$OUT/bench.log" | tail -40
