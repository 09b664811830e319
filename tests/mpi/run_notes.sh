#!/usr/bin/env bash
# run_notes.sh <ranks> <mpirun args...>: runs an MPI test program (GPUSTRIPE_LOG_LEVEL=info
# among the args) and passes when its own check passed and every note below -- a collective
# on device buffers that takes the slow way through host memory, and why -- appears exactly
# once per rank, however often the program makes such calls.
ranks=$1; shift
out=$("$@" 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || { echo "run_notes: the program failed ($rc)"; exit 1; }
bad=0
for note in "MPI_Allreduce on device buffers runs through host memory, slowly: a user-defined op" \
            "MPI_Bcast on device buffers runs through host memory, slowly: a datatype with holes"; do
  n=$(grep -cF "$note" <<<"$out")
  echo "run_notes: '$note': $n time(s), expected $ranks"
  [ "$n" -eq "$ranks" ] || bad=1
done
[ "$bad" -eq 0 ] && echo "run_notes: every note once per rank"
exit "$bad"
