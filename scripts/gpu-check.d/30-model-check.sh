#!/usr/bin/env bash
# gpu-check step: the model's accuracy on this node with the profile of 10-calibrate.sh:
# predicted vs measured over 1 MB-1 GB x {direct, direct+host, direct+GPU staged, all},
# the model's plan vs an exhaustive search at 16 MB, 256 MB and 1 GB, and the concurrent
# cases (a pair both ways, rings of 2 and 4 GPUs). Writes the results JSON + PNG under
# $OUT (copy them to bench/results/ to commit), plus the predicted sweep of `gpustripe
# simulate` on the detected node. MODEL_CHECK_ARGS adds arguments (e.g. "--sets direct
# --sizes 16M --exhaustive-sizes none": the concurrent cases and little else).
set -euo pipefail
: "${OUT:?run from scripts/gpu-check.sh (OUT unset)}"
unset GPUSTRIPE_TOPOLOGY
profile="$OUT/profile.json"
if [ ! -f "$profile" ]; then
  echo "no $profile (run the 10-calibrate step first): checking the nominal figures"
  profile=""
fi
export GPUSTRIPE_PROFILE="$profile"
gpustripe model-check --out "$OUT" ${MODEL_CHECK_ARGS:-} | tee "$OUT/model-check.txt"
gpustripe simulate --out "$OUT" | tee "$OUT/simulate.txt"
echo "30-model-check: ok"
