#!/usr/bin/env bash
# GPU step of scripts/gpu-check.sh: the torch.distributed backend gpustripe (docs/torch.md), 2 GPUs.
#   pytest test_node_team.py, test_torch_backend.py  the store-met team on the GPUs; every op through
#                                                    torchrun against the same call on NCCL
#   gpustripe bench torch   busbw per op and size, backend gpustripe vs nccl          -> $OUT/torch
#   examples/train_ddp.py   a GPT-2-style model (DDP, then FSDP), nccl and gpustripe steps in turn: losses and step
#                           times, the backend's trace (its calibration's choices), and a second nccl copy's
#                           step time (--noise: the run's own spread); then the communication-bound step (the
#                           wide model in bf16, DDP, plain SGD)
# BENCH_TORCH_ARGS replaces the benchmark's sizes and repetitions (add --trace: where a native call's
# time goes); TRAIN_ARGS the training's (the first two runs), WIDE_ARGS the communication-bound one's.
# Needs about 10 minutes: run with STEP_TIMEOUT=900.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export GPUSTRIPE_TIMEOUT=${GPUSTRIPE_TIMEOUT:-60}
mkdir -p "$OUT/torch"
rc=0
echo "== backend tests"
timeout 420 python3 -m pytest -q -rs tests/python/test_node_team.py tests/python/test_torch_backend.py \
  > "$OUT/torch/pytest.log" 2>&1 || rc=1
tail -15 "$OUT/torch/pytest.log"
echo "== gpustripe bench torch"
# shellcheck disable=SC2086
timeout 600 python3 -m gpustripe.cli bench torch --gpus 2 --out "$OUT/torch" \
  ${BENCH_TORCH_ARGS:---sizes 1M,4M,16M,64M,256M,1G --iters 10 --trials 5} || rc=1
echo "== examples/train_ddp.py"
# shellcheck disable=SC2086
timeout 600 python3 -m torch.distributed.run --nproc-per-node 2 examples/train_ddp.py \
  ${TRAIN_ARGS:---model gpt2 --steps 50 --noise} > "$OUT/torch/train.log" 2>&1 || rc=1
echo "== examples/train_ddp.py --wrap fsdp"
# shellcheck disable=SC2086
timeout 600 python3 -m torch.distributed.run --nproc-per-node 2 examples/train_ddp.py --wrap fsdp \
  ${TRAIN_ARGS:---model gpt2 --steps 50 --noise} > "$OUT/torch/train-fsdp.log" 2>&1 || rc=1
echo "== examples/train_ddp.py, communication-bound (docs/torch.md)"
# shellcheck disable=SC2086
timeout 600 python3 -m torch.distributed.run --nproc-per-node 2 examples/train_ddp.py \
  ${WIDE_ARGS:---model gpt2 --layers 2 --embd 4096 --heads 32 --batch 1 --seq 128 --precision bf16 --optimizer sgd --steps 50 --noise} \
  > "$OUT/torch/train-wide.log" 2>&1 || rc=1
grep -hE "^(TRAIN|gpustripe.torch)|Error" "$OUT/torch/train.log" "$OUT/torch/train-fsdp.log" "$OUT/torch/train-wide.log" \
  | cut -c1-900
exit $rc
