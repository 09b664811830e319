#!/usr/bin/env bash
# GPU step of scripts/gpu-check.sh: the p2p benchmarks and compute-sanitizer on the engine.
#   gpustripe bench p2p   (4K-1G, latency 8B-64K, pair 0->1)  -> $OUT/bench
#   gpustripe bench bibw  (0<->1)                             -> $OUT/bench
#   compute-sanitizer memcheck on test_engine_gpu (sizes up to 16 MB)
# BENCH_COPY_RESULTS=1 also copies the JSON + PNG into bench/results/ (never edited there).
# BENCH_ARGS adds arguments to both benchmarks (e.g. "--pairs all").
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
BUILD=${GPUSTRIPE_BUILD_DIR:-$PWD/build/gpu}
mkdir -p "$OUT/bench"
rc=0
echo "== gpustripe bench p2p"
python3 -m gpustripe.cli bench p2p --out "$OUT/bench" ${BENCH_ARGS:-} || rc=1
echo "== gpustripe bench bibw"
python3 -m gpustripe.cli bench bibw --sizes 1M:1G --out "$OUT/bench" ${BENCH_ARGS:-} || rc=1
if [ "${BENCH_COPY_RESULTS:-0}" = 1 ]; then
  mkdir -p bench/results && cp "$OUT"/bench/*.json "$OUT"/bench/*.png bench/results/
fi
echo "== compute-sanitizer memcheck: test_engine_gpu (sizes <= 16M)"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -z "$SAN" ]; then
  echo "compute-sanitizer not found: memcheck NOT run"; rc=1
else
  GPUSTRIPE_TEST_MAX_BYTES=16M GPUSTRIPE_TOPOLOGY_DIR=$PWD/topologies timeout 300 "$SAN" --tool memcheck --report-api-errors no \
    --leak-check full --error-exitcode 3 "$BUILD/tests/cpp/test_engine_gpu" \
    --gtest_filter='GpuNode.EveryPair*:GpuNode.Forced*:GpuNode.Bad*' > "$OUT/memcheck-engine.log" 2>&1
  san_rc=$?
  tail -5 "$OUT/memcheck-engine.log"
  echo "memcheck rc=$san_rc (0: no errors)"
  [ $san_rc -eq 0 ] || rc=1
fi
exit $rc
