// A phase trace of p2p messages, for finding where a message's time goes across
// processes (the MPI interposer against native p2p). Off unless
// GPUSTRIPE_P2P_TRACE names a directory; then every phase of every message is
// stamped (CLOCK_MONOTONIC, comparable between the processes of a node) in memory and
// written to <dir>/p2p-trace-<pid>.txt when the endpoint goes away, one line per
// event: "ns rank phase sender send_id recv_id bytes". A message is keyed by
// (sender, send_id) in both processes' files; bench/mpi/p2p_trace_summary.py reads them.
#pragma once
#include <cstdint>

namespace gpustripe::p2p {

bool trace_on();
// Stamps one event (nothing when off). `phase` must be a string literal.
void trace(const char* phase, int sender, uint64_t send_id, uint64_t recv_id, uint64_t bytes);
// Writes what was stamped by this process (rank `rank`) and clears it.
void trace_write(int rank);

}  // namespace gpustripe::p2p
