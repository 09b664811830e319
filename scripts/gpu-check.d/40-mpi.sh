#!/usr/bin/env bash
# GPU step of scripts/gpu-check.sh: MPI programs with device buffers (Debian Open MPI,
# not CUDA-aware) through the PMPI interposer libgpustripe_mpi.so.
#   ctest -R '^mpi_'        the MPI test programs on the GPUs (2-4 ranks, fake nodes too);
#                           GPUSTRIPE_TEST_REQUIRE_BACKEND=cuda: they fail unless their
#                           "device" buffers are real GPU memory
#   gpustripe bench mpi     osu-style latency / bw (windows 1,16,64) / bibw at 2 and 4 ranks:
#                           mpi_gpustripe (interposer), mpi_cuda_aware (Open MPI pml ucx over
#                           .deps/ucx: the baseline every table compares with), mpi_host_staged (copy to host, MPI,
#                           copy back), gpustripe (native p2p), nccl (send/recv between the
#                           ranks), ucx (ucp tag over cuda_ipc, when .deps/ucx was staged);
#                           plus one run WITHOUT the interposer, expected to fail   -> $OUT/bench
# MPI_TESTS=0 skips the ctest part (a device call short of time: the benchmark only).
# BENCH_MPI_ARGS adds arguments (e.g. "--ranks 2 --windows 64"); BENCH_COPY_RESULTS=1
# copies the JSON + PNG into bench/results/ (never edited there).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
BUILD=${GPUSTRIPE_BUILD_DIR:-$PWD/build/gpu}
export NCCL_NVLS_ENABLE=0
export GPUSTRIPE_TOPOLOGY_DIR=${GPUSTRIPE_TOPOLOGY_DIR:-$PWD/topologies}
mkdir -p "$OUT/bench"
rc=0
for f in "$BUILD/src/mpi/libgpustripe_mpi.so" "$BUILD/bench/mpi/mpi_bench" "$BUILD/bench/mpi/gs_p2p_bench"; do
  [ -e "$f" ] || { echo "missing $f: was MPI found when building?"; exit 1; }
done

if [ "${MPI_TESTS:-1}" = 1 ]; then
  echo "== MPI tests (ctest -R '^mpi_')"
  GPUSTRIPE_TEST_REQUIRE_BACKEND=cuda timeout 900 ctest --test-dir "$BUILD" -R '^mpi_' --output-on-failure > "$OUT/ctest-mpi.log" 2>&1 || rc=1
  tail -6 "$OUT/ctest-mpi.log"
fi

echo "== gpustripe bench mpi"
timeout "${BENCH_MPI_TIMEOUT:-3000}" python3 -m gpustripe.cli bench mpi --build "$BUILD" --out "$OUT/bench" ${BENCH_MPI_ARGS:-} || rc=1
if [ "${BENCH_COPY_RESULTS:-0}" = 1 ]; then
  mkdir -p bench/results && cp "$OUT"/bench/*mpi-np*.json "$OUT"/bench/*mpi-np*.png bench/results/ 2>/dev/null
fi
exit $rc
