#!/usr/bin/env bash
# gpu-check step: the model's accuracy on this node with the profile of 10-calibrate.sh:
# predicted vs measured over 1 MB-1 GB x {direct, direct+host, direct+GPU staged, all},
# and the model's plan vs an exhaustive search at 16 MB, 256 MB and 1 GB. Writes the
# results JSON + PNG under $OUT (copy them to bench/results/ to commit), plus the
# predicted sweep of `gpustripe simulate` on the detected node.
set -euo pipefail
: "${OUT:?run from scripts/gpu-check.sh (OUT unset)}"
unset GPUSTRIPE_TOPOLOGY
profile="$OUT/profile.json"
if [ ! -f "$profile" ]; then
  echo "no $profile (run the 10-calibrate step first): checking the nominal figures"
  profile=""
fi
export GPUSTRIPE_PROFILE="$profile"
gpustripe model-check --out "$OUT" | tee "$OUT/model-check.txt"
gpustripe simulate --out "$OUT" | tee "$OUT/simulate.txt"
echo "30-model-check: ok"
