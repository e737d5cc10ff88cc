#!/usr/bin/env bash
# One device session: GPU tests, launch overhead, RMSNorm tuning and the full benchmark.
# Usage (on the GPU machine, from the repo root): bash bench/gpu_session.sh [steps...]
# Steps: info tests launch tune bench examples (default: all). Logs and JSON go to $OUT.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
steps=${*:-info tests launch tune bench examples}
for s in $steps; do
  echo "=== $s ($(date +%T))"
  case $s in
    info) nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
          python3 -c "import torch, triton, cuda.bindings as cb; print(torch.__version__, triton.__version__, cb.__version__)"
          python3 -m ptxdsl doctor ;;
    tests) timeout 300 python3 -m pytest tests/gpu -q -x -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -25 ;;
    launch) timeout 200 python3 bench/launch_overhead.py --json "$OUT/launch.json" 2>&1 | tail -30 ;;
    tune) timeout 300 python3 bench/rmsnorm_tune.py --json "$OUT/tune.json" 2>&1 | tail -30 ;;
    bench) timeout 500 python3 bench/rmsnorm.py --json "$OUT/rmsnorm.json" 2>&1 | tee "$OUT/bench.log" | tail -60 ;;
    examples) for f in examples/hopper/*.py; do timeout 60 python3 "$f" 2>&1 | tail -4; done ;;
  esac
done
