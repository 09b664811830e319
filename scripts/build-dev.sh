#!/usr/bin/env bash
# Configures and builds the tree in build/dev (tests and the Python package included).
# Extra arguments go to cmake's configure step, e.g. -DGPUSTRIPE_WITH_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${GPUSTRIPE_BUILD_DIR:-build/dev}
cmake -S . -B "$BUILD" -G Ninja -DGPUSTRIPE_BUILD_TESTS=ON -DGPUSTRIPE_BUILD_PYTHON=ON "$@" >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
