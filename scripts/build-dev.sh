#!/usr/bin/env bash
# Configures and builds the tree in build/dev (tests and the Python package included).
# Extra arguments go to cmake's configure step, e.g. -DGPUSTRIPE_WITH_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${GPUSTRIPE_BUILD_DIR:-build/dev}
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$BUILD" -G Ninja "${launcher[@]}" -DGPUSTRIPE_BUILD_TESTS=ON -DGPUSTRIPE_BUILD_PYTHON=ON "$@" >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
