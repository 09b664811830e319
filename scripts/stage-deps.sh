#!/usr/bin/env bash
# Copies the build-only dependencies that the GPU machine lacks (it has no network)
# into .deps/, which the device tool carries: nlohmann/json headers and GoogleTest
# sources, both from this machine's Debian packages. CMake falls back to them.
# Also UCX with CUDA (the libucx-cu13 wheel, ~6 MB once unpacked: headers, the
# core libraries stripped of debug info, the cuda/cma modules) for the MPI
# benchmark's `ucx` method (bench/mpi/ucx) and its `mpi_cuda_aware` baseline: Open
# MPI's mca_pml_ucx links libucp/libucs (and, through them, libuct/libucm), found here
# first on LD_LIBRARY_PATH, and UCX loads the cuda/cma modules from UCX_MODULE_DIR;
# skipped, with a note, without network.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
mkdir -p .deps/include
cp -r /usr/include/nlohmann .deps/include/
rm -rf .deps/googletest && cp -r /usr/src/googletest .deps/googletest
stage_ucx() {
  [ -f .deps/ucx/libucx/include/ucp/api/ucp.h ] && return 0
  local tmp; tmp=$(mktemp -d)
  if ! python3 -m pip download -q libucx-cu13 --no-deps -d "$tmp" >/dev/null 2>&1; then
    echo "stage-deps: libucx-cu13 not downloadable: the MPI benchmark will have no ucx rows"
    rm -rf "$tmp"; return 0
  fi
  rm -rf .deps/ucx && mkdir -p .deps/ucx
  # The wheel's layout is kept: libucm_cuda finds its CUDA runtime at $ORIGIN/../../../libucx_cu13.libs.
  (cd .deps/ucx && unzip -q "$tmp"/libucx_cu13-*.whl 'libucx/include/*' 'libucx/lib/libucp.so.0' \
     'libucx/lib/libuct.so.0' 'libucx/lib/libucs.so.0' 'libucx/lib/libucm.so.0' 'libucx/lib/ucx/libuct_cuda.so.0' \
     'libucx/lib/ucx/libucm_cuda.so.0' 'libucx/lib/ucx/libuct_cma.so.0' 'libucx/bin/ucx_info' \
     'libucx_cu13.libs/libcudart-*' && find . -name '*.so*' -o -name ucx_info | xargs strip --strip-debug)
  rm -rf "$tmp"
}
stage_ucx
[ ! -d .git ] || grep -q '^/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude
du -sh .deps
