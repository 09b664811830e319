#!/usr/bin/env bash
# run_kill.sh <limit_s> <mpirun args...>: the job (tests/mpi/mpi_kill.c) must end
# non-zero (a rank was killed) before <limit_s>; a hang (timeout's 124) is the
# failure. mpirun exits 137 itself when a rank died of SIGKILL, and may kill the
# waiting ranks before they report: the interposer's own detection is asserted
# deterministically by the fork-based tests (test_p2p_host, test_ipc_channel).
limit=$1; shift
t0=$(date +%s)
out=$(timeout "$limit" "$@" 2>&1)
rc=$?
echo "$out"
echo "mpi_kill: exit $rc after $(( $(date +%s) - t0 )) s"
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then
  echo "mpi_kill: ended in time"
  grep -q "GPUSTRIPE_ERR_PEER_FAILED" <<<"$out" && echo "mpi_kill: the interposer reported the dead peer"
  exit 0
fi
exit 1
