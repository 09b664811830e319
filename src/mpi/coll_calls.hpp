// The schedule side of each collective, as both callers of CollTeam fill a CollCall: the MPI
// interposer (interpose_coll.cpp, from an MPI call's buffers and datatypes) and NodeTeam (raw
// device pointers). Given this rank's buffers as the coll layer takes them (bytes, or elements
// of a kernel type), each sets the call's sizes, buffers, shape and the build of its Program;
// eligibility and the device are the caller's.
#pragma once
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "coll/types.hpp"
#include "mpi/coll_team.hpp"
#include "p2p/mover.hpp"

namespace gpustripe::mpi {

// The GPU all `bufs` live on, their allocations appended to c.located (once per allocation: a
// buffer inside one located already -- by this call, or by its caller before, as a nonblocking
// start does -- is not asked about again); -1 when one of them is not device memory or they lie
// on different GPUs. `locate` is the pointer query (the MPI runtime's counts its queries).
int device_of(const std::function<p2p::MemLoc(const void*)>& locate, CollCall& c,
              std::initializer_list<const void*> bufs);
int device_of(p2p::Mover& mover, CollCall& c, std::initializer_list<const void*> bufs);

// CollCall::shape: the collective and what its build closure captures.
std::string shape_of(const char* name, std::initializer_list<long long> captured);
// The shape of a v form: its name, the ranks, this rank, the root, and one side's blocks
// (bytes and byte offsets per rank).
std::string v_shape(const char* name, int n, int me, int root, const std::vector<size_t>& bytes,
                    const std::vector<size_t>& at);

// The builders take the send pointers as const.
std::vector<const char*> in(const std::vector<char*>& v);

// recv = op over ranks of send (count elements of dt; send == recv: in place).
void allreduce_call(CollCall& c, const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op);
// recv = op over ranks of block `rank` of send (n blocks of count elements); in place where
// recv is this rank's block of send.
void reduce_scatter_call(CollCall& c, int n, const void* send, void* recv, size_t count, coll::DataType dt,
                         coll::RedOp op);
// recv (at the root only: null elsewhere) = op over ranks of send.
void reduce_call(CollCall& c, bool is_root, const void* send, void* recv, size_t count, coll::DataType dt,
                 coll::RedOp op, int root);
// Every rank's `block` bytes into recv in rank order (send == recv + rank * block: in place).
void allgather_call(CollCall& c, int n, const void* send, void* recv, size_t block);
// Block j of send to rank j, block i of recv from rank i (`block` bytes each).
void alltoall_call(CollCall& c, int n, const void* send, void* recv, size_t block);
// Rank j's block of send (send_at[j], send_len[j] bytes) to rank j; rank i's block into recv at
// recv_at[i] (recv_len[i] bytes). Each rank's copy engines pull the blocks it receives: the
// senders' layouts travel with the entry exchange (CollCall::send_at), and where some sender's
// and receiver's sizes differ every rank declines the call. At most CollCall::kMaxBlocks ranks;
// send and recv must not overlap (the caller checks both).
void alltoallv_call(CollCall& c, int n, int me, const void* send, const std::vector<size_t>& send_at,
                    const std::vector<size_t>& send_len, size_t send_span, void* recv,
                    const std::vector<size_t>& recv_at, const std::vector<size_t>& recv_len, size_t recv_span);
// The root's `bytes` at buf into every rank's buf.
void bcast_call(CollCall& c, void* buf, size_t bytes, int root);

}  // namespace gpustripe::mpi
