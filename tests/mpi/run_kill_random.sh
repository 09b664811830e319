#!/usr/bin/env bash
# run_kill_random.sh <survivors> <op> <sizes> <mpirun args...>: runs tests/mpi/mpi_kill_random.c
# once per size (bytes, comma-separated), appending "<op> <size> <seed>" to the command, each
# run bounded by 60 s. A run passes when each of the <survivors> ranks reported the dead peer
# in time; a run where the program skipped (no GPU where one is required) skips the test (77).
# The seed (GPUSTRIPE_TEST_KILL_SEED, else the clock) is printed, so a failing run can be
# replayed; the kill point also depends on timing.
survivors=$1; op=$2; sizes=$3; shift 3
seed=${GPUSTRIPE_TEST_KILL_SEED:-$(date +%s)}
failed=0
for size in ${sizes//,/ }; do
  t0=$(date +%s)
  out=$(timeout 60 "$@" "$op" "$size" "$seed" 2>&1)
  rc=$?
  echo "$out"
  if grep -q "mpi_kill_random: no GPU, skipped" <<<"$out"; then
    echo "mpi_kill_random: skipped"
    exit 77
  fi
  reported=$(grep -c "mpi_kill: dead peer reported in time" <<<"$out")
  echo "mpi_kill_random: $op of $size bytes, seed $seed: exit $rc after $(( $(date +%s) - t0 )) s; $reported of" \
       "$survivors survivors reported the dead peer"
  if [ "$rc" -eq 124 ] || [ "$reported" -ne "$survivors" ]; then failed=1; fi
  seed=$((seed + 1))
done
if [ "$failed" -eq 0 ]; then
  echo "mpi_kill: ended in time"
  exit 0
fi
exit 1
