#!/usr/bin/env bash
# gpu-check step: the detected node through `gpustripe topo` (text, JSON, picture),
# with NVML's view beside it for comparison. Writes under $OUT:
#   topo.txt  topo.json  topo-detected.png  topo-detected.svg
set -euo pipefail
: "${OUT:?run from scripts/gpu-check.sh (OUT unset)}"
export GPUSTRIPE_LOG_LEVEL=${GPUSTRIPE_LOG_LEVEL:-info} GPUSTRIPE_LOG_SUBSYS=${GPUSTRIPE_LOG_SUBSYS:-topology}
unset GPUSTRIPE_TOPOLOGY  # the detected node, not a file

gpustripe topo | tee "$OUT/topo.txt"
gpustripe topo --json > "$OUT/topo.json"
gpustripe topo --draw "$OUT/topo-detected.png" > /dev/null
gpustripe topo --draw "$OUT/topo-detected.svg" > /dev/null
# The JSON must load back as a topology file.
gpustripe topo --topology "$OUT/topo.json" > /dev/null
echo "topo.json loads back: ok"
nvidia-smi nvlink -s -i 0 2>/dev/null | head -20 || true
nvidia-smi topo -m 2>/dev/null || true
if grep -q "no GPU visible" "$OUT/topo.txt"; then
  echo "FAIL: gpustripe topo did not detect the GPUs"; exit 1
fi
echo "05-topo: ok"
