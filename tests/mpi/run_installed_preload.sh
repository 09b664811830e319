#!/usr/bin/env bash
# The interposer as a user installs it runs an MPI program with nothing but LD_PRELOAD (no
# LD_LIBRARY_PATH): libgpustripe_mpi.so must find libgpustripe.so.0 beside it by itself
# (RUNPATH $ORIGIN). Two layouts: `cmake --install` (both in the lib directory) and the wheel's
# (both in the package folder, plain files: a wheel holds no symlinks).
# Usage: run_installed_preload.sh <build dir> <program> <mpirun and its arguments...>
set -euo pipefail
build=$1 prog=$2
shift 2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
installed=$(dirname "$(find "$prefix" -name libgpustripe_mpi.so -print -quit)")
if ! readelf -d "$installed/libgpustripe_mpi.so" | grep -E 'R(UN)?PATH.*\$ORIGIN'; then
  echo "installed libgpustripe_mpi.so has no RUNPATH \$ORIGIN:"; readelf -d "$installed/libgpustripe_mpi.so"; exit 1
fi
wheel=$prefix/wheel/gpustripe
mkdir -p "$wheel"
cp -L "$installed/libgpustripe_mpi.so" "$installed/libgpustripe.so.0" "$wheel/"
for dir in "$installed" "$wheel"; do
  echo "== LD_PRELOAD=$dir/libgpustripe_mpi.so"
  env -u LD_LIBRARY_PATH timeout 120 "$@" -x LD_PRELOAD="$dir/libgpustripe_mpi.so" "$prog"
done
echo "installed interposer: both layouts passed"
