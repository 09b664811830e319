// A phase trace of p2p messages and of the MPI interposer's collectives, for finding where a
// message's or a call's time goes across processes (the MPI interposer against native p2p and
// the native collectives). Off unless
// GPUSTRIPE_P2P_TRACE names a directory; then every phase of every message is
// stamped (CLOCK_MONOTONIC, comparable between the processes of a node) in memory and
// written to <dir>/p2p-trace-<pid>.txt when the endpoint goes away, one line per
// event: "ns rank phase sender send_id recv_id bytes". A message is keyed by
// (sender, send_id) in both processes' files; bench/mpi/p2p_trace_summary.py reads them.
// A collective's phases (mpi/coll_team.cpp, "coll_*") are keyed by (rank, call number, form),
// the same call number on every rank; bench/mpi/coll_trace_summary.py reads them.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>

namespace gpustripe::p2p {

namespace detail {
// GPUSTRIPE_P2P_TRACE set: -1 not read yet (read at the first stamp, not at start-up, when the
// settings of libraries loaded later are not registered yet), 0 no, 1 yes.
extern std::atomic<int8_t> g_trace_state;
bool trace_read_setting();
void trace_now(const char* phase, int sender, uint64_t send_id, uint64_t recv_id, uint64_t bytes);
}  // namespace detail

// Inline, so that a stamp costs an untraced run one load: a window-1 message passes some thirty.
inline bool trace_on() {
  const int8_t s = detail::g_trace_state.load(std::memory_order_relaxed);
  return s > 0 || (s < 0 && detail::trace_read_setting());
}
// Stamps one event (nothing when off). `phase` must be a string literal.
inline void trace(const char* phase, int sender, uint64_t send_id, uint64_t recv_id, uint64_t bytes) {
  if (trace_on()) detail::trace_now(phase, sender, send_id, recv_id, bytes);
}
// The same, stamped at `t` (a time the caller took when the phase happened).
void trace_at(std::chrono::steady_clock::time_point t, const char* phase, int sender, uint64_t send_id,
              uint64_t recv_id, uint64_t bytes);
// Writes what was stamped by this process (rank `rank`) and clears it.
void trace_write(int rank);

}  // namespace gpustripe::p2p
