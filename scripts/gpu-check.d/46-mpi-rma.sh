#!/usr/bin/env bash
# GPU step of scripts/gpu-check.sh: one-sided MPI (RMA) on device windows through the PMPI
# interposer (Debian Open MPI, not CUDA-aware).
#   ctest -R '^mpi_rma'   the RMA test programs on the GPUs (2-3 ranks, every sync mode,
#                         accumulates, errors, a rank killed in an epoch)
#   mpi_rma_bench         (plain MPI) through the interposer, 2 ranks: put/get bandwidth and
#                         latency with lock/flush, fence and PSCW, accumulate rate, fetch-and-op
#                         latency, and lock + 8 gets of 128 KB with the target busy -> $OUT/mpi-rma/rows.txt
# MPI_RMA_TESTS=0 skips the tests; MPI_RMA_MAX bounds the bandwidth sweep (default 256M).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
BUILD=${GPUSTRIPE_BUILD_DIR:-$PWD/build/gpu}
export GPUSTRIPE_TOPOLOGY_DIR=${GPUSTRIPE_TOPOLOGY_DIR:-$PWD/topologies}
mkdir -p "$OUT/mpi-rma"
rc=0
if [ "${MPI_RMA_TESTS:-1}" != 0 ]; then
  echo "== MPI RMA tests (ctest -R '^mpi_rma')"
  GPUSTRIPE_TEST_REQUIRE_BACKEND=cuda timeout 600 ctest --test-dir "$BUILD" -R '^mpi_rma' --output-on-failure \
    > "$OUT/mpi-rma/ctest.log" 2>&1 || rc=1
  tail -16 "$OUT/mpi-rma/ctest.log"
fi
run() {
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_PRELOAD="$BUILD/src/mpi/libgpustripe_mpi.so" \
    -x GPUSTRIPE_TOPOLOGY_DIR "$BUILD/bench/mpi/mpi_rma_bench" --method mpi_gpustripe "$@" 2>&1 \
    | tee -a "$OUT/mpi-rma/bench.log" | grep '^ROW' >> "$OUT/mpi-rma/rows.txt" || rc=1
}
: > "$OUT/mpi-rma/rows.txt"
echo "== mpi_rma_bench through the interposer (2 ranks, device windows)"
for sync in lock fence pscw; do
  run --test put_bw --sync "$sync" --window 16 --min 1M --max "${MPI_RMA_MAX:-256M}"
  run --test get_bw --sync "$sync" --window 16 --min 1M --max "${MPI_RMA_MAX:-256M}"
  run --test put_lat --sync "$sync" --min 8 --max 64K
  run --test get_lat --sync "$sync" --min 8 --max 64K
done
run --test acc_rate --sync lock --window 64
run --test fop_lat --sync lock
run --test get_bw --sync lock --window 8 --min 128K --max 128K --busy-ms 200
cat "$OUT/mpi-rma/rows.txt"
exit $rc
