#!/usr/bin/env bash
# Installs what gpustripe needs to build and test, on a fresh Debian machine (root)
# or on the GPU machine (no network: it has the Python packages; headers it lacks
# arrive under .deps/, see scripts/stage-deps.sh). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
dpkg -s nlohmann-json3-dev >/dev/null 2>&1 || [ -f .deps/include/nlohmann/json.hpp ] || need_apt+=(nlohmann-json3-dev)
dpkg -s libgtest-dev >/dev/null 2>&1 || [ -d .deps/googletest ] || need_apt+=(libgtest-dev)
command -v mpicc >/dev/null 2>&1 || need_apt+=(openmpi-bin libopenmpi-dev)
command -v ninja >/dev/null 2>&1 || need_apt+=(ninja-build)
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

py_missing=$(python3 - <<'PY'
import importlib.util
mods = {"nanobind": "nanobind", "scikit_build_core": "scikit-build-core", "pytest": "pytest",
        "numpy": "numpy", "matplotlib": "matplotlib",
        # built against the system MPI above: the mpi4py programs through the interposer are tests
        "mpi4py": "mpi4py"}
print(" ".join(pkg for mod, pkg in mods.items() if importlib.util.find_spec(mod) is None))
PY
)
if [ -n "$py_missing" ]; then
  echo "setup: installing Python packages: $py_missing"
  python3 -m pip install -q $py_missing
fi
echo "setup: ok"
