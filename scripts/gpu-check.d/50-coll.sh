#!/usr/bin/env bash
# gpu-check step: `gpustripe bench coll` on 2 and 4 GPUs, 1M-1G per rank: gpustripe,
# NCCL default, NCCL copy-engine mode (where it runs) and MPI through host memory, in one
# run. Writes under $OUT/coll/: <date>-coll-<n>gpu-<device>.json + .png per rank count
# (copy them to bench/results/ to commit), and the schedule choices at debug level.
set -euo pipefail
: "${OUT:?run from scripts/gpu-check.sh (OUT unset)}"
unset GPUSTRIPE_TOPOLOGY GPUSTRIPE_COLL_ALGO
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on the shared machines
mkdir -p "$OUT/coll"

# One line per schedule choice at a few sizes (the reasons the library logs at debug).
GPUSTRIPE_LOG_LEVEL=debug GPUSTRIPE_LOG_SUBSYS=coll \
  gpustripe bench coll --methods gpustripe --sizes 1M,16M,256M --gpus 4 --iters 1 --trials 1 --warmup 0 \
  --no-write 2>&1 | grep -E "^\[|coll" | grep -v "scratch" | sort -u | head -40 || true

gpustripe bench coll --sizes 1M:1G --gpus 2,4 --iters 10 --trials 3 --warmup 2 --timeout 400 --out "$OUT/coll"

# Tuning data for the automatic host share (text only, in this step's log).
gpustripe bench coll --methods gpustripe --ops alltoall,allgather --sizes 64M,256M,1G --gpus 4 \
  --host-shares 0,0.02,0.04,0.06,0.08,0.10 --iters 5 --trials 3 --warmup 2 --no-write | grep -A12 "busbw_gbps per"
echo "50-coll: ok"
