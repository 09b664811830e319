#!/usr/bin/env bash
# GPU step of scripts/gpu-check.sh: the halo-exchange application (apps/halo, a 2-D
# Jacobi solver on device buffers) four ways: GPU-unaware MPI (host staging), CUDA-aware
# MPI (Open MPI pml ucx over .deps/ucx), the interposer, NCCL; both exchange variants,
# each run checked against one process.                                   -> $OUT/bench
#   small shapes first (--quick: 4096^2 and 8 x 4M), then the full set (4096^2, 16384^2,
#   8 x 4M/16M/64M: halos of 32-512 MB), at 2 ranks and, with 4 GPUs, 4.
# BENCH_HALO_ARGS replaces the rank list (e.g. "--ranks 2"); BENCH_COPY_RESULTS=1 copies
# the JSON + PNG into bench/results/.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
BUILD=${GPUSTRIPE_BUILD_DIR:-$PWD/build/gpu}
export NCCL_NVLS_ENABLE=0
export GPUSTRIPE_TOPOLOGY_DIR=${GPUSTRIPE_TOPOLOGY_DIR:-$PWD/topologies}
mkdir -p "$OUT/bench"
[ -e "$BUILD/apps/halo/halo" ] || { echo "missing $BUILD/apps/halo/halo: was MPI found when building?"; exit 1; }
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
ranks=${BENCH_HALO_ARGS:---ranks $([ "$gpus" -ge 4 ] && echo 2,4 || echo 2)}
rc=0
echo "== gpustripe bench halo --quick"
timeout "${HALO_QUICK_TIMEOUT:-240}" python3 -m gpustripe.cli bench halo --build "$BUILD" --out "$OUT/bench/halo-quick" \
  --quick $ranks || rc=1
echo "== gpustripe bench halo (full shapes)"
timeout "${HALO_TIMEOUT:-900}" python3 -m gpustripe.cli bench halo --build "$BUILD" --out "$OUT/bench" $ranks || rc=1
if [ "${BENCH_COPY_RESULTS:-0}" = 1 ]; then
  mkdir -p bench/results && cp "$OUT"/bench/*halo-np*.json "$OUT"/bench/*halo-np*.png bench/results/ 2>/dev/null
fi
exit $rc
