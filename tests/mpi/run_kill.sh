#!/usr/bin/env bash
# run_kill.sh <limit_s> <survivors> <mpirun args...>: runs tests/mpi/mpi_kill.c (under
# mpirun --enable-recovery, so the job outlives the killed rank). Passes when each of
# the <survivors> ranks reported the dead peer in time (its "dead peer reported in
# time" line) and the job ended before <limit_s>; a hang (timeout's 124) fails.
limit=$1; survivors=$2; shift 2
t0=$(date +%s)
out=$(timeout "$limit" "$@" 2>&1)
rc=$?
echo "$out"
reported=$(grep -c "mpi_kill: dead peer reported in time" <<<"$out")
echo "mpi_kill: exit $rc after $(( $(date +%s) - t0 )) s; $reported of $survivors survivors reported the dead peer"
if [ "$rc" -ne 124 ] && [ "$reported" -eq "$survivors" ]; then
  echo "mpi_kill: ended in time"
  exit 0
fi
exit 1
