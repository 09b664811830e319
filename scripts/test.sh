#!/usr/bin/env bash
# The test command: installs what is needed, builds, and runs every test (C++ and
# Python). GPU tests skip, and are counted as skipped, where no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD=${GPUSTRIPE_BUILD_DIR:-build/dev}
GPUSTRIPE_BUILD_DIR=$BUILD bash scripts/build-dev.sh "$@"

echo "== Layers (no include climbs)"
python3 scripts/check-layers.py

echo "== C++ tests (ctest)"
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" | tee "$BUILD/ctest.log"
# ctest's own summary lists each test that did not run once, as "  N - name (Skipped)"; the
# per-test progress lines name each a second time, so they are not counted.
skipped=$(grep -cE '^[[:space:]]+[0-9]+ - .* \(Skipped\)$' "$BUILD/ctest.log" || true)
[ "$skipped" -gt 0 ] && echo "NOTE: $skipped C++ tests skipped (GPU tests without a GPU: run scripts/gpu-check.sh on a GPU machine)"

echo "== Python tests (pytest)"
export PYTHONPATH="$PWD/$BUILD/python-dev${PYTHONPATH:+:$PYTHONPATH}"
export GPUSTRIPE_BUILD_DIR="$PWD/$BUILD"
python3 -m pytest -q -rs tests/python
