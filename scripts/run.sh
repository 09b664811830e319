#!/usr/bin/env bash
# The main job: installs gpustripe and shows what it does on this machine: the node
# (real GPUs, or the emulated default node where there are none) and a benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== installing gpustripe (pip, builds the C++ core)"
python3 -m pip install -q --no-build-isolation .
gpustripe topo
# How a large transfer is split on this node (calibrated figures where `gpustripe
# calibrate` has run, else the topology's nominal ones, as it says).
gpustripe plan --src 0 --dst 1 --size 256M
# Results of this run stay out of bench/results/, which holds only committed GPU runs.
gpustripe bench p2p --quick --out build/main-job
