#!/usr/bin/env bash
# Where an interposed collective's time goes, blocking against nonblocking: runs mpi_coll_bench
# through the interposer under the phase trace (GPUSTRIPE_P2P_TRACE), once with the blocking
# calls and once with the nonblocking ones, and prints bench/mpi/coll_trace_summary.py's table (by rank too)
# of each (the traces stay in OUT/blocking and OUT/nonblocking).
#
#   bench/mpi/coll_trace.sh BUILD_DIR OUT_DIR [RANKS [mpi_coll_bench args...]]
#   e.g. bench/mpi/coll_trace.sh build/gpu /tmp/trace 2 --ops allreduce --min 1M --max 16M --trials 5
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,8p' "$0"; exit 2; }
build=$(cd "$1" && pwd)
out=$2
ranks=${3:-2}
shift $(( $# >= 3 ? 3 : 2 ))
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--ops allreduce --min 1M --max 16M --trials 5)
here=$(cd "$(dirname "$0")" && pwd)
for form in blocking nonblocking; do
  dir=$out/$form
  rm -rf "$dir"
  mkdir -p "$dir"
  extra=()
  [ $form = nonblocking ] && extra=(--nonblocking)
  env_args=(-x "LD_PRELOAD=$build/src/mpi/libgpustripe_mpi.so" -x "GPUSTRIPE_P2P_TRACE=$dir")
  for v in GPUSTRIPE_TOPOLOGY_DIR GPUSTRIPE_TOPOLOGY NCCL_NVLS_ENABLE CUDA_VISIBLE_DEVICES; do
    [ -n "${!v:-}" ] && env_args+=(-x "$v")
  done
  mpirun --allow-run-as-root --oversubscribe --report-bindings -np "$ranks" "${env_args[@]}" "$build/bench/mpi/mpi_coll_bench" \
    "${args[@]}" "${extra[@]}" > "$dir.rows"
  grep '^ROW' "$dir.rows" || true
  python3 "$here/coll_trace_summary.py" "$dir" --label "$form" --by-rank
done
