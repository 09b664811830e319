#!/usr/bin/env bash
# GPU step of scripts/gpu-check.sh: MPI collectives with device buffers through the
# PMPI interposer (Debian Open MPI, not CUDA-aware).
#   ctest -R '^mpi_coll'      the collective test programs on the GPUs (2-4 ranks)
#   mpi_coll_types            every reduction form x op x type at 2 ranks, 1 element to 1M
#                             (64M and 256M for a few types)                     -> $OUT/mpi-coll/types-*.txt
#   gpustripe bench mpi_coll  mpi_coll_bench (plain MPI) through the interposer vs the
#                             host-staged pattern, native gpustripe and NCCL   -> $OUT/mpi-coll
#   blocking_coll_floor       a pair's blocking all-gather at its floor (bench/probes)
#                                                         -> $OUT/mpi-coll/blocking-coll-floor.txt
# MPI_COLL_TESTS=0 skips the tests; BENCH_MPI_COLL_ARGS adds benchmark arguments
# (e.g. "--ranks 4 --sizes 1M:256M"); the schedule each MPI call took is logged once
# (SCHEDULES_TIMEOUT bounds that run).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
BUILD=${GPUSTRIPE_BUILD_DIR:-$PWD/build/gpu}
export NCCL_NVLS_ENABLE=0
export GPUSTRIPE_TOPOLOGY_DIR=${GPUSTRIPE_TOPOLOGY_DIR:-$PWD/topologies}
mkdir -p "$OUT/mpi-coll"
rc=0
if [ "${MPI_COLL_TESTS:-1}" != 0 ]; then
  echo "== MPI collective tests (ctest -R '${MPI_COLL_TEST_RE:-^mpi_coll}')"
  timeout "${MPI_COLL_TEST_TIMEOUT:-600}" ctest --test-dir "$BUILD" -R "${MPI_COLL_TEST_RE:-^mpi_coll}" \
    --output-on-failure > "$OUT/mpi-coll/ctest.log" 2>&1 || rc=1
  tail -12 "$OUT/mpi-coll/ctest.log"
fi

echo "== every reduction form x op x type (2 ranks; mpi_coll_types)"
types() {
  timeout "${MPI_COLL_TYPES_TIMEOUT:-600}" mpirun --allow-run-as-root --oversubscribe -np 2 \
    -x LD_PRELOAD="$BUILD/src/mpi/libgpustripe_mpi.so" -x GPUSTRIPE_TOPOLOGY_DIR -x GPUSTRIPE_TEST_REQUIRE_BACKEND=cuda \
    "$BUILD/src/mpi/mpi_coll_types" "$@"
}
types --bytes 1,4K,1M > "$OUT/mpi-coll/types-small.txt" 2>&1 || rc=1
types --bytes 64M --types char,unsigned_char,int,float,double,c_bool,2int,double_int --ops sum,max,land,band,minloc \
  > "$OUT/mpi-coll/types-64M.txt" 2>&1 || rc=1
types --bytes 256M --types char,float --ops sum > "$OUT/mpi-coll/types-256M.txt" 2>&1 || rc=1
tail -n 1 "$OUT"/mpi-coll/types-*.txt

echo "== schedules the interposer picks (4 ranks, 1M / 16M / 256M)"
timeout "${SCHEDULES_TIMEOUT:-60}" mpirun --allow-run-as-root --oversubscribe -np 4 -x LD_PRELOAD="$BUILD/src/mpi/libgpustripe_mpi.so" \
  -x GPUSTRIPE_TOPOLOGY_DIR -x GPUSTRIPE_LOG_LEVEL=debug -x GPUSTRIPE_LOG_SUBSYS=mpi \
  "$BUILD/bench/mpi/mpi_coll_bench" --min 1M --max 256M --iters 1 --trials 1 --warmup 0 2>&1 \
  | grep -o "MPI_[A-Za-z_]* [0-9]* bytes on [0-9] ranks: [^;]*" | sort -u | grep -E " (1048576|16777216|268435456) " \
  > "$OUT/mpi-coll/schedules.txt" || true
cat "$OUT/mpi-coll/schedules.txt"

echo "== a blocking collective's floor (bench/probes/blocking_coll_floor.cu, GPUs 0 and 1)"
floor=/tmp/gpustripe-blocking-coll-floor
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then
  echo "fewer than 2 GPUs: skipped" > "$OUT/mpi-coll/blocking-coll-floor.txt"
elif nvcc -O2 -arch=sm_90 -DGPUSTRIPE_HAVE_CUDA=1 -Isrc -Iinclude -Ibench/probes -o "$floor" \
     bench/probes/blocking_coll_floor.cu -L"$BUILD" -lgpustripe -lcuda -Xlinker -rpath="$BUILD" \
     > "$OUT/mpi-coll/blocking-coll-floor.txt" 2>&1; then
  timeout "${FLOOR_TIMEOUT:-300}" "$floor" >> "$OUT/mpi-coll/blocking-coll-floor.txt" 2>&1 || rc=1
else
  rc=1
fi
tail -n 3 "$OUT/mpi-coll/blocking-coll-floor.txt"

echo "== gpustripe bench mpi_coll"
timeout "${BENCH_MPI_COLL_TIMEOUT:-1800}" python3 -m gpustripe.cli bench mpi_coll --build "$BUILD" \
  --out "$OUT/mpi-coll" ${BENCH_MPI_COLL_ARGS:-} || rc=1
exit $rc
