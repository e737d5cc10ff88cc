#!/usr/bin/env bash
# One device session: GPU tests, launch overhead, RMSNorm tuning and the full benchmark.
# Usage (on the GPU machine, from the repo root): bash bench/gpu_session.sh [steps...]
# Steps: info tests launch tune bench examples (default: all). Logs and JSON go to $OUT.
# BENCH_ARGS (e.g. "--dtypes f32 --json $OUT/rmsnorm_f32.json") goes to bench/rmsnorm.py.
#
# Peers: where .whl/ (ignored by git; see bench/install_wheels.py) holds wheels, they are
# installed first, on every call, into /tmp/site (a wheel whose package the machine already
# has is skipped, so a second call costs only the check), after the repo on PYTHONPATH:
# Liger and pyptx then run in the benchmark. pyptx's torch C++ extension (its fast launch
# path, built with ninja) is built once here so that its compile is not in the bench step.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if compgen -G ".whl/*.whl" > /dev/null; then
  echo "=== wheels ($(date +%T))"
  if python3 bench/install_wheels.py --wheels .whl --target /tmp/site; then
    export PYTHONPATH=$PYTHONPATH:/tmp/site PATH=$PATH:/tmp/site/bin
    if [ ! -e /tmp/site/.pyptx_ext_tried ] && python3 -c "import pyptx" 2>/dev/null; then
      touch /tmp/site/.pyptx_ext_tried
      timeout 300 python3 -c "import pyptx.torch_support as t; print('pyptx torch extension:', 'built' if t._try_load_cpp_ext() is not None else 'not built, pyptx launches through ctypes')" > /tmp/site/pyptx_ext.log 2>&1
      rc=$?; tail -3 /tmp/site/pyptx_ext.log
      # A build killed by the timeout leaves torch's lock file, on which the next load would wait.
      [ $rc -eq 124 ] && rm -f "${TORCH_EXTENSIONS_DIR:-$HOME/.cache/torch_extensions}"/*/pyptx_torch_ext/lock
    fi
  fi
fi
steps=${*:-info tests launch tune bench examples}
for s in $steps; do
  echo "=== $s ($(date +%T))"
  case $s in
    info) nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
          python3 -c "import torch, triton, cuda.bindings as cb; print(torch.__version__, triton.__version__, cb.__version__)"
          python3 -m ptxdsl doctor ;;
    tests) timeout 300 python3 -m pytest tests/gpu -q -x -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -25 ;;
    launch) timeout 200 python3 bench/launch_overhead.py --json "$OUT/launch.json" 2>&1 | tail -30 ;;
    tune) timeout 300 python3 lab/rmsnorm_tune.py --json "$OUT/tune.json" 2>&1 | tail -30 ;;
    bench) timeout 560 python3 bench/rmsnorm.py --json "$OUT/rmsnorm.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -80 ;;
    examples) for f in examples/hopper/*.py; do timeout 60 python3 "$f" 2>&1 | tail -4; done ;;
  esac
done
