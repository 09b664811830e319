#!/usr/bin/env bash
# Copies the build-only dependencies that the GPU machine lacks (it has no network)
# into .deps/, which the device tool carries: nlohmann/json headers and GoogleTest
# sources, both from this machine's Debian packages. CMake falls back to them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
mkdir -p .deps/include
cp -r /usr/include/nlohmann .deps/include/
rm -rf .deps/googletest && cp -r /usr/src/googletest .deps/googletest
grep -q '^/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude
du -sh .deps
