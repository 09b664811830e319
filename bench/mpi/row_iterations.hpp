// How many timed iterations one row of an MPI benchmark runs, agreed by every rank.
#pragma once
#include <mpi.h>

#include <algorithm>

namespace bench {

// The timed iterations of a row, the same on every rank (their messages or epochs pair up):
// `by_size`, raised to last at least `min_s` seconds and cut to last at most `max_s` (0: no
// bound) at `per_iter_s` seconds per iteration (this rank's rate from its untimed iterations; 0:
// unknown, `by_size` stands), never below `least` when cut nor above `most` when raised. The
// slowest rank's rate decides (the smallest count).
inline int agreed_iterations(int by_size, double per_iter_s, double min_s, double max_s, int least, int most) {
  double mine = by_size;
  if (per_iter_s > 0) {
    if (min_s > 0) mine = std::max(mine, std::min<double>(most, min_s / per_iter_s));
    if (max_s > 0) mine = std::min(mine, std::max<double>(least, max_s / per_iter_s));
  }
  int count = static_cast<int>(mine);
  MPI_Allreduce(MPI_IN_PLACE, &count, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return count;
}

}  // namespace bench
