#!/usr/bin/env bash
# gpu-check step: calibrates the model on this node (progress on stderr) and writes
#   $OUT/profile.json       the profile (also left in the user's cache, so the later
#                           steps' library calls plan with measured figures)
#   $OUT/calibrate.txt      its summary, and the plans it gives for 0->1 at a few sizes
set -euo pipefail
: "${OUT:?run from scripts/gpu-check.sh (OUT unset)}"
unset GPUSTRIPE_PROFILE GPUSTRIPE_TOPOLOGY
export GPUSTRIPE_LOG_LEVEL=${GPUSTRIPE_LOG_LEVEL:-info} GPUSTRIPE_LOG_SUBSYS=${GPUSTRIPE_LOG_SUBSYS:-model}

t0=$(date +%s)
gpustripe calibrate | tee "$OUT/calibrate.txt"
echo "calibration took $(( $(date +%s) - t0 ))s (target: under a minute on 4 GPUs)" | tee -a "$OUT/calibrate.txt"
cached=$(python3 -c "import gpustripe; print(gpustripe.default_profile_path())")
cp "$cached" "$OUT/profile.json"
for size in 4M 16M 64M 256M 1G; do
  gpustripe plan --src 0 --dst 1 --size $size --profile "$OUT/profile.json" | tee -a "$OUT/calibrate.txt"
done
grep -q "backend cuda" "$OUT/calibrate.txt" || { echo "FAIL: calibration did not run on the CUDA backend"; exit 1; }
echo "10-calibrate: ok"
