#!/usr/bin/env bash
# GPU step of scripts/gpu-check.sh: one-sided MPI (RMA) on device windows through the PMPI
# interposer (Debian Open MPI, not CUDA-aware).
#   ctest -R '^mpi_rma'   the RMA test programs on the GPUs (2-3 ranks, every sync mode,
#                         accumulates, errors, a rank killed in an epoch)
#   gpustripe bench mpi_rma  mpi_rma_bench (plain MPI) through the interposer, 2 ranks: put/get
#                         bandwidth and latency with lock/flush, fence and PSCW, accumulate rate,
#                         fetch-and-op latency, send/recv and the CUDA-aware MPI's osc ucx (over the
#                         libucx-cu13 wheel in .deps/ucx) alongside, and the one-pair bound (the engine's
#                         in-process copy, cudaMemcpyPeerAsync, the model's predictions) -> $OUT/mpi-rma/*.json + .png
#   lock + 8 gets of 128 KB per epoch with the target busy (200 ms outside MPI) -> busy.log
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
echo "== gpustripe bench mpi_rma (2 ranks, device windows, vs send/recv through the interposer and mpi_cuda_aware)"
timeout "${BENCH_MPI_RMA_TIMEOUT:-900}" python3 -m gpustripe.cli bench mpi_rma --build "$BUILD" --out "$OUT/mpi-rma" \
  --sizes "1M:${MPI_RMA_MAX:-256M}" ${BENCH_MPI_RMA_ARGS:-} || rc=1
echo "== lock + 8 gets of 128 KB + flush, the target busy (200 ms outside MPI)"
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_PRELOAD="$BUILD/src/mpi/libgpustripe_mpi.so" \
  -x GPUSTRIPE_TOPOLOGY_DIR "$BUILD/bench/mpi/mpi_rma_bench" --test get_bw --sync lock --window 8 --min 128K \
  --max 128K --busy-ms 200 --method mpi_gpustripe_lock 2>&1 | tee "$OUT/mpi-rma/busy.log" | grep '^ROW' || rc=1
exit $rc
