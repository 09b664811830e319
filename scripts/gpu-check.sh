#!/usr/bin/env bash
# Run on the GPU machine through the device tool, from a bare machine:
#   scripts/stage-deps.sh here first (once), then
#   device run --carry .deps  "bash scripts/gpu-check.sh [step ...]"
# Builds for sm_90, runs every test including the GPU ones, then each step in
# scripts/gpu-check.d/ (benchmarks, model accuracy, ...) in name order; a step
# name on the command line runs only the steps whose file name contains it.
# Logs and results are written under a work folder and packed after every step
# into $OUT/gpu-check.tgz (the device tool brings back at most 8 files), so a run
# cut off by its time limit still returns what it did. Default $OUT: ./gpu-out.
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL_OUT=${OUT:-$PWD/gpu-out}
export OUT=${GPU_CHECK_WORK:-/tmp/gpu-check-out}
rm -rf "$OUT"; mkdir -p "$OUT" "$FINAL_OUT"
pack() { tar czf "$FINAL_OUT/gpu-check.tgz" -C "$OUT" . 2>/dev/null; }
# Never NVLink multicast on the shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
BUILD=build/gpu
t0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }

stamp "machine"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv | tee "$OUT/nvidia-smi.txt"
nvidia-smi topo -m >> "$OUT/nvidia-smi.txt" 2>&1

stamp "build (sm_90)"
if ! GPUSTRIPE_BUILD_DIR=$BUILD bash scripts/build-dev.sh -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
     > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"; echo "BUILD FAILED"; pack; exit 1
fi
pack
export PYTHONPATH="$PWD/$BUILD/python-dev${PYTHONPATH:+:$PYTHONPATH}"
export GPUSTRIPE_BUILD_DIR="$PWD/$BUILD"
export PATH="$PWD/scripts/bin:$PATH"

if [ $# -eq 0 ] || [[ " $* " == *" tests "* ]]; then
  stamp "C++ tests"
  timeout "${TESTS_TIMEOUT:-300}" ctest --test-dir $BUILD --output-on-failure -j 8 ${CTEST_ARGS:-} > "$OUT/ctest.log" 2>&1
  echo "ctest rc=$?"
  grep -E "Failed|\*\*\*|Timeout" "$OUT/ctest.log" | head -20
  tail -4 "$OUT/ctest.log"
  stamp "Python tests"
  timeout "${PYTEST_TIMEOUT:-180}" python3 -X faulthandler -m pytest -q -rs ${PYTEST_ARGS:-} tests/python > "$OUT/pytest.log" 2>&1; echo "pytest rc=$?"
  tail -3 "$OUT/pytest.log"
  pack
fi

for step in scripts/gpu-check.d/*.sh; do
  [ -e "$step" ] || continue
  name=$(basename "$step" .sh)
  if [ $# -gt 0 ]; then
    hit=0; for a in "$@"; do [[ "$name" == *"$a"* ]] && hit=1; done
    [ $hit -eq 1 ] || continue
  fi
  stamp "step $name"
  # Each step is bounded (STEP_TIMEOUT seconds) so one slow step cannot eat the device call.
  timeout "${STEP_TIMEOUT:-300}" bash "$step" > "$OUT/$name.log" 2>&1; rc=$?
  echo "$name rc=$rc"; tail -25 "$OUT/$name.log"
  pack
done
pack
stamp "done"
