#!/usr/bin/env bash
# The main job: installs gpustripe and shows what it does on this machine: the node
# (real GPUs, or the emulated default node where there are none) and a benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== installing gpustripe (pip, builds the C++ core)"
python3 -m pip install -q --no-build-isolation .
gpustripe topo
if gpustripe --help | grep -q " bench"; then
  gpustripe bench p2p --quick
fi
